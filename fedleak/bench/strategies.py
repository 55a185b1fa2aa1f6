"""``fedleak bench strategies``: fedleak's servers vs Flower's FedAvg, same run.

One Flower simulation (one Ray instance, the same actors and clients) runs
``blocks`` blocks; each block runs every strategy for ``rounds`` rounds, in an
order rotated from block to block so that drift of the machine spreads evenly.
The time of a round is measured between consecutive calls of the
``evaluate_fn`` hook of ``Strategy.start`` (no evaluation is done in it). The
first round of every ``start`` call is dropped (it includes Ray's start-up in
the first block and fedleak's one-off partition-id query), the same for every
strategy. The report gives each strategy's median round time and its ratio to
FedAvg's median.

The simulation runs on the engine of the experiment setting ``[federation]
engine`` (default ``"fedleak"``: replies wake the server, ``poll_interval``
is only the fallback; :mod:`fedleak.runtime.engine`), so the ratios
measure the strategies, not Flower's 0.1 s polls; ``engine="flower"`` runs
Flower's engine as shipped. The record states the engine and poll used.

Compared:

``sync-sgd``
    :class:`fedleak.strategies.SyncSGD`: one mini-batch gradient per client.
``model-averaging``
    :class:`fedleak.strategies.ModelAveraging`: one local epoch per client.
``fedavg``
    Flower's ``flwr.serverapp.strategy.FedAvg`` with the same clients doing
    the same local epoch (the peer).
"""

from __future__ import annotations

import statistics
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Strategy
from rich.table import Table

from fedleak.clients import make_honest_client_app, secagg_mod
from fedleak.errors import ConfigError, FedleakError
from fedleak.experiments.config import ExperimentConfig, validate
from fedleak.experiments.runner import preflight
from fedleak.experiments.server import initial_arrays
from fedleak.runtime.engine import (
    FLOWER_POLL_INTERVAL,
    EngineGrid,
    fast_engine_for,
    simulation_backend_config,
)
from fedleak.runtime.logs import quiet_flower
from fedleak.strategies import ModelAveraging, SyncSGD

from .console import out as console
from .console import written
from .options import OutOption, VerboseOption
from .record import BenchRecord

__all__ = ["command", "run_strategy_bench"]


class _RoundTimer:
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._last_exit: float | None = None

    def reset(self) -> None:
        self._last_exit = None

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        entered = time.perf_counter()
        if server_round > 1 and self._last_exit is not None:
            self.seconds.append(entered - self._last_exit)
        self._last_exit = time.perf_counter()
        return None


def _strategies(config: ExperimentConfig) -> dict[str, Strategy]:
    k = config.federation.num_clients
    lr = config.strategy.learning_rate
    return {
        "sync-sgd": SyncSGD(lr, min_available_nodes=k, seed=config.seed),
        "model-averaging": ModelAveraging(
            local_epochs=1, learning_rate=lr, min_available_nodes=k, seed=config.seed
        ),
        "fedavg": FedAvg(
            fraction_train=1.0,
            fraction_evaluate=0.0,
            min_train_nodes=k,
            min_available_nodes=k,
        ),
    }


def _bench_config(
    clients: int,
    rounds: int,
    blocks: int,
    dataset: str,
    seed: int,
    engine: str,
    poll_interval: float | None,
) -> ExperimentConfig:
    """Return the experiment setting the benchmark's simulation runs under."""
    config = validate(
        {
            "name": "bench-strategies",
            "seed": seed,
            "rounds": rounds,
            "data": {"dataset": dataset},
            "strategy": {"name": "sync-sgd", "learning_rate": 0.05},
            "federation": {
                "num_clients": clients,
                "engine": engine,
                **({} if poll_interval is None else {"poll_interval": poll_interval}),
            },
        },
        "bench settings",
        "bench-strategies",
    )
    if rounds < 2 or blocks < 1:
        raise ConfigError("bench needs rounds >= 2 and blocks >= 1")
    return config


def _timing_server_app(
    config: ExperimentConfig,
    strategies: dict[str, Strategy],
    timers: dict[str, _RoundTimer],
    blocks: int,
    engine_used: dict[str, Any],
) -> ServerApp:
    """Return the ServerApp that runs every strategy once a block, rotated.

    Each ``start`` call runs ``config.rounds`` rounds with its strategy's
    timer as ``evaluate_fn``; ``engine_used`` receives the poll interval and
    whether replies wake the server.
    """
    names = list(strategies)
    train_config = config.task().to_config()
    fast = config.federation.engine == "fedleak"
    poll = config.federation.poll_interval if fast else FLOWER_POLL_INTERVAL
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        # no timing records: the honest ClientApp gets exactly what Flower sends
        grid = EngineGrid(grid, poll, timing=False)
        engine_used.update(grid.settings())
        arrays = initial_arrays(config)
        for block in range(blocks):
            order = names[block % len(names) :] + names[: block % len(names)]
            for name in order:
                timers[name].reset()
                strategies[name].start(
                    grid=grid,
                    initial_arrays=arrays,
                    num_rounds=config.rounds,
                    timeout=config.federation.round_timeout,
                    train_config=ConfigRecord(train_config),
                    evaluate_fn=timers[name],
                )

    return server_app


def _simulate(server_app: ServerApp, config: ExperimentConfig, verbose: bool) -> None:
    """Run ``server_app`` with honest clients in one Flower simulation.

    fedleak's engine (replies wake the server) is installed for the run when
    the setting asks for it.
    """
    from flwr.simulation import run_simulation

    fast = config.federation.engine == "fedleak"
    running: AbstractContextManager[bool] = (
        fast_engine_for(config.federation) if fast else nullcontext(False)
    )
    with quiet_flower(verbose), running:
        run_simulation(
            server_app=server_app,
            client_app=make_honest_client_app(mods=[secagg_mod]),
            num_supernodes=config.federation.num_clients,
            backend_config=simulation_backend_config(
                config.federation.cpus_per_client, inline=fast, verbose=verbose
            ),
            verbose_logging=verbose,
        )


def _round_times(timers: dict[str, _RoundTimer]) -> dict[str, dict[str, Any]]:
    """Return each timed strategy's round times and median.

    Raises
    ------
    fedleak.errors.FedleakError
        If no FedAvg round was timed (there is nothing to compare with).
    """
    results: dict[str, dict[str, Any]] = {
        name: {"median_round_s": statistics.median(t.seconds), "round_s": t.seconds}
        for name, t in timers.items()
        if t.seconds
    }
    if "fedavg" not in results:
        raise FedleakError("the benchmark recorded no FedAvg round")
    return results


def run_strategy_bench(
    out: str | Path,
    *,
    clients: int = 10,
    rounds: int = 10,
    blocks: int = 3,
    dataset: str = "digits",
    seed: int = 0,
    engine: Literal["fedleak", "flower"] = "fedleak",
    poll_interval: float | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run the benchmark and write its JSON report to ``out`` (atomically).

    Parameters
    ----------
    engine : {"fedleak", "flower"}, default="fedleak"
        The simulation engine (the experiment setting ``federation.engine``).
    poll_interval : float, optional
        fedleak's engine: fallback seconds between polls (default: the
        experiment setting's default).

    Returns
    -------
    dict
        The report: per-strategy round times and medians, ratios to FedAvg,
        settings, versions and machine.
    """
    config = _bench_config(
        clients, rounds, blocks, dataset, seed, engine, poll_interval
    )
    preflight(config)
    with quiet_flower(verbose):
        strategies = _strategies(config)
    timers = {name: _RoundTimer() for name in strategies}
    engine_used: dict[str, Any] = {"engine": config.federation.engine}
    started = time.perf_counter()
    server_app = _timing_server_app(config, strategies, timers, blocks, engine_used)
    _simulate(server_app, config, verbose)
    results = _round_times(timers)
    base = results["fedavg"]["median_round_s"]
    record = BenchRecord("strategies", Path(out))
    return record.finish(
        started,
        {
            "description": __doc__,
            "settings": {
                "clients": clients,
                "rounds_per_block": rounds,
                "blocks": blocks,
                "dataset": dataset,
                "model": config.model.name,
                "batch_size": config.client.batch_size,
                "dropped": "round 1 of every start() call",
            },
            "engine": engine_used,
            "strategies": results,
            "ratios_vs_fedavg": {
                name: stats["median_round_s"] / base for name, stats in results.items()
            },
        },
    )


def command(
    out: OutOption = Path("bench-strategies.json"),
    clients: Annotated[int, typer.Option(help="Simulated clients.")] = 10,
    rounds: Annotated[int, typer.Option(help="Rounds per strategy per block.")] = 10,
    blocks: Annotated[
        int, typer.Option(help="Blocks (each runs every strategy once, rotated).")
    ] = 3,
    dataset: Annotated[
        str, typer.Option(help="digits, fashion-mnist or mnist.")
    ] = "digits",
    engine: Annotated[
        str, typer.Option(help="Simulation engine: fedleak (default) or flower.")
    ] = "fedleak",
    verbose: VerboseOption = False,
) -> None:
    """Time rounds of SyncSGD and ModelAveraging vs Flower's FedAvg, same simulation."""
    report = run_strategy_bench(
        out,
        clients=clients,
        rounds=rounds,
        blocks=blocks,
        dataset=dataset,
        engine="flower" if engine == "flower" else _check_engine(engine),
        verbose=verbose,
    )
    table = Table("strategy", "median round (s)", "x FedAvg", "rounds timed")
    for name, stats in report["strategies"].items():
        table.add_row(
            name,
            f"{stats['median_round_s']:.4f}",
            f"{report['ratios_vs_fedavg'][name]:.2f}",
            str(len(stats["round_s"])),
        )
    console.print(table)
    used = report["engine"]
    console.print(
        f"engine {used['engine']}, poll {used['poll_interval']} s, "
        f"wake-ups {used.get('wake_ups')}",
        highlight=False,
    )
    written(out)


def _check_engine(engine: str) -> Literal["fedleak"]:
    if engine != "fedleak":
        raise ConfigError(f"--engine must be fedleak or flower, got {engine!r}")
    return "fedleak"
