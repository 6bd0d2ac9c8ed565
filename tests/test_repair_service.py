"""The repair service (`storetorrent repair --watch`, deploy/storetorrent-repair.service)
reacts to the cluster at once, and the tracker says how many records are
short of copies (docs/operations.md, "Status page"; docs/replication.md,
"Repair"), against real trackers and peers.

With a full pass only every hour (`--interval 3600`), a peer that returns
after missing its copies gets them within seconds (it catches up), and a
peer failed longer than `--failed-after` has its copies restored elsewhere
within seconds: only the service's looks at the tracker's status can start
those passes. Meanwhile the tracker counts the records short of copies
itself, from the infofiles, and shows the service's progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import poll_for
from helpers import infofile_copies, stop_child, tracker_status, write_with_pending

from st_py.maintenance.repair import ClusterLook, PeerLook, wake_reasons

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def start_watch():
    """Factory: ``start_watch(cluster, *args)`` starts `storetorrent repair
    --watch` against the cluster; one still running at the end is killed."""
    started: list[subprocess.Popen] = []

    def start(cluster, *args: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.Popen(
            [sys.executable, "-m", "st_py.cli", "repair", "--watch", "--tracker", cluster.tracker_addr, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate()


def stop_watch(p: subprocess.Popen) -> str:
    """SIGTERM (as systemd stops the unit): it must exit 0; returns its stderr."""
    err, killed = stop_child(p, signal.SIGTERM, 60)
    if killed:
        raise AssertionError(f"the repair service did not stop on SIGTERM:\n{err[-3000:]}")
    assert p.returncode == 0, err[-3000:]
    return err


def test_a_returning_peer_catches_up_at_once(make_cluster, start_watch):
    """x3 on 3 peers, one stopped: async records are committed with their
    copy on it pending, and no other peer can take that copy. The tracker
    counts them short of copies; the repair service (started while the
    peer is down, full passes hourly) leaves them pending, and stores every
    one on the peer within seconds of its return."""
    # announces every 2 s: the stopped peer stays live to the tracker (and in
    # the writer's plan) for about 6 s while the writer starts on a loaded
    # machine (with 0.3 s it could be failed before the file was made)
    cluster = make_cluster(3, announce_interval=2.0)
    c = cluster.client()
    stopped = cluster.peers[1]
    name = "/svc/catch-up"
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        write_with_pending(cluster.tracker_addr, cluster.client_tls, name, "x3")
        with c.open(name) as f:
            path, stopped_idx = f.infofile_path, next(i for i, p in f.peers.items() if p.addr == stopped.addr)
        _, pending = infofile_copies(path)
        # copies pending on the stopped peer, and maybe on live ones the writer had no time to report
        on_stopped = {(n, r) for n, ranks in pending.items() for r, p in ranks.items() if p == stopped_idx}
        waiting = {n for n, _ in on_stopped}  # records only the stopped peer can complete
        assert len(waiting) >= 5
        # The tracker's own count (refreshed every few seconds, at once when the live peers change).
        st = poll_for(
            lambda: (s := c.status()).records_short == len(pending) and s.files_short == 1 and s,
            timeout=20,
            what="the tracker to count the records short of copies",
        )
        assert st.records_pending == len(pending) and 0 <= st.short_age_s < 10
        assert not st.repair.repairer  # no repair service has reported yet
        # The service starts while the peer is down to the tracker (its docstring's case): started
        # earlier, on a loaded machine, its first pass sent the copies to the stopped peer (still
        # live to the tracker) and waited 30 s for replies (a clean CI run, 2026-11-29).
        poll_for(lambda: c.status().alive_peers == 2, timeout=30, what="the tracker to fail the stopped peer")
        # what the service starts from: a stored-copies report the writer sent just before it
        # died may have reached the tracker after the first look (a loaded machine, CI 2026-12-01)
        _, pending = infofile_copies(path)
        on_stopped = {(n, r) for n, ranks in pending.items() for r, p in ranks.items() if p == stopped_idx}
        waiting = {n for n, _ in on_stopped}
        watcher = start_watch(cluster, "--interval", "3600", "--poll", "0.2", "--failed-after", "3600")
        st = poll_for(
            lambda: (s := c.status()).repair.passes >= 1 and not s.repair.running and s,
            timeout=90,
            what="the repair service's first pass (the peer still down)",
        )
        # it never waited on the stopped peer
        assert st.repair.reason == "start" and st.repair.pass_seconds < 20, st.repair
        assert st.repair.copies_stored == sum(len(r) for r in pending.values()) - len(on_stopped)
        assert st.repair.records_left == len(waiting)  # no live peer holding no copy: they wait for the peer
        poll_for(
            lambda: c.status().records_short == len(waiting),
            timeout=20,
            what="the tracker to count only the records waiting for the stopped peer",
        )
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    try:
        st = poll_for(
            lambda: (s := c.status()).repair.passes >= 2 and not s.repair.running and s,
            timeout=30,
            what="a repair pass when the peer returned",
        )
        assert "returned" in st.repair.reason and stopped.addr in st.repair.reason, st.repair
        assert st.repair.copies_stored == len(on_stopped) and st.repair.records_left == 0
        stored, left = infofile_copies(path)
        assert left == {}
        # the returning peer caught up: each copy pending for it is stored on it
        assert all(stored[n][r] == stopped_idx for n, r in on_stopped)
        poll_for(lambda: c.status().records_short == 0, timeout=20, what="the tracker to count no record short")
        s = tracker_status(cluster)
        assert s["copies"]["records_short"] == 0 and s["copies"]["counted"]
        assert s["repair"]["passes"] >= 2 and s["repair"]["copies_stored"] == len(on_stopped)
        with c.open(name) as f:
            for n in sorted(waiting)[:5]:
                assert f.get(n) == (f"{int(n[1:])}:".encode() * 3000)[:3000]
    finally:
        err = stop_watch(watcher)
        print("----- repair --watch stderr -----\n" + err[-6000:])  # shown if the test fails
    assert "repair pass (peer" in err and "returned" in err, err[-2000:]


def test_a_peer_failed_longer_than_failed_after_is_restored_at_once(make_cluster, start_watch):
    """A peer SIGKILLed and failed longer than --failed-after (2 s): the
    repair service restores its copies on live peers within seconds, with
    full passes only hourly; the status page shows the count going to 0 and
    the pass that did it."""
    cluster = make_cluster(4)
    c = cluster.client()
    data = {f"r{i:04d}": os.urandom(1500) for i in range(200)}
    with c.create("/svc/lost", "x2", blocksize=8) as f:
        for n, v in data.items():
            f.queue_put(n, v)
    watcher = start_watch(cluster, "--interval", "3600", "--poll", "0.2", "--failed-after", "2")
    try:
        poll_for(lambda: c.status().repair.passes >= 1, timeout=90, what="the repair service's first pass")
        with c.open("/svc/lost") as f:
            path = f.infofile_path
            lost_idx = next(i for i, p in f.peers.items() if p.addr == cluster.peer_addrs[3])
        on_lost = {n for n, ranks in infofile_copies(path)[0].items() if lost_idx in ranks.values()}
        assert on_lost
        lost = cluster.kill_peer(3)
        # short of copies while the peer is failed, then restored elsewhere
        s = poll_for(
            lambda: (s := tracker_status(cluster))["copies"]["records_short"] == len(on_lost) and s,
            timeout=20,
            what="the tracker to count the lost peer's records short of copies",
        )
        assert s["copies"]["files_short"] == 1
        st = poll_for(
            lambda: (s := c.status()).records_short == 0 and s.repair.passes >= 2 and s,
            timeout=40,
            what="the repair service to restore the lost peer's copies",
        )
        assert "failed longer than --failed-after" in st.repair.reason and lost in st.repair.reason
        assert st.repair.copies_restored == len(on_lost) and st.repair.records_left == 0
        stored, pending = infofile_copies(path)
        assert pending == {} and all(len(set(r.values())) == 2 and lost_idx not in r.values() for r in stored.values())
        with c.open("/svc/lost") as f:
            for n in sorted(on_lost)[:10]:
                assert f.get(n) == data[n]
    finally:
        stop_watch(watcher)


def test_the_count_is_cached_not_made_per_request(make_cluster):
    """Status requests in a row read one count (its time does not move), and
    /metrics has it too."""
    cluster = make_cluster(2)
    c = cluster.client()
    with c.create("/svc/cache", "x2") as f:
        f.put("a", b"A")
    first = poll_for(
        lambda: (s := tracker_status(cluster))["copies"]["files_counted"] == 1 and s,
        timeout=15,
        what="a count with the file",
    )
    again = [tracker_status(cluster)["copies"] for _ in range(10)]
    assert len({a["counted_at"] for a in again}) <= 2  # one count, or a refresh in between (every 5 s)
    assert first["copies"]["records_short"] == 0 and first["copies"]["count_seconds"] < 5
    with urllib.request.urlopen(f"http://{cluster.tracker.metrics_addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert "st_tracker_records_short_of_copies 0.0" in text and "st_tracker_files_short_of_copies 0.0" in text


def _look(peers, pending=0):
    return ClusterLook({p.peer_id: p for p in peers}, pending)


def test_wake_reasons():
    a = PeerLook("id-a", "h:1", "peer-0", True, 0, False)
    b = PeerLook("id-b", "h:2", "peer-1", False, 0, False)
    before = _look([a, b])
    assert wake_reasons(before, before) == []
    assert wake_reasons(before, _look([a, PeerLook("id-b", "h:2", "peer-1", True, 1, False)])) == [
        "peer peer-1 (h:2) returned"
    ]
    assert wake_reasons(before, _look([PeerLook("id-a", "h:1", "peer-0", True, 1, False), b])) == [
        "peer peer-0 (h:1) restarted"
    ]
    assert wake_reasons(before, _look([a, PeerLook("id-b", "h:2", "", False, 0, True)])) == [
        "peer h:2 failed longer than --failed-after"
    ]
    c = PeerLook("id-c", "h:3", "peer-2", True, 0, False)
    assert wake_reasons(before, _look([a, b, c], pending=4)) == [
        "peer peer-2 (h:3) joined",
        "4 records with a copy pending",
    ]
    assert wake_reasons(_look([a, b], pending=4), _look([a, b], pending=2)) == []
    # failed and back between two looks (both saw it alive: the first look came before a
    # 30 s pass that waited on it, the second after its return): the tracker's count says so
    back = PeerLook("id-a", "h:1", "peer-0", True, 0, False, returns=1)
    assert wake_reasons(_look([a, b]), _look([back, b])) == ["peer peer-0 (h:1) returned"]
