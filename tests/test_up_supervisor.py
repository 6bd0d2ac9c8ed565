"""`storetorrent up` as a supervisor: a killed peer is restarted on its
address while the cluster keeps serving, and a restarted `up` comes back on
the same ports (docs/deployment.md, "A local cluster")."""

import json
import os
import signal
import subprocess
import sys

from conftest import poll_for
from st_py.cluster import read_cluster_file
from test_cli import children_of, pid_alive, st


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _peer_pid(up_pid: int, i: int) -> int | None:
    for p in children_of(up_pid):
        if f"peers/peer-{i} " in _cmdline(p) + " ":
            return p
    return None


def _start(data, *extra):
    return subprocess.Popen([sys.executable, "-m", "st_py.cli", "up", "--data", str(data), "--peers", "3",
                             "--announce-interval", "0.3", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(up):
    up.send_signal(signal.SIGINT)
    try:
        _, err = up.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        up.kill()
        _, err = up.communicate()
    return err


def test_killed_peer_is_restarted_and_up_keeps_its_layout(tmp_path, peer_bin):
    data = tmp_path / "st-data"
    src = tmp_path / "shots"
    src.mkdir()
    for i in range(6):
        (src / f"{i}.bin").write_bytes(bytes([i]) * 500)
    up = _start(data)
    try:
        first = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start")
        poll_for(lambda: _peer_pid(up.pid, 1), what="peer-1 running")
        st("put", "/sup/a", str(src), "--replication", "x2", data=data)
        old = _peer_pid(up.pid, 1)
        os.kill(old, signal.SIGKILL)
        # The cluster keeps serving while peer-1 is down ...
        out = tmp_path / "out.bin"
        st("get", "/sup/a", "shots/4.bin", "-o", str(out), data=data)
        assert out.read_bytes() == bytes([4]) * 500
        # ... and peer-1 comes back, as the same address.
        new = poll_for(lambda: (p := _peer_pid(up.pid, 1)) and p != old and p, timeout=30,
                       what="peer-1 restarted")
        assert pid_alive(new)
        poll_for(lambda: sum(1 for p in _status_peers(data) if p["state"] == "alive") == 3, timeout=30,
                 what="3 live peers again")
        assert sorted(p["peer"] for p in _status_peers(data)) == sorted(first["peers"])
    finally:
        err = _stop(up)
    assert "peer-1: exited" in err and "restarted (restart 1)" in err, err[-2000:]

    up = _start(data)  # the same ports after a restart of `up` itself
    try:
        again = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start again")
        assert again["tracker"] == first["tracker"]
        assert again["peers"] == first["peers"]
        out = tmp_path / "out2.bin"
        st("get", "/sup/a", "shots/5.bin", "-o", str(out), data=data)
        assert out.read_bytes() == bytes([5]) * 500
    finally:
        _stop(up)


def _status_peers(data) -> list[dict]:
    rows = json.loads(st("status", "--format", "json", data=data).stdout)
    return rows if isinstance(rows, list) else rows.get("peers", [])
