"""Replies may come out of order on one pipelined connection (docs/wire-
protocol.md): a slow request, handled off the peer's event loop, is
overtaken by fast ones sent after it, and every reply carries its request's
sequence number. Here it is produced for real, on a raw socket, and then
through the client's transport."""

from __future__ import annotations

import os
import socket

from st_py.wire import protocol as P


def _replies(sock, n: int) -> list:
    dec, frames = P.FrameDecoder(), []
    while len(frames) < n:
        chunk = sock.recv(1 << 20)
        assert chunk, "the peer closed the connection"
        frames += dec.feed(chunk)
    return frames


def test_a_slow_put_is_overtaken_by_fast_requests_on_one_connection(make_cluster):
    cluster = make_cluster(1, auth=False, peer_args=["--sync-each"])  # a PUT waits for its fsync, off the loop
    with cluster.client().create("/ooo/a", replication="x1") as f:
        file_id = f.file_id
    host, port = cluster.peer_addrs[0].rsplit(":", 1)
    big = os.urandom(16 << 20)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        # one write: a 16 MiB PUT (seq 1), then ten PINGs (seq 2..11) and a GET of a missing record (seq 12)
        s.sendall(
            P.encode_put(1, file_id, 0, "big", big)
            + b"".join(P.encode_ping(q) for q in range(2, 12))
            + P.encode_get(12, file_id, "missing")
        )
        frames = _replies(s, 12)
    order = [fr.seq for fr in frames]
    assert sorted(order) == list(range(1, 13))  # every request answered once
    assert order != sorted(order), "replies came in order: nothing overtook the slow PUT"
    assert order.index(1) > order.index(2)  # the PUT was overtaken
    by_seq = {fr.seq: fr for fr in frames}
    assert by_seq[1].type == P.MsgType.OK  # each reply is its own request's
    assert all(by_seq[q].type == P.MsgType.OK for q in range(2, 12))
    assert by_seq[12].type == P.MsgType.ERROR and by_seq[12].fields["code"] == P.ErrorCode.NOT_FOUND


def test_the_client_matches_out_of_order_replies_to_their_requests(make_cluster):
    cluster = make_cluster(1, auth=False, peer_args=["--sync-each"])
    c = cluster.client()
    blobs = {f"r{i}": os.urandom((8 << 20) if i % 4 == 0 else 100 + i) for i in range(12)}
    with c.create("/ooo/b", replication="x1") as f:
        for name, data in blobs.items():  # big fsync'd PUTs overtaken by small ones
            f.queue_put(name, data)
    with c.open("/ooo/b") as f:
        got = {}
        for name in blobs:
            f.queue_get(name, callback=lambda n, body, exc: got.__setitem__(n, exc or body))
        f.flush()
    assert got == blobs
