"""The ``fedleak`` command line.

``fedleak run CONFIG``      run an experiment file as a Flower simulation
``fedleak quickstart``      run the bundled ``sim_configs/quickstart.toml``
``fedleak datasets``        which datasets this machine has, and where
``fedleak bench ...``       benchmarks that write JSON, peers measured alongside

Errors fedleak raises on purpose (bad config, missing data) print one line
``error: ...`` and exit with status 2; nothing is written for them.
"""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .errors import FedleakError

__all__ = ["app", "main"]

app = typer.Typer(
    name="fedleak",
    help="Measure and limit privacy leakage in federated learning (Flower plugin).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    help="Benchmarks: write JSON with fedleak and its peer side by side."
)
app.add_typer(bench_app, name="bench")

_err = Console(stderr=True)
_out = Console()

EXIT_USAGE = 2


def _fail(err: FedleakError) -> None:
    one_line = " ".join(
        line.strip(" -") for line in str(err).splitlines() if line.strip()
    )
    _err.print(
        f"[bold red]error:[/] {escape(one_line)}", highlight=False, soft_wrap=True
    )
    raise typer.Exit(EXIT_USAGE)


def _bundled_config(name: str) -> Path:
    local = Path("sim_configs") / name
    if local.is_file():
        return local
    return Path(str(resources.files("fedleak.sim_configs") / name))


def _run(
    config_path: Path,
    out: Path | None,
    overrides: list[str],
    ray_address: str | None,
    verbose: bool,
) -> None:
    from .experiments import load_config, preflight, run_experiment

    try:
        config = load_config(config_path, overrides)
        preflight(config)
    except FedleakError as err:
        _fail(err)
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[metric]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_err,
        transient=False,
        disable=verbose,
    )
    task = progress.add_task(
        f"{config.name} ({config.strategy.name}, "
        f"{config.federation.num_clients} clients)",
        total=config.rounds,
        metric="",
    )

    def on_round(server_round: int, row: dict[str, Any]) -> None:
        acc = row.get("server", {}).get("test-accuracy")
        metric = f"test acc {acc:.3f}" if isinstance(acc, float) else ""
        progress.update(task, completed=server_round, metric=metric)

    started = time.perf_counter()
    try:
        with progress:
            outcome = run_experiment(
                config,
                out=out,
                ray_address=ray_address,
                verbose=verbose,
                on_round=on_round,
            )
    except FedleakError as err:
        _fail(err)
        return
    from .experiments.results import count_usable_rounds

    if count_usable_rounds(outcome.results) == 0:
        _err.print(
            "[bold red]error:[/] no client reply could be used in any round "
            "(see the warnings above); the run's files are in "
            f"{escape(str(outcome.run_dir))}",
            highlight=False,
        )
        raise typer.Exit(1)
    final = outcome.results["final"]
    timing = outcome.results["timing"]
    acc = final.get("test-accuracy")
    line = f"final test accuracy {acc:.4f}" if isinstance(acc, float) else "done"
    median = timing.get("median_round_after_first_s")
    median_text = f", median round {median:.3f} s" if isinstance(median, float) else ""
    _out.print(
        f"{line} after {config.rounds} rounds in {time.perf_counter() - started:.1f} s"
        f"{median_text}\nresults: {outcome.run_dir / 'results.json'}",
        highlight=False,
    )


@app.command()
def run(
    config: Annotated[
        Path, typer.Argument(help="Experiment TOML file (see sim_configs/).")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Run directory (default runs/<name>/<timestamp>)."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a key, e.g. --set strategy.learning_rate=0.1 (repeatable).",
        ),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Use an existing Ray cluster.")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Show Flower and Ray logs.")
    ] = False,
) -> None:
    """Run an experiment file as a Flower simulation on Ray."""
    _run(config, out, set_ or [], ray_address, verbose)


@app.command()
def quickstart(
    out: Annotated[Path | None, typer.Option("--out", help="Run directory.")] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Show Flower and Ray logs.")
    ] = False,
) -> None:
    """Run sim_configs/quickstart.toml: SyncSGD on digits, 4 clients, about a minute."""
    _run(_bundled_config("quickstart.toml"), out, [], None, verbose)


@app.command()
def datasets() -> None:
    """List the datasets fedleak can load on this machine, and where they are."""
    from .data import dataset_status

    table = Table("dataset", "available", "location / how to get it")
    for status in dataset_status():
        table.add_row(
            status.name,
            "[green]yes[/]" if status.available else "[red]no[/]",
            status.location if status.available else status.hint,
        )
    _out.print(table)


@bench_app.command("strategies")
def bench_strategies(
    out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
        "bench-strategies.json"
    ),
    clients: Annotated[int, typer.Option(help="Simulated clients.")] = 10,
    rounds: Annotated[int, typer.Option(help="Rounds per strategy per block.")] = 10,
    blocks: Annotated[
        int, typer.Option(help="Blocks (each runs every strategy once, rotated).")
    ] = 3,
    dataset: Annotated[
        str, typer.Option(help="digits, fashion-mnist or mnist.")
    ] = "digits",
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Time rounds of SyncSGD and ModelAveraging vs Flower's FedAvg, same simulation."""
    from .experiments.bench import run_strategy_bench

    try:
        report = run_strategy_bench(
            out,
            clients=clients,
            rounds=rounds,
            blocks=blocks,
            dataset=dataset,
            verbose=verbose,
        )
    except FedleakError as err:
        _fail(err)
        return
    table = Table("strategy", "median round (s)", "x FedAvg", "rounds timed")
    for name, stats in report["strategies"].items():
        table.add_row(
            name,
            f"{stats['median_round_s']:.4f}",
            f"{report['ratios_vs_fedavg'][name]:.2f}",
            str(len(stats["round_s"])),
        )
    _out.print(table)
    _out.print(f"written: {out}", highlight=False)


@bench_app.command("secagg")
def bench_secagg(
    out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
        "bench-secagg.json"
    ),
    clients: Annotated[
        list[int] | None, typer.Option("--clients", help="N values (repeatable).")
    ] = None,
    lengths: Annotated[
        list[int] | None, typer.Option("--length", help="L values (repeatable).")
    ] = None,
    rounds: Annotated[int, typer.Option(help="Rounds per method per block.")] = 4,
    blocks: Annotated[int, typer.Option(help="Blocks, methods rotated.")] = 2,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Secure aggregation vs FedAvg and Flower's SecAgg+, plus the primitives' floor."""
    from .experiments.bench_secagg import run_secagg_bench

    try:
        report = run_secagg_bench(
            out,
            clients=clients or (10, 30),
            lengths=lengths or (100_000, 1_000_000),
            rounds=rounds,
            blocks=blocks,
            verbose=verbose,
            progress=lambda text: _err.print(f"[dim]{escape(text)}[/]"),
        )
    except FedleakError as err:
        _fail(err)
        return
    table = Table(
        "N",
        "L",
        "FedAvg s",
        "SA s",
        "SecAgg+ s",
        "SA/FedAvg",
        "SecAgg+/SA",
        "SA rel err",
        "SecAgg+ rel err",
    )
    for row in report["federated"]:
        table.add_row(
            str(row["n_clients"]),
            str(row["length"]),
            f"{row['fedavg']['median_round_s']:.3f}",
            f"{row['secagg']['median_round_s']:.3f}",
            f"{row['secaggplus']['median_round_s']:.3f}",
            f"{row['secagg']['vs_fedavg']:.2f}",
            f"{row['secaggplus_vs_secagg']:.2f}",
            f"{row['secagg']['max_rel_error']:.1e}",
            f"{row['secaggplus']['max_rel_error']:.1e}",
        )
    _out.print(table)
    prim = Table("N", "L", "client mask ms", "floor ms", "x floor", "server sum ms")
    for row in [
        *report["primitives"],
        report["masking_target"],
        *report["seed_setting"],
    ]:
        prim.add_row(
            str(row["n_users"]),
            str(row["length"]),
            f"{row['client_mask_s'] * 1e3:.2f}",
            f"{row['floor_mask_s'] * 1e3:.2f}",
            f"{row['client_mask_vs_floor']:.2f}",
            f"{row['server_sum_s'] * 1e3:.2f}",
        )
    _out.print(prim)
    seed_bytes = Table("N", "L", "user->server B", "thesis", "server->user B", "thesis")
    for row in report["table_4_1"]:
        seed_bytes.add_row(
            str(row["n_users"]),
            str(row["length"]),
            str(row["user_to_server_bytes"]),
            str(row["thesis_user_to_tally_bytes"]),
            str(row["server_to_user_bytes"]),
            str(row["thesis_tally_to_user_bytes"]),
        )
    _out.print(seed_bytes)
    _out.print(f"written: {out}", highlight=False)


#: Benchmark command modules, one per capability: each is
#: ``fedleak.experiments.cli_<name>`` and defines ``register(bench_app, fail)``,
#: which adds its ``fedleak bench <name> ...`` commands. Heavy imports stay
#: inside the commands so ``fedleak --help`` stays fast.
_BENCH_MODULES: tuple[str, ...] = (
    "property",
    "membership",
    "sketches",
    "dpgm",
    "mi",
    "audit",
)


def _register_bench_modules() -> None:
    from importlib import import_module

    for name in _BENCH_MODULES:
        try:
            module = import_module(f"fedleak.experiments.cli_{name}")
        except ModuleNotFoundError as err:
            if err.name != f"fedleak.experiments.cli_{name}":
                raise
            continue
        module.register(bench_app, _fail)


_register_bench_modules()


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        _err.print("interrupted: files already written in the run directory are kept")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
