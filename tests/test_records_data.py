"""DuckDB's ``records_data`` (issue 38, item 5): read through the readers'
scan path, its answers those of the Dask reader over the same records, the
records kept between the queries of a connection and read again only where
a commit changed them."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("dask.dataframe")

ROWS = 20


def _record(i: int) -> bytes:
    t = pa.table(
        {
            "i": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64()),
            "k": pa.array([f"k{(i + j) % 5}" for j in range(ROWS)]),
            "x": pa.array([float(j % 7) for j in range(ROWS)]),
        }
    )
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


def _write(client, name: str, lo: int, hi: int) -> None:
    with client.create(name, replication="x2") if lo == 0 else client.open(name) as f:
        for i in range(lo, hi):
            f.queue_put(f"part-{i:04d}.parquet", _record(i))


QUERIES = {
    "count": "SELECT count(*) AS n FROM records_data",
    "groups": "SELECT k, count(*) AS n, sum(i) AS s, sum(x) AS sx FROM records_data GROUP BY k ORDER BY k",
    "filter": "SELECT count(*) AS n, sum(i) AS s FROM records_data WHERE x > 3 AND k <> 'k1'",
}


def _dask_answers(tracker: str, name: str) -> dict[str, list[tuple]]:
    from st_integrations.dask_reader import read_storetorrent

    df = read_storetorrent(name, tracker=tracker, client=None).compute()
    g = df.groupby("k").agg(n=("i", "count"), s=("i", "sum"), sx=("x", "sum")).sort_index()
    sel = df[(df.x > 3) & (df.k != "k1")]
    return {
        "count": [(len(df),)],
        "groups": [(str(k), int(r.n), int(r.s), float(r.sx)) for k, r in g.iterrows()],
        "filter": [(len(sel), int(sel.i.sum()))],
    }


def _answers(con) -> dict[str, list[tuple]]:
    return {q: [tuple(r) for r in con.execute(sql).fetchall()] for q, sql in QUERIES.items()}


def _connect(cluster, name: str, **kw):
    import duckdb

    from st_integrations.records_data import RecordsData

    rd = RecordsData([name], tracker=cluster.tracker_addr, **kw)
    con = duckdb.connect()
    con.register("records_data", rd)
    return con, rd


def test_records_data_answers_as_the_dask_reader_locally_and_by_get(cluster):
    """Count, group-by and a filter over records_data equal the Dask
    reader's over the same records, read from the local copies (one native
    batch read) and, as on a client that is not a storage node, by GET."""
    from st_integrations.duckdb_sql import connect_files

    c = cluster.client()
    _write(c, "/rd/many", 0, 60)
    want = _dask_answers(cluster.tracker_addr, "/rd/many")
    assert want["count"] == [(60 * ROWS,)]
    con = connect_files(c, ["/rd/many"], data=True)
    assert _answers(con) == want
    con.close()
    con, rd = _connect(cluster, "/rd/many", local=False)
    assert _answers(con) == want
    assert rd.stats["records_read"] == 60 and rd.stats["plans"] == 1
    con.close()
    rd.close()


def test_a_second_query_reads_nothing_again(cluster):
    """The records a connection read are kept: the next queries read none
    (counted), and answer the same with every peer killed and the peers'
    folders (every copy) removed."""
    import shutil

    c = cluster.client()
    _write(c, "/rd/kept", 0, 40)
    want = _dask_answers(cluster.tracker_addr, "/rd/kept")
    con, rd = _connect(cluster, "/rd/kept")
    assert _answers(con) == want
    assert rd.stats["records_read"] == 40 and rd.stats["plans"] == 1
    assert _answers(con) == want
    assert rd.stats["records_read"] == 40 and rd.stats["plans"] == 1  # nothing read, nothing planned
    for i in range(len(cluster.peers)):
        cluster.kill_peer(i)
    shutil.rmtree(cluster.data_dir / "peers")
    assert _answers(con) == want
    assert rd.stats["records_read"] == 40 and rd.stats["plans"] == 1
    con.close()
    rd.close()


def test_a_new_commit_is_seen_by_the_next_query(cluster):
    """A commit after a query (records added, one replaced) is seen by the
    next query on the same connection, which reads only the records the
    commit changed."""
    c = cluster.client()
    _write(c, "/rd/grow", 0, 30)
    con, rd = _connect(cluster, "/rd/grow")
    assert _answers(con) == _dask_answers(cluster.tracker_addr, "/rd/grow")
    assert rd.stats["records_read"] == 30
    _write(c, "/rd/grow", 30, 35)  # 5 new records
    with c.open("/rd/grow") as f:  # and one replaced by the rows of record 99
        f.put("part-0000.parquet", _record(99), replace=True)
    want = _dask_answers(cluster.tracker_addr, "/rd/grow")
    assert want["count"] == [(35 * ROWS,)]
    assert _answers(con) == want
    assert rd.stats["records_read"] == 36 and rd.stats["plans"] == 2  # the 6 changed records only
    con.close()
    rd.close()


def test_a_query_decodes_only_the_columns_it_names_once(cluster):
    """Each column is decoded once per connection, when a query first
    names it; a filter on a column no query decoded yet (through the
    Dataset API, where the filter's columns need not be projected) still
    gives the right rows."""
    import pyarrow.dataset as ds

    c = cluster.client()
    _write(c, "/rd/cols", 0, 12)
    want = _dask_answers(cluster.tracker_addr, "/rd/cols")
    con, rd = _connect(cluster, "/rd/cols")
    assert con.execute("SELECT sum(i) FROM records_data").fetchone() == (sum(range(12 * ROWS)),)
    assert rd.stats["columns_decoded"] == 1
    assert con.execute("SELECT sum(i) FROM records_data WHERE i % 2 = 0").fetchone()[0] == sum(range(0, 12 * ROWS, 2))
    assert rd.stats["columns_decoded"] == 1
    t = rd.scanner(columns=["i"], filter=(ds.field("x") > 3) & (ds.field("k") != "k1")).to_table()
    assert [(t.num_rows, sum(t.column("i").to_pylist()))] == want["filter"]
    assert _answers(con) == want
    assert rd.stats["columns_decoded"] == 3 and rd.stats["records_read"] == 12
    con.close()
    rd.close()
