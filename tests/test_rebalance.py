"""Rebalance after a peer is lost for good, and the rule for a lost peer that
comes back with stale copies (paper 4.4, 4.5), against real processes."""

import subprocess
import sys

import pytest
from checks import admin_scrub, check_exactly_once, check_file, fill, reveal_all
from conftest import poll_for

from st_py.core.infofile import InfofileReader
from st_py.errors import BadNameError, RecordsUnavailableError
from st_py.maintenance.rebalance import rebalance_file


def holders(cluster, name):
    """{record: tuple of peer addresses per copy rank} from the infofile."""
    r = InfofileReader(cluster.namespace / name.lstrip("/"))
    try:
        addr = dict(r.conn.execute("SELECT peer_idx, addr FROM peers"))
        return {n: tuple(addr[i] for i in m.peers) for n, m in r.lookup_many(r.names()).items()}
    finally:
        r.close()


def test_rebalance_restores_two_copies_and_keeps_live_holders(make_cluster):
    cluster = make_cluster(4, peer_args=["--scrub-age", "0"])
    c, blobs = fill(cluster, "/rb/x2", 400)
    before = holders(cluster, "/rb/x2")
    lost = cluster.kill_peer(1)
    poll_for(lambda: c.status().alive_peers == 3, what="the tracker to see the peer fail")

    report = rebalance_file(c, "/rb/x2")
    assert report.lost == [lost]
    affected = [n for n, h in before.items() if lost in h]
    assert report.records_affected == len(affected) > 0
    assert report.copies_moved == len(affected) and report.complete, report

    after = holders(cluster, "/rb/x2")
    for n, h in after.items():
        assert lost not in h and len(set(h)) == 2, (n, h)
        # live holders keep their copy at the same rank; only the lost one moved
        assert all(b == a for b, a in zip(before[n], h) if b != lost), (n, before[n], h)
    check_file(cluster, "/rb/x2", blobs)
    with c.open("/rb/x2") as f:
        check_exactly_once(reveal_all(f)[1], blobs)

    # Two copies again: losing a second original peer loses nothing.
    cluster.kill_peer(3)
    check_file(cluster, "/rb/x2", blobs)
    with c.open("/rb/x2") as f:
        check_exactly_once(reveal_all(f)[1], blobs)

    # Nothing left to do: a second rebalance of the same lost peer moves nothing.
    again = rebalance_file(c, "/rb/x2", lost=[lost])
    assert again.records_affected == 0 and again.copies_moved == 0


def test_returning_peer_with_stale_copies_is_never_revealed_and_is_scrubbed(make_cluster):
    cluster = make_cluster(4, peer_args=["--scrub-age", "0"])
    c, blobs = fill(cluster, "/rb/stale", 300)
    lost = cluster.kill_peer(2)
    poll_for(lambda: c.status().alive_peers == 3, what="the tracker to see the peer fail")
    assert rebalance_file(c, "/rb/stale", lost=[lost]).complete
    stale_files = list((cluster.data_dir / "peers" / "peer-2" / "files").rglob("*@*"))
    assert stale_files, "the lost peer's store should still hold its old copies"

    # The peer comes back with its old store (same port: same address).
    cluster.start_peer(2, port=int(lost.rsplit(":", 1)[1]))
    poll_for(lambda: c.status().alive_peers == 4, what="the returning peer's announce")
    with c.open("/rb/stale") as f:
        plan, recs = reveal_all(f)
    assert lost in plan.ring
    check_exactly_once(recs, blobs)  # no INVARIANT error, nothing revealed twice
    assert not any(r.peer == lost for r in recs)

    # Its scrubber removes the stale copies: nothing committed to it any more.
    res = admin_scrub(cluster, lost)
    assert res["removed_uncommitted"] == len(stale_files), res
    assert not list((cluster.data_dir / "peers" / "peer-2" / "files").rglob("*@*"))
    check_file(cluster, "/rb/stale", blobs)
    # And it takes new copies again.
    with c.open("/rb/stale") as g:
        for i in range(40):
            g.put(f"new/{i}", b"n" * 10)
    assert any(lost in h for h in holders(cluster, "/rb/stale").values())


def test_rebalance_x1_reports_unavailable_records(make_cluster):
    cluster = make_cluster(3)
    c, blobs = fill(cluster, "/rb/x1", 120, replication="x1")
    lost = cluster.kill_peer(0)
    lost_names = {n for n, h in holders(cluster, "/rb/x1").items() if h == (lost,)}
    assert lost_names
    report = rebalance_file(c, "/rb/x1", lost=[lost])
    assert set(report.unavailable) == lost_names
    assert not report.complete and report.copies_moved == 0
    # GET_LOCAL says how many records have no live copy.
    with c.open("/rb/x1") as f, pytest.raises(RecordsUnavailableError) as e:
        f.get_local_plan()
    assert e.value.unavailable == len(lost_names)
    assert f"{len(lost_names)} of {len(blobs)} records" in str(e.value)


def test_rebalance_x3_with_two_lost_peers_and_a_new_peer(make_cluster):
    cluster = make_cluster(4)
    c, blobs = fill(cluster, "/rb/x3", 200, replication="x3")
    a, b = cluster.kill_peer(0), cluster.kill_peer(1)
    cluster.start_peer(4)  # a replacement node joins: the peerlist grows to use it
    poll_for(lambda: c.status().alive_peers == 3, what="the failures and the new peer")
    report = rebalance_file(c, "/rb/x3", lost=[a, b])
    assert report.complete, report
    assert report.peers_added == [cluster.peers[4].addr]
    for n, h in holders(cluster, "/rb/x3").items():
        assert len(set(h)) == 3 and not {a, b} & set(h), (n, h)
    check_file(cluster, "/rb/x3", blobs, copies=3)


def test_rebalance_refuses_an_unknown_peer_and_the_cli_reports(make_cluster):
    cluster = make_cluster(3)
    c, blobs = fill(cluster, "/rb/cli", 60)
    with pytest.raises(BadNameError, match="not in the peerlist"):
        rebalance_file(c, "/rb/cli", lost=["127.0.0.1:1"])
    lost = cluster.kill_peer(1)
    cli = [sys.executable, "-m", "st_py.cli", "rebalance", "--tracker", cluster.tracker_addr]
    out = subprocess.run([*cli, "/rb/cli", "--lost", lost], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "copies moved" in out.stdout
    check_file(cluster, "/rb/cli", blobs)
    # x1 with its only holder lost: exit status 1 and the count.
    poll_for(lambda: c.status().alive_peers == 2, what="the tracker to see the peer fail")
    with c.create("/rb/cli1", replication="x1", blocksize=1) as f:
        for i in range(30):
            f.put(f"r{i}", b"z")
    lost2 = cluster.kill_peer(2)
    out = subprocess.run([*cli, "/rb/cli1", "--lost", lost2], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "unavailable" in out.stdout, out.stdout + out.stderr
