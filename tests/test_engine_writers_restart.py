"""The Ray and Dask writers across a restart of the embedded tracker (issue
39, "Writers survive a restart and a failover of the tracker"; the failover
of replicated trackers is in tests/test_failover_ways_in.py). One tracker
with its local log and four peers; each job overwrites a file that holds an
earlier job's record (``mode="overwrite"``, the writers' replacement) while
the tracker is SIGKILLed and started again 1 s later, as the supervisor of
``storetorrent up`` restarts it: once while the job's write tasks run, once
as the driver commits. A restart is latency for the job: it finishes, and
every row it wrote reads back once through the Client and both readers, the
old record gone (tests/engine_jobs.py holds the outcome to the rule)."""

from __future__ import annotations

import time

import pytest
from engine_jobs import (
    check_overwritten,
    dask_job,
    kill_once,
    killing_tasks,
    ray_job,
    recover_when_killed,
    write_old,
)

pytest.importorskip("dask.dataframe")


@pytest.mark.timeout(600)
def test_the_ray_and_dask_writers_overwrite_across_tracker_restarts(cluster, local_ray, tmp_path):
    client = cluster.client()
    tracker = cluster.tracker_addr

    def restart() -> None:
        cluster.tracker.kill()  # reaped (it was SIGKILLed by the job's hook)
        time.sleep(1.0)  # the supervisor's first backoff
        cluster.start_tracker()

    for job, where in [("dask", "tasks"), ("ray", "tasks"), ("ray", "commit")]:
        name = f"/restart/{job}-{where}"
        old = write_old(client, name)
        marker, pid = tmp_path / f"killed-{job}-{where}", cluster.tracker.proc.pid
        errors: list[BaseException] = []
        recovering = recover_when_killed(marker, restart, errors)
        try:
            if job == "dask":
                outcome = dask_job(name, tracker, killing_tasks(pid, marker))
            elif where == "tasks":
                outcome = ray_job(name, tracker, hook=killing_tasks(pid, marker))
            else:
                outcome = ray_job(name, tracker, at_commit=lambda: kill_once(pid, marker))
        except Exception as e:  # noqa: BLE001 - held to the rule below
            outcome = e
        recovering.join(120)
        assert marker.exists() and not recovering.is_alive() and not errors, (name, errors)
        cluster.wait_for_peers(4)
        check_overwritten(client, tracker, name, outcome, old)
        assert not isinstance(outcome, BaseException), f"{name}: a restart of the tracker failed the job: {outcome!r}"
