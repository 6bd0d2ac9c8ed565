"""Several hosts on one machine, for Ray (issue 14): peers on 127.0.0.2 and
127.0.0.3, a Ray node started with each of those as its
``node_ip_address``, no custom resources. Each read task must run on the
Ray node of its peer's host, as a real cluster maps them by IP."""

from __future__ import annotations

import pandas as pd
import pytest
from analysis_data import N_PARTS, ROWS, plans_made, put_parquet_file, record_peers, source_frame
from helpers import sorted_rows, start_ray_cluster, with_ray_place

ray = pytest.importorskip("ray")


def test_read_tasks_run_on_the_ray_node_of_their_peers_host(make_cluster, monkeypatch):
    from st_integrations import ray_reader
    from st_integrations.ray_reader import read_storetorrent

    plans = plans_made(monkeypatch, ray_reader)

    st = make_cluster(2, hosts=True)
    with st.client() as c:
        put_parquet_file(c, "/mhr/pq")
    hosts = [st.peer_host(i) for i in range(2)]
    if ray.is_initialized():  # an earlier test's local Ray instance: this test needs its own cluster
        ray.shutdown()
    rc, _ = start_ray_cluster(
        {"num_cpus": 1, "node_ip_address": hosts[0]}, {"num_cpus": 1, "node_ip_address": hosts[1]}
    )
    try:
        node_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
        assert sorted(node_ip.values()) == hosts
        ds = read_storetorrent("/mhr/pq", tracker=st.tracker_addr, include_paths=True)
        df = ds.map_batches(with_ray_place, batch_format="pandas").to_pandas()
        assert len(df) == N_PARTS * ROWS
        got = sorted_rows(df, "part", "row")[["part", "row", "x", "k"]]
        pd.testing.assert_frame_equal(got, source_frame(), check_dtype=False)
        peer_of = record_peers(plans[0])  # the plan the read used
        for path, node in set(zip(df.path, df.node)):
            assert node_ip[node] == peer_of[path].rsplit(":", 1)[0], path  # by IP, no resources
    finally:
        ray.shutdown()
        rc.shutdown()
