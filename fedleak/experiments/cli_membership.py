"""``fedleak bench membership`` and ``fedleak bench defenses`` (seed 000 Ch. 7.2-7.3).

Registered by :mod:`fedleak.cli`; the work is done by
:func:`fedleak.experiments.bench_membership.run_membership_bench` and
:func:`fedleak.experiments.bench_defenses.run_defenses_bench`.
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
    if value is None:
        return "-"
    if isinstance(value, int | float):
        return f"{value:.{digits}g}" if abs(value) >= 1000 else f"{value:.{digits}f}"
    return str(value)


def register(bench_app: typer.Typer, fail: Callable[[FedleakError], None]) -> None:
    """Add ``fedleak bench membership`` and ``fedleak bench defenses``."""
    out_console = Console()
    err_console = Console(stderr=True)

    def say(text: str) -> None:
        err_console.print(f"[dim]{escape(text)}[/]")

    @bench_app.command("membership")
    def bench_membership(
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
        from .bench_membership import DATASETS, run_membership_bench

        try:
            report = run_membership_bench(
                out,
                datasets=tuple(dataset) if dataset else DATASETS,
                batch_sizes=batch_size,
                quick=quick,
                seed=seed,
                progress=say,
            )
        except FedleakError as err:
            fail(err)
            return
        table = Table("dataset", "batch", "precision", "recall", "|V_t|", "rounds", "s")
        for row in report["rows"]:
            table.add_row(
                row["dataset"],
                str(row["batch_size"]),
                _fmt(row["precision"]),
                _fmt(row["recall"]),
                f"{row['mean_bag_size']:.0f}",
                str(row["rounds"]),
                f"{row['wall_s']:.1f}",
            )
        out_console.print(table)
        out_console.print(
            f"recall always 1: {report['recall_always_one']}; precision falls "
            f"with the batch: {report['precision_falls_with_batch']}",
            highlight=False,
        )
        out_console.print(f"written: {out}", highlight=False)

    @bench_app.command("defenses")
    def bench_defenses(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-defenses.json"
        ),
        quick: Annotated[
            bool, typer.Option("--quick", help="CI-sized data and fewer settings.")
        ] = False,
        table_name: Annotated[
            list[str] | None,
            typer.Option(
                "--table",
                help="vocabulary, share_fraction, dropout, participant_dp, "
                "record_dp (repeatable; default all).",
            ),
        ] = None,
        seed: Annotated[int, typer.Option(help="Run seed.")] = 0,
    ) -> None:
        """Defenses of Ch. 7.3 vs membership and property inference (Tables 7.5-7.7).

        Columns: membership precision / recall (MI P, MI R), property AUC,
        model accuracy and AUC, record- or participant-level epsilon.
        """
        from .bench_defenses import TABLES, run_defenses_bench

        try:
            report = run_defenses_bench(
                out,
                tables=tuple(table_name) if table_name else TABLES,
                quick=quick,
                seed=seed,
                progress=say,
            )
        except FedleakError as err:
            fail(err)
            return
        table = Table(
            "defense", "setting", "MI P", "MI R", "prop AUC", "acc", "AUC", "eps", "s"
        )
        for row in report["rows"]:
            eps = row["record_epsilon"] or row["participant_epsilon"]
            table.add_row(
                row["table"],
                "none" if row["setting"] is None else str(row["setting"]),
                _fmt(row["membership_precision"]),
                _fmt(row["membership_recall"]),
                _fmt(row["property_auc"]),
                _fmt(row["model_accuracy"]),
                _fmt(row["model_auc"]),
                _fmt(eps),
                f"{row['wall_s']:.1f}",
            )
        out_console.print(table)
        out_console.print(f"written: {out}", highlight=False)
