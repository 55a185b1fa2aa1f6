"""``fedleak run``: an experiment file becomes a Flower simulation on Ray.

The order of work guarantees that a bad experiment never leaves a partial run
directory: the configuration is validated, the dataset loaded, the clients'
partitions computed and the model built (:func:`preflight`) **before** the run
directory is created. Then the ServerApp
(:func:`fedleak.experiments.server.run_federation`)
and the honest ClientApp run in Flower's simulation engine, on an embedded
local Ray instance by default or on an existing Ray cluster
(``ray_address``; every Ray node must have fedleak installed), without the
engine's polling delays (:mod:`fedleak.runtime.engine`).
"""

from __future__ import annotations

import functools
import json
import logging
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
from fedleak.errors import ConfigError, FedleakError
from fedleak.runtime.checkpoint import (
    Checkpoint,
    ClientStates,
    capture_client_states,
    load_checkpoint,
)
from fedleak.runtime.engine import (
    fast_engine_for,
    simulation_backend_config,
    timing_mod,
)
from fedleak.runtime.lifecycle import (
    RunControl,
    RunInterrupted,
    check_cpus,
    check_ray_address,
    keep_signals_from_ray,
    ray_address_in_use,
    stop_on_signals,
)
from fedleak.runtime.logs import quiet_flower
from fedleak.runtime.run_dir import make_run_dir, write_config
from fedleak.task import TaskSpec, training_pool

from .config import ExperimentConfig, extended, load_config
from .server import RoundCallback, RunRecorder, finish_run, run_federation

__all__ = [
    "RunOutcome",
    "check_ray",
    "client_behaviour",
    "experiment_client_app",
    "make_experiment_client_app",
    "preflight",
    "resume_experiment",
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
    :func:`~fedleak.runtime.engine.timing_mod` comes first, so the time
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


def simulate(
    config: ExperimentConfig,
    recorder: RunRecorder,
    *,
    ray_address: str | None = None,
    verbose: bool = False,
    control: RunControl | None = None,
    resume: Checkpoint | None = None,
) -> Result:
    """Run the experiment as a Flower simulation and return Flower's ``Result``.

    Flower's ``run_simulation`` on its Ray backend runs it; with
    ``[federation] engine = "fedleak"`` inside
    :func:`~fedleak.runtime.engine.fast_engine`, which removes the
    engine's 0.1 s polling steps. With ``control`` the run stops between
    rounds when asked (and Ray's own SIGTERM handlers, which end the
    process mid-round, are kept out:
    :func:`~fedleak.runtime.lifecycle.keep_signals_from_ray`); ``resume``
    goes on from a checkpoint, clients' states included.
    """
    from flwr.simulation import run_simulation

    outcome: dict[str, Result] = {}
    server_app = ServerApp()
    clients = ClientStates(resume.clients if resume is not None else None)

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        outcome["result"] = run_federation(
            grid, config, recorder, control=control, clients=clients, resume=resume
        )

    federation = config.federation
    fast = federation.engine == "fedleak"
    backend_config = simulation_backend_config(
        federation.cpus_per_client,
        ray_address=ray_address or federation.ray_address,
        inline=fast,
        verbose=verbose,
    )
    engine: AbstractContextManager[bool] = (
        fast_engine_for(federation) if fast else nullcontext(False)
    )
    signals: AbstractContextManager[None] = (
        keep_signals_from_ray() if control is not None else nullcontext()
    )
    with quiet_flower(verbose), engine, signals, capture_client_states(clients):
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


def check_ray(config: ExperimentConfig, ray_address: str | None = None) -> None:
    """Refuse an unreachable Ray cluster or more CPUs per client than Ray has."""
    address = ray_address_in_use(ray_address or config.federation.ray_address)
    check_ray_address(address)
    check_cpus(config.federation.cpus_per_client, address)


def run_experiment(
    config: ExperimentConfig,
    *,
    out: str | Path | None = None,
    base: str | Path = "runs",
    ray_address: str | None = None,
    verbose: bool = False,
    on_round: RoundCallback | None = None,
    control: RunControl | None = None,
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
    control : RunControl, optional
        Stop requests (``fedleak run`` sets one from SIGINT and SIGTERM).
        Without one, SIGINT and SIGTERM are watched here (main thread only):
        the run stops after its round and :class:`RunInterrupted` is raised
        once its files are written.

    Returns
    -------
    RunOutcome
        The run directory and the content of its ``results.json``, whose
        ``status`` says whether the run completed or was interrupted. A run
        that fails still writes ``results.json`` (``"failed"``) and the model
        of its last completed round before the error propagates.

    Raises
    ------
    fedleak.runtime.lifecycle.RunInterrupted
        Without ``control``, when a signal stopped the run.
    """
    preflight(config)
    check_ray(config, ray_address)
    run_dir = make_run_dir(config.name, out, base)
    write_config(run_dir / "config.toml", config)
    recorder = RunRecorder(config, run_dir, on_round)
    with _watched(control) as watched:
        outcome = _simulate_and_finish(
            config, recorder, ray_address=ray_address, verbose=verbose, control=watched
        )
    return _unless_interrupted(outcome, control, watched)


@contextmanager
def _watched(control: RunControl | None) -> Iterator[RunControl]:
    """Yield ``control``, or a new one fed by SIGINT and SIGTERM while the run lasts.

    Without this a signal meant for a caller that runs experiments in a loop
    (a benchmark) raised ``KeyboardInterrupt`` in Flower's engine thread: the
    engine stopped its actors and the server thread waited for their replies
    forever.
    """
    if control is not None:
        yield control
        return
    own = RunControl()
    with stop_on_signals(own):
        yield own


def _unless_interrupted(
    outcome: RunOutcome, control: RunControl | None, watched: RunControl
) -> RunOutcome:
    """Return ``outcome``; raise :class:`RunInterrupted` if our own watch stopped it."""
    if control is None and watched.requested:
        raise RunInterrupted(
            outcome.run_dir,
            int(outcome.results.get("completed_rounds") or 0),
            watched.signal,
        )
    return outcome


def resume_experiment(
    run_dir: str | Path,
    *,
    rounds: int | None = None,
    ray_address: str | None = None,
    verbose: bool = False,
    on_round: RoundCallback | None = None,
    control: RunControl | None = None,
) -> RunOutcome:
    """Go on with a run from its last checkpoint, in its directory.

    The experiment is the run's own ``config.toml``; the rounds after the
    checkpoint are run again, so the run's files end as an uninterrupted
    run's would (same models and metrics; ``timing`` covers this session).
    With ``rounds`` above the run's own, the run (completed or not) is
    extended to ``rounds``: its ``config.toml`` is rewritten with the new
    count first, and the files end as those of a run started with
    ``rounds`` (nothing a round trains on depends on the total; the server
    evaluates on its schedule plus the last round).

    Signals are watched as by :func:`run_experiment`.

    Raises
    ------
    fedleak.errors.ConfigError
        If ``run_dir`` is not a run directory, has no checkpoint, ``rounds``
        is below the run's own, or nothing is left to run.
    fedleak.runtime.lifecycle.RunInterrupted
        Without ``control``, when a signal stopped the run.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").is_file():
        raise ConfigError(
            f"--resume {run_dir}: no config.toml there; give the folder of a run "
            "fedleak run wrote"
        )
    config = load_config(run_dir / "config.toml")
    checkpoint = load_checkpoint(run_dir)
    extend = rounds is not None and rounds != config.rounds
    if rounds is not None:
        config = extended(config, rounds, run_dir)
    if not extend and _completed(run_dir / "results.json", config.rounds):
        raise ConfigError(
            f"--resume {run_dir}: that run completed all its rounds; nothing "
            "to resume (--rounds N extends it)"
        )
    if checkpoint.round >= config.rounds:
        raise ConfigError(
            f"--resume {run_dir}: the checkpoint is after the last round "
            f"({config.rounds}); nothing to resume"
        )
    preflight(config)
    check_ray(config, ray_address)
    if extend:  # a later plain --resume goes on with the new count
        write_config(run_dir / "config.toml", config)
    recorder = RunRecorder(config, run_dir, on_round)
    with _watched(control) as watched:
        outcome = _simulate_and_finish(
            config,
            recorder,
            ray_address=ray_address,
            verbose=verbose,
            control=watched,
            resume=checkpoint,
        )
    return _unless_interrupted(outcome, control, watched)


def _completed(results: Path, rounds: int) -> bool:
    """Whether ``results`` says its run completed ``rounds`` rounds (or more)."""
    if not results.is_file():
        return False
    try:
        previous = json.loads(results.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return False
    if not isinstance(previous, dict) or previous.get("status") != "completed":
        return False
    done = previous.get("completed_rounds")
    return not isinstance(done, int) or done >= rounds


def _simulate_and_finish(
    config: ExperimentConfig,
    recorder: RunRecorder,
    *,
    ray_address: str | None,
    verbose: bool,
    control: RunControl | None,
    resume: Checkpoint | None = None,
) -> RunOutcome:
    run_dir = recorder.run_dir
    assert run_dir is not None
    try:
        result = simulate(
            config,
            recorder,
            ray_address=ray_address,
            verbose=verbose,
            control=control,
            resume=resume,
        )
    except BaseException:
        partial = Result()
        if recorder.arrays is not None:
            partial.arrays = recorder.arrays
        try:
            finish_run(run_dir, config, partial, recorder, status="failed")
        except Exception:  # the original error matters more
            logging.getLogger(__name__).exception("could not write results.json")
        raise
    return RunOutcome(run_dir, finish_run(run_dir, config, result, recorder))
