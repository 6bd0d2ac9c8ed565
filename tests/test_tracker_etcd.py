"""The tracker with its metadata log in etcd (docs/metadata-log.md): three
real etcd members, a real tracker and real peers. Losing the tracker's host
(its process, its state folder and its namespace) loses no acknowledged
record: the peers' mirrors bring each file back as their last pass saw it,
and the log in etcd brings it forward to every change acknowledged since."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from test_recover import _infofile_state, _recover, _wait_for_mirrors

from st_py.deploy.etcd import EtcdCluster, find_etcd

try:
    find_etcd()
    import aetcd  # noqa: F401  (the [ha] extra)
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)


@pytest.fixture
def etcd(tmp_path):
    with EtcdCluster(tmp_path / "etcd", 3) as c:
        yield c


def test_the_tracker_host_lost_loses_no_acknowledged_record(make_cluster, etcd):
    tracker_args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "lab", "--init-cluster"]
    cluster = make_cluster(3, peer_args=["--mirror-interval", "0.2"], tracker_args=tracker_args)
    c = cluster.client()
    first = {f"a/{i:03d}": f"first {i} ".encode() * (i % 7 + 1) for i in range(60)}
    with c.create("/lab/f", replication="x2") as f:
        for k, v in first.items():
            f.queue_put(k, v)
    _wait_for_mirrors(cluster, ["/lab/f"])
    # From now on the peers' mirrors lag: each peer restarts with passes an hour apart (its
    # first pass, at start, copies the infofile as it is now).
    cluster.peer_args = ["--mirror-interval", "3600"]
    for i in range(3):
        cluster.kill_peer(i)
        cluster.start_peer(i)
    cluster.wait_for_peers(3)
    mirrored = _infofile_state(cluster, "/lab/f")[1]

    later = {f"b/{i:03d}": f"later {i} ".encode() * (i % 5 + 1) for i in range(80)}
    with c.open("/lab/f") as f:
        for k, v in later.items():
            f.queue_put(k, v)
        f.flush()
        f.delete("a/000")
    c.snapshot("/lab/f", "s1")
    expect = {**{k: v for k, v in first.items() if k != "a/000"}, **later}
    assert _infofile_state(cluster, "/lab/f")[1] > mirrored  # the mirrors are behind: the test proves something

    # The tracker's host is lost: process, state folder and namespace.
    cluster.tracker.kill()
    shutil.rmtree(cluster.namespace)
    shutil.rmtree(cluster.data_dir / "tracker")
    cluster.start_tracker()
    cluster.wait_for_peers(3)
    rc, report = _recover(cluster)
    assert rc == 0, report
    (restored,) = report["files"]
    assert restored["outcome"] == "restored" and "from the metadata log" in restored["detail"], restored

    c2 = cluster.client()
    with c2.open("/lab/f") as f:
        assert sorted(f.names()) == sorted(expect)
        assert all(f.get(k) == v for k, v in expect.items())
        local = f.get_local()
        assert sorted(r.name for r in local) == sorted(expect)
    assert [s.name for s in c2.snapshots("/lab/f")] == ["s1"]
    # and writes go on
    with c2.open("/lab/f") as f:
        f.put("c/after", b"after the loss")
    with c2.open("/lab/f") as f:
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
