"""``fedleak bench mi-classifier``: LDP vs CDP compared by membership inference.

Seed 004 Ch. 4.3.3 at CPU scale. One data owner trains a fully connected
classifier (the target) on ``target_size`` records; the adversary trains
``num_shadows`` shadow models with the same procedure on disjoint shadow
data and attacks the target with one attack model per class (Shokri et al.,
Ch. 4.3.1). This is repeated for

``original``
    plain SGD (no privacy);
``ldp``
    the target's and the shadows' training inputs perturbed by a local
    randomiser (Fig. 4.3): randomised response per binary feature (the
    per-feature epsilon, as the seed's ``epsilon_i``; the record epsilon is
    the sum) for ``skewed-purchases``, Laplace pixelisation (epsilon per
    image) for ``digits`` and ``fashion-mnist``;
``cdp``
    target and shadows trained with the same DP-SGD (Fig. 4.2), noise
    multipliers ``z`` as in the seed, epsilon from the RDP accountant at
    ``delta = 1/n``.

Each point reports the target's train and test accuracy, the attack's
class-averaged precision and recall, its AUC and membership advantage, the
loss-threshold attack's AUC on the same target, and the mitigation
efficiency phi of Eq. (4.2) for precision and recall against ``original``.

Datasets: ``skewed-purchases``, the seed's synthetic shopping carts (Ch.
4.3.2, :func:`skewed_purchases`; binary, so randomised response applies; the
CI-sized ``--quick`` default), ``fashion-mnist`` (the full default) and
``digits``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import typer
from rich.table import Table
from torch import nn

from fedleak.attacks.membership.classifier import (
    DPSGDProcedure,
    LocallyRandomizedProcedure,
    LossThresholdAttack,
    SGDProcedure,
    ShadowModelAttack,
    TrainProcedure,
    evaluate_membership,
    mitigation_efficiency,
)
from fedleak.data import load_dataset, skewed_purchases
from fedleak.errors import ConfigError, DataError
from fedleak.files import write_figure
from fedleak.privacy.ldp import laplace_pixelization, randomized_response

from .console import fmt, say, written
from .console import out as console
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path

__all__ = [
    "DATASETS",
    "FULL",
    "QUICK",
    "ClassifierBenchSettings",
    "run_mi_classifier_bench",
]

DATASETS: tuple[str, ...] = ("digits", "fashion-mnist", "skewed-purchases")


@dataclass(frozen=True)
class ClassifierBenchSettings:
    """Sizes of one ``mi-classifier`` run (see :data:`QUICK` and :data:`FULL`)."""

    dataset: str
    target_size: int
    num_shadows: int = 3
    hidden: int = 128
    epochs: int = 60
    batch_size: int = 16
    lr: float = 0.1
    max_grad_norm: float = 1.0
    ldp_epsilons: tuple[float, ...] = (100.0, 10.0, 3.0, 1.0)
    rr_epsilons: tuple[float, ...] = (8.0, 5.0, 3.0, 1.0, 0.1)
    noise_multipliers: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    test_size: int = 1000


QUICK = ClassifierBenchSettings(
    dataset="skewed-purchases",
    target_size=100,
    num_shadows=2,
    epochs=40,
    rr_epsilons=(3.0, 0.1),
    ldp_epsilons=(10.0, 1.0),
    noise_multipliers=(1.0, 4.0),
    test_size=300,
)
"""CI-sized: 100 synthetic carts per set, 2 shadows, 2 LDP and 2 CDP points.

The seed's own dataset of Ch. 4.3 is the CI default because it needs no files
and its binary features take randomised response; on ``digits`` a small MLP
generalises so well (and 10 records per class are so few for per-class attack
models) that the attack is near chance even without privacy.
"""

FULL = ClassifierBenchSettings(dataset="fashion-mnist", target_size=200)
"""Fashion-MNIST, 200 records per set, 3 shadows, 4-5 points per setting."""


@dataclass
class _Split:
    members: tuple[np.ndarray, np.ndarray]
    nonmembers: tuple[np.ndarray, np.ndarray]
    shadow: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    num_classes: int
    image_shape: tuple[int, int, int] | None


def _split(s: ClassifierBenchSettings, seed: int) -> _Split:
    rng = np.random.default_rng(seed)
    n = s.target_size
    if s.dataset == "skewed-purchases":

        def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
            return skewed_purchases(m, rng=rng, structure_seed=seed)

        return _Split(draw(n), draw(n), draw(4 * n), draw(s.test_size), 10, None)
    if s.dataset not in DATASETS:
        raise ConfigError(
            f"unknown dataset {s.dataset!r}; choose one of {list(DATASETS)}"
        )
    ds = load_dataset(s.dataset)
    x = ds.x_train.reshape(ds.num_train, -1)
    y = ds.y_train.astype(np.int64)
    need = 2 * n + 4 * n
    if x.shape[0] < need:
        raise DataError(
            f"{s.dataset} has {x.shape[0]} training records; target_size={n} "
            f"needs {need}"
        )
    perm = rng.permutation(x.shape[0])
    parts = np.split(perm[:need], [n, 2 * n])
    test_idx = rng.permutation(ds.num_test)[: s.test_size]
    return _Split(
        (x[parts[0]], y[parts[0]]),
        (x[parts[1]], y[parts[1]]),
        (x[parts[2]], y[parts[2]]),
        (
            ds.x_test.reshape(ds.num_test, -1)[test_idx],
            ds.y_test[test_idx].astype(np.int64),
        ),
        ds.num_classes,
        ds.input_shape,
    )


def _factory(
    num_features: int, hidden: int, num_classes: int
) -> Callable[[int], nn.Module]:
    def build(seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return nn.Sequential(
                nn.Linear(num_features, hidden),
                nn.ReLU(),
                nn.Linear(hidden, num_classes),
            )

    return build


def _ldp_randomizer(
    split: _Split, epsilon: float
) -> Callable[[np.ndarray, np.random.Generator], np.ndarray]:
    if split.image_shape is None:
        return lambda bits, rng: randomized_response(bits, epsilon, rng)
    shape = split.image_shape

    def pixelize(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        images = x.reshape(x.shape[0], *shape)
        out = laplace_pixelization(images, epsilon, rng)
        return out.reshape(x.shape[0], -1).astype(np.float32)

    return pixelize


def _points(
    s: ClassifierBenchSettings, split: _Split
) -> list[tuple[str, float, float, TrainProcedure]]:
    """Return ``(setting, parameter, record epsilon, procedure)`` of every point."""
    num_features = split.members[0].shape[1]
    factory = _factory(num_features, s.hidden, split.num_classes)
    base = SGDProcedure(factory, epochs=s.epochs, batch_size=s.batch_size, lr=s.lr)
    points: list[tuple[str, float, float, TrainProcedure]] = [
        ("original", math.nan, math.inf, base)
    ]
    binary = split.image_shape is None
    for eps in s.rr_epsilons if binary else s.ldp_epsilons:
        record_eps = eps * num_features if binary else eps
        procedure = LocallyRandomizedProcedure(
            base, _ldp_randomizer(split, eps), record_eps
        )
        points.append(("ldp", eps, record_eps, procedure))
    for z in s.noise_multipliers:
        procedure = DPSGDProcedure(
            factory,
            noise_multiplier=z,
            max_grad_norm=s.max_grad_norm,
            epochs=s.epochs,
            batch_size=s.batch_size,
            lr=s.lr,
        )
        points.append(("cdp", z, math.nan, procedure))
    return points


def _plot(path: Path, rows: list[dict[str, Any]]) -> str:
    """Draw MI precision and recall vs epsilon and precision vs accuracy."""

    def draw(fig: Any) -> None:
        axes = fig.subplots(1, 3)
        original = [r for r in rows if r["setting"] == "original"]
        for setting, marker in (("ldp", "o"), ("cdp", "s")):
            pts = sorted(
                (r for r in rows if r["setting"] == setting),
                key=lambda r: -r["epsilon"],
            )
            for ax, key in zip(axes[:2], ("precision", "recall"), strict=True):
                ax.plot(
                    [r["epsilon"] for r in pts],
                    [r[key] for r in pts],
                    marker=marker,
                    label=setting.upper(),
                )
            axes[2].scatter(
                [r["test_accuracy"] for r in pts],
                [r["precision"] for r in pts],
                marker=marker,
                label=setting.upper(),
            )
        for ax, key in zip(axes[:2], ("precision", "recall"), strict=True):
            ax.set_xscale("log")
            ax.invert_xaxis()
            ax.set_xlabel("epsilon (log scale, decreasing)")
            ax.set_ylabel(f"MI {key}")
            ax.set_ylim(0, 1.05)
            if original:
                ax.axhline(
                    original[0][key], color="gray", linestyle="--", label="original"
                )
            ax.axhline(0.5, color="red", linestyle=":", label="random guess")
            ax.legend(fontsize=8)
        if original:
            axes[2].scatter(
                [original[0]["test_accuracy"]],
                [original[0]["precision"]],
                color="gray",
                label="original",
            )  # fmt: skip
        axes[2].set_xlabel("target test accuracy")
        axes[2].set_ylabel("MI precision")
        axes[2].legend(fontsize=8)

    return write_figure(path, draw, (12.0, 3.8))


def _run_points(
    s: ClassifierBenchSettings, split: _Split, seed: int, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Train target and shadows and attack them, for every point."""
    rows: list[dict[str, Any]] = []
    points = _points(s, split)
    for index, (setting, parameter, record_eps, procedure) in enumerate(points):
        point_started = time.perf_counter()
        point_seed = int(
            np.random.SeedSequence([seed, index]).generate_state(1)[0] % 2**31
        )
        target = procedure(*split.members, point_seed)
        epsilon = (
            getattr(target, "epsilon", record_eps) if setting == "cdp" else record_eps
        )
        attack = ShadowModelAttack(
            procedure,
            split.num_classes,
            num_shadows=s.num_shadows,
            shadow_size=s.target_size,
            seed=point_seed + 1,
        ).fit(*split.shadow)
        result = evaluate_membership(
            target, attack, split.members, split.nonmembers, split.test, epsilon=epsilon
        )
        # Yeom et al.: the attacker knows the target's average training loss.
        loss_attack = LossThresholdAttack().calibrate(
            target.predict_proba(split.members[0]), split.members[1]
        )
        loss_result = evaluate_membership(
            target, loss_attack, split.members, split.nonmembers, split.test
        )
        row = {
            "setting": setting,
            "parameter": parameter,
            **asdict(result),
            "loss_threshold_auc": loss_result.auc,
            "loss_threshold_advantage": loss_result.advantage,
            "wall_s": time.perf_counter() - point_started,
        }
        rows.append(row)
        say(
            f"{setting} {parameter:.3g}: epsilon {epsilon:.3g} precision "
            f"{result.precision:.3f} recall {result.recall:.3f} test acc "
            f"{result.test_accuracy:.3f} ({row['wall_s']:.1f}s)"
        )
    return rows


@contextlib.contextmanager
def _quiet_accountant() -> Iterator[None]:
    """Silence dp-accounting's per-order "failed to converge" warnings (absl).

    They say an RDP order was left out of the epsilon computation, which the
    accountant handles itself; a benchmark prints its own progress instead.
    """
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_mi_classifier_bench(
    out: Path,
    *,
    quick: bool = False,
    dataset: str | None = None,
    seed: int = 0,
    settings: ClassifierBenchSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the LDP vs CDP shadow-model experiment, write JSON and plot.

    Parameters
    ----------
    out : Path
        The JSON file; the plot goes next to it as ``<stem>-ldp-cdp.png``.
    quick : bool, default=False
        :data:`QUICK` (digits, CI-sized) instead of :data:`FULL`.
    dataset : str, optional
        Override the dataset (one of :data:`DATASETS`).
    seed : int, default=0
        Run seed (data split, models, randomisers, noise).
    settings : ClassifierBenchSettings, optional
        Full control over sizes (overrides ``quick`` and ``dataset``).
    progress : callable, optional
        Receives one line of text per finished point.

    Returns
    -------
    dict
        The report written to ``out``.
    """
    s = settings or (QUICK if quick else FULL)
    if dataset is not None and settings is None:
        s = replace(s, dataset=dataset)
    if s.dataset not in DATASETS:
        raise ConfigError(
            f"unknown dataset {s.dataset!r}; choose one of {list(DATASETS)}"
        )
    out = record_path(out)
    say = progress or (lambda _: None)
    started = time.perf_counter()
    split = _split(s, seed)
    with _quiet_accountant():
        rows = _run_points(s, split, seed, say)
    original = rows[0]
    for row in rows:
        for key in ("precision", "recall"):
            try:
                row[f"phi_{key}"] = mitigation_efficiency(
                    accuracy_original=original["test_accuracy"],
                    accuracy_private=row["test_accuracy"],
                    precision_original=original[key],
                    precision_private=row[key],
                    num_classes=split.num_classes,
                )
            except DataError:
                row[f"phi_{key}"] = math.nan
    trends = {}
    for setting in ("ldp", "cdp"):
        pts = sorted(
            (r for r in rows if r["setting"] == setting), key=lambda r: -r["epsilon"]
        )
        if pts:
            trends[setting] = {
                "precision_at_largest_epsilon": pts[0]["precision"],
                "precision_at_smallest_epsilon": pts[-1]["precision"],
                "precision_falls": pts[-1]["precision"] < pts[0]["precision"],
                "precision_vs_original": pts[-1]["precision"] / original["precision"]
                if original["precision"]
                else math.nan,
            }
    record = BenchRecord("mi-classifier", out)
    plots = [_plot(record.sibling("ldp-cdp.png"), rows)]
    report: dict[str, Any] = {
        "quick": quick,
        "seed": seed,
        "settings": asdict(s),
        "data": {
            "dataset": s.dataset,
            "members": int(split.members[0].shape[0]),
            "nonmembers": int(split.nonmembers[0].shape[0]),
            "shadow_pool": int(split.shadow[0].shape[0]),
            "test": int(split.test[0].shape[0]),
            "ldp_randomizer": "randomized-response"
            if split.image_shape is None
            else "laplace-pixelization",
        },
        "torch_threads": torch.get_num_threads(),
        "points": rows,
        "trends": trends,
        "median_wall_s_per_point": float(np.median([r["wall_s"] for r in rows])),
        "plots": [Path(p).name for p in plots],  # next to the JSON
    }
    return record.finish(started, report)


def _classifier_table(report: dict[str, Any]) -> Table:
    table = Table(
        "DP", "param", "eps", "test acc", "prec", "rec", "AUC", "loss AUC", "phi",
        title="Shadow-model attack: LDP vs CDP (phi: Eq. 4.2 on precision)",
    )  # fmt: skip
    for row in report["points"]:
        table.add_row(
            "none" if row["setting"] == "original" else row["setting"],
            fmt(row["parameter"]),
            fmt(row["epsilon"]),
            fmt(row["test_accuracy"]),
            fmt(row["precision"]),
            fmt(row["recall"]),
            fmt(row["auc"]),
            fmt(row["loss_threshold_auc"]),
            fmt(row["phi_precision"]),
        )
    return table


def command(
    out: OutOption = Path("bench-mi-classifier.json"),
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="CI-sized: synthetic carts, few shadows and points."
        ),
    ] = False,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="skewed-purchases, digits or fashion-mnist (default: by --quick)."
        ),
    ] = None,
    seed: SeedOption = 0,
) -> None:
    """Shadow-model and loss-threshold MI on classifiers: LDP vs CDP."""
    report = run_mi_classifier_bench(
        out, quick=quick, dataset=dataset, seed=seed, progress=say
    )
    console.print(_classifier_table(report))
    console.print(f"wall time: {report['wall_s']:.1f} s", highlight=False)
    written(out, report["plots"])
