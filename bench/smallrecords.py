"""The mission's own workload (issue "Many small records at full speed"):
many raw records of 4 KiB, class x2 on 4 peers, read by every analysis path
next to the one-process GET_LOCAL loop (``get_local()``, then open/read each
path) in the same run. Every answer is checked: the row count and the byte
sum equal what was written."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .cases import fresh_cluster, row

GROUP = "small"
RECORD = 4096


def _loop(client, name: str) -> tuple[int, int]:
    with client.open(name) as f:
        n = b = 0
        for r in f.get_local():
            with open(r.path, "rb") as fh:
                b += len(fh.read())
            n += 1
    return n, b


def _read_unit(client, tracker: str, name: str) -> tuple[int, int]:
    from st_integrations.formats import RAW_SCHEMA
    from st_integrations.readplan import plan_scan
    from st_integrations.scan import ScanOptions, read_unit

    opts = ScanOptions(format="raw", tracker=tracker)
    n = b = 0
    for u in plan_scan(client, [name]).units:
        for batch in read_unit(u, RAW_SCHEMA, None, None, opts):
            n += batch.num_rows
            b += pc.sum(pc.binary_length(batch.column(1))).as_py() or 0
    return n, b


def _counts(t: pa.Table) -> pa.Table:
    return pa.table({"n": [t.num_rows], "b": [pc.sum(pc.binary_length(t["data"])).as_py() or 0]})


def _ray(tracker: str, name: str) -> tuple[int, int]:
    from st_integrations.ray_reader import read_storetorrent

    rows = read_storetorrent(name, format="raw", tracker=tracker).map_batches(
        _counts, batch_format="pyarrow", batch_size=None).take_all()
    return sum(r["n"] for r in rows), sum(r["b"] for r in rows)


def _partition_counts(df):
    import pandas as pd

    data = pa.array(df["data"])  # the partition's Arrow column (ArrowDtype): no per-row Python
    return pd.DataFrame({"n": [len(df)], "b": [pc.sum(pc.binary_length(data)).as_py() or 0]})


def _dask(tracker: str, name: str, dclient) -> tuple[int, int]:
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(name, format="raw", tracker=tracker, client=dclient)
    out = ddf.map_partitions(_partition_counts, meta={"n": "int64", "b": "int64"}).compute()
    return int(out["n"].sum()), int(out["b"].sum())


def case_small_raw(tmp: Path, records: int, rounds: int = 3) -> list[dict]:
    """4 KiB raw records: read_unit in one process, Dask (2 workers) and Ray
    (2 CPUs) against the one-process GET_LOCAL loop."""
    import logging

    import ray
    from distributed import Client, LocalCluster as DaskCluster

    from .analysis import start_ray

    cluster = fresh_cluster(tmp, "small-").start()
    try:
        client = cluster.client()
        name, tracker = "/bench/small", cluster.tracker_addr
        t0 = time.perf_counter()
        with client.create(name, replication="x2") as f:
            for i in range(records):
                f.queue_put(f"r{i:08d}", os.urandom(RECORD))
        put_s = time.perf_counter() - t0
        want = (records, records * RECORD)
        times: dict[str, list[float]] = {}

        def timed(label: str, fn) -> None:
            fn()  # warm: workers started, imports loaded, pages cached
            for _ in range(rounds):
                t = time.perf_counter()
                got = fn()
                times.setdefault(label, []).append(time.perf_counter() - t)
                if got != want:
                    raise AssertionError(f"{label}: {got} rows and bytes, wrote {want}")

        timed("loop", lambda: _loop(client, name))
        timed("read_unit", lambda: _read_unit(client, tracker, name))
        quiet = logging.getLogger("distributed")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with DaskCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dc, \
                    Client(dc) as dclient:
                timed("dask", lambda: _dask(tracker, name, dclient))
        finally:
            quiet.setLevel(level)
        start_ray(cluster.peer_addrs, tmp)
        try:
            timed("ray", lambda: _ray(tracker, name))
        finally:
            ray.shutdown()
    finally:
        cluster.stop()
    rate = {k: records / statistics.median(v) for k, v in times.items()}
    spread = "; ".join(f"{k} " + "/".join(f"{x:.2f}" for x in v) for k, v in times.items())
    note = (f"{records:,} raw records of 4 KiB, x2 on 4 peers; every answer checked (rows, byte sum); median of "
            f"{rounds} rounds after a warm run (s: {spread})")
    base = "one process: get_local() + open/read of each path"
    return [row("small_raw_put", records / put_s, "records/s", note=f"queue_put of the {records:,} records, x2"),
            row("small_raw_getlocal_loop", rate["loop"], "records/s", note=note),
            row("small_raw_read_unit", rate["read_unit"], "records/s", base, rate["loop"],
                note="scan.read_unit in one process: batches of many records, each copy CRC-checked"),
            row("small_raw_dask", rate["dask"], "records/s", base, rate["loop"],
                note="Dask read_storetorrent(format='raw'), 2 worker processes"),
            row("small_raw_ray", rate["ray"], "records/s", base, rate["loop"],
                note="Ray read_storetorrent(format='raw'), 2 CPUs")]
