"""The Dask reader and writer against a real cluster (tracker + 4 peers) and
Dask workers named by the peers' addresses (each name stands for a host)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from analysis_data import (
    N_PARTS,
    PARQUET_FILE,
    ROWS,
    atimes,
    parquet_bytes,
    parquet_part,
    plans_made,
    put_parquet_file,
    record_files,
    record_peers,
    source_frame,
)
from helpers import sorted_rows, with_dask_worker

from st_py.deploy.cluster import LocalCluster

pytest.importorskip("dask.dataframe")


def test_building_reads_no_record_and_partitions_run_on_their_peers_worker(parquet_cluster, dclient, monkeypatch):
    from st_integrations import dask_reader
    from st_integrations.dask_reader import read_storetorrent

    plans = plans_made(monkeypatch, dask_reader)
    before = atimes(parquet_cluster)
    ddf = read_storetorrent(
        PARQUET_FILE,
        tracker=parquet_cluster.tracker_addr,
        client=dclient,
        schema=parquet_part(0).schema,
        blocksize=60_000,
        include_paths=True,
    )
    assert atimes(parquet_cluster) == before, "building the DataFrame opened records"
    assert ddf.npartitions > 4  # several bounded partitions per peer
    df = ddf.map_partitions(with_dask_worker).compute()
    assert atimes(parquet_cluster) != before
    pd.testing.assert_frame_equal(
        sorted_rows(df[["part", "row", "x", "k"]], "part", "row"), source_frame(), check_dtype=False
    )
    assert len(plans) == 1
    peer_of = record_peers(plans[0])  # the plan the read used
    for path, worker in set(zip(df.path, df.worker)):
        assert worker == peer_of[path], path
    # an aggregation after the read: the same answer
    got = ddf.groupby("k").x.sum().compute().sort_index()
    want = source_frame().groupby("k").x.sum().sort_index()
    pd.testing.assert_series_equal(got.astype("float64"), want, check_names=False, check_index_type=False, rtol=1e-12)


def test_columns_and_filters_pushdown(parquet_cluster, dclient):
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(
        PARQUET_FILE,
        tracker=parquet_cluster.tracker_addr,
        client=dclient,
        columns=["x", "part"],
        filters=[("x", ">=", 5.0), ("x", "<", 5.5)],
    )
    assert list(ddf.columns) == ["x", "part"]
    df = ddf.compute().sort_values("x").reset_index(drop=True)
    src = source_frame()
    want = src[(src.x >= 5.0) & (src.x < 5.5)][["x", "part"]].sort_values("x").reset_index(drop=True)
    pd.testing.assert_frame_equal(df, want, check_dtype=False)
    # a later column selection is pushed into the read too
    assert read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, client=dclient)[
        "row"
    ].sum().compute() == N_PARTS * sum(range(ROWS))


def test_to_storetorrent_round_trip_and_failed_job_commits_nothing(parquet_cluster, dclient):
    import dask.dataframe as dd

    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.dask_writer import to_storetorrent

    src = source_frame()
    n = to_storetorrent(
        dd.from_pandas(src, npartitions=5), "/dask/out", tracker=parquet_cluster.tracker_addr, client=dclient
    )
    assert n == 5
    back = read_storetorrent("/dask/out", tracker=parquet_cluster.tracker_addr, client=dclient).compute()
    pd.testing.assert_frame_equal(sorted_rows(back, "part", "row"), src, check_dtype=False)

    def boom(df):
        if (df["part"] == 20).any():
            raise ValueError("partition failed on purpose")
        return df

    bad = dd.from_pandas(src, npartitions=5).map_partitions(boom)
    with pytest.raises(ValueError, match="on purpose"):
        to_storetorrent(bad, "/dask/failed", tracker=parquet_cluster.tracker_addr, client=dclient)
    with parquet_cluster.client() as c, pytest.raises(FileNotFoundError):
        c.open("/dask/failed")


def test_peer_killed_same_answer(dclient, tmp_path):
    from st_integrations.dask_reader import read_storetorrent

    c = LocalCluster(tmp_path / "kill", n_peers=4, announce_interval=0.3)
    c.start()
    try:
        with c.client() as cl:
            put_parquet_file(cl, "/dask/k")
        c.kill_peer(2)
        df = read_storetorrent("/dask/k", tracker=c.tracker_addr, client=dclient).compute()
        pd.testing.assert_frame_equal(sorted_rows(df, "part", "row"), source_frame(), check_dtype=False)
    finally:
        c.stop()


def test_raw_format_gives_name_and_bytes_rows(parquet_cluster, dclient):
    from st_integrations.dask_reader import read_storetorrent

    df = read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, client=dclient, format="raw").compute()
    assert sorted(df.record) == [f"part-{i:03d}.parquet" for i in range(N_PARTS)]
    assert all(bytes(b).startswith(b"PAR1") for b in df.data)
    assert isinstance(pa.schema([("x", pa.int64())]), pa.Schema)


def test_record_lost_under_a_planned_scan_is_read_elsewhere_or_fails_loudly(dclient, tmp_path):
    """A scan planned, then a node loses a revealed record (its file is
    removed): the read takes it from its other copy (x2); with every copy
    gone it raises naming the record, never returning fewer rows."""
    import os

    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.readplan import plan_scan
    from st_py.errors import StoreTorrentError

    c = LocalCluster(tmp_path / "lost", n_peers=4, announce_interval=0.3)
    c.start()
    try:
        with c.client() as cl:
            put_parquet_file(cl, "/dask/lost")
        ddf = read_storetorrent("/dask/lost", tracker=c.tracker_addr, client=dclient, schema=parquet_part(0).schema)
        with c.client() as cl:
            victim = plan_scan(cl, "/dask/lost").units[0].records[0]
        os.unlink(victim.path)
        want = sum(len(parquet_part(i)) for i in range(N_PARTS))
        assert len(ddf.compute()) == want
        for p in record_files(c):
            if os.path.basename(p).startswith(victim.name + "@"):
                os.unlink(p)
        # every copy unlinked: the scan raises naming the record, or (distributed may hand back
        # the first compute's results for the same task keys while they are not yet released)
        # gives every row; never fewer rows (a helper's runs saw both)
        try:
            n = len(ddf.compute())
        except StoreTorrentError as e:
            assert victim.name in str(e), e
        else:
            assert n == want
    finally:
        c.stop()


def test_worker_restarted_mid_scan_does_not_hang(parquet_cluster):
    """A worker killed mid-scan is restarted by its nanny under a new address:
    the scan finishes with the right answer instead of waiting forever for the
    old address (found by the bounded-memory benchmark)."""
    import os
    import signal
    import time

    from distributed import Client
    from distributed import LocalCluster as DaskCluster

    from st_integrations.dask_reader import read_storetorrent

    with (
        DaskCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as dc,
        Client(dc) as client,
    ):
        ddf = read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, client=client, blocksize=60_000)
        fut = client.compute(ddf.x.map_partitions(lambda s: (time.sleep(0.3), s)[1]).sum())
        time.sleep(1.0)
        victim = sorted(client.scheduler_info()["workers"])[0]
        os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        got = fut.result(timeout=120)
    assert got == pytest.approx(source_frame().x.sum())


def test_encrypted_compressed_file_reads_back(parquet_cluster, dclient, monkeypatch):
    """Client-side filters (docs/filters.md): the Dask reader decodes the
    local copies with the key of its environment."""
    import io

    import pyarrow.parquet as pq

    from st_integrations.dask_reader import read_storetorrent

    key = bytes(range(32))
    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", key.hex())
    with parquet_cluster.client() as c, c.create("/dask/secret", "x2", filters=["zstd", "aes-256-gcm"]) as f:
        for i in range(6):
            b = io.BytesIO()
            pq.write_table(pa.table({"v": list(range(i * 100, i * 100 + 100))}), b)
            f.put(f"p{i}.parquet", b.getvalue())
    df = read_storetorrent("/dask/secret", tracker=parquet_cluster.tracker_addr, client=dclient).compute()
    assert sorted(df.v) == list(range(600))


@pytest.mark.parametrize("backend", [None, "numpy_nullable", "pyarrow"])
def test_dtypes_follow_dd_read_parquet(parquet_cluster, dclient, tmp_path, backend):
    """Issue 38, item 10: the dtypes of ``dtype_backend`` (default None:
    NumPy's int64 and float64, strings as string[pyarrow]) are
    ``dd.read_parquet``'s on the same records in a local folder, in the
    meta and in the computed frame."""
    import dask.dataframe as dd

    from st_integrations.dask_reader import read_storetorrent
    from st_py.errors import InvalidOptionError

    for i in range(N_PARTS):
        (tmp_path / f"part-{i:03d}.parquet").write_bytes(parquet_bytes(parquet_part(i)))
    kw = {} if backend is None else {"dtype_backend": backend}
    ours = read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, client=dclient, **kw)
    theirs = dd.read_parquet(str(tmp_path), **kw)
    assert ours.dtypes.to_dict() == theirs.dtypes.to_dict()
    got, want = ours.compute(), theirs.compute()
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    if backend is None:
        assert got.dtypes.to_dict() == {"part": "int64", "row": "int64", "x": "float64", "k": pd.StringDtype("pyarrow")}
    pd.testing.assert_frame_equal(sorted_rows(got, "part", "row"), sorted_rows(want, "part", "row"))
    with pytest.raises(InvalidOptionError, match="dtype_backend='arrow'"):
        read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, client=dclient, dtype_backend="arrow")
