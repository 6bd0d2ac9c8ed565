"""The tracker with its metadata log in etcd (docs/metadata-log.md): three
real etcd members, a real tracker and real peers. Losing the tracker's host
(its process, its state folder and its namespace) loses no acknowledged
record: the peers' mirrors bring each file back as their last pass saw it,
and the log in etcd brings it forward to every change acknowledged since."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import poll_for
from helpers import failover_reader, failover_writer, standby_argv
from test_recover import _infofile_state, _recover, _wait_for_mirrors

from st_py.core.infofile import InfofileReader
from st_py.deploy.etcd import EtcdCluster, find_etcd

try:
    find_etcd()
    from st_py.tracker.log.etcd_log import EtcdLog  # aetcd: the [ha] extra
    from st_py.tracker.log.etcd_session import EtcdSession
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)


def _compact_log_through(etcd: EtcdCluster, cluster_id: str, index: int) -> None:
    """Drop the log's entries up to ``index``, as the leader does once they
    are older than it keeps (10 minutes): the file's creation is then only
    in the peers' mirrors."""

    async def go() -> None:
        session = EtcdSession(etcd.endpoints)
        try:
            await (await EtcdLog.open(session, cluster_id)).compact(index + 1)
        finally:
            await session.close()

    asyncio.run(go())


def test_the_tracker_host_lost_loses_no_acknowledged_record(make_cluster, etcd):
    """Two files: /lab/old, created before what the log still holds (it comes
    back from the peers' mirrors, then forward by the log), and /lab/new,
    created after the peers' last mirror pass (it comes back from the log
    alone, at the new tracker's start)."""
    tracker_args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "lab", "--init-cluster"]
    cluster = make_cluster(3, peer_args=["--mirror-interval", "0.2"], tracker_args=tracker_args)
    c = cluster.client()
    first = {f"a/{i:03d}": f"first {i} ".encode() * (i % 7 + 1) for i in range(60)}
    with c.create("/lab/old", replication="x2") as f:
        for k, v in first.items():
            f.queue_put(k, v)
    _wait_for_mirrors(cluster, ["/lab/old"])
    # From now on the peers' mirrors lag: each peer restarts with passes an hour apart (its
    # first pass, at start, copies the infofile as it is now).
    cluster.peer_args = ["--mirror-interval", "3600"]
    for i in range(3):
        cluster.kill_peer(i)
        cluster.start_peer(i)
    # the restarted peers on their new ports, each announced (wait_for_peers counts the killed
    # ones too, still alive at their old addresses until they miss announces: CI of 2b39aac)
    poll_for(
        lambda: {p.addr for p in c.status().peers if p.alive} >= set(cluster.peer_addrs),
        timeout=30,
        what="the restarted peers to announce at their new addresses",
    )
    mirrored = _infofile_state(cluster, "/lab/old")[1]
    r = InfofileReader(cluster.namespace / "lab/old")
    _compact_log_through(etcd, "lab", int(r.meta()["log_index"]))
    r.close()

    later = {f"b/{i:03d}": f"later {i} ".encode() * (i % 5 + 1) for i in range(80)}
    with c.open("/lab/old") as f:
        for k, v in later.items():
            f.queue_put(k, v)
        f.flush()
        f.delete("a/000")
    c.snapshot("/lab/old", "s1")
    expect = {**{k: v for k, v in first.items() if k != "a/000"}, **later}
    fresh = {f"n/{i:03d}": f"new {i}".encode() for i in range(30)}
    with c.create("/lab/deep/new", replication="x2") as f:
        for k, v in fresh.items():
            f.queue_put(k, v)
    assert _infofile_state(cluster, "/lab/old")[1] > mirrored  # the mirrors are behind: the test proves something

    # The tracker's host is lost: process, state folder and namespace.
    cluster.tracker.kill()
    shutil.rmtree(cluster.namespace)
    shutil.rmtree(cluster.data_dir / "tracker")
    cluster.start_tracker()
    cluster.wait_for_peers(3)
    rc, report = _recover(cluster)
    files = {f["name"]: f for f in report["files"]}
    assert rc == 0, report
    assert files["/lab/old"]["outcome"] == "restored", files
    assert "from the metadata log" in files["/lab/old"]["detail"], files
    assert "/lab/deep/new" not in files, files  # no peer mirrors it: it is back from the log alone, at the start

    c2 = cluster.client()
    for name, want in (("/lab/old", expect), ("/lab/deep/new", fresh)):
        with c2.open(name) as f:
            assert sorted(f.names()) == sorted(want)
            assert all(f.get(k) == v for k, v in want.items())
            assert sorted(r.name for r in f.get_local()) == sorted(want)
    assert [s.name for s in c2.snapshots("/lab/old")] == ["s1"]
    # and writes go on, in both files
    for name in ("/lab/old", "/lab/deep/new"):
        with c2.open(name) as f:
            f.put("c/after", b"after the loss")
        with c2.open(name) as f:
            assert f.get("c/after") == b"after the loss"


def test_a_tracker_naming_a_cluster_etcd_does_not_hold_is_refused(tmp_path, etcd):
    """One line saying what to do; nothing written, nothing served."""
    argv = [
        sys.executable,
        "-m",
        "st_py.tracker",
        "--root",
        str(tmp_path / "ns"),
        "--state-dir",
        str(tmp_path / "state"),
        "--etcd",
        ",".join(etcd.endpoints),
        "--cluster-id",
        "nosuch",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("tracker: metadata log") and "nosuch" in last, p.stderr
    assert "listening on" not in p.stdout


def test_a_tracker_whose_etcd_does_not_answer_is_refused(tmp_path):
    """No member reachable at start: one line naming the members and what to
    check, a failed exit, nothing served (a standby would otherwise wait)."""
    argv = [sys.executable, "-m", "st_py.tracker", "--root", str(tmp_path / "ns"), "--state-dir", str(tmp_path / "st")]
    argv += ["--etcd", "127.0.0.1:1,127.0.0.1:2", "--cluster-id", "lab"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("tracker: metadata log") and "did not answer" in last and "etcdctl endpoint health" in last
    assert "listening on" not in p.stdout


def _start_standby(cluster, tmp_path):
    """A second tracker of ``cluster``'s etcd cluster on the same namespace,
    with its own state folder and port; returns (process, port, its log
    file), once it says it campaigns as a standby."""
    from st_py.deploy.ports import choose_ports

    # known before it listens (it listens once elected), so chosen as `up` chooses its
    # daemons' ports: below the ephemeral range no port-0 bind or connection is given
    (port,) = choose_ports([1])
    argv = standby_argv(cluster.tracker.argv, tmp_path / "state-b", port)
    out = (tmp_path / "standby.log").open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    poll_for(lambda: b"a standby until elected" in (tmp_path / "standby.log").read_bytes(), timeout=30)
    return proc, port, out


def test_a_standby_takes_over_when_the_leader_is_killed(make_cluster, etcd, tmp_path):
    """Two trackers on one namespace, the log in etcd: the leader serves, the
    standby waits to be elected and does not listen. Peers and a client are
    given both addresses. A writer loops (create, queue_put, close) while
    the leader is SIGKILLed: the standby is elected once the leader's lease
    runs out, applies what the log holds, and serves; the writer and a
    reader (open, names, get) see latency, no error, and every record whose
    close() returned reads back.
    A second writer holds the file's writer lease across the failover (the
    lease is in the log: the standby knows it): its acknowledged records, a
    replacement among them, all commit, and so does what it writes after."""

    from st_py.client.client import Client

    args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "ha", "--init-cluster"]
    cluster = make_cluster(3, tracker_args=args)
    standby, port_b, standby_log = _start_standby(cluster, tmp_path)
    try:
        both = f"{cluster.tracker_addr},127.0.0.1:{port_b}"
        cluster.set_standbys([f"127.0.0.1:{port_b}"])  # the peers announce to whichever answers
        client = Client(both)
        with client.create("/ha/leased", replication="x2") as g:
            g.put("doc", b"v0")
            g.put("base1", b"b1")
        g = client.open("/ha/leased")
        g.put("doc", b"v1", replace=True)  # takes the lease
        g.flush()
        acked: dict[str, dict[str, bytes]] = {}
        errors: list[BaseException] = []
        stop = threading.Event()
        gaps: list[float] = []

        reads: list[tuple[float, float]] = []  # when each read started and ended

        th = threading.Thread(target=failover_writer, args=(client, "/ha", acked, errors, stop, gaps))
        th.start()
        poll_for(lambda: len(acked) >= 5, timeout=30, what="the writer to get going")
        rd = threading.Thread(target=failover_reader, args=(client, acked, errors, stop, reads))
        rd.start()
        g.queue_put("a1", b"a1").result()  # acknowledged by the peers, its commit waiting
        g.queue_put("doc", b"v2", replace=True).result()
        cluster.tracker.kill()
        killed_at, before = time.monotonic(), len(acked)
        poll_for(lambda: b"elected leader" in (tmp_path / "standby.log").read_bytes(), timeout=30, interval=0.02)
        elected_at = time.monotonic()
        poll_for(lambda: len(acked) >= before + 5 or errors, timeout=60, what="writes to resume on the standby")
        resumed = time.monotonic() - killed_at
        g.delete("base1")  # an unrelated call on the new leader: nothing to report
        g.queue_put("a2", b"a2")
        g.put("doc", b"v3", replace=True)  # under the lease the standby learned from the log
        g.close()
        stop.set()
        th.join(60)
        rd.join(60)
        assert not errors, errors
        # a read was waiting while no tracker served (the gap is 1-3 s: the election lease's remainder)
        assert any(t0 < elected_at and t1 > killed_at for t0, t1 in reads), (killed_at, elected_at, reads[-5:])
        with client.open("/ha/leased") as f:
            assert sorted(f.names()) == ["a1", "a2", "doc"]
            assert (f.get("a1"), f.get("a2"), f.get("doc")) == (b"a1", b"a2", b"v3")
        assert b"elected leader" in (tmp_path / "standby.log").read_bytes()
        # the operator's view (storetorrent status): who leads now, why, and etcd's members
        out = subprocess.run(
            [sys.executable, "-m", "st_py.cli", "status", "--format", "json", "--tracker", both],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        view = json.loads(out)["metadata_log"]
        assert [(t["addr"], t["role"]) for t in view["trackers"]] == [(f"127.0.0.1:{port_b}", "leader")], view
        last = view["failovers"][0]
        assert last["previous"] == cluster.tracker_addr and "lease ran out" in last["reason"], view
        assert [m["healthy"] for m in view["members"]] == [True] * 3, view
        for name, recs in acked.items():
            with client.open(name) as f:
                assert sorted(f.names()) == sorted(recs), name
                assert all(f.get(k) == v for k, v in recs.items()), name
        client.close()
        print(f"writes resumed {resumed:.1f} s after the leader's SIGKILL; longest create-to-close {max(gaps):.1f} s")
    finally:
        standby.kill()
        standby.wait()
        standby_log.close()


def test_a_leader_paused_past_its_lease_never_writes_again(make_cluster, etcd, tmp_path):
    """SIGSTOP the leader past its election lease: the standby is elected
    and serves. Woken (SIGCONT), the old leader finds its term over: a write
    sent to it alone is refused, never acknowledged, and it exits (75) so its
    supervisor starts it again as a standby; what the new leader acknowledged
    reads back, and nothing of the refused write is visible."""

    from st_py.client.client import Client
    from st_py.errors import StoreTorrentError

    args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "pause", "--init-cluster"]
    cluster = make_cluster(3, tracker_args=args)
    old_addr, old = cluster.tracker_addr, cluster.tracker.proc
    standby, port_b, log_b = _start_standby(cluster, tmp_path)
    try:
        cluster.set_standbys([f"127.0.0.1:{port_b}"])  # the peers announce to whichever answers
        stale = Client(old_addr)  # a client that knows only the old leader
        with stale.create("/pause/before", replication="x2") as f:
            f.put("b", b"before the pause")
        writing = stale.create("/pause/stale", replication="x2")
        writing.put("s0", b"acknowledged by the old leader")
        os.kill(old.pid, signal.SIGSTOP)
        try:
            poll_for(lambda: b"elected leader" in (tmp_path / "standby.log").read_bytes(), timeout=30)
            both = Client(f"{old_addr},127.0.0.1:{port_b}")
            with both.create("/pause/after", replication="x2") as f:
                f.put("a", b"on the new leader")
        finally:
            os.kill(old.pid, signal.SIGCONT)
        # the woken leader must not acknowledge anything: the put's commit is refused or unanswered
        with pytest.raises(StoreTorrentError):
            writing.put("s1", b"never acknowledged")
            writing.close()
        assert old.wait(timeout=30) == 75
        with both.open("/pause/after") as f:
            assert f.get("a") == b"on the new leader"
        with both.open("/pause/before") as f:
            assert f.get("b") == b"before the pause"
        with both.open("/pause/stale") as f:
            assert "s1" not in f.names()
        stale.close()
        both.close()
    finally:
        standby.kill()
        standby.wait()
        log_b.close()


def _log_state(etcd: EtcdCluster, cluster_id: str) -> tuple[int, int | None]:
    """(first index the etcd log still holds (0: none), the checkpoint's index or None)."""

    async def go() -> tuple[int, int | None]:
        session = EtcdSession(etcd.endpoints)
        try:
            log = await EtcdLog.open(session, cluster_id)
            last = await log.last_index()
            first = await log.read(max(last - 10_000, 1), 10_000)
            cp = await log.checkpoint()
            return (first[0].index if first else 0), (cp[0] if cp else None)
        finally:
            await session.close()

    return asyncio.run(go())


def test_a_standby_elected_after_compaction_knows_the_trackers_state(make_cluster, etcd, tmp_path):
    """The tracker's own state outlives the log's window: a directory's mode,
    a peer's drain state, the files, a writer lease and the space reservation
    of a file being written (not of one closed), all set before the
    entries that made them were compacted (--log-keep 1), are known to a
    standby with an empty state folder elected after the leader's SIGKILL
    (from the checkpoint the leader kept in etcd before compacting, and the
    namespace). Before, the standby served the directory as 0755 of no
    owner, the drained peer in service, the files of the log's window only,
    the lease free and nothing reserved."""
    from st_py.client.client import Client
    from st_py.errors import LeaseHeldError

    args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "cp", "--init-cluster", "--log-keep", "1"]
    cluster = make_cluster(3, tracker_args=args)
    standby, port_b, log_b = _start_standby(cluster, tmp_path)  # its state folder stays empty until elected
    cluster.set_standbys([f"127.0.0.1:{port_b}"])  # the peers announce to whichever answers
    c = Client(f"{cluster.tracker_addr},127.0.0.1:{port_b}")
    for i in range(3):
        with c.create(f"/st/a/old{i}", replication="x2") as f:
            f.put("r", f"old {i}".encode())
    c.chmod("/st/a", 0o700)
    drained = sorted(c.status().peers, key=lambda p: p.addr)[2]
    c.tracker.set_peer_state(drained.peer_id, "draining")
    with c.create("/st/leased", replication="x2") as f:
        f.put("doc", b"v0")
    holder = c.open("/st/leased")
    holder.acquire_lease(ttl=60)  # renewed after 20 s: not during this test
    reserving = c.create("/st/reserving", replication="x2", est_size=1_000_000)  # open: its space stays held
    with c.create("/st/closed", replication="x2", est_size=3_000_000) as f:  # closed: its reservation ended
        f.put("r", b"small")
    marked = _log_state(etcd, "cp")[0]
    n = 0

    def compacted() -> bool:  # appends drive the compaction (every 5 s): keep writing
        nonlocal n
        with c.create(f"/st/b/new{n}", replication="x2") as f:
            f.put("r", b"new")
        n += 1
        first, cp = _log_state(etcd, "cp")
        return first > marked + 5 and cp is not None

    try:
        poll_for(compacted, timeout=60, interval=0.5, what="the leader to checkpoint and compact its log")
        cluster.tracker.kill()
        poll_for(lambda: b"elected leader" in (tmp_path / "standby.log").read_bytes(), timeout=30)
        both = c
        poll_for(lambda: len(both.status().peers) == 3, timeout=30, what="the peers to announce to the new leader")
        st = both.status()
        assert st.files == 6 + n, st.files
        assert sum(p.reserved_bytes for p in st.peers) == 2 * 1_000_000, [p.reserved_bytes for p in st.peers]
        peers = {p.peer_id: p.drain_state for p in st.peers}
        assert peers.get(drained.peer_id) == "draining", peers
        modes = {e.name: e.mode for e in both.ls("/st")}
        assert modes.get("/st/a") == 0o700, modes
        with both.open("/st/leased") as other:
            with pytest.raises(LeaseHeldError):
                other.acquire_lease()
        holder.put("doc", b"v1", replace=True)  # the lease holder writes on, on the new leader
        holder.close()
        reserving.close()
        with both.open("/st/leased") as f:
            assert f.get("doc") == b"v1"
        with both.open("/st/a/old1") as f:
            assert f.get("r") == b"old 1"
        both.close()
    finally:
        standby.kill()
        standby.wait()
        log_b.close()
