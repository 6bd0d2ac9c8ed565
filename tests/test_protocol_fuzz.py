"""Property-based fuzzing of the Python wire decoder (st_py/wire/protocol.py) with
hypothesis; the C++ peer's decoder is fuzzed by the libFuzzer targets of
st_core/fuzz/ (docs/security.md, "Fuzzing").

Properties:
  - arbitrary bytes, fed in arbitrary pieces the way the transport feeds them
    (``feed`` from a reused receive buffer, ``big_view``/``big_filled`` for
    large frames), never raise anything but ``ProtocolError``, and decode to
    the same frames (or the same refusal) as when fed whole;
  - every payload decoder refuses arbitrary bytes with ``ProtocolError`` only;
  - encode -> decode round-trips for every message type with generated fields;
  - a stream of frames split at every byte boundary decodes as it does whole;
  - a length prefix above ``max_frame`` (or below 12) is refused before any
    buffer for the body is allocated.

Bounded (``max_examples``) so the file runs in a few seconds; no example
database is written (a failure prints its falsifying example).
"""

from __future__ import annotations

import struct
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_py.wire import protocol as P

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)
names = st.binary(min_size=0, max_size=300)
texts = st.text(max_size=60)


# ---- Feeding the decoder as st_py/wire/transport.py does --------------------------------


def feed_like_transport(chunks: list[bytes], max_frame: int) -> tuple[list[P.Frame], P.FrameDecoder]:
    """Feed ``chunks`` as ``Connection.on_readable`` would: small reads land
    in one reused receive buffer (scribbled over after each feed, so a frame
    that kept a reference to it would change), large frames are received
    straight into ``big_view()``. Raises what the decoder raises."""
    d = P.FrameDecoder(max_frame)
    rbuf = bytearray(max((len(c) for c in chunks), default=0) or 1)
    frames: list[P.Frame] = []
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            view = d.big_view()
            if view is not None:
                n = min(len(view), len(chunk) - pos)
                view[:n] = chunk[pos : pos + n]
                view.release()
                frames += d.big_filled(n)
                pos += n
                continue
            n = len(chunk) - pos
            rbuf[:n] = chunk[pos:]
            rview = memoryview(rbuf)
            try:
                frames += d.feed(rview[:n])
            finally:
                rview.release()
            rbuf[:] = b"\xa5" * len(rbuf)
            pos += n
    return frames, d


def decode_or_error(chunks: list[bytes], max_frame: int):
    """("ok", frames, buffered) or ("error",), and nothing else escapes."""
    try:
        frames, d = feed_like_transport(chunks, max_frame)
    except P.ProtocolError:
        return ("error",)
    return ("ok", frames, d.buffered)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return [c for c in out if c]


# ---- Arbitrary bytes ------------------------------------------------------------------


# Bytes that are often frame-shaped: a valid header in front of random bytes.
@st.composite
def frame_shaped(draw) -> bytes:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        body = draw(st.binary(max_size=80))
        t = draw(st.sampled_from([int(m) for m in P.MsgType] + [0x00, 0x33]))
        length = draw(
            st.one_of(
                st.just(12 + len(body)),
                u32,
                # large frames: received into their own buffer
                st.integers(P.FrameDecoder.BIG - 4, P.FrameDecoder.BIG + 64),
            )
        )
        version = draw(st.sampled_from([1, 1, 1, 0, 2]))
        parts.append(struct.pack("<IBBHQ", length, t, version, draw(u16), draw(u64)) + body)
    return b"".join(parts)


max_frames = st.sampled_from([P.DEFAULT_MAX_FRAME, 64, 300])


@settings(max_examples=400, **SETTINGS)
@given(
    data=st.one_of(st.binary(max_size=600), frame_shaped()),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    max_frame=max_frames,
)
def test_arbitrary_bytes_raise_only_protocol_error(data, cuts, max_frame):
    whole = decode_or_error([data], max_frame)
    pieces = decode_or_error(split(data, cuts), max_frame)
    if whole[0] == "error":
        assert pieces[0] == "error"
    else:
        assert pieces == whole


@settings(max_examples=300, **SETTINGS)
@given(t=st.sampled_from([int(m) for m in P.MsgType] + [0x00, 0x42]), flags=u16, payload=st.binary(max_size=200))
def test_payload_decoders_raise_only_protocol_error(t, flags, payload):
    try:
        fields = P.decode_payload(t, flags, memoryview(payload))
    except P.ProtocolError:
        return
    assert t in set(P.MsgType)
    assert isinstance(fields, dict)
    try:
        counts = P.decode_scrub_reply(payload)
    except P.ProtocolError:
        assert len(payload) != P.SCRUB_REPLY.size
    else:
        assert len(payload) == P.SCRUB_REPLY.size and set(counts) == set(P.SCRUB_REPLY_FIELDS)


# ---- Round trips ----------------------------------------------------------------------

peers = st.lists(st.text(max_size=25), max_size=5)
entries = st.lists(st.tuples(u8, names), max_size=6)
list_entries = st.lists(st.tuples(u8, u64, names, names), max_size=5)


@st.composite
def messages(draw):
    """(frame bytes, expected type, flags, expected fields) for one message."""
    seq = draw(u64)
    kind = draw(
        st.sampled_from(
            [
                "put",
                "get",
                "delete",
                "delete_file",
                "get_local",
                "ping",
                "scrub",
                "auth",
                "ring_segment",
                "ok",
                "ok_scrub",
                "data",
                "local_list",
                "error",
            ]
        )
    )
    if kind == "put":
        fid, rank, name, data, flags = draw(u64), draw(u8), draw(names), draw(names), draw(u16)
        crc = draw(st.one_of(st.none(), u32))
        f = P.encode_put(seq, fid, rank, name, data, crc=crc, flags=flags)
        want = {
            "file_id": fid,
            "copy_rank": rank,
            "name": name,
            "data": data,
            "crc32c": P.crc32c(data) if crc is None else crc,
        }
        return f, P.MsgType.PUT, seq, flags, want
    if kind in ("get", "delete"):
        fid, name = draw(u64), draw(names)
        enc = P.encode_get if kind == "get" else P.encode_delete
        t = P.MsgType.GET if kind == "get" else P.MsgType.DELETE
        return enc(seq, fid, name), t, seq, 0, {"file_id": fid, "name": name}
    if kind == "delete_file":
        fid = draw(u64)
        return P.encode_delete_file(seq, fid), P.MsgType.DELETE_FILE, seq, 0, {"file_id": fid}
    if kind in ("get_local", "ring_segment"):
        fid, gen, fname, ps = draw(u64), draw(u64), draw(texts), draw(peers)
        # as_of (AS_OF): at most the generation, any with generation 0 (the latest state)
        as_of = draw(st.one_of(st.none(), u64 if gen == 0 else st.integers(0, gen)))
        want = {"file_id": fid, "generation": gen, "file_name": fname, "peers": ps}
        as_of_flag = 0
        if as_of is not None:
            want["as_of"], as_of_flag = as_of, P.FLAG_AS_OF
        if kind == "get_local":
            f = P.encode_get_local(seq, fid, gen, fname, ps, as_of=as_of)
            return f, P.MsgType.GET_LOCAL, seq, as_of_flag, want
        origin, es, flags = draw(u16), draw(entries), draw(st.sampled_from([0, P.FLAG_MORE]))
        f = P.encode_ring_segment(seq, fid, gen, fname, ps, origin, es, flags, as_of=as_of)
        return f, P.MsgType.RING_SEGMENT, seq, flags | as_of_flag, {**want, "origin": origin, "entries": es}
    if kind == "ping":
        return P.encode_ping(seq), P.MsgType.PING, seq, 0, {}
    if kind == "scrub":
        return P.encode_scrub(seq), P.MsgType.SCRUB, seq, 0, {}
    if kind == "auth":
        token = draw(names)
        return P.encode_auth(seq, token), P.MsgType.AUTH, seq, 0, {"token": token}
    if kind == "ok":
        payload = draw(names)
        return P.encode_ok(seq, payload), P.MsgType.OK, seq, 0, {"payload": payload}
    if kind == "ok_scrub":
        counts = [draw(u64) for _ in P.SCRUB_REPLY_FIELDS]
        f = P.encode_scrub_reply(seq, *counts)
        return f, P.MsgType.OK, seq, 0, {"payload": P.SCRUB_REPLY.pack(*counts)}
    if kind == "data":
        crc, rank, data = draw(u32), draw(u8), draw(names)
        return (
            P.encode_data(seq, crc, rank, data),
            P.MsgType.DATA,
            seq,
            0,
            {"crc32c": crc, "copy_rank": rank, "data": data},
        )
    if kind == "local_list":
        es, flags = draw(list_entries), draw(st.sampled_from([0, P.FLAG_MORE]))
        return P.encode_local_list(seq, es, flags), P.MsgType.LOCAL_LIST, seq, flags, {"entries": es}
    code, msg = draw(u16), draw(texts)
    return P.encode_error(seq, code, msg), P.MsgType.ERROR, seq, 0, {"code": code, "message": msg}


@settings(max_examples=400, **SETTINGS)
@given(msg=messages())
def test_every_message_type_round_trips(msg):
    frame, t, seq, flags, want = msg
    got = P.FrameDecoder().feed(frame)
    assert len(got) == 1
    fr = got[0]
    assert (fr.type, fr.seq, fr.flags) == (t, seq, flags)
    assert fr.fields == want
    if t == P.MsgType.OK and len(want["payload"]) == P.SCRUB_REPLY.size:
        assert P.SCRUB_REPLY.pack(*P.decode_scrub_reply(want["payload"]).values()) == want["payload"]
    # The header says exactly how long the frame is.
    assert struct.unpack_from("<I", frame)[0] == len(frame) - 4


@settings(max_examples=40, **SETTINGS)
@given(msgs=st.lists(messages(), min_size=1, max_size=4))
def test_stream_split_at_every_boundary_decodes_the_same(msgs):
    stream = b"".join(m[0] for m in msgs)
    whole = P.FrameDecoder().feed(stream)
    assert [(f.type, f.seq, f.flags, f.fields) for f in whole] == [(m[1], m[2], m[3], m[4]) for m in msgs]
    for cut in range(len(stream) + 1):
        frames, d = feed_like_transport([stream[:cut], stream[cut:]], P.DEFAULT_MAX_FRAME)
        assert frames == whole, f"cut at byte {cut}"
        assert d.buffered == 0


@settings(max_examples=10, **SETTINGS)
@given(
    size=st.integers(P.FrameDecoder.BIG, P.FrameDecoder.BIG + 5000),
    cuts=st.lists(st.integers(0, 2**20), min_size=1, max_size=6),
    seq=u64,
)
def test_large_frames_split_anywhere_decode_the_same(size, cuts, seq):
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    stream = P.encode_data(seq, 7, 1, data) + P.encode_ok(seq ^ 1) + P.encode_data(2, 0, 0, b"tail")
    whole = P.FrameDecoder().feed(stream)
    frames, d = feed_like_transport(split(stream, cuts), P.DEFAULT_MAX_FRAME)
    assert frames == whole and len(frames) == 3 and frames[0].fields["data"] == data
    assert d.buffered == 0 and d.big_view() is None


# ---- Length prefixes ------------------------------------------------------------------


@settings(max_examples=200, **SETTINGS)
@given(
    max_frame=st.integers(12, P.DEFAULT_MAX_FRAME),
    over=st.integers(1, 2**32),
    t=u8,
    flags=u16,
    seq=u64,
    rest=st.binary(max_size=32),
)
def test_oversized_length_refused_without_allocating(max_frame, over, t, flags, seq, rest):
    length = min(max_frame + over, 0xFFFFFFFF)
    if length <= max_frame:
        return
    d = P.FrameDecoder(max_frame)
    header = struct.pack("<IBBHQ", length, t, 1, flags, seq)
    tracemalloc.start()
    try:
        try:
            d.feed(header + rest)
        except P.ProtocolError:
            pass
        else:
            raise AssertionError(f"a frame of {length} bytes accepted with max_frame {max_frame}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes allocated to refuse a {length}-byte frame"
    assert d.big_view() is None and d.buffered <= len(header + rest)


@settings(max_examples=50, **SETTINGS)
@given(length=st.integers(0, 11), t=u8, seq=u64, piece=st.integers(1, 16))
def test_length_below_header_refused(length, t, seq, piece):
    header = struct.pack("<IBBHQ", length, t, 1, 0, seq)
    d = P.FrameDecoder()
    try:
        for i in range(0, len(header), piece):
            d.feed(header[i : i + piece])
    except P.ProtocolError:
        return
    raise AssertionError(f"length {length} accepted")
