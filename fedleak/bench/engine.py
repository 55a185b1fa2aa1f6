"""``fedleak bench engine``: a simulated round next to the compute it contains.

Two experiments, each run three ways in the same process:

``quickstart``
    ``sim_configs/quickstart.toml`` (SyncSGD, 4 clients, the thesis CNN on
    digits) through :func:`fedleak.experiments.run_experiment`.
``secure_round``
    :class:`fedleak.strategies.SecureAggregation` around Flower's ``FedAvg``:
    ``N = 10`` clients each add a fixed float32 vector of ``L = 10**5``
    entries to half the global one (masking, transfers and aggregation and
    nothing else).

The three ways:

``fedleak``
    Flower's ``run_simulation`` on Ray with fedleak's engine
    (``[federation] engine = "fedleak"``: no polling steps, inlined
    messages; :mod:`fedleak.runtime.engine`).
``flower``
    The same simulation with Flower's engine as shipped (0.1 s polling,
    Ray's defaults): the peer.
``essential``
    The same strategy and ClientApp in this process, without Flower's engine
    or Ray: :class:`InProcessGrid` runs every client's handler directly, with
    one pickle round trip of the message and of the reply for the transport
    (the copies any transport makes). Its round is the *essential compute*:
    the server's own work (sampling, messages, aggregation, evaluation) plus
    the clients' work divided by the number of clients the simulation runs at
    once (its Ray actors, ``cpus // cpus_per_client``, at most one per CPU),
    i.e. perfectly parallel clients. The quickstart's evaluation runs in line
    here, so that its time is its compute; the two simulations overlap it
    with the next round as the experiment file asks
    (:mod:`fedleak.runtime.idle_priority`).

The server process keeps freed memory in all three ways
(:func:`fedleak.runtime.engine.keep_freed_memory`; it cannot be undone
in a process), the clients' processes only in ``fedleak`` and ``essential``.
Each way runs ``rounds`` rounds; the first round is left out everywhere (Ray's
start-up, the one-off partition-id query and key setup). A full run repeats
the two simulations in two blocks in swapped order so that drift of the
machine spreads over both, and runs the in-process way just before and just
after each ``fedleak`` simulation, so that the essential round is measured
over the same stretch of the machine's time as the round set against it
(its speed drifts by a fifth to a third within minutes). The record gives
each way's median round and its medians per component (the ``timing`` rows
of ``results.json``), the ratios ``fedleak / essential``, ``flower /
fedleak`` and ``fedleak / serial`` (the in-process round as it ran, one
client after another: the compute the round contains without the parallel
split), and whether the three ways produced the same numbers (they must:
same seed, same results).

Beside the medians it gives each way's rounds summed (``total_round_s``, the
experiment's time in rounds; the in-process way's over its
``runs_per_block`` runs a block, divided by that in the ratios) with the
ratios of those sums (``*_total``), the median of each block with
``fedleak / essential`` and ``flower / fedleak`` per block, and how many of
the peer's rounds waited one, two, ... polls (``rounds_by_poll_steps``).
Flower's rounds fall into those steps: where about half the rounds take one
more step, its median round flips between steps from block to block, and the
sums say what the whole experiment costs.

The machine's state goes into the record too: just before and just after
each ``fedleak`` simulation's in-process runs, :mod:`fedleak.bench.cpu_pairs`
runs a fixed loop on each of two CPUs alone and then on both at once
(``cpu_pairs`` and ``cpu_pair_throughput`` of each experiment). The essential
round's perfect split assumes two CPUs that do not slow each other
(throughput 1.0); on a virtual machine whose two vCPUs share a core, or a
busy host, each runs slower while the other works, the simulation's clients
with them, and the essential round is then out of any engine's reach.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from flwr.app import (
    Array,
    ArrayRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.app.error import Error
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from rich.table import Table

import fedleak
from fedleak.clients import add_identify_handler, partition_id_of, secagg_mod
from fedleak.clients.honest import RebuiltClientApp
from fedleak.experiments.config import ExperimentConfig, load_config, validate
from fedleak.experiments.runner import make_experiment_client_app, run_experiment
from fedleak.experiments.server import RunRecorder, run_federation, timing_summary
from fedleak.runtime.engine import (
    FLOWER_POLL_INTERVAL,
    EngineGrid,
    fast_engine_for,
    keep_freed_memory,
    simulation_backend_config,
    timing_mod,
)
from fedleak.runtime.logs import quiet_flower
from fedleak.strategies import SecureAggregation
from fedleak.training import native_threads

from .console import err, say, written
from .console import out as console
from .cpu_pairs import measure_cpu_pairs
from .record import BenchRecord
from .startup import measure_cli_startup

__all__ = [
    "CONTENDED_BELOW",
    "InProcessGrid",
    "command",
    "contention_warning",
    "run_engine_bench",
    "secure_vector_app",
]

WAYS = ("essential", "fedleak", "flower")
COMPONENTS = ("wall_s", "wait_s", "client_compute_s", "evaluate_s", "server_s")
SECURE_CLIENTS = 10
SECURE_LENGTH = 10**5
_VECTOR = "w"
CONTENDED_BELOW = 0.85
"""A CPU probe's ``pair_throughput`` below which the run is flagged as taken
while the machine's CPUs slowed each other (:func:`contention_warning`)."""
SETTLE_S = 3.0
"""Pause after each simulation: Ray's processes take a few seconds to exit,
and the next measurement would share the CPUs with them."""


# ------------------------------------------------------------------ in-process
class InProcessGrid(Grid):
    """A Grid whose nodes are one ClientApp called in this process.

    Every pushed message is pickled and unpickled (what any transport must
    copy), handled by ``app`` with its node's ``Context`` (kept across
    messages, as Flower does), and the reply is pickled and unpickled too. A
    handler that raises becomes an error reply, as in Flower's engine.

    Parameters
    ----------
    app : flwr.clientapp.ClientApp
        The ClientApp every node runs.
    num_nodes : int
        Nodes ``1..num_nodes``, with partition ids ``0..num_nodes-1``.
    """

    def __init__(self, app: ClientApp, num_nodes: int) -> None:
        self.app = app
        self.contexts = {
            i + 1: Context(
                run_id=1,
                node_id=i + 1,
                node_config={"partition-id": i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for i in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        self._run: Run | None = None

    def set_run(self, run: Run) -> None:
        """Remember the run (unused in this process)."""
        self._run = run

    @property
    def run(self) -> Run:
        """The run given to :meth:`set_run`."""
        assert self._run is not None
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Create a message as the Message constructor does."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """Return the node ids."""
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Handle every message now; keep the replies for :meth:`pull_messages`."""
        ids = []
        for message in messages:
            message_id = str(uuid.uuid4())
            message.metadata.__dict__["_message_id"] = message_id
            received: Message = pickle.loads(pickle.dumps(message))
            context = self.contexts[received.metadata.dst_node_id]
            try:
                reply = self.app(received, context)
            except Exception as err:  # Flower's engine replies with an error too
                reason = f"{type(err).__name__}: {err}"
                reply = Message(Error(code=2, reason=reason), reply_to=received)
            self._replies[message_id] = pickle.loads(pickle.dumps(reply))
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Return (and forget) the replies to ``message_ids``."""
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Handle ``messages`` and return their replies (no waiting involved)."""
        return self.pull_messages(list(self.push_messages(messages)))


def _in_process(body: Callable[[], Result], verbose: bool) -> Result:
    """Run a ServerApp body against an :class:`InProcessGrid` in this process."""
    # Flower stamps instruction messages with the ServerApp's task identity
    # (run_simulation sets it again for every simulation).
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    with quiet_flower(verbose), native_threads(1):  # as in the 1-CPU Ray actors
        return body()


# ------------------------------------------------------------- secure round
@cache
def client_vector(partition: int, length: int) -> np.ndarray:
    """Return client ``partition``'s fixed float32 vector (values in [-1, 1)).

    Cached: drawing it is not part of the round (the read-only array is
    shared by every call).
    """
    rng = np.random.default_rng([0xE761E, partition])
    vector = rng.uniform(-1.0, 1.0, size=length).astype(np.float32)
    vector.flags.writeable = False
    return vector


def _add_vector(msg: Message, context: Context) -> Message:
    """Train handler: half the global vector plus this client's fixed vector.

    The halving keeps every round's values within [-3, 3], inside secure
    aggregation's clipping range, however many rounds run: after ``r``
    rounds the global vector is ``2 (1 - 2^-r)`` times the clients' mean.
    """
    w = msg.content.array_records["arrays"][_VECTOR].numpy()
    partition = partition_id_of(context)
    out = ArrayRecord({_VECTOR: Array(0.5 * w + client_vector(partition, w.size))})
    metrics = MetricRecord({"num-examples": 1})
    return Message(RecordDict({"arrays": out, "metrics": metrics}), reply_to=msg)


@cache
def secure_vector_app() -> ClientApp:
    """Return the secure round's ClientApp (timing, secure aggregation, vector)."""
    app = RebuiltClientApp(secure_vector_app, mods=[timing_mod, secagg_mod])
    app.train()(_add_vector)
    identified: ClientApp = add_identify_handler(app)
    return identified


def _secure_config(rounds: int) -> ExperimentConfig:
    return validate(
        {
            "name": "secure-round",
            "rounds": rounds,
            "federation": {"num_clients": SECURE_CLIENTS},
            "evaluation": {"server": False},
        },
        "engine bench",
        "secure-round",
    )


def _secure_federation(
    grid: Grid, config: ExperimentConfig, recorder: RunRecorder, engine: str
) -> Result:
    """Run the secure round's strategy on ``grid`` (its ``run_federation``)."""
    fast = engine == "fedleak"
    poll = config.federation.poll_interval if fast else FLOWER_POLL_INTERVAL
    engine_grid = EngineGrid(grid, poll)
    recorder.attach(engine_grid, engine)
    inner = FedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=SECURE_CLIENTS,
        min_available_nodes=SECURE_CLIENTS,
    )
    strategy = SecureAggregation(inner, max_weight=1, seed=config.seed)
    start = ArrayRecord({_VECTOR: Array(np.zeros(SECURE_LENGTH, dtype=np.float32))})
    result: Result = strategy.start(
        grid=engine_grid,
        initial_arrays=start,
        num_rounds=config.rounds,
        timeout=config.federation.round_timeout,
        evaluate_fn=recorder.evaluate_fn,
    )
    return result


def _secure_result(result: Result, rounds: int) -> dict[str, Any]:
    w = result.arrays[_VECTOR].numpy().astype(np.float64)
    mean = np.mean(
        [client_vector(p, SECURE_LENGTH) for p in range(SECURE_CLIENTS)], axis=0
    )
    return {
        "digest": hashlib.sha256(result.arrays[_VECTOR].numpy().tobytes()).hexdigest(),
        "max_abs_error": float(np.max(np.abs(w - 2.0 * (1.0 - 0.5**rounds) * mean))),
    }


def _simulate_secure(config: ExperimentConfig, fast: bool, verbose: bool) -> Any:
    from flwr.simulation import run_simulation

    recorder = RunRecorder(config)
    outcome: dict[str, Result] = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        with native_threads(config.federation.server_threads):  # as run_federation
            outcome["result"] = _secure_federation(grid, config, recorder, _name(fast))

    engine: AbstractContextManager[bool] = (
        fast_engine_for(config.federation) if fast else nullcontext(False)
    )
    with quiet_flower(verbose), engine:
        run_simulation(
            server_app=server,
            client_app=secure_vector_app(),
            num_supernodes=SECURE_CLIENTS,
            backend_config=simulation_backend_config(1.0, inline=fast, verbose=verbose),
            verbose_logging=verbose,
        )
    if "result" not in outcome:
        raise fedleak.FedleakError("the secure-round simulation ended without a result")
    return timing_summary(recorder), _secure_result(outcome["result"], config.rounds)


def _essential_secure(config: ExperimentConfig, verbose: bool) -> Any:
    recorder = RunRecorder(config)
    grid = InProcessGrid(secure_vector_app(), SECURE_CLIENTS)
    result = _in_process(
        lambda: _secure_federation(grid, config, recorder, "in-process"), verbose
    )
    return timing_summary(recorder), _secure_result(result, config.rounds)


# --------------------------------------------------------------- quickstart
def _quickstart_config(rounds: int, engine: str, *more: str) -> ExperimentConfig:
    # not flower_app.resolve_config_path: importing flower_app installs
    # fedleak's engine functions (dormant), and the peer runs Flower's own
    path = resources.files("fedleak.sim_configs") / "quickstart.toml"
    return load_config(
        Path(str(path)), [f"rounds={rounds}", f"federation.engine='{engine}'", *more]
    )


def _quickstart_result(results: dict[str, Any]) -> dict[str, Any]:
    rounds = [
        {k: r[k] for k in ("round", "server", "train")} for r in results["rounds"]
    ]
    digest = hashlib.sha256(repr(rounds).encode()).hexdigest()
    return {"digest": digest, "final": results["final"]}


def _simulate_quickstart(rounds: int, fast: bool, verbose: bool, work: Path) -> Any:
    config = _quickstart_config(rounds, "fedleak" if fast else "flower")
    out = work / f"quickstart-{'fedleak' if fast else 'flower'}-{time.time_ns()}"
    outcome = run_experiment(config, out=out, verbose=verbose)
    return outcome.results["timing"], _quickstart_result(outcome.results)


def _essential_quickstart(rounds: int, work: Path, verbose: bool) -> Any:
    from fedleak.experiments.server import finish_run
    from fedleak.runtime.run_dir import make_run_dir

    # the evaluation in line: its time is then its compute (overlapped, as the
    # experiment file asks, it would also count the wait for idle CPU time)
    config = _quickstart_config(rounds, "fedleak", "evaluation.overlap=false")
    run_dir = make_run_dir(config.name, work / f"quickstart-essential-{time.time_ns()}")
    recorder = RunRecorder(config, run_dir)
    grid = InProcessGrid(make_experiment_client_app(), config.federation.num_clients)
    result = _in_process(lambda: run_federation(grid, config, recorder), verbose)
    results = finish_run(run_dir, config, result, recorder)
    return results["timing"], _quickstart_result(results)


# ------------------------------------------------------------------ summary
def _rows(timings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-round timing rows of several runs, each without its first round."""
    return [row for t in timings for row in t["rounds"][1:]]


def _medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rows) for key in COMPONENTS}


def _essential_rounds(rows: list[dict[str, Any]], actors: int) -> list[float]:
    """Each round's essential compute: server work + clients split over actors."""
    return [r["server_s"] + r["evaluate_s"] + r["wait_s"] / actors for r in rows]


def _essential(
    timings: list[dict[str, Any]], actors: int, per_block: int = 1
) -> dict[str, Any]:
    """Return the essential round of in-process runs, ``per_block`` runs a block."""
    rows = _rows(timings)
    per_round = _essential_rounds(rows, actors)
    blocks = [timings[k : k + per_block] for k in range(0, len(timings), per_block)]
    return {
        "runs_per_block": per_block,
        "median_round_s": statistics.median(per_round),
        "median_serial_round_s": statistics.median(r["wall_s"] for r in rows),
        "median": _medians(rows),
        "total_round_s": sum(per_round),
        "block_median_round_s": [
            statistics.median(_essential_rounds(_rows(block), actors))
            for block in blocks
        ],
        "round_s": per_round,
    }


def rounds_by_poll_steps(
    rows: list[dict[str, Any]], engine: dict[str, Any]
) -> dict[str, int] | None:
    """Count the rounds by their wait for replies in whole poll intervals.

    For an engine that polls (``wake_ups`` off, Flower's as shipped): its
    Grid pulls right after the push and then every ``poll_interval``, so an
    exchange waits a whole number of intervals plus a pull's few
    milliseconds, and a reply that misses a pull costs one interval more;
    the round's median falls on one of these counts. ``None`` for an engine
    woken by the replies.
    """
    if engine.get("wake_ups", True):
        return None
    poll = float(engine["poll_interval"])
    steps = sorted(int(r["wait_s"] // poll) for r in rows)
    return {str(k): steps.count(k) for k in sorted(set(steps))}


def _arm(timings: list[dict[str, Any]], engine: dict[str, Any]) -> dict[str, Any]:
    rows = _rows(timings)
    return {
        "engine": engine,
        "median_round_s": statistics.median(r["wall_s"] for r in rows),
        "median": _medians(rows),
        "total_round_s": sum(r["wall_s"] for r in rows),
        "block_median_round_s": [
            statistics.median(r["wall_s"] for r in _rows([t])) for t in timings
        ],
        "rounds_by_poll_steps": rounds_by_poll_steps(rows, engine),
        "round_s": [r["wall_s"] for r in rows],
    }


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return float(a[key] / b[key])


def _by_block(a: dict[str, Any], b: dict[str, Any]) -> list[float]:
    """Return ``a / b`` of each block's median round (blocks must pair up)."""
    return [
        x / y
        for x, y in zip(
            a["block_median_round_s"], b["block_median_round_s"], strict=True
        )
    ]


def _experiment(runs: dict[str, list[Any]], actors: int) -> dict[str, Any]:
    """Summarise one experiment's runs: each way's (timing, outcome) pairs.

    ``runs`` may also hold ``cpu_pairs``: the probes of
    :func:`fedleak.bench.cpu_pairs.measure_cpu_pairs` taken around the
    ``fedleak`` simulations, kept in the record with their throughputs.
    """
    per_block, left = divmod(len(runs["essential"]), len(runs["fedleak"]))
    if left or not per_block:
        raise ValueError(
            f"{len(runs['essential'])} in-process runs do not split evenly over "
            f"{len(runs['fedleak'])} blocks"
        )
    essential = _essential([t for t, _ in runs["essential"]], actors, per_block)
    arms = {
        name: _arm([t for t, _ in runs[name]], runs[name][0][0]["engine"])
        for name in ("fedleak", "flower")
    }
    fedleak, flower = arms["fedleak"], arms["flower"]
    outcomes = [o for name in WAYS for _, o in runs[name]]
    probes = runs.get("cpu_pairs", [])
    return {
        "actors": actors,
        "essential": essential,
        "fedleak": fedleak,
        "flower": flower,
        "fedleak_vs_essential": _ratio(fedleak, essential, "median_round_s"),
        "fedleak_vs_serial": fedleak["median_round_s"]
        / essential["median_serial_round_s"],
        "flower_vs_fedleak": _ratio(flower, fedleak, "median_round_s"),
        "fedleak_vs_essential_total": fedleak["total_round_s"]
        / (essential["total_round_s"] / per_block),
        "flower_vs_fedleak_total": _ratio(flower, fedleak, "total_round_s"),
        "fedleak_vs_essential_by_block": _by_block(fedleak, essential),
        "flower_vs_fedleak_by_block": _by_block(flower, fedleak),
        "same_results": len({o["digest"] for o in outcomes}) == 1,
        "outcomes": {name: [o for _, o in runs[name]] for name in WAYS},
        "cpu_pairs": probes,
        "cpu_pair_throughput": [p["pair_throughput"] for p in probes],
    }


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _actors(cpus_per_client: float, clients: int) -> int:
    """Clients that run at once: Ray's actors (one per ``cpus_per_client``), <= CPUs."""
    cpus = _cpus()
    return max(1, min(clients, int(cpus // cpus_per_client), cpus))


def run_engine_bench(
    out: Path,
    *,
    quick: bool = False,
    rounds: int | None = None,
    secure_rounds: int | None = None,
    verbose: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure simulated rounds against their essential compute; write the record.

    Parameters
    ----------
    out : pathlib.Path
        The JSON record (written atomically).
    quick : bool, default=False
        One block of 30 quickstart and 8 secure rounds per way (a full run:
        two blocks of 150 and 150; 30 secure rounds gave medians that moved
        by a quarter between runs, and 60 rounds, 2 s of the machine's
        time, fell within one of its slow or fast spells).
    rounds, secure_rounds : int, optional
        Rounds per run of each experiment (overrides ``quick``'s choice).
    verbose : bool, default=False
        Show Flower's and Ray's logs.
    progress : callable, optional
        Called with a line before each run.

    Returns
    -------
    dict
        The record (see the module docstring).
    """
    blocks = 1 if quick else 2
    rounds = rounds or (30 if quick else 150)
    secure_rounds = secure_rounds or (8 if quick else 150)
    if rounds < 2 or secure_rounds < 2:
        raise fedleak.ConfigError("rounds must be >= 2 (the first round is left out)")
    say = progress or (lambda line: None)
    # the fedleak engine's simulations keep freed memory in the server process
    # (for good) and in their Ray processes; the in-process runs need the same
    # for the server, and the peer's Ray processes must not get it
    keep_freed_memory(children=False)
    started = time.perf_counter()
    load_before = os.getloadavg()
    say("CLI start-up: fedleak and flwr, 5 fresh processes each")
    cli_startup = measure_cli_startup(repeats=5)
    secure_config = _secure_config(secure_rounds)
    quickstart, secure = _run_blocks(blocks, rounds, secure_config, verbose, say)
    quick_config = _quickstart_config(rounds, "fedleak")
    record = BenchRecord("engine", Path(out))
    document = record.write(
        {
            "quick": quick,
            "blocks": blocks,
            "machine": {
                "cpus_used": _cpus(),
                "load_average_before": list(load_before),
                "load_average_after": list(os.getloadavg()),
            },
            "quickstart": {
                "rounds": rounds,
                "num_clients": quick_config.federation.num_clients,
                **_experiment(
                    quickstart,
                    _actors(
                        quick_config.federation.cpus_per_client,
                        quick_config.federation.num_clients,
                    ),
                ),
            },
            "secure_round": {
                "rounds": secure_rounds,
                "num_clients": SECURE_CLIENTS,
                "vector_length": SECURE_LENGTH,
                **_experiment(secure, _actors(1.0, SECURE_CLIENTS)),
            },
            "cli_startup": cli_startup,
            "total_s": time.perf_counter() - started,
        }
    )
    return document


def _run_blocks(
    blocks: int,
    rounds: int,
    secure_config: ExperimentConfig,
    verbose: bool,
    say: Callable[[str], None],
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """Run every way of both experiments, ``blocks`` times in alternating order."""

    def say_step(label: str, way: str) -> None:
        say(f"{label}, {way}")

    quickstart: dict[str, list[Any]] = {"essential": [], "fedleak": [], "flower": []}
    secure: dict[str, list[Any]] = {"essential": [], "fedleak": [], "flower": []}
    with tempfile.TemporaryDirectory(prefix="fedleak-bench-engine-") as tmp:
        work = Path(tmp)
        for block in range(blocks):
            order = [True, False] if block % 2 == 0 else [False, True]
            step = f"block {block + 1}/{blocks}"
            for fast in order:
                _bracketed(
                    quickstart,
                    fast,
                    partial(_essential_quickstart, rounds, work, verbose),
                    partial(_simulate_quickstart, rounds, fast, verbose, work),
                    partial(say_step, f"{step}: quickstart"),
                    measure_cpu_pairs,
                )
            for fast in order:
                _bracketed(
                    secure,
                    fast,
                    partial(_essential_secure, secure_config, verbose),
                    partial(_simulate_secure, secure_config, fast, verbose),
                    partial(say_step, f"{step}: secure round"),
                    measure_cpu_pairs,
                )
    return quickstart, secure


def _bracketed(
    runs: dict[str, list[Any]],
    fast: bool,
    essential: Callable[[], Any],
    simulate: Callable[[], Any],
    say: Callable[[str], None],
    probe: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """Run one simulation; fedleak's between two in-process runs.

    The machine's speed drifts by a fifth to a third within minutes, and an
    in-process run lasts a few seconds: measured once per block, the
    essential round could fall in another state than the fedleak round it
    is set against. Measured just before and just after it, it spans the
    same stretch of time. ``probe`` (if given) runs before the first and
    after the last of the three; its results go to ``runs["cpu_pairs"]``.
    """
    if fast:
        _probe_cpus(runs, probe, say)
        say("in process")
        runs["essential"].append(essential())
    say(f"{_name(fast)} engine")
    runs[_name(fast)].append(simulate())
    time.sleep(SETTLE_S)
    if fast:
        say("in process")
        runs["essential"].append(essential())
        _probe_cpus(runs, probe, say)


def _probe_cpus(
    runs: dict[str, list[Any]],
    probe: Callable[[], dict[str, Any]] | None,
    say: Callable[[str], None],
) -> None:
    if probe is not None:
        say("two CPUs alone and at once")
        runs.setdefault("cpu_pairs", []).append(probe())


def _spread_line(name: str, row: dict[str, Any]) -> str:
    """One line: the sums' ratios, both ratios per block, the poll steps."""
    steps = row["flower"]["rounds_by_poll_steps"] or {}
    counted = sum(steps.values())
    split = ", ".join(f"{k}: {100 * n / counted:.0f}%" for k, n in steps.items())

    def by_block(key: str) -> str:
        return " / ".join(f"{r:.2f}x" for r in row[key])

    return (
        f"{name}: rounds summed fedleak / essential "
        f"{row['fedleak_vs_essential_total']:.2f}x, Flower / fedleak "
        f"{row['flower_vs_fedleak_total']:.2f}x; by block fedleak / essential "
        f"{by_block('fedleak_vs_essential_by_block')}, Flower / fedleak "
        f"{by_block('flower_vs_fedleak_by_block')}; Flower's rounds by poll "
        f"steps {split}{_pairs_words(row.get('cpu_pair_throughput', []))}"
    )


def _pairs_words(throughputs: list[float | None]) -> str:
    """Return the CPU probes' throughputs, in order, as the end of a summary line."""
    found = [f"{t:.2f}" for t in throughputs if t is not None]
    if not found:
        return ""
    return f"; two CPUs at once ran at {' / '.join(found)} of their speed alone"


def contention_warning(record: dict[str, Any]) -> str | None:
    """Return a warning where a CPU probe of the run found the CPUs slowing each other.

    Below :data:`CONTENDED_BELOW` (two CPUs at once giving less than 0.85 of
    their speed alone) the simulation's clients slow each other while the
    in-process way computes on one CPU, so ``fedleak / essential`` reads
    high; ``None`` where every probe stayed above it or none ran.
    """
    found = [
        t
        for name in ("quickstart", "secure_round")
        for t in record.get(name, {}).get("cpu_pair_throughput", [])
        if t is not None
    ]
    if not found or min(found) >= CONTENDED_BELOW:
        return None
    return (
        f"warning: in {sum(t < CONTENDED_BELOW for t in found)} of {len(found)} "
        f"probes two CPUs at once ran at as little as {min(found):.2f} of their "
        "speed alone: the simulation's clients slowed each other, so fedleak / "
        "essential reads high; compare runs on a quiet machine"
    )


def _name(fast: bool) -> str:
    return "fedleak" if fast else "flower"


def command(
    out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
        "bench-engine.json"
    ),
    quick: Annotated[
        bool,
        typer.Option("--quick", help="One block of 30 + 8 rounds (about 2 minutes)."),
    ] = False,
    rounds: Annotated[
        int | None, typer.Option(help="Quickstart rounds per run (default 150).")
    ] = None,
    secure_rounds: Annotated[
        int | None, typer.Option(help="Secure rounds per run (default 150).")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show Flower's and Ray's logs.")
    ] = False,
) -> None:
    """Time simulated rounds against their compute, fedleak's engine vs Flower's."""
    record = run_engine_bench(
        out,
        quick=quick,
        rounds=rounds,
        secure_rounds=secure_rounds,
        verbose=verbose,
        progress=say,
    )
    table = Table(
        "experiment",
        "essential round (s)",
        "fedleak engine (s)",
        "Flower engine (s)",
        "fedleak / essential",
        "Flower / fedleak",
        "same numbers",
    )
    for name in ("quickstart", "secure_round"):
        row = record[name]
        table.add_row(
            name,
            f"{row['essential']['median_round_s']:.4f}",
            f"{row['fedleak']['median_round_s']:.4f}",
            f"{row['flower']['median_round_s']:.4f}",
            f"{row['fedleak_vs_essential']:.2f}x",
            f"{row['flower_vs_fedleak']:.2f}x",
            str(row["same_results"]),
        )
    console.print(table)
    for name in ("quickstart", "secure_round"):
        console.print(_spread_line(name, record[name]), highlight=False)
    warning = contention_warning(record)
    if warning:
        err.print(warning, style="yellow", highlight=False)
    startup = record["cli_startup"]
    console.print(
        "CLI start-up (median of 5): "
        + ", ".join(
            f"{name} {entry['median_s']:.2f} s"
            for name, entry in startup.items()
            if isinstance(entry, dict)
        ),
        highlight=False,
    )
    written(out)
