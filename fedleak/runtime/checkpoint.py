"""Checkpoints of a running experiment, so ``fedleak run --resume`` goes on exactly.

After every ``[federation] checkpoint_every``-th round (and at a stop) the
server writes ``checkpoint.npz`` into the run directory, atomically: the
global model, the round it follows, the per-round client metrics so far,
the strategy's scalar state (e.g. the adaptive clipping norm of Flower's DP
wrapper), the state of the seeded DP noise generator (with ``[privacy]
noise_seed``) and every simulated client's ``Context.state`` (batch cursor,
privacy accounting, per-node protocol state), keyed by partition id.
Everything else a round uses is derived from the seed and the round number
(sampling, batches, client randomness), so a resumed run computes the same
numbers as an uninterrupted one.

A checkpoint holds no pickles: arrays, JSON, and Flower's protobuf encoding
of each ``RecordDict``.
"""

from __future__ import annotations

import functools
import io
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto
from flwr.serverapp.strategy import Result, Strategy

from fedleak.errors import ConfigError
from fedleak.files import write_atomic

__all__ = [
    "CHECKPOINT_NAME",
    "Checkpoint",
    "ClientStates",
    "RoundCheckpoints",
    "capture_client_states",
    "load_checkpoint",
    "restore_strategy_state",
    "save_checkpoint",
    "strategy_state",
]

CHECKPOINT_NAME = "checkpoint.npz"
_FORMAT = 1
_SCALARS = (bool, int, float, str)


@dataclass
class Checkpoint:
    """What a run needs to go on after ``round``."""

    round: int
    arrays: dict[str, np.ndarray]
    train_metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    evaluate_metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    strategy: dict[str, Any] = field(default_factory=dict)
    noise_state: dict[str, Any] | None = None
    clients: dict[int, bytes] = field(default_factory=dict)

    def array_record(self) -> ArrayRecord:
        """Return the global model as an ``ArrayRecord`` (names in saved order)."""
        return ArrayRecord({name: Array(value) for name, value in self.arrays.items()})


def strategy_state(strategy: Strategy) -> dict[str, Any]:
    """Collect the scalar attributes of ``strategy`` and the strategies it wraps.

    Flower's wrappers keep the wrapped strategy in ``.strategy``; keys are
    ``"<depth>.<attribute>"``. Arrays, grids and other objects are left out:
    fedleak's strategies derive them from the seed and round.
    """
    state: dict[str, Any] = {}
    node: Any = strategy
    depth = 0
    while isinstance(node, Strategy):
        for name, value in vars(node).items():
            if isinstance(value, _SCALARS):
                state[f"{depth}.{name}"] = value
        node, depth = getattr(node, "strategy", None), depth + 1
    return state


def restore_strategy_state(strategy: Strategy, state: Mapping[str, Any]) -> None:
    """Set the attributes :func:`strategy_state` collected."""
    chain: list[Any] = []
    node: Any = strategy
    while isinstance(node, Strategy):
        chain.append(node)
        node = getattr(node, "strategy", None)
    for key, value in state.items():
        depth, _, name = key.partition(".")
        if int(depth) < len(chain):
            setattr(chain[int(depth)], name, value)


def numpy_state_from_json(state: Mapping[str, Any]) -> tuple[Any, ...]:
    """Turn the JSON form back into ``numpy.random.RandomState.set_state``'s tuple."""
    return (
        str(state["kind"]),
        np.array(state["keys"], dtype=np.uint32),
        int(state["pos"]),
        int(state["has_gauss"]),
        float(state["gauss"]),
    )


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.npz`` into ``run_dir``, atomically; return its path."""
    meta = {
        "format": _FORMAT,
        "round": checkpoint.round,
        "train_metrics": {str(r): m for r, m in checkpoint.train_metrics.items()},
        "evaluate_metrics": {str(r): m for r, m in checkpoint.evaluate_metrics.items()},
        "strategy": checkpoint.strategy,
        "noise_state": checkpoint.noise_state,
        "model": list(checkpoint.arrays),
    }
    entries: dict[str, np.ndarray] = {
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    }
    for index, value in enumerate(checkpoint.arrays.values()):
        entries[f"model{index}"] = value
    for partition, blob in checkpoint.clients.items():
        entries[f"client{partition}"] = np.frombuffer(blob, dtype=np.uint8)

    def write(tmp: Path) -> None:
        buffer = io.BytesIO()
        savez: Any = np.savez
        savez(buffer, **entries)
        tmp.write_bytes(buffer.getvalue())

    path = run_dir / CHECKPOINT_NAME
    write_atomic(path, write)
    return path


def load_checkpoint(run_dir: Path) -> Checkpoint:
    """Read ``run_dir``'s checkpoint.

    Raises
    ------
    fedleak.errors.ConfigError
        If there is none or it cannot be read.
    """
    path = run_dir / CHECKPOINT_NAME
    if not path.is_file():
        raise ConfigError(
            f"{run_dir}: no {CHECKPOINT_NAME} (the run stopped before its first "
            "round finished, or is not a fedleak run directory); start it again"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            names = meta["model"]
            arrays = {name: data[f"model{i}"] for i, name in enumerate(names)}
            clients = {
                int(key[len("client") :]): bytes(data[key])
                for key in data.files
                if key.startswith("client")
            }
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"{path}: not a readable checkpoint ({err})") from None
    if meta.get("format") != _FORMAT:
        raise ConfigError(f"{path}: checkpoint format {meta.get('format')} unknown")
    return Checkpoint(
        round=int(meta["round"]),
        arrays=arrays,
        train_metrics={int(r): m for r, m in meta["train_metrics"].items()},
        evaluate_metrics={int(r): m for r, m in meta["evaluate_metrics"].items()},
        strategy=dict(meta["strategy"]),
        noise_state=meta["noise_state"],
        clients=clients,
    )


class ClientStates:
    """The simulated clients' ``Context.state``, read and restored by partition id.

    Flower's simulation keeps each virtual node's ``Context`` in the driver
    process (one ``DeprecatedRunInfoStore`` per node);
    :meth:`attach` receives those stores when the simulation registers its
    nodes, and puts back the states of :attr:`restore` (a checkpoint's)
    before the first message.
    """

    def __init__(self, restore: Mapping[int, bytes] | None = None) -> None:
        self.stores: dict[int, Any] = {}
        self.restore = dict(restore or {})
        self._lock = threading.Lock()

    def attach(self, stores: Mapping[int, Any]) -> None:
        """Take the node stores; restore the saved states into them."""
        with self._lock:
            self.stores = dict(stores)
            for store in self.stores.values():
                saved = self.restore.get(self._partition(store))
                if saved is None:
                    continue
                for info in store.run_infos.values():
                    info.context.state = _decode(saved)

    @staticmethod
    def _partition(store: Any) -> int:
        return int(store.node_config["partition-id"])

    def snapshot(self) -> dict[int, bytes]:
        """Return every node's current ``Context.state``, by partition id."""
        with self._lock:
            out: dict[int, bytes] = {}
            for store in self.stores.values():
                for info in store.run_infos.values():
                    out[self._partition(store)] = _encode(info.context.state)
            return out


def _encode(state: RecordDict) -> bytes:
    return bytes(recorddict_to_proto(state).SerializeToString())


def _decode(blob: bytes) -> RecordDict:
    proto = RecordDictProto()
    proto.ParseFromString(blob)
    return recorddict_from_proto(proto)


@contextmanager
def capture_client_states(clients: ClientStates) -> Iterator[None]:
    """Hand the simulation's per-node Context stores to ``clients``.

    Flower 1.41 creates them in ``vce_api._register_node_info_stores`` (called
    once per simulation, before any message); the wrapper passes its result
    on. Where the function is missing (another Flower) runs still work, but
    checkpoints carry no client state.
    """
    from flwr.server.superlink.fleet.vce import vce_api

    original = getattr(vce_api, "_register_node_info_stores", None)
    if original is None:  # pragma: no cover - another Flower version
        yield
        return

    @functools.wraps(original)
    def register(*args: Any, **kwargs: Any) -> Any:
        stores = original(*args, **kwargs)
        clients.attach(stores)
        return stores

    vce_api._register_node_info_stores = register
    try:
        yield
    finally:
        vce_api._register_node_info_stores = original


class _NoiseState(Protocol):
    def to_json(self) -> dict[str, Any] | None: ...


def _plain(record: MetricRecord | None) -> dict[str, Any]:
    return {} if record is None else {k: v for k, v in record.items()}


def _plain_rounds(
    records: dict[int, MetricRecord], converted: dict[int, dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """Return every round's metrics as plain dicts, converting only new rounds."""
    for r, record in records.items():
        if r not in converted:
            converted[r] = _plain(record)
    if len(converted) != len(records):  # a round left the result: start over
        converted.clear()
        converted.update((r, _plain(m)) for r, m in records.items())
    return dict(converted)


class RoundCheckpoints:
    """Snapshots every finished round, writes those due and, on a stop, the last.

    A snapshot holds the model as an ``ArrayRecord`` (converted to arrays only
    when written), the clients' metrics so far, the strategy's state, the
    noise stream's state and the simulated clients' states. A round is due
    every ``every`` rounds (0: never) and at ``last_round``.

    Parameters
    ----------
    run_dir : Path or None
        Where ``checkpoint.npz`` goes (None: nothing is written).
    every, last_round : int
        The run's ``checkpoint_every`` and its number of rounds.
    strategy, noise, clients
        Whose states each snapshot holds (``clients`` None: no client states).
    saved_round : int
        The last round already on disk (the resumed one, or 0).
    """

    def __init__(
        self,
        run_dir: Path | None,
        every: int,
        last_round: int,
        strategy: Strategy,
        noise: _NoiseState,
        clients: ClientStates | None,
        saved_round: int,
    ) -> None:
        self.run_dir = run_dir
        self.every = every
        self.last_round = last_round
        self.strategy = strategy
        self.noise = noise
        self.clients = clients
        self.saved_round = saved_round
        self.pending: tuple[Checkpoint, ArrayRecord] | None = None
        # the clients' metrics of the rounds snapshotted so far, as plain
        # dicts: a round's metrics never change once it finished, so each is
        # converted once (converting them all every round grew with the run)
        self._train_metrics: dict[int, dict[str, Any]] = {}
        self._evaluate_metrics: dict[int, dict[str, Any]] = {}

    def due(self, server_round: int) -> bool:
        """Whether round ``server_round`` is written when it finishes."""
        every = self.every
        return server_round == self.last_round or (
            every > 0 and server_round % every == 0
        )

    def after_round(
        self, server_round: int, model: ArrayRecord, result: Result
    ) -> None:
        """Snapshot round ``server_round``; write it if it is due."""
        self.pending = self._snapshot(server_round, model, result), model
        if self.due(server_round):
            self._write(self.pending)
            self.saved_round = server_round

    def after_stop(self, completed_round: int) -> None:
        """Write the last finished round's snapshot if it is not on disk yet."""
        if self.pending is not None and self.saved_round < completed_round:
            self._write(self.pending)

    def _snapshot(
        self, server_round: int, model: ArrayRecord, result: Result
    ) -> Checkpoint:
        return Checkpoint(
            round=server_round,
            arrays={},  # filled when written (the ArrayRecord is kept meanwhile)
            train_metrics=_plain_rounds(
                result.train_metrics_clientapp, self._train_metrics
            ),
            evaluate_metrics=_plain_rounds(
                result.evaluate_metrics_clientapp, self._evaluate_metrics
            ),
            strategy=strategy_state(self.strategy),
            noise_state=self.noise.to_json(),
            clients=self.clients.snapshot() if self.clients is not None else {},
        )

    def _write(self, pending: tuple[Checkpoint, ArrayRecord]) -> None:
        checkpoint, model = pending
        if self.run_dir is None:
            return
        checkpoint.arrays = {k: v.numpy() for k, v in model.items()}
        save_checkpoint(self.run_dir, checkpoint)
