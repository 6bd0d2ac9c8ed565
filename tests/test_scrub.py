"""The peer's scrubber (paper 3.1, 4.3) against real processes: records a
crashed writer never committed, and records of deleted files, are removed;
nothing committed ever is."""

from checks import admin_scrub, stored


def test_scrub_removes_uncommitted_and_deleted_keeps_committed(make_cluster):
    cluster = make_cluster(4, peer_args=["--scrub-age", "0"])
    c = cluster.client(group_size=1000)
    keep = c.create("/scrub/keep", replication="x2")
    for i in range(30):
        keep.queue_put(f"ok/{i}", b"committed" * 10)
    keep.close()
    # a writer whose copies were acknowledged but that died before committing
    crashed = c.create("/scrub/crashed", replication="x2")
    for i in range(20):
        crashed.queue_put(f"lost/{i}", b"never committed").result()
    crashed._transport.close()  # no flush: the commit never happens
    # a file deleted while one of its peers was away: its copies stay behind
    gone = c.create("/scrub/gone", replication="x1", blocksize=1)
    for i in range(10):
        gone.queue_put(f"g/{i}", b"orphan")
    gone.close()
    c.tracker.delete("/scrub/gone", gone.file_id, whole_file=True)  # infofile only, copies left
    assert stored(cluster) == 60 + 40 + 10
    totals = {}
    for addr in cluster.peer_addrs:
        for k, v in admin_scrub(cluster, addr).items():
            totals[k] = totals.get(k, 0) + v
    assert totals["removed_uncommitted"] == 40
    assert totals["removed_deleted_files"] == 10
    assert stored(cluster) == 60
    with c.open("/scrub/keep") as f:
        assert len(f) == 30 and all(f.get(f"ok/{i}") == b"committed" * 10 for i in range(30))
        plan = f.get_local_plan()
        from st_py.client.getlocal import reveal

        assert sorted(r.name for a in plan.ring for r in reveal(a, plan)) == sorted(f"ok/{i}" for i in range(30))


def test_young_uncommitted_records_survive_a_scrub(cluster):
    c = cluster.client(group_size=1000)
    f = c.create("/scrub/young", replication="x1")
    for i in range(5):
        f.queue_put(f"inflight/{i}", b"x").result()
    res = [admin_scrub(cluster, a) for a in cluster.peer_addrs]  # default --scrub-age is an hour
    assert sum(r["removed_uncommitted"] for r in res) == 0
    f.close()  # the commit arrives after the scrub: nothing was lost
    with c.open("/scrub/young") as f:
        assert all(f.get(f"inflight/{i}") == b"x" for i in range(5))
