"""``fedleak run``: an experiment file becomes a Flower simulation on Ray.

The order of work guarantees that a bad experiment never leaves a partial run
directory: the configuration is validated, the dataset loaded, the clients'
partitions computed and the model built (:func:`preflight`) **before** the run
directory is created. Then the ServerApp
(:func:`fedleak.experiments.server.run_federation`)
and the honest ClientApp run in Flower's simulation engine, on an embedded
local Ray instance by default or on an existing Ray cluster
(``ray_address``; every Ray node must have fedleak installed), without the
engine's polling delays (:mod:`fedleak.experiments.engine`).
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Result

from fedleak.clients import HonestClient, make_honest_client_app
from fedleak.clients.defenses import defended_behaviour
from fedleak.clients.membership import membership_behaviour
from fedleak.clients.property import property_behaviour
from fedleak.clients.secagg import make_secagg_mod
from fedleak.errors import FedleakError
from fedleak.task import TaskSpec, training_pool

from .config import ExperimentConfig
from .engine import fast_engine, simulation_backend_config, timing_mod
from .server import (
    RoundCallback,
    RunRecorder,
    finish_run,
    make_run_dir,
    run_federation,
    write_config,
)

__all__ = [
    "RunOutcome",
    "client_behaviour",
    "experiment_client_app",
    "make_experiment_client_app",
    "preflight",
    "quiet_flower",
    "run_experiment",
    "simulate",
]


@dataclass(frozen=True)
class RunOutcome:
    """Where a run wrote its files, and what ``results.json`` holds."""

    run_dir: Path
    results: dict[str, Any]


def preflight(config: ExperimentConfig) -> None:
    """Do every check that can fail before a run directory exists.

    Raises
    ------
    fedleak.errors.DataError
        If the dataset is missing or cannot be split as configured.
    fedleak.errors.ConfigError
        If the model cannot be built for the data.
    """
    task = config.task()
    training_pool(task)
    task.new_model()


def client_behaviour(
    spec: TaskSpec, partition_id: int, config: ConfigRecord
) -> HonestClient:
    """Pick a node's behaviour from its partition id and the message config.

    Every node of a simulation runs the same ClientApp; the experiment's
    ``[adversary]`` and ``[target]`` sections (sent as ``adversary.*`` and
    ``target.*`` entries) make one partition the adversary and one the
    scripted target; every other node is honest.
    """
    chosen = property_behaviour(spec, partition_id, config)
    if chosen is None:
        chosen = membership_behaviour(spec, partition_id, config)
    if chosen is None:  # honest, with the [defenses] section's defenses if any
        chosen = defended_behaviour(spec, partition_id, config)
    return chosen if chosen is not None else HonestClient(spec, partition_id)


def make_experiment_client_app() -> ClientApp:
    """Build ``fedleak run``'s ClientApp: roles by partition, secure aggregation.

    Its secure-aggregation mod takes part in both modes, so that an experiment
    file can measure the seed's ``mode = "thesis"`` beside double masking.
    :func:`~fedleak.experiments.engine.timing_mod` comes first, so the time
    a client reports covers secure-aggregation masking too.
    """
    app: ClientApp = make_honest_client_app(
        mods=[timing_mod, make_secagg_mod(accept_thesis=True)],
        behaviour=client_behaviour,
        rebuild=experiment_client_app,
    )
    return app


@functools.cache
def experiment_client_app() -> ClientApp:
    """Return this process's experiment ClientApp (what the app pickles as)."""
    return make_experiment_client_app()


class _DropDeprecation(logging.Filter):
    """Drop Flower warnings that say nothing to a fedleak user."""

    noise = (
        "DEPRECATED FEATURE",
        "Federated evaluation will be skipped",
        "No fit_metrics_aggregation_fn provided",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.noise)


@contextmanager
def quiet_flower(verbose: bool) -> Iterator[None]:
    """Silence Flower's INFO chatter and Ray's start-up noise unless ``verbose``."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    logger = logging.getLogger("flwr")
    old_level = logger.level
    drop = _DropDeprecation()
    if not verbose:
        logger.setLevel(logging.WARNING)
        logger.addFilter(drop)
    try:
        with warnings.catch_warnings():
            if not verbose:
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        logger.setLevel(old_level)
        logger.removeFilter(drop)


def simulate(
    config: ExperimentConfig,
    recorder: RunRecorder,
    *,
    ray_address: str | None = None,
    verbose: bool = False,
) -> Result:
    """Run the experiment as a Flower simulation and return Flower's ``Result``.

    Flower's ``run_simulation`` on its Ray backend runs it; with
    ``[federation] engine = "fedleak"`` inside
    :func:`~fedleak.experiments.engine.fast_engine`, which removes the
    engine's 0.1 s polling steps.
    """
    from flwr.simulation import run_simulation

    outcome: dict[str, Result] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        outcome["result"] = run_federation(grid, config, recorder)

    federation = config.federation
    fast = federation.engine == "fedleak"
    backend_config = simulation_backend_config(
        federation.cpus_per_client,
        ray_address=ray_address or federation.ray_address,
        inline=fast,
        verbose=verbose,
    )
    engine: AbstractContextManager[bool] = (
        fast_engine(federation.poll_interval) if fast else nullcontext(False)
    )
    with quiet_flower(verbose), engine:
        run_simulation(
            server_app=server_app,
            client_app=make_experiment_client_app(),
            num_supernodes=federation.num_clients,
            backend_config=backend_config,
            verbose_logging=verbose,
        )
    if "result" not in outcome:
        raise FedleakError("the simulation ended without a result (see the log above)")
    return outcome["result"]


def run_experiment(
    config: ExperimentConfig,
    *,
    out: str | Path | None = None,
    base: str | Path = "runs",
    ray_address: str | None = None,
    verbose: bool = False,
    on_round: RoundCallback | None = None,
) -> RunOutcome:
    """Validate, simulate and record one experiment.

    Parameters
    ----------
    config : ExperimentConfig
        The validated experiment.
    out : path, optional
        The run directory; default ``<base>/<name>/<timestamp>``.
    base : path, default="runs"
        Parent of timestamped run directories.
    ray_address : str, optional
        Address of an existing Ray cluster (overrides ``federation.ray_address``).
    verbose : bool, default=False
        Show Flower's and Ray's logs.
    on_round : callable, optional
        ``on_round(round, row)`` after every round (progress display).

    Returns
    -------
    RunOutcome
        The run directory and the content of its ``results.json``.
    """
    preflight(config)
    run_dir = make_run_dir(config, out, base)
    write_config(run_dir / "config.toml", config)
    recorder = RunRecorder(config, run_dir, on_round)
    result = simulate(config, recorder, ray_address=ray_address, verbose=verbose)
    return RunOutcome(run_dir, finish_run(run_dir, config, result, recorder))
