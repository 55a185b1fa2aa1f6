"""``fedleak bench audit`` and ``fedleak bench ppgf`` (seeds 002 and 003).

Registered by :mod:`fedleak.cli`; the work is done by
:func:`fedleak.experiments.bench_audit.run_audit_bench` and
:func:`fedleak.experiments.bench_ppgf.run_ppgf_bench`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fedleak.errors import FedleakError

__all__ = ["register"]


def _fmt(value: object, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a" if value is None else str(value)
    return f"{value:.{digits}f}"


def register(bench_app: typer.Typer, fail: Callable[[FedleakError], None]) -> None:
    """Add ``fedleak bench audit`` and ``fedleak bench ppgf`` to ``bench_app``."""
    out_console = Console()
    err_console = Console(stderr=True)

    def progress(text: str) -> None:
        err_console.print(f"[dim]{escape(text)}[/]")

    @bench_app.command("audit")
    def bench_audit(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-audit.json"
        ),
        quick: Annotated[
            bool,
            typer.Option(
                "--quick", help="CI-sized: 2 datasets, 60 trainings, 5 steps."
            ),
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
        train_size: Annotated[
            int | None, typer.Option(help="|D| (default 100).")
        ] = None,
        delta: Annotated[float, typer.Option(help="delta.")] = 0.01,
        seed: Annotated[int, typer.Option(help="Root seed.")] = 0,
    ) -> None:
        """Audit DP-SGD with the DI adversary: advantage, beliefs, empirical epsilon."""
        from .bench_audit import DEFAULT_RHO_BETAS, run_audit_bench

        try:
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
                progress=progress,
            )
        except FedleakError as err:
            fail(err)
            return
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
                _fmt(row["rho_beta"], 2),
                _fmt(row["epsilon"], 2),
                _fmt(row["rho_alpha"]),
                _fmt(row["advantage"]),
                f"[{row['advantage_ci'][0]:.2f}, {row['advantage_ci'][1]:.2f}]",
                _fmt(row["belief_violation_rate"]),
                _fmt(row["epsilon_from_sensitivity"], 2),
                _fmt(row["epsilon_from_belief"], 2),
                _fmt(row["epsilon_from_advantage"], 2),
                _fmt(row["mi_advantage"]),
                _fmt(row["wall_s"], 1),
            )
        out_console.print(table)
        out_console.print(f"summary: {report['summary']}", highlight=False)
        for plot in report["plots"]:
            out_console.print(f"written: {plot}", highlight=False)
        out_console.print(f"written: {out}", highlight=False)

    @bench_app.command("ppgf")
    def bench_ppgf(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-ppgf.json"
        ),
        quick: Annotated[
            bool,
            typer.Option("--quick", help="CI-sized: digits, few epsilons and epochs."),
        ] = False,
        dataset: Annotated[
            str | None,
            typer.Option(help="fashion-mnist (default when installed) or digits."),
        ] = None,
        epsilon: Annotated[
            list[float] | None,
            typer.Option("--epsilon", help="d_x privacy levels (repeatable)."),
        ] = None,
        members: Annotated[
            int | None, typer.Option(help="Source (member) records.")
        ] = None,
        seed: Annotated[int, typer.Option(help="Root seed.")] = 0,
    ) -> None:
        """Seed 003's framework: accuracy and MI AUC vs epsilon, next to DP-SGD."""
        from .bench_ppgf import run_ppgf_bench

        try:
            report = run_ppgf_bench(
                out,
                quick=quick,
                dataset=dataset,
                epsilons=tuple(epsilon) if epsilon else None,
                members=members,
                seed=seed,
                progress=progress,
            )
        except FedleakError as err:
            fail(err)
            return
        table = Table(
            "training data",
            "eps",
            "train acc",
            "test acc",
            "shadow AUC",
            "loss AUC",
            "grad AUC",
            "label agr.",
            "s",
        )
        for row in report["rows"]:
            table.add_row(
                row["method"],
                _fmt(row["epsilon"], 2),
                _fmt(row["train_accuracy"]),
                _fmt(row["test_accuracy"]),
                _fmt(row["black_box"]["auc"]),
                _fmt(row["loss_threshold"]["auc"]),
                _fmt(row["white_box"]["auc"]),
                _fmt(row.get("label_agreement")),
                _fmt(row["wall_s"], 1),
            )
        out_console.print(table)
        out_console.print(f"summary: {report['summary']}", highlight=False)
        for plot in report["plots"]:
            out_console.print(f"written: {plot}", highlight=False)
        out_console.print(f"written: {out}", highlight=False)
