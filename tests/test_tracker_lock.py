"""One tracker per namespace (docs/reliability.md): a second tracker on the
same namespace or state directory refuses to start with one line naming
the holder's pid and address; the lock goes with the holder, even by
SIGKILL."""

from __future__ import annotations

import subprocess
import sys

from conftest import poll_for

from st_py.deploy.cluster import read_cluster_file


def _tracker(root, state, timeout=30):
    return subprocess.run(
        [sys.executable, "-m", "st_py.tracker", "--root", str(root), "--state-dir", str(state), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_second_tracker_refuses_to_start(cluster, tmp_path):
    pid, addr = cluster.tracker.pid, cluster.tracker_addr
    for root, state in (
        (cluster.namespace, tmp_path / "other-state"),  # the same namespace
        (tmp_path / "other-ns", cluster.data_dir / "tracker"),
    ):  # the same state directory
        r = _tracker(root, state)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"pid {pid}" in lines[0] and addr in lines[0] and "one tracker per namespace" in lines[0]
    # the lock file is no name in the namespace
    c = cluster.client()
    assert [e.name for e in c.ls("/")] == []
    # a SIGKILLed tracker leaves no stale lock: its successor starts
    cluster.restart_tracker()
    assert cluster.tracker.pid != pid
    cluster.wait_for_peers(4)


def test_up_twice_gives_one_line(tmp_path, peer_bin):
    data = tmp_path / "st-data"
    up = subprocess.Popen(
        [sys.executable, "-m", "st_py.cli", "up", "--data", str(data), "--peers", "2", "--announce-interval", "0.3"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        info = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start")
        r = subprocess.run(
            [sys.executable, "-m", "st_py.cli", "up", "--data", str(data), "--peers", "2"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
        assert "another tracker" in err[0] and info["tracker"] in err[0]
        assert read_cluster_file(data) == info  # the refused up leaves the running one's file alone
    finally:
        up.terminate()
        up.wait(30)


def test_a_tracker_refuses_a_root_inside_or_around_a_served_namespace(cluster, tmp_path):
    """Namespaces never nest: a root inside the served one (also through a
    symlink) or containing it is refused in one line naming the holder."""
    pid, addr = cluster.tracker.pid, cluster.tracker_addr
    (tmp_path / "link").symlink_to(cluster.namespace)
    cases = (
        (cluster.namespace / "sub", "inside the namespace"),
        (tmp_path / "link" / "deeper" / "ns", "inside the namespace"),
        (cluster.data_dir, "around a namespace"),
        (tmp_path, "around a namespace"),
    )
    for i, (root, what) in enumerate(cases):
        r = _tracker(root, tmp_path / f"state-{i}")
        assert r.returncode != 0, (root, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert what in lines[0] and f"pid {pid}" in lines[0] and "namespaces never nest" in lines[0], lines[0]
        if what.startswith("inside"):
            assert addr in lines[0]
    # nothing was written into the served namespace
    assert [e.name for e in cluster.client().ls("/")] == []
