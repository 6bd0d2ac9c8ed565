"""Names are data: a file or record whose name holds ``[``, ``]``, ``*``,
``?`` or a space is found by that name wherever one is given (the Dask and
Ray readers' paths, DuckDB's ``connect_files`` and ``storetorrent sql
--file``), and never breaks a glob over its folder. A path that names
something literally means it; only other paths are patterns, in which
``[[]``, ``[*]`` and ``[?]`` match the character itself (docs/analysis.md).
"""

from __future__ import annotations

import io
import subprocess
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from helpers import to_parquet

pytest.importorskip("dask.dataframe")

# file name -> the key of the row of its record d.csv (plain's is Parquet)
FILES = {"/br/run[bold]2": 0, "/br/a b": 1, "/br/star*": 2, "/br/plain": 3}
# records of /br/plain: a name with pattern characters next to names its
# pattern would match
RECORDS = {
    "rec[1].csv": 101,
    "rec1.csv": 102,
    "q?x.csv": 201,
    "qax.csv": 202,
    "star*.csv": 301,
    "starry.csv": 302,
    "a b.csv": 401,
    "set[ab]/one.csv": 501,  # a record prefix with brackets
    "seta/two.csv": 502,
}


def _csv(k: int) -> bytes:
    return f"k,note\n{k},n{k}\n".encode()


@pytest.fixture(scope="module")
def st_cluster(make_module_cluster):
    c = make_module_cluster(4, name="names")
    with c.client() as cl:
        for name, k in FILES.items():
            with cl.create(name, replication="x2") as f:
                if name == "/br/plain":
                    f.put("d.parquet", to_parquet(pa.table({"k": [k], "note": [f"n{k}"]})))
                    for rec, rk in RECORDS.items():
                        f.put(rec, _csv(rk))
                else:
                    f.put("d.csv", _csv(k))
    return c


ALL_KEYS = sorted([*FILES.values(), *RECORDS.values()])


def _expected(path: str) -> list[int]:
    return sorted([FILES[path], *RECORDS.values()]) if path == "/br/plain" else [FILES[path]]


def _dask_keys(cluster, path: str) -> list[int]:
    from st_integrations.dask_reader import read_storetorrent

    return sorted(read_storetorrent(path, tracker=cluster.tracker_addr).compute()["k"].tolist())


def _duckdb_keys(cluster, path: str) -> list[int]:
    from st_integrations.duckdb_sql import connect_files

    with cluster.client() as cl:
        con = connect_files(cl, [path], data=True)
        try:
            return [r[0] for r in con.sql("SELECT k FROM records_data ORDER BY k").fetchall()]
        finally:
            con.close()


def _cli_sql_keys(cluster, path: str) -> list[int]:
    r = subprocess.run(
        [sys.executable, "-m", "st_py.cli", "sql", "SELECT k FROM records_data ORDER BY k"]
        + ["--file", path, "--format", "csv", "--tracker", cluster.tracker_addr],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return pacsv.read_csv(io.BytesIO(r.stdout.encode())).column("k").to_pylist()


@pytest.mark.parametrize("name", list(FILES))
def test_a_file_by_its_exact_name(st_cluster, name):
    want = _expected(name)
    assert _dask_keys(st_cluster, name) == want
    assert _duckdb_keys(st_cluster, name) == want


@pytest.mark.parametrize(
    "path, keys",
    [
        ("/br/plain/rec[1].csv", [101]),  # as a pattern it would be rec1.csv
        ("/br/plain/q?x.csv", [201]),  # ... q?x.csv and qax.csv
        ("/br/plain/star*.csv", [301]),  # ... star*.csv and starry.csv
        ("/br/plain/a b.csv", [401]),
        ("/br/plain/set[ab]", [501]),  # a record prefix, named literally
        ("/br/run[bold]2/d.csv", [0]),  # a record inside a file with brackets
    ],
)
def test_a_record_by_its_exact_name(st_cluster, path, keys):
    assert _dask_keys(st_cluster, path) == keys
    assert _duckdb_keys(st_cluster, path) == keys


def test_sql_file_option_takes_exact_names_and_globs(st_cluster):
    assert _cli_sql_keys(st_cluster, "/br/run[bold]2") == [0]
    assert _cli_sql_keys(st_cluster, "/br/*") == ALL_KEYS


def test_a_glob_over_the_folder_reads_every_file(st_cluster):
    assert _dask_keys(st_cluster, "/br/*") == ALL_KEYS
    assert _duckdb_keys(st_cluster, "/br/*") == ALL_KEYS
    with st_cluster.client() as cl:
        from st_integrations.duckdb_sql import connect_files

        con = connect_files(cl, ["/br/*"], data=True)
        try:
            files = [r[0] for r in con.sql("SELECT DISTINCT file FROM records ORDER BY 1").fetchall()]
        finally:
            con.close()
    assert files == sorted(FILES)


def test_escaped_pattern_characters_match_literally(st_cluster):
    """Names that exist nowhere are patterns; ``[[]``, ``[*]``, ``[?]``
    match the character itself, as in fnmatch and glob."""
    assert _dask_keys(st_cluster, "/br/run[[]bold]2") == [0]
    assert _duckdb_keys(st_cluster, "/br/star[*]") == [2]
    assert _duckdb_keys(st_cluster, "/br/plain/rec[[]1].csv") == [101]
    assert _dask_keys(st_cluster, "/br/plain/q[?]x.csv") == [201]
    assert _dask_keys(st_cluster, "/br/plain/q?x.csv") == [201]  # exists: literal
    assert _dask_keys(st_cluster, "/br/plain/qa?.csv") == [202]  # exists nowhere: a pattern
    assert _duckdb_keys(st_cluster, "/br/plain/star*") == [301, 302]
    assert _dask_keys(st_cluster, "/br/r*") == [0]


def test_ray_reader_takes_exact_names_and_globs(st_cluster, local_ray):
    from st_integrations.ray_reader import read_storetorrent

    def keys(path):
        return sorted(read_storetorrent(path, tracker=st_cluster.tracker_addr).to_pandas()["k"].tolist())

    assert keys("/br/run[bold]2") == [0]
    assert keys("/br/plain/star*.csv") == [301]
    assert keys("/br/*") == ALL_KEYS


def test_a_file_name_with_a_question_mark(st_cluster):
    """A '?' in a file name: every SQLite URI of an infofile escapes its path."""
    with st_cluster.client() as cl:
        for name, k in (("/brq/q?x", 7), ("/brq/qax", 8)):
            with cl.create(name, replication="x2") as f:
                f.put("d.csv", _csv(k))
    assert _dask_keys(st_cluster, "/brq/q?x") == [7]
    assert _duckdb_keys(st_cluster, "/brq/q?x") == [7]
    assert _duckdb_keys(st_cluster, "/brq/*") == [7, 8]
