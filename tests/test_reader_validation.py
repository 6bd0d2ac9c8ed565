"""The readers say what is wrong when the Dataset or DataFrame is built, not
inside a read task, and never turn a stray record into rows: formats are
explicit (docs/analysis.md, "Formats"). Dask runs on its default scheduler
here (no distributed Client: every peer is on this host)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers import to_parquet

from st_integrations.formats import ColumnNotFoundError, StrayRecordError


def _parquet(rows: int, start: int) -> bytes:
    return to_parquet(
        pa.table(
            {"i": pa.array(range(start, start + rows), pa.int64()), "origin": pa.array(["EWR", "JFK"] * (rows // 2))}
        )
    )


@pytest.fixture
def pq_file(cluster, monkeypatch):
    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    with cluster.client().create("/val/pq", replication="x2") as f:
        for p in range(4):
            f.put(f"part-{p}.parquet", _parquet(100, p * 100))
    return cluster


def test_stray_records_are_an_error_naming_them_and_conventional_names_are_skipped(pq_file):
    from st_integrations.dask_reader import read_storetorrent

    c = pq_file.client()
    with c.open("/val/pq") as f:
        f.put("_SUCCESS", b"")
        f.put("logs/.crc", b"\x00\x01")
    ddf = read_storetorrent("/val/pq")  # skipped by name, as pyarrow's ignore_prefixes
    assert len(ddf) == 400 and list(ddf.columns) == ["i", "origin"]
    with c.open("/val/pq") as f:
        f.put("notes.txt", b"remember to calibrate")
    with pytest.raises(StrayRecordError) as e:
        read_storetorrent("/val/pq")
    assert e.value.record == "notes.txt" and e.value.format == "raw" and e.value.other.endswith(".parquet")
    raw = read_storetorrent("/val/pq", format="raw").compute()  # every record, as (record, data)
    assert sorted(raw["record"]) == sorted(
        ["_SUCCESS", "logs/.crc", "notes.txt"] + [f"part-{p}.parquet" for p in range(4)]
    )
    from st_integrations.duckdb_sql import connect_files

    with pytest.raises(StrayRecordError):
        connect_files(c, ["/val/pq"], data=True)


def test_unknown_columns_raise_when_the_dataframe_is_built(pq_file):
    from st_integrations.dask_reader import read_storetorrent

    for kw in ({"columns": ["i", "nope"]}, {"filters": [("nope", ">", 3)]}, {"filters": pc.field("nope") > 3}):
        with pytest.raises(ColumnNotFoundError) as e:
            read_storetorrent("/val/pq", **kw)
        assert e.value.columns == ("i", "origin")
        assert "nope" in str(e.value) and "schema" not in str(e.value)
    assert e.value.column == ""  # an expression: the message quotes it
    with pytest.raises(ColumnNotFoundError) as e:
        read_storetorrent("/val/pq", filters=[("nope", ">", 3)])
    assert e.value.column == "nope"


def test_columns_as_a_string_gives_a_series_as_dask_does(pq_file):
    from st_integrations.dask_reader import read_storetorrent

    s = read_storetorrent("/val/pq", columns="origin")
    assert s.name == "origin" and s.ndim == 1
    assert s.compute().value_counts().to_dict() == {"EWR": 200, "JFK": 200}
    assert int(read_storetorrent("/val/pq", columns="i").sum().compute()) == sum(range(400))
