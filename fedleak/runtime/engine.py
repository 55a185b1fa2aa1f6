"""fedleak's simulation engine: Flower's Ray engine without its waiting steps.

Flower 1.41's simulation engine (``run_simulation`` on Ray, also what
``flwr run`` starts) passes messages through an in-memory LinkState that both
sides *poll*: the ServerApp's ``InMemoryGrid.send_and_receive`` sleeps
``pull_interval = 0.1`` s between pulls, and the engine's dispatcher
(``vce_api.add_messages_to_queue``) hands at most one message per node to
the Ray actors per pass, then waits 0.1 s. Every message exchange so costs
0.1-0.2 s whatever the clients compute (a quickstart round, about 20 ms of
compute, took 0.1-0.2 s; a secure-aggregation round at least 0.3 s).

- :class:`EngineGrid` wraps the ServerApp's Grid. Its ``send_and_receive``
  uses only the public Grid API and, in a simulation, wakes as soon as a
  reply is stored (elsewhere it pulls every ``poll_interval``). It
  times every exchange and collects the clients' reported compute.
- :func:`fast_engine` swaps Flower's dispatcher and reply-storing functions
  for equivalents that hand a pushed message to the actors at once and wake
  the Grid on every reply. ``run_simulation``, the Ray backend, its actor pool
  and ``ray_address`` stay Flower's own. The swap checks the installed
  Flower's functions by signature and otherwise warns and keeps Flower's
  polling (slower, same results); outside a :func:`fast_engine` block the
  swapped functions behave exactly like Flower's.
- Inside the block Flower's worker threads also run several messages per
  Ray call (:mod:`fedleak.runtime.actor_batches`, ``actor_batch``): one
  call per message cost more on the server's cores than most clients'
  work.
- :func:`simulation_backend_config` lets Ray inline messages up to
  :data:`RAY_INLINE_BYTES` in its task RPCs, and :func:`keep_freed_memory`
  stops glibc from returning memory that the next round faults in again.
- :func:`timing_mod` (client side) reports the handler's wall time when the
  request asks for it; :class:`EngineGrid` asks and removes the answer before
  any strategy sees the reply.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import logging
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from queue import Empty, Queue
from typing import Any, cast

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from .actor_batches import (
    DEFAULT_ACTOR_BATCH,
    ReplyStore,
    register_reply_store,
    serve_messages,
)
from .lifecycle import RunControl, RunStopped, ray_address_in_use

__all__ = [
    "StoppableGrid",
    "DEFAULT_ACTOR_BATCH",
    "DEFAULT_POLL_INTERVAL",
    "FLOWER_POLL_INTERVAL",
    "MALLOC_ENV",
    "RAY_INLINE_BYTES",
    "REMOTE_MIN_POLL_INTERVAL",
    "TIMING_RECORD",
    "TIMING_REQUEST",
    "WAKE_FALLBACK_S",
    "EngineGrid",
    "Exchange",
    "actor_batch_in_use",
    "actor_channels_in_use",
    "engine_active",
    "fast_engine",
    "fast_engine_for",
    "install_engine",
    "keep_freed_memory",
    "simulation_backend_config",
    "timing_mod",
    "uninstall_engine",
]

DEFAULT_POLL_INTERVAL = 0.002
"""Seconds between pulls where nothing wakes the waiting thread (a Grid
outside :func:`fast_engine`, Flower's ``InMemoryGrid.pull_interval``)."""

WAKE_FALLBACK_S = 0.1
"""Inside :func:`fast_engine` every push wakes the dispatcher and every reply
the Grid, so they sleep on an event; this is only their safety net. Polling
every :data:`DEFAULT_POLL_INTERVAL` instead woke both threads about 25 times
per 50 ms round: in the 2-CPU quickstart that took 25-40 ms of the server
process's CPU per round from the Ray actors (round 0.059-0.065 s, against
0.045-0.055 s with event waits)."""

FLOWER_POLL_INTERVAL = 0.1
"""Flower 1.41's ``InMemoryGrid.pull_interval`` and dispatcher wait (s)."""

REMOTE_MIN_POLL_INTERVAL = 0.05
"""Shortest poll interval against a remote SuperLink (a deployment's Grid)."""

RAY_INLINE_BYTES = 8 * 1024 * 1024
"""Ray task arguments and results up to this size travel inside the task RPC
(Ray's default, 100 kB, sends every model through its object store: a put and
a get more per message each way; a quickstart message's round trip took
10.7 ms inlined, 16-17 ms not). Ray inlines at most 10 MB per task."""

MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
}
"""glibc settings that keep freed memory (up to 256 MB) for the next allocation.

By default glibc gives large freed blocks back to the system and faults them
in again: about 2,000 page faults per server evaluation of the quickstart
(37 ms against 23 ms without them, on this 2-core VM) and a quarter of the
clients' compute. Processes keep their peak memory instead.
"""

TIMING_REQUEST = "fedleak.timing-request"
"""ConfigRecord a request carries when the server wants the client's timing."""

TIMING_RECORD = "fedleak.timing"
"""MetricRecord of a reply: ``compute-s``, the handler's wall time."""

_COMPUTE_KEY = "compute-s"
_SIGNATURES = {
    "add_messages_to_queue": ["state", "queue", "nodes_mapping", "f_stop"],
    "put_message_into_state": ["state", "queue", "f_stop"],
    "worker": [
        "messageins_queue",
        "messageres_queue",
        "node_info_store",
        "backend",
        "f_stop",
        "metrics",
    ],
}


def simulation_backend_config(
    cpus_per_client: float,
    *,
    ray_address: str = "",
    inline: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """Return ``run_simulation``'s ``backend_config`` for a fedleak run.

    The cluster is :func:`~fedleak.runtime.lifecycle.ray_address_in_use`'s:
    ``ray_address``, else ``RAY_ADDRESS``, else a new local instance
    (``address="local"``). With ``inline`` a local Ray instance gets
    :data:`RAY_INLINE_BYTES`; an existing cluster keeps its own settings
    (``ray start --system-config '{"max_direct_call_object_size": 8388608}'``).
    """
    init_args: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": logging.INFO if verbose else logging.ERROR,
        "log_to_driver": verbose,
    }
    address = ray_address_in_use(ray_address)
    init_args["address"] = address or "local"
    if not address and inline:
        init_args["_system_config"] = {"max_direct_call_object_size": RAY_INLINE_BYTES}
    return {
        "client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
        "init_args": init_args,
    }


def keep_freed_memory(*, children: bool = True) -> bool:
    """Apply :data:`MALLOC_ENV` to this process (and the processes it starts).

    This process's setting (``mallopt``) holds for good; with ``children``
    the environment variables (unless already set) reach the Ray processes a
    local ``ray.init`` starts afterwards. Returns False (and changes nothing)
    where the C library is not glibc.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    libc.mallopt(-3, int(MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"]))  # M_MMAP_THRESHOLD
    libc.mallopt(-1, int(MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]))  # M_TRIM_THRESHOLD
    for name, value in MALLOC_ENV.items() if children else ():
        os.environ.setdefault(name, value)
    return True


def timing_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Client mod: time the ClientApp's handler when the request asks for it.

    Put it first in ``ClientApp(mods=[timing_mod, ...])`` so it times the
    other mods too (secure-aggregation masking). A request without a
    :data:`TIMING_REQUEST` record passes untouched; with one, the record is
    removed before the handler runs and the reply gains a
    :data:`TIMING_RECORD` ``MetricRecord({"compute-s": seconds})``.
    """
    if not msg.has_content() or TIMING_REQUEST not in msg.content:
        return call_next(msg, context)
    del msg.content[TIMING_REQUEST]
    started = time.perf_counter()
    reply = call_next(msg, context)
    elapsed = time.perf_counter() - started
    if reply.has_content():
        reply.content[TIMING_RECORD] = MetricRecord({_COMPUTE_KEY: elapsed})
    return reply


@dataclass
class _EngineState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    active: list[float] = field(default_factory=list)  # poll intervals in use
    batches: list[int] = field(default_factory=list)  # actor_batch of each block
    channels: list[bool] = field(default_factory=list)  # actor_channels of each block
    originals: dict[str, Callable[..., None]] = field(default_factory=dict)
    pushed: threading.Event = field(default_factory=threading.Event)
    pushing: int = 0  # EngineGrid pushes in progress (they wake once, at the end)
    replied: threading.Event = field(default_factory=threading.Event)
    stored: int = 0  # replies the engine stored into a LinkState, ever


_ENGINE = _EngineState()


def _dispatch(
    state: Any, queue: Queue[Message], nodes_mapping: dict[int, int], f_stop: Any
) -> None:
    """Flower's ``add_messages_to_queue``, waking on pushes inside the block.

    Each pass hands at most one message per node to the workers, as Flower's
    does, then waits 0.1 s outside :func:`fast_engine`; inside, a pass that
    found messages is followed at once by the next, and an idle one sleeps
    until the next push into ``state`` (whoever pushes it: the LinkState's
    ``store_message_ins`` wakes this thread), :data:`WAKE_FALLBACK_S` at most.
    """
    _wake_on_push(state)
    while not f_stop.is_set():
        _ENGINE.pushed.clear()
        taken = _one_per_node(state, nodes_mapping) if _ENGINE.active else None
        if taken is None:  # Flower's pass: one LinkState query per node
            taken = [
                message
                for node_id in nodes_mapping
                for message in state.get_message_ins(node_id=node_id, limit=1)
            ]
        for message in taken:
            queue.put(message)
        active = list(_ENGINE.active)
        if not active:
            f_stop.wait(FLOWER_POLL_INTERVAL)
        elif not taken:
            _ENGINE.pushed.wait(WAKE_FALLBACK_S)


def _one_per_node(state: Any, nodes: Mapping[int, int]) -> list[Message] | None:
    """Take the first undelivered message of each node in one scan of the LinkState.

    What ``state.get_message_ins(node_id, limit=1)`` returns for every node
    (the first valid undelivered message in the order stored, marked
    delivered), but the per-node call scans and checks every stored message,
    delivered or not, under the LinkState's lock: with 30 nodes, 4.5 ms
    passed between a push and the first message reaching a worker. Returns
    None where ``state`` is not the in-memory LinkState this reads (the
    caller then asks per node).
    """
    store = getattr(state, "message_ins_store", None)
    lock = getattr(state, "lock", None)
    check = getattr(state, "_check_stored_messages", None)
    if not isinstance(store, dict) or lock is None or not callable(check):
        return None
    from flwr.supercore.date import now

    taken: dict[int, Message] = {}
    with lock:
        for message_id in list(store):
            stored: Any = store.get(message_id)
            if stored is None or stored.metadata.delivered_at != "":
                continue
            node = stored.metadata.dst_node_id
            if node in taken or node not in nodes:
                continue
            check({message_id})  # drops it if expired or out of the federation
            if store.get(message_id) is stored:
                taken[node] = cast(Message, stored)
        delivered_at = now().isoformat()
        for message in taken.values():
            message.metadata.delivered_at = delivered_at
    return list(taken.values())


def _wake_on_push(state: Any) -> None:
    """Make ``state.store_message_ins`` wake the dispatcher after each store.

    Wraps the method on this LinkState instance once; outside
    :func:`fast_engine` the extra event is never waited on.
    """
    store = state.store_message_ins
    if getattr(store, "wakes_dispatcher", False):
        return

    def store_and_wake(*args: Any, **kwargs: Any) -> Any:
        try:
            return store(*args, **kwargs)
        finally:
            if not _ENGINE.pushing:  # an EngineGrid push wakes it when done
                _ENGINE.pushed.set()

    store_and_wake.wakes_dispatcher = True  # type: ignore[attr-defined]
    state.store_message_ins = store_and_wake


def _store_replies(state: Any, queue: Queue[Message], f_stop: Any) -> None:
    """Flower's ``put_message_into_state``, also waking the Grid.

    While it runs, the workers store their batches' replies into ``state``
    themselves and wake the Grid once a batch
    (:func:`~fedleak.runtime.actor_batches.register_reply_store`); what comes
    through ``queue`` (Flower's one-message calls) is stored here.
    """
    store = _counting(state.store_message_res)
    register_reply_store(queue, ReplyStore(store, _wake_grid))
    try:
        while not f_stop.is_set():
            try:
                reply = queue.get(timeout=1.0)
            except Empty:
                continue
            store(reply)
            _wake_grid()
    finally:
        register_reply_store(queue, None)


def _counting(store: Callable[[Message], Any]) -> Callable[[Message], Any]:
    """Wrap a LinkState's ``store_message_res`` to count the replies it stores.

    :meth:`EngineGrid.send_and_receive` pulls once the count says every
    missing reply is in (:func:`replies_stored`).
    """

    def store_and_count(reply: Message) -> Any:
        result = store(reply)
        with _ENGINE.lock:
            _ENGINE.stored += 1
        return result

    return store_and_count


def replies_stored() -> int:
    """How many replies fedleak's engine has stored into a LinkState so far."""
    with _ENGINE.lock:
        return _ENGINE.stored


def _wake_grid() -> None:
    _ENGINE.replied.set()


def actor_batch_in_use() -> int:
    """Return the most messages per actor call now: 1 (Flower's) outside any block."""
    batches = list(_ENGINE.batches)
    return min(batches) if batches else 1


def actor_channels_in_use() -> bool:
    """Return whether batches go through actor channels now.

    True inside :func:`fast_engine` blocks that all ask for channels, while
    messages are batched (``actor_batch > 1``; one message per call is
    Flower's own Ray call).
    """
    channels = list(_ENGINE.channels)
    return bool(channels) and all(channels) and actor_batch_in_use() > 1


# Flower's ``worker``; inside :func:`fast_engine` several messages per call
_worker = functools.partial(
    serve_messages, limit=actor_batch_in_use, channels=actor_channels_in_use
)


def _vce_api() -> Any:
    from flwr.server.superlink.fleet.vce import vce_api

    return vce_api


def _global_names(code: Any) -> set[str]:
    """Names a function's code (and the comprehensions in it) looks up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def install_engine() -> bool:
    """Swap fedleak's functions into Flower's engine module, dormant.

    They behave exactly like Flower's until a :func:`fast_engine` block is
    active. Returns False with a ``RuntimeWarning`` (and swaps nothing) if
    the installed Flower lacks the functions they replace. ``flwr run``
    needs this when its ClientApp is imported, before Flower's engine starts
    its threads (:mod:`fedleak.experiments.flower_app`).
    """
    with _ENGINE.lock:
        if _ENGINE.originals:
            return True
        module = _vce_api()
        called = _global_names(module.run_api.__code__)
        for name, params in _SIGNATURES.items():
            fn = getattr(module, name, None)
            if (
                fn is None
                or name not in called
                or list(inspect.signature(fn).parameters) != params
            ):
                warnings.warn(
                    f"fedleak: Flower's simulation engine has no {name}{tuple(params)} "
                    "as in flwr 1.41; keeping its 0.1 s message polling (slower, "
                    "same results)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return False
        for name, replacement in (
            ("add_messages_to_queue", _dispatch),
            ("put_message_into_state", _store_replies),
            ("worker", _worker),
        ):
            _ENGINE.originals[name] = getattr(module, name)
            setattr(module, name, replacement)
        return True


def uninstall_engine() -> None:
    """Put Flower's own engine functions back (no-op if not swapped)."""
    with _ENGINE.lock:
        module = _vce_api()
        for name, original in _ENGINE.originals.items():
            setattr(module, name, original)
        _ENGINE.originals.clear()


@contextmanager
def fast_engine(
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    actor_batch: int = DEFAULT_ACTOR_BATCH,
    actor_channels: bool = True,
) -> Iterator[bool]:
    """Run the Flower simulations started inside the block without waiting steps.

    Flower's engine looks its functions up when ``run_simulation`` starts its
    threads, so the block must enclose ``run_simulation``. The block that
    swapped the functions in puts Flower's back when it ends. Processes
    started inside also keep freed memory (:func:`keep_freed_memory`).

    Parameters
    ----------
    poll_interval : float, default=DEFAULT_POLL_INTERVAL
        The run's poll interval (``> 0``), kept while the block is active:
        the dispatcher itself sleeps until a push (at most
        :data:`WAKE_FALLBACK_S`), and Grids that are not woken poll at
        their own ``poll_interval``.
    actor_batch : int, default=DEFAULT_ACTOR_BATCH
        The most messages one Ray call carries to an actor
        (:mod:`~fedleak.runtime.actor_batches`); 1 is Flower's one message
        per call. Concurrent blocks use the smallest.
    actor_channels : bool, default=True
        Send batches to actors on the server's node through a socket to a
        thread of the actor's process instead of a Ray call
        (:mod:`~fedleak.runtime.actor_channels`; needs ``actor_batch > 1``).
        Concurrent blocks use channels only if all ask for them.

    Yields
    ------
    bool
        Whether fedleak's functions are in place (False: the installed Flower
        differs, a ``RuntimeWarning`` said so, Flower's polling stays).
    """
    if not poll_interval > 0:
        raise ValueError(f"poll_interval must be > 0, got {poll_interval}")
    if (
        isinstance(actor_batch, bool)
        or not isinstance(actor_batch, int)
        or actor_batch < 1
    ):
        raise ValueError(f"actor_batch must be an integer >= 1, got {actor_batch!r}")
    environ = {name: os.environ.get(name) for name in MALLOC_ENV}
    keep_freed_memory()
    installed_here = not _ENGINE.originals
    swapped = install_engine()
    with _ENGINE.lock:
        _ENGINE.active.append(poll_interval)
        _ENGINE.batches.append(actor_batch)
        _ENGINE.channels.append(bool(actor_channels))
    try:
        yield swapped
    finally:
        with _ENGINE.lock:
            _ENGINE.active.remove(poll_interval)
            _ENGINE.batches.remove(actor_batch)
            _ENGINE.channels.remove(bool(actor_channels))
        if installed_here and swapped:
            uninstall_engine()
        for name, value in environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fast_engine_for(federation: Any) -> AbstractContextManager[bool]:
    """:func:`fast_engine` with a run's ``[federation]`` settings.

    ``federation`` has ``poll_interval``, ``actor_batch`` and
    ``actor_channels`` (fedleak's ``FederationConfig``).
    """
    return fast_engine(
        federation.poll_interval, federation.actor_batch, federation.actor_channels
    )


def engine_active() -> bool:
    """Return whether fedleak's engine functions are in place and active."""
    return bool(_ENGINE.originals) and bool(_ENGINE.active)


@dataclass(frozen=True)
class Exchange:
    """One timed ``send_and_receive``: push to last reply, reported handler times."""

    wait_s: float
    num_sent: int
    num_replies: int
    compute_s: list[float]


class EngineGrid(Grid):
    """A Grid that waits for replies without fixed sleeps, and times exchanges.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The Grid the ServerApp received; every call goes to it.
    poll_interval : float, default=DEFAULT_POLL_INTERVAL
        Seconds between pulls while no wake-up comes (at least
        :data:`REMOTE_MIN_POLL_INTERVAL` for a Grid other than Flower's
        in-memory one). Flower's ``InMemoryGrid.pull_interval`` is set to it.
    timing : bool, default=True
        Add a :data:`TIMING_REQUEST` record to every request (answered by
        :func:`timing_mod`) and record every exchange in :attr:`exchanges`.
        Turn it off for ClientApps that reject unknown records.
    """

    def __init__(
        self,
        grid: Grid,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        *,
        timing: bool = True,
    ) -> None:
        from flwr.superlink.grid import InMemoryGrid

        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval}")
        self.grid = grid
        self.in_memory = isinstance(grid, InMemoryGrid)
        if self.in_memory:
            grid.pull_interval = poll_interval  # type: ignore[attr-defined]
        else:
            poll_interval = max(poll_interval, REMOTE_MIN_POLL_INTERVAL)
        self.poll_interval = poll_interval
        self.timing = timing
        self.exchanges: list[Exchange] = []

    def set_run(self, run: Run) -> None:
        """Set the wrapped Grid's run."""
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        """The wrapped Grid's run."""
        return self.grid.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Create a message with the wrapped Grid."""
        return self.grid.create_message(
            content, message_type, dst_node_id, group_id, ttl
        )

    def get_node_ids(self) -> Iterable[int]:
        """Return the connected node ids."""
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push messages, then wake the simulation's dispatcher.

        The dispatcher wakes once all are stored, so the workers find the
        whole exchange queued and split it evenly (woken at each store, the
        first worker took the first few messages alone).
        """
        with _ENGINE.lock:
            _ENGINE.pushing += 1
        try:
            ids = self.grid.push_messages(messages)
        finally:
            with _ENGINE.lock:
                _ENGINE.pushing -= 1
            _ENGINE.pushed.set()
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull the replies that have arrived."""
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push ``messages``; return their replies once all came or ``timeout`` passed.

        As Flower's: a reply that has not come after ``timeout`` seconds is
        absent; ``timeout=None`` waits for all.

        Inside :func:`fast_engine`, with Flower's in-memory Grid, the stored
        replies wake this thread and are counted (:func:`replies_stored`): it
        pulls once as many replies were stored as are missing, at the
        deadline, and at least every :data:`WAKE_FALLBACK_S`, not at every
        wake-up. A pull checks every message id in the LinkState; pulling
        after each batch of replies took the server's GIL from the workers
        delivering the next batch: the engine bench's secure round took
        0.6-0.8 ms less a round this way (medians of 200 rounds each way,
        alternating round by round in one run; 0.1 ms more in a third run,
        during a slow spell of the machine).
        """
        outgoing = list(messages)
        if self.timing:
            for message in outgoing:
                if message.has_content():
                    message.content[TIMING_REQUEST] = ConfigRecord()
        started = time.perf_counter()
        # inside fast_engine every stored batch of replies wakes this thread
        # and is counted: it pulls once as many replies are in as are missing
        counted = self.in_memory and engine_active()
        stored = replies_stored()
        pending = set(self.push_messages(outgoing))
        num_sent = len(pending)
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        pull = not counted
        last_pull = time.monotonic()
        while True:
            if pull:
                _ENGINE.replied.clear()
                stored, last_pull = replies_stored(), time.monotonic()
                got = list(self.pull_messages(pending))
                replies.extend(got)
                pending.difference_update(m.metadata.reply_to_message_id for m in got)
            left = None if deadline is None else deadline - time.monotonic()
            if not pending or (pull and left is not None and left <= 0):
                break
            if left is not None and left <= 0:
                pull = True  # one last pull for what came before the deadline
            elif counted:
                _ENGINE.replied.wait(_wait_step(WAKE_FALLBACK_S, left))
                _ENGINE.replied.clear()
                # also pull every WAKE_FALLBACK_S: replies the LinkState makes
                # itself (an expired TTL) are stored by nobody
                pull = (
                    replies_stored() - stored >= len(pending)
                    or time.monotonic() - last_pull >= WAKE_FALLBACK_S
                )
            else:
                time.sleep(_wait_step(self.poll_interval, left))
                pull = True
        wait_s = time.perf_counter() - started
        compute = [c for c in map(_pop_compute, replies) if c is not None]
        if self.timing:
            self.exchanges.append(Exchange(wait_s, num_sent, len(replies), compute))
        return replies

    def settings(self) -> dict[str, Any]:
        """How this Grid's exchanges run now: what ``results.json`` reports.

        ``poll_interval``, ``wake_ups`` (replies wake it), ``actor_batch``
        and ``actor_channels`` (:func:`actor_batch_in_use`,
        :func:`actor_channels_in_use`).
        """
        return {
            "poll_interval": self.poll_interval,
            "wake_ups": self.in_memory and engine_active(),
            "actor_batch": actor_batch_in_use(),
            "actor_channels": actor_channels_in_use(),
        }

    def take_exchanges(self) -> list[Exchange]:
        """Return the exchanges recorded since the last call and forget them."""
        taken, self.exchanges = self.exchanges, []
        return taken


def _wait_step(step: float, left: float | None) -> float:
    return step if left is None else min(step, left)


def _pop_compute(message: Message) -> float | None:
    """Remove a reply's :data:`TIMING_RECORD`; return its ``compute-s``."""
    if not message.has_content() or TIMING_RECORD not in message.content:
        return None
    record = message.content.metric_records.get(TIMING_RECORD)
    del message.content[TIMING_RECORD]
    value = None if record is None else record.get(_COMPUTE_KEY)
    return float(value) if isinstance(value, int | float) else None


class StoppableGrid(EngineGrid):
    """An :class:`EngineGrid` whose waiting gives up once a stop is overdue."""

    def __init__(self, grid: Grid, poll_interval: float, control: RunControl) -> None:
        super().__init__(grid, poll_interval)
        self.control = control

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull replies; raise :class:`RunStopped` when the stop's grace is over."""
        if self.control.abort_due():
            raise RunStopped
        return super().pull_messages(message_ids)
