"""The transport runs callbacks after its read loop: a user's callback that
raises reaches the caller and never touches a healthy connection; flush()
reports every failure in one StoreTorrentError. Against real peers."""

from __future__ import annotations

import contextlib

import pytest

from st_py.errors import PeerError, QueuedOperationsError, StoreTorrentError


def test_raising_get_callback_reaches_the_caller_and_spares_the_connection(cluster):
    c = cluster.client()
    with c.create("/t/cb", replication="x1", blocksize=100) as f:
        for i in range(30):
            f.queue_put(f"r{i:02d}", f"value {i}".encode())
    f = c.open("/t/cb")
    got = {}

    def cb(name, data, exc):
        if name == "r07":
            raise ValueError("the user's callback failed")
        got[name] = data

    pendings = [f.queue_get(f"r{i:02d}", callback=cb) for i in range(30)]
    with pytest.raises(ValueError, match="user's callback"):  # the caller hears of it, once
        f.flush()
    f.flush()
    # every other reply was delivered, none failed, no peer was reported failed
    assert got == {f"r{i:02d}": f"value {i}".encode() for i in range(30) if i != 7}
    assert all(p.exception() is None for p in pendings)
    assert not f._transport.failed
    assert all(p.alive for p in c.status().peers)
    conns = dict(f._transport.conns)
    assert f.get("r08") == b"value 8"
    assert all(f._transport.conns[a] is conn for a, conn in conns.items())  # same connections, not reopened
    f.close()


def test_flush_reports_every_failed_put_in_one_error(cluster):
    c = cluster.client()
    f = c.create("/t/denied", replication="x1")
    # a capability the peers reject: every PUT gets its own DENIED reply
    f._transport.capabilities[f.file_id] = b"\x00" * 64
    for conn in list(f._transport.conns.values()):
        conn.dead = ConnectionAbortedError("reset for the test")
    for i in range(5):
        f.queue_put(f"r{i}", b"data")
    with pytest.raises(QueuedOperationsError) as e:
        f.flush()
    assert isinstance(e.value, StoreTorrentError)
    assert len(e.value.failures) == 5
    assert {n for n, _ in e.value.failures} == {f"r{i}" for i in range(5)}
    assert all(isinstance(x, PeerError) for _, x in e.value.failures)
    f._transport.close()


class _SlowPeer:
    """One connection's worth of a peer that answers each request with a
    DATA frame of ``size`` bytes, sent in ``pieces`` pieces ``gap`` seconds
    apart (a peer streaming a large record slowly: a throttled disk, a busy
    link). Only the reply's pacing is under the test's control; the frames
    are the wire protocol's own (st_py.wire.protocol)."""

    def __init__(self, size: int, pieces: int, gap: float):
        import socket
        import threading

        self.data = bytes(range(256)) * (size // 256)
        self.pieces, self.gap = pieces, gap
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import time

        from st_py.wire.protocol import HEADER, crc32c, encode_data

        conn, _ = self.listener.accept()
        self.listener.close()
        with conn, contextlib.suppress(OSError):  # the client may give up and close first
            head = b""
            while len(head) < HEADER.size:
                head += conn.recv(HEADER.size - len(head))
            length, _, _, _, seq = HEADER.unpack(head)
            rest = length + 4 - HEADER.size
            while rest:
                rest -= len(conn.recv(rest))
            reply = encode_data(seq, crc32c(self.data), 0, self.data)
            step = -(-len(reply) // self.pieces)
            for i in range(0, len(reply), step):
                conn.sendall(reply[i : i + step])
                time.sleep(self.gap)
            conn.recv(1)  # until the client closes


def _get_from(peer: _SlowPeer, timeout: float, away: float = 0.0):
    import time

    from st_py.wire.protocol import encode_get
    from st_py.wire.transport import Transport

    t = Transport(timeout=timeout)
    got: dict = {}
    t.send(peer.addr, lambda seq: [encode_get(seq, 1, b"r")], lambda fr, exc: got.update(fr=fr, exc=exc))
    t.poll(0)  # the request goes out
    if away:
        time.sleep(away)  # the caller does other work and polls no more
    t.wait(lambda: bool(got), timeout=30)
    t.close()
    return got


def test_a_large_reply_that_keeps_arriving_is_not_timed_out():
    """8 MiB arriving over ~2.4 s, the client's timeout 1 s: bytes of a frame
    not yet whole are progress (the native receive path counted whole
    frames only, and failed the peer with "no reply for 1 s")."""
    peer = _SlowPeer(8 << 20, pieces=8, gap=0.3)
    got = _get_from(peer, timeout=1.0)
    assert got["exc"] is None, got["exc"]
    assert got["fr"].fields["data"] == peer.data


def test_a_caller_that_did_not_poll_does_not_blame_the_peer():
    """The reply is streaming but larger than the socket buffers; the caller
    polls no more for 2 s (longer than its 1 s timeout), then waits: the
    time it was away is not the peer's."""
    peer = _SlowPeer(8 << 20, pieces=2, gap=0.05)
    got = _get_from(peer, timeout=1.0, away=2.0)
    assert got["exc"] is None, got["exc"]
    assert got["fr"].fields["data"] == peer.data


def test_a_peer_that_stops_answering_is_still_timed_out():
    """The other side of the two tests above: a reply that stops half way
    fails the request after the timeout, while the caller waits."""
    from st_py.errors import PeerUnavailableError

    peer = _SlowPeer(8 << 20, pieces=2, gap=5.0)
    got = _get_from(peer, timeout=1.0)
    assert isinstance(got["exc"], PeerUnavailableError) and "no reply" in str(got["exc"])


def test_a_request_whose_frame_cannot_be_built_leaves_nothing_in_flight(cluster):
    """A frame that fails to build (a chain of too many hops) raises to the
    caller and is not counted in flight: a flush would otherwise wait for a
    reply that can never come."""
    from st_py.wire.protocol import ProtocolError, put_chain_prefix

    c = cluster.client()
    with c.create("/t/unbuilt", replication="x1") as f:
        conn = f._transport.connection(f.peers[0].addr)
        before = len(conn.pending)
        hops = [f"127.0.0.1:{p}" for p in range(1000, 1100)]
        with pytest.raises(ProtocolError):
            conn.send(lambda seq: [put_chain_prefix(seq, f.file_id, 0, 0, b"r", hops, 1), b"x"], lambda fr, e: None)
        assert len(conn.pending) == before and f._transport.in_flight == before
        f.put("r", b"still works")
    with c.open("/t/unbuilt") as f:
        assert f.get("r") == b"still works"
