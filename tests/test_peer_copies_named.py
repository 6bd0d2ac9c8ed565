"""Peers that keep infofile copies (``st-peer --metadata fetch``, no
namespace; issue 40, docs/peer.md, "Infofile copies") have a current copy
of every file they serve, told by the tracker's announce replies which
files name them (st_py/tracker/peer_files.py), without any GET_LOCAL or
scrub, so ``recover --from-peers`` rebuilds every file; and their metrics
and ``storetorrent status`` show the copies and how far behind they are."""

from __future__ import annotations

import json
import time

from conftest import poll_for
from helpers import cli_stdout, metric_value, scrape_metrics
from test_recover import _infofile_state, _lose_namespace, _recover, _wait_for_mirrors


def test_every_file_a_peer_serves_has_a_copy_and_recover_from_peers_rebuilds_them_all(make_cluster):
    """Files committed and never scanned: each peer of each file's peerlist
    comes to list a copy at the file's generation (before, only the files a
    GET_LOCAL or a scrub asked about had a copy, so nothing of these was
    listed), and a lost namespace comes back whole from those copies."""
    cluster = make_cluster(3, peer_metadata="fetch", metadata="fetch", peer_args=["--mirror-interval", "0.2"])
    files = {f"/named/f{i}": {f"r{j:02d}": b"file %d value %d" % (i, j) * (j + 1) for j in range(12)} for i in range(4)}
    c = cluster.client()
    for name, data in files.items():
        with c.create(name, replication="x2") as w:
            for k, v in data.items():
                w.put(k, v)
    state = _wait_for_mirrors(cluster, list(files))  # polls LIST_META of every peer of each peerlist

    _lose_namespace(cluster)
    rc, report = _recover(cluster)
    assert rc == 0, report
    got = {x["name"]: x for x in report["files"]}
    for name in files:
        assert got[name]["outcome"] == "restored" and got[name]["generation"] == state[name][1], got[name]
    r = cluster.client(metadata_cache=str(cluster.data_dir / "cache-after"))
    for name, data in files.items():
        f = r.open(name)
        assert sorted(f.names()) == sorted(data)
        assert {k: f.get(k) for k in data} == data
        f.close()


def test_peer_metrics_and_status_show_the_copies_and_their_lag(make_cluster):
    """With no background pass after the first (``--mirror-interval`` an
    hour), a committed file the tracker names is seen behind (no copy: the
    lag is the tracker's generation) on its peers' metrics and in
    ``storetorrent status``; a GET_LOCAL brings the copies to the
    generation, and the lag goes to 0 with a catch-up time."""
    cluster = make_cluster(2, peer_metadata="fetch", metadata="fetch", peer_args=["--mirror-interval", "3600"])
    c = cluster.client()
    name = "/named/lag"
    with c.create(name, replication="x2") as w:
        for i in range(10):
            w.put(f"r{i}", b"v%d" % i)
    _file_id, gen, _holders = _infofile_state(cluster, name)
    assert gen > 0

    def metrics(d) -> tuple[float, float, float, float]:
        m = scrape_metrics(d.metrics_addr)
        return (
            metric_value(m, "st_peer_infofile_copies"),
            metric_value(m, "st_peer_infofile_copies_behind"),
            metric_value(m, "st_peer_infofile_copy_max_lag_generations"),
            metric_value(m, "st_peer_infofile_copies_caught_up_timestamp_seconds"),
        )

    def peer_rows() -> dict[str, tuple]:
        """Each peer's (copies, behind, max lag, seconds since caught up) as ``storetorrent status`` shows them."""
        rows = json.loads(cli_stdout(cluster, "status", "--format", "json"))["peers"]
        return {r["peer"]: (r["meta_copies"], r["meta_behind"], r["meta_max_lag"], r["meta_caught_up_s"]) for r in rows}

    poll_for(
        lambda: all(metrics(d)[:3] == (0, 1, gen) for d in cluster.peers),
        timeout=15,
        interval=0.1,
        what="each peer's metrics to show the file it has no copy of, behind by its generation",
    )
    poll_for(
        lambda: all(r[:3] == (0, 1, gen) for r in peer_rows().values()),
        timeout=15,
        interval=0.1,
        what="storetorrent status to show each peer's copy behind",
    )
    before = time.time()
    with c.open(name) as f:
        assert sorted(r.name for r in f.get_local()) == [f"r{i}" for i in range(10)]
    for d in cluster.peers:
        copies, behind, lag, caught_up = metrics(d)
        assert (copies, behind, lag) == (1, 0, 0)
        assert caught_up >= before - 1
    poll_for(
        lambda: all(r[:3] == (1, 0, 0) and r[3] is not None for r in peer_rows().values()),
        timeout=15,
        interval=0.1,
        what="storetorrent status to show each peer's copy caught up",
    )
