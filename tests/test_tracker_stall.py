"""The tracker's own stalls are not peer failures, and the failure history
survives a tracker restart (docs/reliability.md)."""

from __future__ import annotations

import os
import signal
import time

from conftest import poll_for
from helpers import tracker_status


def test_a_tracker_paused_past_the_window_fails_no_peer(make_cluster):
    cluster = make_cluster(4)  # announces every 0.3 s: a liveness window of 0.9 s
    poll_for(lambda: tracker_status(cluster)["totals"]["live_peers"] == 4, what="4 live peers")
    os.kill(cluster.tracker.pid, signal.SIGSTOP)
    try:
        time.sleep(4.0)  # past the window (and 4 times the shortest stall)
    finally:
        os.kill(cluster.tracker.pid, signal.SIGCONT)
    s = tracker_status(cluster)
    assert s["totals"]["live_peers"] == 4 and s["totals"]["failed_peers"] == 0
    kinds = [e["kind"] for e in s["recent_failures"]]
    assert "failed" not in kinds and "tracker-stall" in kinds
    c = cluster.client()
    with c.create("/stall/a", "x3") as f:  # the scheduler sees every peer
        f.put("r", b"data")
    # a peer that really dies is still failed
    dead = cluster.kill_peer(0)
    s = poll_for(
        lambda: (lambda s: s if s["totals"]["failed_peers"] == 1 else None)(tracker_status(cluster)),
        what="the killed peer to be failed",
    )
    assert any(e["kind"] == "failed" and e["addr"] == dead for e in s["recent_failures"])


def test_failure_history_survives_a_tracker_restart(make_cluster):
    cluster = make_cluster(3)
    dead = cluster.kill_peer(2)
    poll_for(
        lambda: any(e["kind"] == "failed" and e["addr"] == dead for e in tracker_status(cluster)["recent_failures"]),
        what="the failure event",
    )
    before = [e for e in tracker_status(cluster)["recent_failures"] if e["addr"] == dead]
    cluster.restart_tracker()
    after = tracker_status(cluster)["recent_failures"]
    assert [(e["kind"], e["addr"], e["detail"]) for e in before] == [
        (e["kind"], e["addr"], e["detail"]) for e in after if e["addr"] == dead
    ][: len(before)]
