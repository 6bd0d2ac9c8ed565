"""DuckDB's ``records_data`` over many small Parquet records against the
Dask reader over the same records (issue 38, item 5): a count and a
group-by, each from a new connection (the records read by the first query),
and again on the same connection (the records kept: nothing read). Every
answer is checked against what was written."""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path

import pyarrow as pa

from .cases import fresh_cluster, row

GROUP = "duckdb_records_data"
ROWS = 100  # rows per record (about 3 KiB of Parquet)
KEYS = 10  # distinct values of the group-by column


def _record(i: int) -> bytes:
    import pyarrow.parquet as pq

    t = pa.table(
        {
            "i": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64()),
            "k": pa.array([f"k{j % KEYS}" for j in range(ROWS)], pa.string()),
            "x": pa.array([float(j % 97) for j in range(ROWS)]),
        }
    )
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


def _want(records: int) -> tuple[int, list[tuple[str, int, int]]]:
    n = records * ROWS
    groups: dict[str, tuple[int, int]] = {}
    for v in range(n):
        k = f"k{(v % ROWS) % KEYS}"
        c, s = groups.get(k, (0, 0))
        groups[k] = (c + 1, s + v)
    return n, sorted((k, c, s) for k, (c, s) in groups.items())


COUNT = "SELECT count(*) FROM records_data"
GROUP_BY = "SELECT k, count(*), sum(i) FROM records_data GROUP BY k ORDER BY k"


def _duckdb(client, name: str, con=None):
    """(count, groups, connection): both queries, on ``con`` or a new connection."""
    from st_integrations.duckdb_sql import connect_files

    con = con or connect_files(client, [name], data=True)
    n = con.execute(COUNT).fetchone()[0]
    groups = [tuple(r) for r in con.execute(GROUP_BY).fetchall()]
    return n, groups, con


def _dask(tracker: str, name: str):
    from st_integrations.dask_reader import read_storetorrent

    n = len(read_storetorrent(name, columns=["i"], tracker=tracker, client=None))
    ddf = read_storetorrent(name, columns=["k", "i"], tracker=tracker, client=None)
    g = ddf.groupby("k")["i"].agg(["count", "sum"]).compute()
    return n, sorted((str(k), int(r["count"]), int(r["sum"])) for k, r in g.iterrows())


def case_duckdb_records_data(tmp: Path, records: int, rounds: int = 3) -> list[dict]:
    """``records`` Parquet records of :data:`ROWS` rows, x2 on 4 peers:
    DuckDB's count and group-by over ``records_data`` (a new connection a
    round: every record read) against the Dask reader's (default
    scheduler, in this process) over the same records; the same queries
    again on one connection (records kept) as an untargeted row."""
    cluster = fresh_cluster(tmp, "duck-data-").start()
    try:
        client = cluster.client()
        name, tracker = "/bench/duck_data", cluster.tracker_addr
        with client.create(name, replication="x2") as f:
            for i in range(records):
                f.queue_put(f"part-{i:06d}.parquet", _record(i))
        n_want, g_want = _want(records)
        times: dict[str, list[float]] = {"duckdb": [], "duckdb_kept": [], "dask": []}
        kept = None

        def check(label: str, n: int, groups) -> None:
            if n != n_want or groups != g_want:
                raise AssertionError(f"{label}: {n} rows, groups {groups[:2]}...; wrote {n_want}, {g_want[:2]}...")

        for k in range(rounds + 1):  # round 0 warms (imports, page cache), not timed
            t = time.perf_counter()
            n, groups, con = _duckdb(client, name)
            dt = time.perf_counter() - t
            check("duckdb", n, groups)
            if kept is None:
                kept = con
            else:
                con.close()
            t = time.perf_counter()
            n, groups, _ = _duckdb(client, name, kept)
            dk = time.perf_counter() - t
            check("duckdb, kept", n, groups)
            t = time.perf_counter()
            n, groups = _dask(tracker, name)
            dd = time.perf_counter() - t
            check("dask", n, groups)
            if k:
                times["duckdb"].append(dt)
                times["duckdb_kept"].append(dk)
                times["dask"].append(dd)
        if kept is not None:
            kept.close()
    finally:
        cluster.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    spread = "; ".join(f"{k} " + "/".join(f"{x:.3f}" for x in v) for k, v in times.items())
    note = (
        f"records/s: records a query covers, 2 queries; {records:,} Parquet records of {ROWS} rows, x2 on 4 peers; "
        "count(*) then a group-by of 10 keys "
        f"(count, sum); answers checked; median of {rounds} rounds after a warm one (s: {spread})"
    )
    base = "Dask read_storetorrent over the same records (default scheduler, this process): the same 2 queries"
    return [
        row(
            "duckdb_records_data",
            2 * records / med["duckdb"],
            "records/s",
            base,
            2 * records / med["dask"],
            note=note + "; new connection",
        ),
        row(
            "duckdb_records_data_kept",
            2 * records / med["duckdb_kept"],
            "records/s",
            base,
            2 * records / med["dask"],
            note="the same 2 queries again on one connection: the records kept from its first query, none read",
        ),
    ]
