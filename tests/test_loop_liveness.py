"""Liveness from the event loop (docs/reliability.md, "A wedged peer"): a
peer whose loop is blocked while its process stays alive stops announcing,
is failed by the tracker within the liveness window, reports itself fully
busy while it still announces, and reads go around it. Real tracker and
peers; the loop is blocked by the peer's ``--fault-loop-stall-file``."""

from __future__ import annotations

import json
import time
import urllib.request

from conftest import poll_for

STALL_LIMIT = 1.5  # s: --loop-stall-limit of the wedged peer (announces every 0.3 s)


def status(cluster) -> dict:
    with urllib.request.urlopen(f"http://{cluster.tracker.metrics_addr}/status.json", timeout=10) as r:
        return json.loads(r.read())


def peer_state(cluster, addr: str) -> dict:
    return next((p for p in status(cluster)["peers"] if p["addr"] == addr), {"alive": False, "load": 0.0})


def test_a_peer_with_a_blocked_loop_is_failed_and_avoided(make_cluster, tmp_path):
    cluster = make_cluster(3)
    stall = tmp_path / "stall-peer-2"
    cluster.peers[2].stop()
    wedged = cluster.start_peer(
        2, extra_args=["--fault-loop-stall-file", str(stall), "--loop-stall-limit", str(STALL_LIMIT)]
    ).addr
    poll_for(lambda: peer_state(cluster, wedged)["alive"], timeout=10, what="the restarted peer to be live")
    c = cluster.client()
    with c.create("/wedge/f", "x2") as f:
        for i in range(30):
            f.put(f"r{i}", f"record {i}".encode() * 100)
    window = status(cluster)["tracker"]["liveness_window_s"]

    stall.touch()  # the loop blocks in a handler; the process, its port and announcer thread live on
    t0 = time.monotonic()
    # while it still announces (up to STALL_LIMIT) the stuck turn counts as busy
    loads = []
    while time.monotonic() - t0 < STALL_LIMIT + window + 3:
        p = peer_state(cluster, wedged)
        loads.append(p["load"])
        if not p["alive"]:
            break
        time.sleep(0.1)
    failed_after = time.monotonic() - t0
    assert not peer_state(cluster, wedged)["alive"], f"still live {failed_after:.1f} s into the stall"
    assert failed_after <= STALL_LIMIT + window + 2.0, failed_after
    assert max(loads) >= 0.9, loads  # a stuck loop is not announced as idle
    assert cluster.peers[2].alive  # the process never died

    # reads go around it: every record from its other copy, none waiting for the wedged peer
    t1 = time.monotonic()
    with c.open("/wedge/f") as f:
        assert {f.get(f"r{i}") for i in range(30)} == {f"record {i}".encode() * 100 for i in range(30)}
    assert time.monotonic() - t1 < 5.0

    stall.unlink()  # the loop turns again: announces resume and the peer is live
    poll_for(lambda: peer_state(cluster, wedged)["alive"], timeout=10, what="the peer to be live again")
    with urllib.request.urlopen(f"http://{cluster.peers[2].metrics_addr}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    withheld = [ln for ln in metrics.splitlines() if ln.startswith("st_peer_loop_stalled_announces_total")]
    assert withheld and float(withheld[0].split()[-1]) >= 1, withheld


def test_a_busy_but_turning_loop_keeps_announcing(make_cluster):
    """Many short turns are not a stall: a peer under load stays live."""
    cluster = make_cluster(2, peer_args=["--loop-stall-limit", "1"])
    c = cluster.client()
    with c.create("/busy/f", "x2") as f:
        for i in range(2000):
            f.queue_put(f"r{i}", b"x" * 4096)
        f.flush()
    s = status(cluster)
    assert s["totals"]["live_peers"] == 2 and s["totals"]["failed_peers"] == 0
