"""Placement policies per file (docs/replication.md, "Placement policies"):
rendezvous hashing as pure functions, then where real writes put their copies
under each policy, and GET of a hash-placed file without its infofile."""

import os
import random
from collections import Counter

import pytest
from conftest import poll_for

from st_py.client.file import StFile
from st_py.core.infofile import InfofileReader
from st_py.core.placement import (
    choose_holders,
    hash_holders,
    hash_ranking,
    hash_spare,
    local_first_holders,
    pick_local_peer,
)
from st_py.errors import RecordNotFoundError
from st_py.maintenance.rebalance import rebalance_file

PEERS = {i: f"{random.Random(i).getrandbits(64):016x}" for i in range(8)}  # peer ids as peers make them
NAMES = [f"rec-{i:05d}" for i in range(10_000)]


# -- rendezvous hashing -------------------------------------------------------------


def test_hash_holders_are_stable_and_depend_on_peer_ids_not_indexes():
    a = [hash_holders(7, n, PEERS, 2) for n in NAMES[:500]]
    assert a == [hash_holders(7, n, dict(reversed(PEERS.items())), 2) for n in NAMES[:500]]
    # the same peers under other indexes (another peerlist order): the same peer ids hold each record
    relabel = {i: PEERS[(i + 3) % 8] for i in PEERS}
    back = {v: k for k, v in relabel.items()}
    for n, holders in zip(NAMES[:500], a):
        assert [PEERS[i] for i in holders] == [relabel[i] for i in hash_holders(7, n, relabel, 2)]
        assert len(set(holders)) == 2
        assert [back[PEERS[i]] for i in holders] == hash_holders(7, n, relabel, 2)
    # another file id places the same names elsewhere
    other = [hash_holders(8, n, PEERS, 2) for n in NAMES[:500]]
    assert sum(x != y for x, y in zip(a, other)) > 400


def test_hash_placement_is_balanced_over_10k_names():
    copies = Counter()
    rank0 = Counter()
    for n in NAMES:
        h = hash_holders(1234, n, PEERS, 2)
        copies.update(h)
        rank0[h[0]] += 1
    # 20,000 copies over 8 peers: 2,500 each; a binomial's standard deviation is 43
    assert all(abs(c - 2500) <= 250 for c in copies.values()), copies
    assert all(abs(c - 1250) <= 190 for c in rank0.values()), rank0
    assert len(copies) == 8


def test_adding_a_peer_moves_about_one_copy_in_n():
    grown = dict(PEERS)
    grown[8] = "a-new-peer"
    moved = 0
    for n in NAMES:
        # the new peer takes its place in each record's ranking; the old peers keep their order
        assert [i for i in hash_ranking(99, n, grown) if i != 8] == hash_ranking(99, n, PEERS)
        before, after = hash_holders(99, n, PEERS, 2), hash_holders(99, n, grown, 2)
        kept = [i for i in after if i != 8]
        assert kept == before[: len(kept)]  # a copy moves only to the new peer
        moved += len(set(after) - set(before))
    frac = moved / (2 * len(NAMES))  # copies that moved, of all copies
    assert 1 / 9 * 0.85 <= frac <= 1 / 9 * 1.15, frac


def test_an_unusable_peer_is_skipped_and_only_its_records_change():
    for n in NAMES[:2000]:
        full = hash_ranking(5, n, PEERS)
        without3 = hash_holders(5, n, PEERS, 3, usable=set(PEERS) - {3})
        assert without3 == [i for i in full if i != 3][:3]
        if 3 not in full[:3]:
            assert without3 == full[:3]
    with pytest.raises(ValueError, match="3 copies need 3 usable peers, 2 given"):
        hash_holders(5, "x", PEERS, 3, usable={0, 1})
    # a spare for a lost copy: the first usable non-holder in the ranking
    full = hash_ranking(5, "x", PEERS)
    assert hash_spare(5, "x", PEERS, set(PEERS) - {full[2]}, full[:2]) == full[3]
    assert hash_spare(5, "x", PEERS, set(full[:2]), full[:2]) is None


def test_local_first_puts_rank_0_on_the_writers_node():
    addrs = {0: "10.0.0.1:7001", 1: "10.0.0.2:7001", 2: "10.0.0.2:7002", 3: "10.0.0.3:7001"}
    rng = random.Random(1)
    # an explicit peer wins when usable
    assert pick_local_peer(addrs, [0, 1, 2, 3], {"10.0.0.2"}, prefer="10.0.0.3:7001") == 3
    assert pick_local_peer(addrs, [0, 1, 2], {"10.0.0.2"}, prefer="10.0.0.3:7001", rng=rng) in (1, 2)
    # else one of the peers on a local address
    assert {pick_local_peer(addrs, [0, 1, 2, 3], {"10.0.0.2"}, rng=rng) for _ in range(50)} == {1, 2}
    assert pick_local_peer(addrs, [0, 3], {"10.0.0.2"}) is None
    for _ in range(100):
        h = local_first_holders([0, 1, 2, 3], 3, 2, rng)
        assert h[0] == 2 and len(set(h)) == 3
    # no local peer: plain random placement
    assert sorted(local_first_holders([0, 1], 2, None, rng)) == [0, 1]
    assert sorted(choose_holders([0, 1], 2, rng)) == [0, 1]


# -- real writes ----------------------------------------------------------------


def holders_of(cluster, name):
    r = InfofileReader(cluster.namespace / name.strip("/"))
    try:
        return {n: m.peers for n, m in r.lookup_many(r.names()).items()}
    finally:
        r.close()


def test_random_placement_keeps_blocks_together(cluster):
    c = cluster.client()
    with c.create("/pl/random", replication="x2", blocksize=8, placement="random") as f:
        assert f.info.placement == "random"
        for i in range(64):
            f.put(f"r{i:02d}", b"x" * 10)
    h = holders_of(cluster, "/pl/random")
    blocks = [{h[f"r{i:02d}"] for i in range(b, b + 8)} for b in range(0, 64, 8)]
    assert all(len(b) == 1 for b in blocks)  # one block, one pair of holders
    assert len({p for b in blocks for hs in b for p in hs}) > 2


def test_hash_placement_puts_every_record_on_its_predicted_holders(cluster):
    c = cluster.client()
    with c.create("/pl/hash", replication="x2", blocksize=16, placement="hash") as f:
        for i in range(300):
            f.queue_put(f"r{i:03d}", os.urandom(50))
        ids = {p.peer_idx: p.peer_id for p in f.info.peers}
        fid = f.file_id
    h = holders_of(cluster, "/pl/hash")
    assert len(h) == 300
    for name, peers in h.items():
        assert list(peers) == hash_holders(fid, name, ids, 2), name  # per record: blocksize does not apply
    assert Counter(p for ps in h.values() for p in ps).most_common()[-1][1] > 100  # all 4 peers used


def test_hash_placement_skips_a_dead_peer(cluster):
    c = cluster.client()
    c.create("/pl/hash-dead", replication="x2", placement="hash").close()
    dead = cluster.kill_peer(1)
    poll_for(lambda: c.status().failed_peers == 1, what="the killed peer to be failed")
    with c.open("/pl/hash-dead") as f:
        ids = {p.peer_idx: p.peer_id for p in f.info.peers}
        dead_idx = {p.addr: p.peer_idx for p in f.info.peers}[dead]
        for i in range(100):
            f.queue_put(f"r{i:03d}", b"y" * 20)
        fid = f.file_id
    h = holders_of(cluster, "/pl/hash-dead")
    for name, peers in h.items():
        assert list(peers) == hash_holders(fid, name, ids, 2, usable=set(ids) - {dead_idx})
    # the records the dead peer would have held went one place down their ranking
    assert sum(dead_idx in hash_holders(fid, n, ids, 2) for n in h) > 20


def test_get_of_a_hash_placed_file_works_without_its_infofile(cluster):
    c = cluster.client()
    blobs = {f"r{i:03d}": os.urandom(100 + i) for i in range(120)}
    with c.create("/pl/noinfo", replication="x2", placement="hash") as f:
        for k, v in blobs.items():
            f.queue_put(k, v)
    path = cluster.namespace / "pl" / "noinfo"
    away = path.with_name(".st-away")  # as if the namespace were not mounted
    f = c.open("/pl/noinfo")  # the tracker gives the peerlist; the infofile is read at the first GET
    os.rename(path, away)
    try:
        with f:
            for k, v in blobs.items():
                assert f.get(k) == v
            with pytest.raises(RecordNotFoundError, match="on any of its 4 peers"):
                f.get("never-written")
            # a dead holder: the next peer in the record's rendezvous order has the other copy
            cluster.kill_peer(0)
            got = {}
            for k in blobs:
                f.queue_get(k, lambda n, d, e: got.__setitem__(n, (d, e)))
            f.flush()
            assert {k: d for k, (d, e) in got.items()} == blobs
            assert f._reader is None  # really read without the infofile
    finally:
        os.rename(away, path)


def test_get_of_a_random_placed_file_without_its_infofile_raises(cluster):
    c = cluster.client()
    with c.create("/pl/rand", replication="x1") as f:
        f.put("a", b"b")
    path = cluster.namespace / "pl" / "rand"
    f = c.open("/pl/rand")
    os.rename(path, path.with_name(".st-away"))
    try:
        with pytest.raises(FileNotFoundError):  # nowhere else to look: the infofile's error
            f.get("a")
    finally:
        os.rename(path.with_name(".st-away"), path)
        f.close()


def test_rebalance_of_a_hash_file_restores_its_hash_holders(cluster):
    c = cluster.client()
    with c.create("/pl/hash-reb", replication="x2", placement="hash") as f:
        for i in range(100):
            f.queue_put(f"r{i:03d}", bytes([i]) * 40)
        ids = {p.peer_idx: p.peer_id for p in f.info.peers}
        fid = f.file_id
    lost = cluster.kill_peer(2)
    lost_idx = {p.addr: p.peer_idx for p in c.tracker.open("/pl/hash-reb").peers}[lost]
    report = rebalance_file(c, "/pl/hash-reb", lost=[lost])
    assert report.complete and report.copies_moved > 20
    for name, peers in holders_of(cluster, "/pl/hash-reb").items():
        # each lost copy went to the next peer of the record's ranking: the holders a writer would pick now
        assert set(peers) == set(hash_holders(fid, name, ids, 2, usable=set(ids) - {lost_idx})), name


def test_local_first_with_prefer_peer_puts_rank_0_there(cluster):
    c = cluster.client()
    c.create("/pl/local", replication="x3", placement="local-first").close()
    want = cluster.peer_addrs[2]
    f = StFile(c.tracker, c.tracker.open("/pl/local"), blocksize=4, prefer_peer=want)
    with f:
        for i in range(80):
            f.queue_put(f"r{i:02d}", b"z" * 30)
        idx = {p.addr: p.peer_idx for p in f.info.peers}[want]
    h = holders_of(cluster, "/pl/local")
    assert len(h) == 80 and all(ps[0] == idx for ps in h.values())
    others = Counter(p for ps in h.values() for p in ps[1:])
    assert idx not in others and len(others) == 3  # the other copies elsewhere, spread


def test_local_first_picks_one_local_peer_per_writer(cluster):
    c = cluster.client()
    rank0 = []
    with c.create("/pl/local2", replication="x2", placement="local-first", blocksize=2) as f:
        for i in range(60):
            f.queue_put(f"a{i:02d}", b"z")
    for ps in holders_of(cluster, "/pl/local2").values():
        rank0.append(ps[0])
    # every peer is on 127.0.0.1, this host: one of them takes rank 0 of everything this writer puts
    assert len(set(rank0)) == 1
    h = holders_of(cluster, "/pl/local2")
    assert len({ps[1] for ps in h.values()}) == 3  # rank 1 at random among the other three
