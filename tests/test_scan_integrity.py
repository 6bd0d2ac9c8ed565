"""Checksummed scans (docs/reliability.md, "Checksummed scans"): a local copy
whose bytes rotted (same size, one byte flipped) never becomes rows. The
Dask and Ray scans, get_local's ``LocalRecord.read``, fsspec local reads
and DuckDB's ``records_data`` check each copy's CRC-32C, read the record by
GET from a good copy instead and count it; with no good copy the scan
raises naming the record. Real tracker and peers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import metric_sample, metric_value, scrape_metrics, to_parquet, tracker_status

from st_py.errors import ChecksumError, CopyGoneError, RecordUnavailableError

N = 6
ROWS = 2_000


def _part(i: int) -> bytes:
    # uncompressed, no dictionary: a flipped byte in the data pages changes a
    # value and still decodes (the silent wrong row this guards against)
    return to_parquet(
        pa.table({"i": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())}),
        compression="none",
        use_dictionary=False,
        write_statistics=False,
    )


def _flip(path: str) -> None:
    """Flip one byte in the middle of the data pages, keeping the size."""
    with open(path, "r+b") as fh:
        data = bytearray(fh.read())
        at = len(data) // 3
        data[at] ^= 0x40
        fh.seek(0)
        fh.write(data)


@pytest.fixture
def rotted(cluster, monkeypatch):
    """/rot/pq (x2): N Parquet records; the copy GET_LOCAL reveals of
    part-2 has a flipped byte. Returns (cluster, the rotted LocalRecord)."""
    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    with cluster.client().create("/rot/pq", replication="x2") as f:
        for i in range(N):
            f.put(f"part-{i}.parquet", _part(i))
    with cluster.client().open("/rot/pq") as f:
        (victim,) = [r for r in f.get_local() if r.name == "part-2.parquet"]
    _flip(victim.path)
    # what an unchecked read gives: wrong values, no error
    unchecked = pq.read_table(victim.path)["i"].to_pylist()
    assert unchecked != list(range(2 * ROWS, 3 * ROWS))
    return cluster, victim


TOTAL = sum(range(N * ROWS))


def test_get_local_read_checks_the_crc(rotted):
    cluster, victim = rotted
    assert victim.crc32c is not None
    with pytest.raises(ChecksumError) as e:
        victim.read("/rot/pq")
    assert e.value.record == "part-2.parquet" and e.value.path == victim.path
    assert e.value.expected == victim.crc32c and e.value.actual != victim.crc32c
    with cluster.client().open("/rot/pq") as f:
        good = [r for r in f.get_local() if r.name != "part-2.parquet"]
        assert all(r.read() for r in good)  # the others pass
        assert f.get("part-2.parquet") == _part(2)  # GET fails over to the good copy


def test_dask_scan_reads_the_good_copy(rotted):
    from st_integrations import scan
    from st_integrations.dask_reader import read_storetorrent

    before = scan.SCAN_STATS["checksum_fallbacks"]
    ddf = read_storetorrent("/rot/pq")  # Dask's default scheduler: this process
    assert len(ddf) == N * ROWS and int(ddf["i"].sum().compute()) == TOTAL
    assert scan.SCAN_STATS["checksum_fallbacks"] > before


def test_records_data_and_fsspec_read_the_good_copy(rotted):
    cluster, _ = rotted
    from st_integrations.duckdb_sql import sql
    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    out = sql(cluster.client(), ["/rot/pq"], "SELECT count(*) AS n, sum(i) AS s FROM records_data").to_pylist()
    assert out == [{"n": N * ROWS, "s": TOTAL}]
    fs = StoreTorrentFileSystem(tracker=cluster.tracker_addr)
    assert fs.cat_file("/rot/pq/part-2.parquet") == _part(2)
    assert fs.stats["local_fallbacks"] >= 1


def test_no_good_copy_is_an_error_naming_the_record(rotted):
    cluster, victim = rotted
    from st_integrations.dask_reader import read_storetorrent

    with cluster.client().open("/rot/pq") as f:
        meta = f.record_meta("part-2.parquet")
        # the other copy too: find it among the peers' record files
        import glob

        others = [
            p
            for p in glob.glob(str(cluster.data_dir / "peers" / "*" / "files" / "*" / "*" / "part-2.parquet@*"))
            if p != victim.path
        ]
    assert meta is not None and len(others) == 1
    _flip(others[0])
    with pytest.raises(RecordUnavailableError, match="part-2.parquet"):
        read_storetorrent("/rot/pq").compute()


def test_a_copy_gone_since_it_was_revealed_is_read_by_get(cluster, monkeypatch):
    """A peer keeps its answer to a plan (``--get-local-cache``): a copy moved
    away after it was revealed (as the verifier's quarantine or a lost disk
    does) is read by GET from the other copy, by the Dask scan, DuckDB's
    ``records_data`` and fsspec; ``LocalRecord.read`` names it. Once in a
    loaded CI run the scan raised "is gone" here instead."""
    import os

    from st_integrations import scan
    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.duckdb_sql import sql
    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    with cluster.client().create("/rot/gone", replication="x2") as f:
        for i in range(N):
            f.put(f"part-{i}.parquet", _part(i))
    with cluster.client().open("/rot/gone") as f:
        (victim,) = [r for r in f.get_local() if r.name == "part-4.parquet"]
    os.rename(victim.path, victim.path + ".moved")  # gone from where its peer revealed it
    with pytest.raises(CopyGoneError) as e:
        victim.read("/rot/gone")
    assert (e.value.record, e.value.file, e.value.path) == ("part-4.parquet", "/rot/gone", victim.path)
    before = scan.SCAN_STATS["gone_fallbacks"]
    ddf = read_storetorrent("/rot/gone")  # the same generation: the peers' kept answers
    assert len(ddf) == N * ROWS and int(ddf["i"].sum().compute()) == TOTAL
    assert scan.SCAN_STATS["gone_fallbacks"] > before
    out = sql(cluster.client(), ["/rot/gone"], "SELECT count(*) AS n, sum(i) AS s FROM records_data").to_pylist()
    assert out == [{"n": N * ROWS, "s": TOTAL}]
    assert StoreTorrentFileSystem(tracker=cluster.tracker_addr).cat_file("/rot/gone/part-4.parquet") == _part(4)


@pytest.mark.slow
def test_ray_scan_reads_the_good_copy(rotted):
    ray = pytest.importorskip("ray")
    from st_integrations.ray_reader import read_storetorrent

    try:
        ds = read_storetorrent("/rot/pq")
        assert ds.count() == N * ROWS and ds.sum("i") == TOTAL
    finally:
        ray.shutdown()


def test_a_checked_scan_reports_the_bad_copy_to_the_tracker(rotted):
    cluster, victim = rotted
    from st_integrations.dask_reader import read_storetorrent

    assert int(read_storetorrent("/rot/pq")["i"].sum().compute()) == TOTAL
    events = [e for e in tracker_status(cluster)["recent_failures"] if e["kind"] == "bad-copy"]
    assert any("part-2.parquet" in e["detail"] and e["addr"] == victim.peer for e in events), events
    assert all(p["alive"] for p in tracker_status(cluster)["peers"])  # a bad copy is not a dead peer


def test_the_verifier_quarantines_a_rotted_copy_and_repair_restores_it(make_cluster, monkeypatch):
    """The verifying scrubber (docs/peer.md, "Verifier"): every peer re-reads
    its copies each second here; the flipped copy is quarantined (moved to
    <data>/quarantine/, never served), reported with the next announce (the
    tracker marks it pending), and ``repair`` puts a good copy back on the
    same peer. Reads give the right rows throughout."""
    import glob
    import os

    from conftest import poll_for

    from st_integrations.dask_reader import read_storetorrent
    from st_py.maintenance import repair as rp

    cluster = make_cluster(3, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    c = cluster.client()
    with c.create("/rot/v", replication="x2") as f:
        for i in range(N):
            f.put(f"part-{i}.parquet", _part(i))
    with c.open("/rot/v") as f:
        (victim,) = [r for r in f.get_local() if r.name == "part-3.parquet"]
    holder = next(i for i, p in enumerate(cluster.peers) if p.addr == victim.peer)
    _flip(victim.path)

    def metric(name: str) -> float:
        return metric_sample(scrape_metrics(cluster.peers[holder].metrics_addr), name)

    poll_for(
        lambda: metric("st_peer_copies_quarantined_total") >= 1, timeout=20, what="the verifier to quarantine the copy"
    )
    assert metric("st_peer_copies_bad_total") == 1 and metric("st_peer_copies_verified_total") >= 1
    assert not os.path.exists(victim.path)
    (moved,) = glob.glob(str(cluster.data_dir / "peers" / f"peer-{holder}" / "quarantine" / "*" / "part-3*"))
    assert os.path.basename(moved) == os.path.basename(victim.path)
    # the tracker hears of it with the next announce: an event, the counters, and the copy pending
    poll_for(
        lambda: (
            next(p for p in tracker_status(cluster)["peers"] if p["addr"] == victim.peer)["copies_quarantined"] == 1
        ),
        timeout=10,
        what="the announce carrying the bad copy",
    )
    events = [e for e in tracker_status(cluster)["recent_failures"] if e["kind"] == "bad-copy"]
    assert any("part-3.parquet" in e["detail"] and "quarantined" in e["detail"] for e in events), events
    with c.open("/rot/v") as f:
        assert f.get("part-3.parquet") == _part(3)
        assert sorted(r.name for r in f.get_local()) == sorted(f"part-{i}.parquet" for i in range(N))
    assert int(read_storetorrent("/rot/v")["i"].sum().compute()) == TOTAL

    # the tracker records the quarantined copy in the infofile while it handles the announce,
    # after the counters and the event seen above: wait for the record repair works from
    poll_for(
        lambda: rp.repair(c, ["/rot/v"], failed_after=600, dry_run=True)[0].quarantined_found == 1,
        timeout=20,
        what="the infofile to record the quarantined copy",
    )
    (report,) = rp.repair(c, ["/rot/v"], failed_after=600)
    assert report.quarantined_found == 1 and report.pending_stored == 1 and report.complete, report.as_dict()
    restored = glob.glob(str(cluster.data_dir / "peers" / f"peer-{holder}" / "files" / "*" / "*" / "part-3*"))
    assert len(restored) == 1
    with open(restored[0], "rb") as fh:
        assert fh.read() == _part(3)
    with c.open("/rot/v") as f:
        held = {r.name: r for r in f.get_local()}
        assert held["part-3.parquet"].read() == _part(3)
    assert int(read_storetorrent("/rot/v")["i"].sum().compute()) == TOTAL


def test_raw_scans_batch_many_records_and_check_each(rotted):
    """format="raw": many records per batch (issue "Many small records"),
    each copy still checked: the rotted one is read from its good copy."""
    cluster, victim = rotted
    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.formats import RAW_SCHEMA
    from st_integrations.readplan import plan_scan
    from st_integrations.scan import ScanOptions, read_unit

    df = read_storetorrent("/rot/pq", format="raw", include_paths=True).compute()
    assert sorted(df["record"]) == sorted(f"part-{i}.parquet" for i in range(N))
    assert {r: bytes(d) for r, d in zip(df["record"], df["data"])} == {f"part-{i}.parquet": _part(i) for i in range(N)}
    assert set(df["path"]) == {f"/rot/pq/part-{i}.parquet" for i in range(N)}
    plan = plan_scan(cluster.client(), ["/rot/pq"])
    opts = ScanOptions(format="raw", tracker=cluster.tracker_addr)
    for unit in plan.units:  # one batch per unit, not one per record
        batches = list(read_unit(unit, RAW_SCHEMA, None, None, opts))
        assert len(batches) == 1 and batches[0].num_rows == len(unit.records)
    # a filter and a projection over the batch
    one = read_storetorrent(
        "/rot/pq", format="raw", columns=["data"], filters=[("record", "==", "part-2.parquet")]
    ).compute()
    assert list(one.columns) == ["data"] and [bytes(d) for d in one["data"]] == [_part(2)]


def test_a_bad_copy_report_survives_a_peer_killed_before_it_reached_the_tracker(make_cluster):
    """The quarantined file is the durable record of the report: a peer
    SIGKILLed while its report could not reach the tracker (paused) reports
    it again when it restarts, and repair restores the copy."""
    import glob
    import os
    import signal

    from conftest import poll_for

    from st_py.maintenance import repair as rp

    cluster = make_cluster(3, peer_args=["--verify-interval", "1"])
    c = cluster.client()
    with c.create("/rot/k", replication="x2") as f:
        for i in range(N):
            f.put(f"part-{i}.parquet", _part(i))
    with c.open("/rot/k") as f:
        (victim,) = [r for r in f.get_local() if r.name == "part-4.parquet"]
    holder = next(i for i, p in enumerate(cluster.peers) if p.addr == victim.peer)
    metrics = cluster.peers[holder].metrics_addr
    os.kill(cluster.tracker.pid, signal.SIGSTOP)  # announces fail: the report stays on the peer
    try:
        _flip(victim.path)

        def quarantined() -> bool:
            return metric_value(scrape_metrics(metrics), "st_peer_copies_quarantined_total") == 1

        poll_for(quarantined, timeout=20, what="the verifier to quarantine the copy")
        cluster.kill_peer(holder)
    finally:
        os.kill(cluster.tracker.pid, signal.SIGCONT)
    qdir = cluster.data_dir / "peers" / f"peer-{holder}" / "quarantine"
    assert [p for p in glob.glob(str(qdir / "*" / "*")) if not p.endswith(".reported")]
    cluster.start_peer(holder, port=int(victim.peer.rsplit(":", 1)[1]))
    poll_for(
        lambda: glob.glob(str(qdir / "*" / "*.reported")),
        timeout=20,
        what="the restarted peer to report the quarantined copy",
    )
    (report,) = rp.repair(c, ["/rot/k"], failed_after=600)
    assert report.pending_stored == 1 and report.complete, report.as_dict()
    with c.open("/rot/k") as f:
        assert {r.name: r.read() for r in f.get_local()}["part-4.parquet"] == _part(4)
