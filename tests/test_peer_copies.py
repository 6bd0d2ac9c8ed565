"""Peers that keep their own copies of infofiles (``st-peer --metadata
fetch``, no ``--namespace``; issue 40, docs/metadata-log.md, "Metadata on
every node"), with clients reading copies too (``metadata="fetch"``), real
processes: GET_LOCAL, the Dask reader and DuckDB's ``records_data`` give
the answers the shared namespace gives; a commit after the peers' last copy
is seen by the next scan; a peer whose tracker is gone refuses with
STALE_INFOFILE instead of revealing an older generation."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from analysis_data import N_PARTS, PARQUET_FILE, ROWS, parquet_bytes, parquet_part, put_parquet_file, source_frame
from conftest import poll_for
from helpers import metric_value, scrape_metrics, sorted_rows

from st_integrations.duckdb_sql import connect_files
from st_py.client.getlocal import reveal
from st_py.core import namespace
from st_py.errors import StalePeerCopyError


@pytest.fixture(scope="module")
def parquet_cluster(make_module_cluster):
    """Overrides conftest's: 3 peers with ``--metadata fetch`` and no
    namespace, holding the analysis Parquet file; every client of the module
    (the Dask reader's and DuckDB's included) reads copies
    (``STORETORRENT_METADATA=fetch``)."""
    old = os.environ.get("STORETORRENT_METADATA")
    os.environ["STORETORRENT_METADATA"] = "fetch"
    c = make_module_cluster(3, name="peercopies", peer_metadata="fetch", metadata="fetch")
    with c.client() as cl:
        put_parquet_file(cl, PARQUET_FILE)
    yield c
    if old is None:
        os.environ.pop("STORETORRENT_METADATA", None)
    else:
        os.environ["STORETORRENT_METADATA"] = old


def peer_copy(cluster, i: int, file_id: int) -> str:
    return str(cluster.data_dir / "peers" / f"peer-{i}" / "meta" / f"{file_id:016x}.infofile")


def copy_generation(path: str) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
    finally:
        db.close()


def rows(path: str) -> list[str]:
    """Every statement that remakes the SQLite file at ``path``, sorted (a
    copy's rowids of tables keyed by name may differ)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(db.iterdump())
    finally:
        db.close()


def test_get_local_reveals_every_record_once_from_the_peers_copies(parquet_cluster):
    """No peer has a namespace: GET_LOCAL reveals each committed record
    once, from copies the peers fetched into data/meta/ at the plan's
    generation (before: NO_NAMESPACE)."""
    with parquet_cluster.client() as c:
        f = c.open(PARQUET_FILE)
        got = f.get_local()
        assert sorted(r.name for r in got) == sorted(f.names())
        assert len(got) == N_PARTS
        for r in got:
            assert f.read_local(r) == parquet_bytes(parquet_part(int(r.name[5:8])))
        for i in range(3):
            path = peer_copy(parquet_cluster, i, f.file_id)
            assert os.path.exists(path), path
            assert copy_generation(path) >= f.generation
        f.close()


def test_dask_reader_and_duckdb_records_data_from_peer_copies(parquet_cluster, dclient):
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(PARQUET_FILE, tracker=parquet_cluster.tracker_addr, client=dclient)
    df = ddf.compute()
    pd.testing.assert_frame_equal(
        sorted_rows(df[["part", "row", "x", "k"]], "part", "row"), source_frame(), check_dtype=False
    )
    with parquet_cluster.client() as c:
        con = connect_files(c, [PARQUET_FILE], data=True)
        n, total = con.sql("SELECT count(*), sum(row) FROM records_data").fetchall()[0]
        con.close()
    assert (n, total) == (N_PARTS * ROWS, N_PARTS * sum(range(ROWS)))


def test_a_commit_after_the_peers_copies_is_seen_by_the_next_scan(parquet_cluster):
    """The plan names the newer generation, so each peer brings its copy
    forward (changesets) before revealing: the new records are in."""
    name = "/peercopies/grow"
    with parquet_cluster.client() as c:
        w = c.create(name, replication="x2")
        for i in range(10):
            w.put(f"a{i:02d}", os.urandom(200))
        w.flush()
        f = c.open(name)
        assert len(f.get_local()) == 10
        g1 = f.generation
        f.close()
        for i in range(5):
            w.put(f"b{i:02d}", os.urandom(100))
        w.close()
        f = c.open(name)
        assert f.generation > g1
        want = sorted([f"a{i:02d}" for i in range(10)] + [f"b{i:02d}" for i in range(5)])
        assert sorted(r.name for r in f.get_local()) == want
        # each copy brought forward is the tracker's infofile, row for row
        tracker_rows = rows(str(namespace.infofile_path(parquet_cluster.namespace, name)))
        for i in range(3):
            assert rows(peer_copy(parquet_cluster, i, f.file_id)) == tracker_rows, i
        # ... by the tracker's changesets, not a snapshot of the whole file
        logs = "".join((parquet_cluster.data_dir / "logs" / f"peer-{i}.log").read_text() for i in range(3))
        assert f"infofile copy of {name}: generation {g1} -> {f.generation} by changes" in logs
        f.close()


def test_a_peer_whose_tracker_is_gone_refuses_with_stale_infofile(make_cluster):
    """The peers' copies are at G1, the plan names G2 > G1 and the tracker
    is killed: each peer refuses with STALE_INFOFILE naming G2, G1 and the
    tracker, and reveals nothing."""
    cluster = make_cluster(2, peer_metadata="fetch", metadata="fetch")
    name = "/peercopies/stale"
    with cluster.client() as c:
        w = c.create(name, replication="x2")
        for i in range(4):
            w.put(f"a{i}", b"x" * 10)
        w.flush()
        f = c.open(name)
        assert len(f.get_local()) == 4
        g1 = f.generation
        f.close()
        w.put("b0", b"y" * 10)
        w.close()
        f = c.open(name)
        g2 = f.generation
        assert g2 > g1
        # the scan is planned (a client's reads are live: the plan needs the tracker), then the
        # tracker dies before the peers are asked
        plan = f.get_local_plan()
        cluster.tracker.kill()
        with pytest.raises(StalePeerCopyError) as e:
            reveal(plan.ring[0], plan)
        assert (e.value.generation, e.value.have) == (g2, g1)
        assert e.value.tracker == cluster.tracker_addr
        assert "STALE_INFOFILE" in str(e.value.__cause__)
        f.close()
    # the refusal is counted (docs/operations.md), by the peer that refused
    ms = [scrape_metrics(d.metrics_addr) for d in cluster.peers]
    assert sum(metric_value(m, "st_peer_infofile_copy_fetches_total", result="failed") for m in ms) >= 1
    assert all(metric_value(m, "st_peer_infofile_copy_fetches_total", result="ok") >= 1 for m in ms)
    assert all(metric_value(m, "st_peer_infofile_copy_received_bytes_total") > 0 for m in ms)


def test_the_tracker_serves_a_peer_only_the_infofiles_of_its_files(parquet_cluster):
    """A peer's FetchInfofile ("peer:<id>", its PEER capability): a file
    whose peerlist names it gets a snapshot; another id is refused; no
    capability is refused (the cluster has a key)."""
    import grpc

    from st_py._proto import tracker_pb2 as pb
    from st_py._proto import tracker_pb2_grpc as pb_grpc
    from st_py.core import capability

    key = capability.load_key(parquet_cluster.key_file)
    peer_id = (parquet_cluster.data_dir / "peers" / "peer-0" / "PEER_ID").read_text().strip()
    with parquet_cluster.client() as c:
        file_id = c.open(PARQUET_FILE).file_id
    channel = grpc.insecure_channel(parquet_cluster.tracker_addr)
    stub = pb_grpc.TrackerStub(channel)

    def fetch(pid: str, token: bool = True):
        md = []
        if token:
            md = [("x-st-capability", capability.mint(key, capability.PEER, 0, 60, user=f"peer:{pid}").hex())]
        req = pb.FetchInfofileRequest(name=PARQUET_FILE, user=f"peer:{pid}", file_id=file_id)
        return list(stub.FetchInfofile(req, metadata=md, timeout=10))

    try:
        assert fetch(peer_id)[0].kind == "snapshot"
        with pytest.raises(grpc.RpcError) as e:
            fetch("not-a-peer-of-it")
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "not in the peerlist" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            fetch(peer_id, token=False)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()


def test_copies_are_kept_current_between_scans_and_recover_from_peers_rebuilds_from_them(make_cluster):
    """With --metadata fetch the copies are the mirrors: every
    --mirror-interval each peer brings its copies to the tracker's latest
    (records committed after the last scan are listed by LIST_META without a
    scan), a deleted file's copies are removed (after --scrub-age), and a
    namespace lost whole comes back from them (the copies are kept while the
    tracker knows no file)."""
    from test_recover import _lose_namespace, _mirrors, _recover

    cluster = make_cluster(
        2, peer_metadata="fetch", metadata="fetch", peer_args=["--mirror-interval", "0.2", "--scrub-age", "0.5"]
    )
    name = "/peercopies/rec"
    data = {f"r{i:02d}": f"value {i}".encode() * (i + 1) for i in range(30)}
    c = cluster.client()
    w = c.create(name, replication="x2")
    for k in list(data)[:20]:
        w.put(k, data[k])
    w.flush()
    f = c.open(name)
    assert len(f.get_local()) == 20  # the scan makes the peers' copies
    f.close()
    # a deleted file's copy goes (the tracker has no such file, the peer none of its records)
    with c.create("/peercopies/gone", replication="x2") as g:
        g.put("x", b"x")
    g = c.open("/peercopies/gone")
    gone_id = g.file_id
    assert len(g.get_local()) == 1
    g.close()
    assert all(os.path.exists(peer_copy(cluster, i, gone_id)) for i in range(2))
    c.delete("/peercopies/gone")
    poll_for(
        lambda: not any(os.path.exists(peer_copy(cluster, i, gone_id)) for i in range(2)),
        timeout=20,
        interval=0.1,
        what="the copies of a deleted file to be removed",
    )
    for k in list(data)[20:]:
        w.put(k, data[k])
    w.close()
    info = c.tracker.open(name)
    poll_for(
        lambda: all(_mirrors(cluster, a).get(info.file_id) == info.generation for a in cluster.peer_addrs),
        timeout=20,
        interval=0.1,
        what="the peers' copies to reach the tracker's generation without a scan",
    )
    _lose_namespace(cluster)
    rc, report = _recover(cluster)
    assert rc == 0, report
    (got,) = [x for x in report["files"] if x["name"] == name]
    assert got["outcome"] == "restored" and got["generation"] == info.generation, got
    r = cluster.client(metadata_cache=str(cluster.data_dir / "cache-after"))
    f = r.open(name)
    assert sorted(f.names()) == sorted(data)
    assert {k: f.get(k) for k in data} == data
    assert sorted(x.name for x in f.get_local()) == sorted(data)
    f.close()


def test_a_peer_given_only_its_tracker_keeps_copies_by_default(make_cluster):
    """A peer on a node that mounts nothing needs no setting: st-peer's
    default ``--metadata auto`` keeps infofile copies when it has a tracker
    and no ``--namespace``. Before, such a peer answered GET_LOCAL with
    NO_NAMESPACE unless started with ``--metadata fetch``."""
    cluster = make_cluster(2, peer_metadata="auto", metadata="fetch")
    c = cluster.client()
    with c.create("/auto/f", replication="x2") as f:
        for i in range(40):
            f.put(f"r{i:02d}", b"v%d" % i)
    with c.open("/auto/f") as f:
        local = f.get_local()
    assert sorted(r.name for r in local) == [f"r{i:02d}" for i in range(40)]
    assert all(Path(r.path).read_bytes() == b"v%d" % int(r.name[1:]) for r in local)
    assert any((cluster.data_dir / "peers").glob("peer-*/meta/*")), "no infofile copy kept"
