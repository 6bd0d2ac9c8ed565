"""The tracker with its metadata log in etcd (docs/metadata-log.md): three
real etcd members, a real tracker and real peers. Losing the tracker's host
(its process, its state folder and its namespace) loses no acknowledged
record: the peers' mirrors bring each file back as their last pass saw it,
and the log in etcd brings it forward to every change acknowledged since."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import poll_for
from test_recover import _infofile_state, _recover, _wait_for_mirrors

from st_py.core.infofile import InfofileReader
from st_py.deploy.etcd import EtcdCluster, find_etcd

try:
    find_etcd()
    from st_py.tracker.log.etcd_log import EtcdLog  # aetcd: the [ha] extra
    from st_py.tracker.log.etcd_session import EtcdSession
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)


@pytest.fixture
def etcd(tmp_path):
    with EtcdCluster(tmp_path / "etcd", 3) as c:
        yield c


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
    cluster.wait_for_peers(3)
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


def _swap(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def _start_standby(cluster, tmp_path):
    """A second tracker of ``cluster``'s etcd cluster on the same namespace,
    with its own state folder and port; returns (process, port, its log
    file), once it says it campaigns as a standby."""
    from st_py.deploy.ports import choose_ports

    # known before it listens (it listens once elected), so chosen as `up` chooses its
    # daemons' ports: below the ephemeral range no port-0 bind or connection is given
    (port,) = choose_ports([1])
    argv = _swap(_swap(cluster.tracker.argv, "--state-dir", str(tmp_path / "state-b")), "--port", str(port))
    argv = _swap(argv, "--metrics-port", "0")
    out = (tmp_path / "standby.log").open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    poll_for(lambda: b"a standby until elected" in (tmp_path / "standby.log").read_bytes(), timeout=30)
    return proc, port, out


def test_a_standby_takes_over_when_the_leader_is_killed(make_cluster, etcd, tmp_path):
    """Two trackers on one namespace, the log in etcd: the leader serves, the
    standby waits to be elected and does not listen. Peers and a client are
    given both addresses. A writer loops (create, queue_put, close) while
    the leader is SIGKILLed: the standby is elected once the leader's lease
    runs out, applies what the log holds, and serves; the writer sees
    latency, no error, and every record whose close() returned reads back."""

    from st_py.client.client import Client

    args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "ha", "--init-cluster"]
    cluster = make_cluster(3, tracker_args=args)
    standby, port_b, standby_log = _start_standby(cluster, tmp_path)
    try:
        both = f"{cluster.tracker_addr},127.0.0.1:{port_b}"
        cluster.standby_addrs = [f"127.0.0.1:{port_b}"]
        for i in range(3):  # the peers announce to whichever of the two answers
            cluster.kill_peer(i)
            cluster.start_peer(i)
        cluster.wait_for_peers(3)
        client = Client(both)
        acked: dict[str, dict[str, bytes]] = {}
        errors: list[BaseException] = []
        stop = threading.Event()
        gaps: list[float] = []

        def writer() -> None:
            n = 0
            while not stop.is_set():
                name = f"/ha/f{n:04d}"
                recs = {f"r{i}": f"{name} {i}".encode() for i in range(20)}
                t0 = time.monotonic()
                try:
                    with client.create(name, replication="x2") as f:
                        for k, v in recs.items():
                            f.queue_put(k, v)
                except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
                    errors.append(e)
                    return
                gaps.append(time.monotonic() - t0)
                acked[name] = recs
                n += 1

        th = threading.Thread(target=writer)
        th.start()
        poll_for(lambda: len(acked) >= 5, timeout=30, what="the writer to get going")
        cluster.tracker.kill()
        killed_at, before = time.monotonic(), len(acked)
        poll_for(lambda: len(acked) >= before + 5 or errors, timeout=60, what="writes to resume on the standby")
        resumed = time.monotonic() - killed_at
        stop.set()
        th.join(60)
        assert not errors, errors
        assert b"elected leader" in (tmp_path / "standby.log").read_bytes()
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
        cluster.standby_addrs = [f"127.0.0.1:{port_b}"]
        for i in range(3):
            cluster.kill_peer(i)
            cluster.start_peer(i)
        cluster.wait_for_peers(3)
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
