"""Several messages per Ray actor call: the batching worker, on Flower's own actor logic.

The actor here is Flower's ``VirtualClientEngineActor`` (what its Ray actor
runs), called in this process; the pool and the stream are fakes of Ray's.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from queue import Queue
from typing import Any

import numpy as np
import pytest
from flower_fakes import metadata
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.simulation.ray_transport.ray_actor import VirtualClientEngineActor

from fedleak.runtime import actor_batches
from fedleak.runtime.actor_batches import (
    BATCH_BELOW_S,
    SHARED_MIN_BYTES,
    Batch,
    Pace,
    ReplyStore,
    batch_size,
    run_jobs,
    serve_messages,
    take_batch,
)
from fedleak.runtime.actor_batches import _fetch as ray_fetch  # before the fakes

RUN = 1


def build_app() -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        config = msg.content.config_records["config"]
        if config.get("fail"):
            raise RuntimeError(f"client {context.node_config['partition-id']} fails")
        seen = int(
            context.state.config_records.get("seen", ConfigRecord({"n": 0}))["n"]
        )
        context.state["seen"] = ConfigRecord({"n": seen + 1})
        config["touched"] = True  # a handler may change what it received
        if config.get("unloadable"):  # a context that pickles, but not back
            context.node_config["odd"] = Unloadable()  # type: ignore[assignment]
        partition = int(context.node_config["partition-id"])
        content = RecordDict(
            {"m": MetricRecord({"partition": partition, "x": config["x"]})}
        )
        return Message(content, reply_to=msg)

    return app


def _refuse_to_load() -> None:
    raise ValueError("this object does not unpickle here")


class Unloadable:
    """Pickles fine; unpickling it raises (e.g. a class the server lacks)."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _refuse_to_load, ()


APP = build_app()


def app_fn() -> ClientApp:
    return APP


class Actor(VirtualClientEngineActor):
    """Flower's actor logic (``run``), outside Ray."""


class Store:
    """One node's Context store (Flower's ``DeprecatedRunInfoStore`` calls)."""

    def __init__(self, partition: int) -> None:
        self.context = Context(
            run_id=RUN,
            node_id=partition,
            node_config={"partition-id": partition},
            state=RecordDict(),
            run_config={},
        )
        self.updates = 0

    def retrieve_context(self, run_id: int) -> Context:
        assert run_id == RUN
        return self.context

    def update_context(self, run_id: int, context: Context) -> None:
        assert run_id == RUN
        self.context = context
        self.updates += 1


class Call:
    """``actor.__ray_call__.remote(fn, *args)``, run at once."""

    def __init__(self, actor: Actor, pool: Pool) -> None:
        self.actor = actor
        self.pool = pool

    def remote(self, fn: Any, *args: Any) -> Batch:
        self.pool.calls.append(len(args[-1].items))
        if self.pool.dies:
            return DeadActor()  # type: ignore[return-value]
        outcomes: Batch = fn(self.actor, *args)
        if self.pool.drop_outcome:
            outcomes.items.pop()
        return outcomes


class DeadActor:
    """What ``ray.get`` raises for a call whose actor died."""


class Pool:
    """Flower's ``BasicActorPool`` calls the worker makes."""

    def __init__(self, dies: bool = False) -> None:
        self.actor = Actor()
        self.actor.__ray_call__ = Call(self.actor, self)  # type: ignore[attr-defined]
        self.calls: list[int] = []
        self.futures: list[Any] = []
        self.returned = 0
        self.dies = dies
        self.drop_outcome = False

    def submit(self, actor_fn: Any, job: tuple[Any, Any, Any, Any]) -> Any:
        future = actor_fn(self.actor, *job)
        self.futures.append(future)
        return future

    def add_actor_back_to_pool(self, future: Any) -> None:
        assert any(future is f for f in self.futures)
        self.returned += 1


class Backend:
    """Flower's ``RayBackend`` as the worker sees it."""

    def __init__(self, pool: Pool | None, workers: int = 2) -> None:
        self.pool = pool
        self.app_fn = app_fn
        self.num_workers = workers
        self.processed: list[int] = []

    def process_message(
        self, message: Message, context: Context
    ) -> tuple[Message, Context]:
        self.processed.append(message.metadata.dst_node_id)
        _, reply, context = Actor().run(app_fn, message, "", context)
        return reply, context


class Metrics:
    def __init__(self) -> None:
        self.runtimes: list[float] = []

    def add_clientapp_runtime(self, seconds: float) -> None:
        self.runtimes.append(seconds)


def unloadable_message(node: int) -> Message:
    return message(node, config=ConfigRecord({"x": node * 10, "unloadable": True}))


def message(
    node: int, *, fail: bool = False, config: ConfigRecord | None = None
) -> Message:
    config = config if config is not None else ConfigRecord({"x": node * 10})
    if fail:
        config["fail"] = True
    meta = metadata(0, dst=node)
    meta.__dict__["_run_id"] = RUN
    return Message(RecordDict({"config": config}), metadata=meta)


def fetch(future: Any) -> Batch:
    if isinstance(future, DeadActor):
        raise ConnectionError("the actor died")
    return pickle.loads(pickle.dumps(future))  # as Ray sends it back


@pytest.fixture(autouse=True)
def local_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call returns the pickled outcomes themselves (no Ray object refs)."""
    monkeypatch.setattr(actor_batches, "_fetch", fetch)
    monkeypatch.setattr(actor_batches, "_QUEUE_WAIT_S", 0.02)  # a quick stop


def serve(
    messages: list[Message], backend: Backend, limit: int, *, channels: bool = False
) -> tuple[dict[int, Message], dict[int, Store], Metrics]:
    """Run one worker until every message has its reply."""
    stores = {m.metadata.dst_node_id: Store(m.metadata.dst_node_id) for m in messages}
    inbox: Queue[Message] = Queue()
    outbox: Queue[Message] = Queue()
    stop = threading.Event()
    metrics = Metrics()
    worker = threading.Thread(
        target=serve_messages,
        args=(inbox, outbox, stores, backend, stop, metrics),
        kwargs={"limit": lambda: limit, "channels": lambda: channels},
    )
    worker.start()
    time.sleep(3 * actor_batches._QUEUE_WAIT_S)  # an idle worker keeps waiting
    started = time.perf_counter()
    for m in messages:
        inbox.put(m)
    replies = {}
    for _ in messages:
        reply = outbox.get(timeout=10)
        replies[reply.metadata.reply_to_message_id] = reply
    elapsed = time.perf_counter() - started
    stop.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert outbox.empty()
    # at most one handler time a message (none for one never sent)
    assert len(metrics.runtimes) <= len(messages)
    assert all(t >= 0 for t in metrics.runtimes)
    assert sum(metrics.runtimes) <= elapsed
    by_node = {m.metadata.dst_node_id: replies[m.metadata.message_id] for m in messages}
    return by_node, stores, metrics


# ------------------------------------------------------------------- sizing
@pytest.mark.parametrize(
    ("queued", "idle", "limit", "expected"),
    [
        (29, 2, 16, 15),  # 30 messages, 2 idle actors: half each
        (14, 1, 16, 15),  # the last idle worker takes all that is left
        (29, 2, 4, 4),  # never beyond the limit
        (0, 2, 16, 1),
        (3, 4, 16, 1),
        (-1, 0, 16, 1),  # nonsense counts still give one message
    ],
)
def test_the_idle_workers_split_the_queue_evenly(queued, idle, limit, expected):
    assert batch_size(queued, idle, limit) == expected


def test_the_pace_splits_among_idle_workers_and_stops_batching_heavy_messages():
    pace = Pace(workers=2)
    assert pace.size(queued=29, limit=16) == 15  # 2 idle
    assert pace.size(queued=14, limit=16) == 15  # 1 idle: the rest
    pace.done(15, 0.015)  # 1 ms a message
    pace.done(15, 0.015)
    assert pace.busy == 0
    assert pace.per_message_s == pytest.approx(0.001)
    assert pace.size(queued=9, limit=16) == 5
    pace.done(5, 5 * BATCH_BELOW_S * 10)  # messages became heavy
    assert pace.per_message_s >= BATCH_BELOW_S
    assert pace.size(queued=9, limit=16) == 1  # one message per call again
    pace.done(1, 0.0)  # and they turn light: batching comes back
    for _ in range(20):
        pace.size(queued=0, limit=16)
        pace.done(1, 0.0)
    assert pace.size(queued=9, limit=16) == 5


# ------------------------------------------------------------------- batches
def take(messages: list[Message], size: int):
    queue: Queue[Message] = Queue()
    for m in messages[1:]:
        queue.put(m)
    stores = {m.metadata.dst_node_id: Store(m.metadata.dst_node_id) for m in messages}

    def context_of(m: Message) -> Context:
        return stores[m.metadata.dst_node_id].context

    batch, payload, held = take_batch(messages[0], queue, size, context_of)
    return batch, payload, held, queue


def test_a_batch_takes_up_to_its_size_of_distinct_nodes():
    messages = [message(n) for n in (1, 2, 3, 4, 5)]
    batch, payload, held, queue = take(messages, 3)
    assert batch == messages[:3]
    assert held is None
    assert queue.qsize() == 2
    assert len(payload.items) == 3
    for k, m in enumerate(batch):
        sent, cid, context = payload.load(k)
        assert sent.metadata.message_id == m.metadata.message_id
        assert cid == str(m.metadata.dst_node_id)
        assert context.node_config["partition-id"] == m.metadata.dst_node_id


def test_a_second_message_for_a_node_in_the_batch_waits_for_the_next_call():
    messages = [message(1), message(2), message(1), message(3)]
    batch, _, held, queue = take(messages, 16)
    assert batch == messages[:2]
    assert held is messages[2]
    assert queue.qsize() == 1


def test_a_batch_stops_before_its_bytes_run_over(monkeypatch):
    messages = [message(n) for n in (1, 2, 3)]
    one_job = take(messages[:1], 1)[1].size
    monkeypatch.setattr(actor_batches, "BATCH_BYTES", int(2.5 * one_job))
    batch, _, held, _ = take(messages, 16)
    assert batch == messages[:2]
    assert held is messages[2]
    monkeypatch.setattr(actor_batches, "BATCH_BYTES", 1)  # one job always goes
    batch, _, held, _ = take(messages, 16)
    assert batch == messages[:1]
    assert held is messages[1]


def test_the_messages_of_a_batch_share_no_objects():
    """Each job is pickled alone, as when Ray sends one message per call."""
    shared = ConfigRecord({"x": 1})
    messages = [message(1, config=shared), message(2, config=shared)]
    _, payload, _, _ = take(messages, 16)
    first, second = (payload.load(k)[0] for k in range(2))
    first.content.config_records["config"]["x"] = 99
    assert second.content.config_records["config"]["x"] == 1


def model_message(node: int, arrays: ArrayRecord) -> Message:
    meta = metadata(0, dst=node)
    meta.__dict__["_run_id"] = RUN
    content = RecordDict({"arrays": arrays, "config": ConfigRecord({"x": node})})
    return Message(content, metadata=meta)


def test_a_model_all_messages_carry_travels_once_and_each_gets_its_own_record():
    big = np.arange(SHARED_MIN_BYTES // 4 + 7, dtype=np.float32)
    small = np.arange(5, dtype=np.float32)
    arrays = ArrayRecord({"big": Array(big), "small": Array(small)})
    messages = [model_message(n, arrays) for n in (1, 2, 3)]
    _, payload, _, _ = take(messages, 16)
    assert len(payload.shared) == 1  # the big array's bytes, once
    assert payload.size < 1.2 * big.nbytes
    payload = pickle.loads(pickle.dumps(payload))  # as Ray sends it
    loaded = [payload.load(k)[0] for k in range(3)]
    for message in loaded:
        got = message.content.array_records["arrays"]
        np.testing.assert_array_equal(got["big"].numpy(), big)
        np.testing.assert_array_equal(got["small"].numpy(), small)
    a, b = (m.content.array_records["arrays"] for m in loaded[:2])
    assert a is not b  # records are each message's own
    del a["small"]
    assert "small" in b


def test_a_job_dropped_for_its_bytes_takes_its_own_shared_strings_along(monkeypatch):
    first = ArrayRecord({"w": Array(np.zeros(SHARED_MIN_BYTES, dtype=np.uint8))})
    second = ArrayRecord({"w": Array(np.ones(SHARED_MIN_BYTES, dtype=np.uint8))})
    messages = [model_message(1, first), model_message(2, second)]
    monkeypatch.setattr(actor_batches, "BATCH_BYTES", int(1.5 * SHARED_MIN_BYTES))
    batch, payload, held, _ = take(messages, 16)
    assert batch == messages[:1] and held is messages[1]
    assert len(payload.items) == 1 and len(payload.shared) == 1
    w = payload.load(0)[0].content.array_records["arrays"]["w"].numpy()
    assert not w.any()


# ------------------------------------------------------------------ the actor
def test_the_actor_returns_every_outcome_and_an_error_does_not_stop_the_batch():
    stores = {n: Store(n) for n in (1, 2, 3)}
    payload = Batch()
    for n in (1, 2, 3):
        payload.add((message(n, fail=n == 2), str(n), stores[n].context))
    result = run_jobs(Actor(), app_fn, payload)
    outcomes = [result.load(k) for k in range(len(result.items))]
    assert [o[0] for o in outcomes] == [True, False, True]
    _, reply, context = outcomes[0]
    assert reply.content.metric_records["m"]["partition"] == 1
    assert context.state.config_records["seen"]["n"] == 1
    _, code, reason, text, trace = outcomes[1]
    assert code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert "ClientAppException" in reason and "client 2 fails" in reason
    assert text.splitlines()[-1].endswith("client 2 fails")
    assert "Traceback" in trace
    assert outcomes[2][1].content.metric_records["m"]["partition"] == 3


def test_an_actor_that_cannot_load_the_app_reports_flowers_code():
    def no_app() -> ClientApp:
        from flwr.clientapp.client_app import LoadClientAppError

        raise LoadClientAppError("no app")

    payload = Batch()
    payload.add((message(1), "1", Store(1).context))
    result = run_jobs(Actor(), no_app, payload)
    assert len(result.items) == 1
    ok, code, reason, _, _ = result.load(0)
    assert not ok
    assert code == ErrorCode.LOAD_CLIENT_APP_EXCEPTION
    assert "no app" in reason


# -------------------------------------------------------------- the worker
@pytest.mark.parametrize("limit", [1, 2, 4, 16])
def test_every_message_gets_its_reply_and_its_node_its_context(limit):
    messages = [message(n, fail=n == 3) for n in range(1, 8)]
    pool = Pool()
    backend = Backend(pool, workers=2)
    replies, stores, metrics = serve(messages, backend, limit)
    for node, reply in replies.items():
        if node == 3:
            assert reply.has_error()
            assert reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
            assert "client 3 fails" in reply.error.reason
            assert stores[node].updates == 0
            continue
        assert reply.content.metric_records["m"]["partition"] == node
        assert reply.content.metric_records["m"]["x"] == node * 10
        assert stores[node].context.state.config_records["seen"]["n"] == 1
        assert stores[node].updates == 1
    ids = [r.metadata.message_id for r in replies.values()]
    assert all(ids) and len(set(ids)) == len(ids)
    assert len(metrics.runtimes) == len(messages)
    if limit == 1:  # Flower's own call: one process_message per message
        assert sorted(backend.processed) == list(range(1, 8))
        assert pool.calls == []
    else:
        assert backend.processed == []
        assert sum(pool.calls) == len(messages)
        assert max(pool.calls) <= limit
        assert len(pool.calls) < len(messages)  # fewer calls than messages
        assert pool.returned == len(pool.calls)  # the actor always goes back


class Direct:
    """A registered reply store: what it stored, how often it woke the Grid."""

    def __init__(self, fails: bool = False) -> None:
        self.stored: Queue[Message] = Queue()
        self.wakes = 0
        self.fails = fails

    def store(self, reply: Message) -> None:
        if self.fails:
            raise RuntimeError("the LinkState refuses it")
        self.stored.put(reply)

    def wake(self) -> None:
        self.wakes += 1


def _serve_direct(
    messages: list[Message], limit: int, direct: Direct
) -> tuple[list[Message], list[Message], Pool]:
    """Run one worker with ``direct`` registered for its reply queue.

    Returns the replies stored directly, those put in the queue, and the pool.
    """
    stores = {m.metadata.dst_node_id: Store(m.metadata.dst_node_id) for m in messages}
    inbox: Queue[Message] = Queue()
    outbox: Queue[Message] = Queue()
    stop = threading.Event()
    pool = Pool()
    actor_batches.register_reply_store(outbox, ReplyStore(direct.store, direct.wake))
    worker = threading.Thread(
        target=serve_messages,
        args=(inbox, outbox, stores, Backend(pool), stop, Metrics()),
        kwargs={"limit": lambda: limit},
    )
    try:
        worker.start()
        for m in messages:
            inbox.put(m)
        deadline = time.monotonic() + 10
        while direct.stored.qsize() + outbox.qsize() < len(messages):
            assert time.monotonic() < deadline, "replies missing"
            time.sleep(0.005)
    finally:
        stop.set()
        worker.join(timeout=10)
        actor_batches.register_reply_store(outbox, None)
    assert not worker.is_alive()
    as_list = lambda q: [q.get_nowait() for _ in range(q.qsize())]  # noqa: E731
    return as_list(direct.stored), as_list(outbox), pool


def test_a_batchs_replies_go_straight_to_the_registered_store_with_one_wake():
    messages = [message(n, fail=n == 2) for n in range(1, 7)]
    direct = Direct()
    stored, queued, pool = _serve_direct(messages, 16, direct)
    assert queued == []
    assert sorted(r.metadata.reply_to_message_id for r in stored) == sorted(
        m.metadata.message_id for m in messages
    )
    assert [r.has_error() for r in stored].count(True) == 1  # node 2's error too
    assert direct.wakes == len(pool.calls) < len(messages)  # one wake a batch


def test_flowers_one_message_calls_keep_the_reply_queue():
    direct = Direct()
    stored, queued, _ = _serve_direct([message(n) for n in range(1, 4)], 1, direct)
    assert stored == [] and direct.wakes == 0
    assert len(queued) == 3


def test_a_reply_the_store_refuses_goes_to_the_queue():
    direct = Direct(fails=True)
    stored, queued, pool = _serve_direct([message(n) for n in range(1, 4)], 16, direct)
    assert stored == [] and len(queued) == 3
    assert direct.wakes == len(pool.calls)


def test_without_a_registered_store_replies_go_to_the_queue():
    replies, _, _ = serve([message(n) for n in range(1, 4)], Backend(Pool()), 16)
    assert len(replies) == 3  # serve() reads them all from the queue


def test_a_registration_is_per_queue_and_can_be_withdrawn():
    a, b = Queue(), Queue()
    store = ReplyStore(lambda m: None, lambda: None)
    actor_batches.register_reply_store(a, store)
    try:
        assert actor_batches._reply_store_of(a) is store
        assert actor_batches._reply_store_of(b) is None
    finally:
        actor_batches.register_reply_store(a, None)
    assert actor_batches._reply_store_of(a) is None
    actor_batches.register_reply_store(b, None)  # withdrawing nothing is harmless


def test_the_handler_sees_its_own_copy_in_a_batch():
    """A handler that changes its request does not change the next message's."""
    shared = ConfigRecord({"x": 5})
    messages = [message(1, config=shared), message(2, config=shared)]
    replies, _, _ = serve(messages, Backend(Pool()), 16)
    assert all(r.content.metric_records["m"]["x"] == 5 for r in replies.values())
    assert "touched" not in shared  # the server's message is untouched


def test_a_backend_without_an_actor_pool_gets_flowers_one_message_calls():
    backend = Backend(None)
    replies, _, _ = serve([message(1), message(2)], backend, 16)
    assert sorted(backend.processed) == [1, 2]
    assert all(not r.has_error() for r in replies.values())


def test_an_actor_that_dies_fails_its_whole_batch_and_goes_back_to_the_pool():
    messages = [message(n) for n in range(1, 6)]
    pool = Pool(dies=True)
    handler = _Records()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        replies, stores, metrics = serve(messages, Backend(pool, workers=1), 16)
    finally:
        logger.removeHandler(handler)
    # each message's error is logged as Flower's worker logs it
    assert len(handler.records) == 2 * len(messages)
    for exception, trace in zip(*[iter(handler.records)] * 2, strict=True):
        assert isinstance(exception.msg, ConnectionError)
        assert trace.getMessage().startswith("Traceback (most recent call last)")
    assert pool.calls == [len(messages)]  # one call, all five
    for node, reply in replies.items():
        assert reply.has_error()
        assert reply.error.code == ErrorCode.UNKNOWN
        assert "the actor died" in reply.error.reason
        assert stores[node].updates == 0
    assert pool.returned == 1
    assert len(metrics.runtimes) == len(messages)


def test_a_message_that_cannot_be_pickled_fails_alone():
    class Unpicklable:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            raise TypeError("cannot pickle this")

    messages = [message(n) for n in range(1, 5)]
    stores = {n: Store(n) for n in range(1, 5)}
    stores[3].context.node_config["bad"] = Unpicklable()  # type: ignore[index]
    queue: Queue[Message] = Queue()
    for m in messages[1:]:
        queue.put(m)

    def context_of(m: Message) -> Context:
        return stores[m.metadata.dst_node_id].context

    batch, _, held = take_batch(messages[0], queue, 16, context_of)
    assert batch == messages[:2] and held is messages[2]
    with pytest.raises((TypeError, pickle.PicklingError)):
        take_batch(held, queue, 16, context_of)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("limit", [1, 16])
def test_a_client_error_is_logged_as_flowers_worker_logs_it(limit):
    """The exception, then its traceback: what fedleak's one-line filter shortens."""
    handler = _Records()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        serve([message(1), message(2, fail=True)], Backend(Pool()), limit)
    finally:
        logger.removeHandler(handler)
    exception, trace = handler.records
    assert isinstance(exception.msg, BaseException)
    assert str(exception.msg).splitlines()[-1].endswith("client 2 fails")
    assert trace.getMessage().startswith("Traceback (most recent call last)")


# ------------------------------------------------------- what else can fail
def _reason_of(exception_type: type, text: str) -> str:
    """Flower's worker's error reason for an exception of this type and text."""
    return str(exception_type) + ":<'" + text + "'>"


def test_the_error_reason_is_flowers_to_the_character():
    from flwr.clientapp.client_app import ClientAppException

    payload = Batch()
    payload.add((message(2, fail=True), "2", Store(2).context))
    result = run_jobs(Actor(), app_fn, payload)
    _, code, reason, text, _ = result.load(0)
    assert code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert reason == _reason_of(ClientAppException, text)


def test_a_reply_that_does_not_unpickle_fails_alone_and_the_batch_goes_on():
    handler = _Records()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    messages = [message(1), unloadable_message(2), message(3)]
    try:
        replies, stores, _ = serve(messages, Backend(Pool(), workers=1), 16)
    finally:
        logger.removeHandler(handler)
    assert not replies[1].has_error() and not replies[3].has_error()
    assert stores[3].updates == 1  # the batch went on after the bad one
    bad = replies[2]
    assert bad.has_error() and stores[2].updates == 0
    assert bad.error.code == ErrorCode.UNKNOWN
    assert bad.error.reason == _reason_of(
        ValueError, "this object does not unpickle here"
    )
    exception, trace = handler.records
    assert isinstance(exception.msg, ValueError)
    assert trace.getMessage().startswith("Traceback (most recent call last)")


def test_a_call_that_returns_too_few_outcomes_fails_its_batch():
    pool = Pool()
    pool.drop_outcome = True
    messages = [message(n) for n in (1, 2, 3)]
    replies, stores, _ = serve(messages, Backend(pool, workers=1), 16)
    for node, reply in replies.items():
        assert reply.has_error()
        assert reply.error.code == ErrorCode.UNKNOWN
        assert "3 messages sent, 2 outcomes" in reply.error.reason
        assert stores[node].updates == 0
    assert pool.returned == len(pool.calls) == 1


def test_a_first_message_that_cannot_be_pickled_fails_and_the_worker_goes_on():
    class Unpicklable:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            raise TypeError("cannot pickle this")

    handler = _Records()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    bad, good = message(1), message(2)
    original = Store.__init__

    def store_init(self: Store, partition: int) -> None:
        original(self, partition)
        if partition == 1:
            self.context.node_config["bad"] = Unpicklable()  # type: ignore[index]

    backend = Backend(Pool(), workers=1)
    try:
        Store.__init__ = store_init  # type: ignore[method-assign]
        replies, _, _ = serve([bad, good], backend, 16)
    finally:
        Store.__init__ = original  # type: ignore[method-assign]
        logger.removeHandler(handler)
    assert replies[1].has_error()
    assert replies[1].error.code == ErrorCode.UNKNOWN
    assert replies[1].error.reason == _reason_of(TypeError, "cannot pickle this")
    assert not replies[2].has_error()
    exception, trace = handler.records
    assert isinstance(exception.msg, TypeError)
    assert trace.getMessage().startswith("Traceback (most recent call last)")
    assert actor_batches.pace_of(backend).busy == 0  # its call was released


def test_the_workers_of_a_backend_share_one_pace_sized_by_its_workers():
    backend = Backend(Pool(), workers=3)
    pace = actor_batches.pace_of(backend)
    assert actor_batches.pace_of(backend) is pace
    assert pace.workers == 3
    assert actor_batches.pace_of(Backend(Pool())) is not pace

    class Bare:
        """A backend that does not say how many workers it has."""

    assert actor_batches.pace_of(Bare()).workers == 1


def test_a_served_batch_keeps_the_pace_of_its_messages():
    backend = Backend(Pool(), workers=1)
    serve([message(n) for n in range(1, 5)], backend, 16)
    pace = actor_batches.pace_of(backend)
    assert 0 < pace.per_message_s < BATCH_BELOW_S
    assert pace.busy == 0


def test_only_flowers_ray_backend_with_an_actor_pool_is_batched():
    class Thing:
        def __init__(self, **attributes: Any) -> None:
            self.__dict__.update(attributes)

    def nothing(*args: Any) -> None:
        return None

    full = {"submit": nothing, "add_actor_back_to_pool": nothing}
    assert actor_batches.can_batch(Thing(pool=Thing(**full), app_fn=app_fn))
    assert not actor_batches.can_batch(Thing())  # no pool at all
    assert not actor_batches.can_batch(Thing(pool=None, app_fn=app_fn))
    for missing in full:
        partial = {k: v for k, v in full.items() if k != missing}
        assert not actor_batches.can_batch(Thing(pool=Thing(**partial), app_fn=app_fn))
    assert not actor_batches.can_batch(Thing(pool=Thing(**full), app_fn=None))
    assert not actor_batches.can_batch(Thing(pool=Thing(**full)))  # no app_fn


def test_a_call_that_never_ran_is_released_without_moving_the_pace():
    pace = Pace(workers=2)
    pace.size(queued=0, limit=16)
    pace.done(4, 0.02)  # 5 ms a message
    for _ in range(3):
        pace.size(queued=0, limit=16)
    assert pace.busy == 3
    pace.release()  # e.g. its submission failed
    assert pace.busy == 2 and pace.per_message_s == pytest.approx(0.005)
    pace.done(0, 1.0)  # a call of no message: released, no time per message
    assert pace.busy == 1 and pace.per_message_s == pytest.approx(0.005)


def test_a_fresh_pace_takes_the_first_time_as_it_is_and_stops_at_the_bar():
    pace = Pace(workers=2)
    pace.size(0, 16)
    pace.done(1, 0.005)
    assert pace.per_message_s == pytest.approx(0.005)
    pace = Pace(workers=2)
    pace.size(0, 16)
    pace.done(1, BATCH_BELOW_S)  # exactly at the bar: no more batching
    assert pace.size(queued=9, limit=16) == 1


def test_a_batch_of_exactly_its_byte_budget_is_kept_whole(monkeypatch):
    messages = [message(1), message(2)]
    both = take(messages, 16)[1].size
    monkeypatch.setattr(actor_batches, "BATCH_BYTES", both)
    batch, _, held, _ = take(messages, 16)
    assert batch == messages and held is None


@pytest.mark.parametrize(
    ("length", "shared"), [(SHARED_MIN_BYTES - 1, 0), (SHARED_MIN_BYTES, 1)]
)
def test_byte_strings_from_the_threshold_up_travel_once(length, shared):
    payload = Batch()
    data = b"x" * length
    payload.add((data,))
    payload.add((data,))
    assert len(payload.shared) == shared
    assert payload.load(1) == (data,)


def test_what_pickle_refuses_goes_through_cloudpickle_whole():
    big1, big2 = b"a" * SHARED_MIN_BYTES, b"b" * SHARED_MIN_BYTES
    payload = Batch()
    payload.add((big1,))
    payload.add((big1, big2, lambda: 7))  # a lambda: pickle refuses it
    assert payload.shared == [big1]  # big2 came with the refused item only
    payload.add((big1,))  # big1 is still found, once
    assert payload.shared == [big1]
    assert len(payload.items[2]) < 100  # a reference to it, not a copy
    payload = pickle.loads(pickle.dumps(payload))
    first, second, fn = payload.load(1)
    assert (first, second, fn()) == (big1, big2, 7)
    assert payload.load(2) == (big1,)


def test_a_call_is_released_once_its_actor_is_back_before_its_replies_go_out():
    """A worker still delivering replies counts as idle for the next split."""
    backend = Backend(Pool(), workers=2)
    busy_while_delivering: list[int] = []
    original = Store.update_context

    def update(self: Store, run_id: int, context: Context) -> None:
        busy_while_delivering.append(actor_batches.pace_of(backend).busy)
        original(self, run_id, context)

    Store.update_context = update  # type: ignore[method-assign]
    try:
        serve([message(n) for n in range(1, 5)], backend, 16)
    finally:
        Store.update_context = original  # type: ignore[method-assign]
    assert busy_while_delivering == [0, 0, 0, 0]


def test_a_call_is_fetched_with_ray_get_of_its_own_reference(monkeypatch):
    import ray

    asked: list[Any] = []
    outcomes = Batch()

    def get(ref: Any) -> Batch:
        asked.append(ref)
        return outcomes

    monkeypatch.setattr(ray, "get", get)
    ref = object()
    assert ray_fetch(ref) is outcomes
    assert asked == [ref]


def test_each_backend_gets_its_own_object_made_once_and_dropped_with_it():
    import gc

    made: list[Any] = []

    def make(backend: Any) -> list[Any]:
        made.append(backend)
        return [backend.num_workers]

    per_backend = actor_batches.PerBackend(make)
    one, two = Backend(Pool(), workers=1), Backend(Pool(), workers=2)
    first = per_backend(one)
    assert per_backend(one) is first and first == [1]
    assert per_backend(two) == [2] and per_backend(two) is not first
    assert made == [one, two]
    made.clear()
    del one, first
    gc.collect()
    assert len(per_backend._objects) == 1  # the backend's object went with it
    threads = [threading.Thread(target=per_backend, args=(two,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == []  # made once, however many workers ask
