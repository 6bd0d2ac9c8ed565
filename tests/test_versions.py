"""Versioned records under a writer lease (MORRIS 3.2; docs/replication.md,
"Versioned records") against real trackers and peers: put(replace=True)
makes a new version current in one commit; readers see the old or the new
version whole; GET_LOCAL reveals the version of its plan's generation; one
writer at a time, and a dead writer's lease runs out."""

import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from checks import admin_scrub, check_exactly_once, reveal_all
from helpers import metric_value, scrape_metrics

from st_py.client.getlocal import reveal
from st_py.errors import BadNameError, LeaseHeldError, LeaseLostError, RecordExistsError, RecordNotFoundError
from st_py.maintenance.rebalance import rebalance_file


def _versions(cluster, name: str) -> dict:
    db = sqlite3.connect(f"file:{cluster.namespace / name.lstrip('/')}?mode=ro", uri=True)
    try:
        return {n: (v, s) for n, v, s in db.execute("SELECT name, version, stored_as FROM records")}
    finally:
        db.close()


def test_replace_makes_a_new_version_current_and_write_once_stays_the_default(cluster):
    c = cluster.client()
    with c.create("/v/basic", "x2") as f:
        for i in range(20):
            f.put(f"r{i}", b"first %d" % i)
    with c.open("/v/basic") as f:
        with pytest.raises(RecordExistsError):
            f.put("r1", b"not without replace")
        f.put("r1", b"second", replace=True)
        f.put("fresh", b"a new name, replace=True", replace=True)
        f.flush()
        assert f.get("r1") == b"second" and f.get("fresh") == b"a new name, replace=True"
        f.put("r1", b"third", replace=True)
        with pytest.raises(BadNameError, match="versions"):
            f.put(".st-version/x/r1", b"reserved")
    with c.open("/v/basic") as f:
        assert f.get("r1") == b"third"
        assert f.names() == sorted(["fresh"] + [f"r{i}" for i in range(20)])  # no version names
        assert f.get("r2") == b"first 2"
        assert f.lease is None  # released at close
    v = _versions(cluster, "/v/basic")
    assert v["r1"][0] == 2 and v["r1"][1].startswith(".st-version/")
    assert v["fresh"][0] == 0 and v["r2"] == (0, None)
    meta = (
        sqlite3.connect(cluster.namespace / "v/basic")
        .execute("SELECT value FROM meta WHERE key = 'format_version'")
        .fetchone()[0]
    )
    assert int(meta) == 3  # peers that do not know versions refuse it


def test_get_local_reveals_the_version_of_its_plans_generation(cluster):
    c = cluster.client()
    old = {f"r{i}": b"old %d" % i * 30 for i in range(120)}
    with c.create("/v/gl", "x2") as f:
        for n, b in old.items():
            f.queue_put(n, b)
    with c.open("/v/gl") as f:
        plan = f.get_local_plan()
        new = dict(old)
        for i in range(0, 120, 3):
            new[f"r{i}"] = b"new %d" % i * 40
            f.queue_put(f"r{i}", new[f"r{i}"], replace=True)
        f.flush()
    # The old plan still reveals the old versions, each exactly once ...
    recs = [r for a in plan.ring for r in reveal(a, plan)]
    check_exactly_once(recs, old)
    # ... a new one the new versions, also after a peer is killed (rank 1 stands in).
    cluster.kill_peer(1)
    with c.open("/v/gl") as f:
        plan2, recs2 = reveal_all(f)
        assert plan2.generation > plan.generation
        check_exactly_once(recs2, new)
        assert all(f.get(n) == b for n, b in new.items())


def test_readers_see_the_old_or_the_new_version_whole(cluster):
    c = cluster.client()
    versions = [bytes([65 + k]) * (1000 + 997 * k) for k in range(12)]  # each one its own size and byte
    with c.create("/v/race", "x3") as f:
        f.put("hot", versions[0])
    seen, bad, stop = [], [], threading.Event()

    def read():
        with cluster.client().open("/v/race") as r:
            while not stop.is_set():
                b = r.get("hot")
                (seen if b in versions else bad).append(b[:8])

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        with c.open("/v/race") as w:
            for v in versions[1:]:
                w.put("hot", v, replace=True)
                w.flush()  # committed: the next reads may see it
                time.sleep(0.05)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not bad and len({s[:1] for s in seen}) > 1  # never a mix; more than one version was read
    with c.open("/v/race") as f:
        assert f.get("hot") == versions[-1]


WRITER = """
import sys
from st_py.client.client import Client
f = Client(sys.argv[1]).open("/v/lease")
f.acquire_lease(ttl=2.0)
f.queue_put("doc", b"from the writer that dies", replace=True).result()  # acknowledged, not committed
print("ready", flush=True)
sys.stdin.read()
"""


def test_one_writer_at_a_time_and_a_dead_writers_lease_runs_out(cluster, tmp_path):
    c = cluster.client()
    with c.create("/v/lease", "x2") as f:
        f.put("doc", b"version 0")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    w = subprocess.Popen(
        [sys.executable, str(script), cluster.tracker_addr], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert w.stdout.readline().strip() == b"ready"
        with c.open("/v/lease") as f:
            with pytest.raises(LeaseHeldError) as e:
                f.put("doc", b"second writer", replace=True)
            assert e.value.holder.endswith(f":{w.pid}") and 0 < e.value.expires_in <= 2.0
            assert metric_value(scrape_metrics(cluster.tracker.metrics_addr), "st_tracker_writer_leases") == 1
            assert f.get("doc") == b"version 0"
            f.put("other", b"write-once puts need no lease")
            w.kill()  # SIGKILL while holding the lease: it runs out within its TTL
            w.wait()
            t0 = time.monotonic()
            f.acquire_lease(wait=10.0)
            assert time.monotonic() - t0 < 3.0
            f.put("doc", b"second writer", replace=True)
        with c.open("/v/lease") as f:
            assert f.get("doc") == b"second writer"  # the dead writer's version never shows
            assert _versions(cluster, "/v/lease")["doc"][0] == 1
    finally:
        w.kill()
        w.wait()
        w.stdout.close()
        w.stdin.close()


def test_a_writer_whose_lease_ran_out_cannot_commit_over_the_next_one(cluster):
    c = cluster.client()
    with c.create("/v/stale", "x2") as f:
        f.put("doc", b"v0")
    a, b = c.open("/v/stale"), cluster.client().open("/v/stale")
    try:
        a.acquire_lease(ttl=0.5)
        a.queue_put("doc", b"from a, too late", replace=True).result()  # acknowledged, commit waits for its group
        time.sleep(1.0)  # a pauses (GC, a stopped VM) past its TTL and does not renew
        b.put("doc", b"from b", replace=True)
        b.flush()
        with pytest.raises(LeaseLostError):
            a.flush()
        assert a.get("doc") == b"from b"
    finally:
        b.close()
        try:
            a.close()
        except LeaseLostError:
            pass


def test_a_lost_lease_is_raised_by_flush_and_close_naming_every_record_never_by_an_unrelated_call(cluster):
    """Issue 39: when a writer's lease really ran out, the commit of its
    group fails; that error, naming every record of the group, is raised by
    close() (the call whose contract is to report queued operations), not by
    an unrelated delete() after which close() returned normally."""
    c = cluster.client()
    with c.create("/v/lost", "x2") as f:
        f.put("doc", b"v0")
        f.put("base1", b"b1")
    a, b = c.open("/v/lost"), cluster.client().open("/v/lost")
    try:
        a.acquire_lease(ttl=0.5)
        a.queue_put("a1", b"a1").result()  # acknowledged; its group carries the lease
        a.queue_put("doc", b"from a", replace=True).result()
        time.sleep(1.0)  # a pauses past its TTL and does not renew
        b.put("doc", b"from b", replace=True)
        b.flush()
        a.delete("base1")  # unrelated: done, and raises nothing of the puts
        assert "base1" not in b.names()
        with pytest.raises(LeaseLostError) as e:
            a.close()
        assert set(e.value.records) == {"a1", "doc"} and "'a1'" in str(e.value)
        assert sorted(b.names()) == ["doc"] and b.get("doc") == b"from b"
    finally:
        b.close()
        try:
            a.close()
        except LeaseLostError:
            pass


def test_a_tracker_restart_keeps_the_writer_lease_and_every_acknowledged_record(cluster):
    """Issue 39: a writer holding the lease (it replaced a record) puts a1,
    acknowledged; the tracker restarts (SIGKILL, started again). The lease is
    kept on the tracker's disk, so the group with a1 and the replacement
    commits, and so does everything after it; nothing is reported lost. It
    used to fail the next commit with lease-lost and drop the whole group."""
    c = cluster.client()
    with c.create("/v/restart", "x2") as f:
        f.put("doc", b"v0")
        f.put("base1", b"b1")
    with c.open("/v/restart") as f:
        f.put("doc", b"v1", replace=True)  # takes the lease
        f.flush()
        f.queue_put("a1", b"a1").result()  # acknowledged by the peers, commit waiting
        f.queue_put("doc", b"v2", replace=True).result()
        cluster.tracker.kill()
        cluster.start_tracker()
        f.delete("base1")  # an unrelated call: nothing to report
        f.queue_put("a2", b"a2")
        f.put("doc", b"v3", replace=True)
    with c.open("/v/restart") as f:
        assert sorted(f.names()) == ["a1", "a2", "doc"]
        assert (f.get("a1"), f.get("a2"), f.get("doc")) == (b"a1", b"a2", b"v3")


def test_a_lease_kept_across_a_restart_still_runs_out_when_its_writer_is_gone(cluster, tmp_path):
    """The restarted tracker gives a kept lease one TTL more, not forever:
    a writer SIGKILLed with the lease does not block the next one long."""
    c = cluster.client()
    with c.create("/v/lease", "x2") as f:
        f.put("doc", b"version 0")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)  # holds the lease (TTL 2 s) until killed
    w = subprocess.Popen(
        [sys.executable, str(script), cluster.tracker_addr], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert w.stdout.readline().strip() == b"ready"
        w.kill()
        w.wait()
        cluster.tracker.kill()
        cluster.start_tracker()
        with cluster.client().open("/v/lease") as f:
            with pytest.raises(LeaseHeldError):
                f.acquire_lease()  # kept across the restart
            t0 = time.monotonic()
            f.acquire_lease(wait=10.0)
            assert time.monotonic() - t0 < 5.0
            f.put("doc", b"from the next writer", replace=True)
            f.flush()
            assert f.get("doc") == b"from the next writer"
    finally:
        w.kill()
        w.wait()
        w.stdout.close()
        w.stdin.close()


def test_rebalance_and_scrub_keep_the_current_version(make_cluster):
    cluster = make_cluster(4, peer_args=["--scrub-age", "2"], tracker_args=["--history-age", "2"])
    c = cluster.client()
    blobs = {f"r{i}": b"v0 %d" % i for i in range(60)}
    with c.create("/v/heal", "x2") as f:
        for n, b in blobs.items():
            f.queue_put(n, b)
    with c.open("/v/heal") as f:
        for i in range(0, 60, 2):
            blobs[f"r{i}"] = b"v1 %d" % i * 3
            f.queue_put(f"r{i}", blobs[f"r{i}"], replace=True)
    lost = cluster.kill_peer(0)
    assert rebalance_file(c, "/v/heal", lost=[lost]).complete
    # Superseded versions stay while readers may be at an older generation
    # (the tracker keeps their history --history-age; docs/snapshots.md), then
    # the tracker drops it at its next write and the scrubber removes them;
    # current versions stay.
    kept = [admin_scrub(cluster, a) for a in cluster.peer_addrs if a != lost]
    assert sum(k["removed_uncommitted"] for k in kept) == 0
    time.sleep(2.5)
    with c.open("/v/heal") as f:
        f.put("later", b"a write after --history-age")
    blobs["later"] = b"a write after --history-age"
    time.sleep(2.5)  # and the dropped copies' own --scrub-age (the scrubber keeps young files)
    removed = sum(admin_scrub(cluster, a)["removed_uncommitted"] for a in cluster.peer_addrs if a != lost)
    assert removed > 0  # the version-0 copies of the replaced records on the live peers
    with c.open("/v/heal") as f:
        assert {n: f.get(n) for n in blobs} == blobs
        plan, recs = reveal_all(f)
        check_exactly_once(recs, blobs)


def test_deleting_a_replaced_record_deletes_every_version(make_cluster):
    """Found by the stateful model test: the older version of a replaced
    record stays on its holders for GET_LOCAL plans of older generations.
    Deleting the record keeps every version for readers of older
    generations (docs/snapshots.md) until the tracker drops that history
    (--history-age) and the peers' scrubbers remove the copies; a second
    delete is refused at once (nothing is left to find), and the name can be
    put again meanwhile (under a name of its own on the peers, never over
    the older copies)."""
    cluster = make_cluster(4, peer_args=["--scrub-age", "0"], tracker_args=["--history-age", "0.5"])
    c = cluster.client()

    def held():
        return [p for p in cluster.data_dir.glob("peers/*/files/**/*") if p.is_file() and "c.csv" in p.name]

    with c.create("/v/del", "x2") as f:
        f.put("c.csv", b"first")
    with c.open("/v/del") as f:
        f.put("c.csv", b"second", replace=True)
    with c.open("/v/del") as f:
        gen = f.generation
        f.delete("c.csv")
    assert len(held()) == 4  # both versions, two copies each, kept for older readers
    with c.open("/v/del", as_of=gen) as f:
        assert f.get("c.csv") == b"second"
    with c.open("/v/del") as f:
        assert f.names() == []
        with pytest.raises(RecordNotFoundError):
            f.delete("c.csv")
        f.put("c.csv", b"third")  # stored under a name of its own: the older copies stay
    with c.open("/v/del") as f:
        assert f.get("c.csv") == b"third"
    with c.open("/v/del") as f:
        f.delete("c.csv")
    time.sleep(1.0)
    with c.open("/v/del") as f:
        f.put("other", b"a write after --history-age: the tracker drops the history")
    for addr in cluster.peer_addrs:
        admin_scrub(cluster, addr)
    assert held() == []  # no version of it on any peer
