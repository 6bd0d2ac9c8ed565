"""Record formats, schema unification and pushdown: the mixed-format file
read through a real cluster gives the right rows, conflicting records give an
error naming both, and pushdown reads fewer bytes (counted by the kernel)."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from analysis_data import ROW_GROUP, parquet_bytes, parquet_part
from helpers import to_csv

from st_integrations.formats import (
    RAW_SCHEMA,
    SchemaConflictError,
    SchemaSource,
    conform,
    detect,
    record_schema,
    scan_record,
    unify,
)

N_EACH = 30


def _rows(i: int) -> pa.Table:
    return pa.table(
        {
            "rec": pa.array([i] * 20, pa.int64()),
            "row": pa.array(range(20), pa.int64()),
            "v": pa.array([i * 100.0 + r for r in range(20)]),
        }
    )


def _jsonl(t: pa.Table) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in t.to_pylist()).encode()


def test_detect_by_magic_then_extension():
    assert detect("x", b"PAR1\x15\x04") == "parquet"
    assert detect("x.csv", b"ARROW1\x00\x00") == "arrow"
    assert detect("x", b"\xff\xff\xff\xff\x10\x00") == "arrows"
    assert detect("a/b.csv", b"a,b\n1,2") == "csv"
    assert detect("a/b.JSONL", b'{"a": 1}') == "json"
    assert detect("a/b.tsv.gz", b"\x1f\x8b") == "csv"
    assert detect("a/b", b"hello") == "raw"


def test_mixed_format_file_reads_every_row(cluster, local_dask):
    from st_integrations.dask_reader import read_storetorrent

    c = cluster.client()
    with c.create("/fmt/mixed", replication="x2") as f:
        for i in range(3 * N_EACH):
            t = _rows(i)
            kind = i % 3
            if kind == 0:
                f.queue_put(f"r{i:03d}.parquet", parquet_bytes(t))
            elif kind == 1:
                f.queue_put(f"r{i:03d}.csv", to_csv(t))
            else:
                f.queue_put(f"r{i:03d}.jsonl", _jsonl(t))
    df = read_storetorrent("/fmt/mixed", tracker=cluster.tracker_addr, client=local_dask).compute()
    want = pa.concat_tables([_rows(i) for i in range(3 * N_EACH)]).to_pandas()
    assert len(df) == len(want) == 3 * N_EACH * 20
    assert df.isna().sum().sum() == 0
    got = df.sort_values(["rec", "row"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_conflicting_records_name_both(cluster, local_dask):
    from st_integrations.dask_reader import read_storetorrent

    c = cluster.client()
    with c.create("/fmt/conflict", replication="x2") as f:
        f.put("a.parquet", parquet_bytes(pa.table({"id": pa.array([1, 2], pa.int64())})))
        f.put("b.parquet", parquet_bytes(pa.table({"id": ["x", "y"]})))
    with pytest.raises(SchemaConflictError) as e:
        read_storetorrent("/fmt/conflict", tracker=cluster.tracker_addr, client=local_dask)
    assert {e.value.first, e.value.second} == {"a.parquet", "b.parquet"} and e.value.column == "id"
    assert "a.parquet" in str(e.value) and "b.parquet" in str(e.value)


def test_unify_widens_and_fills_missing_columns_with_nulls():
    a = pa.schema([("x", pa.int32()), ("s", pa.string())])
    b = pa.schema([("x", pa.float64()), ("extra", pa.int64())])
    u = unify([SchemaSource(a, "a"), SchemaSource(b, "b")])
    assert u == pa.schema([("x", pa.float64()), ("s", pa.string()), ("extra", pa.int64())])
    batch = pa.record_batch({"x": pa.array([1, 2], pa.int32()), "s": ["p", "q"]})
    out = conform(batch, u, "a")
    assert out.column("x").to_pylist() == [1.0, 2.0] and out.column("extra").null_count == 2
    with pytest.raises(SchemaConflictError, match="'c'.*lacks"):
        conform(pa.record_batch({"zzz": [1]}), u, "c")
    assert unify([]) == RAW_SCHEMA


def _rchar() -> int:
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split()[1])


def test_parquet_pushdown_reads_fewer_bytes(tmp_path):
    """Projection and row-group skipping, measured as bytes the process read
    (/proc/self/io rchar), on a 100-row-group record of about 10 MB: a filter
    that selects 1% of the row groups reads at most 5% of the bytes."""
    groups = 100
    t = pa.table(
        {
            "t": pa.array(range(groups * ROW_GROUP), pa.int64()),
            "a": pa.array([float(i) for i in range(groups * ROW_GROUP)]),
            "blob": pa.array([("z" * 1000) + str(i) for i in range(groups * ROW_GROUP)]),
        }
    )
    path = tmp_path / "rec"
    pq.write_table(t, path, row_group_size=ROW_GROUP, compression="none")
    schema = record_schema("rec.parquet", str(path))

    def read(columns=None, filter=None):
        before = _rchar()
        rows = sum(b.num_rows for b in scan_record("rec.parquet", str(path), "parquet", schema, columns, filter))
        return _rchar() - before, rows

    full, n = read()
    assert n == groups * ROW_GROUP
    one_group, n = read(filter=(pc.field("t") >= 5 * ROW_GROUP) & (pc.field("t") < 5 * ROW_GROUP + 10))
    assert n == 10
    projected, n = read(columns=["t"])
    assert n == groups * ROW_GROUP
    assert one_group <= full * 0.05, (one_group, full)  # 1 of 100 row groups, plus the footer
    assert projected < full * 0.05, (projected, full)  # "t" is a small share of the bytes


def test_arrow_stream_projection_and_filter(tmp_path):
    t = parquet_part(3)
    path = tmp_path / "s"
    with pa.ipc.new_stream(str(path), t.schema) as w:
        w.write_table(t)
    schema = record_schema("s", str(path))
    out = pa.Table.from_batches(list(scan_record("s", str(path), None, schema, ["k", "row"], pc.field("row") < 3)))
    assert out.column_names == ["k", "row"] and out.column("row").to_pylist() == [0, 1, 2]


def test_pandas_parquet_and_csv_of_one_table_read_as_one_everywhere(cluster, local_dask):
    """Issue 38, item 3: pandas 3 writes strings as large_string, a CSV of
    the same table reads as string; every reader unifies them
    (st_integrations.schemas) and gives the table twice, the CLI's SQL too."""
    from helpers import run_cli

    from st_integrations.arrow_dataset import dataset
    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.duckdb_sql import connect_files

    url = f"storetorrent://{cluster.tracker_addr}/exp/mixmin"
    df = pd.DataFrame({"k": ["a", "b", "c"], "v": [1, 2, 3]})
    df.to_parquet(f"{url}/a.parquet", index=False)
    df.to_csv(f"{url}/b.csv", index=False)
    with cluster.client() as c, c.open("/exp/mixmin") as f:
        assert pq.read_schema(pa.BufferReader(f.get("a.parquet"))).field("k").type == pa.large_string()
    want = pd.concat([df, df], ignore_index=True).sort_values(["k", "v"]).reset_index(drop=True)

    def same(got) -> None:
        got = got.to_pandas() if hasattr(got, "to_pandas") else got
        got = got[["k", "v"]].astype({"k": "str", "v": "int64"}).sort_values(["k", "v"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)

    t = dataset("/exp/mixmin", tracker=cluster.tracker_addr).to_table()
    assert t.schema.field("k").type == pa.large_string()  # the permissive unification's
    same(t)
    same(read_storetorrent("/exp/mixmin", tracker=cluster.tracker_addr, client=local_dask).compute())
    with cluster.client() as c:
        con = connect_files(c, ["/exp/mixmin"], data=True)
        try:
            same(con.execute("SELECT k, v FROM records_data").fetch_arrow_table())
        finally:
            con.close()
    r = run_cli(
        cluster, "sql", "SELECT k, sum(v) AS s FROM records_data GROUP BY k ORDER BY k", "--file", "/exp/mixmin"
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert [line.split()[:2] for line in r.stdout.splitlines() if line.split()[:1] in (["a"], ["b"], ["c"])] == [
        ["a", "2"],
        ["b", "4"],
        ["c", "6"],
    ], r.stdout
