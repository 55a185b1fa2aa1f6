"""Frames of byte strings over a socket, inline or through shared memory."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading

import pytest

from fedleak.runtime import channel_frames
from fedleak.runtime.channel_frames import (
    ChannelBroken,
    SharedArea,
    receive_frame,
    send_frame,
)

needs_shared = pytest.mark.skipif(
    not channel_frames.shared_areas_supported(), reason="memfd_create and fd passing"
)
PARTS = [b"item one", b"", b"item three", bytes(range(256)) * 1000, b"\x00" * 70_000]


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.settimeout(5.0)
    b.settimeout(5.0)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def area_pair():
    """One area seen from two ends: the writer's and the reader's own descriptor."""
    writer = SharedArea.create()
    reader = SharedArea(os.dup(writer.fd))
    yield writer, reader
    writer.close()
    reader.close()


def _roundtrip(pair, parts, first, writer=None, reader=None):
    a, b = pair
    thread = threading.Thread(target=send_frame, args=(a, 7, parts, first, writer))
    thread.start()  # a large inline frame needs the reader to drain the socket
    got = receive_frame(b, reader)
    thread.join()
    return got


def test_an_inline_frame_carries_its_parts_status_and_first(pair):
    status, parts, first = _roundtrip(pair, PARTS, 2)
    assert (status, first) == (7, 2)
    assert parts == PARTS
    assert all(type(p) is bytes for p in parts)  # the receiver's own strings


def test_an_empty_frame_and_more_parts_than_one_sendmsg_takes(pair):
    assert _roundtrip(pair, [], 0) == (7, [], 0)
    many = [bytes([k % 256]) * (k % 5) for k in range(1500)]  # > IOV_MAX buffers
    assert _roundtrip(pair, many, 1500)[1] == many


def test_a_large_inline_frame_arrives_whole(pair):
    big = [os.urandom(3_000_000), os.urandom(5_000_000)]
    assert _roundtrip(pair, big, 1)[1] == big


@needs_shared
def test_a_shared_frame_sends_only_its_header_and_table(pair, area_pair):
    writer, reader = area_pair
    a, b = pair
    send_frame(a, 3, PARTS, 1, writer)
    b.setblocking(False)
    header = b.recv(1 << 20)
    assert len(header) == channel_frames._HEADER.size + 8 * len(PARTS)
    b.setblocking(True)
    b.settimeout(5.0)
    a.sendall(header)  # the same header again, read as a frame by the other end
    status, parts, first = receive_frame(b, reader)
    assert (status, parts, first) == (3, PARTS, 1)


@needs_shared
def test_shared_frames_grow_the_area_and_the_reader_follows(pair, area_pair):
    writer, reader = area_pair
    small = [b"a" * 10]
    assert _roundtrip(pair, small, 1, writer, reader)[1] == small
    assert writer.size == channel_frames._MIN_AREA_BYTES
    big = [os.urandom(3_000_000), b"tail"]
    assert _roundtrip(pair, big, 1, writer, reader)[1] == big
    assert writer.size == reader.size == 3_000_004
    again = [b"b" * 20]  # smaller frames reuse the grown area
    assert _roundtrip(pair, again, 1, writer, reader)[1] == again
    assert writer.size == 3_000_004


@needs_shared
def test_the_area_doubles_up_to_its_cap(pair, area_pair, monkeypatch):
    writer, reader = area_pair
    monkeypatch.setattr(channel_frames, "SHARED_MAX_BYTES", 3 * 1024 * 1024)
    _roundtrip(pair, [b"w" * 10], 1, writer, reader)
    assert writer.size == 1024 * 1024  # the smallest area
    _roundtrip(pair, [b"x" * (1024 * 1024 + 1)], 1, writer, reader)
    assert writer.size == 2 * 1024 * 1024  # doubled, not grown to the byte
    _roundtrip(pair, [b"y" * (2 * 1024 * 1024 + 1)], 1, writer, reader)
    assert writer.size == 3 * 1024 * 1024  # doubling stops at the cap


@needs_shared
def test_a_frame_above_the_cap_goes_inline_and_leaves_the_area_alone(
    pair, area_pair, monkeypatch
):
    writer, reader = area_pair
    monkeypatch.setattr(channel_frames, "SHARED_MAX_BYTES", 1000)
    parts = [b"z" * 1001]
    assert _roundtrip(pair, parts, 1, writer, reader)[1] == parts
    assert writer.size == 0
    at_cap = [b"y" * 1000]  # a frame of exactly the cap still goes shared
    assert _roundtrip(pair, at_cap, 1, writer, reader)[1] == at_cap
    assert writer.size == 1000


@needs_shared
def test_a_received_frame_is_a_copy_the_next_write_cannot_change(pair, area_pair):
    writer, reader = area_pair
    first = _roundtrip(pair, [b"before" * 100], 1, writer, reader)[1]
    _roundtrip(pair, [b"AFTER!" * 100], 1, writer, reader)
    assert first == [b"before" * 100]


def test_a_stream_that_is_not_frames_breaks(pair):
    a, b = pair
    a.sendall(b"\x80\x05not a frame header at all")
    with pytest.raises(ChannelBroken, match=r"^the channel's stream is not a frame$"):
        receive_frame(b)


@pytest.mark.parametrize(
    ("carrier", "first", "count"), [(2, 0, 0), (0, 2, 1)], ids=["carrier", "first"]
)
def test_a_header_out_of_range_breaks(pair, carrier, first, count):
    a, b = pair
    a.sendall(
        channel_frames._HEADER.pack(channel_frames._MAGIC, carrier, 0, first, count, 0)
    )
    with pytest.raises(ChannelBroken, match="not a frame"):
        receive_frame(b)


def test_a_table_that_does_not_add_up_breaks(pair):
    a, b = pair
    a.sendall(channel_frames._HEADER.pack(channel_frames._MAGIC, 0, 0, 1, 1, 10))
    a.sendall(struct.pack("!Q", 9))
    with pytest.raises(
        ChannelBroken, match=r"^a frame's table does not add up to its size$"
    ):
        receive_frame(b)


def test_a_shared_frame_on_a_channel_without_an_area_breaks(pair):
    a, b = pair
    a.sendall(channel_frames._HEADER.pack(channel_frames._MAGIC, 1, 0, 0, 0, 0))
    with pytest.raises(
        ChannelBroken, match=r"^a frame in shared memory on a channel without it$"
    ):
        receive_frame(b)


@needs_shared
def test_a_shared_frame_larger_than_the_area_breaks(pair, area_pair):
    _, reader = area_pair
    a, b = pair
    a.sendall(channel_frames._HEADER.pack(channel_frames._MAGIC, 1, 0, 1, 1, 50))
    a.sendall(struct.pack("!Q", 50))
    with pytest.raises(
        ChannelBroken, match="a frame of 50 bytes in a shared area of 0"
    ):
        receive_frame(b, reader)


@pytest.mark.parametrize("cut", [3, 20, 30])  # in the header, the table, the data
def test_a_stream_cut_inside_a_frame_breaks(pair, cut):
    a, b = pair
    whole = channel_frames._HEADER.pack(channel_frames._MAGIC, 0, 0, 1, 1, 10)
    whole += struct.pack("!Q", 10) + b"0123456789"
    a.sendall(whole[:cut])
    a.close()
    with pytest.raises(ChannelBroken, match=r"^the channel's other end closed it$"):
        receive_frame(b)


@needs_shared
def test_a_shared_frame_of_empty_parts_needs_no_mapping(pair, area_pair):
    writer, reader = area_pair
    assert _roundtrip(pair, [b"", b""], 2, writer, reader)[1] == [b"", b""]
    assert writer.size == reader.size == 0


@needs_shared
def test_a_frame_that_fills_the_area_exactly_does_not_grow_it(pair, area_pair):
    writer, reader = area_pair
    _roundtrip(pair, [b"a"], 1, writer, reader)
    whole = [b"b" * (channel_frames._MIN_AREA_BYTES - 1), b"c"]
    assert _roundtrip(pair, whole, 1, writer, reader)[1] == whole
    assert writer.size == reader.size == channel_frames._MIN_AREA_BYTES


@pytest.mark.skipif(sys.platform != "linux", reason="Linux has both")
def test_linux_has_shared_areas_and_they_name_themselves():
    assert channel_frames.shared_areas_supported()
    area = SharedArea.create()
    try:
        assert os.readlink(f"/proc/self/fd/{area.fd}").startswith(
            "/memfd:fedleak-channel"
        )
    finally:
        area.close()


@pytest.mark.parametrize(
    ("module", "name"), [(os, "memfd_create"), (socket, "send_fds")]
)
def test_without_memfd_or_descriptor_passing_frames_go_inline(
    module, name, monkeypatch
):
    monkeypatch.delattr(module, name, raising=False)
    assert not channel_frames.shared_areas_supported()


@needs_shared
def test_closing_an_area_twice_is_harmless():
    area = SharedArea.create()
    area.write([b"x"])
    area.close()
    area.close()
    assert area.fd == -1 and area.size == 0
