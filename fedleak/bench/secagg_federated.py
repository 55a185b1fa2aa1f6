"""Part 1 of ``fedleak bench secagg``: every method in one Flower simulation.

The same ``N`` clients, each holding a fixed float32 vector of length ``L``,
answer four servers in one simulation (one Ray instance, the same actors):

``fedavg``
    Flower's Message-API ``FedAvg``, unprotected: the floor.
``secagg-double``
    ``SecureAggregation(FedAvg)`` in its default mode (double masking,
    Bonawitz et al. 2017): two exchanges a round (upload, unmask).
``secagg-thesis``
    ``SecureAggregation(FedAvg, mode="thesis")``, the seed's scheme (seed
    000 Ch. 4.1): one exchange a round without dropouts.
``secaggplus``
    Flower's own ``SecAggPlusWorkflow(num_shares=3,
    reconstruction_threshold=2)`` around its legacy ``FedAvg`` with
    ``secaggplus_mod`` (its defaults otherwise: clipping range 8,
    quantisation range 2^22): four exchanges a round. Three shares means
    each client masks with two neighbours only, the cheapest SecAgg+ setting.

The simulation runs on fedleak's engine
(:func:`fedleak.runtime.engine.fast_engine`: pushes wake the dispatcher and
replies the server; polls are only a safety net, 0.1 s apart), so a round's
time is the protocol's and not Flower's 0.1 s polls. Methods run in blocks,
in an order rotated from block to block; each ``start`` runs ``rounds``
rounds and its first round (key set-up, Ray's start-up in the first block)
is left out. The ClientApp pickles by name (:class:`_BenchClientApp`): Flower
ships it to an actor with every message.

Per round, :class:`MeteredGrid` records every message exchange: the time
from push to the last reply, the clients' handler times (reported by
:func:`~fedleak.runtime.engine.timing_mod`) and the payload bytes each
way (array data as shipped, bytes and strings of config records, 8 bytes per number).
The server's own time is the round's time less its exchanges; for fedleak's
modes the server session's compute per stage
(:attr:`fedleak.secagg.RoundResult.seconds`) is recorded too. Every round's
aggregate is compared with the exact float64 mean of the clients' vectors.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, Final

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedleak.errors import ConfigError, FedleakError
from fedleak.runtime.engine import (
    EngineGrid,
    fast_engine,
    simulation_backend_config,
    timing_mod,
)
from fedleak.runtime.logs import quiet_flower
from fedleak.secagg import Mode
from fedleak.strategies import SecureAggregation

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "METHODS",
    "STAGES",
    "MeteredGrid",
    "client_vector",
    "payload_bytes",
    "run_federated",
]

#: The methods, in the order of the first block.
METHODS: Final = ("fedavg", "secagg-double", "secagg-thesis", "secaggplus")
#: Each method's message exchanges in one round (after its first).
STAGES: Final = {
    "fedavg": ("train",),
    "secagg-double": ("upload", "unmask"),
    "secagg-thesis": ("upload",),
    "secaggplus": ("setup", "share-keys", "collect-masked-vectors", "unmask"),
}
#: Seconds between polls where no wake-up comes (inside the engine, replies
#: wake the server and its safety polls are 0.1 s apart).
DEFAULT_POLL_INTERVAL: Final = 0.001
_VECTOR = "w"
_MODES: Final[dict[str, Mode]] = {
    "secagg-double": "double-masking",
    "secagg-thesis": "thesis",
}


@cache
def client_vector(partition: int, length: int) -> np.ndarray:
    """Return client ``partition``'s fixed float32 vector (values in [-1, 1)).

    Cached and read-only: drawing it is not part of a round.
    """
    rng = np.random.default_rng([0xBE7C, partition])
    vector = rng.uniform(-1.0, 1.0, size=length).astype(np.float32)
    vector.flags.writeable = False
    return vector


# ------------------------------------------------------------------ bytes
def _value_bytes(value: Any) -> int:
    if isinstance(value, bytes | str):
        return len(value)
    if isinstance(value, list):
        return sum(_value_bytes(v) for v in value)
    return 8


def payload_bytes(content: RecordDict) -> int:
    """Return a message's payload bytes.

    Array data as Flower ships it (numpy arrays as ``.npy``, header
    included), the bytes and strings of config records, and 8 bytes per
    number; Flower's envelope (metadata, keys, protobuf framing) is left out.
    """
    total = 0
    for record in content.values():
        if isinstance(record, ArrayRecord):
            total += sum(len(array.data) for array in record.values())
        elif isinstance(record, ConfigRecord | MetricRecord):
            total += sum(_value_bytes(v) for v in record.values())
    return total


@dataclass(frozen=True)
class _Stage:
    """One exchange of a round: wait, clients' compute, bytes per client."""

    wait_s: float
    client_compute_s: float
    bytes_down_per_client: float
    bytes_up_per_client: float


class MeteredGrid(EngineGrid):
    """fedleak's engine Grid that also counts each exchange's payload bytes.

    The bytes are counted after the replies are in, outside the exchange's
    measured wait. Exchanges without messages (an evaluation nobody is
    sampled for) are not recorded.
    """

    def __init__(self, grid: Grid, poll_interval: float) -> None:
        super().__init__(grid, poll_interval)
        self.stages: list[_Stage] = []

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Exchange as :class:`EngineGrid` does; record the exchange's figures."""
        outgoing = list(messages)
        if not outgoing:  # e.g. an evaluation round with no node sampled
            return super().send_and_receive(outgoing, timeout=timeout)
        down = sum(payload_bytes(m.content) for m in outgoing if m.has_content())
        replies = list(super().send_and_receive(outgoing, timeout=timeout))
        up = sum(payload_bytes(m.content) for m in replies if m.has_content())
        exchange = self.exchanges[-1]
        self.stages.append(
            _Stage(
                wait_s=exchange.wait_s,
                client_compute_s=(
                    statistics.median(exchange.compute_s) if exchange.compute_s else 0.0
                ),
                bytes_down_per_client=down / max(1, len(outgoing)),
                bytes_up_per_client=up / max(1, len(replies)),
            )
        )
        return replies

    def take_stages(self) -> list[_Stage]:
        """Return the exchanges since the last call and forget them."""
        taken, self.stages = self.stages, []
        self.exchanges.clear()
        return taken


# ------------------------------------------------------------------ rounds
@dataclass
class _RoundLog:
    """One method's timed rounds: time, stages and error of every round."""

    name: str
    true_update: np.ndarray
    grid: MeteredGrid
    round_s: list[float] = field(default_factory=list)
    rel_error: list[float] = field(default_factory=list)
    abs_error: list[float] = field(default_factory=list)
    stages: list[list[_Stage]] = field(default_factory=list)
    server_compute: list[dict[str, float]] = field(default_factory=list)
    _last: float | None = None
    _prev: np.ndarray | None = None

    def start(self) -> None:
        """Forget the previous ``start`` call's clock and model."""
        self._last, self._prev = None, None

    def __call__(self, server_round: int, w: np.ndarray) -> None:
        """Close round ``server_round`` (the evaluation hook; round 1 is not kept)."""
        now = time.perf_counter()
        stages = self.grid.take_stages()
        w64 = w.astype(np.float64)
        if server_round > 1 and self._last is not None and self._prev is not None:
            expected = self._prev + self.true_update
            err = float(np.max(np.abs(w64 - expected)))
            self.round_s.append(now - self._last)
            self.abs_error.append(err)
            self.rel_error.append(err / float(np.max(np.abs(expected))))
            self.stages.append(stages)
        self._prev = w64
        self._last = time.perf_counter()


# fedleak.strategies resolves at run time (the checkout's folder), not for mypy
class _TimedSecureAggregation(SecureAggregation):  # type: ignore[misc]
    """``SecureAggregation`` keeping its server session's compute per round."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compute: list[dict[str, float]] = []

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate as usual; keep the round's upload and unmask compute."""
        state = self._round
        result: tuple[ArrayRecord | None, MetricRecord | None]
        result = super().aggregate_train(server_round, replies)
        if state is not None:
            seconds = state.aggregation.finish().seconds
            self.compute.append(
                {
                    "upload_s": seconds["upload"],
                    "unmask_s": seconds["unmask"],
                }
            )
        return result


# ------------------------------------------------------------------ clients
def _add_vector(msg: Message, context: Context) -> Message:
    partition = int(context.node_config["partition-id"])
    w = msg.content.array_records["arrays"][_VECTOR].numpy()
    out = ArrayRecord({_VECTOR: Array(w + client_vector(partition, w.size))})
    metrics = MetricRecord({"num-examples": 1})
    return Message(RecordDict({"arrays": out, "metrics": metrics}), reply_to=msg)


def _is_legacy(msg: Message) -> bool:
    return any(
        k.startswith(("fitins", "evaluateins", "getparametersins", "secaggplus"))
        for k in msg.content
    )


class _BenchClientApp(ClientApp):
    """The benchmark's one ClientApp, pickled by name.

    Flower's Ray backend pickles the ClientApp with every message it hands to
    an actor. An app built from closures and a local class travels by value
    (their code, and a scan of the loaded modules for each function): 3-4 ms
    more per message's round trip and 1.2 ms more of the server's CPU on the
    development machine, paid by every method alike. This one pickles as a
    call to :func:`_client_app`, which each process answers from its cache.
    """

    def __init__(self, length: int) -> None:
        super().__init__(mods=[timing_mod])
        self.length = length

    def __reduce__(self) -> tuple[Callable[[int], ClientApp], tuple[int]]:
        return (_client_app, (self.length,))


class _Client(NumPyClient):
    """The legacy client behind ``secaggplus_mod``: adds its fixed vector."""

    def __init__(self, partition: int, length: int) -> None:
        self.partition = partition
        self.length = length

    def fit(
        self, parameters: list[np.ndarray], config: dict[str, Any]
    ) -> tuple[list[np.ndarray], int, dict[str, Any]]:
        """Return the parameters plus this client's vector, one example."""
        return [parameters[0] + client_vector(self.partition, self.length)], 1, {}


@cache
def _client_app(length: int) -> ClientApp:
    """One ClientApp answering all four servers (timed by ``timing_mod``)."""
    from flwr.client.mod import secaggplus_mod

    from fedleak.clients.secagg import make_secagg_mod

    legacy = ClientApp(
        client_fn=lambda ctx: _Client(
            int(ctx.node_config["partition-id"]), length
        ).to_client(),
        mods=[secaggplus_mod],
    )
    modern = ClientApp(mods=[make_secagg_mod(accept_thesis=True)])
    modern.train()(_add_vector)
    app = _BenchClientApp(length)

    @app.train()
    def dispatch(msg: Message, context: Context) -> Message:
        return legacy(msg, context) if _is_legacy(msg) else modern(msg, context)

    return app


# ------------------------------------------------------------------ servers
@dataclass(frozen=True)
class _Setting:
    n_clients: int
    length: int
    rounds: int


def _run_fedavg(grid: Grid, setting: _Setting, log: _RoundLog) -> None:
    strategy = FedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=setting.n_clients,
        min_available_nodes=setting.n_clients,
    )
    _start(strategy, grid, setting, log)


def _run_fedleak(grid: Grid, setting: _Setting, log: _RoundLog, mode: Mode) -> None:
    inner = FedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=setting.n_clients,
        min_available_nodes=setting.n_clients,
    )
    strategy = _TimedSecureAggregation(inner, mode=mode, max_weight=1, timeout=600)
    _start(strategy, grid, setting, log)
    log.server_compute.extend(strategy.compute[1:])  # the first round is left out


def _start(
    strategy: FedAvg | SecureAggregation, grid: Grid, s: _Setting, log: _RoundLog
) -> None:
    log.start()
    initial = ArrayRecord({_VECTOR: Array(np.zeros(s.length, dtype=np.float32))})
    strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=s.rounds,
        timeout=600,
        evaluate_fn=lambda r, arrays: log(r, arrays[_VECTOR].numpy()),
    )


def _run_secaggplus(
    grid: Grid, context: Context, setting: _Setting, log: _RoundLog
) -> None:
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    def evaluate(r: int, parameters: list[np.ndarray], config: Any) -> None:
        log(r, parameters[0])

    log.start()
    strategy = LegacyFedAvg(
        fraction_fit=1.0,
        fraction_evaluate=0.0,
        min_fit_clients=setting.n_clients,
        min_available_clients=setting.n_clients,
        initial_parameters=ndarrays_to_parameters(
            [np.zeros(setting.length, dtype=np.float32)]
        ),
        evaluate_fn=evaluate,
    )
    legacy_context = LegacyContext(
        context=context,
        config=ServerConfig(num_rounds=setting.rounds),
        strategy=strategy,
    )
    workflow = DefaultWorkflow(
        fit_workflow=SecAggPlusWorkflow(
            num_shares=3, reconstruction_threshold=2, timeout=600
        )
    )
    workflow(grid, legacy_context)


def _server_app(
    setting: _Setting,
    blocks: int,
    poll_interval: float,
    logs: dict[str, _RoundLog],
    engine: dict[str, Any],
    true_update: np.ndarray,
) -> ServerApp:
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        metered = MeteredGrid(grid, poll_interval)
        engine.update(metered.settings())
        for name in METHODS:
            logs[name] = _RoundLog(name, true_update, metered)
        runs: dict[str, Callable[[], None]] = {
            "fedavg": lambda: _run_fedavg(metered, setting, logs["fedavg"]),
            "secaggplus": lambda: _run_secaggplus(
                metered, context, setting, logs["secaggplus"]
            ),
        }
        for name, mode in _MODES.items():
            runs[name] = partial(_run_fedleak, metered, setting, logs[name], mode)
        names = list(METHODS)
        for block in range(blocks):
            k = block % len(names)
            for name in names[k:] + names[:k]:
                runs[name]()

    return server


# ------------------------------------------------------------------ summary
def _stage_medians(name: str, rounds: list[list[_Stage]]) -> dict[str, Any]:
    """Median figures per stage; rounds with an unexpected exchange count apart."""
    labels = STAGES[name]
    regular = [r for r in rounds if len(r) == len(labels)]
    out: dict[str, Any] = {}
    for k, label in enumerate(labels):
        column = [r[k] for r in regular]
        if not column:
            continue
        out[label] = {
            key: statistics.median(getattr(s, key) for s in column)
            for key in (
                "wait_s",
                "client_compute_s",
                "bytes_down_per_client",
                "bytes_up_per_client",
            )
        }
    return out


def _method_summary(log: _RoundLog) -> dict[str, Any]:
    if not log.round_s:
        raise FedleakError(f"the benchmark recorded no round of {log.name}")
    server_s = [
        t - sum(s.wait_s for s in stages)
        for t, stages in zip(log.round_s, log.stages, strict=True)
    ]
    summary: dict[str, Any] = {
        "median_round_s": statistics.median(log.round_s),
        "round_s": log.round_s,
        "median_server_s": statistics.median(server_s),
        "exchanges_per_round": statistics.median(len(s) for s in log.stages),
        "irregular_rounds": sum(len(s) != len(STAGES[log.name]) for s in log.stages),
        "stages": _stage_medians(log.name, log.stages),
        "bytes_per_client": {
            "down": statistics.median(
                sum(s.bytes_down_per_client for s in r) for r in log.stages
            ),
            "up": statistics.median(
                sum(s.bytes_up_per_client for s in r) for r in log.stages
            ),
        },
        "max_abs_error": max(log.abs_error),
        "max_rel_error": max(log.rel_error),
    }
    if log.server_compute:
        summary["server_compute"] = {
            key: statistics.median(c[key] for c in log.server_compute)
            for key in log.server_compute[0]
        }
    return summary


def _ratios(methods: dict[str, dict[str, Any]]) -> dict[str, float]:
    def median(name: str) -> float:
        value: float = methods[name]["median_round_s"]
        return value

    return {
        "secaggplus_vs_double": median("secaggplus") / median("secagg-double"),
        "double_vs_thesis": median("secagg-double") / median("secagg-thesis"),
        "double_vs_fedavg": median("secagg-double") / median("fedavg"),
        "thesis_vs_fedavg": median("secagg-thesis") / median("fedavg"),
        "secaggplus_vs_fedavg": median("secaggplus") / median("fedavg"),
    }


def run_federated(
    n_clients: int,
    length: int,
    *,
    rounds: int,
    blocks: int,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run the four methods in one simulation at ``(N, L)``; return their figures.

    Parameters
    ----------
    n_clients : int
        Simulated clients (>= 3), all sampled every round.
    length : int
        Entries of every client's vector.
    rounds : int
        Rounds per ``start`` of each method (>= 2; the first is left out).
    blocks : int
        Blocks, each running every method once, rotated.
    poll_interval : float, default=DEFAULT_POLL_INTERVAL
        The engine's fallback seconds between polls.
    verbose : bool, default=False
        Show Flower's and Ray's logs.

    Returns
    -------
    dict
        ``engine``, ``methods`` (per method: ``median_round_s``, ``round_s``,
        ``median_server_s``, ``stages``, ``bytes_per_client``,
        ``max_abs_error``, ``max_rel_error`` and, for fedleak's modes,
        ``server_compute``) and ``ratios``.
    """
    from flwr.simulation import run_simulation

    if n_clients < 3 or length < 1 or rounds < 2 or blocks < 1:
        raise ConfigError(
            "the federated part needs N >= 3, L >= 1, rounds >= 2 and blocks >= 1; "
            f"got N={n_clients}, L={length}, rounds={rounds}, blocks={blocks}"
        )
    setting = _Setting(n_clients, length, rounds)
    true_update = np.mean(
        [client_vector(p, length).astype(np.float64) for p in range(n_clients)],
        axis=0,
    )
    logs: dict[str, _RoundLog] = {}
    engine: dict[str, Any] = {"engine": "fedleak"}
    server = _server_app(setting, blocks, poll_interval, logs, engine, true_update)
    with quiet_flower(verbose), fast_engine(poll_interval) as swapped:
        engine["swapped"] = swapped
        run_simulation(
            server_app=server,
            client_app=_client_app(length),
            num_supernodes=n_clients,
            backend_config=simulation_backend_config(1.0, verbose=verbose),
            verbose_logging=verbose,
        )
    if len(logs) != len(METHODS):
        raise FedleakError("the secagg simulation ended before its server ran")
    methods = {name: _method_summary(logs[name]) for name in METHODS}
    return {
        "n_clients": n_clients,
        "length": length,
        "actors": min(n_clients, len(os.sched_getaffinity(0))),
        "engine": engine,
        "methods": methods,
        "ratios": _ratios(methods),
    }
