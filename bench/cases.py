"""Benchmark cases. Each returns result rows
``{"name", "value", "unit", "baseline", "baseline_value", "ratio"}``
(baseline fields None where there is no baseline)."""

from __future__ import annotations

import io
import os
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa

from st_py.client.getlocal import reveal
from st_py.deploy.cluster import LocalCluster

from . import baselines, physical

MiB = 1 << 20


PHYS_WRITE = "O_TMPFILE+linkat into the peers' buckets, one process per core, no sync (bench/physical.c)"


def row(name, value, unit, baseline=None, baseline_value=None, note=""):
    ratio = (value / baseline_value) if baseline_value else None
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": ratio,
        "note": note,
    }


# File creation on this machine's ext4 without a journal slows after deletions (docs/benchmarks.md,
# "Churn"): a case set beside another system waits until creating a file costs what it does on a
# quiet disk, so it does not measure the previous case's deletions.
QUIET_CREATE_US = 60.0  # system CPU per file creation taken as quiet (12-40 us seen here when quiet)
SETTLE_MAX_S = 300.0


def _create_cost(folder: Path, n: int = 200) -> float:
    """System CPU microseconds per file this thread spends creating ``n``
    empty files in new folder ``folder`` (kept: deleting them would churn)."""
    folder.mkdir(parents=True)
    t = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
    for i in range(n):
        os.close(os.open(folder / f"p{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    return (resource.getrusage(resource.RUSAGE_THREAD).ru_stime - t) / n * 1e6


def settle_disk(tmp: Path, max_s: float = SETTLE_MAX_S) -> float:
    """Wait until two probes in a row create files under ``tmp`` at
    ``QUIET_CREATE_US`` or less of system CPU each, at most ``max_s``
    seconds; return the seconds waited. Probes are new folders under
    ``tmp/settle/`` (new folders land where a case's cluster folder would)."""
    t0 = time.monotonic()
    base = tmp / "settle"
    quiet = 0
    k = len(os.listdir(base)) if base.exists() else 0
    while time.monotonic() - t0 < max_s:
        quiet = quiet + 1 if _create_cost(base / str(k)) <= QUIET_CREATE_US else 0
        k += 1
        if quiet == 2:
            break
        time.sleep(5.0 if quiet == 0 else 1.0)
    return time.monotonic() - t0


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def put_records(cluster: LocalCluster, name: str, records, replication: str, depth: int, group: int = 40) -> float:
    c = cluster.client(depth=depth, group_size=group)
    f = c.create(name, replication=replication, est_size=sum(len(d) for _, d in records))
    t0 = time.perf_counter()
    for n, d in records:
        f.queue_put(n, d)
    f.close()
    dt = time.perf_counter() - t0
    c.close()
    return dt


def case_put_1mib_x2(cluster, tmp: Path, n: int) -> list[dict]:
    data = os.urandom(MiB)
    records = [(f"big{i:06d}", data) for i in range(n)]
    peak = {}

    dt = put_records(cluster, "/bench/put1m", records, "x2", depth=16)
    peak["peer_rss_load"] = max(rss_bytes(p.pid) for p in cluster.peers if p)
    base = baselines.local_write(tmp / "put1m", records, copies=2)
    dt1 = put_records(cluster, "/bench/put1m_x1", records, "x1", depth=16)
    user = n * MiB
    rows = [
        row("put_1mib_x2", user / dt, "B/s", "local create+write+rename x2, 1 process", user / base),
        row("peer_rss_under_load", peak["peer_rss_load"], "B", note="max over 4 peers after 1 MiB PUTs"),
    ]
    if physical.tool() is not None:  # the machine's limit: a C loop in the peers' layout, one process per core
        p1 = physical.write_files(tmp / "phys1m", n, MiB, copies=1)
        p2 = physical.write_files(tmp / "phys1m", n, MiB, copies=2)
        seq = physical.seq_write(tmp / "phys1m.seq", n * MiB)
        rows += [
            row("physical_write_1mib_files_x1", user / p1, "B/s", note=PHYS_WRITE),
            row("physical_seq_write", user / seq, "B/s", note="one file, 1 MiB writes, no sync (C)"),
            row(
                "put_1mib_x1_vs_physical",
                user / dt1,
                "B/s",
                "C loop: the same files x1 (" + PHYS_WRITE + ")",
                user / p1,
            ),
            row(
                "put_1mib_x2_vs_physical", user / dt, "B/s", "C loop: the same files x2 (" + PHYS_WRITE + ")", user / p2
            ),
        ]
    return rows


def case_put_4kib(cluster, tmp: Path, n: int, n_depth1: int, rounds: int = 3) -> list[dict]:
    """4 KiB PUTs at depth 64 against local file creation; then depth 64
    against depth 1 on ``n_depth1`` records, alternated ``rounds`` times after
    a sync (the disk's writeback of the records before would otherwise land
    on whichever run comes first): the medians."""
    data = os.urandom(4096)
    records = [(f"small{i:07d}", data) for i in range(n)]
    dt64 = put_records(cluster, "/bench/put4k", records, "x1", depth=64)
    base = baselines.local_write(tmp / "put4k", records, copies=1)
    few = records[:n_depth1]
    os.sync()
    d1, d64 = [], []
    for r in range(rounds):
        d1.append(n_depth1 / put_records(cluster, f"/bench/put4k_d1_{r}", few, "x1", depth=1))
        d64.append(n_depth1 / put_records(cluster, f"/bench/put4k_d64_{r}", few, "x1", depth=64))
    med = statistics.median
    phys = []
    if physical.tool() is not None:
        p1 = physical.write_files(tmp / "phys4k", n, 4096, copies=1)
        phys = [
            row("physical_write_4kib_files_x1", n / p1, "records/s", note=PHYS_WRITE),
            row(
                "put_4kib_x1_vs_physical",
                n / dt64,
                "records/s",
                "C loop: the same files x1 (" + PHYS_WRITE + ")",
                n / p1,
            ),
        ]
    return phys + [
        row("put_4kib_x1", n / dt64, "records/s", "local create+write+rename, 1 process", n / base),
        row(
            "put_4kib_pipelining",
            med(d64),
            "records/s",
            "same client, depth 1",
            med(d1),
            note=f"median of {rounds} alternated rounds of {n_depth1} records after a sync",
        ),
    ]


def _get_all(cluster, name: str, n: int) -> float:
    c = cluster.client(depth=16)
    f = c.open(name)
    names = f.names()[:n]
    t0 = time.perf_counter()
    for rec in names:
        f.queue_get(rec, lambda _n, d, e: None)
    f.flush()
    dt = time.perf_counter() - t0
    f.close()
    c.close()
    return len(names) * MiB / dt


def case_get_1mib(cluster, n: int, rounds: int = 3) -> list[dict]:
    """GET of 1 MiB records against one loopback TCP stream, alternated
    ``rounds`` times after a sync (so the writes before do not compete); the
    median of each. Also the Python receive path (ST_NATIVE=0) in the same
    rounds."""
    from st_py.wire import transport

    os.sync()
    native = transport._native
    blob = [os.urandom(MiB)] * n
    st, py, base = [], [], []
    try:
        for _ in range(rounds):
            transport._native = native
            st.append(_get_all(cluster, "/bench/put1m", n))
            transport._native = None
            py.append(_get_all(cluster, "/bench/put1m", n))
            base.append(n * MiB / baselines.tcp_stream(blob))
    finally:
        transport._native = native
    med = statistics.median
    label = "one loopback TCP stream, same bytes"
    rows = [
        row(
            "get_1mib",
            med(st),
            "B/s",
            label,
            med(base),
            note=f"median of {rounds} alternated rounds; receive path "
            f"{'C++ (st_py._native)' if native else 'Python (no native module)'}",
        ),
        row("get_1mib_python", med(py), "B/s", label, med(base), note="the same with the pure-Python receive path"),
    ]
    return rows


def arrow_record(i: int, rows: int) -> bytes:
    rng = np.random.default_rng(i)
    t = pa.table({f"c{k}": rng.random(rows) for k in range(8)})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def make_arrow_file(cluster, n: int, name: str = "/bench/arrow", rows: int = 16384) -> tuple[str, int, list[str]]:
    """An x2 file of ``n`` Arrow IPC records of about 1 MiB. Returns its name,
    bytes and the local paths GET_LOCAL reveals (for the baseline)."""
    records = [(f"arrow{i:05d}", arrow_record(i, rows)) for i in range(n)]
    put_records(cluster, name, records, "x2", depth=16)
    c = cluster.client()
    f = c.open(name)
    plan = f.get_local_plan()
    paths = [r.path for a in plan.ring for r in reveal(a, plan)]
    f.close()
    c.close()
    return name, sum(len(d) for _, d in records), paths


def _read_rows_ray(cluster, name: str) -> tuple[float, int]:
    from st_integrations.ray_reader import read_storetorrent

    t0 = time.perf_counter()
    ds = read_storetorrent(name, tracker=cluster.tracker_addr).materialize()
    return time.perf_counter() - t0, ds.count()


def _read_rows_dask(cluster, name: str, client) -> tuple[float, int]:
    from distributed import wait

    from st_integrations.dask_reader import read_storetorrent

    t0 = time.perf_counter()
    ddf = read_storetorrent(name, tracker=cluster.tracker_addr, client=client).persist()
    wait(ddf)
    return time.perf_counter() - t0, len(ddf)


def _paths_table(paths: list[str]):
    def read(p):
        with pa.memory_map(p) as src:
            return pa.ipc.open_stream(src).read_all()

    return pa.concat_tables([read(p) for p in paths])


def _groups(paths: list[str], k: int = 4) -> list[list[str]]:
    return [paths[i::k] for i in range(k)]


def _ceiling_ray(paths: list[str]) -> tuple[float, int]:
    """Ray reading the same files with 4 plain tasks, no StoreTorrent."""
    import ray

    task = ray.remote(num_cpus=1)(_paths_table)
    t0 = time.perf_counter()
    ds = ray.data.from_arrow_refs([task.remote(g) for g in _groups(paths)]).materialize()
    return time.perf_counter() - t0, ds.count()


def _ceiling_dask(paths: list[str], client) -> tuple[float, int]:
    import dask.dataframe as dd
    import pandas as pd
    from distributed import wait

    def part(g):
        return _paths_table(g).to_pandas(types_mapper=pd.ArrowDtype)

    t0 = time.perf_counter()
    futs = [client.submit(part, g, pure=False) for g in _groups(paths)]
    ddf = dd.from_delayed(futs, verify_meta=False, meta=part(paths[:1]).iloc[:0]).persist()
    wait(ddf)
    return time.perf_counter() - t0, len(ddf)


def _engine_rows(label: str, small, big, timed, ceiling, rounds: int = 3, floor=None) -> list[dict]:
    """Full-scan throughput at the big size, and the marginal throughput
    between the two sizes (which cancels the engine's fixed per-read cost).
    Each figure is the median of ``rounds`` alternated runs: reader and
    baseline, small and big. ``floor()``, if given, times the engine's own
    read path over tasks that read nothing (its fixed cost per scan), in
    the same rounds."""
    (sname, sbytes, spaths), (bname, bbytes, bpaths) = small, big
    timed(sname)  # warm the engine's workers
    runs: dict[str, list[float]] = {"ts": [], "tb": [], "bs": [], "bb": [], "tc": [], "fl": []}
    ceiling(bpaths)  # warm
    if floor is not None:
        floor()
    for _ in range(rounds):
        if floor is not None:
            runs["fl"].append(floor())
        ts, rs = timed(sname)
        tb, rb = timed(bname)
        bs, brs = baselines.pyarrow_read(spaths)
        bb, brb = baselines.pyarrow_read(bpaths)
        assert (rs, rb) == (brs, brb), ((rs, rb), (brs, brb))
        tc, rc = ceiling(bpaths)
        assert rc == rb, (rc, rb)
        for k, v in zip(("ts", "tb", "bs", "bb", "tc"), (ts, tb, bs, bb, tc)):
            runs[k].append(v)
    ts, tb, bs, bb, tc = (statistics.median(runs[k]) for k in ("ts", "tb", "bs", "bb", "tc"))
    marg, bmarg = (bbytes - sbytes) / max(tb - ts, 1e-9), (bbytes - sbytes) / max(bb - bs, 1e-9)
    base = "pyarrow reads the same files, 1 process"
    note = f"median of {rounds} alternated rounds"
    return [
        row(label, bbytes / tb, "B/s", base, bbytes / bb, note=note),
        row(
            f"{label}_vs_engine",
            bbytes / tb,
            "B/s",
            "the engine reading the same files without StoreTorrent",
            bbytes / tc,
            note=note,
        ),
        row(
            f"{label}_fixed_cost",
            ts - sbytes / marg,
            "s",
            note="per-read overhead: plan, schema sample, task launch, ring exchange",
        ),
        row(f"{label}_marginal", marg, "B/s", base + " (marginal)", bmarg, note=note),
    ] + (
        [
            row(
                f"{label}_engine_floor",
                statistics.median(runs["fl"]),
                "s",
                note="the engine's own read path (the reader's) over 4 tasks that read nothing: its fixed "
                f"cost per scan, against the reader's {tb:.3f} s and the plain tasks' {tc:.3f} s",
            )
        ]
        if runs["fl"]
        else []
    )


def _nothing(n: int):
    """A Ray Datasource of ``n`` read tasks that read nothing (Ray Data's
    fixed cost per scan: the executor, its operator, the tasks)."""
    import ray

    def read():
        yield pa.table({"c0": pa.array([], pa.float64())})

    class Nothing(ray.data.Datasource):
        def estimate_inmemory_data_size(self):
            return 0

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            from ray.data import ReadTask
            from ray.data.block import BlockMetadata

            meta = BlockMetadata(num_rows=0, size_bytes=0, input_files=None, exec_stats=None)
            return [ReadTask(read, meta) for _ in range(n)]

    return Nothing()


def _floor_ray() -> float:
    import ray

    t0 = time.perf_counter()
    ray.data.read_datasource(_nothing(4), override_num_blocks=4).materialize()
    return time.perf_counter() - t0


def case_get_local_ray(cluster, small, big) -> list[dict]:
    import ray

    from st_tools.demo import start_ray

    start_ray()
    try:
        return _engine_rows(
            "get_local_ray", small, big, lambda n: _read_rows_ray(cluster, n), _ceiling_ray, floor=_floor_ray
        )
    finally:
        ray.shutdown()


def case_get_local_dask(cluster, small, big) -> list[dict]:
    from distributed import Client
    from distributed import LocalCluster as DaskCluster

    with DaskCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as dc, Client(dc) as client:
        return _engine_rows(
            "get_local_dask",
            small,
            big,
            lambda n: _read_rows_dask(cluster, n, client),
            lambda paths: _ceiling_dask(paths, client),
        )


def _commit_rate(cluster, name: str, n: int, group: int) -> float:
    from st_py._proto import tracker_pb2 as pb

    c = cluster.client()
    f = c.create(name, replication="x1")
    t0 = time.perf_counter()
    for start in range(0, n, group):
        ids = range(start, min(n, start + group))
        # as the client's group committer sends plain records (issue 41: columns, not a message each)
        cols = pb.RecordColumns(
            names=[f"r{i:08d}" for i in ids], sizes=[4096] * len(ids), crc32c=list(ids), peer_idx=[0] * len(ids)
        )
        reply = c.tracker.commit(name, f.file_id, [], columns=cols)
        assert reply.committed == len(ids), reply
    dt = time.perf_counter() - t0
    f.close()
    c.close()
    return n / dt


def case_tracker_commit(cluster, n_big: int, n_one: int) -> list[dict]:
    r1000 = _commit_rate(cluster, "/bench/commit1000", n_big, 1000)
    r1 = _commit_rate(cluster, "/bench/commit1", n_one, 1)
    r40 = _commit_rate(cluster, "/bench/commit40", n_big // 5, 40)
    return [
        row("tracker_commit", r1000, "records/s", "group size 1", r1),
        row("tracker_commit_group40", r40, "records/s", note="group size 40, the paper's setting"),
    ]


def case_duckdb(tmp: Path, n: int) -> list[dict]:
    from st_integrations.duckdb_sql import connect
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp / "big-infofile"
    create_infofile(
        path,
        {
            "file_id": 1,
            "name": "/bench/big",
            "replication": "x2",
            "copies": 2,
            "blocksize": 16,
            "est_size": 0,
            "created_at": 0,
            "owner": "",
        },
        [(i, f"peer-{i}", f"h:{i}") for i in range(8)],
    )
    w = InfofileWriter(path)
    w.conn.execute("PRAGMA synchronous=OFF")
    for start in range(0, n, 100_000):
        w.commit(
            [
                (f"{['EWR', 'JFK', 'LGA'][i % 3]}/{i:08d}", 1000 + i % 977, i, [i % 8, (i + 1) % 8])
                for i in range(start, min(n, start + 100_000))
            ]
        )
    w.close()
    con = connect({"/bench/big": str(path)})
    t0 = time.perf_counter()
    cnt = con.execute("SELECT count(*) FROM records").fetchone()[0]
    t1 = time.perf_counter()
    groups = con.execute("SELECT split_part(name, '/', 1) AS o, count(*), sum(size) FROM records GROUP BY 1").fetchall()
    t2 = time.perf_counter()
    assert cnt == n and len(groups) == 3
    return [
        row("duckdb_count_1m", t1 - t0, "s", note=f"count(*) over an infofile of {n:,} records"),
        row("duckdb_groupby_1m", t2 - t1, "s", note=f"group-by name prefix over {n:,} records"),
    ]


def case_memory(cluster, n: int, depth: int = 64) -> list[dict]:
    """Client memory while putting 1 MiB records with depth 64: bounded by
    depth x record size."""
    idle = max(rss_bytes(p.pid) for p in cluster.peers if p)
    c = cluster.client(depth=depth)
    f = c.create("/bench/mem", replication="x1")
    tracemalloc.start()
    for i in range(n):
        f.queue_put(f"m{i:06d}", os.urandom(MiB))  # a fresh buffer per record, as an application would
    f.close()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    c.close()
    return [
        row(
            "client_peak_mem_depth64_1mib",
            peak,
            "B",
            note=f"Python heap peak while putting {n} x 1 MiB; bound depth x size = {depth * MiB}",
        ),
        row("peer_rss_idle", idle, "B", note="max over peers before the memory run"),
        row(
            "client_maxrss",
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "B",
            note="whole benchmark process",
        ),
    ]


def case_scaling(tmp: Path, record_counts: list[int], peer_counts: list[int]) -> list[dict]:
    out = []
    data = os.urandom(4096)
    for n in record_counts:
        with LocalCluster(tmp / f"scale-r{n}", n_peers=4, announce_interval=1.0) as cl:
            recs = [(f"s{i:07d}", data) for i in range(n)]
            dt = put_records(cl, "/bench/scale", recs, "x2", depth=64)
            out.append(row(f"scaling_put_x2_records_{n}", n / dt, "records/s", note="4 peers, 4 KiB, x2"))
            out.append(
                row(
                    f"scaling_get_local_records_{n}",
                    n / _get_local_all(cl),
                    "records/s",
                    note="4 peers, ring exchange + every peer's list",
                )
            )
    for p in peer_counts:
        n = record_counts[1] if len(record_counts) > 1 else record_counts[0]
        with LocalCluster(tmp / f"scale-p{p}", n_peers=p, announce_interval=1.0) as cl:
            recs = [(f"s{i:07d}", data) for i in range(n)]
            rep = "x2" if p >= 2 else "x1"
            dt = put_records(cl, "/bench/scale", recs, rep, depth=64)
            out.append(row(f"scaling_put_peers_{p}", n / dt, "records/s", note=f"{n} x 4 KiB, {rep}"))
            out.append(row(f"scaling_get_local_peers_{p}", n / _get_local_all(cl), "records/s", note=f"{n} records"))
    return out


def _get_local_all(cluster) -> float:
    c = cluster.client()
    f = c.open("/bench/scale")
    plan = f.get_local_plan()
    t0 = time.perf_counter()
    got = sum(len(reveal(a, plan)) for a in plan.ring)
    dt = time.perf_counter() - t0
    assert got == plan.records, (got, plan.records)
    f.close()
    c.close()
    return dt


def fresh_cluster(tmp: Path, name: str, n_peers: int = 4) -> LocalCluster:
    return LocalCluster(Path(tempfile.mkdtemp(prefix=name, dir=tmp)), n_peers=n_peers, announce_interval=1.0)
