"""GET_LOCAL (paper 3.7): every committed record revealed exactly once across
the peers, lower copy ranks first, with all peers alive and with one killed;
uncommitted records never."""

from collections import Counter

import pytest

from st_py.errors import RecordNotFoundError
from st_py.getlocal import reveal


def reveal_all(f):
    plan = f.get_local_plan()
    out = []
    for addr in plan.ring:
        out += reveal(addr, plan)
    return plan, out


def fill(cluster, name, n, replication="x2", blocksize=3):
    c = cluster.client()
    blobs = {f"rec/{i:04d}": f"payload {i}".encode() * (i % 7 + 1) for i in range(n)}
    with c.create(name, replication=replication, blocksize=blocksize) as f:
        for k, v in blobs.items():
            f.queue_put(k, v)
    return c, blobs


def check_exactly_once(records, blobs):
    counts = Counter(r.name for r in records)
    assert set(counts) == set(blobs), set(counts) ^ set(blobs)
    assert max(counts.values()) == 1, [n for n, k in counts.items() if k > 1][:5]
    for r in records:
        with open(r.path, "rb") as fh:
            assert fh.read() == blobs[r.name]
        assert r.size == len(blobs[r.name])


def test_get_local_all_alive_reveals_each_record_once_at_rank0(cluster):
    c, blobs = fill(cluster, "/gl/alive", 300)
    f = c.open("/gl/alive")
    plan, recs = reveal_all(f)
    assert len(plan.ring) == 4
    check_exactly_once(recs, blobs)
    assert {r.copy_rank for r in recs} == {0}
    # each peer's paths are in its own store
    for r in recs:
        i = cluster.peer_addrs.index(r.peer)
        assert f"peer-{i}" in r.path
    # the default get_local() asks every live peer on this host
    assert sorted(r.name for r in f.get_local()) == sorted(blobs)


def test_get_local_with_one_x2_peer_killed(cluster):
    c, blobs = fill(cluster, "/gl/killed", 300)
    killed = cluster.kill_peer(2)
    f = c.open("/gl/killed")
    plan, recs = reveal_all(f)
    assert killed not in plan.ring and killed in plan.dead
    check_exactly_once(recs, blobs)
    assert 1 in {r.copy_rank for r in recs}  # rank-1 copies stand in for the dead peer's rank 0


def test_get_local_x3_with_two_peers_killed(cluster):
    c, blobs = fill(cluster, "/gl/x3", 150, replication="x3")
    cluster.kill_peer(0)
    cluster.kill_peer(3)
    plan, recs = reveal_all(c.open("/gl/x3"))
    assert len(plan.ring) == 2
    check_exactly_once(recs, blobs)


def test_uncommitted_records_are_invisible(cluster):
    writer = cluster.client(group_size=1000)
    f = writer.create("/gl/uncommitted", replication="x2")
    f.put("committed", b"yes")
    f.flush()
    pending = [f.queue_put(f"pending/{i}", b"not yet") for i in range(20)]
    for p in pending:
        p.result()  # every copy acknowledged by the peers, but not committed
    reader = cluster.client().open("/gl/uncommitted")
    with pytest.raises(RecordNotFoundError):
        reader.get("pending/0")
    plan, recs = reveal_all(reader)
    assert [r.name for r in recs] == ["committed"]
    f.close()  # now the group is committed
    plan, recs = reveal_all(reader)
    assert sorted(r.name for r in recs) == sorted(["committed"] + [f"pending/{i}" for i in range(20)])
    assert reader.get("pending/0") == b"not yet"


def test_get_local_result_is_consistent_for_late_clients(cluster):
    c, blobs = fill(cluster, "/gl/late", 100)
    f = c.open("/gl/late")
    plan = f.get_local_plan()
    first = {a: sorted(r.name for r in reveal(a, plan)) for a in plan.ring}
    again = {a: sorted(r.name for r in reveal(a, plan)) for a in reversed(plan.ring)}
    assert first == again
