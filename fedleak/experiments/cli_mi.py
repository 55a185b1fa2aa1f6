"""``fedleak bench mi-generative`` and ``fedleak bench mi-classifier``.

Registered by :mod:`fedleak.cli`; the work is done by
:func:`fedleak.experiments.bench_mi_generative.run_mi_generative_bench` and
:func:`fedleak.experiments.bench_mi_classifier.run_mi_classifier_bench`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fedleak.errors import FedleakError

__all__ = ["register"]


def _fmt(value: object) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if not isinstance(value, int | float):
        return "n/a"
    return f"{value:.3g}" if abs(value) >= 10 else f"{value:.3f}"


def _generative_tables(report: dict[str, Any]) -> list[Table]:
    attacks = Table(
        "attack", "target", "top-n acc", "chance", "lift", "single MI", "set MI",
        title="Top-n accuracy over the pool; single/set MI on M vs M records",
    )  # fmt: skip
    for run in report["white_box"]:
        kind = "conditional DCGAN" if run["conditional"] else "DCGAN"
        attacks.add_row(
            "white-box",
            kind,
            _fmt(run["final_accuracy"]),
            _fmt(run["baseline"]),
            _fmt(run["lift"]),
            _fmt(run["single_accuracy"]),
            _fmt(run["set_accuracy"]),
        )
    for run in report["black_box"] or []:
        attacks.add_row(
            "black-box",
            run["target"],
            _fmt(run["final_accuracy"]),
            _fmt(run["baseline"]),
            _fmt(run["lift"]),
            _fmt(run["single_accuracy"]),
            _fmt(run["set_accuracy"]),
        )
    for run in report["auxiliary"]:
        attacks.add_row(
            f"{run['setting'][:4]}. {run['scenario']} d={run['delay_steps']}",
            "DCGAN",
            _fmt(run["final_accuracy"]),
            _fmt(run["baseline"]),
            _fmt(run["lift"]),
            "",
            "",
        )
    if report["monte_carlo"] is None:
        return [attacks]
    rec = report["monte_carlo"]["reconstruction"]
    attacks.add_row(
        "reconstruction",
        "VAE",
        "",
        "",
        "",
        _fmt(rec["single_accuracy"]),
        _fmt(rec["set_accuracy"]),
    )
    mc = Table(
        "model", "distance", "heuristic", "variant", "single MI", "set MI",
        title="Monte Carlo attack (chance 0.5)",
    )  # fmt: skip
    for row in report["monte_carlo"]["rows"]:
        mc.add_row(
            row["model"],
            row["distance"],
            row["heuristic"],
            row["variant"],
            _fmt(row["single_accuracy"]),
            _fmt(row["set_accuracy"]),
        )
    return [attacks, mc]


def _classifier_table(report: dict[str, Any]) -> Table:
    table = Table(
        "DP", "param", "eps", "test acc", "prec", "rec", "AUC", "loss AUC", "phi",
        title="Shadow-model attack: LDP vs CDP (phi: Eq. 4.2 on precision)",
    )  # fmt: skip
    for row in report["points"]:
        table.add_row(
            "none" if row["setting"] == "original" else row["setting"],
            _fmt(row["parameter"]),
            _fmt(row["epsilon"]),
            _fmt(row["test_accuracy"]),
            _fmt(row["precision"]),
            _fmt(row["recall"]),
            _fmt(row["auc"]),
            _fmt(row["loss_threshold_auc"]),
            _fmt(row["phi_precision"]),
        )
    return table


def register(bench_app: typer.Typer, fail: Callable[[FedleakError], None]) -> None:
    """Add ``fedleak bench mi-generative`` and ``fedleak bench mi-classifier``."""
    out_console = Console()
    err_console = Console(stderr=True)

    def say(text: str) -> None:
        err_console.print(f"[dim]{escape(text)}[/]")

    @bench_app.command("mi-generative")
    def bench_mi_generative(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-mi-generative.json"
        ),
        quick: Annotated[
            bool,
            typer.Option("--quick", help="CI-sized: digits, 400-record pool."),
        ] = False,
        scale: Annotated[
            str | None,
            typer.Option(
                help="quick (= --quick), cpu (default: Fashion-MNIST, 1,000-record "
                "pool, about half an hour on 2 cores) or thesis (6,000-record pool, "
                "seed schedules; use a GPU).",
            ),
        ] = None,
        dataset: Annotated[
            str | None,
            typer.Option(help="digits or fashion-mnist (default: by --quick)."),
        ] = None,
        seed: Annotated[int, typer.Option(help="Run seed.")] = 0,
        device: Annotated[
            str, typer.Option(help="Torch device of the training, e.g. cuda.")
        ] = "cpu",
        part: Annotated[
            list[str] | None,
            typer.Option(
                "--part",
                help="Attack to run besides white-box (repeatable): black-box, "
                "auxiliary, monte-carlo. Default: all.",
            ),
        ] = None,
    ) -> None:
        """MI on generative models: white/black-box, auxiliary, Monte Carlo."""
        from .bench_mi_generative import run_mi_generative_bench

        try:
            report = run_mi_generative_bench(
                out,
                quick=quick,
                dataset=dataset,
                seed=seed,
                device=device,
                parts=part,
                progress=say,
                scale=scale,
            )
        except FedleakError as err:
            fail(err)
            return
        for table in _generative_tables(report):
            out_console.print(table)
        out_console.print(f"wall time: {report['wall_s']:.1f} s", highlight=False)
        for plot in report["plots"]:
            out_console.print(f"written: {out.with_name(plot)}", highlight=False)
        out_console.print(f"written: {out}", highlight=False)

    @bench_app.command("mi-classifier")
    def bench_mi_classifier(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-mi-classifier.json"
        ),
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
        seed: Annotated[int, typer.Option(help="Run seed.")] = 0,
    ) -> None:
        """Shadow-model and loss-threshold MI on classifiers: LDP vs CDP."""
        from .bench_mi_classifier import run_mi_classifier_bench

        try:
            report = run_mi_classifier_bench(
                out, quick=quick, dataset=dataset, seed=seed, progress=say
            )
        except FedleakError as err:
            fail(err)
            return
        out_console.print(_classifier_table(report))
        out_console.print(f"wall time: {report['wall_s']:.1f} s", highlight=False)
        for plot in report["plots"]:
            out_console.print(f"written: {out.with_name(plot)}", highlight=False)
        out_console.print(f"written: {out}", highlight=False)
