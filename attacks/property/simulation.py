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

from collections.abc import Callable, Sequence

import numpy as np
import torch
from fedleak.attacks.membership.embedding import contribution_scale
from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    inputs_and_model,
    server_step,
)

from fedleak.data.text import TextDataset
from fedleak.defenses import EMBEDDING_KEY, SELECTION_WORD
from fedleak.errors import ConfigError, DataError
from fedleak.training import batch_gradient, set_arrays

from .classifier import BatchPropertyClassifier, gradient_features, single_batch_auc

__all__ = [
    "FEATURES",
    "property_features",
    "simulate_property",
    "simulate_property_attacks",
]

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
    ``-learning_rate``, is the others' summed gradient. Where noise on every
    row (record-level DP) leaves no row to fit and the estimate is not
    finite, the server's step ``-learning_rate`` is the scale: the adversary
    knows the rule of synchronized SGD. All in float64, so that a large
    estimate cannot overflow.
    """
    delta = {k: new[k].astype(np.float64) - params[k] for k in params}
    scale = contribution_scale(delta[EMBEDDING_KEY], own[EMBEDDING_KEY])
    if not np.isfinite(scale):
        scale = -learning_rate
    others = {
        k: delta[k] - scale * own[k].astype(np.float64) if k in own else delta[k]
        for k in delta
    }
    return {k: others[k] / -learning_rate for k in others}


def _check_property_arguments(
    data: TextDataset,
    has_property: np.ndarray,
    aux_batches: int,
    features: Sequence[str],
) -> None:
    """Refuse :func:`simulate_property`'s bad arguments (see its Raises)."""
    if isinstance(features, str) or not features:
        raise ConfigError(
            f"features must be a sequence of one or more of {FEATURES}, "
            f"got {features!r}"
        )
    for kind in features:
        if kind not in FEATURES:
            raise ConfigError(f"features must be one of {FEATURES}, got {kind!r}")
    if aux_batches < 1:
        raise ConfigError(f"aux_batches must be >= 1, got {aux_batches}")
    if has_property.shape != (data.x_train.shape[0],):
        raise ConfigError("has_property needs one flag per training record")


class _PropertyRounds:
    """The two parties' batches and gradients, round by round (Alg. 7).

    Batches come from ``batch_rng``; the target's DP noise, torch's seed in a
    round and the server's noise from ``noise_rng``; a random share
    selection's coordinates from ``selection_rng``. The auxiliary examples
    the adversary computes (lines 6-9 of Alg. 7) accumulate in
    :attr:`aux_x` (one list per feature set) and :attr:`aux_y`.
    """

    def __init__(
        self,
        inputs: tuple[torch.Tensor, torch.Tensor],
        model: torch.nn.Module,
        setup: MembershipSetup,
        pools: dict[tuple[str, bool], np.ndarray],
        rngs: tuple[np.random.Generator, np.random.Generator, np.random.Generator],
        *,
        aux_batches: int,
        features: Sequence[str],
        emulate_defenses: bool,
    ) -> None:
        self.x, self.y = inputs
        self.model = model
        self.setup = setup
        self.pools = pools
        self.batch_rng, self.noise_rng, self.selection_rng = rngs
        self.aux_batches = aux_batches
        self.features = tuple(features)
        self.emulate_defenses = emulate_defenses
        self.aux_x: dict[str, list[np.ndarray]] = {k: [] for k in self.features}
        self.aux_y: list[int] = []

    def _pick(self, role: str, prop: bool) -> torch.Tensor:
        """Draw a batch of ``role``'s records with (or without) the property."""
        pool = self.pools[role, prop]
        chosen = self.batch_rng.choice(pool, self.setup.batch_size, replace=False)
        return torch.from_numpy(np.sort(chosen))

    def _noise_seed(self) -> int:
        return int(self.noise_rng.integers(2**62))

    def gradients(
        self, prop: bool
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Return this round's target and adversary gradients; add auxiliary examples.

        The target's batch has the property iff ``prop``; it uploads its
        defended gradient. The adversary's own batch is a fair coin's.
        """
        tb = self._pick("target", prop)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self._noise_seed())
            g_target = self.setup.defenses.gradient(
                self.model,
                self.x[tb],
                self.y[tb],
                seed=self._noise_seed(),
                selection_seed=self.selection_rng,
            )
            ab = self._pick("adversary", bool(self.batch_rng.integers(2)))
            g_adv, _, _ = batch_gradient(self.model, self.x[ab], self.y[ab])
            self._auxiliary_examples()
        return g_target, g_adv

    def _auxiliary_examples(self) -> None:
        """Differentiate ``aux_batches`` adversary batches of each kind (lines 6-9)."""
        for aux_prop in (True, False):
            for _ in range(self.aux_batches):
                aux = self._pick("adversary", aux_prop)
                if self.emulate_defenses:
                    g_aux = self.setup.defenses.gradient(
                        self.model,
                        self.x[aux],
                        self.y[aux],
                        seed=self._noise_seed(),
                        selection_seed=self.selection_rng,
                    )
                else:
                    g_aux, _, _ = batch_gradient(self.model, self.x[aux], self.y[aux])
                for kind in self.features:
                    self.aux_x[kind].append(property_features(g_aux, kind))
                self.aux_y.append(int(aux_prop))

    def step(
        self,
        params: dict[str, np.ndarray],
        updates: list[dict[str, np.ndarray]],
        server_round: int,
    ) -> dict[str, np.ndarray]:
        """Step the joint model; refuse it once diverged (non-finite parameters)."""
        new: dict[str, np.ndarray] = server_step(
            params, updates, self.setup, self.noise_rng
        )
        if not all(np.isfinite(v).all() for v in new.values()):
            raise DataError(
                f"the joint model diverged in round {server_round} (non-finite "
                "parameters): there is no update left to score"
            )
        return new


def _property_auc(
    rounds: _PropertyRounds,
    features_kind: str,
    observed: list[np.ndarray],
    truth: list[int],
    seed: int,
) -> float:
    """Fit the batch property classifier on the auxiliary examples; score the rest."""
    kind = "random-forest" if features_kind == "max" else "logistic"
    features = np.stack(observed)
    if not np.isfinite(features).all():
        bad = int((~np.isfinite(features).all(axis=1)).sum())
        raise DataError(
            f"{bad} of {len(observed)} observed updates have non-finite features "
            "(the others' gradient could not be read from the model change)"
        )
    classifier = BatchPropertyClassifier(kind=kind, random_state=seed)
    classifier.fit(np.stack(rounds.aux_x[features_kind]), np.asarray(rounds.aux_y))
    scores = classifier.predict_proba(features)[:, 1]
    return float(single_batch_auc(np.asarray(truth), scores))


def simulate_property_attacks(
    data: TextDataset,
    has_property: np.ndarray,
    setup: MembershipSetup,
    *,
    rounds: int,
    seed: int,
    features: Sequence[str],
    aux_batches: int = 1,
    emulate_defenses: bool = False,
    after_round: Callable[[int, dict[str, np.ndarray]], None] | None = None,
) -> dict[str, float]:
    """Single-batch property inference AUCs of several classifiers on one run.

    Every classifier (:data:`FEATURES`) sees the same rounds: the same
    batches, the same observed updates and the same auxiliary gradients, so
    their AUCs differ by the features alone.

    Parameters
    ----------
    data, has_property : TextDataset, numpy.ndarray of bool
        Training records (split evenly between target and adversary) and
        the property of each.
    setup : MembershipSetup
        Model, batch size, server step and the target's defenses.
    rounds, seed : int
        Rounds (even rounds: property batches of the target); the seed of
        the split, model, batches and noise.
    features : sequence of {"embedding", "max", "bow"}
        The classifiers' features and models (:data:`FEATURES`), at least one.
    aux_batches : int, default=1
        Auxiliary batches of each kind the adversary differentiates per
        round (Alg. 7, lines 6-9): the training set of ``f_prop`` has
        ``2 * aux_batches * rounds`` examples.
    emulate_defenses : bool, default=False
        The adversary computes its auxiliary gradients with the target's
        defenses (its DP noise, top fraction, vocabulary, dropout), as it
        emulates the collaborative training it observes (Ch. 7.2.7); without
        it the classifier is trained on undefended gradients only.
    after_round : callable, optional
        Gets each round's number (from 1) and the parameters after it (e.g.
        a :func:`~fedleak.attacks.membership.simulation.accuracy_recorder`).

    Returns
    -------
    dict of str to float
        For each feature set, the ROC AUC of the adversary's scores of the
        target's observed updates.

    Raises
    ------
    ConfigError
        If ``aux_batches < 1``, ``features`` is empty or names an unknown
        set, ``has_property`` does not match the records or a property pool
        is smaller than a batch.
    DataError
        If the joint model diverges (a defense's noise can make it): the
        updates are then NaN and any score of them would be an artefact.
    """
    _check_property_arguments(data, has_property, aux_batches, features)
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
    run = _PropertyRounds(
        (x_all, y_all),
        model,
        setup,
        pools,
        (rng, noise_rng, np.random.default_rng([seed, SELECTION_WORD])),
        aux_batches=aux_batches,
        features=features,
        emulate_defenses=emulate_defenses,
    )
    observed: dict[str, list[np.ndarray]] = {k: [] for k in run.features}
    truth: list[int] = []
    for t in range(rounds):
        set_arrays(model, params)
        prop = t % 2 == 0
        g_target, g_adv = run.gradients(prop)
        new = run.step(params, [g_target, g_adv], t + 1)
        others = _others_update(params, new, g_adv, setup.learning_rate)
        for kind in run.features:
            observed[kind].append(property_features(others, kind))
        truth.append(int(prop))
        params = new
        if after_round is not None:
            after_round(t + 1, params)
    return {
        kind: _property_auc(run, kind, observed[kind], truth, seed)
        for kind in run.features
    }


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

    :func:`simulate_property_attacks` with one feature set; see it for the
    other parameters and the errors.

    Parameters
    ----------
    features : {"embedding", "max", "bow"}, default="bow"
        The classifier's features and model (:data:`FEATURES`).
    aux_batches : int, default=1
        Auxiliary batches of each kind per round (Alg. 7, lines 6-9).
    emulate_defenses : bool, default=False
        Whether the adversary computes its auxiliary gradients with the
        target's defenses.

    Returns
    -------
    float
        ROC AUC of the adversary's scores of the target's observed updates.
    """
    return simulate_property_attacks(
        data,
        has_property,
        setup,
        rounds=rounds,
        seed=seed,
        features=(features,),
        aux_batches=aux_batches,
        emulate_defenses=emulate_defenses,
    )[features]
