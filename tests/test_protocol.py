"""The Python codec against the shared test vectors (tests/vectors/wire.json),
which the C++ peer's tests decode too."""

import json
from pathlib import Path

import pytest

from st_py.wire import protocol as P

VECTORS = json.loads((Path(__file__).parent / "vectors" / "wire.json").read_text())


def _norm(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


@pytest.mark.parametrize("vec", VECTORS["frames"], ids=lambda v: v["name"])
def test_vector_decodes(vec):
    frames = P.FrameDecoder().feed(bytes.fromhex(vec["hex"]))
    assert len(frames) == 1
    fr = frames[0]
    assert fr.type == P.MsgType[vec["type"]]
    assert fr.seq == vec["seq"] and fr.flags == vec["flags"]
    assert {k: _norm(v) for k, v in fr.fields.items()} == vec["fields"]


@pytest.mark.parametrize("vec", VECTORS["bad_frames"], ids=lambda v: v["name"])
def test_bad_frames_refused(vec):
    with pytest.raises(P.ProtocolError):
        P.FrameDecoder(max_frame=P.DEFAULT_MAX_FRAME).feed(bytes.fromhex(vec["hex"]))


@pytest.mark.parametrize("vec", VECTORS["crc32c"], ids=lambda v: v["hex"][:8])
def test_crc32c_rfc3720(vec):
    assert P.crc32c(bytes.fromhex(vec["hex"])) == vec["crc32c"]


def test_frames_split_anywhere_decode_the_same():
    stream = b"".join(bytes.fromhex(v["hex"]) for v in VECTORS["frames"])
    for cut in range(1, len(stream), 7):
        d = P.FrameDecoder()
        got = d.feed(stream[:cut]) + d.feed(stream[cut:])
        assert [f.seq for f in got] == [v["seq"] for v in VECTORS["frames"]]
        assert d.buffered == 0


def test_oversized_length_refused_before_body():
    d = P.FrameDecoder(max_frame=1024)
    with pytest.raises(P.ProtocolError, match="outside"):
        d.feed(P.HEADER.pack(2048, P.MsgType.PUT, 1, 0, 1))


def test_large_frames_fill_their_own_buffer():
    big = bytes(range(256)) * 4096  # 1 MiB
    stream = P.encode_data(1, P.crc32c(big), 0, big) + P.encode_ok(2) + P.encode_data(3, 0, 1, big[:10])
    d = P.FrameDecoder()
    got = d.feed(stream[:1000])
    assert got == [] and d.big_view() is not None
    pos = 1000
    while d.big_view() is not None:
        view = d.big_view()
        n = min(len(view), 70_000, len(stream) - pos)
        view[:n] = stream[pos : pos + n]
        view.release()
        got += d.big_filled(n)
        pos += n
    got += d.feed(stream[pos:])
    assert [f.seq for f in got] == [1, 2, 3]
    assert got[0].fields["data"] == big and got[2].fields["data"] == big[:10]


def test_get_local_as_of_adds_the_flag_and_a_u64():
    """AS_OF (docs/wire-protocol.md, GET_LOCAL): the ring header ends with
    as_of:u64; without it the frame is byte for byte what it was."""
    peers = ["127.0.0.1:4000", "127.0.0.1:4001"]
    plain = P.encode_get_local(5, 42, 9, "/d/f", peers)
    assert plain == P.encode_get_local(5, 42, 9, "/d/f", peers, as_of=None)
    past = P.encode_get_local(5, 42, 9, "/d/f", peers, as_of=3)
    assert P.HEADER.unpack_from(plain)[3] == 0
    assert P.HEADER.unpack_from(past)[3] == P.FLAG_AS_OF
    assert past[P.HEADER_SIZE :] == plain[P.HEADER_SIZE :] + (3).to_bytes(8, "little")
    (fr,) = P.FrameDecoder().feed(past)
    assert fr.flags == P.FLAG_AS_OF and fr.fields["as_of"] == 3 and fr.fields["generation"] == 9
    (fr,) = P.FrameDecoder().feed(plain)
    assert "as_of" not in fr.fields
    # as_of = generation is allowed (the same ring as without); generation 0
    # (the latest state) takes any as_of.
    assert P.FrameDecoder().feed(P.encode_get_local(5, 42, 9, "/d/f", peers, as_of=9))[0].fields["as_of"] == 9
    assert P.FrameDecoder().feed(P.encode_get_local(5, 42, 0, "/d/f", peers, as_of=7))[0].fields["as_of"] == 7


def test_ring_segment_as_of_round_trips():
    peers = ["a:1", "b:2"]
    f = P.encode_ring_segment(6, 42, 9, "/d/f", peers, 1, [(0, b"x"), (1, b"v1/y")], P.FLAG_MORE, as_of=4)
    (fr,) = P.FrameDecoder().feed(f)
    assert fr.flags == P.FLAG_MORE | P.FLAG_AS_OF
    assert fr.fields["as_of"] == 4 and fr.fields["origin"] == 1
    assert fr.fields["entries"] == [(0, b"x"), (1, b"v1/y")]


@pytest.mark.parametrize("as_of", [10, -1])
def test_as_of_after_the_generation_is_refused(as_of):
    with pytest.raises(P.ProtocolError, match="after the ring's generation"):
        P.encode_get_local(5, 42, 9, "/d/f", ["a:1"], as_of=as_of)
    with pytest.raises(P.ProtocolError, match="after the ring's generation"):
        P.encode_ring_segment(5, 42, 9, "/d/f", ["a:1"], 0, [], as_of=as_of)


def test_as_of_flag_and_field_must_agree():
    past = P.encode_get_local(5, 42, 9, "/d/f", ["a:1"], as_of=3)
    plain = P.encode_get_local(5, 42, 9, "/d/f", ["a:1"])
    flip = bytearray(past)
    flip[6:8] = (0).to_bytes(2, "little")
    with pytest.raises(P.ProtocolError, match="trailing"):
        P.FrameDecoder().feed(bytes(flip))
    flip = bytearray(plain)
    flip[6:8] = P.FLAG_AS_OF.to_bytes(2, "little")
    with pytest.raises(P.ProtocolError, match="shorter"):
        P.FrameDecoder().feed(bytes(flip))
