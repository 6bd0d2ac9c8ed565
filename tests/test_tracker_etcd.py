"""The tracker with its metadata log in etcd (docs/metadata-log.md): three
real etcd members, a real tracker and real peers. Losing the tracker's host
(its process, its state folder and its namespace) loses no acknowledged
record: the peers' mirrors bring each file back as their last pass saw it,
and the log in etcd brings it forward to every change acknowledged since."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys

import pytest
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
