"""`storetorrent up` as a supervisor: a killed peer is restarted on its
address while the cluster keeps serving, and a restarted `up` comes back on
the same ports, its status page's too (docs/deployment.md, "A local
cluster"); its output and `storetorrent status` piped to a file are plain
lines, never wrapped."""

import json
import os
import re
import signal
import socket

import pytest
from conftest import poll_for
from helpers import children_of, cmdline, pid_alive, st, start_up, stop_up, up_peer_pid

from st_py.deploy.cluster import read_cluster_file
from st_py.deploy.ports import ephemeral_range


def _plain_lines(text: str) -> list[str]:
    """The lines of piped output: none empty, none ending in spaces."""
    lines = text.rstrip("\n").split("\n")
    assert all(line.strip() and line == line.rstrip() for line in lines), text
    return lines


def test_killed_peer_is_restarted_and_up_keeps_its_layout(tmp_path, peer_bin):
    data = tmp_path / "a-data-folder-with-a-long-name" / "st-data"  # its paths print whole, however short tmp_path is
    src = tmp_path / "shots"
    src.mkdir()
    for i in range(6):
        (src / f"{i}.bin").write_bytes(bytes([i]) * 500)
    printed = tmp_path / "up.out"
    up = start_up(data, out=printed)  # up chooses every port (a port picked here could be taken before up binds it)
    try:
        first = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start")
        status_port = int(first["status"].rsplit(":", 1)[1])
        # below the kernel's ephemeral ports: no port-0 bind or outgoing connection takes one while its daemon restarts
        below = ephemeral_range()[0]
        ports = [first["tracker"], *first["peers"], first["status"], first["s3"]]
        assert all(int(a.rsplit(":", 1)[1]) < below for a in ports), (ports, below)
        # what `up` printed to a file: one line each, the long paths whole, no empty line
        lines = _plain_lines(poll_for(lambda: "export STORETORRENT_TRACKER" in (t := printed.read_text()) and t))
        assert f"status   http://127.0.0.1:{status_port}/   (metrics: /metrics)" in lines
        assert f"namespace {data / 'namespace'}" in lines and len(str(data / "namespace")) > 70
        # `storetorrent status` into a pipe: a title, a header and one line per peer, however wide,
        # then one line of each class's expected durability
        table = _plain_lines(st("status", data=data).stdout)
        assert len(table) == 2 + 3 + 1 and table[0].startswith(
            "3 peers in service, 0 failed, 0 files; no record short of copies"
        )
        assert table[1].split() == [
            "name",
            "peer",
            "state",
            "up_s",
            "restarts",
            "records",
            "used_bytes",
            "free_bytes",
            "reserved_bytes",
            "load",
            "last_announce_s",
            "domain",
        ]
        assert table[5].startswith("durability, 3 peers failing once in") and "x3 MTTDL" in table[5]
        assert [re.split(r"\s+", row)[:3] for row in table[2:5]] == [
            [f"peer-{i}", a, "alive"] for i, a in sorted(enumerate(first["peers"]), key=lambda x: x[1])
        ]
        poll_for(lambda: up_peer_pid(up.pid, 1), what="peer-1 running")
        # a progress bar on a terminal; nothing of it (not even an empty line) in a pipe
        assert _plain_lines(st("put", "/sup/a", str(src), "--replication", "x2", data=data).stdout) == [
            "stored 6 records in /sup/a"
        ]
        old = up_peer_pid(up.pid, 1)
        os.kill(old, signal.SIGKILL)
        # The cluster keeps serving while peer-1 is down ...
        out = tmp_path / "out.bin"
        st("get", "/sup/a", "shots/4.bin", "-o", str(out), data=data)
        assert out.read_bytes() == bytes([4]) * 500
        # ... and peer-1 comes back, as the same address.
        new = poll_for(lambda: (p := up_peer_pid(up.pid, 1)) and p != old and p, timeout=30, what="peer-1 restarted")
        assert pid_alive(new)
        poll_for(
            lambda: sum(1 for p in _status_peers(data) if p["state"] == "alive") == 3,
            timeout=30,
            what="3 live peers again",
        )
        assert sorted(p["peer"] for p in _status_peers(data)) == sorted(first["peers"])
        restarts = {p["name"]: p["restarts"] for p in _status_peers(data)}
        assert restarts == {"peer-0": 0, "peer-1": 1, "peer-2": 0}  # the tracker saw the restart too
    finally:
        err = stop_up(up)
    assert "peer-1: exited" in err and "restarted (restart 1)" in err, err[-2000:]

    up = start_up(data, out=printed)  # the same ports after a restart of `up` itself, its status page's too
    try:
        again = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start again")
        assert again["tracker"] == first["tracker"]
        assert again["peers"] == first["peers"]
        assert again["status"] == f"127.0.0.1:{status_port}"
        assert f"status   http://127.0.0.1:{status_port}/   (metrics: /metrics)" in _plain_lines(
            poll_for(lambda: "export STORETORRENT_TRACKER" in (t := printed.read_text()) and t)
        )
        out = tmp_path / "out2.bin"
        st("get", "/sup/a", "shots/5.bin", "-o", str(out), data=data)
        assert out.read_bytes() == bytes([5]) * 500
    finally:
        stop_up(up)


@pytest.mark.parametrize(
    "flag, daemon, role",
    [("--port", "tracker", "port"), ("--metrics-port", "tracker", "metrics port"), ("--s3-port", "s3", "port")],
)
def test_up_exits_at_once_naming_a_port_it_was_given_that_is_taken(tmp_path, peer_bin, flag, daemon, role):
    """A port given to `up` that something else listens on: `up` exits at
    once (status 2) with one line naming the daemon and the port, and leaves
    no daemon running (it printed a traceback before; a daemon that neither
    printed its address nor exited kept it waiting)."""
    if daemon == "s3":
        pytest.importorskip("uvicorn")
    data = tmp_path / "st-data"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        up = start_up(data, flag, str(port))
        try:
            _, err = up.communicate(timeout=60)
        finally:
            if up.poll() is None:
                stop_up(up)
    assert up.returncode == 2, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"error: {daemon} cannot listen on 127.0.0.1:{port} (its {role}): address already in use; "
        f"give {flag} another port or 0 (a free one)"
    ]
    assert not (data / "cluster.json").exists()
    assert _running_in(data) == [], "up left daemons running"


def _running_in(data) -> list[int]:
    """Pids of processes whose command line names folder ``data``."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and str(data) in cmdline(int(d)):
            out.append(int(d))
    return out


def _status_peers(data) -> list[dict]:
    rows = json.loads(st("status", "--format", "json", data=data).stdout)
    return rows if isinstance(rows, list) else rows.get("peers", [])


def _restart_delay(sup) -> float:
    what = sup.events[-1][2]  # "exited (status -9); restarting in X s"
    return float(re.search(r"restarting in ([\d.]+) s", what).group(1))


def test_a_tracker_that_had_run_a_while_is_restarted_at_once_however_often_it_died(tmp_path, peer_bin):
    """Issue 39: SIGKILLs of the tracker 15 s apart left writes unavailable
    3.3, 5.8 and 10 s, because the backoff doubled and only reset after 60 s
    up. A daemon that had run a while is no crash loop: each such death costs
    one short restart; a daemon that dies soon after each start still backs
    off. Real processes, the supervisor's clock driven by the test."""
    from st_py.deploy.cluster import LocalCluster
    from st_py.deploy.supervisor import Supervisor

    now = [0.0]
    with LocalCluster(tmp_path / "c", n_peers=1) as c:
        sup = Supervisor(c, clock=lambda: now[0])
        sup.check()

        def kill_and_restart(ran_s: float) -> float:
            now[0] += ran_s
            c.tracker.kill()
            sup.check()  # found dead
            delay = _restart_delay(sup)
            now[0] += delay
            sup.check()  # restarted on its port
            assert c.tracker.alive() and sup.events[-1][2].startswith("restarted"), list(sup.events)[-3:]
            return delay

        assert [kill_and_restart(15.0) for _ in range(3)] == [0.2, 0.2, 0.2]
        assert [kill_and_restart(1.0) for _ in range(3)] == [0.4, 0.8, 1.6]  # a crash loop
        assert kill_and_restart(15.0) == 0.2
        with c.client() as cl:  # and it serves
            with cl.create("/sup/after", replication="x1") as f:
                f.put("a", b"x")
            with cl.open("/sup/after") as f:
                assert f.get("a") == b"x"


def _up_s3_pid(up_pid: int) -> int | None:
    for p in children_of(up_pid):
        if "st_integrations.s3" in cmdline(p):
            return p
    return None


def test_up_runs_an_s3_endpoint_it_restarts(tmp_path, peer_bin):
    """`storetorrent up` starts an S3 endpoint (development mode without
    --users), prints it with the daemons and keeps it in cluster.json;
    boto3 and the AWS CLI use it; a killed endpoint comes back on its port,
    and a restarted `up` serves S3 on the same port (docs/s3.md)."""
    import subprocess

    import boto3
    from botocore.config import Config

    data = tmp_path / "st-data"
    printed = tmp_path / "up.out"
    up = start_up(data, out=printed)
    try:
        first = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start")
        url = first["s3"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url or ""), first
        lines = _plain_lines(poll_for(lambda: "export STORETORRENT_TRACKER" in (t := printed.read_text()) and t))
        assert f"s3       {url}   (development mode: no keys checked)" in lines
        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            aws_access_key_id="dev",
            aws_secret_access_key="dev",
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}),
        )
        s3.create_bucket(Bucket="upb")
        s3.put_object(Bucket="upb", Key="run/a.txt", Body=b"through up")
        st("get", "/upb/run", "a.txt", "-o", str(tmp_path / "a.txt"), data=data)  # the CLI reads what S3 wrote
        assert (tmp_path / "a.txt").read_bytes() == b"through up"
        env = dict(
            os.environ,
            AWS_ACCESS_KEY_ID="dev",
            AWS_SECRET_ACCESS_KEY="dev",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=str(tmp_path / "none"),
            AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        )
        ls = subprocess.run(
            ["/usr/bin/aws", "--endpoint-url", url, "s3", "ls", "--recursive", "s3://upb/"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ls.returncode == 0 and ls.stdout.split()[-1] == "run/a.txt", ls.stderr
        old = poll_for(lambda: _up_s3_pid(up.pid), what="the S3 endpoint running")
        assert cmdline(old).count("--peer-data") == 3  # its 3 peers' copies read from their disks (docs/s3.md)
        assert "--metrics-port" in cmdline(old)
        os.kill(old, signal.SIGKILL)
        poll_for(lambda: (p := _up_s3_pid(up.pid)) and p != old, timeout=30, what="the S3 endpoint restarted")
        got = poll_for(
            lambda: _get_or_none(s3, "upb", "run/a.txt"), timeout=30, what="the restarted endpoint to answer"
        )
        assert got == b"through up"
        s3.close()
    finally:
        err = stop_up(up)
    assert "s3: exited" in err and "restarted (restart 1)" in err, err[-2000:]
    up = start_up(data, out=printed)
    try:
        again = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start again")
        assert again["s3"] == url
    finally:
        stop_up(up)


def _get_or_none(s3, bucket: str, key: str) -> bytes | None:
    from botocore.exceptions import EndpointConnectionError

    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except EndpointConnectionError:
        return None


def test_a_daemon_that_neither_listens_nor_exits_is_given_up_at_its_deadline(tmp_path):
    """`Daemon` waits ``ready_timeout`` for the ``listening on`` line, then
    kills the child and raises DaemonStartError (one line, its log named);
    before, it waited on the child's stdout as long as the child lived."""
    import sys
    import time

    from st_py.deploy.cluster import Daemon
    from st_py.errors import DaemonStartError

    script = (
        "import sys, time; print('starting', flush=True); print('stuck', file=sys.stderr, flush=True); time.sleep(60)"
    )
    began = time.monotonic()
    with pytest.raises(DaemonStartError) as e:
        Daemon("mute", [sys.executable, "-c", script], tmp_path / "mute.log", ready_timeout=2.0)
    assert time.monotonic() - began < 20
    assert str(e.value) == f"mute did not start (see {tmp_path / 'mute.log'}): stuck"
    assert e.value.daemon == "mute" and "stuck" in e.value.tail


def test_up_with_three_trackers_keeps_writing_through_the_leaders_kill(tmp_path, peer_bin):
    """`up --trackers 3` (issue 39): 3 real etcd members, a leader and two
    standbys, peers and clients given every tracker's address. The leader is
    SIGKILLed while a client writes: a tracker is elected, every closed file
    reads back, `status` names the leader and why the lead changed, and the
    supervisor starts the killed tracker again (it campaigns as the others).
    With one per-file tracker (`--file-trackers 1`): the files of its shard
    are written through the leader's per-file tracker before the kill and
    the new leader's after it (their log is in etcd too)."""
    pytest.importorskip("aetcd")
    from st_py.client.client import Client
    from st_py.deploy.etcd import find_etcd
    from st_py.tracker.shards import shard_of

    find_etcd()  # ./dev setup installs etcd-server
    data = tmp_path / "st-data"
    up = start_up(data, "--trackers", "3", "--file-trackers", "1", "--no-s3", "--repair-interval", "0")
    try:
        info = poll_for(lambda: read_cluster_file(data), timeout=90, what="storetorrent up --trackers 3 to start")
        addrs = info["tracker"].split(",")
        assert len(addrs) == 3, info
        c = Client(info["tracker"])
        written = {}
        for n in range(5):  # /ha/before4 and /ha/after4 are of shard 0, the others of shard 1
            with c.create(f"/ha/before{n}", replication="x2") as f:
                f.put("r", f"before {n}".encode())
            written[f"/ha/before{n}"] = f"before {n}".encode()

        def log_view():
            return json.loads(st("status", "--format", "json", data=data).stdout)["metadata_log"]

        view = poll_for(lambda: len((v := log_view())["trackers"]) == 3 and v, timeout=30, what="3 trackers listed")
        leader = next(t for t in view["trackers"] if t["role"] == "leader")
        assert leader["addr"] == addrs[0], view
        os.kill(leader["pid"], signal.SIGKILL)
        for n in range(5):  # through the failover: latency, no error
            with c.create(f"/ha/after{n}", replication="x2") as f:
                f.put("r", f"after {n}".encode())
            written[f"/ha/after{n}"] = f"after {n}".encode()
        for name, want in written.items():
            with c.open(name) as f:
                assert f.get("r") == want, name
        assert {shard_of(name, 2) for name in written} == {0, 1}, sorted(written)  # the master's and the other

        def all_back():  # the killed one restarted: a standby, or elected again (it campaigns like the others)
            v = log_view()
            roles = [t["role"] for t in v["trackers"]]
            return len(roles) == 3 and roles.count("leader") == 1 and v["failovers"][0]["previous"] == addrs[0] and v

        view = poll_for(all_back, timeout=60, what="three trackers again, one leader, after the kill")
        last = view["failovers"][0]
        assert "lease ran out" in last["reason"], last
        c.close()
    finally:
        err = stop_up(up)
    assert "tracker: exited (status -9)" in err, err[-2000:]
