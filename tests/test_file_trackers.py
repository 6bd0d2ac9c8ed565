"""Per-file trackers (paper 3.5: "the master tracker running at the
well-known address may spawn per-file trackers to handle metadata load for
one or more files. Clients are redirected to the appropriate tracker on
open"), against real processes: a master with ``--file-trackers 2`` spreads
files over three shards by the hash of their names; commits go to the
file's tracker; a per-file tracker SIGKILLed mid-write is restarted and
loses nothing; quotas, modes and leases hold across the processes and their restarts.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from checks import check_file, fill
from conftest import poll_for
from helpers import metric_value, scrape_metrics

from st_py._proto import tracker_pb2 as pb
from st_py.core import capability as cap
from st_py.errors import (
    FileNotEmptyError,
    LeaseHeldError,
    PermissionDeniedError,
    QuotaExceededError,
    TrackerMovedError,
    TrackerUnavailableError,
)
from st_py.maintenance.rebalance import rebalance_file
from st_py.tracker.access import add_user
from st_py.tracker.shards import shard_of

SHARDS = 3  # --file-trackers 2: the master (shard 0) and two per-file trackers


def on_shard(shard: int, prefix: str, n: int = 1) -> list[str]:
    """``n`` file names under ``prefix`` that hash to ``shard``."""
    out, i = [], 0
    while len(out) < n:
        name = f"{prefix}-{i}"
        if shard_of(name, SHARDS) == shard:
            out.append(name)
        i += 1
    return out


def file_trackers(client) -> dict:
    """{shard: pb.FileTracker} as the master's Status reports them."""
    return {t.shard: t for t in client.status().file_trackers}


def kill_file_tracker(cluster, client, shard: int) -> int:
    """SIGKILL per-file tracker ``shard``; return once the master has it
    serving again (a new pid). Returns the restarted one's pid."""
    old = file_trackers(client)[shard]
    os.kill(old.pid, signal.SIGKILL)

    def back():
        t = file_trackers(client)[shard]
        return t.pid if t.alive and t.pid != old.pid and t.restarts == old.restarts + 1 else 0

    return poll_for(back, timeout=30, what=f"file tracker {shard} to be restarted")


def gone(pid: int) -> bool:
    """Process ``pid`` has exited (or is a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def ft(make_cluster):
    return make_cluster(3, file_trackers=2)


def test_open_and_create_redirect_and_commits_through_file_trackers_reach_readers(ft):
    c = ft.client()
    trackers = file_trackers(c)
    assert sorted(trackers) == [1, 2]
    assert all(t.alive and t.addr and t.pid and t.shards == SHARDS for t in trackers.values())
    assert len({t.addr for t in trackers.values()} | {ft.tracker_addr}) == 3
    before = scrape_metrics(ft.tracker.metrics_addr)
    for shard in (0, 1, 2):
        name = on_shard(shard, "/ft/redirect")[0]
        want = trackers[shard].addr if shard else ""  # "": the master takes its own shard's writes
        with c.create(name, "x2") as f:
            assert f.info.file_tracker == want
            for i in range(100):
                f.queue_put(f"r{i:03d}", b"%d" % i)
        with ft.client().open(name) as g:  # another client reads what the file's tracker committed
            assert g.info.file_tracker == want
            assert len(g) == 100 and g.get("r042") == b"42"
    # The master ran shard 0's commits only; the others went straight to their trackers,
    # which the master admitted (one Admit per group of commits).
    commits = metric_value(
        scrape_metrics(ft.tracker.metrics_addr), "st_tracker_rpcs_total", method="Commit", code="OK"
    ) - metric_value(before, "st_tracker_rpcs_total", method="Commit", code="OK")
    assert 1 <= commits <= 4, commits  # 100 records in groups of 40
    after = file_trackers(c)
    assert all(after[s].commits >= 1 and after[s].records == 100 for s in (1, 2)), after

    # A client that sends a commit to the master anyway (an older client, a tool) is forwarded.
    name = on_shard(1, "/ft/forwarded")[0]
    with c.create(name, "x1") as f:
        f.put("through-the-file-tracker", b"a")
    info = c.tracker.open(name)
    reply = c.tracker.commit(
        name, info.file_id, [pb.RecordCommit(name="through-the-master", size=1, crc32c=0, peer_idx=[0])]
    )
    assert reply.committed == 1
    with c.open(name) as f:
        assert len(f) == 2 and f.record_meta("through-the-master") is not None

    # storetorrent status and the status page list them
    out = subprocess.run(
        [sys.executable, "-m", "st_py.cli", "status", "--tracker", ft.tracker_addr, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    listed = {t["shard"]: t for t in json.loads(out.stdout)["file_trackers"]}
    assert {s: t["addr"] for s, t in listed.items()} == {s: t.addr for s, t in trackers.items()}
    with urllib.request.urlopen(f"http://{ft.tracker.metrics_addr}/status.json", timeout=10) as r:
        page = json.loads(r.read())
    assert [t["addr"] for t in page["file_trackers"]] == [trackers[1].addr, trackers[2].addr]
    with urllib.request.urlopen(f"http://{ft.tracker.metrics_addr}/", timeout=10) as r:
        assert 'id="file-trackers"' in r.read().decode()


def test_a_file_tracker_killed_mid_write_is_restarted_and_loses_nothing_committed(ft):
    c = ft.client()
    name = on_shard(1, "/ft/kill")[0]
    blobs = {f"r{i:04d}": b"%d" % i * 50 for i in range(600)}
    with c.create(name, "x2") as f:
        assert f.info.file_tracker
        for i, (k, v) in enumerate(blobs.items()):
            f.queue_put(k, v)
            if i == 200:
                f.flush()  # 201 records committed before the kill
                committed = len(f)
                old, addr = file_trackers(c)[1].pid, file_trackers(c)[1].addr
                os.kill(old, signal.SIGKILL)
    # close() committed the rest: the commits in flight and those after were retried (same
    # request ids) against the tracker the master started again
    assert committed == 201
    t = poll_for(
        lambda: file_trackers(c)[1].pid != old and file_trackers(c)[1], timeout=30, what="the restarted file tracker"
    )
    assert t.alive and t.restarts == 1 and t.addr == addr  # on its port again
    check_file(ft, name, blobs)
    # and the restarted tracker takes new commits at once
    with c.open(name) as f:
        f.put("after", b"restart")
    with c.open(name) as f:
        assert len(f) == 601


def test_quotas_hold_across_two_files_on_two_file_trackers(make_cluster, tmp_path):
    users = tmp_path / "users.toml"
    key = add_user(users, "alice", ["physics"], quota_bytes=1_000_000)
    cluster = make_cluster(3, users_file=users, file_trackers=2)
    c = cluster.client(api_key=key)
    fa = c.create(on_shard(1, "/q/a")[0], "x2")
    fb = c.create(on_shard(2, "/q/b")[0], "x2")
    assert fa.info.file_tracker and fb.info.file_tracker and fa.info.file_tracker != fb.info.file_tracker
    for i in range(3):
        fa.put(f"r{i}", b"a" * 100_000)  # 600,000 bytes with both copies
    fa.flush()
    fb.put("r0", b"b" * 100_000)  # 200,000 more on the other tracker: 800,000
    fb.flush()
    fb.put("r1", b"b" * 150_000)  # 300,000 more would be 1,100,000
    with pytest.raises(QuotaExceededError, match="1,000,000-byte quota"):
        fb.flush()
    # a record deleted through one file's tracker frees quota for the other's
    fa.delete("r0")
    fb.put("r2", b"b" * 150_000)
    fb.flush()
    with pytest.raises(QuotaExceededError):
        fa.put("r3", b"a" * 60_000)
        fa.flush()
    fa.close()
    fb.close()
    # the master's count is exact: 400,000 + 200,000 + 300,000 = 900,000 used, 100,000 left
    with c.create(on_shard(1, "/q/c")[0], "x2") as g:
        g.put("fits", b"c" * 50_000)
    with pytest.raises(QuotaExceededError):
        with c.create(on_shard(2, "/q/d")[0], "x1") as g:
            g.put("does-not", b"d" * 1_000)


def test_what_a_killed_file_tracker_held_is_settled_from_the_infofile(make_cluster, tmp_path):
    users = tmp_path / "users.toml"
    key = add_user(users, "alice", ["physics"], quota_bytes=2_000_000)
    cluster = make_cluster(3, users_file=users, file_trackers=2)
    c = cluster.client(api_key=key)
    name = on_shard(1, "/q/kill")[0]
    with c.create(name, "x2") as f:
        for i in range(300):
            f.queue_put(f"r{i:04d}", b"k" * 1000)
            if i == 120:  # commits in flight: admitted by the master, applied or not when it dies
                old = file_trackers(c)[1].pid
                os.kill(old, signal.SIGKILL)
    poll_for(lambda: file_trackers(c)[1].pid != old, timeout=30, what="the restarted file tracker")
    with c.open(name) as f:
        assert len(f) == 300  # the commits cut by the kill were retried: nothing lost
    # 300 records x 1,000 bytes x 2 copies = 600,000 charged once, whatever the kill cut:
    # the rest of the quota, 1,400,000, fits exactly, and not a byte more
    with c.create(on_shard(2, "/q/rest")[0], "x1") as g:
        g.put("rest", b"r" * 1_400_000)
    with pytest.raises(QuotaExceededError):
        with c.create(on_shard(0, "/q/over")[0], "x1") as h:
            h.put("over", b"o")


def test_a_commit_cut_by_a_killed_file_tracker_is_given_back_and_its_retry_charged_once(make_cluster, tmp_path):
    users = tmp_path / "users.toml"
    key = add_user(users, "alice", ["physics"], quota_bytes=10_000_000)
    cluster = make_cluster(3, users_file=users, file_trackers=2)
    c = cluster.client(api_key=key)
    name = on_shard(1, "/q/cut")[0]
    c.create(name, "x2").close()
    info = c.tracker.open(name)
    records = [
        pb.RecordCommit(name=f"r{i:06d}", size=20, crc32c=i, peer_idx=[0, 1]) for i in range(150_000)
    ]  # 6,000,000 bytes with both copies, in one long transaction
    journal = cluster.namespace / (name.lstrip("/") + "-journal")
    outcome: dict = {}

    def commit():
        try:
            outcome["reply"] = c.tracker.at(info.file_tracker).commit(name, info.file_id, records, request_id="cut-1")
        except Exception as e:
            outcome["error"] = e

    th = threading.Thread(target=commit)
    th.start()
    poll_for(journal.exists, timeout=60, interval=0.002, what="the commit's transaction to start")
    old = file_trackers(c)[1].pid  # admitted by the master, not settled: SIGKILL it now
    os.kill(old, signal.SIGKILL)
    th.join(60)
    assert isinstance(outcome.get("error"), TrackerUnavailableError), outcome
    poll_for(
        lambda: file_trackers(c)[1].pid != old and file_trackers(c)[1].alive,
        timeout=30,
        what="the restarted file tracker",
    )
    log = (cluster.data_dir / "logs" / "tracker.log").read_text()
    assert "file tracker 1 died holding 1 admitted commits" in log
    # The client retries its request (the same id) against the restarted tracker: applied once.
    reply = c.tracker.at(file_trackers(c)[1].addr).commit(name, info.file_id, records, request_id="cut-1")
    with c.open(name) as f:
        assert len(f) == 150_000 and reply.committed in (0, 150_000)
    # and charged once: 4,000,000 bytes of the quota are left, exactly
    with c.create(on_shard(2, "/q/cut-rest")[0], "x1") as g:
        g.put("rest", b"r" * 4_000_000)
    with pytest.raises(QuotaExceededError):
        with c.create(on_shard(0, "/q/cut-over")[0], "x1") as h:
            h.put("over", b"o")


def test_chmod_through_the_master_reaches_the_file_trackers_permission_checks(make_cluster, tmp_path):
    users = tmp_path / "users.toml"
    keys = {u: add_user(users, u, ["physics"]) for u in ("alice", "bob")}
    cluster = make_cluster(3, users_file=users, file_trackers=2)
    alice, bob = (cluster.client(api_key=keys[u]) for u in ("alice", "bob"))
    name = on_shard(2, "/alice/shared")[0]
    with alice.create(name, "x2", mode=0o664) as f:
        f.put("a", b"alice")
    g = bob.open(name)  # in alice's group: rw-
    assert g.info.file_tracker and g.info.capability_ops & cap.WRITE
    g.put("b", b"bob")
    g.flush()
    alice.chmod(name, 0o644)  # through the master, which has the file's tracker write the new mode
    g.put("c", b"bob again")  # bob's WRITE capability from his open still lets the peers take it ...
    with pytest.raises(PermissionDeniedError, match=f"bob may not write {name}"):
        g.flush()  # ... but the file's tracker refuses the commit
    alice.chmod(name, 0o664)
    g.put("d", b"bob, allowed again")
    g.flush()
    alice.chmod("/alice", 0o700)  # a directory's mode is the master's: the admission checks it
    g.put("e", b"bob, locked out")
    with pytest.raises(PermissionDeniedError, match="search directory /alice"):
        g.flush()
    g.close()
    with alice.open(name) as f:
        assert sorted(f.record_meta(n) is not None for n in "abcde") == [False, False, True, True, True]


def test_leases_live_on_the_files_tracker_and_survive_its_restart(ft):
    c = ft.client()
    name = on_shard(2, "/ft/lease")[0]
    with c.create(name, "x2") as f:
        f.put("doc", b"v0")
    a, b = c.open(name), ft.client().open(name)
    try:
        a.acquire_lease(ttl=60)  # renewed after 20 s: not during this test
        a.put("doc", b"v1 by a", replace=True)
        a.flush()
        with pytest.raises(LeaseHeldError):
            b.put("doc", b"by b", replace=True)
        # The lease is in the file's tracker's metadata log (log-<shard>.db): a
        # restart of that tracker keeps it, and a's acknowledged version commits.
        kill_file_tracker(ft, c, 2)
        a.queue_put("doc", b"v2 by a", replace=True).result()
        a.flush()
        with pytest.raises(LeaseHeldError):
            b.put("doc", b"v2 by b", replace=True)
        assert b.get("doc") == b"v2 by a"
        a.release_lease()
        b.put("doc", b"v3 by b", replace=True)  # the lease is free: b takes it
        b.flush()
        assert a.get("doc") == b"v3 by b"
    finally:
        b.close()
        a.close()


def test_the_masters_own_writes_go_through_the_files_tracker(make_cluster):
    cluster = make_cluster(4, file_trackers=2)
    name = on_shard(1, "/ft/own")[0]
    c, blobs = fill(cluster, name, 120)
    assert c.open(name).info.file_tracker
    # rebalance: the master grows the peerlist through the file's tracker, and forwards the moves
    lost = cluster.kill_peer(0)
    poll_for(lambda: c.status().alive_peers == 3, what="the tracker to see the peer fail")
    report = rebalance_file(c, name, lost=[lost])
    assert report.complete and report.copies_moved == report.records_affected > 0, report
    check_file(cluster, name, blobs)
    # a delete only while empty: the file's tracker finds its records and refuses, nothing goes
    with pytest.raises(FileNotEmptyError):
        c.delete(name, if_empty=True)
    check_file(cluster, name, blobs)
    # whole-file delete: the file's tracker closes and unlinks it, so the name made again works
    assert c.delete(name) == 120
    with c.create(name, "x2") as f:
        f.put("again", b"new file")
    with cluster.client().open(name) as f:
        assert len(f) == 1 and f.get("again") == b"new file"
        f.delete("again")
    assert c.delete(name, if_empty=True) == 0  # its last record deleted: it goes
    assert c.files("/ft") == []


def test_a_quarantined_copy_of_a_file_trackers_file_is_recorded_and_repair_restores_it(make_cluster):
    from st_py.core.infofile import InfofileReader
    from st_py.maintenance import repair as rp

    cluster = make_cluster(3, file_trackers=2, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    c = cluster.client()
    name = on_shard(2, "/ft/rot")[0]
    with c.create(name, "x2") as f:
        for i in range(20):
            f.put(f"r{i}", b"%d" % i * 1000)
    with c.open(name) as f:
        (victim,) = [r for r in f.get_local() if r.name == "r7"]
    with open(victim.path, "r+b") as fh:  # bit rot
        b = fh.read(1)
        fh.seek(0)
        fh.write(bytes([b[0] ^ 0xFF]))

    def quarantined() -> int:
        r = InfofileReader(cluster.namespace / name.lstrip("/"))
        try:
            return r.count_quarantined()
        finally:
            r.close()

    # the peer reports it to the master with an announce; the file's tracker records the copy quarantined
    poll_for(lambda: quarantined() == 1, timeout=30, what="the quarantined copy to be recorded")
    (report,) = rp.repair(c, [name], failed_after=600)
    assert report.quarantined_found == 1, report.as_dict()
    assert report.pending_stored == 1 and report.complete, report.as_dict()  # StoreCopies, forwarded
    assert quarantined() == 0
    with c.open(name) as f:
        assert f.get("r7") == b"7" * 1000


def test_a_master_killed_takes_its_file_trackers_with_it_and_a_new_one_starts_its_own(ft):
    c = ft.client()
    name = on_shard(1, "/ft/master")[0]
    with c.create(name, "x2") as f:
        f.put("before", b"1")
    old = {s: t.pid for s, t in file_trackers(c).items()}
    ft.restart_tracker()  # SIGKILL the master, start it again on its port
    for pid in old.values():  # its per-file trackers died with it (setpriv --pdeathsig)
        poll_for(lambda pid=pid: gone(pid), timeout=10, what=f"per-file tracker {pid} to die with its master")
    c2 = ft.client()
    new = file_trackers(c2)
    assert sorted(new) == [1, 2] and all(t.alive and t.pid not in old.values() for t in new.values())
    with c2.open(name) as f:
        assert f.info.file_tracker == new[1].addr
        f.put("after", b"2")
    with c2.open(name) as f:
        assert len(f) == 2


@pytest.mark.parametrize("mode", ["tls", "mutual_tls"])
def test_file_trackers_serve_over_the_masters_tls(make_cluster, mode):
    cluster = make_cluster(3, file_trackers=2, **{mode: True})
    c = cluster.client()
    name = on_shard(2, f"/ft/{mode}")[0]
    with c.create(name, "x2") as f:  # the client's certificate (mutual TLS) names the user on both trackers
        assert f.info.file_tracker
        for i in range(50):
            f.queue_put(f"r{i}", b"%d" % i)
        f.put("doc", b"v1", replace=True)  # the lease, on the file's tracker
    c.chmod(name, 0o600)  # master -> file tracker, over TLS too
    with cluster.client().open(name) as f:
        assert len(f) == 51 and f.get("doc") == b"v1" and f.info.mode == 0o600


def test_a_client_whose_file_tracker_moved_reopens_through_the_master(ft):
    from st_py.client.file import StFile

    c = ft.client()
    trackers = file_trackers(c)
    name = on_shard(1, "/ft/moved")[0]
    with c.create(name, "x2") as f:
        f.put("a", b"1")
    # A tracker that does not take the file's writes says so, and names the master to ask.
    info = c.tracker.open(name)
    with pytest.raises(TrackerMovedError) as e:
        c.tracker.at(trackers[2].addr).commit(
            name, info.file_id, [pb.RecordCommit(name="x", size=1, crc32c=0, peer_idx=[0, 1])]
        )
    assert e.value.tracker == ft.tracker_addr
    # A handle sent to the wrong tracker re-opens the file through the master and carries on.
    info.file_tracker = trackers[2].addr
    with StFile(c.tracker, info) as g:
        for i in range(60):
            g.queue_put(f"r{i}", b"%d" % i)
        g.flush()
        assert g.info.file_tracker == trackers[1].addr
        g.put("doc", b"v1", replace=True)
    # The master restarted with another number of per-file trackers: files move; an open handle follows.
    with c.open(name) as g:
        g.put("before", b"x")
        ft.file_trackers = 1
        ft.restart_tracker()  # its old per-file trackers die with it
        for i in range(60):
            g.queue_put(f"s{i}", b"%d" % i)
        g.flush()
        assert g.info.file_tracker == (file_trackers(c)[1].addr if shard_of(name, 2) else "")
    with ft.client().open(name) as g:
        assert len(g) == 1 + 60 + 1 + 1 + 60 and g.get("doc") == b"v1"
