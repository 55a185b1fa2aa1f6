"""Same-node actor channels: a batch through a socket to a thread of the actor.

The actor is Flower's ``VirtualClientEngineActor`` logic in this process (as
in ``test_actor_batches``) and a channel's two ends are a socket pair; the
test marked ``slow`` opens real channels to a Ray actor.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message
from test_actor_batches import (
    Actor,
    Backend,
    Pool,
    Store,
    app_fn,
    fetch,
    message,
    serve,
)
from test_channel_frames import needs_shared

from fedleak.runtime import actor_batches, actor_channels, channel_frames
from fedleak.runtime.actor_batches import Batch, run_jobs
from fedleak.runtime.actor_channels import (
    ActorChannel,
    ChannelBroken,
    ChannelSet,
    channels_of,
)

HANG_S = 5.0  # longer than any step here takes; a test that waits longer fails
FETCH = actor_batches._fetch  # the real one, before any test patches it


def _job(node: int, **config: Any) -> tuple[Message, str, Any]:
    msg = message(node, config=ConfigRecord({"x": node * 10, **config}))
    return msg, str(node), Store(node).context


def _payload(*nodes: int) -> Batch:
    payload = Batch()
    for node in nodes:
        payload.add(_job(node))
    return payload


class Served:
    """A channel whose actor end is ``_serve`` on a thread of this process."""

    def __init__(self, actor: Any = None) -> None:
        server, client = socket.socketpair()
        self.actor = actor if actor is not None else Actor()
        self.thread = threading.Thread(
            target=actor_channels._serve,
            args=(self.actor, client, app_fn),
            daemon=True,
        )
        self.thread.start()
        server.settimeout(HANG_S)  # a hang fails the test instead of stalling it
        self.channel = ActorChannel.over(server)


def _outcomes(batch: Batch) -> list[Any]:
    return [batch.load(k) for k in range(len(batch.items))]


# -------------------------------------------------------------- one channel
def test_a_batch_through_a_channel_gives_what_a_ray_call_of_run_jobs_gives():
    served = Served()
    payload = _payload(1, 2, 3)
    served.channel.send(payload)
    through_channel = _outcomes(served.channel.receive())
    direct = _outcomes(run_jobs(Actor(), app_fn, pickle.loads(pickle.dumps(payload))))
    assert len(through_channel) == 3
    for (ok, reply, context), (ok2, reply2, context2), node in zip(
        through_channel, direct, (1, 2, 3), strict=True
    ):
        assert ok and ok2
        assert reply.content.metric_records["m"]["partition"] == node
        assert reply.content.metric_records["m"]["x"] == node * 10
        assert dict(reply.content.metric_records["m"]) == dict(
            reply2.content.metric_records["m"]
        )
        assert context.state.config_records["seen"]["n"] == 1
        assert context2.state.config_records["seen"]["n"] == 1
    served.channel.close()
    served.thread.join(timeout=5)
    assert not served.thread.is_alive()  # the actor's thread ends with the stream


def test_a_channel_serves_batch_after_batch_in_order():
    served = Served()
    for round_ in range(5):
        served.channel.send(_payload(round_ + 1))
        ((ok, reply, _),) = _outcomes(served.channel.receive())
        assert ok and reply.content.metric_records["m"]["partition"] == round_ + 1
    served.channel.close()


def test_a_clients_error_is_an_outcome_and_the_channel_goes_on():
    served = Served()
    payload = Batch()
    payload.add(_job(1, fail=True))
    payload.add(_job(2))
    served.channel.send(payload)
    failed, fine = _outcomes(served.channel.receive())
    assert failed[0] is False and "client 1 fails" in failed[2]
    assert fine[0] is True
    assert not served.channel.broken
    served.channel.send(_payload(3))
    assert _outcomes(served.channel.receive())[0][0] is True
    served.channel.close()


def test_an_item_the_actor_cannot_read_fails_alone_and_the_channel_goes_on():
    served = Served()
    payload = _payload(1)
    payload.items.insert(0, b"not a pickle")
    served.channel.send(payload)
    unreadable, fine = _outcomes(served.channel.receive())
    assert unreadable[0] is False and "invalid load key" in unreadable[2]
    assert fine[0] is True
    served.channel.send(_payload(4))
    assert _outcomes(served.channel.receive())[0][0] is True
    served.channel.close()


def test_a_batch_the_actor_cannot_run_breaks_that_call_with_its_reason(monkeypatch):
    served = Served()

    def broken_run_jobs(*args: Any) -> Batch:
        raise RuntimeError("no jobs today")

    monkeypatch.setattr(actor_channels, "run_jobs", broken_run_jobs)
    served.channel.send(_payload(1))
    with pytest.raises(
        ChannelBroken,
        match=r"^the actor could not run the batch: RuntimeError\('no jobs today'\)$",
    ):
        served.channel.receive()
    assert not served.channel.broken  # the stream itself is fine
    monkeypatch.undo()
    served.channel.send(_payload(4))
    assert _outcomes(served.channel.receive())[0][0] is True
    served.channel.close()


def test_an_actor_that_dies_breaks_its_channel_for_good():
    server, client = socket.socketpair()
    channel = ActorChannel(server)
    channel.send(_payload(1))
    client.close()  # the actor's process ended
    with pytest.raises(ChannelBroken):
        channel.receive()
    assert channel.broken
    with pytest.raises(ChannelBroken, match="closed"):
        channel.send(_payload(2))


def test_a_stream_cut_inside_a_reply_breaks_the_channel():
    server, client = socket.socketpair()
    channel = ActorChannel(server)
    header = channel_frames._HEADER.pack(channel_frames._MAGIC, 0, 0, 1, 1, 100)
    client.sendall(header + struct.pack("!Q", 100) + b"only part")
    client.close()
    with pytest.raises(ChannelBroken, match=r"^the channel's other end closed it$"):
        channel.receive()
    assert channel.broken


def test_closing_a_channel_twice_is_harmless_and_it_refuses_work_after():
    served = Served()
    assert served.channel.broken is False
    served.channel.close()
    served.channel.close()
    with pytest.raises(ChannelBroken, match=r"^the channel is closed$"):
        served.channel.send(_payload(1))
    assert served.channel.broken is False  # closed on purpose, not broken


def test_a_socket_that_fails_under_a_write_breaks_the_channel_with_its_error():
    served = Served()
    served.channel.sock.close()
    with pytest.raises(ChannelBroken, match=r"^the channel failed: OSError"):
        served.channel.send(_payload(1))
    assert served.channel.broken


@pytest.mark.parametrize("shared_memory", [True, False])
def test_large_payloads_arrive_whole(monkeypatch, shared_memory):
    if not shared_memory:
        monkeypatch.setattr(actor_channels, "shared_areas_supported", lambda: False)
    served = Served(actor=Echo())
    assert (served.channel.areas is not None) is (
        shared_memory and channel_frames.shared_areas_supported()
    )
    blob = np.frombuffer(bytes(range(256)) * 40_000, dtype=np.uint8)  # 10 MB
    msg, cid, context = _job(1)
    msg.content["big"] = ArrayRecord({"blob": Array(blob)})
    payload = Batch()
    payload.add((msg, cid, context))
    assert len(payload.shared) == 1  # the array's bytes travel beside the item
    for _ in range(2):  # the second time into areas already grown
        served.channel.send(payload)
        outcomes = served.channel.receive()
        ok, reply, _ = outcomes.load(0)
        assert ok is True and len(outcomes.shared) == 1
        np.testing.assert_array_equal(reply.content["big"]["blob"].numpy(), blob)
    if served.channel.areas is not None:  # both ways went through them
        requests, replies = served.channel.areas
        assert requests.size >= payload.size and replies.size >= blob.nbytes
    served.channel.close()


@needs_shared
def test_each_direction_has_its_own_named_area_and_the_actor_closes_its_own(
    monkeypatch,
):
    taken: list[Any] = []
    take = actor_channels._take_areas
    monkeypatch.setattr(
        actor_channels,
        "_take_areas",
        lambda sock: taken.append(take(sock)) or taken[-1],
    )
    served = Served()
    areas = served.channel.areas
    assert areas is not None
    names = [os.readlink(f"/proc/self/fd/{area.fd}") for area in areas]
    assert [n.split(" ")[0] for n in names] == [
        "/memfd:fedleak-requests",
        "/memfd:fedleak-replies",
    ]
    served.channel.send(_payload(1))
    served.channel.receive()
    served.channel.close()
    served.thread.join(timeout=HANG_S)
    assert not served.thread.is_alive()
    ((actor_requests, actor_replies),) = taken
    assert actor_requests.fd == -1 and actor_replies.fd == -1  # closed at the end


def test_the_actor_takes_its_areas_or_none_and_closes_stray_descriptors():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(actor_channels._AREAS)  # says "areas" but hands over none
        assert actor_channels._take_areas(b) is None
        if hasattr(socket, "send_fds"):
            stray = os.memfd_create("stray") if hasattr(os, "memfd_create") else 0
            socket.send_fds(a, [actor_channels._NO_AREAS], [stray])
            assert actor_channels._take_areas(b) is None
            os.close(stray)
            (received,) = [  # the descriptor the actor got is closed again
                fd for fd in range(3, 1024) if _is_memfd(fd, "stray")
            ] or [None]
            assert received is None
        a.close()
        with pytest.raises(ChannelBroken, match=r"^the channel's other end closed it$"):
            actor_channels._take_areas(b)


def _is_memfd(fd: int, name: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{name}")
    except OSError:
        return False


def test_without_descriptor_passing_the_actor_reads_the_plain_byte(monkeypatch):
    monkeypatch.delattr(socket, "recv_fds")
    monkeypatch.setattr(actor_channels, "shared_areas_supported", lambda: False)
    served = Served()
    assert served.channel.areas is None
    served.channel.send(_payload(2))
    assert _outcomes(served.channel.receive())[0][0] is True
    served.channel.close()


def test_an_unreadable_failure_text_is_still_reported():
    server, client = socket.socketpair()
    with client:
        channel = ActorChannel(server)
        channel_frames.send_frame(client, actor_channels._FAILED, [b"bad \xff"], 1)
        with pytest.raises(
            ChannelBroken,
            match=r"^the actor could not run the batch: bad \ufffd$",
        ):
            channel.receive()
        channel.close()


class Echo(Actor):
    """Replies with the request's own content (large arrays come back)."""

    def run(self, client_app_fn: Any, message: Message, cid: str, context: Any) -> Any:
        return cid, Message(message.content, reply_to=message), context


# ------------------------------------------------------------ channel sets
class Opener:
    """Counts what a :class:`ChannelSet` opens; hands out served channels."""

    def __init__(self, refuse: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.refuse = refuse
        self.opened: list[str] = []
        self.served: list[Served] = []

    def __call__(self, actor: Any, fn: Any) -> ActorChannel | None:
        assert fn is app_fn
        self.opened.append(actor)
        if actor in self.refuse:
            return None
        served = Served()
        self.served.append(served)
        return served.channel


def test_a_set_opens_each_actors_channel_once():
    opener = Opener()
    channels = ChannelSet(opener)
    first = channels.channel("a", app_fn)
    assert channels.channel("a", app_fn) is first
    assert channels.channel("b", app_fn) is not first
    assert opener.opened == ["a", "b"]
    assert channels.opened == 2
    channels.close()


def test_an_actor_whose_channel_did_not_open_keeps_rays_calls_without_retrying():
    opener = Opener(refuse={"far"})
    channels = ChannelSet(opener)
    assert channels.channel("far", app_fn) is None
    assert channels.channel("far", app_fn) is None
    assert opener.opened == ["far"]
    assert channels.opened == 0


def test_a_broken_channel_is_not_reopened():
    opener = Opener()
    channels = ChannelSet(opener)
    channel = channels.channel("a", app_fn)
    assert channel is not None
    channel.broken = True
    assert channels.channel("a", app_fn) is None
    assert opener.opened == ["a"]
    assert channels.opened == 0


def test_the_last_worker_out_closes_every_channel():
    opener = Opener()
    channels = ChannelSet(opener)
    channels.enter()
    channels.enter()
    a = channels.channel("a", app_fn)
    b = channels.channel("b", app_fn)
    assert a is not None and b is not None
    channels.leave()
    a.send(_payload(1))  # one worker still serves: the channels stay open
    assert _outcomes(a.receive())[0][0] is True
    channels.leave()
    with pytest.raises(ChannelBroken):
        a.send(_payload(1))
    with pytest.raises(ChannelBroken):
        b.send(_payload(1))
    assert channels.channel("c", app_fn) is None  # closed for good
    assert opener.opened == ["a", "b"]
    for served in opener.served:
        served.thread.join(timeout=5)
        assert not served.thread.is_alive()


def test_a_channel_opened_while_the_set_closes_is_closed_at_once():
    class Late(Opener):
        def __call__(self, actor: Any, fn: Any) -> ActorChannel | None:
            channel = super().__call__(actor, fn)
            channels.close()  # the last worker left meanwhile
            return channel

    opener = Late()
    channels = ChannelSet(opener)
    assert channels.channel("a", app_fn) is None
    with pytest.raises(ChannelBroken):
        opener.served[0].channel.send(_payload(1))


def test_actors_are_told_apart_by_rays_actor_id():
    class Handle:
        def __init__(self, actor_id: str) -> None:
            self._actor_id = actor_id

    opener = Opener()
    channels = ChannelSet(opener)
    one = channels.channel(Handle("x"), app_fn)
    assert channels.channel(Handle("x"), app_fn) is one  # another handle, same actor
    assert channels.channel(Handle("y"), app_fn) is not one
    assert len(opener.opened) == 2
    channels.close()


def test_the_workers_of_a_backend_share_one_set():
    backend, other = Backend(Pool()), Backend(Pool())
    assert channels_of(backend) is channels_of(backend)
    assert channels_of(backend) is not channels_of(other)


def test_a_backends_channels_close_when_the_backend_goes():
    import gc

    backend = Backend(Pool())
    channels = channels_of(backend)
    channels.opener = Opener()
    channel = channels.channel("a", app_fn)
    assert channel is not None
    del backend
    gc.collect()
    with pytest.raises(ChannelBroken, match=r"^the channel is closed$"):
        channel.send(_payload(1))
    assert channels.channel("b", app_fn) is None


# --------------------------------------------------- the worker on channels
@pytest.fixture
def channel_sets(monkeypatch: pytest.MonkeyPatch) -> dict[Any, ChannelSet]:
    """Each backend's channels are served ones (no Ray)."""
    sets: dict[Any, ChannelSet] = {}

    def of(backend: Any) -> ChannelSet:
        if backend not in sets:
            sets[backend] = ChannelSet(Opener())
        return sets[backend]

    def fetch_either(future: Any) -> Batch:  # a channel's, else the fake Ray call's
        if isinstance(future, actor_batches._Sent):
            return FETCH(future)
        return fetch(future)

    monkeypatch.setattr(actor_channels, "channels_of", of)
    monkeypatch.setattr(actor_batches, "_fetch", fetch_either)
    monkeypatch.setattr(actor_batches, "_QUEUE_WAIT_S", 0.02)
    return sets


def _serve_all(
    messages: list[Message], backend: Backend, channels: bool
) -> dict[int, Message]:
    return serve(messages, backend, 16, channels=channels)[0]


def test_with_channels_every_batch_takes_the_channel_and_no_ray_call(channel_sets):
    pool = Pool()
    backend = Backend(pool, workers=1)
    messages = [message(n, fail=n == 2) for n in range(1, 6)]
    replies = _serve_all(messages, backend, channels=True)
    assert pool.calls == []  # no Ray call
    assert pool.returned == len(pool.futures) >= 1  # the actor always goes back
    assert all(isinstance(f, actor_batches._Sent) for f in pool.futures)
    for node, reply in replies.items():
        if node == 2:
            assert reply.has_error() and "client 2 fails" in reply.error.reason
        else:
            assert reply.content.metric_records["m"]["partition"] == node
    assert list(channel_sets) == [backend]  # the backend's own set
    (channels,) = channel_sets.values()
    with pytest.raises(ChannelBroken):  # the worker left: its channels are closed
        channels.opener.served[0].channel.send(_payload(1))  # type: ignore[attr-defined]


def test_without_channels_the_worker_makes_ray_calls(channel_sets):
    pool = Pool()
    replies = _serve_all([message(n) for n in range(1, 4)], Backend(pool), False)
    assert sum(pool.calls) == 3
    assert channel_sets == {}
    assert all(not r.has_error() for r in replies.values())


def test_channels_and_ray_calls_give_the_same_replies(channel_sets):
    def contents(channels: bool) -> dict[int, Any]:
        replies = _serve_all(
            [message(n) for n in range(1, 6)], Backend(Pool()), channels
        )
        return {n: dict(r.content.metric_records["m"]) for n, r in replies.items()}

    assert contents(True) == contents(False)


def test_a_batch_whose_channel_breaks_is_sent_as_a_ray_call(channel_sets):
    pool = Pool()
    backend = Backend(pool)
    channels = actor_channels.channels_of(backend)
    channel = channels.channel(pool.actor, app_fn)
    assert channel is not None
    channel.sock.close()  # broken, but not yet known to be
    future = actor_batches._submit(pool.actor, app_fn, _payload(1), channels)
    assert not isinstance(future, actor_batches._Sent)
    assert pool.calls == [1]
    assert channel.broken


def test_a_sent_batch_is_fetched_from_its_channel():
    served = Served()
    served.channel.send(_payload(7))
    outcomes = FETCH(actor_batches._Sent(served.channel))
    assert _outcomes(outcomes)[0][1].content.metric_records["m"]["partition"] == 7
    served.channel.close()


def test_without_unix_sockets_batches_keep_rays_calls(channel_sets, monkeypatch):
    assert actor_channels.channels_supported()  # this platform has them
    monkeypatch.delattr(socket, "AF_UNIX")
    assert not actor_channels.channels_supported()
    pool = Pool()
    replies = _serve_all([message(n) for n in range(1, 4)], Backend(pool), True)
    assert sum(pool.calls) == 3
    assert channel_sets == {}
    assert all(not r.has_error() for r in replies.values())


def test_a_backend_that_cannot_batch_opens_no_channels(channel_sets):
    backend = Backend(None)
    replies = _serve_all([message(1), message(2)], backend, channels=True)
    assert sorted(backend.processed) == [1, 2]
    assert channel_sets == {}
    assert all(not r.has_error() for r in replies.values())


# ------------------------------------------------------------- real actors
@pytest.mark.slow
@pytest.mark.in_default_run
def test_real_channels_open_to_ray_actors_on_this_node_and_close(ray_cluster):
    import ray
    import test_actor_batches
    from flwr.simulation.ray_transport.ray_actor import ClientAppActor

    # the test's ClientApp travels by value: the actors cannot import this folder
    ray.cloudpickle.register_pickle_by_value(test_actor_batches)
    ray.init(address=ray_cluster, logging_level="ERROR", log_to_driver=False)
    try:
        actor = ClientAppActor.options(num_cpus=0.5).remote()
        channel = actor_channels.open_channel(actor, app_fn, timeout=60)
        assert channel is not None
        channel.send(_payload(1, 2))
        outcomes = _outcomes(channel.receive())
        assert [o[1].content.metric_records["m"]["partition"] for o in outcomes] == [
            1,
            2,
        ]
        # an actor elsewhere (here: a node id that is not this one) keeps Ray's calls
        assert not ray.get(
            actor.__ray_call__.remote(
                actor_channels.serve_in_actor, "unused", b"", app_fn, "another-node"
            )
        )
        channel.close()
        started = time.monotonic()
        while time.monotonic() - started < 10:  # its thread saw the end and left
            names = ray.get(
                actor.__ray_call__.remote(
                    lambda _self: [t.name for t in threading.enumerate()]
                )
            )
            if "fedleak-channel" not in names:
                break
            time.sleep(0.1)
        assert "fedleak-channel" not in names
        ray.kill(actor)
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(test_actor_batches)


# ------------------------------------------------------- opening a channel
class RemoteCall:
    """``actor.__ray_call__.remote(fn, *args)`` run here; ``behave`` may replace ``fn``."""

    def __init__(self, actor: Any, behave: Any = None) -> None:
        self.actor = actor
        self.behave = behave

    def remote(self, fn: Any, *args: Any) -> Any:
        return (self.behave or fn)(self.actor, *args)


TIMEOUT = 0.5
WARNING = "fedleak: no channel to a Ray actor, {}; it keeps Ray's calls"


class FakeContext:
    def get_node_id(self) -> str:
        return "this-node"


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Ray's calls that ``open_channel`` and ``serve_in_actor`` make, in this process."""
    import ray

    warnings: list[str] = []

    def get(value: Any, timeout: float | None = None) -> Any:
        assert timeout == TIMEOUT  # the wait for the actor is bounded
        return value

    monkeypatch.setattr(ray, "get_runtime_context", FakeContext)
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(
        actor_channels._LOG, "warning", lambda msg, *a: warnings.append(msg % a)
    )
    return warnings


def _fake_actor(behave: Any = None) -> Actor:
    actor = Actor()
    actor.__ray_call__ = RemoteCall(actor, behave)  # type: ignore[attr-defined]
    return actor


def test_an_actor_on_this_node_gets_a_working_channel(fake_ray):
    channel = actor_channels.open_channel(_fake_actor(), app_fn, timeout=TIMEOUT)
    assert channel is not None
    assert channel.sock.gettimeout() is None  # a batch may take as long as it takes
    assert (channel.areas is not None) is channel_frames.shared_areas_supported()
    (thread,) = [t for t in threading.enumerate() if t.name == "fedleak-channel"]
    assert thread.daemon  # it never keeps the actor's process alive
    channel.send(_payload(3))
    assert _outcomes(channel.receive())[0][1].content.metric_records["m"]["x"] == 30
    channel.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert fake_ray == []


def test_shared_memory_that_cannot_be_handed_over_gives_no_channel(
    fake_ray, monkeypatch
):
    def refuse(*args: Any) -> None:
        raise OSError("no descriptors today")

    monkeypatch.setattr(actor_channels, "shared_areas_supported", lambda: True)
    monkeypatch.setattr(actor_channels.socket, "send_fds", refuse)
    before = {t.ident for t in threading.enumerate()}
    assert actor_channels.open_channel(_fake_actor(), app_fn, timeout=TIMEOUT) is None
    assert fake_ray == [
        WARNING.format(
            "its shared memory could not be handed over "
            "(OSError('no descriptors today'))"
        )
    ]
    deadline = time.monotonic() + HANG_S  # the actor's thread sees the stream end
    while {t.ident for t in threading.enumerate()} - before:
        assert time.monotonic() < deadline, "the actor's thread did not end"
        time.sleep(0.01)


def _granted(requested: int) -> int:
    """What Linux reports for a socket buffer of ``requested`` bytes: the
    request capped at ``net.core.wmem_max`` / ``rmem_max``, doubled."""
    caps = [
        int(Path(f"/proc/sys/net/core/{n}_max").read_text()) for n in ("wmem", "rmem")
    ]
    return 2 * min(requested, *caps)


@pytest.mark.skipif(
    not Path("/proc/sys/net/core/wmem_max").exists(), reason="Linux's socket limits"
)
def test_widened_buffers_take_what_the_kernel_grants():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        actor_channels._widen_buffers(a)
        expected = _granted(actor_channels.SOCKET_BUFFER_BYTES)
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == expected
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == expected


def test_a_buffer_the_kernel_refuses_leaves_the_channel_as_it_was():
    class Refusing:
        def setsockopt(self, *args: Any) -> None:
            raise OSError("not permitted")

    actor_channels._widen_buffers(Refusing())  # type: ignore[arg-type]


def test_both_ends_of_a_channel_widen_their_buffers(fake_ray, monkeypatch):
    widened: list[socket.socket] = []
    real = actor_channels._widen_buffers
    monkeypatch.setattr(
        actor_channels, "_widen_buffers", lambda s: (widened.append(s), real(s))
    )
    channel = actor_channels.open_channel(_fake_actor(), app_fn, timeout=TIMEOUT)
    assert channel is not None
    try:
        assert len(widened) == 2  # the actor's end, then the server's
        assert widened[1] is channel.sock
        assert widened[0] is not channel.sock
    finally:
        channel.close()


def test_an_actor_that_answers_after_the_server_gave_up_opens_nothing(
    fake_ray, tmp_path
):
    """Under load an actor can take the open call after the server's wait ran
    out and its socket file is gone: it returns False, no error, no thread."""
    before = {t.ident for t in threading.enumerate()}
    gone = str(tmp_path / "removed.sock")
    assert not actor_channels.serve_in_actor(Actor(), gone, b"t", app_fn, "this-node")
    closed = tmp_path / "closed.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(closed))  # bound, never listening: the connect is refused
    try:
        assert not actor_channels.serve_in_actor(
            Actor(), str(closed), b"t", app_fn, "this-node"
        )
    finally:
        listener.close()
    assert {t.ident for t in threading.enumerate()} <= before  # no thread started
    assert fake_ray == []


def test_an_actor_on_another_node_keeps_rays_calls_quietly(fake_ray):
    def elsewhere(actor: Any, address: str, token: bytes, fn: Any, node: str) -> bool:
        assert node == "this-node"
        return actor_channels.serve_in_actor(actor, address, token, fn, "other-node")

    assert (
        actor_channels.open_channel(_fake_actor(elsewhere), app_fn, timeout=TIMEOUT)
        is None
    )
    assert fake_ray == []


def _open_in_time(actor: Any) -> ActorChannel | None:
    """``open_channel`` with ``TIMEOUT``; fails the test if it does not return in time."""
    opened: list[ActorChannel | None] = []
    thread = threading.Thread(
        target=lambda: opened.append(
            actor_channels.open_channel(actor, app_fn, timeout=TIMEOUT)
        ),
        daemon=True,
    )
    thread.start()
    thread.join(timeout=HANG_S)
    assert opened, f"open_channel did not give up within {HANG_S} s"
    return opened[0]


def test_an_actor_that_never_connects_is_given_up_with_a_warning(fake_ray):
    def silent(actor: Any, *args: Any) -> bool:
        return True  # says it connected, never did

    assert _open_in_time(_fake_actor(silent)) is None
    assert fake_ray == [
        WARNING.format("it did not connect (TimeoutError('timed out'))")
    ]


def test_a_peer_with_the_wrong_token_gets_no_channel(fake_ray):
    def impostor(actor: Any, address: str, token: bytes, fn: Any, node: str) -> bool:
        forged = bytes(b ^ 1 for b in token)
        return actor_channels.serve_in_actor(actor, address, forged, fn, node)

    assert (
        actor_channels.open_channel(_fake_actor(impostor), app_fn, timeout=TIMEOUT)
        is None
    )
    assert fake_ray == [WARNING.format("it sent a wrong token")]


def test_a_peer_that_hangs_up_before_its_token_gets_no_channel(fake_ray):
    def hang_up(actor: Any, address: str, *args: Any) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
        sock.sendall(b"short")
        sock.close()
        return True

    assert (
        actor_channels.open_channel(_fake_actor(hang_up), app_fn, timeout=TIMEOUT)
        is None
    )
    assert fake_ray == [
        WARNING.format(
            'it sent no token (ChannelBroken("the channel\'s other end closed it"))'
        )
    ]


def test_a_peer_that_connects_and_stays_silent_is_given_up_in_time(fake_ray):
    peers: list[socket.socket] = []

    def mute(actor: Any, address: str, *args: Any) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
        peers.append(sock)  # open, but never sends its token
        return True

    assert _open_in_time(_fake_actor(mute)) is None
    assert fake_ray == [WARNING.format("it sent no token (TimeoutError('timed out'))")]
    peers[0].close()


def test_opening_leaves_no_socket_file_behind(fake_ray, monkeypatch, tmp_path):
    monkeypatch.setattr(actor_channels.tempfile, "tempdir", str(tmp_path))
    folders: list[str] = []
    make = actor_channels.tempfile.mkdtemp

    def mkdtemp(**kwargs: Any) -> str:
        folders.append(make(**kwargs))
        return folders[-1]

    monkeypatch.setattr(actor_channels.tempfile, "mkdtemp", mkdtemp)
    channel = actor_channels.open_channel(_fake_actor(), app_fn, timeout=TIMEOUT)
    assert channel is not None
    assert [Path(f).name.startswith("fedleak-channel-") for f in folders] == [True]
    assert list(tmp_path.iterdir()) == []
    channel.close()
