"""The Ray and Dask writers' jobs with the tracker killed under them (issue
39: writers survive a restart and a failover of the tracker), shared by
tests/test_engine_writers_restart.py (the embedded tracker SIGKILLed and
started again) and tests/test_failover_ways_in.py (the leader of replicated
trackers SIGKILLed).

Each job overwrites a file that holds an earlier job's records
(``mode="overwrite"``: the writers' way of replacing a file's records). The
tracker is SIGKILLed at a chosen point of the job: while its write tasks run
(the first task to start kills it, by pid: Ray's tasks run in other
processes) or as the driver commits. :func:`check_overwritten` then holds
the outcome to the rule: the job finished and every row it wrote reads back
once, with its bytes, through the Client, the Dask reader and the Ray
reader, the old records gone; or it raised a StoreTorrentError and the file
reads as before, whole. Never a success with rows lost or doubled, never a
mix of old and new.
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

ROWS = 8_000
PARTS = 16
FRAME = pd.DataFrame({"row": range(ROWS), "part": [i * PARTS // ROWS for i in range(ROWS)]})
OLD = FRAME.head(100).assign(row=lambda d: d["row"] + 1_000_000)  # the earlier job's rows: none of FRAME's


def kill_once(pid: int, marker: Path) -> None:
    """SIGKILL ``pid`` once across processes (the first task to call this
    claims the kill), then make ``marker``: the tracker is dead by then."""
    try:
        os.close(os.open(marker.with_name(marker.name + ".claimed"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(pid, signal.SIGKILL)
    marker.touch()


def killing_tasks(pid: int, marker: Path, pause: float = 0.15):
    """A partition function for ``map_partitions`` / ``map_batches``: the
    first call SIGKILLs the tracker (``pid``); every call takes ``pause``
    seconds, so the job's other tasks run while the tracker is down."""

    def hook(df, partition_info=None):
        kill_once(pid, marker)
        time.sleep(pause)
        return df

    return hook


def waiting_tasks(started: Path, marker: Path, pause: float = 0.15):
    """A partition function: each call makes ``started``, waits (up to 60 s)
    until ``marker`` exists (the tracker was killed by another job), then
    takes ``pause`` seconds: the job's tasks all run across the kill."""

    def hook(df, partition_info=None):
        started.touch()
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(pause)
        return df

    return hook


def recover_when_killed(marker: Path, recover, errors: list) -> threading.Thread:
    """A started thread that waits for ``marker`` (the tracker was killed),
    then calls ``recover()`` (start the tracker again, or wait for the
    standby's election); its error goes into ``errors``."""

    def run() -> None:
        try:
            deadline = time.monotonic() + 300
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            recover()
        except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def dask_job(name: str, tracker: str, hook) -> int:
    """``to_storetorrent`` of :data:`FRAME` (``PARTS`` partitions, each
    through ``hook``) into ``name``, mode overwrite; records committed."""
    import dask.dataframe as dd

    from st_integrations.dask_writer import to_storetorrent

    ddf = dd.from_pandas(FRAME, npartitions=PARTS).map_partitions(hook, meta=FRAME.head(0), token="kill-hook")
    return to_storetorrent(ddf, name, tracker=tracker, mode="overwrite")


def ray_job(name: str, tracker: str, hook=None, at_commit=None) -> int:
    """Ray's writer: :data:`FRAME` in ``PARTS`` blocks (each through
    ``hook``) into ``name`` by a ``StoreTorrentDatasink``, mode overwrite;
    ``at_commit()`` is called on the driver as the job's commit starts.
    Returns the records committed."""
    import sys

    import ray
    import ray.cloudpickle

    from st_integrations.ray_writer import StoreTorrentDatasink

    # Ray's workers cannot import this module (tests/ is on the driver's path only): its hooks
    # and sink go to them by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    class Sink(StoreTorrentDatasink):
        def on_write_complete(self, write_result) -> None:
            if at_commit is not None:
                at_commit()
            super().on_write_complete(write_result)

    ds = ray.data.from_pandas(FRAME).repartition(PARTS)
    if hook is not None:
        ds = ds.map_batches(hook, batch_format="pandas")
    sink = Sink(name, tracker=tracker, mode="overwrite")
    ds.write_datasink(sink)
    return sink.committed


def write_old(client, name: str) -> list[str]:
    """The earlier job: :data:`OLD` as one Parquet record of ``name``
    (x2); returns the file's names."""
    import pyarrow as pa

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(OLD, preserve_index=False), buf)
    with client.create(name, replication="x2") as f:
        f.put("old.parquet", buf.getvalue())
    return ["old.parquet"]


def check_overwritten(client, tracker: str, name: str, outcome, old_names: list[str], readers=("dask", "ray")) -> None:
    """Hold the job's ``outcome`` (records committed, or the exception it
    raised) to the rule of the module docstring, reading ``name`` through
    ``client`` (every record's bytes) and the ``readers``."""
    from st_py.errors import StoreTorrentError

    with client.open(name) as f:
        names = sorted(f.names())
        tables = [pq.read_table(io.BytesIO(f.get(n))).to_pandas() for n in names]
    rows = sorted(r for t in tables for r in t["row"])
    if isinstance(outcome, BaseException):
        assert isinstance(outcome, StoreTorrentError), f"not a StoreTorrentError: {type(outcome).__mro__}: {outcome}"
        assert str(outcome), "an error that says nothing"
        want, want_names = sorted(OLD["row"]), sorted(old_names)
    else:
        assert outcome == len(names), f"the job reported {outcome} records, the file holds {names}"
        assert not set(names) & set(old_names), f"old records still there: {names}"
        want, want_names = list(range(ROWS)), names
    assert names == want_names and rows == want, f"{name}: {len(rows)} rows in {names} (want {len(want)})"
    if "dask" in readers:
        from st_integrations.dask_reader import read_storetorrent

        got = sorted(read_storetorrent(name, tracker=tracker)["row"].compute())
        assert got == want, f"the Dask reader read {len(got)} rows, want {len(want)}"
    if "ray" in readers:
        from st_integrations.ray_reader import read_storetorrent as ray_read

        got = sorted(int(r["row"]) for r in ray_read(name, tracker=tracker).take_all())
        assert got == want, f"the Ray reader read {len(got)} rows, want {len(want)}"
