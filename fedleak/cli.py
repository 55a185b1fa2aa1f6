"""The ``fedleak`` command line.

``fedleak run CONFIG``      run an experiment file as a Flower simulation
``fedleak quickstart``      run the bundled ``sim_configs/quickstart.toml``
``fedleak datasets``        which datasets this machine has, and where
``fedleak bench NAME ...``  benchmarks that write JSON, peers measured alongside

Errors fedleak raises on purpose (bad config, missing data) print one line
``error: ...`` and exit with status 2; they are caught here, once, in
:func:`main`. Nothing heavy is imported before a command needs it: the help
pages and a configuration error answer without loading torch, Flower or Ray,
and a benchmark's module loads only when that benchmark runs.
"""

from __future__ import annotations

import functools
import signal
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import click
import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from .bench import BENCHMARKS, Benchmark
from .bench.options import VerboseOption
from .errors import ConfigError, FedleakError

if TYPE_CHECKING:
    from .experiments.config import ExperimentConfig
    from .experiments.runner import RunOutcome
    from .runtime.lifecycle import RunControl

__all__ = ["app", "main"]

EXIT_USAGE = 2

_err = Console(stderr=True)
_out = Console()


class _LazyBenchGroup(typer.core.TyperGroup):
    """``fedleak bench``: lists :data:`fedleak.bench.BENCHMARKS` without importing.

    The help page is drawn from placeholders that carry only the registered
    summary; the module of a benchmark is imported when that benchmark is
    resolved to run (or to show its own ``--help``).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [bench.name for bench in BENCHMARKS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        bench = _registered(cmd_name)
        if bench is None:
            return None
        return typer.core.TyperCommand(
            bench.name, help=bench.summary, short_help=bench.summary
        )

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        bench = _registered(args[0]) if args else None
        if bench is None:
            return super().resolve_command(ctx, args)
        loader = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        loader.command(name=bench.name)(_stops_cleanly(bench.command()))
        return bench.name, typer.main.get_command(loader), args[1:]


def _stops_cleanly(command: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a benchmark's command: a run stopped by a signal ends it in one line.

    Typer turns a ``KeyboardInterrupt`` out of a command into a silent exit
    130, so :class:`~fedleak.runtime.lifecycle.RunInterrupted` (which says
    where the run stopped, and SIGTERM's 143) is caught here, before it.
    """

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from .runtime.lifecycle import RunInterrupted

        try:
            return command(*args, **kwargs)
        except RunInterrupted as err:
            _err.print(escape(str(err)), highlight=False, soft_wrap=True)
            raise typer.Exit(err.exit_code) from None

    return run


def _registered(name: str) -> Benchmark | None:
    return next((bench for bench in BENCHMARKS if bench.name == name), None)


app = typer.Typer(
    name="fedleak",
    help="Measure and limit privacy leakage in federated learning (Flower plugin).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    cls=_LazyBenchGroup,
    help="Benchmarks: write JSON with fedleak and its peer side by side.",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


def _bundled_config(name: str) -> Path:
    local = Path("sim_configs") / name
    if local.is_file():
        return local
    return Path(str(resources.files("fedleak.sim_configs") / name))


def _progress_bar(verbose: bool) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
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


def _run_config(
    config_path: Path | None, overrides: list[str], resume: Path | None
) -> ExperimentConfig:
    """Load the experiment: the file with ``--set`` overrides, or a run's own.

    Raises
    ------
    fedleak.errors.ConfigError
        If ``resume`` holds no ``config.toml``, or neither a file nor
        ``resume`` is given (or the file does not load).
    """
    from .experiments.config import load_config

    if resume is not None:
        if not (resume / "config.toml").is_file():
            raise ConfigError(
                f"resume {resume}: no config.toml there; give the folder of a run "
                "that fedleak run wrote"
            )
        return load_config(resume / "config.toml")
    if config_path is None:
        raise ConfigError("give an experiment file (fedleak run CONFIG) or --resume")
    return load_config(config_path, overrides)


def _round_progress(
    config: ExperimentConfig, verbose: bool
) -> tuple[Any, Callable[[int, dict[str, Any]], None]]:
    """Return the progress bar of a run and the round callback that moves it."""
    progress = _progress_bar(verbose)
    task = progress.add_task(
        f"{config.name} ({config.strategy.name}, "
        f"{config.federation.num_clients} clients)",
        total=config.rounds,
        metric="",
    )

    def on_round(server_round: int, row: dict[str, Any]) -> None:
        acc = row.get("server", {}).get("test-accuracy")
        if isinstance(acc, float):  # rounds without evaluation keep the last figure
            progress.update(task, metric=f"test acc {acc:.3f} (round {server_round})")
        progress.update(task, completed=server_round)

    return progress, on_round


def _run_watched(
    config: ExperimentConfig,
    out: Path | None,
    resume: Path | None,
    ray_address: str | None,
    verbose: bool,
    control: RunControl,
    rounds: int | None = None,
) -> RunOutcome:
    """Run (or resume) the experiment under the progress bar, stoppable by signals.

    The leftover-process watcher is started first, so Ray's processes stop
    however this process ends; closing its pipe afterwards stops them now.
    """
    from .experiments.runner import resume_experiment, run_experiment
    from .runtime.lifecycle import start_reaper, stop_on_signals

    progress, on_round = _round_progress(config, verbose)
    reaper = start_reaper()  # stops Ray's processes however this process ends
    try:
        with stop_on_signals(control), progress:
            if resume is not None:
                return resume_experiment(
                    resume,
                    rounds=rounds,
                    ray_address=ray_address,
                    verbose=verbose,
                    on_round=on_round,
                    control=control,
                )
            return run_experiment(
                config,
                out=out,
                ray_address=ray_address,
                verbose=verbose,
                on_round=on_round,
                control=control,
            )
    finally:
        if reaper is not None and reaper.stdin is not None:
            reaper.stdin.close()  # the run's Ray processes are stopped now


def _report_interrupted(outcome: RunOutcome, control: RunControl) -> NoReturn:
    """Say where an interrupted run stopped and how to go on; exit at once."""
    from .runtime.lifecycle import exit_now

    results, run_dir = outcome.results, outcome.run_dir
    name = signal.Signals(control.exit_code - 128).name
    done = results.get("completed_rounds", 0)
    rounds = results["config"]["rounds"]
    where = (
        f"go on with: fedleak run --resume {escape(str(run_dir))}"
        if (run_dir / "checkpoint.npz").is_file()
        else "no round completed, so there is nothing to resume"
    )
    _err.print(
        f"interrupted ({name}) after round {done} of {rounds}: model.npz and "
        f"results.json in {escape(str(run_dir))}; {where}",
        highlight=False,
        soft_wrap=True,
    )
    exit_now(control.exit_code)  # the interpreter's teardown takes seconds


def _report_finished(outcome: RunOutcome, started: float) -> None:
    """Print a finished run's final accuracy and timing, or fail if no round counted.

    Raises
    ------
    typer.Exit
        With status 1 when no client reply could be used in any round.
    """
    from .experiments.results import count_usable_rounds

    results, run_dir = outcome.results, outcome.run_dir
    if count_usable_rounds(results) == 0:
        _err.print(
            "[bold red]error:[/] no client reply could be used in any round "
            "(see the warnings above); the run's files are in "
            f"{escape(str(run_dir))}",
            highlight=False,
        )
        raise typer.Exit(1)
    final = results["final"]
    timing = results["timing"]
    acc = final.get("test-accuracy")
    line = f"final test accuracy {acc:.4f}" if isinstance(acc, float) else "done"
    median = timing.get("median_round_after_first_s")
    median_text = f", median round {median:.3f} s" if isinstance(median, float) else ""
    _out.print(
        f"{line} after {final['round']} rounds in {time.perf_counter() - started:.1f} s"
        f"{median_text}\nresults: {run_dir / 'results.json'}",
        highlight=False,
    )


def _run(
    config_path: Path | None,
    out: Path | None,
    overrides: list[str],
    ray_address: str | None,
    verbose: bool,
    resume: Path | None = None,
    rounds: int | None = None,
) -> None:
    """Run or resume an experiment from the command line (``fedleak run``).

    What can fail is checked before the progress bar shows: the config, the
    Flower app's pre-flight, the Ray address and the run folder.
    """
    if resume is not None and (config_path is not None or out is not None or overrides):
        raise ConfigError(
            "--resume RUN_DIR goes on with that run's own config.toml; give no "
            "CONFIG, --out or --set with it"
        )
    if rounds is not None and resume is None:
        raise ConfigError(
            "--rounds extends a run given with --resume RUN_DIR; for a new run "
            "use --set rounds=N"
        )
    config = _run_config(config_path, overrides, resume)
    if rounds is not None:  # checked before the bar shows; its total
        from .experiments.config import extended

        config = extended(config, rounds, resume)
    from .experiments.runner import check_ray, preflight
    from .runtime.lifecycle import RunControl
    from .runtime.run_dir import make_run_dir

    preflight(config)
    check_ray(config, ray_address)
    if resume is None:
        out = make_run_dir(config.name, out)
    started = time.perf_counter()
    control = RunControl()
    outcome = _run_watched(config, out, resume, ray_address, verbose, control, rounds)
    if outcome.results.get("status") == "interrupted":
        _report_interrupted(outcome, control)
    _report_finished(outcome, started)


@app.command()
def run(
    config: Annotated[
        Path | None,
        typer.Argument(help="Experiment TOML file (see sim_configs/)."),
    ] = None,
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
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Go on with an interrupted run from its last checkpoint "
            "(give its run directory instead of CONFIG).",
        ),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            "--rounds",
            min=1,
            help="With --resume: extend the run (completed or not) to this many "
            "rounds.",
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Use an existing Ray cluster (default: $RAY_ADDRESS, else local).",
        ),
    ] = None,
    verbose: VerboseOption = False,
) -> None:
    """Run an experiment file as a Flower simulation on Ray.

    Ctrl-C (SIGINT) or SIGTERM stops the run after the round in progress and
    writes model.npz and results.json ("status": "interrupted"); exit status
    130 or 143. fedleak run --resume RUN_DIR goes on from the last checkpoint
    and ends with the numbers of an uninterrupted run; with --rounds N it
    extends a run, completed or not, to N rounds, as if started with N.
    """
    _run(config, out, set_ or [], ray_address, verbose, resume, rounds)


@app.command()
def quickstart(
    out: Annotated[Path | None, typer.Option("--out", help="Run directory.")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Run sim_configs/quickstart.toml: SyncSGD on digits, 4 clients, about a minute."""
    _run(_bundled_config("quickstart.toml"), out, [], None, verbose)


@app.command()
def datasets() -> None:
    """List the datasets fedleak can load on this machine, and where they are."""
    from rich.table import Table

    from .data import dataset_status

    table = Table("dataset", "available", "location / how to get it")
    for status in dataset_status():
        table.add_row(
            status.name,
            "[green]yes[/]" if status.available else "[red]no[/]",
            status.location if status.available else status.hint,
        )
    _out.print(table)


def _one_line(err: FedleakError) -> str:
    return " ".join(line.strip(" -") for line in str(err).splitlines() if line.strip())


def main() -> None:
    """Console-script entry point: run the command, report fedleak's errors once."""
    try:
        app()
    except FedleakError as err:
        _err.print(
            f"[bold red]error:[/] {escape(_one_line(err))}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:  # outside a run (a run turns Ctrl-C into a stop)
        _err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
