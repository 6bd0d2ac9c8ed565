"""Several hosts on one machine (issue 14): every peer on its own loopback
address (127.0.0.2, .3, ...), Dask workers on the same addresses, no worker
names. Each read partition must run on the worker of its peer's *host*, as
a real cluster maps them, and a dead host's records come from the others."""

import pandas as pd
import pytest
from analysis_data import N_PARTS, plans_made, put_parquet_file, record_peers, source_frame
from helpers import sorted_rows


@pytest.fixture
def hosts_pq(hosts_cluster):
    """conftest's ``hosts_cluster`` holding the Parquet file ``/mh/pq``."""
    with hosts_cluster.client() as cl:
        put_parquet_file(cl, "/mh/pq")
    return hosts_cluster


def _worker_host(df):
    from distributed import get_worker

    df = df.copy()
    try:
        df["host"] = get_worker().address.split("://", 1)[-1].rsplit(":", 1)[0]
    except ValueError:  # meta inference on the client
        df["host"] = ""
    return df


def test_partitions_run_on_the_worker_of_their_peers_host(hosts_pq, monkeypatch):
    from distributed import Client, Scheduler, SpecCluster, Worker

    from st_integrations import dask_reader
    from st_integrations.dask_reader import read_storetorrent

    plans = plans_made(monkeypatch, dask_reader)

    hosts = [hosts_pq.peer_host(i) for i in range(4)]
    workers = {h: {"cls": Worker, "options": {"host": h, "nthreads": 1}} for h in hosts}
    spec = SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}})
    try:
        with Client(spec) as dclient:
            assert sorted(a.split("://")[1].rsplit(":", 1)[0] for a in dclient.scheduler_info()["workers"]) == hosts
            ddf = read_storetorrent("/mh/pq", tracker=hosts_pq.tracker_addr, client=dclient, include_paths=True)
            df = ddf.map_partitions(_worker_host).compute()
            got = sorted_rows(df, "part", "row")[["part", "row", "x", "k"]]
            pd.testing.assert_frame_equal(got, source_frame(), check_dtype=False)
            peer_of = record_peers(plans[0])  # the plan the read used
            assert len(set(df.path)) == N_PARTS
            for path, host in set(zip(df.path, df.host)):
                assert host == peer_of[path].rsplit(":", 1)[0], path  # by host, not by name
            # A host goes away: the same answer from the other copies.
            hosts_pq.kill_peer(1)
            df2 = read_storetorrent("/mh/pq", tracker=hosts_pq.tracker_addr, client=dclient).compute()
            got2 = sorted_rows(df2, "part", "row")[["part", "row", "x", "k"]]
            pd.testing.assert_frame_equal(got2, source_frame(), check_dtype=False)
    finally:
        spec.close()
