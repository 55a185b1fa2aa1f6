"""``fedleak bench property <experiment>``: property inference (seed 000 Ch. 7.2).

Registered by :mod:`fedleak.cli`; the work is done by
:func:`fedleak.experiments.bench_property.run_property_bench`.
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

__all__ = ["EXPERIMENT_NAMES", "register"]

#: The experiments of ``fedleak bench property`` (see bench_property).
EXPERIMENT_NAMES: tuple[str, ...] = (
    "two-party",
    "fraction",
    "rounds",
    "active",
    "multi-party",
    "model-averaging",
    "join",
    "text",
)


def _fmt(value: object) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.3f}"


def register(bench_app: typer.Typer, fail: Callable[[FedleakError], None]) -> None:
    """Add ``fedleak bench property`` to ``bench_app``."""
    out_console = Console()
    err_console = Console(stderr=True)

    @bench_app.command("property")
    def bench_property(
        experiment: Annotated[
            str,
            typer.Argument(help="Experiment: " + ", ".join(EXPERIMENT_NAMES) + "."),
        ],
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-property.json"
        ),
        quick: Annotated[
            bool, typer.Option("--quick", help="CI-sized: few rounds and points.")
        ] = False,
        seed: Annotated[int, typer.Option(help="Run seed.")] = 0,
        rounds: Annotated[
            int | None, typer.Option(help="Override the rounds of every run.")
        ] = None,
        trials: Annotated[
            int | None,
            typer.Option(help="model-averaging: trials per arm (thesis: 8)."),
        ] = None,
        secagg: Annotated[
            bool | None,
            typer.Option(
                "--secagg/--no-secagg",
                help="Also run under secure aggregation (needs >= 3 clients).",
            ),
        ] = None,
        properties: Annotated[
            list[str] | None,
            typer.Option(
                "--property",
                help="two-party: watermark, inverted or blurred (repeatable).",
            ),
        ] = None,
        verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
    ) -> None:
        """Property inference against Flower clients: AUC, scores and plots."""
        from .bench_property import run_property_bench

        try:
            report = run_property_bench(
                experiment,
                out,
                quick=quick,
                seed=seed,
                rounds=rounds,
                trials=trials,
                secagg=secagg,
                properties=properties or (),
                verbose=verbose,
                progress=lambda text: err_console.print(f"[dim]{escape(text)}[/]"),
            )
        except FedleakError as err:
            fail(err)
            return
        table = Table("run", "rounds", "K", "AUC", "mean score", "test acc", "wall s")
        for row in report["runs"]:
            table.add_row(
                row["label"],
                str(row["rounds"]),
                str(row["num_clients"]),
                _fmt(row["auc"]),
                _fmt(row["dataset_score"]),
                _fmt(row["test_accuracy"]),
                f"{row['wall_s']:.1f}",
            )
        out_console.print(table)
        out_console.print(f"summary: {report['summary']}", highlight=False)
        for plot in report["plots"]:
            out_console.print(f"written: {out.with_name(plot)}", highlight=False)
        out_console.print(f"written: {out}", highlight=False)
