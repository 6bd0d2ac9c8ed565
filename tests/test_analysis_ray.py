"""The Ray reader and writer against a real cluster (tracker + 4 peers) and
a Ray cluster of two nodes standing for two hosts, each the host of two
peers (by the ``st-peer-HOST-PORT`` resources)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pytest
from analysis_data import (
    N_PARTS,
    ROWS,
    atimes,
    parquet_part,
    put_parquet_file,
    record_files,
    revealing_peer,
    source_frame,
)
from conftest import poll_for

from st_py.deploy.cluster import LocalCluster

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def st_cluster(tmp_path_factory, peer_bin):
    c = LocalCluster(tmp_path_factory.mktemp("ray") / "cluster", n_peers=4, announce_interval=0.3)
    c.start()
    cl = c.client()
    put_parquet_file(cl, "/ray/pq")
    cl.close()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def ray_cluster(st_cluster):
    from ray.cluster_utils import Cluster

    from st_integrations.placement import peer_resource

    a, b = st_cluster.peer_addrs[:2], st_cluster.peer_addrs[2:]
    for attempt in range(3):  # a raylet can miss its start deadline on a loaded 2-core VM
        rc = None
        try:
            rc = Cluster(
                initialize_head=True, head_node_args={"num_cpus": 1, "resources": {peer_resource(p): 1 for p in a}}
            )
            other = rc.add_node(num_cpus=1, resources={peer_resource(p): 1 for p in b})
            break
        except Exception:
            if rc is not None:
                rc.shutdown()
            if attempt == 2:
                raise
            time.sleep(3)
    # Ray workers import this module's functions by name
    ray.init(
        address=rc.address,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(__file__)}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    node_of = {**{p: rc.head_node.node_id for p in a}, **{p: other.node_id for p in b}}
    yield node_of
    ray.shutdown()
    rc.shutdown()


def _sorted(df):
    return df.sort_values(["part", "row"]).reset_index(drop=True)


def _where(batch):
    import ray

    batch = batch.copy()
    batch["node"] = ray.get_runtime_context().get_node_id()
    batch["task"] = ray.get_runtime_context().get_task_id()
    return batch


def test_building_reads_no_record_and_the_scan_is_exact(st_cluster, ray_cluster):
    from st_integrations.ray_reader import read_storetorrent

    schema = parquet_part(0).schema
    before = atimes(st_cluster)
    ds = read_storetorrent("/ray/pq", tracker=st_cluster.tracker_addr, schema=schema, block_size=60_000)
    ds = ds.map_batches(_where, batch_format="pandas")
    assert atimes(st_cluster) == before, "building the Dataset opened records"
    df = ds.to_pandas()
    assert atimes(st_cluster) != before  # the test can see a read (relatime)
    pd.testing.assert_frame_equal(_sorted(df[["part", "row", "x", "k"]]), source_frame(), check_dtype=False)


def test_blocks_per_peer_pinned_to_its_node_and_fused(st_cluster, ray_cluster):
    from st_integrations.ray_reader import read_storetorrent

    ds = read_storetorrent("/ray/pq", tracker=st_cluster.tracker_addr, block_size=60_000, include_paths=True)
    df = ds.map_batches(_where, batch_format="pandas").to_pandas()
    # several read tasks per peer (not one table per peer), and the map ran
    # inside the read task (fused): each record's rows come from one task
    assert df.task.nunique() > 4
    assert df.groupby("path").task.nunique().max() == 1
    assert len(df) == N_PARTS * ROWS
    peer_of = revealing_peer(st_cluster, "/ray/pq")
    assert len(peer_of) == N_PARTS
    for path, node in set(zip(df.path, df.node)):
        assert node == ray_cluster[peer_of[path]], path


def test_columns_and_filter_pushdown(st_cluster, ray_cluster):
    from st_integrations.ray_reader import read_storetorrent

    ds = read_storetorrent(
        "/ray/pq",
        tracker=st_cluster.tracker_addr,
        columns=["x", "part"],
        filter=(pc.field("x") >= 5.0) & (pc.field("x") < 5.5),
    )
    df = ds.to_pandas()
    src = source_frame()
    want = src[(src.x >= 5.0) & (src.x < 5.5)][["x", "part"]].sort_values("x").reset_index(drop=True)
    assert list(df.columns) == ["x", "part"]
    pd.testing.assert_frame_equal(df.sort_values("x").reset_index(drop=True), want, check_dtype=False)
    with pytest.raises(KeyError, match="nope"):
        read_storetorrent("/ray/pq", tracker=st_cluster.tracker_addr, columns=["nope"])


def test_peer_killed_same_answer(st_cluster, ray_cluster, tmp_path):
    from st_integrations.ray_reader import read_storetorrent

    c = LocalCluster(tmp_path / "kill", n_peers=4, announce_interval=0.3)
    c.start()
    try:
        cl = c.client()
        put_parquet_file(cl, "/ray/k")
        c.kill_peer(1)
        df = read_storetorrent("/ray/k", tracker=c.tracker_addr).to_pandas()
        pd.testing.assert_frame_equal(_sorted(df), source_frame(), check_dtype=False)
    finally:
        c.stop()


def test_datasink_round_trip_local_first_and_atomic(st_cluster, ray_cluster):
    from st_integrations.ray_reader import read_storetorrent
    from st_integrations.ray_writer import StoreTorrentDatasink, write_storetorrent

    src = source_frame()
    ds = ray.data.from_pandas(src).repartition(6)
    n = write_storetorrent(ds, "/ray/out", replication="x2", tracker=st_cluster.tracker_addr)
    assert n == 6
    back = read_storetorrent("/ray/out", tracker=st_cluster.tracker_addr).to_pandas()
    pd.testing.assert_frame_equal(_sorted(back), src, check_dtype=False)

    # a job that fails part way commits nothing, and the file it made is gone
    def boom(batch):
        if (batch["part"] == 7).any():
            raise ValueError("task failed on purpose")
        return batch

    cl = st_cluster.client()
    with pytest.raises(Exception, match="on purpose"):
        ray.data.from_pandas(src).repartition(6).map_batches(boom, batch_format="pandas").write_datasink(
            StoreTorrentDatasink("/ray/failed", tracker=st_cluster.tracker_addr)
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


def test_retried_write_task_commits_each_record_once(st_cluster, ray_cluster, tmp_path):
    from st_integrations.ray_reader import read_storetorrent

    sink = _dying_sink_class()("/ray/retried", tracker=st_cluster.tracker_addr)
    sink.flag = str(tmp_path / "died-once")
    ray.data.from_pandas(source_frame()).repartition(4).write_datasink(sink, ray_remote_args={"max_retries": 2})
    assert os.path.exists(sink.flag)
    back = read_storetorrent("/ray/retried", tracker=st_cluster.tracker_addr).to_pandas()
    pd.testing.assert_frame_equal(_sorted(back), source_frame(), check_dtype=False)


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


def test_write_job_killed_leaves_nothing_visible_and_a_retry_writes_once(st_cluster, ray_cluster):
    from st_integrations.ray_reader import read_storetorrent
    from st_integrations.ray_writer import write_storetorrent

    script = WRITER.format(
        tests=os.path.dirname(__file__), address=ray.get_runtime_context().gcs_address, tracker=st_cluster.tracker_addr
    )
    stored = len(record_files(st_cluster))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill the job once some write tasks have stored records on the peers
        poll_for(
            lambda: len(record_files(st_cluster)) >= stored + 6 or p.poll() is not None,
            timeout=120,
            what="the write job to store records",
        )
        assert p.poll() is None, "the write job ended before it was killed"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    cl = st_cluster.client()
    with cl.open("/ray/killed") as f:
        assert len(f) == 0, "records of a killed job became visible"
    # the rerun appends to the file the killed job made: every row once
    write_storetorrent(
        ray.data.from_pandas(source_frame()).repartition(5), "/ray/killed", tracker=st_cluster.tracker_addr
    )
    back = read_storetorrent("/ray/killed", tracker=st_cluster.tracker_addr).to_pandas()
    pd.testing.assert_frame_equal(_sorted(back), source_frame(), check_dtype=False)


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


def test_write_tasks_put_copy_rank_0_on_their_own_node(st_cluster, ray_cluster, tmp_path):
    """FreeLoader's local-first placement: the first copy of every record a
    write task stores is on a peer of the task's own node."""
    from st_py.core.infofile import InfofileReader

    sink = _recording_sink_class()("/ray/local-first", tracker=st_cluster.tracker_addr, replication="x2")
    sink.log = str(tmp_path / "tasks")
    ray.data.from_pandas(source_frame()).repartition(8).write_datasink(sink)
    node_of_task = dict(line.split() for line in Path(sink.log).read_text().splitlines())
    with st_cluster.client() as c, c.open("/ray/local-first") as f:
        r = InfofileReader(f.infofile_path)
        addr = dict(r.conn.execute("SELECT peer_idx, addr FROM peers"))
        rows = r.conn.execute("SELECT name, peer_idx FROM copies WHERE copy_rank = 0").fetchall()
        r.close()
    assert len(rows) == 8
    for name, peer_idx in rows:
        task = str(int(name.split("-")[2]))  # part-<job>-<task>-<block>.parquet
        assert ray_cluster[addr[peer_idx]] == node_of_task[task], name
