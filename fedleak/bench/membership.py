"""``fedleak bench membership``: Table 7.2 of seed 000, precision vs batch size.

Two-party synchronized SGD (seed 000 Alg. 1) in this process, without Flower:
the training records are split evenly between the target and the adversary
(Ch. 7.2.2); every round each computes the gradient of its loss on one
mini-batch, the server applies ``theta_t = theta_{t-1} - lr * (g_target +
g_adv)`` in float64 and casts back to float32 (exactly what
:class:`fedleak.strategies.SyncSGD` does), and the adversary feeds the change
of the embedding matrix, minus its own gradient, to
:class:`fedleak.attacks.membership.EmbeddingMembership`. After the target's
data has been used for ``epochs`` epochs, the attack decides membership for
the target's records (members) and as many held-out records (non-members).

Settings (defaults; ``--quick`` shrinks them):

``checkins``
    :func:`fedleak.data.checkins.synthetic_checkins`, the embedding + CNN
    model of Ch. 7.2.1 (FourSquare column of Table 7.2), top-30,000 venues,
    records of length 100.
``fortunes``
    The Debian ``fortunes`` corpus (real short texts, category labels), the
    embedding + CNN text model (the thesis' CSI model; see
    :func:`default_setup` for why not its GRU), top-5,000 words, in place of
    the Yelp-health column.

The same simulation (:func:`simulate_membership`) runs the defenses of
Ch. 7.3 in :mod:`fedleak.bench.defenses`. The Flower path (the
:class:`fedleak.clients.membership.EmbeddingMembershipAdversary` ClientApp in
a simulated federation) gives the same decisions; its end-to-end test checks
recall 1.0 there.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import typer
from rich.table import Table

from fedleak.attacks.membership.embedding import EmbeddingMembership, MembershipScores
from fedleak.data.checkins import checkin_dataset, synthetic_checkins
from fedleak.data.text import TextDataset, fortunes_dataset
from fedleak.defenses import (
    EMBEDDING_KEY,
    ClientDefenses,
    participant_level_epsilon,
    record_level_epsilon,
    restrict_inputs,
)
from fedleak.errors import ConfigError
from fedleak.files import write_atomic
from fedleak.models import build_text_model
from fedleak.training import batch_gradient, evaluate, get_arrays, set_arrays

from .console import fmt, say, written
from .console import out as console
from .record import BenchRecord

__all__ = [
    "DATASETS",
    "MembershipSetup",
    "SimulationOutcome",
    "inputs_and_model",
    "load_bench_dataset",
    "run_membership_bench",
    "server_step",
    "simulate_membership",
]

ProgressFn = Callable[[str], None]

DATASETS: tuple[str, ...] = ("checkins", "fortunes")

#: Seed 000 Table 7.2: (batch size, precision); recall is 1.
THESIS_TABLE_7_2: dict[str, tuple[tuple[int, float], ...]] = {
    "yelp-health": ((32, 0.92), (64, 0.84), (128, 0.75), (256, 0.66), (512, 0.62)),
    "foursquare": ((100, 0.99), (200, 0.98), (500, 0.91), (1000, 0.76), (2000, 0.62)),
}


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
        ``participant_clip`` with Flower's ``clip_inputs_inplace`` and the sum
        gets Gaussian noise of std ``participant_noise * participant_clip``
        (Flower's ``compute_stdv`` for the sum).
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
    """Attack strength, model utility and privacy of one simulated run."""

    scores: MembershipScores
    accuracy: float
    auc: float
    rounds: int
    record_epsilon: float | None
    participant_epsilon: float | None
    wall_s: float

    def as_dict(self) -> dict[str, Any]:
        """Return the outcome as a JSON-ready dict."""
        return {
            **self.scores.as_dict(),
            "model_accuracy": self.accuracy,
            "model_auc": self.auc,
            "rounds": self.rounds,
            "record_epsilon": self.record_epsilon,
            "participant_epsilon": self.participant_epsilon,
            "wall_s": self.wall_s,
        }


def _auc(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
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


def _flat_norm_clip(
    update: dict[str, np.ndarray], clip: float
) -> dict[str, np.ndarray]:
    from flwr.supercore.differential_privacy import clip_inputs_inplace, get_norm

    arrays = [np.array(v, dtype=np.float64) for v in update.values()]
    if get_norm(arrays) > 0:  # Flower's clip divides by the norm
        clip_inputs_inplace(arrays, clip)
    return dict(zip(update, arrays, strict=True))


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
    x_all = torch.from_numpy(data.x_train)
    if setup.defenses.vocab_top_n is not None:
        x_all = restrict_inputs(x_all, setup.defenses.vocab_top_n)
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
    updates: Sequence[dict[str, np.ndarray]],
    setup: MembershipSetup,
    noise_rng: np.random.Generator,
    momentum: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """One synchronized-SGD server step (seed 000 Alg. 1), as :class:`SyncSGD`.

    Sums the updates in float64, adds the participant-level Gaussian noise,
    weight decay and momentum of ``setup`` (``momentum`` is updated in
    place), steps by ``setup.learning_rate`` and casts back to float32.
    """
    new_params: dict[str, np.ndarray] = {}
    for name, value in params.items():
        step = sum(u[name].astype(np.float64) for u in updates if name in u)
        if isinstance(step, int):
            new_params[name] = value
            continue
        if setup.participant_noise is not None:
            std = setup.participant_noise * setup.participant_clip
            step = step + noise_rng.normal(0.0, std, step.shape)
        if setup.server_weight_decay:
            step = step + setup.server_weight_decay * value.astype(np.float64)
        if setup.server_momentum:
            if momentum is None:
                raise ConfigError("server_momentum needs a momentum buffer")
            momentum[name] = setup.server_momentum * momentum[name] + step
            step = momentum[name]
        new_params[name] = (
            value.astype(np.float64) - setup.learning_rate * step
        ).astype(np.float32)
    return new_params


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
    split, walk_t, walk_a, noise_seq, model_seed = np.random.SeedSequence(
        [seed, 0x3E3B]
    ).spawn(5)
    order = np.random.default_rng(split).permutation(data.x_train.shape[0])
    half = order.size // 2
    target_idx, adv_idx = np.sort(order[:half]), np.sort(order[half:])
    defenses = setup.defenses
    x_all, y_all, model, params = inputs_and_model(data, setup, model_seed)
    momentum = {k: np.zeros(v.shape, np.float64) for k, v in params.items()}
    target = _BatchWalker(
        target_idx, setup.batch_size, int(walk_t.generate_state(1)[0])
    )
    adversary = _BatchWalker(
        adv_idx, setup.batch_size, int(walk_a.generate_state(1)[0])
    )
    noise_rng = np.random.default_rng(noise_seq)
    attack = EmbeddingMembership(data.vocab_size)
    rounds = setup.epochs * target.per_epoch
    torch_seed = torch.Generator().manual_seed(int(noise_rng.integers(2**62)))
    for _ in range(rounds):
        set_arrays(model, params)
        tb = torch.from_numpy(target.next())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=torch_seed)))
            g_target = defenses.gradient(
                model, x_all[tb], y_all[tb], seed=int(noise_rng.integers(2**62))
            )
            ab = torch.from_numpy(adversary.next())
            g_adv, _, _ = batch_gradient(model, x_all[ab], y_all[ab])
        updates = [g_target, g_adv]
        if setup.participant_noise is not None:
            updates = [_flat_norm_clip(u, setup.participant_clip) for u in updates]
        prev_emb = params[EMBEDDING_KEY].copy()
        params = server_step(params, updates, setup, noise_rng, momentum)
        attack.observe(
            params[EMBEDDING_KEY].astype(np.float64) - prev_emb,
            own=g_adv[EMBEDDING_KEY],
            parameters=(prev_emb, params[EMBEDDING_KEY]),
        )
    set_arrays(model, params)
    x_test = torch.from_numpy(data.x_test)
    if defenses.vocab_top_n is not None:
        x_test = restrict_inputs(x_test, defenses.vocab_top_n)
    y_test = torch.from_numpy(data.y_test)
    result = evaluate(model, x_test, y_test)
    auc = _auc(model, x_test, y_test)
    n_eval = min(target_idx.size, x_test.shape[0])
    if max_eval_records is not None:
        n_eval = min(n_eval, max_eval_records)
    pick = np.random.default_rng([seed, 0xE7A1])
    members = x_all[np.sort(pick.choice(target_idx, n_eval, replace=False))].numpy()
    others = x_test[np.sort(pick.choice(x_test.shape[0], n_eval, replace=False))]
    scores = attack.evaluate(members, others.numpy())
    record_eps = None
    if defenses.dp_noise_multiplier is not None:
        record_eps = record_level_epsilon(
            batch_size=target.size,
            num_records=target_idx.size,
            steps=rounds,
            noise_multiplier=defenses.dp_noise_multiplier,
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
    return SimulationOutcome(
        scores=scores,
        accuracy=result.accuracy,
        auc=auc,
        rounds=rounds,
        record_epsilon=record_eps,
        participant_epsilon=participant_eps,
        wall_s=time.perf_counter() - started,
    )


def load_bench_dataset(name: str, *, quick: bool, seed: int) -> TextDataset:
    """Return the benchmark's dataset ``name`` (``checkins`` or ``fortunes``).

    ``checkins``: synthetic check-ins (10,000 users and venues; quick:
    1,500), 10 home areas, Zipf exponent 1, 20 check-ins per user on average;
    users with >= 10 distinct venues; records of length 60; the top-30,000
    venues; half of the users held out (the non-members). ``fortunes``: six
    fortune categories (quick: three), entries of at most 400 characters,
    length 50 (quick: 30), the top-5,000 words, half held out.
    """
    if name == "checkins":
        size = 1500 if quick else 10000
        synthetic = synthetic_checkins(
            num_users=size,
            num_venues=size,
            num_areas=10,
            zipf_exponent=1.0,
            mean_checkins=20.0,
            seed=seed,
        )
        return checkin_dataset(
            synthetic.table,
            synthetic.attribute_map(),
            vocab_size=30000,
            length=60,
            test_fraction=0.5,
            seed=seed,
        )
    if name == "fortunes":
        categories = ["computers", "people", "work"]
        if not quick:
            categories += ["cookie", "definitions", "men-women"]
        return fortunes_dataset(
            categories,
            vocab_size=5000,
            length=30 if quick else 50,
            test_fraction=0.5,
            seed=seed,
        )
    raise ConfigError(f"unknown bench dataset {name!r}; choose one of {list(DATASETS)}")


def default_setup(name: str, *, quick: bool) -> MembershipSetup:
    """Return the model setup of a dataset: the embedding + CNN model for both.

    The CNN is the thesis' FourSquare and CSI (text) model. Its Yelp model,
    embedding + GRU, is available (``model="text-gru"``) but loses the
    attack's recall in float32: the gradient reaching the embedding of a
    token many steps before the end of a record vanishes (1e-9 and below),
    and ``lr`` times it is below half an ulp of the embedding weights, so the
    row does not change at all (measured on the fortunes corpus: recall 0.88
    at batch size 64). The attack itself is exact; the model cannot record
    such updates.

    Three epochs: a member is caught when every one of its tokens moves in
    at least one of the rounds that trained on it, and a token can fail to
    move in a round (every window holding it loses the max-pool, or ``lr``
    times its gradient, divided by the batch size, is below half an ulp).
    Since the CNN pads every record by ``max_window - 1`` on both sides, the
    first and last tokens lie in as many windows as any other. The last
    misses (0.1% of the members at batch size 2,000) were target updates of
    3 to 4 float32 ulps on words the adversary had also used, hidden by a
    4-ulp row tolerance and a scale estimate biased by the shared rows; the
    consensus fit and per-parameter float32 test of
    :meth:`fedleak.attacks.membership.EmbeddingMembership.observe` recover
    exactly the target's words every round (recall 1.0 at every batch size).
    """
    return MembershipSetup(
        model="text-cnn", embedding_dim=32, epochs=3, learning_rate=0.01
    )


DEFAULT_BATCH_SIZES: dict[str, tuple[int, ...]] = {
    "checkins": (100, 200, 500, 1000, 2000),
    "fortunes": (32, 64, 128, 256, 512),
}
QUICK_BATCH_SIZES: dict[str, tuple[int, ...]] = {
    "checkins": (10, 40, 160),
    "fortunes": (16, 64, 256),
}


def _plot(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name in sorted({r["dataset"] for r in rows}):
        mine = [r for r in rows if r["dataset"] == name]
        ax.plot(
            [r["batch_size"] for r in mine],
            [r["precision"] for r in mine],
            marker="o",
            label=f"{name} precision",
        )
        ax.plot(
            [r["batch_size"] for r in mine],
            [r["recall"] for r in mine],
            linestyle="--",
            label=f"{name} recall",
        )
    ax.set_xscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylim(0, 1.05)
    ax.set_title("Embedding-layer membership inference (Table 7.2)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def run_membership_bench(
    out: str | Path,
    *,
    datasets: Sequence[str] = DATASETS,
    batch_sizes: Sequence[int] | None = None,
    quick: bool = False,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Measure precision and recall vs batch size and write the JSON report.

    Parameters
    ----------
    out : path
        JSON file; the plot goes to ``<out stem>-precision.png``.
    datasets : sequence of str
        Among :data:`DATASETS`.
    batch_sizes : sequence of int, optional
        Overrides the per-dataset defaults (Table 7.2's).
    quick : bool
        CI-sized data, models and batch sizes.
    seed : int
        Seed of data generation, split, model and batches.
    progress : callable, optional
        Receives one line per run.
    """
    say = progress or (lambda _: None)
    torch.set_num_threads(1)
    Path(out).parent.mkdir(parents=True, exist_ok=True)  # before the work
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    setups: dict[str, Any] = {}
    for name in datasets:
        data = load_bench_dataset(name, quick=quick, seed=seed)
        base = default_setup(name, quick=quick)
        sizes = (
            tuple(batch_sizes)
            if batch_sizes
            else (QUICK_BATCH_SIZES if quick else DEFAULT_BATCH_SIZES)[name]
        )
        setups[name] = {
            **{k: v for k, v in asdict(base).items() if k != "defenses"},
            "num_train": int(data.x_train.shape[0]),
            "num_test": int(data.x_test.shape[0]),
            "vocab_size": data.vocab_size,
            "sequence_length": data.sequence_length,
            "source": data.source,
        }
        for size in sizes:
            setup = MembershipSetup(
                **{**asdict(base), "batch_size": size, "defenses": base.defenses}
            )
            outcome = simulate_membership(data, setup, seed=seed)
            row = {"dataset": name, "batch_size": size, **outcome.as_dict()}
            rows.append(row)
            say(
                f"{name} B={size}: precision {row['precision']:.3f} recall "
                f"{row['recall']:.3f} ({row['rounds']} rounds, {row['wall_s']:.1f} s)"
            )
    out_path = Path(out)
    plot_path = out_path.with_name(out_path.stem + "-precision.png")
    report: dict[str, Any] = {
        "description": __doc__,
        "quick": quick,
        "seed": seed,
        "setups": setups,
        "rows": rows,
        "thesis_table_7_2": {
            k: [list(r) for r in v] for k, v in THESIS_TABLE_7_2.items()
        },
        "recall_always_one": all(r["recall"] == 1.0 for r in rows),
        "precision_falls_with_batch": {
            name: _non_increasing(
                [r["precision"] for r in rows if r["dataset"] == name]
            )
            for name in datasets
        },
        "plots": [plot_path.name],
        "wall_s": time.perf_counter() - started,
    }
    _plot(plot_path, rows)
    return BenchRecord("membership", out_path).write(report)


def _non_increasing(values: list[float], slack: float = 0.02) -> bool:
    return all(b <= a + slack for a, b in itertools.pairwise(values))


def command(
    out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
        "bench-membership.json"
    ),
    quick: Annotated[
        bool, typer.Option("--quick", help="CI-sized data and batch sizes.")
    ] = False,
    dataset: Annotated[
        list[str] | None,
        typer.Option("--dataset", help="checkins and/or fortunes (repeatable)."),
    ] = None,
    batch_size: Annotated[
        list[int] | None,
        typer.Option("--batch-size", help="Batch sizes (repeatable)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Run seed.")] = 0,
) -> None:
    """Embedding-layer membership inference: precision vs batch size (Table 7.2)."""
    report = run_membership_bench(
        out,
        datasets=tuple(dataset) if dataset else DATASETS,
        batch_sizes=batch_size,
        quick=quick,
        seed=seed,
        progress=say,
    )
    table = Table("dataset", "batch", "precision", "recall", "|V_t|", "rounds", "s")
    for row in report["rows"]:
        table.add_row(
            row["dataset"],
            str(row["batch_size"]),
            fmt(row["precision"]),
            fmt(row["recall"]),
            f"{row['mean_bag_size']:.0f}",
            str(row["rounds"]),
            f"{row['wall_s']:.1f}",
        )
    console.print(table)
    console.print(
        f"recall always 1: {report['recall_always_one']}; precision falls "
        f"with the batch: {report['precision_falls_with_batch']}",
        highlight=False,
    )
    written(out)
