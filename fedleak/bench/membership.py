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
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import torch
import typer
from rich.table import Table

from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    precision_floor,
    simulate_membership,
)
from fedleak.data.checkins import synthetic_checkin_task
from fedleak.data.text import TextDataset, fortunes_dataset, load_text_task
from fedleak.errors import ConfigError
from fedleak.files import write_figure

from .console import fmt, say, written
from .console import out as console
from .membership_flower import FLOWER_DATASETS, run_flower_membership
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path

__all__ = [
    "DATASETS",
    "default_setup",
    "load_bench_dataset",
    "run_membership_bench",
]

ProgressFn = Callable[[str], None]

DATASETS: tuple[str, ...] = ("checkins", "fortunes")

ENGINES: tuple[str, ...] = ("in-process", "flower")
"""Where the bench's runs train: in this process, or as Flower simulations."""

LEARNING_RATE = 0.3
"""Server step of the joint model (see :func:`default_setup`)."""

#: Seed 000 Table 7.2: (batch size, precision); recall is 1.
THESIS_TABLE_7_2: dict[str, tuple[tuple[int, float], ...]] = {
    "yelp-health": ((32, 0.92), (64, 0.84), (128, 0.75), (256, 0.66), (512, 0.62)),
    "foursquare": ((100, 0.99), (200, 0.98), (500, 0.91), (1000, 0.76), (2000, 0.62)),
}


MEAN_CHECKINS = 20.0
"""Check-ins per synthetic user on average, unless ``--mean-checkins``."""
CHECKIN_USERS = 10000
"""Synthetic check-in users of the bench, and its venues unless ``--venues``."""
QUICK_CHECKIN_USERS = 1500
"""The same with ``--quick``."""


def load_bench_dataset(
    name: str,
    *,
    quick: bool,
    seed: int,
    mean_checkins: float = MEAN_CHECKINS,
    num_venues: int | None = None,
) -> TextDataset:
    """Return the benchmark's dataset ``name`` (``checkins`` or ``fortunes``).

    ``checkins``: synthetic check-ins (10,000 users and venues; quick:
    1,500; ``num_venues`` venues where given), 10 home areas, Zipf exponent
    1, ``mean_checkins`` check-ins per user on average (default 20; the
    thesis' FourSquare subset: 34); users with >= 10 distinct venues;
    records of length 60; the top-30,000 venues; half of the users held out
    (the non-members). ``fortunes``: six fortune categories (quick: three),
    entries of at most 400 characters, length 50 (quick: 30), the top-5,000
    words, half held out.
    """
    if name == "checkins":
        size = _users(quick)
        return synthetic_checkin_task(
            size,
            num_areas=10,
            test_fraction=0.5,
            seed=seed,
            mean_checkins=mean_checkins,
            num_venues=num_venues,
        )[0]
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

    Server step ``lr = 0.3`` (:data:`LEARNING_RATE`): at 0.01 the check-in
    model was still at chance after 3,000 iterations at batch size 100
    (test accuracy 0.51, AUC 0.73); at 0.3 it reaches 0.88 (AUC 0.95) in
    300, and the fortunes model 0.33 against 0.23 (measured, seed 0). The
    attack's precision moved by less than 0.01 between the two.
    """
    return MembershipSetup(
        model="text-cnn", embedding_dim=32, epochs=3, learning_rate=LEARNING_RATE
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
    """Plot precision and recall vs batch size, one pair of curves per dataset."""

    def draw(fig: Any) -> None:
        ax = fig.subplots()
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

    write_figure(path, draw, (5, 3.5), dpi=120)


def run_membership_bench(
    out: str | Path,
    *,
    datasets: Sequence[str] = DATASETS,
    batch_sizes: Sequence[int] | None = None,
    quick: bool = False,
    seed: int = 0,
    iterations: int | None = None,
    engine: str = "in-process",
    mean_checkins: float = MEAN_CHECKINS,
    num_venues: int | None = None,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Measure precision and recall vs batch size and write the JSON report.

    The record is rewritten after every run, so an interrupted bench keeps
    the rows it measured (``"complete": false``).

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
    iterations : int, optional
        Train every run for this many rounds instead of the setup's epochs
        (the thesis: 3,000 at every batch size).
    engine : {"in-process", "flower"}
        ``flower`` runs each (dataset, batch size) as a Flower simulation on
        Ray (:mod:`fedleak.bench.membership_flower`; check-ins only, on the
        full-size check-in data even with ``quick``); each run's folder goes
        under ``<out stem>-runs/``.
    mean_checkins : float
        Check-ins per synthetic user on average (in-process only; thesis 34).
    num_venues : int, optional
        Synthetic venues (in-process check-ins only; default one per user;
        the thesis keeps 30,000 locations); the record gives the number.
    progress : callable, optional
        Receives one line per run.
    """
    _check_engine(engine, datasets, mean_checkins, num_venues)
    say = progress or (lambda _: None)
    venues = _venues(quick, num_venues)
    torch.set_num_threads(1)
    record = BenchRecord("membership", record_path(out, make_folder=True))
    started = time.perf_counter()
    setups: dict[str, Any] = {}
    rows = record.start_rows(
        {
            "quick": quick,
            "seed": seed,
            "engine": engine,
            "mean_checkins": mean_checkins,
            "num_venues": venues,
            "setups": setups,
        }
    )
    for name in datasets:
        data = _dataset(
            name, engine, quick=quick, seed=seed, mean=mean_checkins, venues=venues
        )
        base, sizes = _plan(name, quick, iterations, batch_sizes)
        setups[name] = _setup_entry(base, data, engine=engine, seed=seed)
        for size in sizes:
            setup = MembershipSetup(
                **{**asdict(base), "batch_size": size, "defenses": base.defenses}
            )
            row = {
                "dataset": name,
                "batch_size": size,
                **_measure(name, data, setup, engine=engine, seed=seed, record=record),
            }
            record.add_row(row, started)
            say(
                f"{name} B={size}: precision {row['precision']:.3f} recall "
                f"{row['recall']:.3f} ({row['rounds']} rounds, {row['wall_s']:.1f} s)"
            )
    plot_path = record.sibling("precision.png")
    report: dict[str, Any] = {
        "description": __doc__,
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
    }
    _plot(plot_path, rows)
    record.body.update(report)
    return record.finish_rows(started, {}, [plot_path.name])


def _plan(
    name: str, quick: bool, iterations: int | None, batch_sizes: Sequence[int] | None
) -> tuple[MembershipSetup, tuple[int, ...]]:
    """Return a dataset's base setup and the batch sizes to run it at."""
    base = default_setup(name, quick=quick)
    if iterations is not None:
        base = replace(base, iterations=iterations)
    if batch_sizes:
        return base, tuple(batch_sizes)
    return base, (QUICK_BATCH_SIZES if quick else DEFAULT_BATCH_SIZES)[name]


def _users(quick: bool) -> int:
    """Return the synthetic check-ins' user count (and default venue count)."""
    return QUICK_CHECKIN_USERS if quick else CHECKIN_USERS


def _venues(quick: bool, num_venues: int | None) -> int:
    """Return the synthetic check-ins' venue count: given, else one per user."""
    return num_venues if num_venues is not None else _users(quick)


def _check_engine(
    engine: str,
    datasets: Sequence[str],
    mean_checkins: float,
    num_venues: int | None = None,
) -> None:
    """Refuse an unknown engine, or data Flower has no counterpart of."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; choose one of {list(ENGINES)}")
    if engine == "flower" and (
        mean_checkins != MEAN_CHECKINS or num_venues is not None
    ):
        option = "--mean-checkins" if mean_checkins != MEAN_CHECKINS else "--venues"
        raise ConfigError(
            f"{option}: the Flower runs use the federation's "
            "checkins-synthetic-large (10,000 venues, 20 check-ins a user); "
            "run in-process"
        )
    if engine == "flower":
        for name in datasets:
            if name not in FLOWER_DATASETS:
                raise ConfigError(
                    f"--engine flower: no federation dataset for {name!r}; "
                    f"choose among {sorted(FLOWER_DATASETS)}"
                )


def _dataset(
    name: str,
    engine: str,
    *,
    quick: bool,
    seed: int,
    mean: float,
    venues: int | None = None,
) -> TextDataset:
    """Return the data of ``name``: the federation's for Flower, else the bench's."""
    if engine == "flower":
        return load_text_task(FLOWER_DATASETS[name], seed=seed)
    return load_bench_dataset(
        name, quick=quick, seed=seed, mean_checkins=mean, num_venues=venues
    )


def _setup_entry(
    base: MembershipSetup, data: TextDataset, *, engine: str, seed: int
) -> dict[str, Any]:
    """Return the record's description of a dataset's setup and data.

    In-process runs also give the attack's :func:`precision_floor` on their
    split (the Flower runs split the data their own way).
    """
    entry = {
        **{k: v for k, v in asdict(base).items() if k != "defenses"},
        "num_train": int(data.x_train.shape[0]),
        "num_test": int(data.x_test.shape[0]),
        "vocab_size": data.vocab_size,
        "sequence_length": data.sequence_length,
        "source": data.source,
    }
    if engine == "in-process":
        entry["precision_floor"] = precision_floor(data, base, seed=seed)
    return entry


def _measure(
    name: str,
    data: TextDataset,
    setup: MembershipSetup,
    *,
    engine: str,
    seed: int,
    record: BenchRecord,
) -> dict[str, Any]:
    """Run one (dataset, batch size) on ``engine``; return its measurements."""
    if engine == "flower":
        return run_flower_membership(
            name,
            setup,
            rounds=_flower_rounds(setup, data.x_train.shape[0]),
            seed=seed,
            run_dir=record.sibling("runs") / f"{name}-b{setup.batch_size}",
        )
    measured: dict[str, Any] = simulate_membership(data, setup, seed=seed).as_dict()
    return measured


def _flower_rounds(setup: MembershipSetup, num_train: int) -> int:
    """Return the rounds of a Flower run: the iterations, else the epochs.

    The target holds half of the ``num_train`` records (two clients, iid);
    one more round lets the adversary read the last one's change.
    """
    if setup.iterations is not None:
        return int(setup.iterations) + 1
    per_epoch = math.ceil((num_train // 2) / int(setup.batch_size))
    return int(setup.epochs) * per_epoch + 1


def _non_increasing(values: list[float], slack: float = 0.02) -> bool:
    return all(b <= a + slack for a, b in itertools.pairwise(values))


VenuesOption = Annotated[
    int | None,
    typer.Option(
        min=100,
        help="Synthetic venues (default as many as users, 10,000; the thesis "
        "keeps the top 30,000 locations).",
    ),
]


def command(
    out: OutOption = Path("bench-membership.json"),
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
    seed: SeedOption = 0,
    iterations: Annotated[
        int | None,
        typer.Option(help="Rounds per run instead of epochs (the thesis: 3,000)."),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="in-process, or flower: each run a Flower simulation on Ray "
            "(check-ins only)."
        ),
    ] = "in-process",
    mean_checkins: Annotated[
        float,
        typer.Option(
            min=10.0,
            help="Check-ins per synthetic user on average (the thesis' "
            "FourSquare subset: 34).",
        ),
    ] = MEAN_CHECKINS,
    venues: VenuesOption = None,
) -> None:
    """Embedding-layer membership inference: precision vs batch size (Table 7.2)."""
    report = run_membership_bench(
        out,
        datasets=tuple(dataset) if dataset else DATASETS,
        batch_sizes=batch_size,
        quick=quick,
        seed=seed,
        iterations=iterations,
        engine=engine,
        mean_checkins=mean_checkins,
        num_venues=venues,
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
