"""The Ray reader and writer against a real cluster (tracker + 4 peers) and
a Ray cluster of two nodes standing for two hosts, each the host of two
peers (by the ``st-peer-HOST-PORT`` resources)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pytest
from analysis_data import (
    N_PARTS,
    PARQUET_FILE,
    ROWS,
    atimes,
    parquet_part,
    plans_made,
    put_parquet_file,
    record_files,
    record_peers,
    source_frame,
)
from conftest import poll_for
from helpers import sorted_rows, with_ray_place

from st_py.deploy.cluster import LocalCluster

ray = pytest.importorskip("ray")


def test_building_reads_no_record_and_the_scan_is_exact(parquet_cluster, ray_nodes):
    from st_integrations.ray_reader import read_storetorrent

    schema = parquet_part(0).schema
    before = atimes(parquet_cluster)
    ds = read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, schema=schema, block_size=60_000)
    ds = ds.map_batches(with_ray_place, batch_format="pandas")
    assert atimes(parquet_cluster) == before, "building the Dataset opened records"
    df = ds.to_pandas()
    assert atimes(parquet_cluster) != before  # the test can see a read (relatime)
    pd.testing.assert_frame_equal(
        sorted_rows(df[["part", "row", "x", "k"]], "part", "row"), source_frame(), check_dtype=False
    )


def test_blocks_per_peer_pinned_to_its_node_and_fused(parquet_cluster, ray_nodes, monkeypatch):
    from st_integrations import ray_reader
    from st_integrations.ray_reader import read_storetorrent

    plans = plans_made(monkeypatch, ray_reader)
    ds = read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, block_size=60_000, include_paths=True)
    df = ds.map_batches(with_ray_place, batch_format="pandas").to_pandas()
    # several read tasks per peer (not one table per peer), and the map ran
    # inside the read task (fused): each record's rows come from one task
    assert df.task.nunique() > 4
    assert df.groupby("path").task.nunique().max() == 1
    assert len(df) == N_PARTS * ROWS
    assert len(plans) == 1
    peer_of = record_peers(plans[0])  # the plan the read used
    assert len(peer_of) == N_PARTS
    for path, node in set(zip(df.path, df.node)):
        assert node == ray_nodes[peer_of[path]], path


def test_columns_and_filter_pushdown(parquet_cluster, ray_nodes):
    from st_integrations.ray_reader import read_storetorrent

    ds = read_storetorrent(
        PARQUET_FILE,
        tracker=parquet_cluster.tracker_addr,
        columns=["x", "part"],
        filter=(pc.field("x") >= 5.0) & (pc.field("x") < 5.5),
    )
    df = ds.to_pandas()
    src = source_frame()
    want = src[(src.x >= 5.0) & (src.x < 5.5)][["x", "part"]].sort_values("x").reset_index(drop=True)
    assert list(df.columns) == ["x", "part"]
    pd.testing.assert_frame_equal(df.sort_values("x").reset_index(drop=True), want, check_dtype=False)
    with pytest.raises(KeyError, match="nope"):
        read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, columns=["nope"])


def test_peer_killed_same_answer(parquet_cluster, ray_nodes, tmp_path):
    from st_integrations.ray_reader import read_storetorrent

    c = LocalCluster(tmp_path / "kill", n_peers=4, announce_interval=0.3)
    c.start()
    try:
        cl = c.client()
        put_parquet_file(cl, "/ray/k")
        c.kill_peer(1)
        df = read_storetorrent("/ray/k", tracker=c.tracker_addr).to_pandas()
        pd.testing.assert_frame_equal(sorted_rows(df, "part", "row"), source_frame(), check_dtype=False)
    finally:
        c.stop()


def test_datasink_round_trip_local_first_and_atomic(parquet_cluster, ray_nodes):
    from st_integrations.ray_reader import read_storetorrent
    from st_integrations.ray_writer import StoreTorrentDatasink, write_storetorrent

    src = source_frame()
    ds = ray.data.from_pandas(src).repartition(6)
    n = write_storetorrent(ds, "/ray/out", replication="x2", tracker=parquet_cluster.tracker_addr)
    assert n == 6
    back = read_storetorrent("/ray/out", tracker=parquet_cluster.tracker_addr).to_pandas()
    pd.testing.assert_frame_equal(sorted_rows(back, "part", "row"), src, check_dtype=False)

    # a job that fails part way commits nothing, and the file it made is gone
    def boom(batch):
        if (batch["part"] == 7).any():
            raise ValueError("task failed on purpose")
        return batch

    cl = parquet_cluster.client()
    with pytest.raises(Exception, match="on purpose"):
        ray.data.from_pandas(src).repartition(6).map_batches(boom, batch_format="pandas").write_datasink(
            StoreTorrentDatasink("/ray/failed", tracker=parquet_cluster.tracker_addr)
        )
    with pytest.raises(FileNotFoundError):
        cl.open("/ray/failed")


def _dying_sink_class():
    from st_integrations.ray_writer import StoreTorrentDatasink

    class DyingOnce(StoreTorrentDatasink):
        """Dies (the worker process exits) right after its first write task
        has stored its records, before returning them."""

        flag = ""

        def write(self, blocks, ctx):
            staged = super().write(blocks, ctx)
            if ctx.task_idx == 1 and not os.path.exists(self.flag):
                open(self.flag, "w").close()
                os._exit(1)
            return staged

    return DyingOnce


def test_retried_write_task_commits_each_record_once(parquet_cluster, ray_nodes, tmp_path):
    from st_integrations.ray_reader import read_storetorrent

    sink = _dying_sink_class()("/ray/retried", tracker=parquet_cluster.tracker_addr)
    sink.flag = str(tmp_path / "died-once")
    ray.data.from_pandas(source_frame()).repartition(4).write_datasink(sink, ray_remote_args={"max_retries": 2})
    assert os.path.exists(sink.flag)
    back = read_storetorrent("/ray/retried", tracker=parquet_cluster.tracker_addr).to_pandas()
    pd.testing.assert_frame_equal(sorted_rows(back, "part", "row"), source_frame(), check_dtype=False)


WRITER = textwrap.dedent("""
    import sys, time, ray, pandas as pd
    sys.path.insert(0, {tests!r})
    from analysis_data import source_frame
    from st_integrations.ray_writer import write_storetorrent
    ray.init(address={address!r}, log_to_driver=False)
    def slow(batch):
        time.sleep(0.3)
        return batch
    ds = ray.data.from_pandas(source_frame()).repartition(40).map_batches(slow, batch_format="pandas")
    write_storetorrent(ds, "/ray/killed", tracker={tracker!r})
""")


def test_write_job_killed_leaves_nothing_visible_and_a_retry_writes_once(parquet_cluster, ray_nodes):
    from st_integrations.ray_reader import read_storetorrent
    from st_integrations.ray_writer import write_storetorrent

    script = WRITER.format(
        tests=os.path.dirname(__file__),
        address=ray.get_runtime_context().gcs_address,
        tracker=parquet_cluster.tracker_addr,
    )
    stored = len(record_files(parquet_cluster))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill the job once some write tasks have stored records on the peers
        poll_for(
            lambda: len(record_files(parquet_cluster)) >= stored + 6 or p.poll() is not None,
            timeout=120,
            what="the write job to store records",
        )
        assert p.poll() is None, "the write job ended before it was killed"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    cl = parquet_cluster.client()
    with cl.open("/ray/killed") as f:
        assert len(f) == 0, "records of a killed job became visible"
    # the rerun appends to the file the killed job made: every row once
    write_storetorrent(
        ray.data.from_pandas(source_frame()).repartition(5), "/ray/killed", tracker=parquet_cluster.tracker_addr
    )
    back = read_storetorrent("/ray/killed", tracker=parquet_cluster.tracker_addr).to_pandas()
    pd.testing.assert_frame_equal(sorted_rows(back, "part", "row"), source_frame(), check_dtype=False)


def _recording_sink_class():
    from st_integrations.ray_writer import StoreTorrentDatasink

    class Recording(StoreTorrentDatasink):
        """Notes which Ray node ran each write task."""

        log = ""

        def write(self, blocks, ctx):
            with open(self.log, "a") as fh:
                fh.write(f"{ctx.task_idx} {ray.get_runtime_context().get_node_id()}\n")
            return super().write(blocks, ctx)

    return Recording


def test_write_tasks_put_copy_rank_0_on_their_own_node(parquet_cluster, ray_nodes, tmp_path):
    """FreeLoader's local-first placement: the first copy of every record a
    write task stores is on a peer of the task's own node."""
    from st_py.core.infofile import InfofileReader

    sink = _recording_sink_class()("/ray/local-first", tracker=parquet_cluster.tracker_addr, replication="x2")
    sink.log = str(tmp_path / "tasks")
    ray.data.from_pandas(source_frame()).repartition(8).write_datasink(sink)
    node_of_task = dict(line.split() for line in Path(sink.log).read_text().splitlines())
    with parquet_cluster.client() as c, c.open("/ray/local-first") as f:
        r = InfofileReader(f.infofile_path)
        addr = dict(r.conn.execute("SELECT peer_idx, addr FROM peers"))
        rows = r.conn.execute("SELECT name, peer_idx FROM copies WHERE copy_rank = 0").fetchall()
        r.close()
    assert len(rows) == 8
    for name, peer_idx in rows:
        task = str(int(name.split("-")[2]))  # part-<job>-<task>-<block>.parquet
        assert ray_nodes[addr[peer_idx]] == node_of_task[task], name
