#!/usr/bin/env python3
"""Seed corpora for the fuzz targets of st_core/fuzz/ (docs/security.md).

Turns the protocol's test vectors (tests/vectors/wire.json) into one file per
vector under <out>/<target>/, plus a few multi-frame conversations for
request_fuzz (PUT then GET/DELETE of the same record, a GET_LOCAL whose ring
completes, a SCRUB, LIST_META and GET_META) so that the fuzzer starts from
requests that succeed.
The corpora are generated (build/fuzz/corpus by default), never committed.

    st_core/fuzz/make_corpus.py [--vectors tests/vectors/wire.json] [--out build/fuzz/corpus]

Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("frame_decoder_fuzz", "name_codec_fuzz", "request_fuzz")

# The address request_fuzz's server advertises, and the other peer of its
# infofile for file 42 "/d/f" (see request_fuzz.cc).
ME, OTHER = b"127.0.0.1:4000", b"127.0.0.1:4001"
# An input whose first frame is AUTH meets a peer with this capability key,
# whose clock says FUZZ_NOW (request_fuzz.cc); tokens are signed as in
# st_core/src/capability.h.
FUZZ_KEY = b"st-fuzz-capability-key-32-bytes!"
FUZZ_NOW = 1700000000
READ, WRITE, DELETE, PEER, ADMIN, ALL = 1, 2, 4, 8, 16, 31


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def frame(msg_type: int, seq: int, payload: bytes = b"", flags: int = 0) -> bytes:
    return struct.pack("<IBBHQ", 12 + len(payload), msg_type, 1, flags, seq) + payload


def str16(b: bytes) -> bytes:
    return struct.pack("<H", len(b)) + b


def put(seq: int, file_id: int, rank: int, name: bytes, data: bytes, flags: int = 0) -> bytes:
    return frame(0x01, seq, struct.pack("<QBI", file_id, rank, crc32c(data)) + str16(name) + data, flags)


def named(msg_type: int, seq: int, file_id: int, name: bytes) -> bytes:
    return frame(msg_type, seq, struct.pack("<Q", file_id) + str16(name))


def ring(file_id: int, generation: int, file_name: bytes, peers: list[bytes]) -> bytes:
    return (
        struct.pack("<QQ", file_id, generation)
        + str16(file_name)
        + struct.pack("<H", len(peers))
        + b"".join(str16(p) for p in peers)
    )


def get_local(seq: int, peers: list[bytes], generation: int = 1) -> bytes:
    return frame(0x05, seq, ring(42, generation, b"/d/f", peers))


def ring_segment(seq: int, peers: list[bytes], origin: int, entries: list[tuple[int, bytes]], flags: int = 0) -> bytes:
    body = ring(42, 1, b"/d/f", peers) + struct.pack("<HI", origin, len(entries))
    body += b"".join(struct.pack("<B", r) + str16(n) for r, n in entries)
    return frame(0x10, seq, body, flags)


def token(
    ops: int, file_id: int = 0, expires: int = FUZZ_NOW + 3600, user: bytes = b"fuzz", key: bytes = FUZZ_KEY
) -> bytes:
    body = struct.pack("<BBQQ", 1, ops, file_id, expires) + str16(user)
    return body + hmac.new(key, b"storetorrent-capability-v1" + body, hashlib.sha256).digest()


def auth(seq: int, tok: bytes) -> bytes:
    return frame(0x08, seq, tok)


def conversations() -> dict[str, bytes]:
    long_name = b"long/" + b"\xff" * 300  # hashed encoding, with a .name file
    return {
        "conv_put_get_delete": b"".join(
            [
                put(1, 7, 0, b"JFK/2013-01-01", b"hello, record"),
                named(0x02, 2, 7, b"JFK/2013-01-01"),
                put(3, 7, 0, b"JFK/2013-01-01", b"hello, record"),  # idempotent retry
                put(4, 7, 1, b"JFK/2013-01-01", b"other"),  # EXISTS
                put(5, 7, 1, b"JFK/2013-01-01", b"other", flags=2),  # REPLACE
                named(0x02, 6, 7, b"JFK/2013-01-01"),
                named(0x03, 7, 7, b"JFK/2013-01-01"),
                named(0x02, 8, 7, b"JFK/2013-01-01"),  # NOT_FOUND
                frame(0x06, 9),
            ]
        ),
        "conv_hashed_name": b"".join(
            [
                put(1, 9, 2, long_name, b"x" * 100),
                named(0x02, 2, 9, long_name),
                frame(0x04, 3, struct.pack("<Q", 9)),
            ]
        ),
        "conv_bad_names": b"".join(
            [
                put(1, 9, 0, b"../../../escape", b"a"),
                put(2, 9, 0, b".", b"b"),
                put(3, 9, 0, b"..", b"c"),
                put(4, 9, 0, b"a/b/../../c", b"d"),
                put(5, 9, 0, b"", b"e"),  # BAD_NAME
                put(6, 9, 0, b"nul\x00byte", b"f"),  # BAD_NAME
                named(0x02, 7, 9, b"../../../escape"),
                frame(0x04, 8, struct.pack("<Q", 9)),
            ]
        ),
        "conv_get_local_alone": b"".join(
            [
                put(1, 42, 0, b"a", b"committed at rank 0"),
                put(2, 42, 0, b"x", b"committed too"),
                put(3, 42, 0, b"uncommitted", b"never revealed"),
                get_local(4, [ME]),
                get_local(5, [ME], generation=0),
            ]
        ),
        "conv_get_local_ring": b"".join(
            [
                put(1, 42, 0, b"a", b"committed at rank 0"),
                get_local(2, [ME, OTHER]),
                ring_segment(3, [ME, OTHER], 1, [(1, b"bc")], flags=1),
                ring_segment(4, [ME, OTHER], 1, [(1, b"a")]),
                get_local(5, [OTHER, ME]),  # times out
                get_local(6, [b"/x", ME]),
                frame(0x05, 7, ring(42, 1, b"/d/../f", [ME])),  # BAD_NAME
            ]
        ),
        "conv_scrub": b"".join(
            [
                put(1, 42, 0, b"a", b"committed"),
                put(2, 42, 1, b"stale", b"uncommitted"),
                put(3, 5, 0, b"no-infofile", b"deleted file"),
                frame(0x07, 4),
                frame(0x07, 5),
                named(0x02, 6, 42, b"a"),
            ]
        ),
        # The infofile mirrors (off in request_fuzz's peer: NO_NAMESPACE), then
        # a GET_META too short to parse (BAD_FRAME, the connection closes).
        "conv_meta": b"".join(
            [
                frame(0x0A, 1),  # LIST_META
                frame(0x0B, 2, struct.pack("<QQI", 42, 0, 4096)),  # GET_META
                frame(0x0B, 3, struct.pack("<QQ", 42, 0)),
            ]
        ),
        "conv_then_partial_frame": put(1, 3, 0, b"r", b"data") + put(2, 3, 0, b"s", b"more")[:20],
        # A peer that checks capabilities (the first frame is AUTH).
        "conv_auth_all": b"".join(
            [
                auth(1, token(ALL)),
                put(2, 42, 0, b"a", b"committed at rank 0"),
                named(0x02, 3, 42, b"a"),
                get_local(4, [ME]),
                ring_segment(5, [ME, OTHER], 1, [(1, b"bc")]),
                frame(0x07, 6),
                named(0x03, 7, 42, b"a"),
                frame(0x04, 8, struct.pack("<Q", 42)),
            ]
        ),
        "conv_auth_limited": b"".join(
            [
                auth(1, token(READ, file_id=7)),
                put(2, 7, 0, b"r", b"denied"),  # DENIED: no WRITE
                named(0x02, 3, 7, b"r"),  # NOT_FOUND
                named(0x02, 4, 8, b"r"),  # DENIED: other file
                auth(5, token(WRITE | DELETE, file_id=7)),  # replaces the READ one
                put(6, 7, 0, b"r", b"allowed"),
                named(0x02, 7, 7, b"r"),  # DENIED now
                auth(8, token(ALL, expires=FUZZ_NOW - 3600)),  # expired: DENIED
                auth(9, token(ALL, key=b"\x00" * 32)),  # bad signature: DENIED
                auth(10, token(ALL)[:-1]),  # malformed: DENIED
                frame(0x07, 11),  # DENIED: no ADMIN
                frame(0x04, 12, struct.pack("<Q", 7)),
            ]
        ),
        "conv_auth_garbage": b"".join(
            [
                auth(1, b"not a token"),
                put(2, 7, 0, b"r", b"denied"),
                get_local(3, [ME]),
                ring_segment(4, [ME, OTHER], 1, []),
                frame(0x06, 5),  # PING needs nothing
            ]
        ),
    }


def name_seeds(vectors: dict) -> dict[str, bytes]:
    seeds = {
        "name_dot": b".",
        "name_dotdot": b"..",
        "name_traversal": b"../../etc/passwd",
        "name_slashes": b"a/b/c",
        "name_leading_dot": b".hidden",
        "name_nul": b"a\x00b",
        "name_utf8": "r\u00e9cord/\u65e5\u672c".encode(),
        "name_long": b"n" * 300,
        "enc_escaped": b"%2E%2E%2Fx",
        "enc_lower_hex": b"%2e",
        "enc_hashed": b"~" + b"0" * 64,
        "record_file": b"a@0@00000000",
        "record_file_rank": b"JFK%2F2013@255@deadbeef",
        "record_file_bad": b"a@01@0000000g",
        "file_name": b"/d/f",
        "file_name_dotdot": b"/d/../f",
        "file_name_empty_comp": b"/d//f",
        "sha": hashlib.sha256(b"x").hexdigest().encode(),
    }
    for v in vectors["frames"]:
        for key in ("name", "file_name"):
            val = v["fields"].get(key)
            if isinstance(val, str):
                seeds[f"vec_{v['name']}_{key}"] = bytes.fromhex(val) if key == "name" else val.encode()
    return seeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=Path, default=ROOT / "tests" / "vectors" / "wire.json")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz" / "corpus")
    args = ap.parse_args()
    vectors = json.loads(args.vectors.read_text())

    frames = {f"vec_{v['name']}": bytes.fromhex(v["hex"]) for v in vectors["frames"]}
    bad = {f"bad_{v['name']}": bytes.fromhex(v["hex"]) for v in vectors["bad_frames"]}
    stream = {"vec_all_frames": b"".join(frames.values())}

    tokens = {
        "token_all": token(ALL),
        "token_read_file7": token(READ, file_id=7),
        "token_long_user": token(ADMIN, user=b"u" * 256),
    }
    corpora: dict[str, dict[str, bytes]] = {
        # Frames, bad frames, a stream of all frames, and the bare payloads
        # (which the target also hands to every payload decoder directly).
        "frame_decoder_fuzz": {
            **frames,
            **bad,
            **stream,
            **{f"payload_{k[4:]}": b[16:] for k, b in frames.items()},
            **tokens,
            **{f"auth_{k}": auth(1, t) for k, t in tokens.items()},
        },
        "name_codec_fuzz": name_seeds(vectors),
        "request_fuzz": {**frames, **bad, **stream, **conversations()},
    }
    for target in TARGETS:
        d = args.out / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in corpora[target].items():
            (d / name).write_bytes(data)
        print(f"{d}: {len(corpora[target])} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
