"""Analysis at scale (issue "Analysis at scale", point 7): the readers and
the writer of ``st_integrations`` against the engines' own Parquet paths on
the same record files, in the same run, on the same engine instance.

* ``case_analysis_ray`` / ``case_analysis_dask`` / ``case_analysis_pyarrow``:
  a group-by aggregate over an x2 file of Parquet records, through
  ``read_storetorrent`` against ``ray.data.read_parquet`` /
  ``dd.read_parquet`` over the same record files on local disk (their
  GET_LOCAL paths), and one process of pyarrow for reference;
* ``case_bounded_ray`` / ``case_bounded_dask``: a full scan of a file at least 4x Ray's object
  store and 4x a Dask worker's memory limit, with the peak RSS of every
  process involved (psutil, sampled in a thread);
* ``case_pushdown``: bytes read from disk (``/proc/self/io`` ``rchar``) by
  a full scan, a filtered scan selecting about 1% of the row groups and a
  one-column projection, in this process;
* ``case_ray_write``: ``write_storetorrent`` against ``ds.write_parquet``
  of the same materialized Dataset.

Rows are :func:`bench.cases.row` rows.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from .cases import MiB, row

GROUPS = 100  # distinct keys of column k
ROW_GROUPS = 16  # row groups per record
BYTES_PER_ROW = 29  # k (dictionary), x, y, z (float64), t (int64 rising), snappy: about 29 bytes
COLUMNS = ["k", "x", "y", "z"]  # what the group-by reads (t is for the pushdown case)
RAY_STORE_MIN = 80 * MiB  # Ray accepts 75 MiB at least


# -- an environment workaround -------------------------------------------------
_NO_FSSPEC_HTTP = """
import importlib.util, sys


class _NoFsspecHttp:
    # Without aiohttp, fsspec.implementations.http fails to import. Ray
    # Data's file indexer imports it from several threads at once and
    # catches only ModuleNotFoundError: a thread that finds the module half
    # initialized gets "ImportError: cannot import name 'HTTPFileSystem'"
    # and ray.data.read_parquet of more than a few files fails
    # (/tmp/bench_bugs.md). Failing the import before any module object
    # exists makes every thread see ModuleNotFoundError.
    def find_spec(self, name, path=None, target=None):
        if name == "fsspec.implementations.http":
            raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")
        return None


if importlib.util.find_spec("aiohttp") is None and not any(
        type(f).__name__ == "_NoFsspecHttp" for f in sys.meta_path):
    sys.meta_path.insert(0, _NoFsspecHttp())
"""


def no_fsspec_http(folder: Path) -> dict:
    """Install the finder above in this process, and write it as
    ``folder/sitecustomize.py`` for the processes Ray starts. Returns the
    environment for them (``PYTHONPATH`` with ``folder`` first): Ray's
    ``worker_process_setup_hook`` would do the same but its runtime
    environment doubles a cold worker's start here (0.9 -> 1.7 s for 4
    workers, measured), a cost the StoreTorrent side pays more often (its
    schema pass starts workers)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_NO_FSSPEC_HTTP)
    exec(compile(_NO_FSSPEC_HTTP, str(folder / "sitecustomize.py"), "exec"), {"__name__": "sitecustomize"})
    return {"PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}


def start_ray(peers: list[str], tmp: Path, **kwargs) -> None:
    """One local Ray node with 2 CPUs, holding the ``st-peer-HOST-PORT``
    resource of every peer (all of them are on this machine)."""
    import logging

    import ray

    from st_integrations.placement import peer_resource

    env = no_fsspec_http(tmp / "ray-site")
    saved = os.environ.get("PYTHONPATH")
    os.environ.update(env)  # the raylet inherits it, and its workers from it
    try:
        for attempt in range(4):  # Ray's start can miss its deadline on a loaded 2-core VM
            try:
                ray.init(
                    address="local",  # a Ray of its own, never one another program started here
                    num_cpus=2,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    logging_level=logging.WARNING,
                    resources={peer_resource(p): 1 for p in peers},
                    **kwargs,
                )
                break
            except Exception:
                ray.shutdown()
                if attempt == 3:
                    raise
                time.sleep(3 + 2 * attempt)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)


# -- the data ------------------------------------------------------------------
def parquet_table(i: int, rows: int) -> pa.Table:
    """Record ``i``: ``k`` (int64, GROUPS keys), ``x``, ``y`` (uniform),
    ``z`` (normal) and ``t`` rising over the whole file (record i holds
    ``t`` in ``[i * rows, (i + 1) * rows)``), so row-group statistics on
    ``t`` are selective."""
    rng = np.random.default_rng(1000 + i)
    return pa.table(
        {
            "k": rng.integers(0, GROUPS, rows, dtype=np.int64),
            "x": rng.random(rows),
            "y": rng.random(rows),
            "z": rng.standard_normal(rows),
            "t": np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
        }
    )


def parquet_bytes(t: pa.Table, row_groups: int = ROW_GROUPS) -> bytes:
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    pq.write_table(t, buf, row_group_size=math.ceil(t.num_rows / row_groups), use_dictionary=["k"])
    return buf.getvalue().to_pybytes()


@dataclass
class PqFile:
    name: str
    bytes: int
    rows: int
    records: int
    rows_per_record: int
    paths: list[str]  # the records' local files, from GET_LOCAL
    links: list[str]  # a symlink named *.parquet to each (Ray Data's read_parquet lists by extension)


def record_paths(cluster, name: str) -> list[str]:
    """The local paths GET_LOCAL reveals for ``name`` (one per record)."""
    from st_integrations.readplan import plan_scan

    with cluster.client() as c:
        plan = plan_scan(c, name)
    return [r.path for u in plan.units for r in u.records]


def make_parquet_file(cluster, name: str, total: int, record: int, links: Path, replication: str = "x2") -> PqFile:
    """A file of Parquet records of about ``record`` bytes each, about
    ``total`` bytes in all; ``links``: a new folder for :func:`link_parquet`."""
    rows = max(ROW_GROUPS, record // BYTES_PER_ROW)
    data = parquet_bytes(parquet_table(0, rows))
    n = max(2, math.ceil(total / len(data)))  # at least ``total``
    size = 0
    c = cluster.client(depth=8)
    with c.create(name, replication=replication, est_size=n * len(data), blocksize=1) as f:  # spread over the peers
        for i in range(n):
            data = data if i == 0 else parquet_bytes(parquet_table(i, rows))
            size += len(data)
            f.queue_put(f"part-{i:05d}.parquet", data)
    c.close()
    paths = record_paths(cluster, name)
    assert len(paths) == n, (len(paths), n)
    return PqFile(name, size, n * rows, n, rows, paths, link_parquet(paths, links))


def link_parquet(paths: list[str], folder: Path) -> list[str]:
    """Symlinks ``folder/NNNNN.parquet`` to the record files: a record's
    file name ends with ``@rank@crc``, and Ray Data's Parquet datasource
    (V2) keeps only ``*.parquet`` files even with ``file_extensions=None``
    (/tmp/bench_bugs.md). The bytes read are the records' own."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, p in enumerate(paths):
        link = folder / f"{i:05d}.parquet"
        link.symlink_to(p)
        out.append(str(link))
    return out


# -- the aggregate ---------------------------------------------------------------
def _norm(df):
    """A result frame as ``k, n, sx, my, mz`` sorted by k, numpy dtypes."""
    import pandas as pd

    out = pd.DataFrame(
        {c: pd.Series(df[c]).to_numpy(dtype="float64" if c != "n" else "int64") for c in ("k", "n", "sx", "my", "mz")}
    )
    return out.sort_values("k").reset_index(drop=True)


def check_same(a, b, what: str) -> None:
    assert len(a) == len(b) == GROUPS, (what, len(a), len(b))
    assert (a.k.to_numpy() == b.k.to_numpy()).all() and (a.n.to_numpy() == b.n.to_numpy()).all(), what
    for c in ("sx", "my", "mz"):
        assert np.allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=1e-9, atol=1e-9), (what, c)


def ray_aggregate(ds):
    from ray.data.aggregate import Count, Max, Mean, Sum

    df = ds.groupby("k").aggregate(Count(), Sum("x"), Mean("y"), Max("z")).to_pandas()
    return _norm(df.rename(columns={"count()": "n", "sum(x)": "sx", "mean(y)": "my", "max(z)": "mz"}))


def dask_aggregate(ddf):
    df = ddf.groupby("k").agg({"x": ["count", "sum"], "y": "mean", "z": "max"}).compute()
    df.columns = ["n", "sx", "my", "mz"]
    return _norm(df.reset_index())


def pyarrow_aggregate(paths: list[str]):
    import pyarrow.dataset as pds

    t = pds.dataset(paths, format="parquet").to_table(columns=COLUMNS)
    g = t.group_by("k").aggregate([("x", "count"), ("x", "sum"), ("y", "mean"), ("z", "max")])
    return _norm(g.rename_columns({"x_count": "n", "x_sum": "sx", "y_mean": "my", "z_max": "mz"}).to_pandas())


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _alternate(sides: dict, rounds: int, check=None, warm: bool = True, after=None) -> dict[str, list[float]]:
    """With ``warm``, one untimed run of each side first (the engine's
    workers start, imports load); then ``rounds`` rounds running every side
    in turn, the order rotating each round. ``check(ref, out, side)``
    compares each answer with the first side's; ``after(side, out)`` runs
    untimed after each run (cleanup). Returns the times per side."""
    names = list(sides)
    ref = None

    def run(n, timed: bool):
        nonlocal ref
        dt, out = _timed(sides[n])
        if check is not None:
            if ref is None:
                ref = out
            else:
                check(ref, out, n)
        if after is not None:
            after(n, out)
        if timed:
            times[n].append(dt)

    times: dict[str, list[float]] = {n: [] for n in names}
    if warm:
        for n in names:
            run(n, False)
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            run(n, True)
    return times


def _spread(v: list[float]) -> str:
    return "/".join(f"{x:.2f}" for x in v)


def case_analysis_ray(cluster, f: PqFile, rounds: int = 3, warm: bool = True) -> list[dict]:
    """Group-by through ``read_storetorrent`` against ``ray.data.read_parquet``
    of the same files, on one Ray instance started by the caller."""
    import ray

    from st_integrations.ray_reader import read_storetorrent

    tracker = cluster.tracker_addr
    sides = {
        "st": lambda: ray_aggregate(read_storetorrent(f.name, tracker=tracker, columns=COLUMNS)),
        "pq": lambda: ray_aggregate(ray.data.read_parquet(f.links).select_columns(COLUMNS)),
    }
    times = _alternate(sides, rounds, check_same, warm)
    st, pq = statistics.median(times["st"]), statistics.median(times["pq"])
    note = (
        f"groupby(k) count/sum/mean/max over {f.records} Parquet records, {f.rows:,} rows, x2 on 4 peers; "
        f"median of {rounds} alternated rounds (s: st {_spread(times['st'])}, pq {_spread(times['pq'])})"
    )
    return [
        row(
            "analysis_ray",
            f.bytes / st,
            "B/s",
            "ray.data.read_parquet of the same files, same Ray",
            f.bytes / pq,
            note=note,
        )
    ]


def case_analysis_dask(cluster, f: PqFile, dclient, rounds: int = 3, warm: bool = True) -> list[dict]:
    import dask.dataframe as dd

    from st_integrations.dask_reader import read_storetorrent

    tracker = cluster.tracker_addr
    sides = {
        "st": lambda: dask_aggregate(read_storetorrent(f.name, tracker=tracker, client=dclient, columns=COLUMNS)),
        "pq": lambda: dask_aggregate(dd.read_parquet(f.links, columns=COLUMNS)),
    }
    times = _alternate(sides, rounds, check_same, warm)
    st, pq = statistics.median(times["st"]), statistics.median(times["pq"])
    note = (
        f"groupby(k) count/sum/mean/max, {f.bytes / MiB:,.0f} MiB; median of {rounds} alternated rounds "
        f"(s: st {_spread(times['st'])}, pq {_spread(times['pq'])})"
    )
    return [
        row(
            "analysis_dask",
            f.bytes / st,
            "B/s",
            "dd.read_parquet of the same files, same Dask cluster",
            f.bytes / pq,
            note=note,
        )
    ]


def case_analysis_pyarrow(f: PqFile, rounds: int = 3) -> list[dict]:
    times = _alternate({"pa": lambda: pyarrow_aggregate(f.links)}, rounds)
    return [
        row(
            "analysis_pyarrow",
            f.bytes / statistics.median(times["pa"]),
            "B/s",
            note=f"one process: pyarrow.dataset to_table + group_by, the same files; median of {rounds} "
            f"(s: {_spread(times['pa'])})",
        )
    ]


# -- pushdown --------------------------------------------------------------------
def rchar() -> int:
    """Bytes this process has passed through read() and pread() (all
    threads), from ``/proc/self/io``."""
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def _scan_bytes(units, schema, columns, filter, verify: bool = False) -> tuple[int, int, float]:
    """Read every unit in this thread; (bytes read, rows, seconds). With
    ``verify`` each record is read whole and its CRC-32C checked first (the
    readers' default); without, Parquet reads only what it decodes."""
    from st_integrations.scan import ScanOptions, read_unit

    opts = ScanOptions(verify=verify)
    rows = 0
    r0, t0 = rchar(), time.perf_counter()
    for u in units:
        for b in read_unit(u, schema, columns, filter, opts):
            rows += b.num_rows
    return rchar() - r0, rows, time.perf_counter() - t0


def case_pushdown(cluster, f: PqFile) -> list[dict]:
    """Bytes read from disk by a full scan of ``f``'s planned units, by the
    same scan with a filter on the rising ``t`` whose row-group statistics
    select about 1% of the row groups, and by a one-column projection."""
    import pyarrow.compute as pc

    from st_integrations.formats import record_schema
    from st_integrations.readplan import plan_scan

    with cluster.client() as c:
        plan = plan_scan(c, f.name)
    first = plan.units[0].records[0]
    schema = record_schema(first.name, first.path)
    groups = f.records * ROW_GROUPS
    k = max(1, min(ROW_GROUPS, round(0.01 * groups)))
    rg_rows = math.ceil(f.rows_per_record / ROW_GROUPS)
    lo = (f.records // 2) * f.rows_per_record  # the first row group of the middle record
    flt = (pc.field("t") >= lo) & (pc.field("t") < lo + k * rg_rows)
    idle = rchar()
    full, rows, t_full = _scan_bytes(plan.units, schema, None, None)
    filt, frows, t_filt = _scan_bytes(plan.units, schema, None, flt)
    proj, prows, t_proj = _scan_bytes(plan.units, schema, ["x"], None)
    checked, crows, t_checked = _scan_bytes(plan.units, schema, None, None, verify=True)
    assert crows == rows
    assert rows == prows == f.rows and frows == k * rg_rows, (rows, prows, frows, f.rows, k * rg_rows)
    assert full >= f.bytes * 0.95, (full, f.bytes)  # the scan did read the records (no memory map)
    base = "full scan: every column, no filter"
    one = f"{f.records} records x {ROW_GROUPS} row groups, {f.bytes / MiB:,.0f} MiB"
    return [
        row(
            "pushdown_filter_bytes",
            filt,
            "B",
            base,
            full,
            note=f"t range matching {k} of {groups} row groups ({100 * k / groups:.1f}%); copies not CRC-checked "
            f"(ScanOptions(verify=False)); rchar of this "
            f"process around read_unit over the planned units, 1 thread; {one}; "
            f"{t_filt:.2f} s vs {t_full:.2f} s",
        ),
        row("pushdown_projection_bytes", proj, "B", base, full, note=f"columns=['x'] (1 of 5); {t_proj:.2f} s"),
        row(
            "pushdown_full_scan_bytes",
            full,
            "B",
            "the records' bytes",
            f.bytes,
            note=f"rchar outside the four scans while they ran: {rchar() - idle - full - filt - proj - checked} B",
        ),
        row(
            "scan_crc_check_time",
            t_checked,
            "s",
            "the same full scan, copies not checked",
            t_full,
            note=f"each record read whole and its CRC-32C checked before parsing (the readers' default); "
            f"{checked / MiB:,.0f} MiB read vs {full / MiB:,.0f} MiB",
        ),
    ]


# -- bounded memory --------------------------------------------------------------
class PeakRSS:
    """Samples, in a thread, the RSS of this process and all its
    descendants (Ray's raylet, GCS, workers; Dask's workers; the local
    cluster's tracker and peers) and keeps each process's peak and the
    peak of their sum at one instant (shared memory, e.g. Ray's object
    store, counts in every process that maps it)."""

    def __init__(self, interval: float = 0.1):
        import psutil

        self.interval, self.me = interval, psutil.Process()
        self.peak: dict[int, int] = {}
        self.first: dict[int, int] = {}  # RSS when first seen
        self.role: dict[int, str] = {}
        self.total = 0
        self.total_first: int | None = None  # the sum at the first sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def classify(p, me: int) -> str:
        if p.pid == me:
            return "driver"
        try:
            name, argv = p.name(), p.cmdline()
        except Exception:
            return "other"
        title = argv[0] if argv else name  # Ray sets worker titles: ray::IDLE, ray::ReadStoreTorrent->...
        cmd = " ".join(argv)
        if os.path.basename(title) == "st-peer" or "st-peer" in " ".join(argv[:4]):
            return "st peer"
        if "st_py.tracker" in cmd:
            return "st tracker"
        if name == "raylet" or os.path.basename(title) == "raylet":
            return "ray raylet (object store)"
        if name == "gcs_server" or os.path.basename(title) == "gcs_server":
            return "ray gcs"
        if title.startswith("ray::"):
            if "Agent" in title:
                return "ray other"
            return "ray actor" if title.startswith("ray::_") else "ray worker"
        if "ray" in cmd:
            return "ray other"
        if "spawn_main" in cmd:
            return "dask worker"
        return "other"

    def _sample(self) -> None:
        import psutil

        tot = 0
        try:
            procs = [self.me] + self.me.children(recursive=True)
        except psutil.Error:
            return
        for p in procs:
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            tot += rss
            role = self.classify(p, self.me.pid)  # each time: Ray workers retitle themselves
            if role != "other" or p.pid not in self.role:  # an exiting process's cmdline is empty
                self.role[p.pid] = role
            self.first.setdefault(p.pid, rss)
            if rss > self.peak.get(p.pid, 0):
                self.peak[p.pid] = rss
        self.total = max(self.total, tot)
        if self.total_first is None:
            self.total_first = tot

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRSS":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def by_role(self) -> dict[str, tuple[int, int, int]]:
        """``{role: (processes, largest peak, that process's RSS when first seen)}``."""
        out: dict[str, tuple[int, int, int]] = {}
        for pid, rss in self.peak.items():
            r = self.role.get(pid, "other")
            n, m, f = out.get(r, (0, 0, 0))
            out[r] = (n + 1, rss, self.first[pid]) if rss > m else (n + 1, m, f)
        return out


def _rss_rows(prefix: str, mon: PeakRSS, roles: list[str], note: str) -> list[dict]:
    by = mon.by_role()
    out = []
    for r in roles:
        if r in by:
            n, peak, first = by[r]
            out.append(
                row(
                    f"{prefix}_rss_{r.split(' (')[0].replace(' ', '_')}",
                    peak,
                    "B",
                    note=f"peak RSS, largest of {n} process{'es' if n > 1 else ''}: {r} (that one "
                    f"{first / MiB:.0f} MiB when first seen); {note}",
                )
            )
    others = ", ".join(f"{r} {m / MiB:.0f} MiB ({n})" for r, (n, m, _) in sorted(by.items()) if r not in roles)
    out.append(
        row(
            f"{prefix}_rss_all",
            mon.total,
            "B",
            note=f"peak of the summed RSS of every process at one instant (shared pages count in each; "
            f"{(mon.total_first or 0) / MiB:,.0f} MiB at the start); largest of the others: {others}",
        )
    )
    return out


def _count_rows(batch):
    return {"n": [batch.num_rows]}


def case_bounded_ray(cluster, f: PqFile, store: int, block: int, tmp: Path) -> list[dict]:
    """A full scan of ``f`` (at least 4x ``store``) through
    ``read_storetorrent`` with a Ray object store of ``store`` bytes."""
    import ray

    from st_integrations.ray_reader import read_storetorrent

    assert f.bytes >= 4 * store, (f.bytes, store)
    start_ray(cluster.peer_addrs, tmp, object_store_memory=store)
    try:
        with PeakRSS() as mon:
            t0 = time.perf_counter()
            ds = read_storetorrent(f.name, tracker=cluster.tracker_addr, block_size=block)
            n = ds.map_batches(_count_rows, batch_format="pyarrow", batch_size=None).sum("n")
            dt = time.perf_counter() - t0
        assert n == f.rows, (n, f.rows)
        spilled = _ray_spilled()
    finally:
        ray.shutdown()
    note = (
        f"{f.bytes / MiB:,.0f} MiB file ({f.bytes / store:.1f}x the object store of {store / MiB:.0f} MiB), "
        f"block_size {block / MiB:.0f} MiB, map_batches count of every row; {spilled}"
    )
    return [row("bounded_ray_scan", f.bytes / dt, "B/s", note=note)] + _rss_rows(
        "bounded_ray",
        mon,
        ["driver", "ray raylet (object store)", "ray worker", "ray gcs"],
        f"object store {store / MiB:.0f} MiB",
    )


def _ray_spilled() -> str:
    try:
        from ray._private.internal_api import memory_summary

        lines = [
            ln.strip() for ln in memory_summary(stats_only=True).splitlines() if "pilled" in ln or "Restored" in ln
        ]
        return "; ".join(lines) if lines else "nothing spilled"
    except Exception as e:  # diagnostics only
        return f"spill stats unavailable ({type(e).__name__})"


def case_bounded_dask(cluster, f: PqFile, limit: int, block: int) -> list[dict]:
    """``ddf.sum()`` (every column) of ``f`` (at least 4x ``limit``) through
    the Dask reader on 2 workers of ``limit`` bytes each."""
    from distributed import Client
    from distributed import LocalCluster as DaskCluster

    from st_integrations.dask_reader import read_storetorrent

    assert f.bytes >= 4 * limit, (f.bytes, limit)
    with PeakRSS() as mon:
        with (
            DaskCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=limit
            ) as dc,
            Client(dc) as dclient,
        ):
            t0 = time.perf_counter()
            ddf = read_storetorrent(f.name, tracker=cluster.tracker_addr, client=dclient, blocksize=block)
            total = ddf.sum().compute()
            dt = time.perf_counter() - t0
            nparts = ddf.npartitions
    rows = f.rows
    # every row was read once: t is 0 .. rows-1 (the sum of mixed columns comes back as float64)
    assert math.isclose(float(total["t"]), rows * (rows - 1) / 2, rel_tol=1e-12), (total["t"], rows)
    note = (
        f"ddf.sum() of every column, {f.bytes / MiB:,.0f} MiB file ({f.bytes / limit:.1f}x a worker's "
        f"memory_limit of {limit / MiB:.0f} MiB), blocksize {block / MiB:.0f} MiB, {nparts} partitions"
    )
    return [row("bounded_dask_scan", f.bytes / dt, "B/s", note=note)] + _rss_rows(
        "bounded_dask", mon, ["driver", "dask worker"], f"memory_limit {limit / MiB:.0f} MiB"
    )


# -- Ray write -------------------------------------------------------------------
def case_ray_write(cluster, total: int, block: int, tmp: Path, rounds: int = 3, warm: bool = True) -> list[dict]:
    """``write_storetorrent(ds, name, replication="x1")`` against
    ``ds.write_parquet(dir)`` of the same materialized Dataset (one Parquet
    file or record per block), on the Ray instance of the caller."""
    import ray

    from st_integrations.ray_writer import write_storetorrent

    rows = max(1, block // 40)  # in memory: 5 x 8 bytes a row
    n = max(2, round(total / block))
    ds = ray.data.from_arrow([parquet_table(i, rows) for i in range(n)]).materialize()
    size, nrows = ds.size_bytes(), ds.count()
    seq = iter(range(10**6))
    tracker = cluster.tracker_addr

    def st():
        name = f"/bench/raywrite{next(seq)}"
        return ("st", name, write_storetorrent(ds, name, replication="x1", tracker=tracker))

    def pq():
        d = tmp / f"raywrite{next(seq)}"
        ds.write_parquet(str(d))
        return ("pq", d, len(list(d.glob("*.parquet"))))

    def after(side, out):
        kind, where, count = out
        assert count == n, (side, count, n)
        if kind == "st":
            with cluster.client() as c:
                c.delete(where)
        else:
            shutil.rmtree(where)
        os.sync()  # the next run does not pay this one's writeback

    times = _alternate({"st": st, "pq": pq}, rounds, warm=warm, after=after)
    t_st, t_pq = statistics.median(times["st"]), statistics.median(times["pq"])
    note = (
        f"{n} blocks, {size / MiB:,.0f} MiB in memory, {nrows:,} rows, one Parquet record/file per block, "
        f"x1 on 4 peers; median of {rounds} alternated rounds (s: st {_spread(times['st'])}, "
        f"pq {_spread(times['pq'])})"
    )
    base = "ds.write_parquet(local dir), same Dataset, same Ray"
    return [
        row("ray_write", size / t_st, "B/s", base, size / t_pq, note=note),
        row("ray_write_rows", nrows / t_st, "records/s", base, nrows / t_pq, note="rows per second, same runs"),
    ]


# -- the whole group, as bench/__main__.py runs it -----------------------------------
GROUPS_OF_CASES = ("analysis", "pushdown", "raywrite", "bounded")


def run_cases(tmp: Path, size: dict, want: set, status) -> list[dict]:
    """The cases of ``want`` (a subset of :data:`GROUPS_OF_CASES`) on a
    fresh 4-peer cluster, which is stopped at the end, as every Ray
    instance and Dask cluster is after its case. ``status(text)`` is a
    context manager that shows progress."""
    import logging

    from .cases import fresh_cluster

    out: list[dict] = []
    cluster = fresh_cluster(tmp, "analysis-").start()
    try:
        if want & {"analysis", "pushdown"}:
            with status(f"analysis: writing {size['analysis']} MiB of Parquet records (x2)"):
                f = make_parquet_file(
                    cluster,
                    "/bench/analysis",
                    size["analysis"] * MiB,
                    size["analysis_record"] * MiB,
                    tmp / "analysis-links",
                    "x2",
                )
            if "pushdown" in want:
                with status("analysis: pushdown (bytes read)"):
                    out += case_pushdown(cluster, f)
            if "analysis" in want:
                with status("analysis: pyarrow, one process"):
                    out += case_analysis_pyarrow(f, size["rounds"])
        if want & {"analysis", "raywrite"}:
            import ray

            with status("analysis: starting Ray"):
                start_ray(cluster.peer_addrs, tmp)
            try:
                if "analysis" in want:
                    with status("analysis: Ray group-by, StoreTorrent vs read_parquet"):
                        out += case_analysis_ray(cluster, f, size["ray_rounds"], size["warm"])
                if "raywrite" in want:
                    with status("analysis: Ray write, StoreTorrent vs write_parquet"):
                        out += case_ray_write(
                            cluster,
                            size["raywrite"] * MiB,
                            size["raywrite_block"] * MiB,
                            tmp,
                            size["rounds"],
                            size["warm"],
                        )
            finally:
                ray.shutdown()
        if "analysis" in want:
            from distributed import Client
            from distributed import LocalCluster as DaskCluster

            quiet = logging.getLogger("distributed.shuffle")
            level = quiet.level
            quiet.setLevel(logging.ERROR)  # a line per groupby shuffle otherwise
            try:
                with (
                    status("analysis: Dask group-by, StoreTorrent vs dd.read_parquet"),
                    DaskCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dc,
                    Client(dc) as dclient,
                ):
                    out += case_analysis_dask(cluster, f, dclient, size["rounds"], size["warm"])
            finally:
                quiet.setLevel(level)
        if "bounded" in want:
            store, limit = size["ray_store"] * MiB, size["dask_limit"] * MiB
            with status(f"analysis: writing {size['bounded']} MiB of Parquet records (x1)"):
                big = make_parquet_file(
                    cluster, "/bench/bounded", size["bounded"] * MiB, 8 * MiB, tmp / "bounded-links", "x1"
                )
            with status("analysis: bounded memory, Ray"):
                out += case_bounded_ray(cluster, big, store, 16 * MiB, tmp)
            with status("analysis: bounded memory, Dask"):
                out += case_bounded_dask(cluster, big, limit, 8 * MiB)
    finally:
        cluster.stop()
    return out
