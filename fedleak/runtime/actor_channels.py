"""Same-node actor channels: a batch's Ray call as one socket round trip.

Each batch of :mod:`fedleak.runtime.actor_batches` is one Ray actor call.
On the 2-core machine fedleak is measured on, a call carrying a quickstart
batch (about 1 MB) takes 2.5-2.7 ms from submission to result, most of it
Ray's RPC, copies and bookkeeping on the same cores the clients compute
on; the same bytes through a Unix socket to a thread in the actor's
process take 0.37 ms (``fedleak bench engine`` gives the rounds' figures).

Ray offers such a channel itself (Compiled Graphs, ``ray.dag``'s
``experimental_compile``: 0.08 ms a round trip), but in Ray 2.55 its
reader spins while it waits: an idle compiled actor used 3.0 s of CPU in
3 s, a whole core per actor, more than every call it saves on a machine
with as many cores as actors. So this module opens its own channel, whose
reader sleeps in ``recv``:

- the first batch for an actor opens it: the server listens on a Unix
  socket in a private temporary folder, and a Ray call
  (``__ray_call__``, the actor's own process) connects a thread of the
  actor's process to it, which proves itself with a random token;
- the server then hands the actor's thread two shared memory areas (where
  the platform has them), one per direction, through the socket;
- every later batch for that actor is written as a frame
  (:mod:`~fedleak.runtime.channel_frames`: the batch's pickled items and
  shared byte strings as they are, their bytes in the shared area, only a
  header and a table of lengths through the socket), run by that thread
  exactly as ``run_jobs`` runs it in a Ray call, and its outcomes written
  back the same way;
- an actor on another node than the server keeps Ray's calls (a Unix socket
  does not leave the node), as does one whose channel did not open;
- a channel that breaks (its actor died) fails that batch as a failed Ray
  call does, and the actor goes back to Ray's calls;
- :meth:`ChannelSet.close` closes every channel; each actor's thread then
  sees the end of its stream and ends.

The actors stay Flower's, created and scheduled by Flower's Ray backend;
only the bytes of a batch take another road to them.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .actor_batches import Batch, PerBackend, run_jobs
from .channel_frames import (
    ChannelBroken,
    SharedArea,
    receive_frame,
    recv_exact,
    send_frame,
    shared_areas_supported,
)

__all__ = [
    "OPEN_TIMEOUT_S",
    "ActorChannel",
    "ChannelBroken",
    "ChannelSet",
    "channels_of",
    "channels_supported",
    "open_channel",
    "serve_in_actor",
]

OPEN_TIMEOUT_S = 30.0
"""Seconds an actor has to connect its channel before it keeps Ray's calls."""

SOCKET_BUFFER_BYTES = 8 * 1024 * 1024
"""Send and receive buffer each end of a channel asks for (best effort).

With Linux's default of 208 KiB a writer hands a secure round's 415 KB
batch over in pieces, each waiting for the reader, which on 2 cores shares
a CPU with the other, already computing, actor: one such write took 2.2 ms.
With the larger buffer the upload exchange of the engine bench's secure
round took 0.3-0.45 ms less (medians of 200 rounds each way, alternating
round by round in one run), when batches still went through the socket;
they now do only where there is no shared memory, or beyond
:data:`~fedleak.runtime.channel_frames.SHARED_MAX_BYTES`. The kernel caps
the request at twice ``net.core.wmem_max`` / ``rmem_max``."""

_LOG = logging.getLogger("flwr")
_TOKEN_BYTES = 32
_OK, _FAILED = 0, 1
_AREAS, _NO_AREAS = b"\x01", b"\x00"


def channels_supported() -> bool:
    """Return whether this platform has Unix sockets (not Windows' Python)."""
    return hasattr(socket, "AF_UNIX")


def _widen_buffers(sock: socket.socket) -> None:
    """Ask for :data:`SOCKET_BUFFER_BYTES` of send and receive buffer (best effort)."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)


def _offer_areas(sock: socket.socket) -> tuple[SharedArea, SharedArea] | None:
    """Server's end: create the requests' and replies' areas, hand them over.

    Sends one byte, with the two descriptors where shared memory is
    supported (:func:`~fedleak.runtime.channel_frames.shared_areas_supported`);
    None: frames go inline.
    """
    if not shared_areas_supported():
        sock.sendall(_NO_AREAS)
        return None
    areas = SharedArea.create("fedleak-requests"), SharedArea.create("fedleak-replies")
    try:
        socket.send_fds(sock, [_AREAS], [area.fd for area in areas])
    except OSError:
        for area in areas:
            area.close()
        raise
    return areas


def _take_areas(sock: socket.socket) -> tuple[SharedArea, SharedArea] | None:
    """Actor's end: receive what :func:`_offer_areas` sent."""
    if hasattr(socket, "recv_fds"):
        data, fds, _, _ = socket.recv_fds(sock, 1, 2)
    else:  # platforms without descriptor passing
        data, fds = sock.recv(1), []
    if not data:
        raise ChannelBroken("the channel's other end closed it")
    if data == _AREAS and len(fds) == 2:
        return SharedArea(fds[0]), SharedArea(fds[1])
    for fd in fds:
        os.close(fd)
    return None


def _parts(batch: Batch) -> tuple[list[bytes], int]:
    """Return a batch's frame parts (items, then shared strings) and its item count."""
    return [*batch.items, *batch.shared], len(batch.items)


def _batch(parts: list[bytes], first: int) -> Batch:
    """Return the batch of a frame's parts (:func:`_parts` undone)."""
    return Batch.of(parts[:first], parts[first:])


class ActorChannel:
    """The server's end of one actor's channel.

    Parameters
    ----------
    sock : socket.socket
        The connected Unix socket; the channel owns it.
    areas : tuple of SharedArea, optional
        The requests' and the replies' shared areas (the channel owns them);
        None: every frame goes inline through the socket.
    """

    def __init__(
        self, sock: socket.socket, areas: tuple[SharedArea, SharedArea] | None = None
    ) -> None:
        self.sock = sock
        self.areas = areas
        self.broken = False
        self._closed = False

    @classmethod
    def over(cls, sock: socket.socket) -> ActorChannel:
        """Offer the shared areas on ``sock`` (the actor's thread takes them)."""
        return cls(sock, _offer_areas(sock))

    def send(self, payload: Batch) -> None:
        """Write a batch's payload (the call's submission)."""
        requests = None if self.areas is None else self.areas[0]
        self._guard(lambda: send_frame(self.sock, _OK, *_parts(payload), requests))

    def receive(self) -> Batch:
        """Wait for the outcomes of the batch sent last (the call's result).

        Raises
        ------
        ChannelBroken
            The stream ended or failed, or the actor could not run the
            batch at all (not a client's error: those are outcomes).
        """
        replies = None if self.areas is None else self.areas[1]
        status, parts, first = self._guard(lambda: receive_frame(self.sock, replies))
        if status != _OK:
            reason = b"".join(parts).decode(errors="replace")
            raise ChannelBroken(f"the actor could not run the batch: {reason}")
        return _batch(parts, first)

    def _guard(self, step: Callable[[], Any]) -> Any:
        if self.broken or self._closed:
            raise ChannelBroken("the channel is closed")
        try:
            return step()
        except OSError as ex:  # ChannelBroken is one
            self.broken = True
            self.close()
            if isinstance(ex, ChannelBroken):
                raise
            raise ChannelBroken(f"the channel failed: {ex!r}") from ex

    def close(self) -> None:
        """Close the socket; the actor's thread sees the end of its stream."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for area in self.areas or ():
            area.close()


def serve_in_actor(
    actor: Any, address: str, token: bytes, app_fn: Callable[[], Any], node: str
) -> bool:
    """Actor side (through ``__ray_call__``): connect and serve on a thread.

    Returns False (and opens nothing) when the actor is not on the server's
    ``node``, or when the server stopped listening: an actor busy with a long
    batch can take this call after the server's wait (``OPEN_TIMEOUT_S``)
    ran out and its socket was removed; the server then keeps Ray's calls.
    True once connected and the serving thread started.
    """
    import ray

    if ray.get_runtime_context().get_node_id() != node:
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _widen_buffers(sock)
    try:
        sock.connect(address)
        sock.sendall(token)
    except OSError:  # the server gave up on this channel (see above)
        sock.close()
        return False
    thread = threading.Thread(
        target=_serve, args=(actor, sock, app_fn), name="fedleak-channel", daemon=True
    )
    thread.start()
    return True


def _serve(actor: Any, sock: socket.socket, app_fn: Callable[[], Any]) -> None:
    """Take the shared areas, then serve batches until the stream ends."""
    with sock:
        try:
            areas = _take_areas(sock)
        except OSError:  # ChannelBroken is one
            return
        try:
            _serve_batches(actor, sock, app_fn, areas)
        finally:
            for area in areas or ():
                area.close()


def _serve_batches(
    actor: Any,
    sock: socket.socket,
    app_fn: Callable[[], Any],
    areas: tuple[SharedArea, SharedArea] | None,
) -> None:
    """Run each batch received with ``run_jobs`` and reply (the actor's thread)."""
    requests, replies = areas if areas is not None else (None, None)
    while True:
        try:
            _, parts, first = receive_frame(sock, requests)
        except OSError:  # the stream ended (ChannelBroken) or failed
            return
        try:
            frame = (_OK, *_parts(run_jobs(actor, app_fn, _batch(parts, first))))
        except Exception as ex:  # the batch itself is unusable here
            frame = (_FAILED, [repr(ex).encode()], 1)
        try:
            send_frame(sock, *frame, replies)
        except OSError:
            return


def open_channel(
    actor: Any, app_fn: Callable[[], Any], timeout: float = OPEN_TIMEOUT_S
) -> ActorChannel | None:
    """Open a channel to ``actor``; None where it keeps Ray's calls.

    None when the actor is on another node, or (with a warning in Flower's
    log) did not connect and prove itself within ``timeout`` seconds; the
    socket's file is removed once connected (or given up).
    """
    import ray

    node = ray.get_runtime_context().get_node_id()
    folder = tempfile.mkdtemp(prefix="fedleak-channel-")
    address = os.path.join(folder, "s")
    token = secrets.token_bytes(_TOKEN_BYTES)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address)
        listener.listen(1)
        listener.settimeout(timeout)
        ref = actor.__ray_call__.remote(serve_in_actor, address, token, app_fn, node)
        if not ray.get(ref, timeout=timeout):
            return None  # another node: Ray's calls, as intended
        sock, _ = listener.accept()
    except (OSError, ray.exceptions.RayError) as ex:
        _give_up(f"it did not connect ({ex!r})")
        return None
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
    _widen_buffers(sock)
    try:
        sock.settimeout(timeout)
        proof = bytes(recv_exact(sock, _TOKEN_BYTES))
        sock.settimeout(None)
    except OSError as ex:  # ChannelBroken is one
        sock.close()
        _give_up(f"it sent no token ({ex!r})")
        return None
    if not hmac.compare_digest(proof, token):
        sock.close()
        _give_up("it sent a wrong token")
        return None
    try:
        return ActorChannel.over(sock)
    except OSError as ex:
        sock.close()
        _give_up(f"its shared memory could not be handed over ({ex!r})")
        return None


def _give_up(reason: str) -> None:
    _LOG.warning("fedleak: no channel to a Ray actor, %s; it keeps Ray's calls", reason)


class ChannelSet:
    """The channels of one backend's actors, opened on first use.

    Parameters
    ----------
    opener : callable, default=open_channel
        ``opener(actor, app_fn)`` returns a channel or None (Ray's calls).
    """

    def __init__(
        self,
        opener: Callable[[Any, Callable[[], Any]], ActorChannel | None] = open_channel,
    ) -> None:
        self.opener = opener
        self._channels: dict[Any, ActorChannel | None] = {}
        self._lock = threading.Lock()
        self._users = 0
        self._closed = False

    def channel(self, actor: Any, app_fn: Callable[[], Any]) -> ActorChannel | None:
        """Return ``actor``'s channel, opening it on first use; None: Ray's calls.

        A broken channel is not reopened: its actor keeps Ray's calls.
        """
        key = _key(actor)
        with self._lock:
            if self._closed:
                return None
            if key in self._channels:
                channel = self._channels[key]
                return None if channel is None or channel.broken else channel
        channel = self.opener(actor, app_fn)
        with self._lock:
            if self._closed:  # closed while opening
                if channel is not None:
                    channel.close()
                return None
            self._channels[key] = channel
        return channel

    def enter(self) -> None:
        """Count a worker that uses these channels."""
        with self._lock:
            self._users += 1

    def leave(self) -> None:
        """Uncount a worker; the last one out closes every channel."""
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.close()

    def close(self) -> None:
        """Close every channel; later calls use Ray's."""
        with self._lock:
            self._closed = True
            channels = [c for c in self._channels.values() if c is not None]
            self._channels.clear()
        for channel in channels:
            channel.close()

    @property
    def opened(self) -> int:
        """How many actors have a working channel."""
        with self._lock:
            return sum(
                1 for c in self._channels.values() if c is not None and not c.broken
            )


def _key(actor: Any) -> Any:
    """Return a key per actor: Ray's actor id where there is one, else the object."""
    actor_id = getattr(actor, "_actor_id", None)
    return actor if actor_id is None else actor_id


def _channel_set(backend: Any) -> ChannelSet:
    channels = ChannelSet()
    weakref.finalize(backend, channels.close)
    return channels


_SETS = PerBackend(_channel_set)


def channels_of(backend: Any) -> ChannelSet:
    """Return the :class:`ChannelSet` the workers of ``backend`` share."""
    return _SETS(backend)
