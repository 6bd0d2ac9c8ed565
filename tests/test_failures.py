"""Failure behaviour against real processes killed with SIGKILL (paper 4.3,
5): dynamic peer failures during PUT and GET, initial failures at open, and a
tracker restarted in the middle of writes."""

import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from checks import check_file
from conftest import poll_for

from st_py.core.infofile import InfofileReader
from st_py.deploy.ports import ephemeral_range
from st_py.errors import NotEnoughPeersError, QueuedOperationsError, RecordExistsError


def test_put_survives_a_peer_killed_mid_pipeline(cluster):
    c = cluster.client(depth=64)
    blobs = {f"r{i:05d}": bytes([i % 251]) * (100 + i % 900) for i in range(1500)}
    f = c.create("/fail/put", replication="x2", blocksize=4)
    for i, (n, v) in enumerate(blobs.items()):
        f.queue_put(n, v)
        if i == 500:
            dead = cluster.kill_peer(1)
    f.close()  # every record committed with 2 copies, none of the later ones on the dead peer
    idx = {p.peer_idx: p.addr for p in c.tracker.open("/fail/put").peers}
    with closing(InfofileReader(cluster.namespace / "fail" / "put")) as reader:
        late = [
            n
            for n in list(blobs)[700:]
            if idx[reader.lookup(n).peers[0]] == dead or idx[reader.lookup(n).peers[1]] == dead
        ]
    assert late == []
    check_file(cluster, "/fail/put", blobs)


def test_put_fails_clearly_with_fewer_live_peers_than_copies(cluster):
    c = cluster.client()
    f = c.create("/fail/few", replication="x3")
    for i in (0, 1):
        cluster.kill_peer(i)
    with pytest.raises(NotEnoughPeersError, match="x3"), f:  # f is closed on the way out
        for i in range(50):
            f.put(f"r{i}", b"x")
        f.flush()


def test_get_reads_the_next_copy_when_a_holder_is_dead(cluster):
    c = cluster.client()
    blobs = {f"r{i}": f"value {i}".encode() for i in range(100)}
    with c.create("/fail/get", replication="x2") as f:
        for n, v in blobs.items():
            f.queue_put(n, v)
    cluster.kill_peer(0)
    with c.open("/fail/get") as f:  # opened before the tracker notices: dynamic failure
        for n, v in blobs.items():
            assert f.get(n) == v


def test_open_reports_failed_peers_and_new_writes_avoid_them(cluster):
    c = cluster.client()
    f = c.create("/fail/initial", replication="x2")
    f.close()
    dead = cluster.kill_peer(3)
    poll_for(lambda: c.status().failed_peers == 1, what="the tracker to fail the peer")
    with c.open("/fail/initial") as f:
        assert [p.addr for p in f.info.peers if not p.alive] == [dead]
        for i in range(100):
            f.queue_put(f"r{i}", b"x")
    dead_idx = [p.peer_idx for p in c.tracker.open("/fail/initial").peers if p.addr == dead]
    with closing(InfofileReader(cluster.namespace / "fail" / "initial")) as reader:
        assert all(dead_idx[0] not in reader.lookup(f"r{i}").peers for i in range(100))


def test_delete_reaches_every_live_copy_holder(cluster):
    c = cluster.client()
    with c.create("/fail/del", replication="x3") as f:
        f.put("a", b"1")
    cluster.kill_peer(0)
    with c.open("/fail/del") as f:
        f.delete("a")  # copies on live peers removed, the tracker forgets the record
        assert len(f) == 0


def test_tracker_restart_during_writes_loses_nothing(cluster):
    c = cluster.client(depth=32, group_size=20)
    blobs = {f"w{i:05d}": bytes([i % 256]) * 64 for i in range(3000)}
    f = c.create("/fail/tracker", replication="x2")
    restarted = threading.Event()

    def restart():
        cluster.restart_tracker()
        restarted.set()

    for i, (n, v) in enumerate(blobs.items()):
        f.queue_put(n, v)
        if i == 800:
            threading.Thread(target=restart).start()
    f.close()  # commits that met a dead tracker were retried after it came back
    assert restarted.wait(30)
    check_file(cluster, "/fail/tracker", blobs)


def test_every_daemon_listens_below_the_kernels_ephemeral_ports(cluster):
    """A killed daemon comes back on its port, and a port the kernel gave
    (port 0) is handed to any port-0 bind or outgoing connection on the
    machine while the daemon is down: a soak beside CI restarted its tracker
    and found its metrics port taken (PortInUseError). So a local cluster
    chooses every port below that range (st_py.deploy.ports), as ``up``
    does."""
    below = ephemeral_range()[0]

    def ports() -> list[int]:
        return [cluster.tracker_port, cluster.metrics_port, *(int(a.rsplit(":", 1)[1]) for a in cluster.peer_addrs)]

    first = ports()
    assert all(0 < p < below for p in first), (first, below)
    cluster.restart_tracker()
    cluster.kill_peer(0)
    cluster.start_peer(0, first[2])
    cluster.add_peer()
    assert ports()[: len(first)] == first and all(0 < p < below for p in ports()), (ports(), below)
    cluster.wait_for_peers(len(first) - 1)


def test_peer_added_while_writing(cluster):
    c = cluster.client()
    blobs = {f"g{i}": b"y" * 10 for i in range(600)}
    f = c.create("/fail/grow", replication="x2")
    for i, (n, v) in enumerate(blobs.items()):
        f.queue_put(n, v)
        if i == 200:
            cluster.start_peer(4)
    f.close()
    check_file(cluster, "/fail/grow", blobs)
    poll_for(lambda: c.status().alive_peers == 5, what="the new peer's announce")
    with c.create("/fail/grown", replication="x2") as g:
        assert len(g.info.peers) == 5
        g.put("x", b"1")


WRITER = """
import sys
from st_py.client.client import Client
f = Client(sys.argv[1], group_size=10).create("/fail/crash", replication="x2", blocksize=1)
for i in range(100000):
    f.queue_put(f"r{i}", b"attempt-1 " * 50)
    if i == 300:
        print("ready", flush=True)
"""


def test_writer_killed_mid_pipeline_then_a_retry_commits_everything(cluster, tmp_path):
    # Paper 4.4: a writer crashes after sending copies but before committing
    # them; the application retries. Its uncommitted copies are garbage the
    # retry must neither trip over nor overwrite, and a retried PUT is atomic.
    import subprocess
    import sys

    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    with subprocess.Popen([sys.executable, str(script), cluster.tracker_addr], stdout=subprocess.PIPE) as w:
        assert w.stdout.readline().strip() == b"ready"
        w.kill()
    # The application retries with the same data. Commits the writer sent
    # just before it died may still land: those names are then committed
    # already (skipped, or an idempotent commit of the same bytes).
    blobs = {f"r{i}": b"attempt-1 " * 50 for i in range(400)}
    with cluster.client().open("/fail/crash") as f:
        for n, v in blobs.items():
            try:
                f.queue_put(n, v)  # copies that collide with the crashed writer's go to other peers
            except RecordExistsError:
                pass  # committed by the crashed writer
        try:
            f.flush()
        except (RecordExistsError, QueuedOperationsError) as e:
            # the crashed writer's last commit, in the tracker when it died, landed after these
            # names were queued here (seen on a loaded machine): write-once refuses them at this
            # commit, and nothing else may fail; check_file reads each back with its bytes
            failures = e.failures if isinstance(e, QueuedOperationsError) else ((None, e),)
            assert all(isinstance(x, RecordExistsError) for _, x in failures), failures
    check_file(cluster, "/fail/crash", blobs)


# Timing is the point (peers back within 3 s of a restart, where gRPC's own backoff would take
# several): on 3 test workers of a loaded 2-core machine the restarted tracker's first turns
# once came too late for the 3 s (seen once in two runs); a wider window would no longer tell.
@pytest.mark.flaky(reruns=2)
def test_peers_announce_again_soon_after_a_long_tracker_outage(cluster):
    # gRPC's default reconnect backoff grows to minutes; peers keep theirs
    # within one announce interval, so a restarted tracker sees them at once.
    c = cluster.client()
    cluster.tracker.kill()
    time.sleep(6)  # a long outage: gRPC's reconnect backoff would have grown by now
    cluster.start_tracker()

    def all_announced():
        st = c.status()
        return st.alive_peers == 4 and all(0 <= p.last_announce_age_s < 1.0 for p in st.peers)

    # "soon": within 3 s of the restart (one announce interval is 0.3 s here)
    poll_for(all_announced, timeout=3.0, what="every peer to announce to the restarted tracker")


def test_read_access_while_the_tracker_is_down(cluster):
    """Paper 3.5: clients keep read access while trackers are down. A file
    opened before the outage still serves GET and GET_LOCAL."""
    c = cluster.client()
    blobs = {f"r{i:02d}": f"value {i}".encode() for i in range(20)}
    with c.create("/fail/outage", replication="x2") as f:
        for n, v in blobs.items():
            f.queue_put(n, v)
    f = c.open("/fail/outage")
    cluster.tracker.kill()
    local = f.get_local()
    assert sorted(r.name for r in local) == sorted(blobs)  # every peer is on this host: each record once
    assert {r.name: Path(r.path).read_bytes() for r in local} == blobs
    assert f.get("r07") == blobs["r07"]
    f.close()


def test_creates_wait_for_a_restarting_tracker(cluster):
    """Issue 39: while a supervised tracker restarts, `create` is latency, not
    an error: it retries with its request id until the tracker is back
    (it raised TrackerUnavailableError 30-50 times per outage)."""
    c = cluster.client()
    cluster.tracker.kill()
    restarter = threading.Timer(1.5, cluster.start_tracker)  # longer than a read's 1 s grace
    restarter.start()
    try:
        t0 = time.monotonic()
        with c.create("/fail/create-during-restart", replication="x2") as f:
            f.put("a", b"made while the tracker restarted")
        assert time.monotonic() - t0 >= 1.0  # it did wait
    finally:
        restarter.join()
    with c.open("/fail/create-during-restart") as f:
        assert f.get("a") == b"made while the tracker restarted"


def test_a_retried_delete_snapshot_or_rmdir_gets_its_first_reply(cluster):
    """Issue 39: a delete, a snapshot create and an rmdir whose replies were
    lost (the tracker restarted after doing them) are sent again with the
    same request id: each gets the reply of the first try (the request is in
    the metadata log), not NOT_FOUND or ALREADY_EXISTS; a new request id
    still gets those."""
    import grpc

    from st_py._proto import tracker_pb2 as pb

    c = cluster.client()
    with c.create("/retry/a/f", replication="x2") as f:
        for i in range(3):
            f.put(f"r{i}", b"x")
    with c.create("/retry/snap", replication="x2") as f:
        f.put("r", b"x")
    tracker = c.tracker  # the raw RPCs: the test plays a client whose replies were lost
    md, user = tracker._metadata, tracker.user

    def call(method, req):
        return getattr(tracker._stub, method)(req, metadata=md, timeout=10)

    deleted = call("Delete", pb.DeleteRequest(name="/retry/a/f", whole_file=True, user=user, request_id="d-1"))
    made = call(
        "Snapshot", pb.SnapshotRequest(name="/retry/snap", op="create", snapshot="s1", user=user, request_id="s-1")
    )
    call("RemoveDir", pb.RemoveDirRequest(path="/retry/a", user=user, request_id="r-1"))
    cluster.restart_tracker()
    again = call("Delete", pb.DeleteRequest(name="/retry/a/f", whole_file=True, user=user, request_id="d-1"))
    assert again.deleted == deleted.deleted == 3
    twice = call(
        "Snapshot", pb.SnapshotRequest(name="/retry/snap", op="create", snapshot="s1", user=user, request_id="s-1")
    )
    assert twice == made
    call("RemoveDir", pb.RemoveDirRequest(path="/retry/a", user=user, request_id="r-1"))
    with pytest.raises(grpc.RpcError) as e:
        call("Delete", pb.DeleteRequest(name="/retry/a/f", whole_file=True, user=user, request_id="d-2"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        call(
            "Snapshot", pb.SnapshotRequest(name="/retry/snap", op="create", snapshot="s1", user=user, request_id="s-2")
        )
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert [s.name for s in c.snapshots("/retry/snap")] == ["s1"]


def test_a_retried_create_is_applied_once(cluster):
    """A create whose reply was lost (the tracker died after making the
    file) is sent again with the same request id: it gets the file it made,
    not ALREADY_EXISTS; another create of that name still gets
    ALREADY_EXISTS."""
    import grpc

    from st_py._proto import tracker_pb2 as pb

    with cluster.client().create("/fail/other", replication="x1") as f:
        tracker = f._tracker  # the raw RPC: the test plays a client whose reply was lost

    def create(request_id: str):
        req = pb.CreateRequest(name="/fail/once", replication="x2", user=tracker.user, request_id=request_id)
        return tracker._stub.Create(req, metadata=tracker._metadata, timeout=10)

    first = create("r-1")
    cluster.restart_tracker()  # the reply may have been lost with it
    again = create("r-1")
    assert again.file_id == first.file_id and [p.peer_id for p in again.peers] == [p.peer_id for p in first.peers]
    with pytest.raises(grpc.RpcError) as e:
        create("r-2")
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
