"""Hive partitioning (issue 38, item 1): a table written by pandas with
``partition_cols`` into ``storetorrent://`` reads back with its partition
columns through every reader, typed as the engine's own reader types the
same tree in a local folder, and a filter on them opens no record of
another partition (the record files' access times say so)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from analysis_data import atimes
from helpers import sorted_rows

from st_integrations.partitioning import Partitions, discover, parse, relative
from st_py.errors import InvalidOptionError

pytest.importorskip("dask.dataframe")


def flights(n: int = 300) -> pd.DataFrame:
    """The issue's table: ``carrier`` (strings) and ``year`` (ints) to
    partition by."""
    i = np.arange(n)
    return pd.DataFrame(
        {
            "id": i,
            "dep_delay": i * 1.5,
            "carrier": np.array(["DL", "AA", "UA"])[i % 3],
            "year": 2020 + i % 2,
        }
    )


def write_both(cluster, name: str, local) -> str:
    """The table, partitioned by carrier and year, into ``name`` on the
    cluster and into the local folder ``local``; returns the URL."""
    url = f"storetorrent://{cluster.tracker_addr}{name}"
    flights().to_parquet(url, partition_cols=["carrier", "year"])
    flights().to_parquet(local, partition_cols=["carrier", "year"])
    return url


def records_of(cluster, path: str) -> set[str]:
    """The local copies a scan of ``path`` reads."""
    from st_integrations.readplan import plan_scan

    with cluster.client() as c:
        plan = plan_scan(c, path)
    return {r.path for u in plan.units for r in u.records}


@pytest.fixture(scope="module")
def hive(make_module_cluster, tmp_path_factory):
    c = make_module_cluster(3, name="hive")
    local = tmp_path_factory.mktemp("hive") / "part"
    write_both(c, "/exp/part", local)
    return c, local


def test_parse_and_types_are_pyarrows(tmp_path):
    """The rules of partitioning.py against pyarrow's own discovery of a
    local tree: keys and values URI-decoded, int32 only when every value
    casts to it (2147483648 does not), the Hive null, a component without
    ``=`` and the record's own name ignored."""
    import pyarrow.parquet as pq

    dirs = [
        "a=007/b=x%20y/c=__HIVE_DEFAULT_PARTITION__/e=+5/skip",
        "a=-3/b=p=q/c=1/e=2147483648/skip",
        "a=2147483647/b=1.5/c=2/e=1/skip",
    ]
    for i, d in enumerate(dirs):
        os.makedirs(tmp_path / d)
        pq.write_table(pa.table({"v": [i]}), tmp_path / d / "x=1.parquet")
    theirs = ds.dataset(str(tmp_path), partitioning="hive")
    names = [os.path.relpath(f.path, tmp_path) for f in theirs.get_fragments()]
    parts = discover([("/f", n) for n in names], {"/f": "/f"})
    assert isinstance(parts, Partitions)
    assert parts.schema == pa.schema([f for f in theirs.schema if f.name != "v"])
    for frag, n in zip(theirs.get_fragments(), names):
        want = ds.get_partition_keys(frag.partition_expression)
        got = {k: s.as_py() for k, s in parts.values("/f", n).items()}
        assert got == {k: want.get(k) for k in got}, n
    assert discover([("/f", n) for n in names], {"/f": "/f"}, flavor="string").schema.types == [pa.string()] * 4
    assert parse("k=v/x.parquet") == [("k", "v")] and parse("k=v") == []
    assert relative("/exp/part", "year=1/x", "/exp") == "part/year=1/x"
    assert relative("/exp/part", "year=1/x", "/exp/part/year=1/x") == "x"
    assert discover([("/f", "a/b.parquet")], {"/f": "/f"}) is None


def test_dask_reads_the_partition_columns_as_dd_read_parquet(hive, local_dask):
    import dask.dataframe as dd

    from st_integrations.dask_reader import read_storetorrent

    cluster, local = hive
    ours = read_storetorrent("/exp/part", tracker=cluster.tracker_addr, client=local_dask)
    theirs = dd.read_parquet(str(local))
    assert list(ours.columns) == list(theirs.columns) == ["id", "dep_delay", "carrier", "year"]
    assert ours.dtypes.to_dict() == theirs.dtypes.to_dict()  # carrier: category of str, year: of int32
    got, want = ours.compute(), theirs.compute()
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    pd.testing.assert_frame_equal(sorted_rows(got, "id"), sorted_rows(want, "id"))
    # a path inside: the keys above it are not columns, as in pyarrow and
    # pandas (dd.read_parquet would parse every component of the path)
    inner = read_storetorrent("/exp/part/carrier=DL", tracker=cluster.tracker_addr, client=local_dask)
    assert list(inner.columns) == list(pd.read_parquet(local / "carrier=DL").columns) == ["id", "dep_delay", "year"]
    # a glob: paths relative to its part before the first pattern character
    globbed = read_storetorrent("/exp/part/carrier=*/*", tracker=cluster.tracker_addr, client=local_dask)
    assert list(globbed.columns) == ["id", "dep_delay", "carrier", "year"] and len(globbed) == len(got)
    off = read_storetorrent("/exp/part", tracker=cluster.tracker_addr, client=local_dask, partitioning=None)
    assert list(off.columns) == ["id", "dep_delay"]
    with pytest.raises(InvalidOptionError, match="partitioning='directory'"):
        read_storetorrent("/exp/part", tracker=cluster.tracker_addr, client=local_dask, partitioning="directory")


def test_pyarrow_dataset_and_sql_read_the_partition_columns(hive):
    from st_integrations.arrow_dataset import dataset
    from st_integrations.duckdb_sql import connect_files

    cluster, local = hive
    ours = dataset("/exp/part", tracker=cluster.tracker_addr)
    theirs = ds.dataset(str(local), partitioning="hive")
    assert ours.schema.remove_metadata() == theirs.schema.remove_metadata()  # year: int32, as pyarrow
    pd.testing.assert_frame_equal(
        sorted_rows(ours.to_table().to_pandas(), "id"), sorted_rows(theirs.to_table().to_pandas(), "id")
    )
    dl = pc.field("carrier") == "DL"
    assert len(list(ours.get_fragments(filter=dl))) == 2  # DL's two years: no other fragment is scanned
    assert ours.to_table(filter=dl).num_rows == 100
    assert dataset("/exp/part", tracker=cluster.tracker_addr, partitioning=None).schema.names == ["id", "dep_delay"]
    with cluster.client() as c:
        con = connect_files(c, ["/exp/part"], data=True)
        try:
            rows = con.execute(
                "SELECT carrier, year, count(*) FROM records_data WHERE carrier = 'DL' GROUP BY ALL ORDER BY ALL"
            ).fetchall()
        finally:
            con.close()
    assert rows == [("DL", 2020, 50), ("DL", 2021, 50)]
    # pandas through fsspec reads the same tree the same way
    pd.testing.assert_frame_equal(
        sorted_rows(pd.read_parquet(f"storetorrent://{cluster.tracker_addr}/exp/part"), "id"),
        sorted_rows(pd.read_parquet(local), "id"),
    )


def test_dask_filters_on_partitions_open_no_record_of_another(hive, local_dask, tmp_path):
    """Filters on partition columns select records by their names: the
    copies of the other partitions' records are not read (their access
    times stay), nor counted by the scan; a filter mixing a partition
    column and a record column keeps the rows it should."""
    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.scan import SCAN_STATS

    cluster, _ = hive
    write_both(cluster, "/exp/fresh", tmp_path / "fresh")
    others = records_of(cluster, "/exp/fresh") - records_of(cluster, "/exp/fresh/carrier=DL/year=2021")
    before = atimes(cluster)
    read = SCAN_STATS["records_verified"]
    ddf = read_storetorrent(
        "/exp/fresh",
        tracker=cluster.tracker_addr,
        client=local_dask,
        filters=[("carrier", "==", "DL"), ("year", "==", 2021)],
    )
    assert ddf.npartitions == 1
    df = ddf.compute()
    assert SCAN_STATS["records_verified"] - read == 1  # the one record of carrier=DL/year=2021
    after = atimes(cluster)
    assert {p for p in others if after[p] != before[p]} == set(), "records of other partitions were opened"
    want = flights()
    want = want[(want.carrier == "DL") & (want.year == 2021)]
    assert sorted(df.id) == sorted(want.id) and set(df.carrier) == {"DL"} and set(df.year) == {2021}
    mixed = read_storetorrent(
        "/exp/fresh", tracker=cluster.tracker_addr, client=local_dask, filters=pc.field("year") == 2020
    )
    both = read_storetorrent(
        "/exp/fresh",
        tracker=cluster.tracker_addr,
        client=local_dask,
        filters=(pc.field("carrier") == "UA") | (pc.field("dep_delay") > 400),
    ).compute()
    f = flights()
    assert sorted(mixed.compute().id) == sorted(f[f.year == 2020].id)
    assert sorted(both.id) == sorted(f[(f.carrier == "UA") | (f.dep_delay > 400)].id)


def test_ray_reads_the_partition_columns_as_its_read_parquet(hive, tmp_path):
    """Ray's read_parquet makes every partition column a string; so does
    the Ray reader, and its filter on one opens no other partition's record."""
    ray = pytest.importorskip("ray")
    from st_integrations.ray_reader import read_storetorrent

    cluster, local = hive
    write_both(cluster, "/exp/ray", tmp_path / "ray")
    others = records_of(cluster, "/exp/ray") - records_of(cluster, "/exp/ray/carrier=UA/year=2020")
    before = atimes(cluster)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        ours = read_storetorrent("/exp/part", tracker=cluster.tracker_addr)
        theirs = ray.data.read_parquet(str(local))
        assert ours.schema().names == theirs.schema().names == ["id", "dep_delay", "carrier", "year"]
        assert ours.schema().types == theirs.schema().types  # carrier and year: string
        pd.testing.assert_frame_equal(sorted_rows(ours.to_pandas(), "id"), sorted_rows(theirs.to_pandas(), "id"))
        ua = (pc.field("carrier") == "UA") & (pc.field("year") == "2020")
        got = read_storetorrent("/exp/ray", tracker=cluster.tracker_addr, filter=ua).to_pandas()
    finally:
        ray.shutdown()
    after = atimes(cluster)
    assert {p for p in others if after[p] != before[p]} == set(), "records of other partitions were opened"
    f = flights()
    assert sorted(got.id) == sorted(f[(f.carrier == "UA") & (f.year == 2020)].id)


@pytest.mark.parametrize("fmt", ["csv", "arrows", "parquet"])
def test_every_format_gets_its_partition_values_and_filters_on_them(fmt):
    """scan_record gives a record's rows its partition values, whatever its
    format (a fragment's partition expression, or constant columns for the
    formats read without a fragment), and filters on them."""
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from st_integrations.formats import scan_record

    t = pa.table({"v": pa.array([1, 2, 3], pa.int64())})
    sink = io.BytesIO()
    if fmt == "csv":
        pacsv.write_csv(t, sink)
    elif fmt == "arrows":
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
    else:
        pq.write_table(t, sink)
    src = pa.py_buffer(sink.getvalue())
    parts = discover([("/f", f"carrier=DL/year=2020/x.{fmt}")], {"/f": "/f"})
    schema = parts.extend(t.schema)
    values = parts.values("/f", f"carrier=DL/year=2020/x.{fmt}")

    def read(columns=None, filter=None):
        return pa.Table.from_batches(
            list(scan_record(f"x.{fmt}", src, fmt, schema, columns, filter, partition=values)),
            schema=schema if columns is None else pa.schema([schema.field(c) for c in columns]),
        ).to_pydict()

    assert read() == {"v": [1, 2, 3], "carrier": ["DL"] * 3, "year": [2020] * 3}
    assert read(["year", "v"], pc.field("v") > 1) == {"year": [2020, 2020], "v": [2, 3]}
    assert read(["v"], pc.field("carrier") == "AA") == {"v": []}
