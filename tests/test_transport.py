"""The transport runs callbacks after its read loop: a user's callback that
raises reaches the caller and never touches a healthy connection; flush()
reports every failure in one StoreTorrentError. Against real peers."""

from __future__ import annotations

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
