"""The peer's scrubber (paper 3.1, 4.3) against real processes: records a
crashed writer never committed, and records of deleted files, are removed;
nothing committed ever is."""

from checks import admin_scrub, leave_scrub_work, scrub_everywhere, stored


def test_scrub_removes_uncommitted_and_deleted_keeps_committed(make_cluster):
    cluster = make_cluster(4, peer_args=["--scrub-age", "0"])
    c = cluster.client(group_size=1000)
    leave_scrub_work(c, "/scrub")
    assert stored(cluster) == 60 + 40 + 10
    totals = scrub_everywhere(cluster)
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
