"""Several messages per Ray actor call: Flower's simulation workers, batched.

Flower's simulation engine (``vce_api.worker``, one thread per Ray actor)
hands the actors one message per Ray call: ``ClientAppActor.run(app_fn,
message, cid, context)``, then ``ray.get`` of its result. Each call costs a
task submission, a result fetch and Ray's bookkeeping on the server's cores,
whatever the client computes. With 30 clients per exchange that is most of a
round: Flower's ``FedAvg`` on 30 clients' vectors of 10^5 floats took
0.072 s a round on 2 cores, of which 0.6 ms per client was the clients' work
(``fedleak bench secagg``).

:func:`serve_messages` does what Flower's worker does, with more messages per
call. It takes the message Flower's worker would, plus queued ones for
*other* nodes up to its share of the queue (the queue split evenly over the
idle workers, at most ``limit``, at most :data:`BATCH_BYTES` of pickled
jobs), and runs them in one call on Flower's own ``ClientAppActor`` through
Ray's ``__ray_call__``. Each message goes through ``ClientAppActor.run``
with its own Context exactly as in Flower's call; each job is pickled on
its own, so messages of a batch share no objects (as when Ray pickles them
call by call), and a client's error becomes the same error reply, logged
the same way, as in Flower's worker.

What changes is when a reply arrives and which actor runs a message: a
batch's replies come back together, and a batch stays on one actor, so a
slow message delays the rest of its batch instead of letting another actor
take them. So batching stops while messages take long enough for a call's
cost not to matter (:data:`BATCH_BELOW_S` a message on average; the heavy
clients of a model-averaging round each keep an actor call of their own),
and ``limit = 1`` is Flower's own worker. Returning a batch's replies as a
Ray stream instead, one by one, was measured too: its report per reply cost
more than the call it saved (a 30-client secure round took 0.147-0.152 s
streamed, 0.117-0.129 s returned together). Streaming them through the
actor channels (:mod:`~fedleak.runtime.actor_channels`), one socket write
per outcome, was slower too on 2 cores: the server then unpickles and
stores each reply while both actors compute, and the clients' handlers
slowed (the engine bench's secure round, 60 rounds a run, alternating:
round / essential compute 2.06 and 2.08 streamed, 1.92 and 1.51 returned
together; the clients' summed handler time 23-26 ms streamed against
20-27 ms).
"""

from __future__ import annotations

import io
import math
import pickle
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from logging import ERROR
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from uuid import uuid4

from flwr.app import Context, Message
from flwr.app.error import Error
from flwr.clientapp.client_app import ClientAppException, LoadClientAppError
from flwr.common import log
from flwr.common.constant import ErrorCode

if TYPE_CHECKING:
    from .actor_channels import ActorChannel, ChannelSet

__all__ = [
    "BATCH_BELOW_S",
    "BATCH_BYTES",
    "SHARED_MIN_BYTES",
    "Batch",
    "ClientError",
    "DEFAULT_ACTOR_BATCH",
    "Pace",
    "ReplyStore",
    "PerBackend",
    "batch_size",
    "can_batch",
    "pace_of",
    "register_reply_store",
    "run_jobs",
    "serve_messages",
    "take_batch",
]

DEFAULT_ACTOR_BATCH = 16
"""Most messages one Ray call carries (``[federation] actor_batch``)."""

BATCH_BYTES = 6 * 1024 * 1024
"""Most bytes of pickled jobs one call carries (beyond one job): below the
8 MB that fedleak lets Ray inline in a task's RPC
(:data:`fedleak.runtime.engine.RAY_INLINE_BYTES`), so a batch never goes
through Ray's object store."""

BATCH_BELOW_S = 0.02
"""Messages are batched while they take less than this on average (s).

A call costs the server about 1-3 ms on 2 shared cores; at 20 ms a
message that is at most a tenth of the work it carries, and a batch of
heavier messages would only unbalance the actors."""

_T = TypeVar("_T")
_PACE_WEIGHT = 0.3  # weight of the newest batch in the running mean
_QUEUE_WAIT_S = 1.0  # as Flower's worker: how often an idle worker sees f_stop


def batch_size(queued: int, idle: int, limit: int) -> int:
    """Return how many messages a worker takes: its share of the queue.

    Parameters
    ----------
    queued : int
        Messages waiting besides the one the worker holds.
    idle : int
        Workers (one per Ray actor) not running a call, this one included.
    limit : int
        The most one call carries.

    Returns
    -------
    int
        ``min(limit, ceil((1 + queued) / idle))``, at least 1: the idle
        workers split what is queued evenly; messages that come later go to
        whichever worker is free first.
    """
    share = math.ceil((1 + max(queued, 0)) / max(idle, 1))
    return max(1, min(limit, share))


class Pace:
    """What the workers of one backend share: who is busy, how long a message takes.

    Parameters
    ----------
    workers : int
        Worker threads (one per Ray actor).
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.busy = 0
        self.per_message_s = 0.0
        self._lock = threading.Lock()

    def size(self, queued: int, limit: int) -> int:
        """Claim a call for this worker; return how many messages it carries."""
        with self._lock:
            idle = self.workers - self.busy
            self.busy += 1
            if self.per_message_s >= BATCH_BELOW_S:
                return 1
            return batch_size(queued, idle, limit)

    def release(self) -> None:
        """Release a call that never ran (its time says nothing of the pace)."""
        with self._lock:
            self.busy -= 1

    def done(self, messages: int, seconds: float) -> None:
        """Release the call; fold its time per message into the running mean.

        A call is released as soon as its actor is free, before its replies
        are delivered: a worker still delivering is about to be idle. A call
        of no message only releases it.
        """
        with self._lock:
            self.busy -= 1
            if messages <= 0:
                return
            each = seconds / messages
            if self.per_message_s == 0.0:
                self.per_message_s = each
            else:
                self.per_message_s += _PACE_WEIGHT * (each - self.per_message_s)


class PerBackend(Generic[_T]):
    """One object per backend, made on first use, dropped with the backend.

    Parameters
    ----------
    make : callable
        ``make(backend)`` returns the backend's object.
    """

    def __init__(self, make: Callable[[Any], _T]) -> None:
        self._make = make
        self._objects: weakref.WeakKeyDictionary[Any, _T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, backend: Any) -> _T:
        """Return ``backend``'s object, making it on first use."""
        with self._lock:
            made = self._objects.get(backend)
            if made is None:
                made = self._make(backend)
                self._objects[backend] = made
            return made


_PACES = PerBackend(lambda backend: Pace(int(getattr(backend, "num_workers", 1))))


def pace_of(backend: Any) -> Pace:
    """Return the :class:`Pace` the workers of ``backend`` share."""
    return _PACES(backend)


def can_batch(backend: Any) -> bool:
    """Whether ``backend`` is Flower's Ray backend with an actor pool to batch on."""
    pool = getattr(backend, "pool", None)
    return (
        pool is not None
        and callable(getattr(pool, "submit", None))
        and callable(getattr(pool, "add_actor_back_to_pool", None))
        and getattr(backend, "app_fn", None) is not None
    )


def _dumps(obj: Any) -> bytes:
    """Pickle ``obj`` (the standard pickler; cloudpickle for what it refuses)."""
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        from ray import cloudpickle

        return bytes(cloudpickle.dumps(obj, protocol=5))  # type: ignore[no-untyped-call]


SHARED_MIN_BYTES = 64 * 1024
"""Byte strings at least this long travel once per call, however many of the
batch's messages hold them (the global model every request of a round
carries): bytes are immutable, so the messages may share them."""


class Batch:
    """One call's payload or outcomes: pickled items and the strings they share.

    Each item is pickled on its own (its records are its own objects), except
    that byte strings of :data:`SHARED_MIN_BYTES` or more go into
    :attr:`shared` once and the items refer to them.
    """

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.shared: list[bytes] = []
        self._index: dict[int, int] = {}  # id of a shared string -> position
        self._mark = 0  # len(shared) before the last item

    def __getstate__(self) -> dict[str, Any]:
        return {"items": self.items, "shared": self.shared}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
        self.items, self.shared = state["items"], state["shared"]

    @classmethod
    def of(cls, items: list[bytes], shared: list[bytes]) -> Batch:
        """Return the batch of these pickled ``items`` and ``shared`` strings."""
        batch = cls()
        batch.items, batch.shared = items, shared
        return batch

    @property
    def size(self) -> int:
        """Bytes the payload carries."""
        return sum(map(len, self.items)) + sum(map(len, self.shared))

    def add(self, item: Any) -> None:
        """Pickle ``item`` on its own, its long byte strings into :attr:`shared`.

        Objects the standard pickler refuses go through cloudpickle, whole.
        """
        self._mark = len(self.shared)
        buffer = io.BytesIO()
        try:
            _SharingPickler(buffer, self).dump(item)
            blob = buffer.getvalue()
        except (pickle.PicklingError, TypeError, AttributeError):
            self._truncate()
            blob = _dumps(item)
        self.items.append(blob)

    def drop_last(self) -> None:
        """Take the last item out again, with the strings only it brought."""
        self.items.pop()
        self._truncate()

    def _truncate(self) -> None:
        del self.shared[self._mark :]
        self._index = {id(b): k for k, b in enumerate(self.shared)}

    def load(self, k: int) -> Any:
        """Unpickle item ``k``."""
        return _SharingUnpickler(io.BytesIO(self.items[k]), self.shared).load()


class _SharingPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, batch: Batch) -> None:
        super().__init__(file, protocol=5)
        self.batch = batch

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is not bytes or len(obj) < SHARED_MIN_BYTES:
            return None
        batch = self.batch
        k = batch._index.get(id(obj))
        if k is None:
            k = len(batch.shared)
            batch.shared.append(obj)
            batch._index[id(obj)] = k
        return k


class _SharingUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: list[bytes]) -> None:
        super().__init__(file)
        self.shared = shared

    def persistent_load(self, pid: Any) -> bytes:
        return self.shared[int(pid)]


def _error_code(ex: BaseException) -> int:
    """Flower's worker's error code for an exception of ``ClientAppActor.run``."""
    if isinstance(ex, ClientAppException):
        return int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION)
    if isinstance(ex, LoadClientAppError):
        return int(ErrorCode.LOAD_CLIENT_APP_EXCEPTION)
    return int(ErrorCode.UNKNOWN)


def _reason(ex: BaseException) -> str:
    """Flower's worker's error reason: the exception's type and text."""
    return str(type(ex)) + ":<'" + str(ex) + "'>"


def run_jobs(actor: Any, app_fn: Callable[[], Any], batch: Batch) -> Batch:
    """Actor side: run each ``(message, cid, context)`` of ``batch``; return outcomes.

    Called on Flower's ``ClientAppActor`` through ``__ray_call__``. An
    outcome is ``(True, reply, context)`` or ``(False, error code, reason,
    the exception's text, traceback)``, pickled on its own into the
    returned :class:`Batch` (its long byte strings, a reply's arrays, travel
    beside it, not copied into it once more); an exception never stops the
    batch.
    """
    outcomes = Batch()
    for k in range(len(batch.items)):
        try:
            message, cid, context = batch.load(k)
            _, reply, context = actor.run(app_fn, message, cid, context)
            outcomes.add((True, reply, context))
        except Exception as ex:  # reported as the error reply
            failure = (_error_code(ex), _reason(ex), str(ex), traceback.format_exc())
            outcomes.add((False, *failure))
    return outcomes


class ClientError(Exception):
    """A client's exception in a batch, as its text (what the server logs)."""


def _trace() -> str:
    return traceback.format_exc()


def _error_reply(message: Message, code: int, reason: str) -> Message:
    return Message(Error(code=code, reason=reason), reply_to=message)


class ReplyStore:
    """Where a batch's replies go straight into the LinkState, and whom they wake.

    Parameters
    ----------
    store : callable
        Stores one reply (the LinkState's ``store_message_res``).
    wake : callable
        Called once after a batch's replies are stored (the Grid's wake-up).
    """

    def __init__(self, store: Callable[[Message], Any], wake: Callable[[], None]):
        self.store = store
        self.wake = wake


_REPLY_STORES: dict[int, ReplyStore] = {}
_REPLY_STORES_LOCK = threading.Lock()


def register_reply_store(queue: Queue[Message], store: ReplyStore | None) -> None:
    """Let the workers that deliver into ``queue`` store batched replies directly.

    Flower's engine passes every reply through ``queue`` to a thread that
    stores it in the LinkState (fedleak's ``_store_replies`` then wakes the
    Grid). Registered, a worker stores a batch's replies itself and wakes
    the Grid once for the batch: a thread hand-off less per reply, and the
    Grid pulls once a batch instead of once a reply. The secure round's
    unmask exchange (8 small messages) took 0.14-0.19 ms less (medians of
    200 rounds each way, alternating round by round in one run).
    ``None`` removes the registration.
    """
    with _REPLY_STORES_LOCK:
        if store is None:
            _REPLY_STORES.pop(id(queue), None)
        else:
            _REPLY_STORES[id(queue)] = store


def _reply_store_of(queue: Queue[Message]) -> ReplyStore | None:
    with _REPLY_STORES_LOCK:
        return _REPLY_STORES.get(id(queue))


class _Delivery:
    """Where a worker puts replies and contexts (Flower's worker's ``finally``).

    Replies go into Flower's reply queue, or, for a batch while a
    :class:`ReplyStore` is registered for that queue, straight into the
    LinkState, with one wake-up at the end of the batch (:meth:`batch_done`).
    """

    def __init__(
        self, replies: Queue[Message], node_info_store: dict[int, Any], metrics: Any
    ) -> None:
        self.replies = replies
        self.node_info_store = node_info_store
        self.metrics = metrics
        self.direct: ReplyStore | None = None

    def context_of(self, message: Message) -> Context:
        store = self.node_info_store[message.metadata.dst_node_id]
        context: Context = store.retrieve_context(run_id=message.metadata.run_id)
        return context

    def reply(self, message: Message, out: Message, context: Context | None) -> None:
        if context is not None:
            store = self.node_info_store[message.metadata.dst_node_id]
            store.update_context(message.metadata.run_id, context=context)
        out.metadata.__dict__["_message_id"] = str(uuid4())
        direct = self.direct
        if direct is not None:
            store = direct.store
            try:
                store(out)
                return
            except Exception:  # Flower's path then: its reply thread takes it
                pass
        self.replies.put(out)

    def error(
        self, message: Message, code: int, reason: str, ex: BaseException, trace: str
    ) -> None:
        """Log as Flower's worker does (the exception, then the traceback); reply."""
        log(ERROR, ex)
        log(ERROR, trace)
        self.reply(message, _error_reply(message, code, reason), None)

    def runtime(self, seconds: float) -> None:
        self.metrics.add_clientapp_runtime(seconds)

    def batch_started(self) -> None:
        """Store the coming batch's replies directly if a ReplyStore is registered."""
        self.direct = _reply_store_of(self.replies)

    def batch_done(self) -> None:
        """Wake the Grid once for the batch's directly stored replies."""
        direct, self.direct = self.direct, None
        if direct is not None:
            direct.wake()


def _process_one(message: Message, backend: Any, delivery: _Delivery) -> None:
    """Flower's worker's body: one message, one ``backend.process_message``."""
    started = time.perf_counter()
    try:
        context = delivery.context_of(message)
        out, updated = backend.process_message(message, context)
    except Exception as ex:  # Flower's worker reports, not raises
        delivery.error(message, _error_code(ex), _reason(ex), ex, _trace())
    else:
        delivery.reply(message, out, updated)
    finally:
        delivery.runtime(time.perf_counter() - started)


class _Sent:
    """A batch written to an actor's channel: the pool's key for the call."""

    def __init__(self, channel: ActorChannel) -> None:
        self.channel = channel


def _submit(
    actor: Any, app_fn: Any, payload: Batch, channels: ChannelSet | None
) -> Any:
    """Start a batch on ``actor``: through its channel, else a Ray call."""
    from .actor_channels import ChannelBroken

    channel = None if channels is None else channels.channel(actor, app_fn)
    if channel is not None:
        try:
            channel.send(payload)
            return _Sent(channel)
        except ChannelBroken:  # its actor likely died: Ray's call reports it
            pass
    return actor.__ray_call__.remote(run_jobs, app_fn, payload)


def _fetch(ref: Any) -> Batch:
    """Return a call's outcomes: from its channel, else with ``ray.get``."""
    if isinstance(ref, _Sent):
        return ref.channel.receive()
    import ray

    outcomes: Batch = ray.get(ref)
    return outcomes


def _run_batch(
    batch: list[Message],
    payload: Batch,
    backend: Any,
    delivery: _Delivery,
    pace: Pace,
    channels: ChannelSet | None = None,
) -> None:
    """Run ``batch`` in one call on an idle actor; deliver each reply.

    The call goes through the actor's channel where ``channels`` has one
    (:mod:`~fedleak.runtime.actor_channels`), else through Ray. It is
    released in ``pace`` once the actor is back in the pool.
    """

    def submit(actor: Any, app_fn: Any, payload: Any, _cid: Any, _ctx: Any) -> Any:
        return _submit(actor, app_fn, payload, channels)

    pool = backend.pool
    started = time.perf_counter()
    try:
        future = pool.submit(submit, (backend.app_fn, payload, "", None))
    except BaseException:
        pace.release()
        raise
    delivery.batch_started()
    try:
        _deliver_batch(batch, future, pool, delivery, pace, started)
    finally:
        delivery.batch_done()


def _deliver_batch(
    batch: list[Message],
    future: Any,
    pool: Any,
    delivery: _Delivery,
    pace: Pace,
    started: float,
) -> None:
    """Wait for a submitted batch's outcomes; deliver each reply (or error)."""
    try:
        outcomes = _fetch(future)
        if len(outcomes.items) != len(batch):
            raise RuntimeError(
                f"{len(batch)} messages sent, {len(outcomes.items)} outcomes"
            )
    except Exception as ex:  # the actor died or Ray failed: every message fails
        trace = _trace()
        for message in batch:
            delivery.error(message, _error_code(ex), _reason(ex), ex, trace)
        return
    finally:
        pool.add_actor_back_to_pool(future)
        elapsed = time.perf_counter() - started
        pace.done(len(batch), elapsed)
        for _ in batch:
            delivery.runtime(elapsed / len(batch))
    for k, message in enumerate(batch):
        try:
            outcome = outcomes.load(k)
            if outcome[0]:
                delivery.reply(message, outcome[1], outcome[2])
            else:
                code, reason, text, trace = outcome[1:]
                delivery.error(message, code, reason, ClientError(text), trace)
        except Exception as ex:  # e.g. a reply that does not unpickle here
            delivery.error(message, _error_code(ex), _reason(ex), ex, _trace())


def serve_messages(
    messageins_queue: Queue[Message],
    messageres_queue: Queue[Message],
    node_info_store: dict[int, Any],
    backend: Any,
    f_stop: Any,
    metrics: Any,
    *,
    limit: Callable[[], int],
    channels: Callable[[], bool] = lambda: False,
) -> None:
    """Flower's ``vce_api.worker``, running several messages per actor call.

    Parameters
    ----------
    messageins_queue, messageres_queue, node_info_store, backend, f_stop, metrics
        Flower's worker's arguments.
    limit : callable
        Returns the most messages the next call may carry; 1 (or a backend
        other than Flower's Ray backend) runs Flower's own one-message call.
    channels : callable
        Returns whether batches go through same-node actor channels
        (:mod:`~fedleak.runtime.actor_channels`); asked once, at the start.
        Where the platform has no Unix sockets, batches keep Ray's calls.
    """
    from .actor_channels import channels_of, channels_supported

    channel_set = None
    if channels() and can_batch(backend) and channels_supported():
        channel_set = channels_of(backend)
        channel_set.enter()
    try:
        _serve(
            messageins_queue,
            backend,
            f_stop,
            limit,
            channel_set,
            _Delivery(messageres_queue, node_info_store, metrics),
        )
    finally:
        if channel_set is not None:
            channel_set.leave()


def _serve(
    messageins_queue: Queue[Message],
    backend: Any,
    f_stop: Any,
    limit: Callable[[], int],
    channel_set: ChannelSet | None,
    delivery: _Delivery,
) -> None:
    """:func:`serve_messages`' loop."""
    held: Message | None = None
    while not f_stop.is_set():
        if held is None:
            try:
                held = messageins_queue.get(timeout=_QUEUE_WAIT_S)
            except Empty:
                continue
        first, held = held, None
        most = limit() if can_batch(backend) else 1
        if most <= 1:
            _process_one(first, backend, delivery)
            continue
        pace = pace_of(backend)
        size = pace.size(messageins_queue.qsize(), most)
        try:
            batch, payload, held = take_batch(
                first, messageins_queue, size, delivery.context_of
            )
        except Exception as ex:  # e.g. a context that cannot pickle
            pace.release()
            delivery.error(first, _error_code(ex), _reason(ex), ex, _trace())
            continue
        _run_batch(batch, payload, backend, delivery, pace, channel_set)


def take_batch(
    first: Message,
    queue: Queue[Message],
    size: int,
    context_of: Callable[[Message], Context],
) -> tuple[list[Message], Batch, Message | None]:
    """Take ``first`` and up to ``size - 1`` queued messages for other nodes.

    Each message is pickled with its node's Context as Flower's call passes
    them (``(message, partition id, context)``) into a :class:`Batch`. Stops
    early at a second message for a node already in the batch, at one that
    would take the batch past :data:`BATCH_BYTES`, or at one that cannot be
    pickled; that message is returned as the one left over, which the worker
    runs next (a node's messages keep their order; one that cannot be
    pickled then gets its error reply alone). If ``first`` cannot be
    pickled, this raises.

    Returns
    -------
    tuple
        The messages, their payload, and the message left over or None.
    """
    batch: list[Message] = []
    payload = Batch()
    nodes: set[int] = set()
    candidate: Message | None = first
    while candidate is not None:
        node = candidate.metadata.dst_node_id
        if node in nodes:
            return batch, payload, candidate
        try:
            context = context_of(candidate)
            payload.add((candidate, str(context.node_config["partition-id"]), context))
        except Exception:
            if not batch:
                raise
            return batch, payload, candidate  # it fails alone, as the next call's first
        if batch and payload.size > BATCH_BYTES:
            payload.drop_last()
            return batch, payload, candidate
        batch.append(candidate)
        nodes.add(node)
        if len(batch) >= size:
            break
        try:
            candidate = queue.get_nowait()
        except Empty:
            candidate = None
    return batch, payload, None
