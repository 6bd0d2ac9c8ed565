"""The client's C++ receive path (st_py._native, st_core/python/native.cc)
against the Python reference decoder (st_py/wire/protocol.py), over real sockets.

Properties:
  - any stream of reply frames (small and large DATA, OK, ERROR, LOCAL_LIST),
    written in arbitrary pieces, is received as the same frames the Python
    decoder gives for the whole stream, and a DATA frame's received CRC-32C is
    the CRC of its data (a corrupted body is reported, not hidden);
  - arbitrary frame-shaped bytes give the same frames or the same refusal
    (ValueError here, ProtocolError through the transport);
  - frames that arrived before the peer closed the connection are delivered
    before the ConnectionResetError;
  - an oversized length prefix is refused before a body buffer is allocated.
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_py.wire import protocol as P
from st_py.wire import transport

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)


def test_native_module_is_built():
    """CI builds the extension; a silent fallback to Python would hide a broken build."""
    if os.environ.get("ST_NATIVE") == "0":
        pytest.skip("ST_NATIVE=0 selects the Python receive path")
    assert transport.NATIVE, "st_py._native did not import: rebuild with ./dev setup"


native = pytest.importorskip("st_py._native")


def receive_all(
    stream: bytes, cuts: list[int], max_frame: int = P.DEFAULT_MAX_FRAME, close: bool = True, oks: list | None = None
):
    """Send ``stream`` cut at ``cuts`` through a socketpair from a thread and
    receive it with the native Receiver until the peer closes. Returns
    (tuples, error) where error is the exception that ended the stream.
    With ``oks`` a list, receive(oks) appends the final empty OKs' seqs to it."""
    a, b = socket.socketpair()
    b.setblocking(False)
    points = sorted({c % (len(stream) + 1) for c in cuts}) + [len(stream)]

    def send():
        prev = 0
        for p in points:
            if p > prev:
                a.sendall(stream[prev:p])
            prev = p
        if close:
            a.close()

    th = threading.Thread(target=send)
    th.start()
    r = native.Receiver(b.fileno(), max_frame)
    got, err = [], None
    sel = selectors.DefaultSelector()
    sel.register(b, selectors.EVENT_READ)
    try:
        while True:
            if not sel.select(5):
                err = TimeoutError("nothing more arrived")
                break
            try:
                got += r.receive(oks) if oks is not None else r.receive()
            except (ConnectionResetError, ValueError) as e:
                err = e
                break
    finally:
        th.join()
        sel.close()
        b.close()
        if not close:
            a.close()
    return got, err, r


def as_frames(tuples) -> list[P.Frame]:
    out = []
    for t, flags, seq, payload, info in tuples:
        if info is None:
            fields = P.decode_payload(t, flags, memoryview(payload))
        else:
            crc, rank, actual = info
            assert actual == P.crc32c(payload)
            fields = {"crc32c": crc, "copy_rank": rank, "data": payload}
        out.append(P.Frame(t, seq, flags, fields))
    return out


@st.composite
def reply_frames(draw) -> list[bytes]:
    frames = []
    for seq in range(1, draw(st.integers(1, 6)) + 1):
        kind = draw(st.sampled_from(["data", "big", "ok", "error", "list"]))
        if kind in ("data", "big"):
            n = draw(st.integers(0, 300)) if kind == "data" else draw(st.integers(256 * 1024 - 40, 300 * 1024))
            body = draw(st.binary(min_size=min(n, 64), max_size=min(n, 64))) * (n // 64 or 1)
            body = body[:n]
            crc = P.crc32c(body) ^ draw(st.sampled_from([0, 0, 1]))  # sometimes a wrong CRC
            frames.append(P.encode_data(seq, crc, draw(st.integers(0, 2)), body))
        elif kind == "ok":
            frames.append(P.encode_ok(seq, draw(st.binary(max_size=50))))
        elif kind == "error":
            frames.append(P.encode_error(seq, draw(st.integers(1, 17)), draw(st.text(max_size=40))))
        else:
            entries = [
                (
                    draw(st.integers(0, 2)),
                    draw(st.integers(0, 2**40)),
                    draw(st.binary(max_size=20)),
                    draw(st.binary(max_size=30)),
                )
                for _ in range(draw(st.integers(0, 4)))
            ]
            frames.append(P.encode_local_list(seq, entries))
    return frames


@settings(**SETTINGS)
@given(frames=reply_frames(), cuts=st.lists(st.integers(0, 10**7), max_size=8))
def test_native_receives_what_python_decodes(frames, cuts):
    stream = b"".join(frames)
    got, err, r = receive_all(stream, cuts)
    assert isinstance(err, ConnectionResetError) and "closed by peer" in str(err)
    assert as_frames(got) == P.FrameDecoder().feed(stream)
    assert r.buffered == 0


@settings(**SETTINGS)
@given(
    frames=reply_frames(), more=st.lists(st.booleans(), max_size=6), cuts=st.lists(st.integers(0, 10**7), max_size=8)
)
def test_empty_final_oks_come_back_as_their_seqs_and_the_rest_as_frames(frames, more, cuts):
    """``receive(oks)`` (a write's acknowledgements without a tuple each):
    the seqs of the OK replies with an empty payload and no MORE flag are
    appended to ``oks``, in order; every other frame (an OK with a payload
    or MORE, DATA, ERROR, lists) comes back as a frame, as ``receive()``
    gives it."""
    frames = frames + [P.frame(P.MsgType.OK, 100 + i, b"", P.FLAG_MORE if m else 0) for i, m in enumerate(more)]
    stream = b"".join(frames)
    oks: list[int] = []
    got, err, _ = receive_all(stream, cuts, oks=oks)
    assert isinstance(err, ConnectionResetError)
    want = P.FrameDecoder().feed(stream)
    acks = [f.type == P.MsgType.OK and not f.flags & P.FLAG_MORE and not f.fields["payload"] for f in want]
    assert oks == [f.seq for f, ack in zip(want, acks) if ack]
    assert as_frames(got) == [f for f, ack in zip(want, acks) if not ack]


def test_oks_before_the_close_are_delivered_first():
    """Acknowledgements read with the peer's close come out before the
    ConnectionResetError, as frames do: the writes they acknowledge are
    stored, and failing them would store them again elsewhere."""
    a, b = socket.socketpair()
    a.sendall(P.encode_ok(1) + P.encode_ok(2))
    a.close()  # the close is there when the receiver reads: one receive() sees both
    b.setblocking(False)
    try:
        r = native.Receiver(b.fileno(), P.DEFAULT_MAX_FRAME)
        oks: list[int] = []
        assert r.receive(oks) == [] and oks == [1, 2]
        with pytest.raises(ConnectionResetError):
            r.receive(oks)
        assert oks == [1, 2]
    finally:
        b.close()


def test_corrupted_large_body_is_reported_by_its_crc():
    body = os.urandom(1 << 20)
    frame = bytearray(P.encode_data(7, P.crc32c(body), 1, body))
    frame[-1000] ^= 0xFF  # a bit flip in flight
    got, err, _ = receive_all(bytes(frame), [P.HEADER_SIZE + 3, 70_000])
    ((t, flags, seq, data, (crc, rank, actual)),) = got
    assert (t, seq, rank, crc) == (P.MsgType.DATA, 7, 1, P.crc32c(body))
    assert actual == P.crc32c(data) != crc


@settings(**SETTINGS)
@given(
    data=st.lists(
        st.tuples(
            st.binary(max_size=60),
            st.sampled_from([int(m) for m in P.MsgType] + [0x33]),
            st.sampled_from([1, 1, 2]),
            st.one_of(st.none(), st.integers(0, 2**32 - 1)),
        ),
        min_size=1,
        max_size=4,
    ),
    max_frame=st.sampled_from([P.DEFAULT_MAX_FRAME, 300]),
    cuts=st.lists(st.integers(0, 10**6), max_size=4),
)
def test_hostile_bytes_same_frames_or_same_refusal(data, max_frame, cuts):
    stream = b"".join(struct.pack("<IBBHQ", 12 + len(b) if ln is None else ln, t, v, 0, 1) + b for b, t, v, ln in data)
    try:
        want = ("ok", P.FrameDecoder(max_frame).feed(stream))
    except P.ProtocolError:
        want = ("error",)
    got, err, _ = receive_all(stream, cuts, max_frame)
    if isinstance(err, ValueError):
        assert want == ("error",), err
        return
    try:
        frames = as_frames(got)
    except P.ProtocolError:  # the payload grammar is checked in Python, as in the transport
        assert want == ("error",)
        return
    assert want[0] == "ok"
    # The Python decoder stops at an incomplete frame; so does the receiver (it saw the close).
    assert frames == want[1]


def test_frames_before_the_close_are_delivered_first():
    stream = P.encode_ok(1) + P.encode_error(0, P.ErrorCode.BUSY, "at the connection limit")
    got, err, _ = receive_all(stream, [])
    assert [g[2] for g in got] == [1, 0]
    assert isinstance(err, ConnectionResetError)


def test_oversized_length_is_refused_without_allocating():
    got, err, r = receive_all(struct.pack("<IBBHQ", 2**31, P.MsgType.DATA, 1, 0, 5), [], max_frame=1 << 20, close=False)
    assert isinstance(err, ValueError) and "outside [12, 1048576]" in str(err)
    assert got == [] and r.buffered <= 16


def test_frames_of_the_last_read_are_delivered_when_the_socket_goes_quiet():
    """The receiver returns after ``max_read`` bytes to let other sockets have
    a turn; the frames of that last read must come out then, not at the next
    readable event, which never comes when the socket has nothing more (the
    fault-injection suite found this: replies stuck until the 10 s timeout)."""
    frames = [P.encode_ok(i, b"x" * 10_000) for i in range(1, 11)]  # 100 KB: fits the socket buffer
    a, b = socket.socketpair()
    a.sendall(b"".join(frames))
    b.setblocking(False)
    r = native.Receiver(b.fileno(), P.DEFAULT_MAX_FRAME, max_read=30_000)
    got = r.receive()  # one recv of everything, past max_read
    a.close()
    b.close()
    assert [g[2] for g in got] == list(range(1, 11))


@settings(**SETTINGS)
@given(
    entries=st.lists(
        st.tuples(st.integers(0, 255), st.integers(0, 2**64 - 1), st.binary(max_size=40), st.binary(max_size=60)),
        max_size=30,
    ),
    cut=st.integers(0, 200),
)
def test_native_local_list_decode_equals_the_reference(entries, cut):
    """A GET_LOCAL plan's entries decoded by column in C++ are the Python
    decoder's (names and paths as UTF-8 with surrogateescape); a payload
    cut short or with bytes after it is refused."""
    payload = P.encode_local_list(1, entries)[P.HEADER_SIZE :]
    got = P.decode_local_list_native(native, payload)["entries"]
    want = P.LocalEntries.of(P.decode_payload(P.MsgType.LOCAL_LIST, 0, memoryview(payload))["entries"])
    assert (got.ranks, got.sizes, got.names, got.paths) == (want.ranks, want.sizes, want.names, want.paths)
    if cut < len(payload):
        with pytest.raises(P.ProtocolError):
            P.decode_local_list_native(native, payload[:cut])
    with pytest.raises(P.ProtocolError):
        P.decode_local_list_native(native, payload + b"x")
