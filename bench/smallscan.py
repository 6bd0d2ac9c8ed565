"""Scans of many small raw records against the machine and the engines
(issue 31, "Writes at the disk's speed, scans at the machine's", item 3;
docs/benchmarks.md, "Scans of small records against the machine").

Over the same 4 KiB raw records (class x2 on 4 peers, each revealed once),
in one run:

- the physical limit: bench/physical.c opens, reads and closes the files
  GET_LOCAL revealed, one process and one per core (its own clock, the
  fork included, not the Python around it), in every phase beside what it
  is the limit of;
- StoreTorrent: the one-process GET_LOCAL loop, ``scan.read_unit`` in one
  process, and Dask's and Ray's ``read_storetorrent(format="raw")``;
- each engine alone (its ceiling on this machine): one plain task per CPU
  reading its share of the same files with ``os.open``/``os.read``/
  ``os.close`` into one Arrow table, then the same counting step as the
  reader's scan; no StoreTorrent, no CRC check;
- each engine's floor: the same plain pipeline over no file, the engine's
  fixed cost per scan, which bounds any reader in it.

Every answer is checked (rows and byte sum equal what was written). In
each phase (one process, Dask, Ray) the sides alternate round by round,
the C loop among them, so a change in the machine's load (other work runs
beside the benchmark on these 2 cores) lands on every side of a ratio.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path

import pyarrow as pa

from . import physical
from .cases import fresh_cluster, row

GROUP = "smallscan"
RECORD = 4096


def read_files(paths: list[str], names: list[str], size: int = RECORD) -> pa.Table:
    """What a user writes without StoreTorrent, at its leanest: ``os.open``,
    one ``os.read`` of the known size and ``os.close`` per file (three
    system calls, no file object), one Arrow table ``(record, data)``."""
    datas = []
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            datas.append(os.read(fd, size))
        finally:
            os.close(fd)
    return pa.table({"record": pa.array(names, pa.string()), "data": pa.array(datas, pa.binary())})


def _read_files_pandas(paths: list[str], names: list[str]):
    import pandas as pd

    return read_files(paths, names).to_pandas(types_mapper=pd.ArrowDtype)


def _shares(paths: list[str], names: list[str], k: int) -> list[tuple[list[str], list[str]]]:
    return [(paths[i::k], names[i::k]) for i in range(k)]


def ray_plain(paths: list[str], names: list[str], tasks: int = 2) -> tuple[int, int]:
    """Ray alone: ``tasks`` plain tasks (one CPU each) read their shares,
    then the reader's counting step (``smallrecords._counts``)."""
    import ray

    from .smallrecords import _counts

    task = ray.remote(num_cpus=1)(read_files)
    refs = [task.remote(p, n) for p, n in _shares(paths, names, tasks)]
    rows = ray.data.from_arrow_refs(refs).map_batches(_counts, batch_format="pyarrow", batch_size=None).take_all()
    return sum(r["n"] for r in rows), sum(r["b"] for r in rows)


def dask_plain(paths: list[str], names: list[str], dclient, tasks: int = 2) -> tuple[int, int]:
    """Dask alone: ``tasks`` plain tasks read their shares into
    Arrow-backed pandas frames, then the reader's counting step
    (``smallrecords._partition_counts``)."""
    import dask.dataframe as dd

    from .smallrecords import _partition_counts

    futs = [dclient.submit(_read_files_pandas, p, n, pure=False) for p, n in _shares(paths, names, tasks)]
    meta = _read_files_pandas([], [])
    ddf = dd.from_delayed(futs, meta=meta, verify_meta=False)
    out = ddf.map_partitions(_partition_counts, meta={"n": "int64", "b": "int64"}).compute()
    return int(out["n"].sum()), int(out["b"].sum())


def alternate(fns: dict, want, rounds: int, own_clock: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """Seconds of each of ``fns`` (label -> fn returning its answer; for
    the labels in ``own_clock``, ``(seconds, answer)`` by its own clock)
    over ``rounds`` rounds after one warm run each, the order rotating each
    round; every answer but the floor's must be ``want``."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    labels = list(fns)
    for k in labels:
        fns[k]()  # warm: workers started, imports loaded, pages cached
    for r in range(rounds):
        for k in labels[r % len(labels) :] + labels[: r % len(labels)]:
            t = time.perf_counter()
            got = fns[k]()
            secs = time.perf_counter() - t
            if k in own_clock:
                secs, got = got
            times[k].append(secs)
            if k != "floor" and got != want:
                raise AssertionError(f"{k}: {got} rows and bytes, wrote {want}")
    return times


def c_read(paths: list[str], procs: int) -> tuple[float, tuple[int, int]]:
    """bench/physical.c over ``paths`` with ``procs`` processes: (its own
    seconds, (files, bytes read))."""
    secs, nbytes = physical.read_files(paths, procs)
    return secs, (len(paths), nbytes)


def write_records(client, name: str, records: int) -> None:
    bodies = [os.urandom(RECORD) for _ in range(min(records, 1024))]
    with client.create(name, replication="x2") as f:
        for i in range(records):
            f.queue_put(f"r{i:08d}", bodies[i % len(bodies)])


def scan_rows(cluster, client, name: str, tmp: Path, records: int, rounds: int) -> list[dict]:
    """The rows of the module docstring over ``records`` raw records of 4
    KiB already in file ``name``."""
    import ray
    from distributed import Client
    from distributed import LocalCluster as DaskCluster

    from .analysis import start_ray
    from .smallrecords import _dask, _loop, _ray, _read_unit

    tracker = cluster.tracker_addr
    want = (records, records * RECORD)
    with client.open(name) as f:
        local = list(f.get_local())
    paths, names = [r.path for r in local], [r.name for r in local]
    c = physical.tool() is not None  # the C loop runs in every phase, beside what it is the limit of
    n = physical.cores()
    cfns = {"c1": lambda: c_read(paths, 1), "cn": lambda: c_read(paths, n)} if c else {}
    times = alternate(
        {"loop": lambda: _loop(client, name), "read_unit": lambda: _read_unit(client, tracker, name), **cfns},
        want,
        rounds,
        own_clock=("c1", "cn"),
    )
    cn = {"cn": lambda: c_read(paths, n)} if c else {}
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with (
            DaskCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dc,
            Client(dc) as dclient,
        ):
            got = alternate(
                {
                    "dask": lambda: _dask(tracker, name, dclient),
                    "dask_plain": lambda: dask_plain(paths, names, dclient),
                    "floor": lambda: dask_plain([], [], dclient),
                    **cn,
                },
                want,
                rounds,
                own_clock=("cn",),
            )
            times.update({{"floor": "dask_floor", "cn": "cn_dask"}.get(k, k): v for k, v in got.items()})
    finally:
        quiet.setLevel(level)
    start_ray(cluster.peer_addrs, tmp)
    try:
        got = alternate(
            {
                "ray": lambda: _ray(tracker, name),
                "ray_plain": lambda: ray_plain(paths, names),
                "floor": lambda: ray_plain([], []),
                **cn,
            },
            want,
            rounds,
            own_clock=("cn",),
        )
        times.update({{"floor": "ray_floor", "cn": "cn_ray"}.get(k, k): v for k, v in got.items()})
    finally:
        ray.shutdown()
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: records / v for k, v in med.items()}
    spread = "; ".join(f"{k} " + "/".join(f"{x:.3f}" for x in v) for k, v in times.items())
    note = (
        f"{records:,} raw records of 4 KiB, x2 on 4 peers; every answer checked (rows, byte sum); median of "
        f"{rounds} rounds after a warm run, engine sides alternated (s: {spread})"
    )
    base = "one process: get_local() + open/read of each path"
    plain = "plain tasks (one per CPU) os.open/os.read the same files into one Arrow table, same counting step"
    rows = [
        row("small_raw_getlocal_loop", rate["loop"], "records/s", note=note),
        row(
            "small_raw_read_unit",
            rate["read_unit"],
            "records/s",
            base,
            rate["loop"],
            note="scan.read_unit in one process: batches of many records, each copy CRC-checked",
        ),
        row(
            "small_raw_dask",
            rate["dask"],
            "records/s",
            base,
            rate["loop"],
            note="Dask read_storetorrent(format='raw'), 2 worker processes",
        ),
        row(
            "small_raw_ray",
            rate["ray"],
            "records/s",
            base,
            rate["loop"],
            note="Ray read_storetorrent(format='raw'), 2 CPUs",
        ),
        row("small_raw_dask_vs_engine", rate["dask"], "records/s", "Dask alone: " + plain, rate["dask_plain"]),
        row("small_raw_ray_vs_engine", rate["ray"], "records/s", "Ray alone: " + plain, rate["ray_plain"]),
        row(
            "small_raw_dask_engine_floor",
            med["dask_floor"],
            "s",
            note="Dask alone, the same plain pipeline over no file: its fixed cost per scan",
        ),
        row(
            "small_raw_ray_engine_floor",
            med["ray_floor"],
            "s",
            note="Ray alone, the same plain pipeline over no file: its fixed cost per scan",
        ),
    ]
    if c:
        cn = f"C open/read/close of the revealed files, {physical.cores()} processes (bench/physical.c)"
        same = "the C loop's rounds alternated with the engine's, in the same phase"
        c1 = "C open/read/close of the same files, 1 process"
        rows = [
            row("physical_read_4kib_files_1proc", rate["c1"], "records/s", note="bench/physical.c, its own clock"),
            row("physical_read_4kib_files", rate["cn"], "records/s", note=cn),
            row("small_raw_getlocal_loop_vs_physical", rate["loop"], "records/s", c1, rate["c1"]),
            row("small_raw_read_unit_vs_physical", rate["read_unit"], "records/s", c1, rate["c1"]),
            row("small_raw_dask_vs_physical", rate["dask"], "records/s", cn, rate["cn_dask"], note=same),
            row("small_raw_ray_vs_physical", rate["ray"], "records/s", cn, rate["cn_ray"], note=same),
            row(
                "small_raw_dask_engine_vs_physical",
                rate["dask_plain"],
                "records/s",
                cn,
                rate["cn_dask"],
                note="Dask alone (" + plain + "): what the engine reaches without StoreTorrent",
            ),
            row(
                "small_raw_ray_engine_vs_physical",
                rate["ray_plain"],
                "records/s",
                cn,
                rate["cn_ray"],
                note="Ray alone (" + plain + "): what the engine reaches without StoreTorrent",
            ),
        ] + rows
    return rows


def case_small_scan(tmp: Path, records: int, rounds: int = 3) -> list[dict]:
    """The scans alone, on a fresh cluster (``./dev bench --only smallscan``)."""
    cluster = fresh_cluster(tmp, "small-scan-").start()
    try:
        client = cluster.client()
        write_records(client, "/bench/small", records)
        return scan_rows(cluster, client, "/bench/small", tmp, records, rounds)
    finally:
        cluster.stop()
