"""The tracker: liveness from announces, restarts, scheduling (paper 3.3, 5)."""

import signal
import sqlite3
from contextlib import closing

import pytest
from conftest import poll_for

from st_py.client import group_commit
from st_py.core.infofile import InfofileReader
from st_py.errors import NotEnoughPeersError


def test_tracker_restart_keeps_every_committed_record(cluster):
    c = cluster.client()
    blobs = {f"r{i}": bytes([i % 256]) * (i + 1) for i in range(200)}
    with c.create("/tr/restart", replication="x2") as f:
        for k, v in blobs.items():
            f.queue_put(k, v)
    cluster.restart_tracker()  # SIGKILL, then start on the same port and state
    c2 = cluster.client()
    with c2.open("/tr/restart") as f:
        assert len(f) == 200
        for k, v in blobs.items():
            assert f.get(k) == v
    # and writes go on after the restart
    poll_for(lambda: c2.status().alive_peers == 4, what="peers to re-announce")
    with c2.create("/tr/after", replication="x2") as f:
        f.put("x", b"y")
    with c2.open("/tr/after") as f:
        assert f.get("x") == b"y"


def test_peer_missing_announces_is_failed_and_left_out(cluster):
    c = cluster.client()
    dead = cluster.kill_peer(0)
    st = poll_for(
        lambda: (s := c.status()).failed_peers == 1 and s, timeout=10, what="the tracker to mark the killed peer failed"
    )
    assert [p.addr for p in st.peers if not p.alive] == [dead]
    f = c.create("/tr/new", replication="x2")
    assert dead not in [p.addr for p in f.info.peers]
    f.close()


def test_new_peer_usable_after_first_announce(cluster):
    c = cluster.client()
    cluster.start_peer(4)
    poll_for(lambda: c.status().alive_peers == 5, what="the new peer's first announce")
    f = c.create("/tr/grown", replication="x2")
    assert len(f.info.peers) == 5
    f.close()


def test_not_enough_peers_is_a_clear_error(make_cluster):
    cl = make_cluster(1)
    with pytest.raises(NotEnoughPeersError, match="x2 needs 2 live peers"):
        cl.client().create("/tr/x2", replication="x2")


def test_infofile_records_commit_in_groups(cluster, monkeypatch):
    # groups of group_size, each at once: the rule of a writer with no recent commit (a stream's
    # groups linger instead, tests/test_group_commit.py)
    monkeypatch.setattr(group_commit, "LINGER_S", 0.0)
    c = cluster.client(group_size=10)
    f = c.create("/tr/groups", replication="x1")
    with closing(f), closing(InfofileReader(cluster.namespace / "tr" / "groups")) as r:
        for i in range(25):
            f.put(f"r{i}", b"x")
        # two groups of 10 are committed (asynchronously); the last 5 wait for a full group or close().
        # The tracker may merge the two commits into one transaction (one generation) when the second
        # arrives while the first is being written (seen in CI), so 1 or 2 generations.
        poll_for(lambda: r.count() == 20, what="two group commits")
        f.poll(0.2)
        gen = r.generation()
        assert r.count() == 20 and gen in (1, 2)
        f.close()
        assert r.count() == 25 and r.generation() == gen + 1


def test_group_commit_grows_while_commits_are_in_flight(cluster, monkeypatch):
    """Adaptive group commit (st_py/client/group_commit.py): with two commits
    outstanding (the tracker is stopped), acknowledged records keep waiting
    and then go to the tracker in one larger group, not in many queued ones."""
    monkeypatch.setattr(group_commit, "LINGER_S", 0.0)  # the second commit at group_size too (no linger)
    c = cluster.client(group_size=10, depth=16)
    f = c.create("/tr/adaptive", replication="x1")
    sizes = []
    commit_async = f._tracker.commit_async

    def counted(name, file_id, records, lease_id="", request_id="", **kw):  # the real RPC, counted
        cols = kw.get("columns")  # plain records travel as columns (issue 41)
        sizes.append(len(records) + (len(cols.names) if cols is not None else 0))
        return commit_async(name, file_id, records, lease_id, request_id, **kw)

    f._tracker.commit_async = counted
    cluster.tracker.proc.send_signal(signal.SIGSTOP)
    try:
        for p in [f.queue_put(f"r{i:03d}", b"x" * 10) for i in range(200)]:
            p.result()  # every copy acknowledged by the peers
        assert len(sizes) == 2 and all(n >= 10 for n in sizes)  # at least a group each
    finally:
        cluster.tracker.proc.send_signal(signal.SIGCONT)
    f.close()
    # the two outstanding groups: each what was acknowledged when it left, at most the depth plus the
    # slice whose acknowledgements came in the same turn (queue_put slices of depth/2: [24, 16, 160] once)
    assert len(sizes) == 3 and sum(sizes) == 200 and sizes[2] >= 200 - 2 * (16 + 16 // 2)
    with closing(InfofileReader(cluster.namespace / "tr" / "adaptive")) as r:
        assert r.count() == 200


CRASH_MID_COMMIT = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA cache_size=1")  # spill to the database file before the commit
conn.execute("BEGIN IMMEDIATE")
conn.executemany("INSERT INTO records(name, size, crc32c, commit_seq, committed_at) "
                 "VALUES (?, 1, 0, 99, 0)", [(f"half/{i}",) for i in range(5000)])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_tracker_start_rolls_back_a_transaction_cut_by_a_crash(tmp_path):
    # A tracker SIGKILLed mid-commit leaves a hot journal; read-only readers
    # (clients, peers) cannot roll it back (the client's reader works around
    # it: tests/test_infofile_schema.py). The next tracker start rolls it back.
    import subprocess
    import sys

    from st_py.core.infofile import InfofileReader
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile, recover

    path = tmp_path / "ns" / "f"
    create_infofile(path, {"file_id": 1, "copies": 1}, [(0, "p", "h:1")])
    w = InfofileWriter(path)
    w.commit([("kept", 1, 0, [0])])
    w.close()
    proc = subprocess.run([sys.executable, "-c", CRASH_MID_COMMIT, str(path)])
    assert proc.returncode == -9
    assert (tmp_path / "ns" / "f-journal").exists()
    (tmp_path / "ns" / ".st-creating-g-1-2").write_bytes(b"")
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro.execute("SELECT name FROM records").fetchall()
    ro.close()
    assert recover(tmp_path / "ns") == (1, 1)
    with closing(InfofileReader(path)) as r:
        assert r.names() == ["kept"]
    assert not (tmp_path / "ns" / ".st-creating-g-1-2").exists()


def test_tracker_reads_its_options_from_a_config_file(tmp_path, peer_bin):
    # A real cluster gives the tracker its key (and users, TLS) by path in a
    # config file (docs/deployment.md).
    import subprocess
    import sys
    import time

    from st_py.client.client import Client
    from st_py.core.capability import READ, load_key, new_key_file, verify
    from st_py.deploy.cluster import Daemon

    key = new_key_file(tmp_path / "secret.key")
    conf = tmp_path / "tracker.toml"
    conf.write_text(f'root = "{tmp_path / "ns"}"\nkey_file = "{key}"\ncapability_ttl = 120\n')
    d = Daemon("tracker", [sys.executable, "-m", "st_py.tracker", "--config", str(conf)], tmp_path / "t.log")
    peer = None
    try:
        peer = Daemon(
            "peer",
            [
                peer_bin,
                "--data",
                str(tmp_path / "p"),
                "--port",
                "0",
                "--tracker",
                d.addr,
                "--key-file",
                str(key),
                "--announce-interval",
                "0.2",
            ],
            tmp_path / "p.log",
        )
        with Client(d.addr) as c:
            poll_for(lambda: c.status().alive_peers == 1, what="the peer's announce")
            with c.create("/conf/f", replication="x1") as f:
                info = f.info
        cap = verify(load_key(key), info.capability)
        assert cap.allows(READ) and 100 < cap.expires - time.time() <= 120
    finally:
        if peer is not None:
            peer.stop()
        d.stop()
    bad = tmp_path / "bad.toml"
    bad.write_text('root = "/tmp/x"\nno_such_option = 1\n')
    r = subprocess.run([sys.executable, "-m", "st_py.tracker", "--config", str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "no_such_option" in r.stderr


def test_a_group_commit_merging_two_clients_keeps_the_first_version(tmp_path):
    # The committer merges every waiting request into one transaction: a
    # crashed writer's last commit and its retry can meet there (paper 3.5).
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1}, [(0, "p", "h:1"), (1, "q", "h:2")])
    w = InfofileWriter(path)
    gen, new, conflicts = w.commit([("a", 5, 111, [0]), ("b", 1, 1, [0]), ("a", 5, 111, [1]), ("b", 2, 2, [1])])
    assert new == {"a", "b"}
    assert [(c.name, "other content" in c.reason) for c in conflicts] == [("b", True)]
    with closing(InfofileReader(path)) as r:
        assert r.lookup("b").crc32c == 1  # the first version won
    w.close()


def test_a_merged_commit_tells_each_request_its_own_outcome(tmp_path):
    """Commit requests merged into one transaction that send one new name
    with other bytes (two writers of one name at once, as two S3 PUTs of a
    key race for its stripe 0): the first request's record is committed
    and counted as its, and only the other hears of the conflict. Told by
    name, both did, and the writer whose record was committed took it for
    refused (its striped object then failed, the stripe left committed
    under no object, and every later PUT of the key was refused). The same
    bytes again: no conflict, counted once; a name committed before: a
    conflict to every request with other bytes only."""
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1}, [(0, "p", "h:1")])
    w = InfofileWriter(path)
    _, new, per, _ = w.commit_requests(
        [
            ("A", [("x", 5, 1, [0]), ("a", 1, 1, [0])]),
            ("B", [("x", 5, 2, [0]), ("b", 1, 1, [0])]),
            ("C", [("x", 5, 1, [0])]),
        ]
    )
    assert new == {"x", "a", "b"}
    (mine_a, hit_a), (mine_b, hit_b), (mine_c, hit_c) = per
    assert mine_a == {"x", "a"} and hit_a == []
    assert mine_b == {"b"} and [(c.name, "other content" in c.reason) for c in hit_b] == [("x", True)]
    assert mine_c == set() and hit_c == []  # the committed bytes again: no conflict, not counted twice
    with closing(InfofileReader(path)) as r:
        assert r.lookup("x").crc32c == 1  # the first request's
    _, new, per, _ = w.commit_requests([("D", [("x", 5, 3, [0])]), ("E", [("x", 5, 1, [0])])])
    assert new == set()
    assert [c.name for c in per[0][1]] == ["x"] and per[1] == (set(), [])
    w.close()


def test_a_retried_commit_never_brings_back_a_record_deleted_meanwhile(cluster):
    # A commit applied by the tracker whose reply was lost (the tracker was
    # killed, paper 5) is retried by the client with the same request id. A
    # record deleted between the two must stay deleted: found by the
    # randomized fault injection (a DELETE ran between a commit and its retry,
    # and the retry committed the record again without its copies).
    from st_py._proto import tracker_pb2 as pb

    c = cluster.client()
    with c.create("/t/retry", "x1") as f:
        f.put("kept", b"k")
        name, file_id, t = f.name, f.file_id, f._tracker
    rec = [
        pb.RecordCommit(name="r", size=1, crc32c=7, peer_idx=[0]),
        pb.RecordCommit(name="kept2", size=1, crc32c=8, peer_idx=[1]),
    ]
    assert t.commit(name, file_id, rec, request_id="req-1").committed == 2
    t.delete(name, file_id, records=["r"])
    again = t.commit(name, file_id, rec, request_id="req-1")  # the retry: applied before, not again
    # it answers with the records of the request the file holds as sent ("kept2"; "r" was deleted
    # since): what a job's commit_staged reports, never a record committed again
    assert again.committed == 1 and not again.conflicts
    with c.open("/t/retry") as f:
        assert f.names() == ["kept", "kept2"]
    # A new request (a new PUT of the name) commits it again, as it should.
    assert t.commit(name, file_id, rec[:1], request_id="req-2").committed == 1
    with c.open("/t/retry") as f:
        assert f.names() == ["kept", "kept2", "r"]


def test_commit_request_ids_are_applied_once_in_a_merged_transaction(tmp_path):
    from st_py.tracker.infofile_writer import COMMIT_REQUEST_TTL_S, InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1}, [(0, "p", "h:1")])
    w = InfofileWriter(path)
    gen, new, _, done = w.commit_requests([("A", [("a", 1, 1, [0])]), ("B", [("b", 1, 1, [0])])])
    assert new == {"a", "b"} and done == set()
    w.delete_records(["a"])
    gen2, new2, _, done2 = w.commit_requests([("A", [("a", 1, 1, [0])]), ("C", [("c", 1, 1, [0])])])
    assert new2 == {"c"} and done2 == {"A"} and gen2 > gen
    # ids are forgotten after COMMIT_REQUEST_TTL_S
    w.conn.execute("UPDATE commit_requests SET at = at - ?", (COMMIT_REQUEST_TTL_S + 1,))
    w.commit_requests([("D", [])])
    assert [r for (r,) in w.conn.execute("SELECT request_id FROM commit_requests ORDER BY 1")] == ["D"]
    w.close()


def test_the_writers_kept_stats_match_a_count_after_every_kind_of_change(tmp_path):
    """``InfofileWriter.stats`` (what a quota check per commit reads) is
    carried along by plain group commits and counted again after anything
    else: it equals a full count after commits with duplicates, conflicts
    and retried request ids, stripes, objects, versions, deletes, an
    overwrite and a rolled-back transaction."""
    from st_py.core.infofile import name_stats, stripe_name
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1}, [(0, "p", "h:1"), (1, "q", "h:2")])
    w = InfofileWriter(path)
    seen = []

    def check():
        got = w.stats()
        want = name_stats(w.conn)
        seen.append(want)
        assert got == want

    check()
    w.commit([("a", 5, 1, [0]), ("b", 7, 2, [0]), ("a", 5, 1, [1]), ("b", 9, 3, [1])])  # a repeat, a conflict
    check()
    w.commit_requests([("r1", [("c", 11, 4, [0])]), ("r1", [("c", 11, 4, [0])]), ("", [("d", 13, 5, [1])])])
    w.commit_requests([("r1", [("c", 11, 4, [0])])])  # a retry applied before
    check()
    w.commit([(stripe_name("obj", 0), 100, 6, [0]), (stripe_name("obj", 1), 50, 7, [1])])  # stripes: bytes only
    check()
    w.commit_objects([("obj", 150, 100, 2, 8)])
    check()
    w.commit([("a", 17, 9, [1], (), "a@v1")])  # a new version of a
    check()
    w.delete_records(["b", "nope"])
    check()
    w.commit_replacing([("e", 19, 10, [0])], ["c", "obj"])
    check()
    with pytest.raises(sqlite3.Error):  # a holder SQLite cannot bind, after the records went in: rolled back
        w.commit([("f", 1, 1, [0]), ("f2", 1, 1, [[1]])])
    check()
    w.commit([("g", 23, 11, [1])])
    check()
    w.close()
    assert seen[0] == (0, 0) and seen[-1] == (4, 17 + 13 + 19 + 23)  # a (its new version), d, e, g
    assert len(set(seen)) > 6  # the changes did change it


def test_sigusr1_writes_the_trackers_stacks_to_its_log_and_it_goes_on(cluster):
    """``kill -USR1`` (docs/operations.md, "Logs"): every thread's stack in
    the tracker's log, the event loop's among them; it answers after."""
    import signal

    log = cluster.data_dir / "logs" / "tracker.log"
    cluster.tracker.proc.send_signal(signal.SIGUSR1)
    poll_for(lambda: "Current thread" in log.read_text(errors="replace"), what="the stacks in the tracker's log")
    text = log.read_text(errors="replace")
    assert "st_py/tracker/server.py" in text or "asyncio" in text, text[-2000:]
    assert cluster.client().status().alive_peers >= 1
