"""fedleak's simulation engine: timing mod, EngineGrid, the swap of Flower's functions."""

from __future__ import annotations

import os
import pickle
import threading
import time
import warnings
from queue import Queue

import numpy as np
import pytest
from flower_fakes import metadata
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.server.superlink.fleet.vce import vce_api
from flwr.serverapp import Grid
from flwr.superlink.grid import InMemoryGrid

from fedleak.runtime import engine
from fedleak.runtime.engine import (
    RAY_INLINE_BYTES,
    REMOTE_MIN_POLL_INTERVAL,
    TIMING_RECORD,
    TIMING_REQUEST,
    EngineGrid,
    fast_engine,
    simulation_backend_config,
    timing_mod,
)
from fedleak.runtime.lifecycle import ray_address_in_use
from fedleak.training import arrays_from_records, read_npy

FLOWER_DISPATCH = vce_api.add_messages_to_queue
FLOWER_STORE = vce_api.put_message_into_state


def request(node: int = 5, message_type: str = "train") -> Message:
    content = RecordDict({"config": ConfigRecord({"x": 1})})
    return Message(content, metadata=metadata(0, dst=node, message_type=message_type))


def answer(msg: Message, seen: list[RecordDict]) -> Message:
    seen.append(msg.content)
    time.sleep(0.02)
    return Message(RecordDict({"metrics": MetricRecord({"a": 1.0})}), reply_to=msg)


# ----------------------------------------------------------------- timing_mod
def test_timing_mod_leaves_requests_without_the_record_alone():
    seen: list[RecordDict] = []
    reply = timing_mod(request(), None, lambda m, c: answer(m, seen))  # type: ignore[arg-type]
    assert TIMING_RECORD not in reply.content
    assert list(seen[0].keys()) == ["config"]


def test_timing_mod_hides_the_request_and_reports_the_handler_time():
    seen: list[RecordDict] = []
    msg = request()
    msg.content[TIMING_REQUEST] = ConfigRecord()
    reply = timing_mod(msg, None, lambda m, c: answer(m, seen))  # type: ignore[arg-type]
    assert list(seen[0].keys()) == ["config"]  # the handler never sees it
    compute = reply.content.metric_records[TIMING_RECORD]["compute-s"]
    assert isinstance(compute, float) and compute >= 0.02  # the handler slept 20 ms
    assert reply.content.metric_records["metrics"]["a"] == 1.0


# ----------------------------------------------------------------- EngineGrid
class QueueGrid(Grid):
    """A remote-like Grid: replies appear ``delay`` seconds after the push."""

    def __init__(self, handler, delay: float = 0.0, drop: set[int] = frozenset()):  # type: ignore[no-untyped-def]
        self.handler, self.delay, self.drop = handler, delay, drop
        self.pushed: list[Message] = []
        self.ready: dict[str, tuple[float, Message]] = {}
        self.pulls = 0

    def set_run(self, run):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    @property
    def run(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def create_message(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def get_node_ids(self) -> list[int]:
        return [1, 2, 3]

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        ids = []
        for i, msg in enumerate(messages):
            msg.metadata.__dict__["_message_id"] = f"id-{len(self.pushed)}-{i}"
            self.pushed.append(msg)
            ids.append(msg.metadata.message_id)
            if msg.metadata.dst_node_id not in self.drop:
                at = time.monotonic() + self.delay
                received = pickle.loads(pickle.dumps(msg))  # what a transport copies
                reply = timing_mod(received, None, self.handler)
                self.ready[msg.metadata.message_id] = (at, reply)
        return ids

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        self.pulls += 1
        now = time.monotonic()
        out = [
            r
            for i, (at, r) in self.ready.items()
            if i in set(message_ids) and at <= now
        ]
        for reply in out:
            del self.ready[reply.metadata.reply_to_message_id]
        return out

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        raise AssertionError("EngineGrid must not call the wrapped send_and_receive")


def test_engine_grid_times_exchanges_and_strips_the_timing_before_the_strategy():
    seen: list[RecordDict] = []
    inner = QueueGrid(lambda m, c: answer(m, seen))
    grid = EngineGrid(inner)
    replies = list(grid.send_and_receive([request(1), request(2)], timeout=10))
    assert len(replies) == 2
    assert all(
        TIMING_RECORD not in r.content for r in replies
    )  # strategies never see it
    assert all(TIMING_REQUEST in m.content for m in inner.pushed)
    (exchange,) = grid.take_exchanges()
    assert (exchange.num_sent, exchange.num_replies) == (2, 2)
    assert len(exchange.compute_s) == 2 and min(exchange.compute_s) >= 0.02
    assert 0.04 <= exchange.wait_s < 5  # two 20 ms handlers ran inside the push
    assert grid.take_exchanges() == []


def test_engine_grid_without_timing_sends_the_messages_unchanged():
    inner = QueueGrid(lambda m, c: answer(m, []))
    grid = EngineGrid(inner, timing=False)
    grid.send_and_receive([request(1)], timeout=10)
    assert list(inner.pushed[0].content.keys()) == ["config"]
    assert grid.exchanges == []


def test_engine_grid_returns_what_came_when_the_timeout_passes():
    inner = QueueGrid(lambda m, c: answer(m, []), drop={2})
    grid = EngineGrid(inner, poll_interval=0.001)
    replies = list(grid.send_and_receive([request(1), request(2)], timeout=0.3))
    assert [r.metadata.src_node_id for r in replies] == [1]
    (exchange,) = grid.exchanges
    assert (exchange.num_sent, exchange.num_replies) == (2, 1)
    assert 0.3 <= exchange.wait_s < 5


def test_engine_grid_without_a_timeout_waits_for_every_reply():
    inner = QueueGrid(lambda m, c: answer(m, []), delay=0.1)
    grid = EngineGrid(inner, poll_interval=0.001)
    replies = grid.send_and_receive([request(1), request(2)], timeout=None)
    assert sorted(r.metadata.src_node_id for r in replies) == [1, 2]


def test_engine_grid_pulls_at_once_and_stops_at_the_deadline_not_a_poll_later():
    """A long poll step: a reply already there comes without waiting for it,
    and the deadline cuts the step short."""
    inner = QueueGrid(lambda m, c: answer(m, []), drop={2})
    grid = EngineGrid(inner, poll_interval=5.0)
    started = time.monotonic()
    replies = grid.send_and_receive([request(1)], timeout=30)
    assert time.monotonic() - started < 2.5 and len(replies) == 1
    started = time.monotonic()
    replies = grid.send_and_receive([request(1), request(2)], timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2.5
    assert [r.metadata.src_node_id for r in replies] == [1]


def test_engine_grid_polls_a_remote_grid_no_faster_than_the_floor():
    inner = QueueGrid(lambda m, c: answer(m, []), delay=0.25)
    grid = EngineGrid(inner, poll_interval=0.001)
    assert grid.poll_interval == REMOTE_MIN_POLL_INTERVAL and not grid.in_memory
    grid.send_and_receive([request(1)], timeout=10)
    # 0.25 s of waiting at one pull per 0.05 s: at most 0.25 / 0.05 + 2 pulls
    assert inner.pulls <= 0.25 / REMOTE_MIN_POLL_INTERVAL + 2


def test_bad_poll_intervals_are_refused():
    with pytest.raises(ValueError, match="poll_interval"):
        EngineGrid(QueueGrid(None), poll_interval=0)
    with pytest.raises(ValueError, match="poll_interval"), fast_engine(-1.0):
        pass


# --------------------------------------------------------- the engine swap
def test_fast_engine_swaps_flowers_functions_for_the_block_only():
    if engine._ENGINE.originals:
        pytest.skip("fedleak's engine is installed for good (flower_app imported)")
    assert vce_api.add_messages_to_queue is FLOWER_DISPATCH
    with fast_engine(0.01) as swapped:
        assert swapped and engine.engine_active()
        assert vce_api.add_messages_to_queue is engine._dispatch
        assert vce_api.put_message_into_state is engine._store_replies
        with fast_engine(0.02):  # nested: still swapped, still active
            assert engine.engine_active()
        assert vce_api.add_messages_to_queue is engine._dispatch
    assert vce_api.add_messages_to_queue is FLOWER_DISPATCH
    assert vce_api.put_message_into_state is FLOWER_STORE
    assert not engine.engine_active()


def test_actor_channels_are_in_use_only_where_every_block_asks_and_batches():
    assert not engine.actor_channels_in_use()  # outside any block: Flower's calls
    with fast_engine(0.01):
        assert engine.actor_channels_in_use()
        with fast_engine(0.01, actor_channels=False):  # one block says no
            assert not engine.actor_channels_in_use()
        assert engine.actor_channels_in_use()
        with fast_engine(0.01, actor_batch=1):  # one message per call: no batches
            assert not engine.actor_channels_in_use()
        assert engine.actor_channels_in_use()
    with fast_engine(0.01, actor_channels=False):
        assert not engine.actor_channels_in_use()
    assert not engine.actor_channels_in_use()


def test_a_runs_federation_settings_reach_the_engine_and_the_grid_reports_them():
    from types import SimpleNamespace

    federation = SimpleNamespace(
        poll_interval=0.01, actor_batch=4, actor_channels=False
    )
    grid = EngineGrid(QueueGrid(None), poll_interval=0.01)
    assert grid.settings() == {
        "poll_interval": engine.REMOTE_MIN_POLL_INTERVAL,  # not the in-memory Grid
        "wake_ups": False,
        "actor_batch": 1,
        "actor_channels": False,
    }
    with engine.fast_engine_for(federation):
        assert engine.actor_batch_in_use() == 4
        assert not engine.actor_channels_in_use()
        assert grid.settings()["actor_batch"] == 4
    with engine.fast_engine_for(
        SimpleNamespace(poll_interval=0.01, actor_batch=16, actor_channels=True)
    ):
        assert grid.settings()["actor_channels"] is True
    assert engine.actor_batch_in_use() == 1


def test_flowers_worker_is_swapped_for_one_that_asks_about_channels():
    assert engine._worker.keywords == {
        "limit": engine.actor_batch_in_use,
        "channels": engine.actor_channels_in_use,
    }


def test_fast_engine_keeps_flowers_polling_when_its_internals_differ(monkeypatch):
    def different(state, queue):  # type: ignore[no-untyped-def]
        pass

    # importing fedleak's Flower app (an earlier test may have) installs the
    # engine dormant; start from Flower's own functions
    was_installed = bool(engine._ENGINE.originals)
    engine.uninstall_engine()
    monkeypatch.setattr(vce_api, "add_messages_to_queue", different)
    with (
        pytest.warns(RuntimeWarning, match="add_messages_to_queue"),
        fast_engine() as swapped,
    ):
        assert not swapped
        assert vce_api.add_messages_to_queue is different
        assert not engine.engine_active()
    assert vce_api.add_messages_to_queue is different
    monkeypatch.undo()
    if was_installed:
        assert engine.install_engine()


class FakeState:
    """The two LinkState calls the engine's threads make."""

    def __init__(self) -> None:
        self.inbox: dict[int, list[Message]] = {}
        self.stored: list[Message] = []
        self.lock = threading.Lock()

    def get_message_ins(self, node_id: int, limit: int) -> list[Message]:
        with self.lock:
            waiting = self.inbox.get(node_id, [])
            taken, self.inbox[node_id] = waiting[:limit], waiting[limit:]
            return taken

    def store_message_res(self, message: Message) -> None:
        self.stored.append(message)

    def store_message_ins(self, message: Message) -> str:
        """What a Grid's push does: queue the message for its node."""
        with self.lock:
            self.inbox.setdefault(message.metadata.dst_node_id, []).append(message)
        return "stored"


def test_a_pushed_message_reaches_the_actors_at_once_not_at_the_next_poll(
    monkeypatch,
):
    """With a 60 s fallback, only the push's wake-up can deliver in 10 s."""
    monkeypatch.setattr(engine, "WAKE_FALLBACK_S", 60.0)
    state, queue, stop = FakeState(), Queue(), threading.Event()
    with fast_engine(60.0):
        worker = threading.Thread(
            target=vce_api.add_messages_to_queue, args=(state, queue, {7: 0}, stop)
        )
        worker.start()
        try:
            time.sleep(0.2)  # the dispatcher is now idle, waiting up to 60 s
            msg = request(7)
            with state.lock:
                state.inbox[7] = [msg]

            class Pusher(QueueGrid):
                def push_messages(self, messages):  # type: ignore[no-untyped-def]
                    return ["pushed"]

            EngineGrid(Pusher(None)).push_messages([msg])
            assert queue.get(timeout=10) is msg
        finally:
            stop.set()
            engine._ENGINE.pushed.set()
            worker.join(timeout=10)
    assert not worker.is_alive()


def test_any_push_into_the_state_wakes_the_dispatcher(monkeypatch):
    """A Grid that is not an EngineGrid pushes through the LinkState: that wakes it."""
    monkeypatch.setattr(engine, "WAKE_FALLBACK_S", 60.0)
    state, queue, stop = FakeState(), Queue(), threading.Event()
    with fast_engine(60.0):
        worker = threading.Thread(
            target=vce_api.add_messages_to_queue, args=(state, queue, {7: 0}, stop)
        )
        worker.start()
        try:
            time.sleep(0.2)  # the dispatcher is now idle, waiting up to 60 s
            msg = request(7)
            assert state.store_message_ins(msg) == "stored"  # wrapped, same answer
            assert queue.get(timeout=10) is msg
            assert state.store_message_ins.wakes_dispatcher
        finally:
            stop.set()
            engine._ENGINE.pushed.set()
            worker.join(timeout=10)
    assert not worker.is_alive()


def test_a_stored_reply_wakes_the_grid():
    state, queue, stop = FakeState(), Queue(), threading.Event()
    engine._ENGINE.replied.clear()
    with fast_engine(60.0):
        worker = threading.Thread(
            target=vce_api.put_message_into_state, args=(state, queue, stop)
        )
        worker.start()
        try:
            reply = Message(RecordDict(), reply_to=request(3))
            before = engine.replies_stored()
            queue.put(reply)
            assert engine._ENGINE.replied.wait(timeout=10)
            assert state.stored == [reply]
            assert engine.replies_stored() == before + 1  # counted for the Grid
        finally:
            stop.set()
            worker.join(timeout=10)


def test_while_replies_are_stored_the_workers_may_store_theirs_directly():
    """The reply thread registers a direct store into its LinkState (waking
    the Grid) for the workers' batches, and withdraws it when it stops."""
    from fedleak.runtime import actor_batches

    state, queue, stop = FakeState(), Queue(), threading.Event()
    with fast_engine(60.0):
        worker = threading.Thread(
            target=vce_api.put_message_into_state, args=(state, queue, stop)
        )
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while actor_batches._reply_store_of(queue) is None:
                assert time.monotonic() < deadline, "no store registered"
                time.sleep(0.005)
            direct = actor_batches._reply_store_of(queue)
            reply = Message(RecordDict(), reply_to=request(4))
            engine._ENGINE.replied.clear()
            before = engine.replies_stored()
            direct.store(reply)
            direct.wake()
            assert engine._ENGINE.replied.is_set()
            assert state.stored == [reply]
            assert engine.replies_stored() == before + 1
        finally:
            stop.set()
            worker.join(timeout=10)
    assert actor_batches._reply_store_of(queue) is None


# ------------------------------------------------------- counted pulls
class StoredGrid(InMemoryGrid):
    """Flower's in-memory Grid as the engine sees it: replies are stored by the
    engine's counted store (batch by batch, each batch waking the Grid) and
    pulled from here; ``made`` replies appear at a pull, stored by nobody
    (what the LinkState does for an expired TTL)."""

    def __init__(self, batches: list[list[int]], made: tuple[int, ...] = ()) -> None:
        self.batches, self.made = batches, made
        self.store = engine._counting(self._keep)
        self.kept: dict[str, Message] = {}
        self.pulls = 0
        self.lock = threading.Lock()

    def _keep(self, reply: Message) -> None:
        with self.lock:
            self.kept[reply.metadata.reply_to_message_id] = reply

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        pushed = list(messages)
        for i, msg in enumerate(pushed):
            msg.metadata.__dict__["_message_id"] = f"m{i}"
        by_index = {i: Message(RecordDict(), reply_to=m) for i, m in enumerate(pushed)}

        def deliver() -> None:
            for batch in self.batches:
                time.sleep(0.05)
                for i in batch:
                    self.store(by_index[i])
                engine._wake_grid()

        threading.Thread(target=deliver, daemon=True).start()
        self.made_replies = {f"m{i}": by_index[i] for i in self.made}
        return [m.metadata.message_id for m in pushed]

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        self.pulls += 1
        with self.lock:
            found = {**self.made_replies, **self.kept}
            out = [found[i] for i in message_ids if i in found]
            for i in list(message_ids):
                self.kept.pop(i, None)
                self.made_replies.pop(i, None)
        return out


def _senders(replies) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(r.metadata.reply_to_message_id for r in replies)


def test_the_grid_pulls_once_every_reply_is_stored_not_at_each_wake_up(monkeypatch):
    monkeypatch.setattr(engine, "WAKE_FALLBACK_S", 60.0)  # no pulls by the clock
    grid = StoredGrid([[0, 1], [2], [3, 4]])
    with fast_engine(60.0):
        replies = EngineGrid(grid, timing=False).send_and_receive(
            [request(n) for n in range(5)], timeout=30
        )
    assert _senders(replies) == ["m0", "m1", "m2", "m3", "m4"]
    assert grid.pulls == 1  # three wake-ups, one pull


def test_outside_the_fast_engine_the_grid_polls():
    grid = StoredGrid([[0], [1]])
    replies = EngineGrid(grid, poll_interval=0.01, timing=False).send_and_receive(
        [request(1), request(2)], timeout=30
    )
    assert _senders(replies) == ["m0", "m1"]
    assert grid.pulls >= 5  # 0.1 s of replies at one pull per 0.01 s


def test_a_reply_nobody_stores_comes_at_the_clock_pull(monkeypatch):
    monkeypatch.setattr(engine, "WAKE_FALLBACK_S", 0.05)
    grid = StoredGrid([[0]], made=(1,))  # node 1's reply is made by the LinkState
    with fast_engine(60.0):
        replies = EngineGrid(grid, timing=False).send_and_receive(
            [request(1), request(2)], timeout=30
        )
    assert _senders(replies) == ["m0", "m1"]


def test_at_the_deadline_the_stored_replies_come_back(monkeypatch):
    monkeypatch.setattr(engine, "WAKE_FALLBACK_S", 60.0)
    grid = StoredGrid([[1]])  # node 0 never replies: the count stays short
    with fast_engine(60.0):
        started = time.monotonic()
        replies = EngineGrid(grid, timing=False).send_and_receive(
            [request(1), request(2)], timeout=0.4
        )
    assert time.monotonic() - started >= 0.4
    assert _senders(replies) == ["m1"]
    assert grid.pulls == 1  # the last pull, at the deadline


# ---------------------------------------------------------- reading arrays
@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.zeros((0, 3)),
        np.array(3.5),
        np.arange(6, dtype=">i4"),
        np.array([True, False]),
        np.arange(5, dtype=np.uint64) * 2**40,
    ],
)
def test_read_npy_equals_numpy_load(value):
    array = Array(value)
    view = read_npy(array.data, array.dtype, tuple(array.shape))
    assert view is not None and not view.flags.writeable
    assert view.dtype == array.numpy().dtype and np.array_equal(view, array.numpy())


def test_read_npy_declines_what_it_does_not_know():
    fortran = Array(np.asfortranarray(np.ones((3, 4))))
    assert read_npy(fortran.data, fortran.dtype, tuple(fortran.shape)) is None
    plain = Array(np.ones((3, 4), dtype=np.float32))
    assert read_npy(plain.data, "float64", (3, 4)) is None  # header says float32
    assert read_npy(plain.data, "float32", (4, 4)) is None  # wrong size
    assert read_npy(b"not an npy file", "float32", (1,)) is None
    record = ArrayRecord({"f": fortran, "c": plain})
    out = arrays_from_records(record)  # falls back to numpy.load for "f"
    assert np.array_equal(out["f"], np.ones((3, 4))) and list(out) == ["f", "c"]


def test_no_warning_when_loading_read_only_arrays_into_a_model():
    from fedleak.task import TaskSpec
    from fedleak.training import set_arrays

    model = TaskSpec(model="mlp").new_model()
    arrays = arrays_from_records(ArrayRecord(model.state_dict()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_arrays(model, arrays)


@pytest.mark.skipif(
    __import__("platform").libc_ver()[0] != "glibc", reason="glibc's malloc only"
)
def test_memory_settings_reach_the_processes_started_inside_the_block_only(
    monkeypatch,
):
    for name in engine.MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    assert engine.keep_freed_memory(children=False)
    assert not any(name in os.environ for name in engine.MALLOC_ENV)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "123")  # the user's own setting
    with fast_engine():
        assert os.environ["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
        assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "123"
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "123"


def test_the_inference_pooling_path_gives_the_training_paths_numbers():
    """Pooling in channels-last memory (no autograd) changes no value."""
    import torch

    from fedleak.models import build_model

    model = build_model("cnn", (1, 28, 28), 10, seed=4)
    x = torch.randn(50, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        fast = model(x)
    slow = model(x).detach()  # autograd on: the plain kernel
    assert torch.equal(fast, slow)


def test_a_run_without_an_address_starts_a_local_ray_even_beside_a_cluster(
    monkeypatch,
):
    # "local": Ray would otherwise join the cluster `ray start` last made
    # on this machine and refuse the local settings
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    init = simulation_backend_config(1.0)["init_args"]
    assert init["address"] == "local"
    assert init["_system_config"] == {"max_direct_call_object_size": RAY_INLINE_BYTES}
    assert (
        "_system_config"
        not in simulation_backend_config(1.0, inline=False)["init_args"]
    )


def test_ray_address_comes_from_the_run_then_from_ray_address(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", " 10.0.0.5:6379 ")
    assert ray_address_in_use(None) == "10.0.0.5:6379"
    assert ray_address_in_use("") == "10.0.0.5:6379"
    assert ray_address_in_use("10.0.0.9:1") == "10.0.0.9:1"
    init = simulation_backend_config(1.0)["init_args"]
    # an existing cluster keeps its own settings
    assert init["address"] == "10.0.0.5:6379"
    assert "_system_config" not in init
    assert (
        simulation_backend_config(1.0, ray_address="h:1")["init_args"]["address"]
        == "h:1"
    )
    monkeypatch.setenv("RAY_ADDRESS", "  ")
    assert ray_address_in_use(None) == ""


def test_the_secure_rounds_vector_stays_inside_the_clipping_range(task_identity):
    """``bench engine``'s secure round: each client sends half the global vector
    plus its own, so 60 rounds of the mean stay within [-3, 3] (the default
    clip is 8) and end at 2 (1 - 2^-60) times the clients' mean."""
    from flwr.app import Context

    from fedleak.bench.engine import (
        _VECTOR,
        SECURE_CLIENTS,
        _add_vector,
        client_vector,
    )

    length = 1000
    w = np.zeros(length, dtype=np.float32)
    largest = 0.0
    for _ in range(60):
        msg = Message(
            RecordDict({"arrays": ArrayRecord({_VECTOR: Array(w)})}),
            dst_node_id=1,
            message_type="train",
        )
        updates = []
        for p in range(SECURE_CLIENTS):
            context = Context(
                run_id=1,
                node_id=p + 1,
                node_config={"partition-id": p, "num-partitions": SECURE_CLIENTS},
                state=RecordDict(),
                run_config={},
            )
            reply = _add_vector(msg, context)
            updates.append(reply.content.array_records["arrays"][_VECTOR].numpy())
        largest = max(largest, float(np.max(np.abs(updates))))
        w = np.mean(updates, axis=0).astype(np.float32)
    mean = np.mean([client_vector(p, length) for p in range(SECURE_CLIENTS)], axis=0)
    assert largest <= 3.0
    np.testing.assert_allclose(w, 2.0 * mean, atol=1e-5)


# ------------------------------------------- the dispatcher's one-scan pass
@pytest.fixture
def superlink_identity(task_identity):
    """Instructions come from the SuperLink's node, as in ``run_simulation``."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.node_id = SUPERLINK_NODE_ID


def simulation_state(num_nodes: int):
    """An in-memory LinkState, its Grid and nodes, built as ``run_simulation`` does."""
    from flwr.proto.task_pb2 import Task
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    run = Run.create_empty(run_id=1)
    run.primary_task_id = 1
    run.federation_id = NOOP_FEDERATION_ID
    state = factory.state()
    state.run_ids[1] = RunRecord(run=run)
    state.task_store[1] = Task(task_id=1, run_id=1)
    nodes = vce_api._register_nodes(num_nodes, factory)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    return state, grid, nodes


def test_the_one_scan_pass_takes_what_flowers_per_node_queries_take(
    superlink_identity,
):
    """First undelivered message per node, in the order stored; marked delivered."""
    taken_by = {}
    for way in ("flower", "fedleak"):
        state, grid, nodes = simulation_state(6)
        ids = list(nodes)
        # two messages for some nodes, one for others, none for the last
        order = ids[:4] + ids[1:3] + [ids[4]]
        pushed = [
            Message(RecordDict(), dst_node_id=n, message_type="train") for n in order
        ]
        grid.push_messages(pushed)
        position = {m.metadata.message_id: k for k, m in enumerate(pushed)}
        if way == "flower":
            got = [m for n in nodes for m in state.get_message_ins(node_id=n, limit=1)]
        else:
            got = engine._one_per_node(state, nodes)
        assert all(m.metadata.delivered_at for m in got)
        # (partition, position pushed) of each message taken
        taken_by[way] = sorted(
            (nodes[m.metadata.dst_node_id], position[m.metadata.message_id])
            for m in got
        )
        # what is left is each node's second message, and only that
        second = engine._one_per_node(state, nodes)
        assert sorted(nodes[m.metadata.dst_node_id] for m in second) == [1, 2]
        assert engine._one_per_node(state, nodes) == []
    assert taken_by["fedleak"] == taken_by["flower"] == [
        (0, 0), (1, 1), (2, 2), (3, 3), (4, 6)
    ]  # fmt: skip


def test_the_one_scan_pass_skips_expired_messages_as_flower_does(superlink_identity):
    state, grid, nodes = simulation_state(2)
    first, second = list(nodes)
    expired = Message(RecordDict(), dst_node_id=first, message_type="train", ttl=5)
    grid.push_messages([expired])
    expired.metadata.__dict__["_created_at"] -= 60  # its TTL ran out
    fresh = Message(RecordDict(), dst_node_id=second, message_type="train")
    grid.push_messages([fresh])
    got = engine._one_per_node(state, nodes)
    assert [m.metadata.dst_node_id for m in got] == [second]
    assert state.get_message_ins(node_id=first, limit=1) == []


def test_the_one_scan_pass_declines_a_state_it_cannot_read():
    assert engine._one_per_node(FakeState(), {1: 0}) is None


def test_an_engine_grid_push_wakes_the_dispatcher_once_all_are_stored(
    superlink_identity,
):
    state, grid, nodes = simulation_state(3)
    seen: list[int] = []  # messages stored when each wake-up came
    engine._wake_on_push(state)
    original_set = engine._ENGINE.pushed.set

    def record_wake() -> None:
        seen.append(len(state.message_ins_store))
        original_set()

    engine._ENGINE.pushed.set = record_wake  # type: ignore[method-assign]
    try:
        EngineGrid(grid, timing=False).push_messages(
            [Message(RecordDict(), dst_node_id=n, message_type="train") for n in nodes]
        )
        assert seen == [3]
        seen.clear()
        grid.push_messages(  # any other pusher wakes it at every store
            [Message(RecordDict(), dst_node_id=n, message_type="train") for n in nodes]
        )
        assert seen == [4, 5, 6]
    finally:
        engine._ENGINE.pushed.set = original_set  # type: ignore[method-assign]
