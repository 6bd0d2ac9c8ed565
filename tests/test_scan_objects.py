"""Striped objects through every analysis way in (docs/composition.md, the
object model): a name is a record or an object, and the Dask and Ray
readers, DuckDB's ``records``/``stripes``/``files`` views and ``sql --file``
see names the same way. Also: a single record path, a record glob and a
namespace glob select what they name. Real tracker and peers throughout."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import to_csv, to_parquet

STRIPE = 16 << 10  # small stripes: objects of a few hundred KiB have several


def _table(start: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "i": pa.array(range(start, start + rows), pa.int64()),
            "k": pa.array([f"k{j % 7}" for j in range(start, start + rows)], pa.string()),
        }
    )


@pytest.fixture
def objects(cluster, monkeypatch):
    """/obj/pq: 2 Parquet records and one striped Parquet object (40,000
    rows in all); /obj/csv: a CSV record and a striped CSV object; /obj/z:
    the same as /obj/pq with the zstd filter; /obj/comp: the same rows,
    its object composed of parts stored first (``put_parts`` +
    ``compose``: an S3 multipart upload's way, its stripes stored under
    the parts' names)."""
    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    c = cluster.client()
    for name, filters in (("/obj/pq", ()), ("/obj/z", ("zstd",))):
        with c.create(name, replication="x2", filters=filters) as f:
            f.put("part-0.parquet", to_parquet(_table(0, 5_000), row_group_size=4000))
            f.put("part-1.parquet", to_parquet(_table(5_000, 5_000), row_group_size=4000))
            meta = f.put_object(
                "big.parquet", to_parquet(_table(10_000, 30_000), row_group_size=4000), stripe_size=STRIPE
            )
            assert meta.stripes >= 3
    with c.create("/obj/comp", replication="x2") as f:
        f.put("part-0.parquet", to_parquet(_table(0, 5_000), row_group_size=4000))
        f.put("part-1.parquet", to_parquet(_table(5_000, 5_000), row_group_size=4000))
        data = to_parquet(_table(10_000, 30_000), row_group_size=4000)
        names = [
            n for i in range(0, len(data), STRIPE) for n in f.put_parts(f"up/{i:08d}", data[i : i + STRIPE], STRIPE)
        ]
        meta = f.compose("big.parquet", names)
        assert meta.stripes == len(names) >= 3 and meta.stripe_size == STRIPE
    with c.create("/obj/csv", replication="x2") as f:
        f.put("a.csv", to_csv(_table(0, 1_000)))
        f.put_object("b.csv", to_csv(_table(1_000, 20_000)), stripe_size=STRIPE)
    return cluster


def _sum(n: int, start: int = 0) -> int:
    return sum(range(start, start + n))


@pytest.mark.parametrize("name", ["/obj/pq", "/obj/z", "/obj/comp"])
def test_dask_reads_objects_like_records(objects, name):
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(name)
    assert len(ddf) == 40_000 and int(ddf["i"].sum().compute()) == _sum(40_000)
    # column and row-group pushdown into the object: only what matches
    part = read_storetorrent(name, columns=["i"], filters=[("i", ">=", 38_000)]).compute()
    assert sorted(part["i"]) == list(range(38_000, 40_000))
    one = read_storetorrent(f"{name}/big.parquet")  # a single object path
    assert len(one) == 30_000 and int(one["i"].min().compute()) == 10_000
    glob = read_storetorrent(f"{name}/part-*.parquet")  # a glob of record names
    assert len(glob) == 10_000


def test_csv_objects_and_the_namespace_glob(objects):
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent("/obj/csv")
    assert len(ddf) == 21_000 and int(ddf["i"].sum().compute()) == _sum(21_000)
    both = read_storetorrent(["/obj/p*", "/obj/csv/b.csv"], columns=["i"])
    assert len(both) == 60_000


def test_a_parquet_object_is_read_by_ranges(objects):
    """A scan of one column of the last row group of a Parquet object
    fetches the stripes holding its footer and that column chunk, not the
    whole object."""
    from st_integrations import scan
    from st_integrations.readplan import plan_scan

    with objects.client() as c:
        plan = plan_scan(c, "/obj/pq/big.parquet")
    (ref,) = [r for u in plan.units for r in u.records]
    assert ref.kind == "object" and ref.size > 3 * STRIPE
    opts = scan.ScanOptions(tracker=objects.tracker_addr)
    src = scan._source(ref, opts)
    assert isinstance(src, pa.NativeFile)
    rows = list(scan.scan_record(ref.name, src, "parquet", _table(0, 1).schema, ["i"], pc.field("i") >= 39_000))
    assert sum(b.num_rows for b in rows) == 1_000
    f = scan._stfile(opts, "/obj/pq")
    r = f.open("big.parquet")
    assert pq.ParquetFile(r).read_row_group(0, columns=["i"]).num_rows == 4_000
    assert r.stripes_fetched < f.object_meta("big.parquet").stripes


def test_duckdb_sees_one_row_per_name_and_sql_takes_globs(objects):
    from st_integrations.duckdb_sql import sql

    c = objects.client()
    rows = sql(c, ["/obj/*"], "SELECT file, name, kind, size FROM records ORDER BY ALL").to_pylist()
    names = [(r["file"], r["name"], r["kind"]) for r in rows]
    assert names == [
        ("/obj/comp", "big.parquet", "object"),
        ("/obj/comp", "part-0.parquet", "record"),
        ("/obj/comp", "part-1.parquet", "record"),
        ("/obj/csv", "a.csv", "record"),
        ("/obj/csv", "b.csv", "object"),
        ("/obj/pq", "big.parquet", "object"),
        ("/obj/pq", "part-0.parquet", "record"),
        ("/obj/pq", "part-1.parquet", "record"),
        ("/obj/z", "big.parquet", "object"),
        ("/obj/z", "part-0.parquet", "record"),
        ("/obj/z", "part-1.parquet", "record"),
    ]
    with c.open("/obj/pq") as f:
        meta = f.object_meta("big.parquet")
    big = [r for r in rows if r["file"] == "/obj/pq" and r["name"] == "big.parquet"][0]
    assert big["size"] == meta.size
    stripes = sql(
        c,
        ["/obj/pq"],
        "SELECT object, count(*) AS n, sum(size) AS b, min(stripe) AS lo, "
        "max(stripe) AS hi FROM stripes GROUP BY object",
    ).to_pylist()
    assert stripes == [{"object": "big.parquet", "n": meta.stripes, "b": meta.size, "lo": 0, "hi": meta.stripes - 1}]
    with c.open("/obj/comp") as f:  # composed: its stripes are the parts' records, stored under their names
        comp = f.object_meta("big.parquet")
    got = sql(c, ["/obj/comp"], "SELECT count(*) AS n, sum(size) AS b FROM stripes").to_pylist()
    assert got == [{"n": comp.stripes, "b": comp.size}]
    files = sql(c, ["/obj/pq", "/obj/csv"], "SELECT file, records FROM files ORDER BY file").to_pylist()
    assert files == [{"file": "/obj/csv", "records": 2}, {"file": "/obj/pq", "records": 3}]
    # counted as a whole (DuckDB's optimizer turned count(name) of a WITHOUT ROWID table into a ROWID scan)
    assert sql(c, ["/obj/pq", "/obj/csv"], "SELECT count(*) AS n FROM files").to_pylist() == [{"n": 2}]
    # the CLI: a glob in --file, as the readers take
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "st_py.cli",
            "sql",
            "--tracker",
            objects.tracker_addr,
            "--file",
            "/obj/*",
            "--format",
            "json",
            "SELECT count(*) AS n FROM records WHERE kind = 'object'",
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    assert '"n": 4' in out.stdout


def test_local_stripes_of_a_filtered_object_give_its_plaintext(objects):
    with objects.client().open("/obj/z") as f:
        whole = f.get("big.parquet")
        stripes = f.local_stripes()
        assert stripes and all(s.filtered for s in stripes)
        assert any(s.stored_size != s.size for s in stripes)  # compressed on disk
        joined = b"".join(f.read_local_stripe(s) for s in stripes)
        assert joined == whole and sum(s.size for s in stripes) == len(whole)
        assert [s.offset for s in stripes] == [i * STRIPE for i in range(len(stripes))]


@pytest.mark.slow
def test_ray_reads_objects_like_records(objects):
    ray = pytest.importorskip("ray")
    from st_integrations.ray_reader import read_storetorrent

    try:
        ds = read_storetorrent("/obj/pq")
        assert ds.count() == 40_000 and ds.sum("i") == _sum(40_000)
        assert read_storetorrent("/obj/csv/b.csv").count() == 20_000
        assert read_storetorrent("/obj/z", columns=["i"], filter=pc.field("i") < 12_000).count() == 12_000
        comp = read_storetorrent("/obj/comp")
        assert comp.count() == 40_000 and comp.sum("i") == _sum(40_000)
    finally:
        ray.shutdown()


@pytest.mark.parametrize(
    "name,rows", [("/obj/pq", 40_000), ("/obj/z", 40_000), ("/obj/csv", 21_000), ("/obj/comp", 40_000)]
)
def test_records_data_and_pyarrow_dataset_read_objects(objects, name, rows):
    from st_integrations.arrow_dataset import dataset
    from st_integrations.duckdb_sql import sql

    out = sql(objects.client(), [name], "SELECT count(*) AS n, sum(i) AS s FROM records_data").to_pylist()
    assert out == [{"n": rows, "s": _sum(rows)}]
    assert dataset(name).count_rows() == rows
