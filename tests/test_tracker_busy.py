"""A busy tracker is not a dead one (issue 38, item 7): a read waits within
its deadline for a tracker that is slow to answer, and when the deadline is
spent the error says whether the tracker is busy (running, not answering in
time) or unreachable (nothing at its address)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from st_py.errors import TrackerBusyError, TrackerUnavailableError
from st_py.wire.tracker_client import TrackerClient


def test_a_stopped_tracker_is_busy_and_a_killed_one_unreachable(make_cluster):
    cluster = make_cluster(1)
    pid = cluster.tracker.pid
    t = TrackerClient(cluster.tracker_addr, timeout=4.0, tls=cluster.client_tls)
    t.list("/")  # connected: the channel is ready

    # Stopped for less than the deadline: the read waits and succeeds.
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        start = time.monotonic()
        t.status()
        assert time.monotonic() - start >= 0.9
    finally:
        resume.join()

    # Stopped past the deadline: the tracker is busy, not gone.
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(TrackerBusyError) as busy:
            t.list("/", names_only=True)
    finally:
        os.kill(pid, signal.SIGCONT)
    e = busy.value
    assert e.busy and e.address == cluster.tracker_addr and e.timeout == 4.0
    assert "is running but did not answer List within 4 s" in str(e)
    assert "longer timeout" in str(e) and "is it running" not in str(e)
    t.list("/")  # answers again

    # Killed: unreachable, said quickly (a short reconnect grace, not the deadline).
    cluster.tracker.kill()
    start = time.monotonic()
    with pytest.raises(TrackerUnavailableError) as gone:
        t.list("/")
    assert time.monotonic() - start < 3.0
    assert not isinstance(gone.value, TrackerBusyError) and not gone.value.busy
    assert "unreachable" in str(gone.value) and "is it running" in str(gone.value)
    t.close()


def test_a_read_right_after_a_tracker_restart_waits_for_the_channel(make_cluster):
    """A read that failed while the tracker was down leaves gRPC's channel
    backing off; once the tracker listens again, a read waits for the
    channel within its deadline instead of failing at once as unreachable."""
    cluster = make_cluster(1)
    t = TrackerClient(cluster.tracker_addr, timeout=10.0, tls=cluster.client_tls)
    t.list("/")
    for _ in range(3):
        cluster.tracker.kill()
        with pytest.raises(TrackerUnavailableError) as gone:
            t.list("/")  # refused: the channel backs off
        assert not gone.value.busy
        cluster.start_tracker()
        t.list("/")  # listening again: waits for the channel, within the deadline
        t.status()
    t.close()
