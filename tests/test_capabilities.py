"""Capabilities (docs/capabilities.md) against real tracker and peer
processes: peers refuse data-path requests without a valid token for the
file and operation, and the client renews its tokens without the user
noticing."""

import json
import socket
import time
from pathlib import Path

import pytest
from checks import authenticate

from st_py.client.getlocal import reveal
from st_py.core import capability as cap
from st_py.wire import protocol as P

VECTORS = Path(__file__).parent / "vectors" / "capability.json"


def call(addr: str, *frames: bytes) -> list:
    """Send frames on a fresh connection; the replies, one per frame."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"".join(frames))
        dec, got = P.FrameDecoder(), []
        while len(got) < len(frames):
            data = s.recv(65536)
            if not data:
                break
            got += dec.feed(data)
    return got


def denied(fr) -> str:
    assert fr.type == P.MsgType.ERROR and fr.fields["code"] == P.ErrorCode.DENIED, fr.fields
    return fr.fields["message"].lower()


def test_python_and_cpp_tokens_agree_on_the_shared_vectors():
    vectors = json.loads(VECTORS.read_text())
    cases = vectors["tokens"] if isinstance(vectors, dict) else vectors
    assert cases
    for v in cases:
        key = bytes.fromhex(v["key_hex"])
        token = bytes.fromhex(v["token_hex"])
        assert cap.mint(key, v["ops"], v["file_id"], 0, v["user"], now=v["expires"]) == token
        c = cap.verify(key, token, now=v["expires"] - 1)
        assert (c.ops, c.file_id, c.expires, c.user) == (v["ops"], v["file_id"], v["expires"], v["user"])


def test_peers_refuse_missing_forged_expired_wrong_file_and_wrong_op_tokens(cluster):
    c = cluster.client()
    with c.create("/cap/a", replication="x1", blocksize=1) as a:
        a.put("r", b"secret")
        token_a = a.info.capability
        fid_a = a.file_id
    with c.open("/cap/a") as a:
        holder = a.peers[a._infofile().lookup("r").peers[0]].addr
    b = c.create("/cap/b", replication="x1")
    fid_b = b.file_id
    addr = cluster.peer_addrs[0]
    put_b = P.encode_put(2, fid_b, 0, "x", b"data")

    # no token at all: nothing is done
    msg = denied(call(addr, put_b)[0])
    assert f"{fid_b:016x}" in msg and "write" in msg
    assert denied(call(holder, P.encode_get(3, fid_a, "r"))[0])
    assert call(addr, P.encode_ping(4))[0].type == P.MsgType.OK  # PING needs nothing

    # a token for file A replayed for file B
    auth, put = call(addr, P.encode_auth(1, token_a), put_b)
    assert auth.type == P.MsgType.OK
    assert f"{fid_b:016x}" in denied(put)

    # forged: any flipped bit breaks the signature
    for i in (0, 9, len(token_a) - 1):
        forged = bytearray(token_a)
        forged[i] ^= 0x01
        auth, get = call(holder, P.encode_auth(1, bytes(forged)), P.encode_get(2, fid_a, "r"))
        assert denied(auth)
        denied(get)
    assert "signature" in denied(call(holder, P.encode_auth(1, token_a[:-1] + bytes([token_a[-1] ^ 1])))[0])

    # signed with another key
    other = cap.mint(b"k" * 32, cap.READ, fid_a, 60)
    assert "signature" in denied(call(holder, P.encode_auth(1, other))[0])

    # expired (beyond the allowed clock skew)
    old = cluster.mint(cap.READ, fid_a, ttl=-cap.CLOCK_SKEW_S - 60)
    assert "expired" in denied(call(holder, P.encode_auth(1, old))[0])

    # the wrong operation: a read-only token cannot write or delete
    ro = cluster.mint(cap.READ, fid_a)
    auth, get, put, delete = call(
        holder,
        P.encode_auth(1, ro),
        P.encode_get(2, fid_a, "r"),
        P.encode_put(3, fid_a, 0, "y", b"no"),
        P.encode_delete(4, fid_a, "r"),
    )
    assert auth.type == P.MsgType.OK and get.type == P.MsgType.DATA and get.fields["data"] == b"secret"
    assert "write" in denied(put) and "delete" in denied(delete)

    # GET_LOCAL and SCRUB need READ and ADMIN
    gl = P.encode_get_local(5, fid_a, 0, "/cap/a", cluster.peer_addrs)
    denied(call(addr, gl)[0])
    denied(call(addr, P.encode_scrub(6))[0])

    # the refused requests changed nothing
    with c.open("/cap/a") as a:
        assert a.get("r") == b"secret"
    with c.open("/cap/b") as g:
        assert not g.names()
    b.close()


def test_client_renews_its_capability_before_it_expires(make_cluster):
    cluster = make_cluster(3, capability_ttl=3)
    c = cluster.client()
    f = c.create("/cap/long", replication="x2")
    first = f.info.capability
    blobs = {}
    t_end = time.monotonic() + 6  # two lifetimes of the token
    i = 0
    while time.monotonic() < t_end:
        blobs[f"r{i}"] = bytes([i % 256]) * 500
        f.put(f"r{i}", blobs[f"r{i}"])
        i += 1
        time.sleep(0.05)
    f.close()
    assert f.info.capability != first  # renewed (at least once) along the way
    assert cap.parse(f.info.capability).expires > cap.parse(first).expires
    with c.open("/cap/long") as g:
        assert all(g.get(n) == v for n, v in blobs.items())
        plan = g.get_local_plan()
        recs = [r for a in plan.ring for r in reveal(a, plan)]
    assert sorted(r.name for r in recs) == sorted(blobs)


def test_raw_socket_helper_authenticates(cluster):
    # The helper the other tests use: an ADMIN token lets SCRUB through.
    host, port = cluster.peer_addrs[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        authenticate(s, cluster.mint(cap.ADMIN))
        s.sendall(P.encode_scrub(1))
        dec, frames = P.FrameDecoder(), []
        while not frames:
            frames = dec.feed(s.recv(65536))
    assert frames[0].type == P.MsgType.OK


@pytest.mark.parametrize("content", ["", "zz" * 32, "ab" * 31, "ab" * 33])
def test_bad_key_files_are_refused_with_a_clear_error(tmp_path, content):
    p = tmp_path / "key"
    p.write_text(content)
    with pytest.raises(cap.CapabilityError, match="64 hex digits"):
        cap.load_key(p)
