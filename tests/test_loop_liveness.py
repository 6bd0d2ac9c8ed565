"""Liveness from the event loop (docs/reliability.md, "A wedged peer"): a
peer whose loop is blocked while its process stays alive stops announcing,
is failed by the tracker within the liveness window, reports itself fully
busy while it still announces, and reads go around it. Real tracker and
peers; the loop is blocked by the peer's ``--fault-loop-stall-file``, or its
thread alone is stopped from outside with ptrace, as a debugger would: the
loop then never comes back from ``epoll_wait`` (before the loop woke on its
own tick, such a peer announced on forever)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import poll_for
from helpers import metric_sample, metric_value, scrape_metrics, tracker_status

STALL_LIMIT = 1.5  # s: --loop-stall-limit of the wedged peer (announces every 0.3 s)


def peer_state(cluster, addr: str) -> dict:
    return next((p for p in tracker_status(cluster)["peers"] if p["addr"] == addr), {"alive": False, "load": 0.0})


# Timing is the point: the peer must be failed within the stall limit plus the liveness
# window, which a machine loaded by other work can stretch past the margin.
@pytest.mark.flaky(reruns=2)
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
    window = tracker_status(cluster)["tracker"]["liveness_window_s"]

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
    withheld = metric_sample(scrape_metrics(cluster.peers[2].metrics_addr), "st_peer_loop_stalled_announces_total")
    assert withheld >= 1, withheld


def test_a_busy_but_turning_loop_keeps_announcing(make_cluster):
    """Many short turns are not a stall: a peer under load stays live."""
    cluster = make_cluster(2, peer_args=["--loop-stall-limit", "1"])
    c = cluster.client()
    with c.create("/busy/f", "x2") as f:
        for i in range(2000):
            f.queue_put(f"r{i}", b"x" * 4096)
        f.flush()
    s = tracker_status(cluster)
    assert s["totals"]["live_peers"] == 2 and s["totals"]["failed_peers"] == 0


# ---- A loop thread stopped from outside the process -------------------------
# The loop wakes every tick and marks each turn; the announcer checks that mark,
# so a loop thread that does not come back from epoll_wait (stopped by a
# debugger, starved) is as stalled as one blocked in a handler. SIGSTOP would
# stop every thread, the announcer's too, so ptrace stops the loop's thread
# alone: PTRACE_SEIZE, then PTRACE_INTERRUPT puts just that thread in a
# ptrace-stop; PTRACE_DETACH lets it go on. Needs CAP_SYS_PTRACE (or a
# ptrace_scope that lets a parent trace its child).

PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000  # __WALL: wait for a thread of another process, not only a child


def loop_thread_id(pid: int) -> int:
    """The thread that runs the peer's event loop (named ``st-loop`` in main.cc)."""
    tids = [
        int(t.name)
        for t in Path(f"/proc/{pid}/task").iterdir()
        if (t / "comm").read_text(errors="replace").strip() == "st-loop"
    ]
    assert len(tids) == 1, f"threads named st-loop in {pid}: {tids}"
    return tids[0]


class ThreadStop:
    """Stops one thread of another process with ptrace until ``resume()``.
    Every ptrace call must come from the thread that seized: use one
    instance from one thread (the test's)."""

    def __init__(self, tid: int):
        self.tid = tid
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        self.libc.ptrace.restype = ctypes.c_long
        self.stopped = False

    def _ptrace(self, request: int, what: str) -> None:
        if self.libc.ptrace(request, self.tid, None, None) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"ptrace({what}, {self.tid}): {os.strerror(e)}")

    def stop(self) -> None:
        self._ptrace(PTRACE_SEIZE, "PTRACE_SEIZE")
        self.stopped = True
        self._ptrace(PTRACE_INTERRUPT, "PTRACE_INTERRUPT")
        tid, st = os.waitpid(self.tid, WALL)
        assert tid == self.tid and os.WIFSTOPPED(st), (tid, st)

    def resume(self) -> None:
        if self.stopped:
            self.stopped = False
            self._ptrace(PTRACE_DETACH, "PTRACE_DETACH")


def can_ptrace() -> bool:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except OSError:
        scope = 0
    return scope < 3 and (os.geteuid() == 0 or scope <= 1)


# Timing is the point of this test (failed within the stall limit plus the
# tracker's window) on a 2-core machine shared with other test runs: the
# margins are generous rather than the test retried.
@pytest.mark.skipif(not sys.platform.startswith("linux") or not can_ptrace(), reason="needs ptrace (Linux)")
@pytest.mark.parametrize("serving", [False, True], ids=["idle", "serving"])
@pytest.mark.flaky(reruns=2)  # timing is the point, as above
def test_a_peer_whose_loop_thread_is_stopped_is_failed_and_avoided(make_cluster, serving):
    cluster = make_cluster(3)
    cluster.peers[2].stop()
    wedged = cluster.start_peer(2, extra_args=["--loop-stall-limit", str(STALL_LIMIT)]).addr
    poll_for(lambda: peer_state(cluster, wedged)["alive"], timeout=10, what="the restarted peer to be live")
    peer = cluster.peers[2]
    records = {f"r{i}": f"record {i}".encode() * 100 for i in range(30)}
    c = cluster.client()
    with c.create("/stopped/f", "x2", blocksize=1) as f:  # records on every peer, the stopped one too
        for name, data in records.items():
            f.put(name, data)
    window = tracker_status(cluster)["tracker"]["liveness_window_s"]

    # serving: a reader goes on reading every record while the thread stops
    reading = threading.Event()
    wrong: list[str] = []
    reader = None
    if serving:
        # copy-rank order (no load balancing): the records whose first copy
        # is on the peer are read from it, so it is serving when it stops
        reader_client = cluster.client(balance_reads=False)

        def read_all() -> None:
            while not reading.is_set():
                try:
                    with reader_client.open("/stopped/f") as rf:
                        for name, data in records.items():
                            if rf.get(name) != data:
                                wrong.append(f"wrong bytes for {name}")
                except Exception as e:  # noqa: BLE001 (reported by the assertion below)
                    wrong.append(repr(e))

        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        before = metric_value(scrape_metrics(peer.metrics_addr), "st_peer_requests_total", type="GET")
        poll_for(
            lambda: (
                metric_value(scrape_metrics(peer.metrics_addr), "st_peer_requests_total", type="GET") > before + 5
                or wrong
            ),
            timeout=30,
            what="the peer to serve GETs",
        )
        assert not wrong, wrong[:5]

    stop = ThreadStop(loop_thread_id(peer.pid))
    try:
        stop.stop()  # the loop thread alone: the process, its sockets and announcer thread live on
        t0 = time.monotonic()
        poll_for(
            lambda: not peer_state(cluster, wedged)["alive"],
            timeout=STALL_LIMIT + window + 30,
            interval=0.1,
            what="the tracker to fail the peer whose loop thread is stopped",
        )
        failed_after = time.monotonic() - t0
        assert failed_after <= STALL_LIMIT + window + 4.0, failed_after
        assert peer.alive()  # the process never died
        assert "announces stop" in peer.tail(200)

        # reads go around it: every record from its other copy, none waiting for it
        t1 = time.monotonic()
        with c.open("/stopped/f") as f:
            assert {name: f.get(name) for name in records} == records
        assert time.monotonic() - t1 < 5.0
    finally:
        stop.resume()

    # the loop turns again: announces resume and the peer is live
    poll_for(lambda: peer_state(cluster, wedged)["alive"], timeout=20, what="the peer to be live again")
    poll_for(lambda: "turns again: announcing" in peer.tail(200), timeout=10, what="the log line")
    if reader is not None:
        reading.set()
        reader.join(60)
        assert not reader.is_alive()
        assert not wrong, wrong[:5]
