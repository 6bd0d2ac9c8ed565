"""Asymmetric striping (FreeLoader, seed 004 section 4.1; docs/striping.md):
the stripes of an object written to a ``local-first`` file (or from a handle
with ``prefer_peer``) have copy rank 0 on the writer's own peer and their
other copies round-robin over the other peers. The placement as a pure
function, then against real trackers and peers: the local peer found by
address on a cluster whose peers each have their own host, the object read
back whole and in ranges, then again after that peer is killed."""

import os
from collections import Counter

import pytest

import st_py.client.file
from st_py.client.file import StFile
from st_py.core.infofile import InfofileReader, stripe_name
from st_py.core.placement import fit_local_share, is_local_stripe, stripe_holders
from st_py.errors import BadNameError

MiB = 1 << 20


# -- the placement, pure ---------------------------------------------------------------


def test_round_robin_without_a_local_peer_is_unchanged():
    ring = [3, 0, 2, 1]
    # rank 0 of stripe i on ring[i % width], the other ranks on the peers after it
    assert [stripe_holders(i, 2, ring, 4) for i in range(5)] == [[3, 0], [0, 2], [2, 1], [1, 3], [3, 0]]
    assert [stripe_holders(i, 2, ring, 2)[0] for i in range(4)] == [3, 0, 3, 0]
    with pytest.raises(ValueError, match="3 copies need 3 peers, 2 given"):
        stripe_holders(0, 3, [0, 1], 2)


def test_asymmetric_striping_puts_rank_0_of_every_stripe_on_the_local_peer():
    ring = [4, 1, 3, 0]  # every peer but the writer's (2)
    h = [stripe_holders(i, 3, ring, len(ring), local=2) for i in range(400)]
    assert all(ps[0] == 2 and len(set(ps)) == 3 and 2 not in ps[1:] for ps in h)
    others = Counter(p for ps in h for p in ps[1:])
    assert set(others) == set(ring) and max(others.values()) - min(others.values()) <= 2  # round-robin
    # a narrower width: the remote copies start on its first peers only
    assert {stripe_holders(i, 2, ring, 2, local=2)[1] for i in range(10)} == {4, 1}
    # x1 on one peer: every stripe there
    assert stripe_holders(5, 1, [], 0, local=7) == [7]


def test_a_local_share_spreads_the_local_stripes_evenly():
    share = 3 / 11  # FreeLoader's 3:8 (seed 004 section 5.1): 3 local morsels per 8 remote
    local = [i for i in range(110) if is_local_stripe(i, share)]
    assert len(local) == 30
    assert all(len([i for i in local if c * 11 <= i < (c + 1) * 11]) == 3 for c in range(10))  # per cycle
    assert all(is_local_stripe(i, 1.0) for i in range(50)) and not any(is_local_stripe(i, 0.0) for i in range(50))
    ring = [0, 1, 3]
    for i in range(110):
        ps = stripe_holders(i, 2, ring, 3, local=2, local_share=share)
        assert len(set(ps)) == 2
        assert (ps[0] == 2) == (i in local) and (2 not in ps or ps[0] == 2)
    # fewer other peers than copies: a remote stripe's last rank on the local peer
    assert stripe_holders(0, 3, [0, 1], 2, local=2, local_share=0.0) == [0, 1, 2]


def test_the_local_share_fits_the_local_peers_free_space():
    assert fit_local_share(1.0, 100 * MiB, 1 << 40) == 1.0
    assert fit_local_share(1.0, 100 * MiB, 50 * MiB) == pytest.approx(0.45)  # keeps a tenth free
    assert fit_local_share(0.3, 100 * MiB, 50 * MiB) == 0.3
    assert fit_local_share(1.0, 100 * MiB, 0) == 0.0  # a full peer takes none
    assert fit_local_share(1.0, None, 10) == 1.0  # size not known in advance (a stream)
    assert fit_local_share(1.0, 100 * MiB, None) == 1.0  # space not announced yet


# -- real processes ---------------------------------------------------------------------


def stripe_holders_of(cluster, path: str, obj: str, stripes: int) -> dict[int, tuple[int, ...]]:
    """{stripe index: holders' peer_idx by copy rank} from the infofile."""
    r = InfofileReader(cluster.namespace / path.strip("/"))
    try:
        metas = r.lookup_many([stripe_name(obj, i) for i in range(stripes)])
        return {i: metas[stripe_name(obj, i)].peers for i in range(stripes)}
    finally:
        r.close()


def test_local_first_object_has_rank_0_on_the_writers_node_and_survives_its_loss(hosts_cluster, monkeypatch):
    cluster = hosts_cluster
    here = cluster.peer_host(2)  # this writer runs on the host of peer 2 (127.0.0.4)
    monkeypatch.setattr(st_py.client.file, "local_addresses", lambda: {here})
    data = os.urandom(10 * MiB + 12345)
    c = cluster.client()
    with c.create("/obj/local", "x2", placement="local-first") as f:
        meta = f.put_object("big.bin", data, stripe_size=MiB)
        peer_of = {p.peer_idx: p.addr for p in f.info.peers}
        local_idx = next(i for i, a in peer_of.items() if a.rsplit(":", 1)[0] == here)
    assert meta.stripes == 11
    h = stripe_holders_of(cluster, "/obj/local", "big.bin", meta.stripes)
    assert all(ps[0] == local_idx for ps in h.values()), h  # copy rank 0 of every stripe here
    rank1 = Counter(ps[1] for ps in h.values())
    assert local_idx not in rank1 and len(rank1) == 3, rank1  # the other copies over the other 3 peers
    with c.open("/obj/local") as f:
        assert f.get("big.bin") == data
        # GET_LOCAL's copy-rank precedence: this host's peer reveals the whole object
        revealed = f.get_local(peer=peer_of[local_idx], stripes=True)
        assert sorted(r.name for r in revealed) == [stripe_name("big.bin", i) for i in range(11)]
    # the writer's node goes away: every stripe still has its rank-1 copy
    cluster.kill_peer(2)
    with cluster.client() as c2, c2.open("/obj/local") as f:
        assert f.get("big.bin") == data
        r = f.open("big.bin")
        r.seek(3 * MiB + 7)
        assert r.read(2 * MiB) == data[3 * MiB + 7 : 5 * MiB + 7]
        assert {s.index for s in f.local_stripes()} == set(range(11))  # each stripe once from the others
    c.close()


def test_prefer_peer_takes_rank_0_of_the_stripes_of_a_random_file(cluster):
    c = cluster.client()
    c.create("/obj/pref", "x2").close()
    want = cluster.peer_addrs[1]
    data = os.urandom(6 * MiB)
    with StFile(c.tracker, c.tracker.open("/obj/pref"), prefer_peer=want) as f:
        f.put_object("o", data, stripe_size=MiB)
        idx = {p.addr: p.peer_idx for p in f.info.peers}[want]
    h = stripe_holders_of(cluster, "/obj/pref", "o", 6)
    assert all(ps[0] == idx and idx not in ps[1:] for ps in h.values()), h
    with c.open("/obj/pref") as f:
        assert f.get("o") == data
    # without prefer_peer a random file stripes round-robin over every peer, as before
    with c.open("/obj/pref") as f:
        f.put_object("p", data, stripe_size=MiB)
    assert len({ps[0] for ps in stripe_holders_of(cluster, "/obj/pref", "p", 6).values()}) == 4
    c.close()


def test_a_local_share_and_its_bounds(hosts_cluster, monkeypatch):
    cluster = hosts_cluster
    here = cluster.peer_host(0)
    monkeypatch.setattr(st_py.client.file, "local_addresses", lambda: {here})
    c = cluster.client()
    data = os.urandom(22 * 64 * 1024)
    with c.create("/obj/share", "x2", placement="local-first") as f:
        with pytest.raises(BadNameError, match="local_share"):
            f.put_object("o", data, local_share=1.5)
        meta = f.put_object("o", data, stripe_size=64 * 1024, local_share=3 / 11)
        local_idx = next(p.peer_idx for p in f.info.peers if p.addr.rsplit(":", 1)[0] == here)
    h = stripe_holders_of(cluster, "/obj/share", "o", meta.stripes)
    assert sorted(i for i, ps in h.items() if ps[0] == local_idx) == [3, 7, 10, 14, 18, 21]  # 3 in 11
    assert all(local_idx not in ps[1:] for ps in h.values())
    with c.open("/obj/share") as f:
        assert f.get("o") == data
    c.close()
