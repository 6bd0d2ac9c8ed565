"""Snapshots and reads as of a past generation (docs/snapshots.md; issue
"Reproducible analysis") against real trackers and peers: after a snapshot,
records are appended, replaced and deleted, and the snapshot still reads
byte-identical to what was read before the changes, while the current
generation reads as it is now."""

from __future__ import annotations

import datetime
import time

import pytest
from helpers import assert_same_records, revealed_once, run_cli

from st_py.errors import (
    InvalidOptionError,
    ReadOnlyError,
    RecordNotFoundError,
    SnapshotExistsError,
    SnapshotExpiredError,
    SnapshotHeldError,
    SnapshotNotFoundError,
)


def _fill(c, name: str, replication: str = "x2", n: int = 30) -> dict[str, bytes]:
    want = {f"r{i:03d}": b"first %d " % i * (i + 1) for i in range(n)}
    with c.create(name, replication) as f:
        for k, v in want.items():
            f.queue_put(k, v)
    return want


def _change(c, name: str) -> None:
    """Append, replace and delete records after a snapshot."""
    with c.open(name) as f:
        for i in range(5):
            f.queue_put(f"new{i}", b"appended %d" % i)
        f.put("r001", b"replaced", replace=True)
        f.put("r002", b"replaced too", replace=True)
        f.delete("r003")
        f.delete("r004")


def _after(want: dict[str, bytes]) -> dict[str, bytes]:
    now = dict(want)
    now.update({f"new{i}": b"appended %d" % i for i in range(5)})
    now["r001"], now["r002"] = b"replaced", b"replaced too"
    del now["r003"], now["r004"]
    return now


@pytest.mark.parametrize("replication", ["x1", "x2", "x3"])
def test_a_snapshot_reads_what_it_pinned_after_appends_replacements_and_deletes(module_cluster, replication):
    c = module_cluster.client()
    name = f"/snap/basic-{replication}"
    want = _fill(c, name, replication)
    (snap,) = c.snapshot(name, "v1")
    assert (snap.file, snap.name) == (name, "v1") and snap.generation > 0
    _change(c, name)
    with c.open(name, as_of="v1") as f:
        assert f.as_of == snap.generation == f.generation
        assert f.names() == sorted(want)
        assert len(f.names()) == len(want)
        assert_same_records({k: f.get(k) for k in want}, want)
        with pytest.raises(RecordNotFoundError):
            f.get("new0")  # appended after the snapshot
    with c.open(name) as f:
        now = _after(want)
        assert f.names() == sorted(now)
        assert_same_records({k: f.get(k) for k in now}, now)
        assert f.generation > snap.generation and f.as_of is None
        with pytest.raises(RecordNotFoundError):
            f.get("r003")


def test_as_of_a_generation_and_a_time_read_the_same_state(module_cluster):
    c = module_cluster.client()
    name = "/snap/gen-time"
    want = _fill(c, name)
    with c.open(name) as f:
        gen = f.generation
    between = datetime.datetime.now(datetime.timezone.utc)
    time.sleep(0.05)
    _change(c, name)
    for as_of in (gen, between, between.isoformat()):
        with c.open(name, as_of=as_of) as f:
            assert f.generation == gen, as_of
            assert_same_records({k: f.get(k) for k in f.names()}, want)
    with pytest.raises(InvalidOptionError):
        c.open(name, as_of=10**9)
    with pytest.raises(SnapshotNotFoundError):
        c.open(name, as_of="no-such-snapshot")


def test_a_past_state_is_read_only(module_cluster):
    c = module_cluster.client()
    name = "/snap/ro"
    _fill(c, name, n=3)
    c.snapshot(name, "ro")
    with c.open(name, as_of="ro") as f:
        for write in (lambda: f.put("x", b"y"), lambda: f.queue_put("x", b"y"), lambda: f.delete("r000")):
            with pytest.raises(ReadOnlyError) as e:
                write()
            assert e.value.file == name and e.value.as_of == f.generation
    with c.open(name) as f:
        assert "x" not in f.names()


def test_snapshots_are_listed_named_once_and_deleted(module_cluster):
    c = module_cluster.client()
    _fill(c, "/snap/dir/a", n=3)
    _fill(c, "/snap/dir/b", n=4)
    made = c.snapshot("/snap/dir", "s1")
    assert sorted(s.file for s in made) == ["/snap/dir/a", "/snap/dir/b"]
    with pytest.raises(SnapshotExistsError) as e:
        c.snapshot("/snap/dir/a", "s1")
    assert e.value.file == "/snap/dir/a" and e.value.snapshot == "s1"
    listed = c.snapshots("/snap/dir")
    assert [(s.file, s.name, s.generation) for s in listed] == [(s.file, s.name, s.generation) for s in made]
    with c.open("/snap/dir/b") as f:
        assert [s.name for s in f.snapshots()] == ["s1"]
    gone = c.delete_snapshot("/snap/dir", "s1")
    assert len(gone) == 2 and c.snapshots("/snap/dir") == []
    with pytest.raises(SnapshotNotFoundError):
        c.delete_snapshot("/snap/dir/a", "s1")


def test_deleting_a_file_a_snapshot_holds_is_refused_and_removes_nothing(module_cluster):
    c = module_cluster.client()
    name = "/snap/held"
    want = _fill(c, name, n=10)
    c.snapshot(name, "keep")
    with pytest.raises(SnapshotHeldError) as e:
        c.delete(name)
    assert e.value.snapshots == ("keep",) and e.value.file == name
    with c.open(name) as f:
        assert_same_records({k: f.get(k) for k in f.names()}, want)  # nothing was removed from the peers
    c.delete_snapshot(name, "keep")
    assert c.delete(name) == 10


def test_an_old_generation_no_snapshot_keeps_is_refused_once_its_history_is_dropped(make_cluster):
    """History no snapshot holds is dropped after the tracker's
    --history-age (at its next write); reading a generation older than what
    is kept then raises SnapshotExpiredError rather than leaving records
    out, while a snapshot's generation stays readable."""
    cluster = make_cluster(tracker_args=["--history-age", "0.5"])
    c = cluster.client()
    name = "/snap/expire"
    want = _fill(c, name, n=5)
    c.snapshot(name, "kept")
    with c.open(name) as f:
        f.put("late", b"appended after the snapshot")
        gen = f.generation  # "late" is a record of gen, and of no snapshot
    with c.open(name) as f:
        f.delete("late")
        f.delete("r000")  # r000 is held by the snapshot
    with c.open(name, as_of=gen) as f:
        assert f.get("late") == b"appended after the snapshot"  # kept for now
    time.sleep(1.0)
    with c.open(name) as f:
        f.delete("r001")  # a write after --history-age: the tracker drops what no snapshot holds
    with pytest.raises(SnapshotExpiredError) as e:
        c.open(name, as_of=gen)
    assert e.value.as_of == gen and e.value.history_from > gen and e.value.file == name
    with c.open(name, as_of="kept") as f:  # the snapshot's generation, whole
        assert_same_records({k: f.get(k) for k in f.names()}, want)


def test_the_cli_makes_lists_reads_and_deletes_snapshots(module_cluster, tmp_path):
    import json

    c = module_cluster.client()
    name = "/snap/cli/f"
    want = _fill(c, name, n=6)
    r = run_cli(module_cluster, "snapshot", "create", "/snap/cli", "--name", "paper-v1", "--format", "json")
    assert r.returncode == 0, r.stderr
    (made,) = json.loads(r.stdout)
    assert (made["file"], made["name"]) == (name, "paper-v1")
    _change(c, name)
    r = run_cli(module_cluster, "snapshot", "ls", "/snap/cli", "--format", "json")
    assert [(s["file"], s["name"], s["generation"]) for s in json.loads(r.stdout)] == [
        (name, "paper-v1", made["generation"])
    ]
    r = run_cli(module_cluster, "ls", "-r", name, "--as-of", "paper-v1", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["name"] for x in rows] == sorted(want)
    assert {x["name"]: x["size"] for x in rows} == {k: len(v) for k, v in want.items()}
    assert {x["generation"] for x in rows} == {made["generation"]}
    r = run_cli(module_cluster, "get", name, "r003", "--as-of", str(made["generation"]), "-o", str(tmp_path / "r003"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r003").read_bytes() == want["r003"]  # deleted since, read as it was
    r = run_cli(module_cluster, "rm", name)
    assert r.returncode == 2 and "paper-v1" in r.stderr and "snapshot" in r.stderr
    r = run_cli(module_cluster, "snapshot", "delete", name, "paper-v1")
    assert r.returncode == 0, r.stderr
    assert run_cli(module_cluster, "rm", name).returncode == 0


def test_what_snapshots_retain_is_shown_and_counted_against_quota_until_released(make_cluster):
    """Retained copies occupy disks: status shows them next to used, the
    file's quota counts them, and deleting the last snapshot that holds them
    releases them (docs/snapshots.md, "Space")."""
    from conftest import poll_for

    from st_py.errors import QuotaExceededError

    record, n = 100_000, 10
    quota = 2 * n * record * 2  # x2: room for twice the records
    cluster = make_cluster(3, tracker_args=["--quota-bytes", str(quota)])
    c = cluster.client()
    name = "/snap/space"
    with c.create(name, "x2") as f:
        for i in range(n):
            f.put(f"a{i}", bytes([i]) * record)
    c.snapshot(name, "hold")
    with c.open(name) as f:
        for i in range(n):
            f.delete(f"a{i}")  # held by the snapshot: still on the disks
    poll_for(lambda: c.status().retained_bytes == n * record * 2, what="retained bytes counted")
    assert c.status().snapshots == 1
    # room is left for n more records, not 2n: the snapshot's keep the other half
    f = c.open(name)
    with pytest.raises(QuotaExceededError) as e:
        for i in range(2 * n):
            f.put(f"b{i}", bytes([i]) * record)
        f.close()  # the refusal comes with the group commit: at the put that crosses, or at close
    assert e.value.records[0] == f"b{n}", e.value
    f.close()
    with c.open(name) as f:
        assert len(f.names()) == n
        assert len(c.open(name, as_of="hold").names()) == n  # the deleted ones, still readable
    c.delete_snapshot(name, "hold")
    poll_for(lambda: c.status().retained_bytes == 0 and c.status().snapshots == 0, what="retained bytes released")
    with c.open(name) as f:  # released: the quota has room again
        for i in range(n, 2 * n):
            f.put(f"b{i}", bytes([i]) * record)


@pytest.mark.parametrize("file_trackers", [0, 2])
def test_snapshots_survive_a_tracker_restart_with_and_without_per_file_trackers(make_cluster, file_trackers):
    c_kw = {"file_trackers": file_trackers} if file_trackers else {}
    cluster = make_cluster(3, **c_kw)
    c = cluster.client()
    names = [f"/snap/restart/f{i}" for i in range(4)]  # hashed over the master and its per-file trackers
    wants = {n: _fill(c, n, n=8) for n in names}
    made = c.snapshot("/snap/restart", "before")
    assert sorted(s.file for s in made) == names
    for n in names:
        _change(c, n)
    cluster.tracker.kill()  # SIGKILL: nothing flushed on the way out
    cluster.start_tracker()
    cluster.wait_for_peers(3)
    c = cluster.client()
    assert [(s.file, s.generation) for s in c.snapshots("/snap/restart")] == [(s.file, s.generation) for s in made]
    for n in names:
        with c.open(n, as_of="before") as f:
            assert_same_records({k: f.get(k) for k in f.names()}, wants[n])
        with c.open(n) as f:
            assert_same_records({k: f.get(k) for k in f.names()}, _after(wants[n]))
    with pytest.raises(SnapshotHeldError):
        c.delete(names[0])


@pytest.mark.parametrize("replication", ["x1", "x2"])
def test_get_local_as_of_a_snapshot_reveals_its_records_once_with_their_old_bytes(make_cluster, replication):
    """GET_LOCAL as of a snapshot (the AS_OF ring, docs/wire-protocol.md):
    each record of the snapshot is revealed exactly once across the peers,
    at its old version (replaced ones), deleted ones included, appended ones
    not; with x2 it still is with a peer killed."""
    cluster = make_cluster(4)
    c = cluster.client()
    name = f"/snap/gl-{replication}"
    want = _fill(c, name, replication, n=40)
    c.snapshot(name, "gl")
    _change(c, name)

    with c.open(name, as_of="gl") as f:
        assert_same_records(revealed_once(f), want)
    with c.open(name) as f:
        assert_same_records(revealed_once(f), _after(want))
    if replication == "x2":
        cluster.kill_peer(2)
        with c.open(name, as_of="gl") as f:
            assert_same_records(revealed_once(f), want)


def test_a_snapshot_keeps_its_copies_through_scrubs_and_releases_them_when_deleted(make_cluster):
    """The peers' scrubbers keep what a snapshot holds however old it is, and
    reclaim it once the snapshot is gone (measured on the peers' disks)."""
    from checks import admin_scrub, stored

    cluster = make_cluster(3, peer_args=["--scrub-age", "0"], tracker_args=["--history-age", "0.3"])
    c = cluster.client()
    name = "/snap/scrub"
    want = _fill(c, name, "x2", n=12)
    c.snapshot(name, "keep")
    with c.open(name) as f:
        for k in list(want)[:6]:
            f.delete(k)
    time.sleep(0.6)
    with c.open(name) as f:
        f.put("later", b"a write after --history-age: the tracker prunes what no snapshot holds")
    before = stored(cluster)
    for addr in cluster.peer_addrs:
        admin_scrub(cluster, addr)
    assert stored(cluster) == before == (12 + 1) * 2  # nothing the snapshot holds was removed
    with c.open(name, as_of="keep") as f:
        assert_same_records({k: f.get(k) for k in f.names()}, want)
    c.delete_snapshot(name, "keep")
    for addr in cluster.peer_addrs:
        admin_scrub(cluster, addr)
    assert stored(cluster) == (6 + 1) * 2  # the deleted records' copies are gone from the disks


def test_a_deleted_name_put_again_keeps_the_older_copies_and_stays_write_once(make_cluster):
    """x2 on two peers: every peer keeps the deleted version's copy under the
    plain name, so the new record is stored under a name of its own
    (docs/snapshots.md, "Putting a name again"); the old bytes stay readable
    as of before, the new ones now, each revealed once; and the name is
    write-once again."""
    from st_py.errors import RecordExistsError

    cluster = make_cluster(2)
    c = cluster.client()
    name = "/snap/again"
    with c.create(name, "x2") as f:
        f.put("a", b"the first a")
    with c.open(name) as f:
        before = f.generation
        f.delete("a")
    with c.open(name) as f:
        f.put("a", b"the second a")
    with c.open(name) as f:
        assert f.get("a") == b"the second a"
        assert [r.name for r in f.get_local()] == ["a"]
        assert f.read_local(f.get_local()[0]) == b"the second a"
        with pytest.raises(RecordExistsError):
            f.put("a", b"a third, without delete")
    with c.open(name, as_of=before) as f:
        assert f.get("a") == b"the first a"
        (r,) = f.get_local()
        assert f.read_local(r) == b"the first a"


@pytest.mark.parametrize("protocol", ["client-sync", "chain"])
def test_a_name_put_again_meeting_the_kept_copies_in_part_takes_a_name_of_its_own(make_cluster, protocol):
    """x3 on 4 peers (hash placement: the name put again goes to the same
    peers at the same ranks): a record snapshotted and deleted is put again
    with the same bytes while its rank-1 holder is dead but still in
    service (a liveness window of 15 s), so rank 1 fails over to the fourth
    peer and ranks 0 and 2 meet the kept copies. Sharing the stored name,
    each version's rank 0 could go only to the peer holding the other's
    rank 1 once the rank-0 holder is lost, and rebalance and repair left
    both short (docs/composition.md); the version put again takes a name of
    its own (docs/snapshots.md, "Putting a name again"), and with the
    rank-0 holder killed both versions get their 3 copies back and read.
    Under ``chain`` the rank-0 holder forwards rank 1 and names it broken."""
    import sqlite3

    from conftest import poll_for

    from st_py.maintenance.rebalance import rebalance_file
    from st_py.maintenance.repair import repair

    cluster = make_cluster(4, announce_interval=5.0)
    c = cluster.client()
    name, data = "/snap/partial", b"the same bytes, put again " * 40
    with c.create(name, "x3", placement="hash", protocol=protocol) as f:
        f.put("a", data)
    with c.open(name) as f:
        kept = list(f.record_meta("a").peers)
        addr = {i: p.addr for i, p in f.peers.items()}
        path = f.infofile_path
    c.snapshot(name, "s1")
    with c.open(name) as f:
        f.delete("a")
    rank1 = cluster.peer_addrs.index(addr[kept[1]])
    cluster.kill_peer(rank1)  # still in service for the tracker: the writer sends rank 1 there
    with c.open(name) as f:
        f.put("a", data)
    with c.open(name) as f:
        meta = f.record_meta("a")
    assert [meta.peers[0], meta.peers[2]] == [kept[0], kept[2]] and meta.peers[1] not in kept, (kept, meta)
    assert meta.key != "a", meta  # met in part: not under the kept version's stored name
    cluster.start_peer(rank1, port=int(addr[kept[1]].rsplit(":", 1)[1]))
    poll_for(lambda: c.status().alive_peers == 4, timeout=30, what="the restarted peer to announce")
    lost = cluster.kill_peer(cluster.peer_addrs.index(addr[kept[0]]))  # both versions' rank 0
    poll_for(lambda: c.status().alive_peers == 3, timeout=30, what="the tracker to fail the peer")
    r = rebalance_file(c, name, [lost])
    assert not r.unavailable and not r.under_replicated and not r.conflicts, r
    reports = repair(c, [name], failed_after=0)
    assert all(x.complete for x in reports), [x.as_dict() for x in reports]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        held = [p for (p,) in conn.execute("SELECT peer_idx FROM copies WHERE name = 'a'")]
        kept_now = [p for (p,) in conn.execute("SELECT peer_idx FROM retained_copies WHERE name = 'a'")]
    finally:
        conn.close()
    gone = next(i for i, a in addr.items() if a == lost)
    assert len(set(held)) == 3 and gone not in held, held
    assert len(set(kept_now)) == 3 and gone not in kept_now, kept_now
    with c.open(name) as f:
        assert f.get("a") == data
        (rec,) = f.get_local()
        assert f.read_local(rec) == data
    with c.open(name, as_of="s1") as f:
        assert f.get("a") == data
        (rec,) = f.get_local()
        assert f.read_local(rec) == data


def test_a_staged_write_of_a_deleted_name_keeps_the_name_of_its_own_through_the_commit(make_cluster):
    """x2 on two peers: a name deleted while a snapshot keeps it, written
    again by a staged job with other bytes, is stored under a name of its
    own on the peers (docs/snapshots.md, "Putting a name again"); the
    staged record carries that name to ``commit_staged``, so the name reads
    the new bytes now and the old ones as of the snapshot."""
    cluster = make_cluster(2)
    c = cluster.client()
    name = "/snap/staged-again"
    with c.create(name, "x2") as f:
        f.put("a", b"the first a")
    c.snapshot(name, "s1")
    with c.open(name) as f:
        f.delete("a")
    with c.open_staged(name) as f:
        f.put("a", b"the second a, staged")
        staged = f.staged_commits()
    assert c.commit_staged(name, staged) == 1
    with c.open(name) as f:
        assert f.get("a") == b"the second a, staged"
        (r,) = f.get_local()
        assert f.read_local(r) == b"the second a, staged"
    with c.open(name, as_of="s1") as f:
        assert f.get("a") == b"the first a"


def test_snapshots_stay_readable_after_the_namespace_is_recovered_from_the_peers(make_cluster):
    """``recover --from-peers`` after the whole namespace is lost brings
    the infofiles back from the peers' mirrors with their history and
    snapshot rows: the snapshot reads what it pinned, the current state
    what it is (docs/snapshots.md, "Durability")."""
    from test_recover import _lose_namespace, _recover, _wait_for_mirrors

    cluster = make_cluster(4, peer_args=["--mirror-interval", "0.2"])
    c = cluster.client()
    name = "/snap/recover"
    want = _fill(c, name, "x2", n=20)
    (snap,) = c.snapshot(name, "keep")
    _change(c, name)
    _wait_for_mirrors(cluster, [name])
    _lose_namespace(cluster)
    cluster.wait_for_peers(4)
    rc, report = _recover(cluster)
    assert rc == 0, report
    assert [f["outcome"] for f in report["files"]] == ["restored"]
    c = cluster.client()
    assert [(s.name, s.generation) for s in c.snapshots(name)] == [("keep", snap.generation)]
    with c.open(name, as_of="keep") as f:
        assert f.generation == snap.generation
        assert_same_records({k: f.get(k) for k in f.names()}, want)
        assert_same_records(revealed_once(f), want)
    with c.open(name) as f:
        assert_same_records({k: f.get(k) for k in f.names()}, _after(want))


def test_a_snapshot_follows_its_past_versions_through_a_drain_and_a_rebalance(make_cluster):
    """The copies of versions a snapshot holds (replaced and deleted since)
    are moved like current copies: a drain takes them off the drained peer,
    and a rebalance restores those a lost peer held, so the snapshot reads
    whole after the drained peer is stopped and another one is lost
    (docs/snapshots.md: a snapshot follows each version to its holders)."""
    from st_py.maintenance.drain import drain
    from st_py.maintenance.rebalance import rebalance_file

    cluster = make_cluster(5)
    c = cluster.client()
    name = "/snap/follow"
    want = _fill(c, name, "x2", n=30)
    c.snapshot(name, "keep")
    with c.open(name) as f:
        for i in range(0, 30, 2):
            f.put(f"r{i:03d}", b"a newer version %d" % i, replace=True)
        for i in range(1, 30, 4):
            f.delete(f"r{i:03d}")
    drained = cluster.peer_addrs[0]
    report = drain(c, drained)
    assert report.complete and report.copies_left == 0, report
    cluster.kill_peer(0)  # retired: stopped, its disk goes away
    with c.open(name) as f:  # a peer that holds copies of the past versions now (placement is random)
        holder = min(p for m in f.infofile().retained_held_by().values() for p in m.peers)
        i = cluster.peer_addrs.index(f.peers[holder].addr)
    lost = cluster.kill_peer(i)
    r = rebalance_file(c, name, lost=[lost])
    assert r.complete, r
    assert r.retained_affected == r.retained_moved > 0, r
    with c.open(name, as_of="keep") as f:
        assert_same_records({k: f.get(k) for k in f.names()}, want)
        seen = {}
        for rec in f.get_local():
            assert rec.name not in seen
            seen[rec.name] = f.read_local(rec)
        assert_same_records(seen, want)


def test_spread_moves_the_copies_a_snapshot_keeps_with_the_others(make_cluster):
    """After the cluster grows from 2 to 4 peers, ``spread`` evens the fill
    counting the copies of past versions a snapshot keeps (they occupy the
    disks too) and moves some of them onto the new peers like current
    copies; the snapshot and the current generation read back whole, each
    record revealed once, and a second spread moves nothing."""
    from st_py.maintenance.spread import spread

    cluster = make_cluster(2)
    c = cluster.client()
    name = "/snap/spread"
    want = _fill(c, name, "x1", n=40)
    c.snapshot(name, "keep")
    with c.open(name) as f:
        for i in range(0, 40, 2):
            f.delete(f"r{i:03d}")
    cluster.add_peer()
    cluster.add_peer()
    report = spread(c, [name], tolerance=0.1)
    assert report.complete and report.even and report.copies_moved > 0, report.as_dict()
    with c.open(name) as f:
        r = f.infofile()
        new = {i for i, _, a in r.peerlist() if a in cluster.peer_addrs[2:]}
        kept = r.retained_held_by()
        assert len(kept) == 20 and any(set(m.peers) & new for m in kept.values()), kept
        held = {a: 0 for a in cluster.peer_addrs}
        addr = {i: a for i, _, a in r.peerlist()}
        for m in [*kept.values(), *r.lookup_many(r.names()).values()]:
            for p in m.peers:
                held[addr[p]] += m.size
    mean = sum(held.values()) / len(held)
    assert all(abs(b - mean) <= 0.1 * mean + max(len(v) for v in want.values()) for b in held.values()), held
    with c.open(name, as_of="keep") as f:
        assert_same_records({k: f.get(k) for k in f.names()}, want)
        assert_same_records(revealed_once(f), want)
    with c.open(name) as f:
        assert_same_records({k: f.get(k) for k in f.names()}, {k: v for k, v in want.items() if int(k[1:]) % 2})
    again = spread(c, [name], tolerance=0.1)
    assert again.copies_moved == 0 and again.complete, again.as_dict()
