"""Two-party synchronized SGD in one process, with the embedding-membership adversary.

Seed 000 Ch. 7.2.2 (Table 7.2) without a federation: the training records
are split evenly between the target and the adversary; every round each
computes the gradient of its loss on one mini-batch, the server applies
``theta_t = theta_{t-1} - lr * (g_target + g_adv)``
(:func:`fedleak.federated.sgd_step`, the arithmetic of
:class:`fedleak.strategies.SyncSGD`), and the adversary feeds the change of
the embedding matrix, minus its own gradient, to
:class:`fedleak.attacks.membership.embedding.EmbeddingMembership`. After the
target's data has been used for ``epochs`` epochs, the attack decides
membership for the target's records (members) and as many held-out records
(non-members).

The target may be defended (:class:`fedleak.defenses.ClientDefenses`, seed
000 Ch. 7.3), the server may clip and noise the updates (participant-level
DP, :func:`fedleak.defenses.clip_update`) or use weight decay and momentum.
``fedleak bench membership`` and ``fedleak bench defenses`` run it; the
Flower path (:class:`fedleak.clients.membership.EmbeddingMembershipAdversary`
in a simulated federation) gives the same decisions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedleak.curves import CURVE_POINTS, evaluation_interval, summarise_curve
from fedleak.data.text import TextDataset
from fedleak.defenses import (
    EMBEDDING_KEY,
    SELECTION_WORD,
    ClientDefenses,
    clip_update,
    participant_level_epsilon,
    record_level_epsilon,
)
from fedleak.errors import ConfigError
from fedleak.federated import sgd_step
from fedleak.models import build_text_model
from fedleak.training import batch_gradient, evaluate, get_arrays, set_arrays

from .embedding import EmbeddingMembership, MembershipScores
from .false_flags import false_flags_by_size

__all__ = [
    "CURVE_POINTS",
    "MembershipSetup",
    "accuracy_recorder",
    "SimulationOutcome",
    "inputs_and_model",
    "model_auc",
    "precision_floor",
    "server_step",
    "simulate_membership",
]


@dataclass(frozen=True)
class MembershipSetup:
    """One two-party synchronized-SGD run with the membership adversary.

    Attributes
    ----------
    model : {"text-cnn", "text-gru"}
        The embedding model.
    embedding_dim : int
        Embedding dimension (the thesis: 320 CNN, 100 GRU).
    cnn_hidden : int or None
        Hidden FC width of the CNN (128: FourSquare model; ``None``: the
        single FC layer of the CSI model).
    batch_size : int
        Mini-batch size of both parties.
    epochs : int
        Passes over the target's data (rounds = epochs * ceil(n_target / B));
        the thesis trains 3,000 iterations. More than one pass matters for
        the CNN: a token whose every convolution window loses the max-pool
        (or is cut by ReLU) gets exactly zero gradient in that batch, so a
        member is only certain to be caught over several passes.
    iterations : int or None
        Rounds to train for, overriding ``epochs`` (the thesis: 3,000 at every
        batch size); ``None`` trains ``epochs`` passes.
    learning_rate : float
        Server step size (the thesis: 0.01 CNN, 0.05 GRU).
    dropout : float
        Dropout after the pooling layer (Ch. 7.3.3).
    server_weight_decay, server_momentum : float
        Server optimiser settings that destroy the signal (0 = plain SGD).
    defenses : ClientDefenses
        The target's defenses (the vocabulary restriction binds both parties:
        it is the model's input space).
    participant_noise : float or None
        Participant-level DP: each client's update is clipped to
        ``participant_clip`` (:func:`fedleak.defenses.clip_update`, Flower's
        ``clip_inputs_inplace`` arithmetic) and the sum gets Gaussian noise
        of std ``participant_noise * participant_clip`` (Flower's
        ``compute_stdv`` for the sum).
    participant_clip : float
        Participant-level clipping norm.
    delta : float
        Target delta of the reported epsilons.
    """

    model: str = "text-cnn"
    embedding_dim: int = 64
    cnn_hidden: int | None = 128
    batch_size: int = 100
    epochs: int = 3
    iterations: int | None = None
    learning_rate: float = 0.01
    dropout: float = 0.0
    server_weight_decay: float = 0.0
    server_momentum: float = 0.0
    defenses: ClientDefenses = field(default_factory=ClientDefenses)
    participant_noise: float | None = None
    participant_clip: float = 1.0
    delta: float = 1e-5


@dataclass(frozen=True)
class SimulationOutcome:
    """Attack strength, model utility and privacy of one simulated run.

    ``accuracy_curve`` is :func:`fedleak.curves.summarise_curve` of the test
    accuracy at :data:`CURVE_POINTS` rounds of the run; ``false_flags`` is
    :func:`~fedleak.attacks.membership.false_flags.false_flags_by_size` of the
    scored non-members.
    """

    scores: MembershipScores
    accuracy: float
    auc: float
    rounds: int
    record_epsilon: float | None
    participant_epsilon: float | None
    wall_s: float
    accuracy_curve: dict[str, Any] = field(default_factory=dict)
    false_flags: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return the outcome as a JSON-ready dict."""
        return {
            **self.scores.as_dict(),
            "model_accuracy": self.accuracy,
            "model_auc": self.auc,
            "rounds": self.rounds,
            "record_epsilon": self.record_epsilon,
            "participant_epsilon": self.participant_epsilon,
            "accuracy_curve": self.accuracy_curve,
            "false_flags": self.false_flags,
            "wall_s": self.wall_s,
        }


def model_auc(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """ROC AUC of a classifier's softmax on ``(x, y)`` (one-vs-rest if multiclass).

    Classes absent from ``y`` are left out (and the probabilities of those
    present renormalised). NaN when ``y`` has one class or the model has
    diverged (non-finite outputs).
    """
    from sklearn.metrics import roc_auc_score

    model.eval()
    with torch.no_grad():
        probs = torch.softmax(model(x), dim=1).numpy()
    labels = y.numpy()
    present = np.unique(labels)
    if present.size < 2 or not np.isfinite(probs).all():  # diverged: no AUC
        return float("nan")
    if probs.shape[1] == 2:
        return float(roc_auc_score(labels, probs[:, 1]))
    return float(
        roc_auc_score(
            labels,
            probs[:, present] / probs[:, present].sum(axis=1, keepdims=True),
            multi_class="ovr",
            labels=present,
        )
    )


class _BatchWalker:
    """Seeded per-epoch permutations of a client's records, one batch a call.

    Each epoch is cut into ``ceil(n / batch_size)`` batches of nearly equal
    size (``numpy.array_split``), so every record is used once per epoch
    (members are exactly the records trained on) and no epoch ends with a
    remainder batch of one or two records: such a batch carries the weight
    of a full one, and late in training its step can throw the model far
    off (measured: test logits shifted by -12, accuracy back to chance, on
    the last round of a 216-round run).
    """

    def __init__(self, indices: np.ndarray, batch_size: int, seed: int) -> None:
        self.indices = indices
        self.size = min(batch_size, indices.size)
        self.per_epoch = math.ceil(indices.size / self.size)
        self.seed = seed
        self.epoch, self.cursor = 0, 0
        self.batches = self._batches()

    def _batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, self.epoch])
        permuted: np.ndarray = self.indices[rng.permutation(self.indices.size)]
        return list(np.array_split(permuted, self.per_epoch))

    def next(self) -> np.ndarray:
        if self.cursor >= self.per_epoch:
            self.epoch, self.cursor = self.epoch + 1, 0
            self.batches = self._batches()
        batch = self.batches[self.cursor]
        self.cursor += 1
        return np.sort(batch)


def inputs_and_model(
    data: TextDataset, setup: MembershipSetup, model_seed: np.random.SeedSequence
) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module, dict[str, np.ndarray]]:
    """Return the inputs, labels, model of ``setup`` and its float32 parameters.

    The inputs are vocabulary-restricted when the defenses say so (the
    restriction is the model's input space, so it binds every party).
    """
    x_all = setup.defenses.inputs(torch.from_numpy(data.x_train))
    model = build_text_model(
        setup.model,
        data.vocab_size,
        data.num_classes,
        seed=int(model_seed.generate_state(1)[0]),
        dropout=setup.dropout,
        embedding_dim=setup.embedding_dim,
        cnn_hidden=setup.cnn_hidden,
    )
    params = {k: v.astype(np.float32) for k, v in get_arrays(model).items()}
    return x_all, torch.from_numpy(data.y_train), model, params


def server_step(
    params: dict[str, np.ndarray],
    updates: list[dict[str, np.ndarray]],
    setup: MembershipSetup,
    noise_rng: np.random.Generator,
    momentum: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """One server step of ``setup``: :func:`fedleak.federated.sgd_step`.

    Sums the updates in float64, adds the participant-level Gaussian noise
    (std ``participant_noise * participant_clip``), weight decay and
    momentum of ``setup`` (``momentum`` is updated in place), steps by
    ``setup.learning_rate`` and casts back to float32.
    """
    noise_std = (
        None
        if setup.participant_noise is None
        else setup.participant_noise * setup.participant_clip
    )
    return sgd_step(
        params,
        updates,
        setup.learning_rate,
        noise_std=noise_std,
        noise_rng=noise_rng,
        weight_decay=setup.server_weight_decay,
        momentum=setup.server_momentum,
        momentum_buffer=momentum,
    )


@dataclass
class _Parties:
    """The target's and the adversary's records and batch orders."""

    target_idx: np.ndarray
    adversary_idx: np.ndarray
    target: _BatchWalker
    adversary: _BatchWalker


def _seed_streams(seed: int) -> list[np.random.SeedSequence]:
    """Return a run's five seed streams: split, the two batch walks, noise, model."""
    return np.random.SeedSequence([seed, 0x3E3B]).spawn(5)


def _evaluation_records(
    x_all: torch.Tensor,
    x_test: torch.Tensor,
    target_idx: np.ndarray,
    seed: int,
    max_eval_records: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw the members and as many non-members the attack is scored on."""
    n_eval = min(target_idx.size, x_test.shape[0])
    if max_eval_records is not None:
        n_eval = min(n_eval, max_eval_records)
    pick = np.random.default_rng([seed, 0xE7A1])
    members = x_all[np.sort(pick.choice(target_idx, n_eval, replace=False))]
    others = x_test[np.sort(pick.choice(x_test.shape[0], n_eval, replace=False))]
    return members.numpy(), others.numpy()


def precision_floor(
    data: TextDataset,
    setup: MembershipSetup,
    *,
    seed: int = 0,
    max_eval_records: int | None = None,
) -> float:
    """Return the lowest precision the attack can score on this split.

    Every bag the adversary reads is a subset of the words of the target's
    own records, so a non-member is flagged at most when all its words occur
    somewhere in the target's data (seed 000, Ch. 7.2.2's rule ``V_r subset
    of V_t`` with ``V_t`` the union of all the target's batches). This is
    the attack's precision with that one bag, on the members and
    non-members :func:`simulate_membership` scores with the same ``seed``
    (recall is 1 there). Large batches approach it: their bags come nearest
    to the union.
    """
    split, walk_t, walk_a, _, _ = _seed_streams(seed)
    parties = _split_parties(data.x_train.shape[0], 1, split, walk_t, walk_a)
    x_all = setup.defenses.inputs(torch.from_numpy(data.x_train))
    x_test = setup.defenses.inputs(torch.from_numpy(data.x_test))
    members, others = _evaluation_records(
        x_all, x_test, parties.target_idx, seed, max_eval_records
    )
    attack = EmbeddingMembership(data.vocab_size)
    attack.observe_bag(np.unique(x_all[parties.target_idx].numpy()))
    return float(attack.evaluate(members, others).precision)


def _split_parties(
    num_records: int,
    batch_size: int,
    split: np.random.SeedSequence,
    walk_target: np.random.SeedSequence,
    walk_adversary: np.random.SeedSequence,
) -> _Parties:
    order = np.random.default_rng(split).permutation(num_records)
    half = order.size // 2
    target_idx, adversary_idx = np.sort(order[:half]), np.sort(order[half:])
    return _Parties(
        target_idx,
        adversary_idx,
        _BatchWalker(target_idx, batch_size, int(walk_target.generate_state(1)[0])),
        _BatchWalker(
            adversary_idx, batch_size, int(walk_adversary.generate_state(1)[0])
        ),
    )


def _train_and_observe(
    model: torch.nn.Module,
    params: dict[str, np.ndarray],
    inputs: tuple[torch.Tensor, torch.Tensor],
    parties: _Parties,
    setup: MembershipSetup,
    attack: EmbeddingMembership,
    *,
    rounds: int,
    noise_rng: np.random.Generator,
    selection_rng: np.random.Generator,
    after_round: Callable[[int, dict[str, np.ndarray]], None] | None = None,
) -> dict[str, np.ndarray]:
    """Run ``rounds`` rounds; the adversary observes each; return the final model.

    ``after_round(t, params)`` is called with each round's number (from 1)
    and the model after it; it must leave the random streams alone.
    """
    x_all, y_all = inputs
    momentum = {k: np.zeros(v.shape, np.float64) for k, v in params.items()}
    torch_seed = torch.Generator().manual_seed(int(noise_rng.integers(2**62)))
    for t in range(1, rounds + 1):
        set_arrays(model, params)
        tb = torch.from_numpy(parties.target.next())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=torch_seed)))
            g_target = setup.defenses.gradient(
                model,
                x_all[tb],
                y_all[tb],
                seed=int(noise_rng.integers(2**62)),
                selection_seed=selection_rng,
            )
            ab = torch.from_numpy(parties.adversary.next())
            g_adv, _, _ = batch_gradient(model, x_all[ab], y_all[ab])
        updates = [g_target, g_adv]
        if setup.participant_noise is not None:
            updates = [clip_update(u, setup.participant_clip) for u in updates]
        prev_emb = params[EMBEDDING_KEY].copy()
        params = server_step(params, updates, setup, noise_rng, momentum)
        attack.observe(
            params[EMBEDDING_KEY].astype(np.float64) - prev_emb,
            own=g_adv[EMBEDDING_KEY],
            parameters=(prev_emb, params[EMBEDDING_KEY]),
        )
        if after_round is not None:
            after_round(t, params)
    return params


def accuracy_recorder(
    model: torch.nn.Module, x_test: torch.Tensor, y_test: torch.Tensor, rounds: int
) -> tuple[Callable[[int, dict[str, np.ndarray]], None], list[tuple[int, float]]]:
    """Return a callback measuring test accuracy at :data:`CURVE_POINTS` rounds.

    The callback takes a round's number (from 1) and the parameters after
    it; the ``(round, accuracy)`` points land in the returned list. ``model``
    only needs the architecture: the parameters are loaded into it. It is
    evaluated in eval mode, so no random stream is drawn from.
    """
    every = evaluation_interval(rounds)
    points: list[tuple[int, float]] = []

    def record(t: int, params: dict[str, np.ndarray]) -> None:
        if t % every == 0 or t == rounds:
            set_arrays(model, params)
            points.append((t, evaluate(model, x_test, y_test).accuracy))

    return record, points


def _epsilons(
    setup: MembershipSetup, batch_size: int, num_target: int, rounds: int
) -> tuple[float | None, float | None]:
    """Record- and participant-level epsilon of the run (None where no DP)."""
    record_eps = None
    if setup.defenses.dp_noise_multiplier is not None:
        record_eps = record_level_epsilon(
            batch_size=batch_size,
            num_records=num_target,
            steps=rounds,
            noise_multiplier=setup.defenses.dp_noise_multiplier,
            delta=setup.delta,
        )
    participant_eps = None
    if setup.participant_noise is not None:
        participant_eps = participant_level_epsilon(
            noise_multiplier=setup.participant_noise,
            sampled_clients=2,
            total_clients=2,
            rounds=rounds,
            delta=setup.delta,
        )
    return record_eps, participant_eps


def simulate_membership(
    data: TextDataset,
    setup: MembershipSetup,
    *,
    seed: int,
    max_eval_records: int | None = None,
) -> SimulationOutcome:
    """Run two-party synchronized SGD with the embedding-membership adversary.

    Parameters
    ----------
    data : TextDataset
        Token-id records; the training part is split evenly between target
        and adversary, the test part supplies the non-members.
    setup : MembershipSetup
        Model, batch size, server optimiser, defenses.
    seed : int
        Seeds the split, the model, the batch orders and all noise.
    max_eval_records : int, optional
        Evaluate on at most this many members and as many non-members.

    Returns
    -------
    SimulationOutcome
    """
    started = time.perf_counter()
    if data.x_train.shape[0] < 2 or data.x_test.shape[0] < 1:
        raise ConfigError("the dataset needs >= 2 training and >= 1 test records")
    split, walk_t, walk_a, noise_seq, model_seed = _seed_streams(seed)
    parties = _split_parties(
        data.x_train.shape[0], setup.batch_size, split, walk_t, walk_a
    )
    x_all, y_all, model, params = inputs_and_model(data, setup, model_seed)
    attack = EmbeddingMembership(data.vocab_size)
    rounds = (
        setup.iterations
        if setup.iterations is not None
        else setup.epochs * parties.target.per_epoch
    )
    if rounds < 1:
        raise ConfigError(f"the run needs >= 1 round, got {rounds}")
    x_test = setup.defenses.inputs(torch.from_numpy(data.x_test))
    y_test = torch.from_numpy(data.y_test)
    after_round, points = accuracy_recorder(model, x_test, y_test, rounds)
    params = _train_and_observe(
        model,
        params,
        (x_all, y_all),
        parties,
        setup,
        attack,
        rounds=rounds,
        noise_rng=np.random.default_rng(noise_seq),
        selection_rng=np.random.default_rng([seed, SELECTION_WORD]),
        after_round=after_round,
    )
    set_arrays(model, params)
    result = evaluate(model, x_test, y_test)
    members, others = _evaluation_records(
        x_all, x_test, parties.target_idx, seed, max_eval_records
    )
    record_eps, participant_eps = _epsilons(
        setup, parties.target.size, parties.target_idx.size, rounds
    )
    return SimulationOutcome(
        scores=attack.evaluate(members, others),
        accuracy=result.accuracy,
        auc=model_auc(model, x_test, y_test),
        rounds=rounds,
        record_epsilon=record_eps,
        participant_epsilon=participant_eps,
        wall_s=time.perf_counter() - started,
        accuracy_curve=summarise_curve(points),
        false_flags=false_flags_by_size(attack, others),
    )
