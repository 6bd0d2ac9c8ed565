"""GET_LOCAL (paper 3.7): every committed record revealed exactly once across
the peers, lower copy ranks first, with all peers alive and with one killed;
uncommitted records never."""

import shutil
import signal

import pytest
from checks import check_exactly_once, fill, reveal_all

from st_py.client.getlocal import reveal
from st_py.errors import GetLocalError, RecordNotFoundError
from st_py.maintenance.rebalance import rebalance_file


def test_get_local_all_alive_reveals_each_record_once_at_rank0(cluster):
    c, blobs = fill(cluster, "/gl/alive", 300)
    with c.open("/gl/alive") as f:
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
    with c.open("/gl/killed") as f:
        plan, recs = reveal_all(f)
    assert killed not in plan.ring and killed in plan.dead
    check_exactly_once(recs, blobs)
    assert 1 in {r.copy_rank for r in recs}  # rank-1 copies stand in for the dead peer's rank 0


def test_get_local_x3_with_two_peers_killed(cluster):
    c, blobs = fill(cluster, "/gl/x3", 150, replication="x3")
    cluster.kill_peer(0)
    cluster.kill_peer(3)
    with c.open("/gl/x3") as f:
        plan, recs = reveal_all(f)
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
    with cluster.client().open("/gl/uncommitted") as reader:
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
    with c.open("/gl/late") as f:
        plan = f.get_local_plan()
    first = {a: sorted(r.name for r in reveal(a, plan)) for a in plan.ring}
    again = {a: sorted(r.name for r in reveal(a, plan)) for a in reversed(plan.ring)}
    assert first == again


def test_get_local_reveals_the_plans_snapshot_while_writes_go_on(cluster):
    c, blobs = fill(cluster, "/gl/snap", 200)
    with c.open("/gl/snap") as f:
        plan = f.get_local_plan()
    with c.open("/gl/snap") as w:  # commits after the plan: a later generation
        for i in range(50):
            w.put(f"later/{i}", b"later")
    recs = [r for a in plan.ring for r in reveal(a, plan)]
    check_exactly_once(recs, blobs)
    assert len(recs) == plan.expected == 200
    with c.open("/gl/snap") as f:
        plan2, recs2 = reveal_all(f)
    assert plan2.generation > plan.generation and len(recs2) == 250


def test_get_local_removes_a_hung_peer_and_restarts_the_ring(make_cluster):
    cluster = make_cluster(4, peer_args=["--ring-timeout-base", "1", "--ring-timeout-per-peer", "0.2"])
    c, blobs = fill(cluster, "/gl/hung", 200)
    with c.open("/gl/hung") as f:
        plan = f.get_local_plan()
    hung = cluster.peers[2]
    hung.proc.send_signal(signal.SIGSTOP)  # alive to the kernel, silent to everyone
    try:
        recs = [r for a in plan.ring if a != hung.addr for r in reveal(a, plan)]
    finally:
        hung.proc.send_signal(signal.SIGCONT)
    check_exactly_once(recs, blobs)
    assert not any(r.peer == hung.addr for r in recs)


def test_invariant_violation_names_the_offending_peers(make_cluster, tmp_path):
    # A peer that reads a stale copy of the namespace (an NFS cache, a restored
    # backup) claims copies a rebalance moved away: two holders of one copy rank.
    cluster = make_cluster(4)
    c, blobs = fill(cluster, "/gl/inv", 120)
    stale_ns = tmp_path / "stale-namespace"
    shutil.copytree(cluster.namespace, stale_ns)
    lost = cluster.kill_peer(1)
    assert rebalance_file(c, "/gl/inv", lost=[lost]).complete
    cluster.peer_args = ["--namespace", str(stale_ns)]  # the last --namespace wins
    cluster.start_peer(1, port=int(lost.rsplit(":", 1)[1]))
    cluster.wait_for_peers(4)
    with c.open("/gl/inv") as f:
        plan = f.get_local_plan()
    with pytest.raises(GetLocalError, match="invariant 2") as e:
        reveal(plan.ring[0], plan)
    assert lost in str(e.value)
    moved_to = {a for a in plan.ring if a != lost and a in str(e.value)}
    assert len(moved_to) == 1, str(e.value)  # the new holder is named too
