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

from st_py.wire.protocol import crc32c

from . import physical
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

    rows = (
        read_storetorrent(name, format="raw", tracker=tracker)
        .map_batches(_counts, batch_format="pyarrow", batch_size=None)
        .take_all()
    )
    return sum(r["n"] for r in rows), sum(r["b"] for r in rows)


def _write_both_copies(folder: Path, records: int, bodies: list[bytes], layout: str) -> float:
    """Seconds for one process to create and write 2 files a record (the two
    copies): the put's physical floor here. ``layout`` "peers" lays them out
    as the peers' record store does (docs/record-store.md: a copy's file
    ``<name>@<rank>@<crc32c>`` in one of 256 directories by the CRC-32C of
    the name, a tree a copy), "flat" in one directory a copy. The files stay
    until the caller removes ``folder``: a deletion during the measurement
    would slow inode allocation on ext4 without a journal (below)."""
    folder.mkdir(parents=True)
    paths = []
    for i in range(records):
        name = f"r{i:08d}"
        crc = crc32c(bodies[i % len(bodies)])
        for copy in (0, 1):
            if layout == "flat":
                paths.append(folder / str(copy) / name)
            else:
                bucket = crc32c(name.encode()) & 0xFF
                paths.append(folder / str(copy) / f"{bucket:02x}" / f"{name}@{copy}@{crc:08x}")
    t = time.perf_counter()
    made: set[Path] = set()
    for k, path in enumerate(paths):
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, bodies[(k // 2) % len(bodies)])
        os.close(fd)
    return time.perf_counter() - t


def _put_rounds(cluster, client, name: str, records: int, bodies: list[bytes], rounds: int) -> dict[str, list[float]]:
    """``rounds`` rounds of: queue_put of the records x2 (into ``name``, then
    ``name-<round>``), one process writing both copies' files as the peers lay
    them out, the same in two flat directories, and the C loop of
    bench/physical.c writing both copies' files (one process per core; key
    "c", when a compiler is there). Interleaved, so a change in the disk's
    speed over the case lands on every side; nothing is deleted until the
    end, so every side writes in the same state of the filesystem (a
    deletion just before a side would slow its inode allocation on ext4
    without a journal, docs/benchmarks.md "Churn")."""
    times: dict[str, list[float]] = {"put": [], "peers": [], "flat": [], "c": []}
    scratch = Path(cluster.data_dir) / "baseline-put"
    os.sync()
    for k in range(rounds):
        t = time.perf_counter()
        with client.create(name if k == 0 else f"{name}-{k}", replication="x2") as f:
            for i in range(records):
                f.queue_put(f"r{i:08d}", bodies[i % len(bodies)])
        times["put"].append(time.perf_counter() - t)
        for layout in ("peers", "flat"):
            times[layout].append(_write_both_copies(scratch / f"{layout}-{k}", records, bodies, layout))
        if physical.tool() is not None:
            size = len(bodies[0])
            times["c"].append(physical.write_files(scratch / f"c-{k}", records, size, copies=2, keep=True))
    import shutil

    shutil.rmtree(scratch)
    for k in range(1, rounds):
        client.delete(f"{name}-{k}")
    return times


def _get_pipelined(client, name: str, records: int) -> float:
    got: list[int] = []
    with client.open(name) as f:
        t = time.perf_counter()
        for i in range(records):
            f.queue_get(f"r{i:08d}", lambda n, data, exc: got.append(len(data) if exc is None else -1))
        while len(got) < records:
            f.poll(0.05)
        dt = time.perf_counter() - t
    if sorted(set(got)) != [RECORD]:
        raise AssertionError(f"pipelined GET: {len(got)} replies, sizes {sorted(set(got))[:5]}")
    return dt


def _sync_getter(tracker: str, name: str, lo: int, hi: int, start, out) -> None:
    from st_py.client.client import Client

    with Client(tracker) as c, c.open(name) as f:
        f.get(f"r{lo:08d}")  # connected
        start.wait()
        n = sum(len(f.get(f"r{i:08d}")) for i in range(lo, hi))
    out.put(n)


def _get_16_clients(tracker: str, name: str, records: int, clients: int = 16) -> float:
    """Seconds for 16 client processes, each doing synchronous get() over
    its 16th of the records, from a common start."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    cuts = [records * k // clients for k in range(clients + 1)]
    procs = [
        ctx.Process(target=_sync_getter, args=(tracker, name, cuts[k], cuts[k + 1], start, out)) for k in range(clients)
    ]
    for p in procs:
        p.start()
    time.sleep(3.0)  # every process connected (they import and open the file first)
    t = time.perf_counter()
    start.set()
    total = sum(out.get(timeout=600) for _ in procs)
    dt = time.perf_counter() - t
    for p in procs:
        p.join()
    if total != records * RECORD:
        raise AssertionError(f"16 clients read {total} bytes, wrote {records * RECORD}")
    return dt


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
    """4 KiB raw records: queue_put x2 against one process writing both
    copies' files (and the C loop doing so), the pipelined GET against 16
    synchronous clients, and the scans of bench/smallscan.py (the C loop,
    read_unit, Dask and Ray, each engine alone) over the same records."""
    from .smallscan import scan_rows

    cluster = fresh_cluster(tmp, "small-").start()
    try:
        client = cluster.client()
        name, tracker = "/bench/small", cluster.tracker_addr
        bodies = [os.urandom(RECORD) for _ in range(min(records, 1024))]
        puts = _put_rounds(cluster, client, name, records, bodies, rounds)
        put_s, peers_s, flat_s = (statistics.median(puts[k]) for k in ("put", "peers", "flat"))
        get_s = _get_pipelined(client, name, records)
        get16_s = _get_16_clients(tracker, name, records)
        phys_put = puts["c"]  # the machine's limit: C loop writing both copies' files, in the same rounds
        scans = scan_rows(cluster, client, name, tmp, records, rounds)
    finally:
        cluster.stop()
    phys = []
    if phys_put:
        phys = [
            row(
                "small_raw_put_vs_physical",
                records / put_s,
                "records/s",
                "C loop writing both copies' files in the peers' layout, one process per core",
                records / statistics.median(phys_put),
                note="O_TMPFILE+linkat, no sync (bench/physical.c), in the rounds of small_raw_put (nothing "
                "deleted before any side); s: " + "/".join(f"{x:.2f}" for x in phys_put),
            ),
        ]
    return (
        phys
        + [
            row(
                "small_raw_put",
                records / put_s,
                "records/s",
                "one process writing both copies' files, laid out as the peers do",
                records / peers_s,
                note=f"queue_put of the {records:,} records, x2 on 4 peers; the baseline creates "
                "and writes the same 2 files a record (names, 256 directories a copy) on the same "
                f"filesystem; medians of {rounds} interleaved rounds (s: put "
                + "/".join(f"{x:.2f}" for x in puts["put"])
                + ", baseline "
                + "/".join(f"{x:.2f}" for x in puts["peers"])
                + ")",
            ),
            row(
                "small_raw_put_flat",
                records / put_s,
                "records/s",
                "one process writing 2 files a record in 2 flat directories",
                records / flat_s,
                note="the same puts against the same bytes in one directory a copy: what the peers' "
                "layout costs on this filesystem (s: " + "/".join(f"{x:.2f}" for x in puts["flat"]) + ")",
            ),
            row(
                "small_raw_get_pipelined",
                records / get_s,
                "records/s",
                "16 clients, synchronous GETs",
                records / get16_s,
                note=f"queue_get of the {records:,} records from one client (depth 64) against "
                "16 client processes each doing get() one at a time over a 16th of them (the load of "
                "`weed benchmark -c 16`-style tools), same records, same run",
            ),
        ]
        + scans
    )


PARQUET_ROWS = 1_000  # rows per small Parquet record (about 16 KiB)


def _parquet_record(i: int) -> bytes:
    import io

    import pyarrow.parquet as pq

    t = pa.table(
        {
            "i": pa.array(range(i * PARQUET_ROWS, (i + 1) * PARQUET_ROWS), pa.int64()),
            "x": pa.array([float(j % 97) for j in range(PARQUET_ROWS)]),
            "k": pa.array([f"k{j % 13}" for j in range(PARQUET_ROWS)]),
        }
    )
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


def _facts(t: pa.Table) -> pa.Table:
    return pa.table({"n": [t.num_rows], "s": [pc.sum(t["i"]).as_py() or 0]})


def _pq_baseline(paths: list[str]) -> tuple[int, int]:
    t = _pq_half(paths)
    return t.num_rows, pc.sum(t["i"]).as_py()


def _pq_read_unit(client, tracker: str, name: str) -> tuple[int, int]:
    from st_integrations.formats import unify
    from st_integrations.readplan import plan_scan
    from st_integrations.scan import ScanOptions, kept_schema_sources, read_unit

    plan = plan_scan(client, [name], skip_ignored=True)
    opts = ScanOptions(tracker=tracker)
    kept = kept_schema_sources(plan, opts)
    assert kept is not None and not kept[1], "every record's schema is kept"
    schema = unify(kept[0])
    n = s = 0
    for u in plan.units:
        for b in read_unit(u, schema, ["i"], None, opts):
            n += b.num_rows
            s += pc.sum(b.column(0)).as_py() or 0
    return n, s


def _pq_ray(tracker: str, name: str) -> tuple[int, int]:
    from st_integrations.ray_reader import read_storetorrent

    rows = (
        read_storetorrent(name, columns=["i"], tracker=tracker)
        .map_batches(_facts, batch_format="pyarrow", batch_size=None)
        .take_all()
    )
    return sum(r["n"] for r in rows), sum(r["s"] for r in rows)


def _pq_half(paths: list[str]) -> pa.Table:
    """Column ``i`` of the Parquet files ``paths`` (pyarrow.dataset)."""
    import pyarrow.dataset as ds

    return ds.dataset(paths, format="parquet").to_table(columns=["i"])


def _pq_ray_plain(paths: list[str]) -> tuple[int, int]:
    """Ray alone on the same local files: 2 plain tasks (one per CPU), each
    reading half of them with ``pyarrow.dataset``, then the same
    ``map_batches``: the engine's ceiling, no StoreTorrent, no CRC check.
    (``ray.data.read_parquet`` over the same 5,000 files ran at 0.07 M
    rows/s, a task per file: no ceiling.)"""
    import ray

    task = ray.remote(num_cpus=1)(_pq_half)
    refs = [task.remote(paths[k::2]) for k in range(2)]
    rows = ray.data.from_arrow_refs(refs).map_batches(_facts, batch_format="pyarrow", batch_size=None).take_all()
    return sum(r["n"] for r in rows), sum(r["s"] for r in rows)


def _pq_partition(df):
    import pandas as pd

    return pd.DataFrame({"n": [len(df)], "s": [int(df["i"].sum())]})


def _pq_dask(tracker: str, name: str, dclient) -> tuple[int, int]:
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(name, columns=["i"], tracker=tracker, client=dclient)
    out = ddf.map_partitions(_pq_partition, meta={"n": "int64", "s": "int64"}).compute()
    return int(out["n"].sum()), int(out["s"].sum())


def case_small_parquet(tmp: Path, records: int, rounds: int = 3) -> list[dict]:
    """Small Parquet records (1,000 rows, about 16 KiB each), x2 on 4
    peers: read_unit in one process, Dask (2 workers) and Ray (2 CPUs)
    against one-process ``pyarrow.dataset`` over the same local files (the
    GET_LOCAL paths; no CRC check there, every copy checked in the scans).
    Also the time to build the Dask DataFrame: the schemas come from the
    infofile, no record is opened."""
    import logging

    import ray
    from distributed import Client
    from distributed import LocalCluster as DaskCluster

    from st_integrations.dask_reader import read_storetorrent

    from .analysis import start_ray

    cluster = fresh_cluster(tmp, "small-pq-").start()
    try:
        client = cluster.client()
        name, tracker = "/bench/small_pq", cluster.tracker_addr
        with client.create(name, replication="x2") as f:
            for i in range(records):
                f.queue_put(f"part-{i:06d}.parquet", _parquet_record(i))
        n_rows = records * PARQUET_ROWS
        want = (n_rows, n_rows * (n_rows - 1) // 2)
        with client.open(name) as f:
            paths = [r.path for r in f.get_local()]
        times: dict[str, list[float]] = {}

        def timed(label: str, fn) -> None:
            fn()
            for _ in range(rounds):
                t = time.perf_counter()
                got = fn()
                times.setdefault(label, []).append(time.perf_counter() - t)
                if got != want:
                    raise AssertionError(f"{label}: {got} rows and sum, wrote {want}")

        timed("pyarrow", lambda: _pq_baseline(paths))
        timed("read_unit", lambda: _pq_read_unit(client, tracker, name))
        builds = []
        for _ in range(rounds):
            t = time.perf_counter()
            read_storetorrent(name, tracker=tracker, client=None)
            builds.append(time.perf_counter() - t)
        quiet = logging.getLogger("distributed")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with (
                DaskCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dc,
                Client(dc) as dclient,
            ):
                timed("dask", lambda: _pq_dask(tracker, name, dclient))
        finally:
            quiet.setLevel(level)
        start_ray(cluster.peer_addrs, tmp)
        try:
            timed("ray", lambda: _pq_ray(tracker, name))
            timed("ray_plain", lambda: _pq_ray_plain(paths))
        finally:
            ray.shutdown()
    finally:
        cluster.stop()
    rate = {k: n_rows / statistics.median(v) for k, v in times.items()}
    spread = "; ".join(f"{k} " + "/".join(f"{x:.2f}" for x in v) for k, v in times.items())
    note = (
        f"{records:,} Parquet records of {PARQUET_ROWS:,} rows, x2 on 4 peers, column i; answers checked (rows, "
        f"sum); median of {rounds} rounds after a warm run (s: {spread})"
    )
    base = "one process: pyarrow.dataset over the same local files"
    return [
        row("small_parquet_pyarrow", rate["pyarrow"], "rows/s", note=note),
        row(
            "small_parquet_read_unit",
            rate["read_unit"],
            "rows/s",
            base,
            rate["pyarrow"],
            note="scan.read_unit in one process: copies read many at a time, CRC-checked, batches gathered",
        ),
        row(
            "small_parquet_dask",
            rate["dask"],
            "rows/s",
            base,
            rate["pyarrow"],
            note="Dask read_storetorrent, 2 worker processes",
        ),
        row("small_parquet_ray", rate["ray"], "rows/s", base, rate["pyarrow"], note="Ray read_storetorrent, 2 CPUs"),
        row(
            "small_parquet_ray_vs_engine",
            rate["ray"],
            "rows/s",
            "Ray alone: 2 plain tasks read the same local files with pyarrow.dataset, same map_batches",
            rate["ray_plain"],
            note="the engine's ceiling on this machine (no StoreTorrent, no CRC check)",
        ),
        row(
            "small_parquet_dask_build",
            statistics.median(builds),
            "s",
            note=f"building the Dask DataFrame over {records:,} records (schemas from the infofile)",
        ),
    ]
