"""Single-batch property inference in two-party synchronized SGD, in one process.

Seed 000 Ch. 7.1.4 (Alg. 7) on the embedding models of Ch. 7.2.1: the
training records are split evenly between a target and an adversary; in
even rounds the target's batch is drawn from its records with the property,
in odd rounds from those without (``m = 2``, Ch. 7.2.3). The server steps
with :func:`fedleak.federated.sgd_step` (the arithmetic of
:class:`fedleak.strategies.SyncSGD`); every round the adversary derives the
target's gradient from the change of the model minus its own contribution
(its scale estimated with
:func:`fedleak.attacks.membership.embedding.contribution_scale`), computes
gradients on auxiliary batches with and without the property from its own
records, and in the end the batch property classifier scores the target's
observed updates (:data:`FEATURES`).

``fedleak bench defenses`` runs it with the target defended
(:class:`fedleak.defenses.ClientDefenses`, seed 000 Ch. 7.3).
"""

from __future__ import annotations

import numpy as np
import torch
from fedleak.attacks.membership.embedding import contribution_scale
from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    inputs_and_model,
    server_step,
)

from fedleak.data.text import TextDataset
from fedleak.defenses import EMBEDDING_KEY
from fedleak.errors import ConfigError, DataError
from fedleak.training import batch_gradient, set_arrays

from .classifier import BatchPropertyClassifier, gradient_features, single_batch_auc

__all__ = ["FEATURES", "property_features", "simulate_property"]

#: Feature sets of the batch property classifier (Ch. 7.1.4):
#: ``"embedding"`` -- the seed's attack on embedding-layer gradients: the
#: embedding update itself, globally max-pooled per word row (so a word's
#: feature is the size of its update, 0 if absent), logistic regression;
#: ``"max"`` -- the seed's features for every other attack: global max pooling
#: of every layer's observed update (one feature per word row, per filter, per
#: unit), random forest of 50 trees;
#: ``"bow"`` -- the bag of words of the embedding update (1.0 for every row
#: that moved), logistic regression. The bag of words carries no magnitude:
#: under record-level DP noise every row moves, so it is constant and the AUC
#: is 0.5 by construction, and sharing a fraction of the update changes it
#: only once whole rows drop out.
FEATURES = ("embedding", "max", "bow")


def _property_pools(
    has_property: np.ndarray, split: np.random.SeedSequence
) -> dict[tuple[str, bool], np.ndarray]:
    """Each party's record indices with and without the property."""
    order = np.random.default_rng(split).permutation(has_property.size)
    half = order.size // 2
    pools = {}
    for role, idx in (("target", order[:half]), ("adversary", order[half:])):
        pools[role, True] = idx[has_property[idx]]
        pools[role, False] = idx[~has_property[idx]]
    return pools


def property_features(update: dict[str, np.ndarray], kind: str) -> np.ndarray:
    """Return the classifier's features of one (observed or auxiliary) update.

    ``kind`` is one of :data:`FEATURES`; ``update`` holds the embedding
    matrix's update under :data:`fedleak.defenses.EMBEDDING_KEY`.
    """
    if kind == "max":
        every: np.ndarray = gradient_features(update, "max")
        return every
    pooled: np.ndarray = gradient_features(
        {EMBEDDING_KEY: np.abs(update[EMBEDDING_KEY])}
        if kind == "embedding"
        else update,
        "max" if kind == "embedding" else "bow",
        layers=[EMBEDDING_KEY],
    )
    return pooled


def _others_update(
    params: dict[str, np.ndarray],
    new: dict[str, np.ndarray],
    own: dict[str, np.ndarray],
    learning_rate: float,
) -> dict[str, np.ndarray]:
    """Read the others' summed gradient from the model change minus one's own.

    The scale of one's own term in the change is estimated from the
    embedding matrix (:func:`contribution_scale`); the rest, divided by
    ``-learning_rate``, is the others' summed gradient.
    """
    delta = {k: new[k].astype(np.float64) - params[k] for k in params}
    scale = contribution_scale(delta[EMBEDDING_KEY], own[EMBEDDING_KEY])
    others = {k: delta[k] - scale * own[k] if k in own else delta[k] for k in delta}
    return {k: others[k] / -learning_rate for k in others}


def simulate_property(
    data: TextDataset,
    has_property: np.ndarray,
    setup: MembershipSetup,
    *,
    rounds: int,
    seed: int,
    aux_batches: int = 1,
    features: str = "bow",
    emulate_defenses: bool = False,
) -> float:
    """Single-batch property inference AUC in two-party synchronized SGD.

    Parameters
    ----------
    data : TextDataset
        Training records (split evenly between target and adversary).
    has_property : numpy.ndarray of bool
        Property of every training record.
    setup : MembershipSetup
        Model, batch size, server step and the target's defenses.
    rounds : int
        Rounds (even rounds: property batches of the target).
    seed : int
        Seeds the split, model, batches and noise.
    aux_batches : int, default=1
        Auxiliary batches of each kind the adversary differentiates per
        round (Alg. 7, lines 6-9): the training set of ``f_prop`` has
        ``2 * aux_batches * rounds`` examples.
    features : {"embedding", "max", "bow"}, default="bow"
        The classifier's features and model (:data:`FEATURES`).
    emulate_defenses : bool, default=False
        The adversary computes its auxiliary gradients with the target's
        defenses (its DP noise, top fraction, vocabulary, dropout), as it
        emulates the collaborative training it observes (Ch. 7.2.7); without
        it the classifier is trained on undefended gradients only.

    Returns
    -------
    float
        ROC AUC of the adversary's scores of the target's observed updates.

    Raises
    ------
    ConfigError
        If ``aux_batches < 1``, ``features`` is unknown, ``has_property``
        does not match the records or a property pool is smaller than a batch.
    DataError
        If the joint model diverges (a defense's noise can make it): the
        updates are then NaN and any score of them would be an artefact.
    """
    if features not in FEATURES:
        raise ConfigError(f"features must be one of {FEATURES}, got {features!r}")
    if aux_batches < 1:
        raise ConfigError(f"aux_batches must be >= 1, got {aux_batches}")
    if has_property.shape != (data.x_train.shape[0],):
        raise ConfigError("has_property needs one flag per training record")
    split, batches, noise, model_seed = np.random.SeedSequence([seed, 0x9909]).spawn(4)
    pools = _property_pools(has_property, split)
    size = setup.batch_size
    if min(p.size for p in pools.values()) < size:
        raise ConfigError(
            f"batch size {size} exceeds a property pool "
            f"({ {k: v.size for k, v in pools.items()} })"
        )
    rng = np.random.default_rng(batches)
    noise_rng = np.random.default_rng(noise)
    x_all, y_all, model, params = inputs_and_model(data, setup, model_seed)
    aux_x: list[np.ndarray] = []
    aux_y: list[int] = []
    observed: list[np.ndarray] = []
    truth: list[int] = []

    def pick(role: str, prop: bool) -> torch.Tensor:
        pool = pools[role, prop]
        return torch.from_numpy(np.sort(rng.choice(pool, size, replace=False)))

    for t in range(rounds):
        set_arrays(model, params)
        prop = t % 2 == 0
        tb = pick("target", prop)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(noise_rng.integers(2**62)))
            g_target = setup.defenses.gradient(
                model, x_all[tb], y_all[tb], seed=int(noise_rng.integers(2**62))
            )
            ab = pick("adversary", bool(rng.integers(2)))
            g_adv, _, _ = batch_gradient(model, x_all[ab], y_all[ab])
            for aux_prop in (True, False):
                for _ in range(aux_batches):
                    aux = pick("adversary", aux_prop)
                    if emulate_defenses:
                        g_aux = setup.defenses.gradient(
                            model,
                            x_all[aux],
                            y_all[aux],
                            seed=int(noise_rng.integers(2**62)),
                        )
                    else:
                        g_aux, _, _ = batch_gradient(model, x_all[aux], y_all[aux])
                    aux_x.append(property_features(g_aux, features))
                    aux_y.append(int(aux_prop))
        new = server_step(params, [g_target, g_adv], setup, noise_rng)
        if not all(np.isfinite(v).all() for v in new.values()):
            raise DataError(
                f"the joint model diverged in round {t + 1} (non-finite "
                "parameters): there is no update left to score"
            )
        observed.append(
            property_features(
                _others_update(params, new, g_adv, setup.learning_rate), features
            )
        )
        truth.append(int(prop))
        params = new
    kind = "random-forest" if features == "max" else "logistic"
    classifier = BatchPropertyClassifier(kind=kind, random_state=seed)
    classifier.fit(np.stack(aux_x), np.asarray(aux_y))
    scores = classifier.predict_proba(np.stack(observed))[:, 1]
    return float(single_batch_auc(np.asarray(truth), scores))
