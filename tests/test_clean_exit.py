"""A program that uses StoreTorrent through any way in and closes nothing
exits cleanly: status 0, no ``terminate called without an active
exception`` (an Arrow thread that needed the GIL to close a record file
while Python finalized) and no ``nanobind: leaked instance`` lines (peer
connections' native senders and receivers still held by cached handles).

Each case writes a small script, as a user would, and runs it in a fresh
interpreter against a real cluster (tracker + 4 peers) named by
``$STORETORRENT_TRACKER``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import to_parquet

from st_py.deploy.cluster import LocalCluster

ROWS = 200


@pytest.fixture(scope="module")
def st_cluster(make_module_cluster):
    c = make_module_cluster(4, name="clean_exit")
    pq_bytes = to_parquet(pa.table({"a": list(range(ROWS)), "b": [f"v{i}" for i in range(ROWS)]}), row_group_size=50)
    with c.client() as cl:
        with cl.create("/ce/plain", replication="x2") as f:
            f.put("part-0.parquet", pq_bytes)
            f.put("part-1.csv", b"a,b\n" + b"".join(f"{i},w{i}\n".encode() for i in range(ROWS)))
        with cl.create("/ce/striped", replication="x2") as f:
            f.put_object("obj.parquet", pq_bytes, stripe_size=1024)
    return c


def run_script(tmp_path: Path, cluster: LocalCluster, code: str, timeout: float = 120, runs: int = 1) -> str:
    """Run ``code`` as a script in a new interpreter (``runs`` times);
    assert it exited cleanly each time; return its standard output."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "STORETORRENT_TRACKER": cluster.tracker_addr}
    for _ in range(runs):
        p = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path
        )
        report = f"exit status {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr[-4000:]}"
        assert p.returncode == 0, report
        assert "terminate called" not in p.stderr, report
        assert "leaked" not in p.stderr, report
    return p.stdout


def test_duckdb_records_data_of_a_file_left_open(st_cluster, tmp_path):
    """Three runs: the abort this guards against (an Arrow thread closing a
    CSV record as Python finalizes) took one run in three or four."""
    out = run_script(
        tmp_path,
        st_cluster,
        """
        import st_py
        from st_integrations.duckdb_sql import connect_files

        c = st_py.Client()
        con = connect_files(c, ["/ce/plain"], data=True)
        print(con.sql("SELECT count(*) FROM records_data").fetchall()[0][0])
        print(con.sql("SELECT sum(a) FROM records_data WHERE a < 10").fetchall()[0][0])
        """,
        runs=3,
    )
    assert out.split() == [str(2 * ROWS), str(2 * sum(range(10)))]


def test_duckdb_records_data_of_a_striped_object_left_open(st_cluster, tmp_path):
    out = run_script(
        tmp_path,
        st_cluster,
        """
        import st_py
        from st_integrations.duckdb_sql import connect_files

        c = st_py.Client()
        con = connect_files(c, ["/ce/striped"], data=True)
        print(con.sql("SELECT count(*), sum(a) FROM records_data").fetchall()[0])
        """,
    )
    assert out.strip() == f"({ROWS}, {sum(range(ROWS))})"


def test_duckdb_results_left_half_read(st_cluster, tmp_path):
    """A lazy relation shown in part and a result of which one row was
    fetched: scans still open when the program ends."""
    out = run_script(
        tmp_path,
        st_cluster,
        """
        import st_py
        from st_integrations.duckdb_sql import connect_files

        con = connect_files(st_py.Client(), ["/ce/*"], data=True)
        rel = con.sql("SELECT * FROM records_data")
        print(rel.limit(3))
        res = con.execute("SELECT a FROM records_data ORDER BY a")
        print(res.fetchone()[0])
        """,
    )
    assert out.split()[-1] == "0"


def test_pyarrow_dataset_reader_left_open(st_cluster, tmp_path):
    out = run_script(
        tmp_path,
        st_cluster,
        """
        from st_integrations.arrow_dataset import dataset

        d = dataset(["/ce/plain", "/ce/striped"])
        reader = d.scanner(batch_size=10).to_reader()
        print(reader.read_next_batch().num_rows > 0)
        print(d.to_table().num_rows)
        """,
    )
    assert out.split() == ["True", str(3 * ROWS)]


def test_fsspec_reads_and_a_file_object_left_open(st_cluster, tmp_path):
    out = run_script(
        tmp_path,
        st_cluster,
        """
        import fsspec
        import pandas as pd

        print(len(pd.read_parquet("storetorrent:///ce/striped/obj.parquet")))
        print(len(pd.read_csv("storetorrent:///ce/plain/part-1.csv")))
        fs = fsspec.filesystem("storetorrent")
        f = fs.open("/ce/striped/obj.parquet", "rb")  # an object reader, never closed
        print(f.read(4))
        """,
    )
    assert out.split() == [str(ROWS), str(ROWS), "b'PAR1'"]


def test_client_get_without_close(st_cluster, tmp_path):
    out = run_script(
        tmp_path,
        st_cluster,
        """
        import st_py

        c = st_py.Client()
        f = c.open("/ce/plain")
        print(len(f.get("part-1.csv")) > 0)
        g = c.open("/ce/striped")
        print(g.get("obj.parquet")[:4])
        print(sum(1 for _ in f.get_local()))
        """,
    )
    assert out.split() == ["True", "b'PAR1'", "2"]


def test_dask_compute_without_distributed(st_cluster, tmp_path):
    pytest.importorskip("dask.dataframe")
    out = run_script(
        tmp_path,
        st_cluster,
        """
        from st_integrations.dask_reader import read_storetorrent

        print(len(read_storetorrent("/ce/*").compute()))
        print(len(read_storetorrent("/ce/striped").compute(scheduler="sync")))
        """,
    )
    assert out.split() == [str(3 * ROWS), str(ROWS)]


def test_ray_read_without_shutdown(st_cluster, tmp_path):
    pytest.importorskip("ray")
    out = run_script(
        tmp_path,
        st_cluster,
        """
        import ray
        from st_integrations.ray_reader import read_storetorrent

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        print(read_storetorrent("/ce/*").count())
        """,
        timeout=240,
    )
    assert out.split()[-1] == str(3 * ROWS)
