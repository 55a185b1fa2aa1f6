"""``fedleak bench audit``: auditing DP-SGD with the DI adversary (seed 002 Section 6).

For each dataset, target posterior-belief bound ``rho_beta`` (seed 002 Table 3:
0.52, 0.75, 0.9, 0.99), neighbour type (bounded: replace a record;
unbounded: remove one) and sensitivity (local: noise scaled to
``||g(D) - g(D')||`` at each step; global: to ``C`` or ``2C``), the bench

1. turns ``rho_beta`` into epsilon and the DP-SGD noise multiplier
   (:func:`fedleak.privacy.identifiability.plan_dp_sgd`: Eq. 10 and the RDP
   tail bound of Theorem 1 ii);
2. picks ``D'`` by dataset sensitivity (Definition 6, Eqs. 18 and 20) with the
   dissimilarity the seed found best for the data (SSIM for images,
   Manhattan for tabular data);
3. trains ``repetitions`` times with full-batch DP-SGD while
   :class:`fedleak.attacks.audit.DIAdversary` updates its posterior belief
   after every step;
4. reports the analytic ``rho_alpha`` of the run, the empirical advantage with
   its Wilson 95 % interval, the fraction of final beliefs above ``rho_beta``
   (allowed: ``delta``), the empirical epsilon three ways (Section 5.3) and
   the loss-threshold MI adversary's advantage on the same models (the peer,
   seed 002 Fig. 7d-9d).

Datasets: scikit-learn's digits (8x8 images), scikit-learn's breast-cancer
table (30 standardised features; the stand-in for Adult) and, when
installed, Fashion-MNIST pooled to 14x14. ``D`` is a random subset of
``train_size`` records (seed 002 uses 100 for MNIST); bounded replacements
come from the rest of the data.

Output: ``FILE.json`` (schema below) and the plots ``FILE-advantage.png``
(empirical advantage vs analytic ``rho_alpha``) and ``FILE-epsilon.png``
(empirical vs target epsilon), written atomically.

JSON schema, version 1::

    {"schema_version": 1, "bench": "audit", "created": str,
     "versions": {...}, "parameters": {...}, "seed": int,
     "rows": [{"dataset", "bounded", "sensitivity", "rho_beta", "epsilon",
               "delta", "noise_multiplier", "rho_alpha", "rho_alpha_theorem2",
               "advantage", "advantage_ci", "advantage_within_ci",
               "belief_violation_rate", "belief_violation_ci",
               "violations_allowed", "epsilon_from_sensitivity",
               "epsilon_from_belief", "epsilon_from_advantage",
               "epsilon_from_advantage_eq15", "mi_advantage",
               "di_over_mi_advantage", "mean_local_sensitivity",
               "global_sensitivity", "wall_s", ...}],
     "summary": {"local_within_ci": "a/b", "median_abs_gap_local": float,
                 "median_abs_gap_global": float, "violations_ok": "a/b",
                 "median_di_over_mi": float, "median_wall_s": float},
     "plots": [str], "complete": bool, "wall_s": float}

The file is rewritten after every configuration (``"complete": false``, no
summary yet), so an interrupted run keeps what it computed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from fedleak.data.audit_tasks import AUDIT_DATASETS, load_audit_task
from fedleak.errors import ConfigError, DataError
from fedleak.files import write_figure

from .console import fmt, say, written
from .console import out as console
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path

__all__ = ["run_audit_bench"]

DEFAULT_RHO_BETAS: tuple[float, ...] = (0.52, 0.75, 0.9, 0.99)


def _factory(
    num_inputs: int, hidden: Sequence[int], num_classes: int
) -> Callable[[int], Any]:
    import torch
    from torch import nn

    def build(seed: int) -> nn.Module:
        """Build the MLP with PyTorch's default ``Linear`` initialisation.

        Drawn from a private ``torch.Generator``: seeding the global RNG
        (``torch.manual_seed``) costs milliseconds per call, which adds up
        over thousands of audited trainings.
        """
        gen = torch.Generator().manual_seed(seed)
        layers: list[nn.Module] = []
        width = num_inputs
        for h in [*hidden, num_classes]:
            layer = nn.Linear(width, h)
            bound = 1.0 / math.sqrt(width)
            with torch.no_grad():
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.uniform_(-bound, bound, generator=gen)
            layers += [layer, nn.ReLU()]
            width = h
        return nn.Sequential(*layers[:-1])

    return build


def _advantage_panel(ax: Any, rows: list[dict[str, Any]]) -> None:
    """One dataset and neighbour type: DI and MI advantage vs rho_beta."""
    from fedleak.privacy.identifiability import composed_gaussian_advantage

    for sens, color in (("local", "tab:red"), ("global", "tab:blue")):
        sel = [r for r in rows if r["sensitivity"] == sens]
        if not sel:
            continue
        xs = [r["rho_beta"] for r in sel]
        err = np.array(
            [
                [
                    r["advantage"] - r["advantage_ci"][0],
                    r["advantage_ci"][1] - r["advantage"],
                ]
                for r in sel
            ]
        ).T
        ax.errorbar(
            xs,
            [r["advantage"] for r in sel],
            yerr=err,
            fmt="o",
            color=color,
            capsize=3,
            label=f"DI, {sens} sensitivity",
        )
        ax.plot(
            xs,
            [r["mi_advantage"] for r in sel],
            "x",
            color=color,
            alpha=0.6,
            label=f"loss MI, {sens}",
        )
    if rows:
        grid = sorted({r["rho_beta"] for r in rows})
        ref = {r["rho_beta"]: r for r in rows}
        ax.plot(
            grid,
            [
                composed_gaussian_advantage(ref[g]["noise_multiplier"], ref[g]["steps"])
                for g in grid
            ],
            "--",
            color="tab:green",
            label="analytic rho_alpha",
        )


def _plot_advantage(rows: list[dict[str, Any]], out: Path) -> str:
    """Plot the advantages vs rho_beta, one row of panels per dataset."""
    datasets = sorted({r["dataset"] for r in rows})

    def draw(fig: Any) -> None:
        axes = fig.subplots(len(datasets), 2, squeeze=False)
        for i, name in enumerate(datasets):
            for j, (bounded, label) in enumerate(
                [(True, "bounded"), (False, "unbounded")]
            ):
                ax = axes[i][j]
                _advantage_panel(
                    ax,
                    [
                        r
                        for r in rows
                        if r["dataset"] == name and r["bounded"] == bounded
                    ],
                )
                ax.set(title=f"{name}, {label}", xlabel="rho_beta", ylabel="advantage")
                ax.grid(alpha=0.3)
                if i == 0 and j == 0:
                    ax.legend(fontsize=7)

    path = out.with_name(f"{out.stem}-advantage.png")
    return write_figure(path, draw, (10, 3.2 * len(datasets)))


def _plot_epsilon(rows: list[dict[str, Any]], out: Path) -> str:
    """Plot the three empirical epsilons against the target epsilon."""
    ways = [
        ("epsilon_from_sensitivity", "from sensitivity"),
        ("epsilon_from_belief", "from posterior belief"),
        ("epsilon_from_advantage", "from advantage"),
    ]
    top = max(r["epsilon"] for r in rows) * 1.3

    def draw(fig: Any) -> None:
        axes = fig.subplots(1, 3, squeeze=False)
        for k, (key, title) in enumerate(ways):
            ax = axes[0][k]
            for sens, color in (("local", "tab:red"), ("global", "tab:blue")):
                sel = [
                    r
                    for r in rows
                    if r["sensitivity"] == sens and math.isfinite(r[key])
                ]
                ax.plot(
                    [r["epsilon"] for r in sel],
                    [r[key] for r in sel],
                    "o",
                    color=color,
                    alpha=0.7,
                    label=sens,
                )
            ax.plot([0, top], [0, top], "--", color="tab:green", label="ideal")
            ax.set(
                title=f"empirical epsilon {title}",
                xlabel="target epsilon",
                ylabel="empirical epsilon",
            )
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)

    path = out.with_name(f"{out.stem}-epsilon.png")
    return write_figure(path, draw, (13, 3.8))


def _plot(rows: list[dict[str, Any]], out: Path) -> list[str]:
    return [_plot_advantage(rows, out), _plot_epsilon(rows, out)]


@dataclass(frozen=True)
class _AuditPlan:
    """The sizes and DP-SGD settings of one audit bench run."""

    rho_betas: tuple[float, ...]
    repetitions: int
    steps: int
    train_size: int
    delta: float
    lr: float
    max_grad_norm: float
    seed: int


def _datasets(datasets: Sequence[str] | None, quick: bool) -> list[str]:
    """Return the datasets to audit: as given, else digits, breast cancer, FMNIST."""
    from fedleak.data import find_data_dir

    if datasets is None:
        names = ["digits", "breast-cancer"]
        if not quick:
            try:
                find_data_dir("fashion-mnist")
                names.append("fashion-mnist")
            except DataError:
                pass
    else:
        names = list(datasets)
    unknown = [n for n in names if n not in AUDIT_DATASETS]
    if unknown:
        raise ConfigError(
            f"unknown datasets {unknown}; choose from {list(AUDIT_DATASETS)}"
        )
    return names


def _audit_row(
    name: str,
    adversary: Any,
    plan: Any,
    audit: _AuditPlan,
    run_seed: int,
    neighbours: Any,
    measure: str,
) -> dict[str, Any]:
    """Audit one configuration and return its JSON row."""
    t0 = time.perf_counter()
    report = adversary.audit(
        audit.repetitions, seed=run_seed, epsilon=plan.epsilon, delta=audit.delta
    )
    wall = time.perf_counter() - t0
    row = {"dataset": name, **report.as_dict()}
    row.update(
        {
            "rho_alpha_theorem2": plan.rho_alpha,
            "advantage_within_ci": report.advantage_consistent,
            "violations_allowed": audit.delta,
            "violations_ok": report.belief_violation_ci[0] <= audit.delta,
            "di_over_mi_advantage": (
                report.advantage / report.mi_advantage
                if report.mi_advantage > 0
                else None
            ),
            "differing_record": neighbours.index,
            "dissimilarity": measure,
            "wall_s": wall,
        }
    )
    return row


def _describe_row(row: dict[str, Any]) -> str:
    return (
        f"{row['dataset']} {'bounded' if row['bounded'] else 'unbounded'} "
        f"{row['sensitivity']} rho_beta={row['rho_beta']}: adv "
        f"{row['advantage']:.3f} [{row['advantage_ci'][0]:.3f}, "
        f"{row['advantage_ci'][1]:.3f}] vs rho_alpha {row['rho_alpha']:.3f}, "
        f"violations {row['belief_violation_rate']:.3f}, {row['wall_s']:.1f}s"
    )


def _audit_dataset(
    i: int,
    name: str,
    audit: _AuditPlan,
    plans: dict[float, Any],
    on_row: Callable[[dict[str, Any]], None],
) -> None:
    """Audit every neighbour type, sensitivity and rho_beta of dataset ``i``."""
    from fedleak.attacks.audit.adversary import DIAdversary
    from fedleak.attacks.audit.neighbours import most_dissimilar_neighbours

    size = audit.train_size
    task = load_audit_task(name, size, min(200, 4 * size), audit.seed)
    factory = _factory(task.x.shape[1], task.hidden, task.num_classes)
    # Repetitions per batch: about 20M per-example gradient entries.
    num_params = sum(p.numel() for p in factory(0).parameters())
    chunk = max(8, min(256, 20_000_000 // ((size + 1) * num_params)))
    for bounded in (False, True):
        nb = most_dissimilar_neighbours(
            task.x,
            task.y,
            bounded=bounded,
            measure=task.measure,
            candidates_x=task.pool_x if bounded else None,
            candidates_y=task.pool_y if bounded else None,
            image_shape=task.image_shape,
        )
        for sensitivity in ("local", "global"):
            for j, rb in enumerate(audit.rho_betas):
                plan = plans[rb]
                # Independent runs per (dataset, rho_beta); local and global
                # share theirs (a paired comparison).
                run_seed = int(
                    np.random.SeedSequence([audit.seed, i, j]).generate_state(1)[0]
                )
                adversary = DIAdversary(
                    factory,
                    nb,
                    steps=audit.steps,
                    lr=audit.lr,
                    max_grad_norm=audit.max_grad_norm,
                    noise_multiplier=plan.noise_multiplier,
                    sensitivity=sensitivity,
                    chunk_size=chunk,
                )
                row = _audit_row(
                    name, adversary, plan, audit, run_seed, nb, task.measure
                )
                row["rho_beta"] = rb
                on_row(row)


def _parameters(
    audit: _AuditPlan, quick: bool, names: list[str], plans: dict[float, Any]
) -> dict[str, Any]:
    return {
        "quick": quick,
        "datasets": names,
        "rho_betas": list(audit.rho_betas),
        "repetitions": audit.repetitions,
        "steps": audit.steps,
        "train_size": audit.train_size,
        "delta": audit.delta,
        "lr": audit.lr,
        "max_grad_norm": audit.max_grad_norm,
        "noise_multipliers": {str(rb): p.noise_multiplier for rb, p in plans.items()},
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    local = [r for r in rows if r["sensitivity"] == "local"]
    glob = [r for r in rows if r["sensitivity"] == "global"]
    ratios = [
        r["di_over_mi_advantage"] for r in rows if r["di_over_mi_advantage"] is not None
    ]
    return {
        "local_within_ci": (
            f"{sum(r['advantage_within_ci'] for r in local)}/{len(local)}"
        ),
        "median_abs_gap_local": statistics.median(
            abs(r["advantage"] - r["rho_alpha"]) for r in local
        ),
        "median_abs_gap_global": statistics.median(
            abs(r["advantage"] - r["rho_alpha"]) for r in glob
        ),
        "violations_ok": f"{sum(r['violations_ok'] for r in rows)}/{len(rows)}",
        "max_violation_rate": max(r["belief_violation_rate"] for r in rows),
        "median_di_over_mi": statistics.median(ratios) if ratios else None,
        "median_wall_s": statistics.median(r["wall_s"] for r in rows),
    }


def run_audit_bench(
    out: str | Path,
    *,
    quick: bool = False,
    datasets: Sequence[str] | None = None,
    rho_betas: Sequence[float] = DEFAULT_RHO_BETAS,
    repetitions: int | None = None,
    steps: int | None = None,
    train_size: int | None = None,
    delta: float = 0.01,
    lr: float = 0.5,
    max_grad_norm: float = 1.0,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the audit bench and write ``out`` (JSON) and its plots.

    Parameters
    ----------
    out : str or pathlib.Path
        JSON file to write.
    quick : bool, default=False
        CI-sized defaults: digits and breast cancer, 60 repetitions, 5 steps,
        ``|D| = 30``. Otherwise 1,000 repetitions, 30 steps, ``|D| = 100``
        and Fashion-MNIST too when installed.
    datasets : sequence of str, optional
        Subset of :data:`fedleak.data.AUDIT_DATASETS`.
    rho_betas : sequence of float
        Target posterior-belief bounds.
    repetitions, steps, train_size : int, optional
        Override the defaults above.
    delta : float, default=0.01
        Seed 002 uses 0.01 for |D| = 100.
    lr, max_grad_norm : float
        DP-SGD learning rate and clipping norm.
    seed : int, default=0
        Root seed.
    progress : callable, optional
        Receives one line of text per configuration.

    Returns
    -------
    dict
        The JSON document.
    """
    import torch

    from fedleak.privacy.identifiability import plan_dp_sgd

    out = record_path(out)
    audit = _AuditPlan(
        rho_betas=tuple(rho_betas),
        repetitions=repetitions or (60 if quick else 1000),
        steps=steps or (5 if quick else 30),
        train_size=train_size or (30 if quick else 100),
        delta=delta,
        lr=lr,
        max_grad_norm=max_grad_norm,
        seed=seed,
    )
    if audit.repetitions < 10 or audit.steps < 1 or audit.train_size < 4:
        raise ConfigError("need repetitions >= 10, steps >= 1 and train_size >= 4")
    if not rho_betas or any(not 0.5 < r < 1 for r in rho_betas):
        raise ConfigError(f"rho_betas must lie in (0.5, 1); got {list(rho_betas)}")
    names = _datasets(datasets, quick)
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    started = time.perf_counter()
    plans = {rb: plan_dp_sgd(rb, delta, steps=audit.steps) for rb in rho_betas}
    report_doc = BenchRecord("audit", out)
    rows = report_doc.start_rows(
        {"parameters": _parameters(audit, quick, names, plans), "seed": seed}
    )

    def keep(row: dict[str, Any]) -> None:
        report_doc.add_row(row, started)
        if progress is not None:
            progress(_describe_row(row))

    for i, name in enumerate(names):
        _audit_dataset(i, name, audit, plans, keep)
    return report_doc.finish_rows(started, _summary(rows), _plot(rows, out))


def command(
    out: OutOption = Path("bench-audit.json"),
    quick: Annotated[
        bool,
        typer.Option("--quick", help="CI-sized: 2 datasets, 60 trainings, 5 steps."),
    ] = False,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset", help="digits, breast-cancer, fashion-mnist (repeatable)."
        ),
    ] = None,
    rho_beta: Annotated[
        list[float] | None,
        typer.Option("--rho-beta", help="Posterior-belief bounds (repeatable)."),
    ] = None,
    repetitions: Annotated[
        int | None, typer.Option(help="Trainings per configuration (default 1000).")
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="DP-SGD steps (default 30).")
    ] = None,
    train_size: Annotated[int | None, typer.Option(help="|D| (default 100).")] = None,
    delta: Annotated[float, typer.Option(help="delta.")] = 0.01,
    seed: SeedOption = 0,
) -> None:
    """Audit DP-SGD with the DI adversary: advantage, beliefs, empirical epsilon."""
    report = run_audit_bench(
        out,
        quick=quick,
        datasets=dataset or None,
        rho_betas=tuple(rho_beta) if rho_beta else DEFAULT_RHO_BETAS,
        repetitions=repetitions,
        steps=steps,
        train_size=train_size,
        delta=delta,
        seed=seed,
        progress=say,
    )
    table = Table(
        "dataset",
        "DP",
        "sens.",
        "rho_beta",
        "eps",
        "rho_alpha",
        "adv",
        "95% CI",
        "viol.",
        "eps(i)",
        "eps(ii)",
        "eps(iii)",
        "MI adv",
        "s",
    )
    for row in report["rows"]:
        table.add_row(
            row["dataset"],
            "B" if row["bounded"] else "U",
            row["sensitivity"],
            fmt(row["rho_beta"], 2),
            fmt(row["epsilon"], 2),
            fmt(row["rho_alpha"]),
            fmt(row["advantage"]),
            f"[{row['advantage_ci'][0]:.2f}, {row['advantage_ci'][1]:.2f}]",
            fmt(row["belief_violation_rate"]),
            fmt(row["epsilon_from_sensitivity"], 2),
            fmt(row["epsilon_from_belief"], 2),
            fmt(row["epsilon_from_advantage"], 2),
            fmt(row["mi_advantage"]),
            fmt(row["wall_s"], 1),
        )
    console.print(table)
    console.print(f"summary: {report['summary']}", highlight=False)
    for plot in report["plots"]:
        console.print(f"written: {plot}", highlight=False)
    written(out)
