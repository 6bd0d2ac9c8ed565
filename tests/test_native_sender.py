"""The client's C++ send path (st_py._native.Sender, st_core/python/native.cc)
against the Python reference encoder (st_py/wire/protocol.py), over real sockets.

Properties:
  - any sequence of queued PUTs and frame parts (small bodies copied, large
    ones referenced), flushed into a socket that takes a little at a time, is
    received byte for byte as the Python encoder writes it, in order;
  - out_bytes counts what is queued and not yet sent, and a failed flush
    raises OSError (a closed peer is EPIPE, not a SIGPIPE that kills the
    client); clear() drops what is queued;
  - a body changed after it was queued is sent as queued when small (copied)
    and the caller's buffer is not held once sent;
  - the Python send path (no extension) stores the same records through a
    real cluster.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_py.wire import protocol as P
from st_py.wire import transport

native = pytest.importorskip("st_py._native")

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], max_examples=40)


def drain(sock: socket.socket, n: int, out: bytearray) -> threading.Thread:
    """Read ``n`` bytes from ``sock`` into ``out`` in a thread, a few KiB at a time."""

    def run():
        while len(out) < n:
            chunk = sock.recv(4096)
            if not chunk:
                return
            out.extend(chunk)

    th = threading.Thread(target=run)
    th.start()
    return th


def flush_all(sender, sock: socket.socket) -> int:
    """Flush until nothing is queued; returns the number of flush calls that sent bytes."""
    calls = 0
    while not sender.empty:
        sock.settimeout(5)
        if sender.flush():
            calls += 1
        else:
            import select

            select.select([], [sock], [], 5)
    return calls


@pytest.fixture
def pair():
    """(reading end, non-blocking writing end, a Sender on the writing end)."""
    a, b = socket.socketpair()
    b.setblocking(False)
    yield a, b, native.Sender(b.fileno())
    a.close()
    b.close()


def sent_through(sender, a: socket.socket, b: socket.socket) -> bytes:
    """Flush everything ``sender`` holds into ``b``; the bytes that reach ``a``."""
    got = bytearray()
    th = drain(a, sender.out_bytes, got)
    flush_all(sender, b)
    th.join(10)
    return bytes(got)


op = st.one_of(
    st.tuples(
        st.just("put"),
        st.integers(0, 2**64 - 1),
        st.integers(0, 2),
        st.binary(min_size=1, max_size=40),
        st.sampled_from([0, 1, 100, 4096, 16 * 1024, 16 * 1024 + 1, 200_000]),
        st.sampled_from([0, P.FLAG_REPLACE]),
    ),
    st.tuples(st.just("part"), st.sampled_from([1, 17, 16 * 1024 + 5, 70_000]), st.sampled_from(["bytes", "view"])),
)


@settings(**SETTINGS)
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_queued_frames_arrive_as_the_python_encoder_writes_them(ops):
    a, b = socket.socketpair()
    b.setblocking(False)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # partial sends, many flushes
    sender = native.Sender(b.fileno())
    want = bytearray()
    for seq, o in enumerate(ops, 1):
        if o[0] == "put":
            _, file_id, rank, name, size, flags = o
            data = bytes([seq % 251]) * size
            crc = P.crc32c(data)
            sender.put(seq, file_id, rank, crc, name, data, flags)
            want += P.put_prefix(seq, file_id, rank, crc, name, size, flags) + data
        else:
            _, size, kind = o
            part = bytes([seq % 7]) * size
            sender.queue(memoryview(bytearray(part)) if kind == "view" else part)
            want += part
    assert sender.out_bytes == len(want)
    got = sent_through(sender, a, b)
    assert sender.out_bytes == 0 and sender.empty
    assert got == bytes(want)
    a.close()
    b.close()


def test_a_put_frame_decodes_to_its_fields():
    a, b = socket.socketpair()
    sender = native.Sender(b.fileno())
    data = b"x" * 5000
    sender.put(7, 0xABCDEF, 1, P.crc32c(data), "rëcord".encode(), data, P.FLAG_REPLACE)
    frame_size = len(P.put_prefix(7, 0xABCDEF, 1, 0, "rëcord".encode(), 5000)) + 5000
    assert sender.out_bytes == frame_size
    assert sender.flush() == frame_size
    dec = P.FrameDecoder(P.DEFAULT_MAX_FRAME)
    a.settimeout(5)
    frames = []
    while not frames:
        frames = dec.feed(a.recv(65536))
    (fr,) = frames
    assert (fr.type, fr.seq, fr.flags) == (P.MsgType.PUT, 7, P.FLAG_REPLACE)
    assert fr.fields == {
        "file_id": 0xABCDEF,
        "copy_rank": 1,
        "crc32c": P.crc32c(data),
        "name": "rëcord".encode(),
        "data": data,
    }
    a.close()
    b.close()


def test_a_small_body_is_copied_and_a_large_one_released_once_sent(pair):
    a, b, sender = pair
    small = bytearray(b"s" * 100)
    sender.put(1, 1, 0, 0, b"n", small)
    small[:] = b"t" * 100  # changed after queueing: the copy is sent
    large = bytearray(b"L" * 100_000)
    sender.queue(large)
    with pytest.raises(BufferError):  # referenced, not copied: it cannot be resized meanwhile
        large.append(0)
    assert sent_through(sender, a, b).endswith(b"s" * 100 + b"L" * 100_000)
    large.append(0)  # released once sent

    body = bytes(100_000)
    refs = sys.getrefcount(body)
    sender.queue(body)
    assert sys.getrefcount(body) == refs + 1  # held while queued
    assert len(sent_through(sender, a, b)) == 100_000
    assert sys.getrefcount(body) == refs  # and let go once sent


def test_a_closed_peer_is_an_oserror_and_clear_drops_the_queue(pair):
    a, b, sender = pair
    a.close()
    sender.put(1, 1, 0, 0, b"n", b"data")
    with pytest.raises(BrokenPipeError):  # MSG_NOSIGNAL: an error, not SIGPIPE
        sender.flush()
    assert sender.out_bytes > 0
    sender.queue(b"x" * 100_000)
    sender.clear()
    assert sender.out_bytes == 0 and sender.empty


def test_a_name_longer_than_a_str16_is_refused():
    a, b = socket.socketpair()
    sender = native.Sender(b.fileno())
    with pytest.raises(ValueError, match="str16"):
        sender.put(1, 1, 0, 0, b"n" * 70_000, b"data")
    assert sender.empty
    a.close()
    b.close()


def test_the_python_send_path_stores_the_same_records(cluster, monkeypatch):
    """Without the extension (ST_NATIVE=0) a connection frames PUTs in Python."""
    monkeypatch.setattr(transport, "_native", None)
    c = cluster.client()
    bodies = {f"r{i}": bytes([i]) * n for i, n in enumerate([0, 1, 4096, 20_000, 300_000])}
    with c.create("/t/pysend", replication="x2") as f:
        assert all(conn._sender is None for conn in f._transport.conns.values())
        for name, body in bodies.items():
            f.queue_put(name, body)
    monkeypatch.undo()
    with c.open("/t/pysend") as f:
        assert {n: f.get(n) for n in bodies} == bodies


def test_a_second_thread_is_refused_while_a_flush_waits_on_the_socket():
    """Flush releases the GIL in sendmsg: another thread calling in then gets
    a RuntimeError, not a race on the queued buffers."""
    a, b = socket.socketpair()  # b stays blocking: flush waits until a reads
    sender = native.Sender(b.fileno())
    sender.queue(bytes(4 * 2**20))
    sent: list[int] = []
    th = threading.Thread(target=lambda: sent.append(sender.flush()))
    th.start()
    time.sleep(0.3)  # the flush is blocked in sendmsg: nothing reads a yet
    with pytest.raises(RuntimeError, match="two threads"):
        sender.put(1, 1, 0, 0, b"n", b"data")
    got = bytearray()
    drain(a, 4 * 2**20, got).join(10)
    th.join(10)
    assert sent == [4 * 2**20] and len(got) == 4 * 2**20
    sender.put(1, 1, 0, 0, b"n", b"data")  # free again
    assert not sender.empty
    a.close()
    b.close()
