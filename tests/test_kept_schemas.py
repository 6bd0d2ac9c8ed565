"""Record schemas kept at write time (docs/infofile.md, "Record schemas";
issue "Many small records at full speed"): the writer puts each record's
format and Arrow schema in the infofile with its commit, so a scan learns
the schema of every record from one SQL query and opens no record before
it reads. Records written without one (older writers, ``keep_schemas``
off) still have their headers read. Real tracker and peers; every test
writes files of names of its own under /ks and kills, restarts and fills
nothing, so the module shares one cluster (``module_cluster``)."""

from __future__ import annotations

import io

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import to_parquet

from st_integrations import formats, scan
from st_integrations.formats import SchemaConflictError, StrayRecordError
from st_py.core.record_format import RAW_SCHEMA, load_schema


def _part(i: int, rows: int = 100) -> bytes:
    return to_parquet(
        pa.table(
            {
                "i": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
                "k": pa.array([f"k{j % 7}" for j in range(rows)]),
            }
        )
    )


@pytest.fixture
def no_header_reads(monkeypatch):
    """Count every record header a scan reads while it is planned."""
    calls: list[str] = []
    real = formats.record_schema

    def counting(name, path, fmt=None):
        calls.append(name)
        return real(name, path, fmt)

    monkeypatch.setattr(scan, "record_schema", counting)
    return calls


def _dask(module_cluster, path, **kw):
    from st_integrations.dask_reader import read_storetorrent

    return read_storetorrent(path, tracker=module_cluster.tracker_addr, client=None, **kw)


def test_the_infofile_keeps_each_records_schema(module_cluster):
    with module_cluster.client().create("/ks/pq", replication="x2") as f:
        for i in range(20):
            f.queue_put(f"part-{i:02}.parquet", _part(i))
        f.put("notes.txt", b"free text")
        f.put("_SUCCESS", b"")
    with module_cluster.client().open("/ks/pq") as f:
        groups = f._infofile().schema_groups()
        by_format = {g.format: g for g in groups}
        assert sorted(by_format) == ["parquet", "raw"]
        assert by_format["parquet"].records == 20 and by_format["parquet"].first == "part-00.parquet"
        assert load_schema(by_format["parquet"].schema).equals(pq.read_schema(io.BytesIO(_part(0))))
        assert by_format["raw"].records == 1 and load_schema(by_format["raw"].schema).equals(RAW_SCHEMA)
        assert f._infofile().names_without_schema() == ["_SUCCESS"]  # a name readers skip


def test_a_scans_schema_probe_agrees_with_the_groups_and_skips_deleted_records(module_cluster):
    """``kept_schemas`` (one index probe per schema, what a scan asks) gives
    the schemas of ``schema_groups`` (a pass over every record), each with
    a record that has it, and none kept only for records deleted since."""
    c = module_cluster.client()
    with c.create("/ks/probe", replication="x2") as f:
        for i in range(5):
            f.queue_put(f"part-{i:02}.parquet", _part(i))
        f.put("notes.txt", b"free text")
        f.put("gone.csv", b"a,b\n1,2\n")
    with c.open("/ks/probe") as f:
        f.delete("gone.csv")
    with c.open("/ks/probe") as f:
        info = f._infofile()
        probe = info.kept_schemas()
        groups = info.schema_groups()
    assert sorted((fmt, blob) for fmt, blob, _ in probe) == sorted((g.format, g.schema) for g in groups)
    assert sorted(fmt for fmt, _, _ in probe) == ["parquet", "raw"]  # not csv: its one record is deleted
    have = {g.format: g for g in groups}
    for fmt, _, name in probe:
        assert name == have[fmt].first  # one record per schema, here the first committed


def test_a_scan_over_kept_schemas_opens_no_record_to_plan(module_cluster, no_header_reads):
    n = 30
    with module_cluster.client().create("/ks/scan", replication="x2") as f:
        for i in range(n):
            f.queue_put(f"part-{i:02}.parquet", _part(i))
    ddf = _dask(module_cluster, "/ks/scan")
    assert no_header_reads == []  # the DataFrame was built from the infofile alone
    df = ddf.compute()
    assert len(df) == n * 100 and int(df["i"].sum()) == sum(range(n * 100))


def test_records_written_without_a_schema_have_their_headers_read(module_cluster, no_header_reads):
    with module_cluster.client().create("/ks/mixed", replication="x1") as f:
        for i in range(4):
            f.put(f"part-{i}.parquet", _part(i))
        f.keep_schemas = False  # as a writer from before schemas were kept
        f.put("old-0.parquet", to_parquet(pa.table({"i": pa.array([7], pa.int64()), "extra": [1.5]})))
    ddf = _dask(module_cluster, "/ks/mixed")
    assert no_header_reads == ["old-0.parquet"]
    assert list(ddf.columns) == ["i", "k", "extra"]
    df = ddf.compute()
    assert len(df) == 401 and df["extra"].notna().sum() == 1


def test_kept_schemas_that_conflict_name_both_records_before_any_read(module_cluster, no_header_reads):
    with module_cluster.client().create("/ks/conflict", replication="x1") as f:
        f.put("a.parquet", to_parquet(pa.table({"x": pa.array([1], pa.int64())})))
        f.put("b.parquet", to_parquet(pa.table({"x": pa.array(["one"])})))
    with pytest.raises(SchemaConflictError) as e:
        _dask(module_cluster, "/ks/conflict")
    assert (e.value.first, e.value.second, e.value.column) == ("a.parquet", "b.parquet", "x")
    assert no_header_reads == []


def test_a_stray_record_is_named_from_the_kept_schemas(module_cluster, no_header_reads):
    with module_cluster.client().create("/ks/stray", replication="x1") as f:
        f.put("part-0.parquet", _part(0))
        f.put("notes.txt", b"not a table")
    with pytest.raises(StrayRecordError) as e:
        _dask(module_cluster, "/ks/stray")
    assert e.value.record == "notes.txt"
    assert no_header_reads == []
    # format="raw" reads every record as (record, data), as before
    assert len(_dask(module_cluster, "/ks/stray", format="raw").compute()) == 2


def test_a_selection_uses_the_schemas_of_the_records_it_names(module_cluster, no_header_reads):
    with module_cluster.client().create("/ks/sel", replication="x1") as f:
        f.put("a/part-0.parquet", _part(0))
        f.put("b/part-0.parquet", to_parquet(pa.table({"z": pa.array([1.0])})))
    ddf = _dask(module_cluster, "/ks/sel/a")
    assert list(ddf.columns) == ["i", "k"] and no_header_reads == []
    assert len(ddf.compute()) == 100


def test_filtered_objects_and_csv_keep_their_plaintext_schema(module_cluster, tmp_path, no_header_reads):
    key = tmp_path / "key"
    key.write_bytes(bytes(range(32)))
    c = module_cluster.client(encryption_key=key.read_bytes())
    table = pa.table({"i": pa.array(range(50_000), pa.int64())})
    with c.create("/ks/obj", replication="x2", filters=["zstd", "aes-256-gcm"]) as f:
        f.put_object("big.parquet", to_parquet(table), stripe_size=64 << 10)  # several stripes
        f.put("small.csv", b"i\n1\n2\n")
    with c.open("/ks/obj") as f:
        groups = {g.format: g for g in f._infofile().schema_groups()}
        assert sorted(groups) == ["csv", "parquet"]
        assert load_schema(groups["parquet"].schema).equals(table.schema)
        assert groups["parquet"].first == "big.parquet"  # the object, not its stripes
        assert f._infofile().names_without_schema() == []


def test_the_tracker_refuses_a_schema_that_is_not_one(module_cluster):
    from st_py._proto import tracker_pb2 as pb

    with module_cluster.client().create("/ks/bad", replication="x1") as f:
        f.put("a.bin", b"a")
        tracker = f._tracker
        info = f.info
        with pytest.raises(grpc.RpcError) as e:
            tracker._stub.Commit(
                pb.CommitRequest(
                    name="/ks/bad",
                    file_id=info.file_id,
                    user=tracker.user,
                    records=[pb.RecordCommit(name="a.bin", size=1, crc32c=0, peer_idx=[0], schema=1)],
                    schemas=[pb.RecordSchema(format="parquet", schema=b"not arrow")],
                ),
                metadata=tracker._metadata,
            )
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "Arrow" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            tracker._stub.Commit(
                pb.CommitRequest(
                    name="/ks/bad",
                    file_id=info.file_id,
                    user=tracker.user,
                    records=[pb.RecordCommit(name="b.bin", size=1, crc32c=0, peer_idx=[0], schema=2)],
                ),
                metadata=tracker._metadata,
            )
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "schema 2" in e.value.details()


def test_a_name_readers_skip_keeps_no_schema_whoever_sends_one(module_cluster, monkeypatch):
    """Scans skip ``_SUCCESS`` by looking only at names without a kept
    schema (readplan.py), so the tracker keeps none for such a name even
    from a writer that sends one (here: one that sends raw for every name)."""
    import st_py.client.file
    from st_py.core.record_format import written_schema

    with module_cluster.client().create("/ks/skip", replication="x2") as f:
        f.put("part-0.parquet", _part(0))
        monkeypatch.setattr(st_py.client.file, "written_schema", lambda name, data: written_schema("x.bin", data))
        f.put("_SUCCESS", b"")
        f.put("sub/.hidden", b"x")
    monkeypatch.undo()
    with module_cluster.client().open("/ks/skip") as f:
        assert f._infofile().names_without_schema() == ["_SUCCESS", "sub/.hidden"]
    df = _dask(module_cluster, "/ks/skip").compute()
    assert sorted(df["i"].tolist()) == list(range(100))  # the Parquet rows, nothing of the two skipped


def test_records_all_of_no_known_format_are_read_as_raw_in_batches(module_cluster, no_header_reads):
    """Every kept schema says raw: the scan reads the records many per
    batch, as format="raw" does, and gives the same rows."""
    from st_integrations.readplan import plan_scan
    from st_integrations.scan import ScanOptions, options_for

    with module_cluster.client().create("/ks/raw", replication="x2") as f:
        for i in range(50):
            f.queue_put(f"shot-{i:03}.bin", bytes([i]) * (100 + i))
    with module_cluster.client() as c:
        plan = plan_scan(c, "/ks/raw", skip_ignored=True)
    assert options_for(plan, ScanOptions()).format == "raw"
    assert options_for(plan, ScanOptions(format="csv")).format == "csv"  # a forced format stays
    df = _dask(module_cluster, "/ks/raw").compute()
    assert no_header_reads == []
    assert sorted(df["record"]) == [f"shot-{i:03}.bin" for i in range(50)]
    assert sum(len(d) for d in df["data"]) == sum(100 + i for i in range(50))


def test_small_parquet_records_are_scanned_together_with_paths_filters_and_errors(module_cluster):
    """Runs of small Parquet records are scanned as one in-memory dataset:
    the same rows, each row's path, filters with row-group pushdown, a
    column that only some records have as nulls; a record with a column the
    scan's schema lacks is still named (the run falls back to one record at
    a time, and no row is yielded twice)."""
    import pyarrow.dataset as ds

    from st_integrations.formats import unify
    from st_integrations.readplan import plan_scan
    from st_integrations.scan import PATH_COLUMN, ScanOptions, kept_schema_sources, read_unit

    with module_cluster.client().create("/ks/run", replication="x2") as f:
        for i in range(40):
            t = pa.table({"i": pa.array(range(i * 10, i * 10 + 10), pa.int64())})
            if i % 2:
                t = t.append_column("odd", pa.array([True] * 10))
            f.queue_put(f"p{i:03}.parquet", to_parquet(t))
    with module_cluster.client() as c:
        plan = plan_scan(c, "/ks/run", skip_ignored=True)
    opts = ScanOptions(tracker=module_cluster.tracker_addr, include_paths=True)
    schema = unify(kept_schema_sources(plan, opts)[0])
    assert schema.names == ["i", "odd"]

    def rows(columns=None, filter=None, schema=schema):
        return pa.Table.from_batches([b for u in plan.units for b in read_unit(u, schema, columns, filter, opts)])

    t = rows()
    assert sorted(t["i"].to_pylist()) == list(range(400))
    assert t["odd"].null_count == 200
    for i, path in zip(t["i"].to_pylist(), t[PATH_COLUMN].to_pylist()):
        assert path == f"/ks/run/p{i // 10:03}.parquet"
    t = rows(["i"], ds.field("i") >= 395)
    assert sorted(t["i"].to_pylist()) == [395, 396, 397, 398, 399] and t.column_names == ["i", PATH_COLUMN]
    with pytest.raises(SchemaConflictError) as e:
        rows(schema=pa.schema([("i", pa.int64())]))
    assert e.value.column == "odd" and int(e.value.first[1:4]) % 2 == 1  # a record that has it, named


def test_a_batch_slice_keeps_the_schemas_put_keeps_record_by_record():
    """``written_schemas`` (a write batch's slice at once, with raw bytes
    told by inline tests) gives every record the answer ``written_schema``
    gives it: magic bytes, extensions (compressed, upper case, on a folder
    only), names readers skip, empty and short records."""
    from st_py.core.record_format import written_schema, written_schemas

    datas = [
        b"",
        b"x",
        b"\x00" * 4096,
        b"PAR1xxxx",
        _part(0),
        b"ARROW1\0\0",
        b"\xff\xff\xff\xffabcd",
        b"abcd\xff\xff\xff\xff",
        b"a,b\n1,2\n",
        b'{"a": 1}\n',
    ]
    names = ["r1", "a/b.csv", "_SUCCESS", "x/.hidden", "f.parquet", "d.csv.gz", "E.JSON", "g.bin", "dir.csv/x", "q.pq"]
    ns = [n for n in names for _ in datas]
    ds = [d for _ in names for d in datas]
    assert written_schemas(ns, ds) == [written_schema(n, d) for n, d in zip(ns, ds)]
