"""Failure domains (docs/replication.md, "Failure domains"): peers declare
``--domain site/rack/host`` (default: their host); every placement policy
and striped objects put a record's copies in distinct domains when the
domains allow, and say so when they do not; a whole domain SIGKILLed loses
no x2 record; rebalance, repair and drain keep the rule. Real processes,
then the pure parts (placement functions, the scheduler, the registry)."""

import logging
import os
import random
from collections import Counter

import pytest
from conftest import poll_for

from st_py.core.infofile import STRIPE_PREFIX, InfofileReader
from st_py.core.placement import (
    choose_holders,
    choose_spare,
    domain_count,
    hash_holders,
    hash_spare,
    local_first_holders,
    normalize_domain,
    peer_domain,
    shares_domain,
    spread_level,
    stripe_holders,
)
from st_py.maintenance.drain import drain
from st_py.maintenance.rebalance import rebalance_file
from st_py.maintenance.repair import repair_file
from st_py.tracker.peers import PeerInfo, PeerRegistry
from st_py.tracker.scheduler import SchedulingError, domain_shares, schedule
from st_py.tracker.state import TrackerState

POLICIES = ("random", "hash", "local-first")
# two sites, four racks, six hosts
SITES = ["s1/r1/h1", "s1/r1/h2", "s1/r2/h3", "s2/r3/h4", "s2/r3/h5", "s2/r4/h6"]


def copies_by_record(cluster, name):
    """``{record: [peer address per copy rank]}`` from the infofile (striped
    objects' stripes too) and ``{address: domain}`` of the tracker."""
    r = InfofileReader(cluster.namespace / name.lstrip("/"))
    try:
        addr = dict(r.conn.execute("SELECT peer_idx, addr FROM peers"))
        names = [n for (n,) in r.conn.execute("SELECT name FROM records")]
        return {n: [addr[i] for i in m.peers] for n, m in r.lookup_many(names).items()}
    finally:
        r.close()


def domains_of(client):
    return {p.addr: p.domain for p in client.status().peers}


def assert_apart(held, dom, level=None):
    """Every record's copies on distinct domains (and, with ``level``, on
    distinct path prefixes of that many components)."""
    assert held
    for n, addrs in held.items():
        ds = [dom[a] for a in addrs]
        assert len(set(ds)) == len(ds), (n, ds)
        if level is not None:
            assert len({tuple(d.split("/")[:level]) for d in ds}) == len(ds), (n, ds)


def test_every_policy_and_striped_objects_keep_copies_apart(make_cluster, caplog):
    cluster = make_cluster(6, domains=SITES)
    c = cluster.client()
    dom = domains_of(c)
    assert sorted(dom.values()) == SITES  # as declared, shown by Status
    caplog.set_level(logging.INFO, logger="storetorrent.client")
    for policy in POLICIES:
        for replication, level in (("x2", 1), ("x3", 2)):  # x2: distinct sites; x3: distinct racks
            name = f"/dom/{policy}-{replication}"
            with c.create(name, replication=replication, placement=policy, blocksize=4) as f:
                assert f.domains and len(set(f.domains.values())) == 6
                for i in range(120):
                    f.queue_put(f"r{i:03d}", os.urandom(64))
                f.flush()
                f.put_object("big", os.urandom(40_000), stripe_size=1000)  # 40 stripes
                assert f.domain_shortfall.records == 0, f.domain_shortfall
            held = copies_by_record(cluster, name)
            assert sum(n.startswith(STRIPE_PREFIX) for n in held) == 40
            assert_apart(held, dom, level)
            if replication == "x3":  # and both sites hold a copy of every record
                assert all(len({dom[a].split("/")[0] for a in addrs}) == 2 for addrs in held.values())
            used = Counter(a for addrs in held.values() for a in addrs)
            if policy == "local-first":  # rank 0 on the writer's peer, the others apart from its site
                assert len({addrs[0] for addrs in held.values()}) == 1 and len(used) >= 4, used
            else:  # every peer takes copies (the rule does not pile records on a few)
                assert len(used) == 6, (policy, used)
    assert "share failure domain" not in caplog.text


def test_a_whole_domain_sigkilled_loses_no_x2_record(make_cluster):
    cluster = make_cluster(4, domains=["rackA", "rackA", "rackB", "rackB"])
    c = cluster.client()
    blobs = {f"k{i:04d}": os.urandom(100 + i % 50) for i in range(400)}
    for policy in POLICIES:
        with c.create(f"/kill/{policy}", replication="x2", placement=policy, blocksize=2) as f:
            for k, v in blobs.items():
                f.queue_put(k, v)
        held = copies_by_record(cluster, f"/kill/{policy}")
        assert_apart(held, domains_of(c))
    # rack A loses power: both of its peers at once
    for i in (0, 1):
        cluster.kill_peer(i)
    poll_for(lambda: c.status().alive_peers == 2, what="the tracker to see rack A fail")
    for policy in POLICIES:
        with c.open(f"/kill/{policy}") as f:
            got = {k: f.queue_get(k) for k in blobs}
            assert {k: p.result() for k, p in got.items()} == blobs, policy


def test_rebalance_repair_and_drain_keep_copies_apart(make_cluster):
    cluster = make_cluster(6, domains=["A/a1", "A/a2", "B/b1", "B/b2", "C/c1", "C/c2"])
    c = cluster.client()
    blobs = {f"k{i:04d}": os.urandom(80) for i in range(300)}
    for name, policy in (("/rb/random", "random"), ("/rb/hash", "hash")):
        with c.create(name, replication="x2", placement=policy, blocksize=3) as f:
            for k, v in blobs.items():
                f.queue_put(k, v)
    dom = domains_of(c)

    # rebalance after losing a peer of domain A: the lost copies go apart
    # from the surviving copy's domain (its sibling a2 is often the only
    # peer that would not do)
    lost = cluster.kill_peer(0)
    poll_for(lambda: c.status().alive_peers == 5, what="the tracker to see the peer fail")
    rb = rebalance_file(c, "/rb/random", lost=[lost])
    assert rb.complete and rb.copies_moved > 0 and not rb.shared_domain, rb
    held = copies_by_record(cluster, "/rb/random")
    assert all(lost not in addrs for addrs in held.values())
    assert_apart(held, dom)

    # repair (the repair service's step 2: a peer failed long enough is lost)
    rep = repair_file(c, "/rb/hash", failed_after=0)
    assert rep.lost_peers == [lost] and rep.complete and rep.copies_restored > 0, rep
    assert not rep.shared_domain
    held = copies_by_record(cluster, "/rb/hash")
    assert all(lost not in addrs for addrs in held.values())
    assert_apart(held, dom)

    # drain a peer of domain B: its copies go to peers apart from each record's other copy
    drained = cluster.peers[2].addr
    report = drain(c, drained)
    assert report.complete, report
    for name in ("/rb/random", "/rb/hash"):
        held = copies_by_record(cluster, name)
        assert all(drained not in addrs for addrs in held.values())
        assert_apart(held, dom)
        with c.open(name) as f:
            assert all(f.get(k) == v for k, v in list(blobs.items())[::17])


def test_when_the_domains_do_not_allow_it_is_reported(make_cluster, caplog):
    # three peers in two domains: x3 must put two copies in one domain
    cluster = make_cluster(3, domains=["rackA", "rackA", "rackB"])
    c = cluster.client()
    caplog.set_level(logging.INFO, logger="storetorrent.client")
    with c.create("/short/x3", replication="x3") as f:
        for i in range(50):
            f.queue_put(f"r{i:02d}", b"x" * 10)
        f.flush()
        s = f.domain_shortfall
        assert s.records == 50 and s.first == "r00" and s.domain == "rackA"
        assert s.domains == 2 and s.copies == 3
    warnings = [r for r in caplog.records if "share failure domain" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING  # once per file handle
    assert "/short/x3" in warnings[0].getMessage() and "class x3 needs 3" in warnings[0].getMessage()
    held = copies_by_record(cluster, "/short/x3")
    for addrs in held.values():  # still three distinct peers, both domains used
        assert len(set(addrs)) == 3
    # x2 fits: nothing to report
    with c.create("/short/x2", replication="x2") as f:
        for i in range(50):
            f.queue_put(f"r{i:02d}", b"x" * 10)
        f.flush()
        assert f.domain_shortfall.records == 0
    assert_apart(copies_by_record(cluster, "/short/x2"), domains_of(c))


def test_default_domain_is_the_host_and_status_shows_it(make_cluster, caplog):
    # hosts=True: peer i on 127.0.0.<i+2>, no --domain: each its own domain
    cluster = make_cluster(3, hosts=True)
    c = cluster.client()
    st = c.status()
    assert sorted(p.domain for p in st.peers) == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    with c.create("/hosts/x3", replication="x3") as f:
        for i in range(30):
            f.queue_put(f"r{i:02d}", b"y" * 10)
        f.flush()
        assert f.domain_shortfall.records == 0
    assert_apart(copies_by_record(cluster, "/hosts/x3"), domains_of(c))
    # the status page and `storetorrent status` show them
    import json
    import urllib.request

    page = json.loads(urllib.request.urlopen(f"http://{cluster.tracker.metrics_addr}/status.json", timeout=10).read())
    assert sorted(p["domain"] for p in page["peers"]) == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert page["totals"]["failure_domains"] == 3
    html = urllib.request.urlopen(f"http://{cluster.tracker.metrics_addr}/", timeout=10).read().decode()
    assert "127.0.0.3</td>" in html and "failure domains" in html


def test_one_machine_cluster_is_counted_at_info_level(make_cluster, caplog):
    cluster = make_cluster(3)  # every peer on 127.0.0.1: one domain
    c = cluster.client()
    caplog.set_level(logging.INFO, logger="storetorrent.client")
    with c.create("/one/x2", replication="x2") as f:
        for i in range(10):
            f.queue_put(f"r{i}", b"z")
        f.flush()
        assert f.domain_shortfall.records == 10 and f.domain_shortfall.domains == 1
    notes = [r for r in caplog.records if "share failure domain" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO


# -- pure parts ----------------------------------------------------------------------

DOMS = {i: peer_domain(SITES[i], "") for i in range(6)}
IDS = {i: f"{random.Random(i).getrandbits(64):016x}" for i in range(6)}


def test_peer_domain_defaults_to_the_host():
    assert peer_domain("", "10.0.0.5:7100") == ("10.0.0.5",)
    assert peer_domain("", "[::1]:7100") == ("::1",)
    assert peer_domain("/dc1//rack2/", "h:1") == ("dc1", "rack2")
    assert normalize_domain("/dc1//rack2/") == "dc1/rack2" and normalize_domain("") == ""
    assert domain_count(range(6), DOMS) == 6 and domain_count(range(6), None) == 6


def test_placement_functions_spread_by_site_then_rack_then_host():
    rng = random.Random(3)
    for _ in range(500):
        h2 = choose_holders(list(range(6)), 2, rng, DOMS)
        assert spread_level(h2, DOMS) == 1  # distinct sites
        h3 = choose_holders(list(range(6)), 3, rng, DOMS)
        assert spread_level(h3, DOMS) == 2  # distinct racks (only 2 sites)
        h4 = local_first_holders(list(range(6)), 4, 0, rng, DOMS)
        assert h4[0] == 0 and spread_level(h4, DOMS) == 2  # four racks
        h6 = choose_holders(list(range(6)), 6, rng, DOMS)
        assert spread_level(h6, DOMS) == 3 and not shares_domain(h6, DOMS)
    for n in range(500):
        h = hash_holders(9, f"r{n}", IDS, 2, None, DOMS)
        assert spread_level(h, DOMS) == 1 and h == hash_holders(9, f"r{n}", IDS, 2, None, DOMS)
    ring = rng.sample(range(6), 6)
    for i in range(30):
        assert spread_level(stripe_holders(i, 2, ring, 6, domains=DOMS), DOMS) == 1
        assert spread_level(stripe_holders(i, 3, ring[1:], 5, ring[0], 0.5, DOMS), DOMS) == 2


def test_hash_placement_is_unchanged_when_no_domains_apart():
    one = {i: ("127.0.0.1",) for i in range(6)}
    for n in range(300):
        assert hash_holders(9, f"r{n}", IDS, 2, None, one) == hash_holders(9, f"r{n}", IDS, 2)


def test_spares_go_apart_from_the_copies_that_stay():
    # holders 0 (site s1) and 3 (s2); 3 fails: its replacement must be in s2 again
    for seed in range(50):
        assert choose_spare([1, 2, 4, 5], [0, 3], random.Random(seed), DOMS, apart_from=[0]) in (4, 5)
    s = hash_spare(9, "rec", IDS, [1, 2, 4, 5], [0, 3], DOMS, apart_from=[0])
    assert s in (4, 5)


def _peer(pid, domain, free):
    return PeerInfo(pid, f"10.0.0.{pid[-1]}:7100", capacity_bytes=free, free_bytes=free, domain=domain)


def test_scheduler_shares_follow_the_domains_and_prefer_a_spanning_peerlist():
    # rack A: 3 peers, rack B: 1 peer. x2 puts one copy of every record in B.
    peers = [_peer("p1", "A", 10_000), _peer("p2", "A", 10_000), _peer("p3", "A", 10_000), _peer("p4", "B", 10_000)]
    share = domain_shares(peers, 2, 3000)
    assert share == {"p1": 1000, "p2": 1000, "p3": 1000, "p4": 3000}
    assert {p.peer_id for p in schedule(peers, 2, 3000)} == {"p1", "p2", "p3", "p4"}
    # B's peer cannot hold a copy of every record: it is left out (a warning at create)
    assert {p.peer_id for p in schedule(peers, 2, 9000)} == {"p1", "p2", "p3"}
    # ... though its even share (9000 x 2 / 4 x 1.2 = 5400 bytes) would have fitted
    assert {p.peer_id for p in schedule([_peer(q.peer_id, "", 10_000) for q in peers], 2, 9000)} == {
        "p1",
        "p2",
        "p3",
        "p4",
    }
    # a tight peer of the big rack leaves; rack B's peer, with room for its share, stays
    peers[2] = _peer("p3", "A", 1_100)
    assert [p.peer_id for p in schedule(peers, 2, 3000)] == ["p1", "p2", "p4"]
    # one domain (or none declared, one host each): the even share, as before domains
    flat = [_peer(f"p{i}", "", 10_000) for i in range(1, 5)]
    assert set(domain_shares(flat, 2, 3000).values()) == {1500}
    with pytest.raises(SchedulingError):
        schedule(flat, 2, 100_000)


def test_the_registry_keeps_a_peers_domain_across_tracker_restarts(tmp_path):
    state = TrackerState(tmp_path)
    reg = PeerRegistry(state, 1.0, 3)
    reg.announce("p1", "10.0.0.1:7100", 100, 0, 100, 0, domain="dc1//rack3/")
    reg.announce("p2", "10.0.0.2:7100", 100, 0, 100, 0)
    assert reg.get("p1").domain == "dc1/rack3" and reg.get("p1").failure_domain == ("dc1", "rack3")
    assert reg.get("p2").failure_domain == ("10.0.0.2",)
    again = PeerRegistry(state, 1.0, 3)  # a restarted tracker, before any announce
    assert again.get("p1").failure_domain == ("dc1", "rack3")
    reg.announce("p1", "10.0.0.1:7100", 100, 0, 100, 0)  # it dropped --domain: its host again
    assert PeerRegistry(state, 1.0, 3).get("p1").failure_domain == ("10.0.0.1",)
    state.close()


# -- the data-loss tool and the Markov model with whole domains failing ----------------


def test_dataloss_exact_domain_loss_and_the_simulation_agree():
    from st_tools import dataloss as dl

    # aware x2: nothing lost until two racks are down, then C(g,2)/C(D,2)
    assert dl.exact_domain_loss(100, 10, 2, 1, True) == 0.0
    assert dl.exact_domain_loss(100, 10, 2, 3, True) == pytest.approx(3 / 45)
    # blind: the racks' peers are any failed set: C(10,2)/C(100,2) at the first rack
    assert dl.exact_domain_loss(100, 10, 2, 1, False) == pytest.approx(dl.exact_unavailable(100, 2, 10))
    # fewer racks than copies: every rack holds a copy
    assert dl.exact_domain_loss(12, 2, 3, 1, True) == 0.0 and dl.exact_domain_loss(12, 2, 3, 2, True) == 1.0
    # racks of unequal size (10 peers in 4 racks: 3, 3, 2, 2): the average over which racks fail
    sizes = [3, 3, 2, 2]
    import itertools
    import math

    want = sum(math.comb(sum(sizes[i] for i in c), 2) for c in itertools.combinations(range(4), 2)) / (
        math.comb(4, 2) * math.comb(10, 2)
    )
    assert dl.exact_domain_loss(10, 4, 2, 2, False) == pytest.approx(want)
    with pytest.raises(ValueError, match="D > N"):
        dl.exact_domain_loss(5, 6, 2, 1, True)

    res = dl.analyse_domains(peers=40, domains=8, records=4000, trials=6, seed=3, blocksize=4, classes=(2, 3))
    rows = {(r["copies"], r["failed_domains"]): r for r in res["rows"]}
    for f in (2, 3):
        for g in range(f):  # aware: not one record lost while fewer than F racks are down
            assert rows[f, g]["aware_mean"] == 0.0
        assert rows[f, f - 1]["blind_mean"] > 0  # blind: F-1 racks down already lose records
        for g in range(1, 9):
            for kind in ("aware", "blind"):
                r = rows[f, g]
                tol = 4 * max(r[f"{kind}_std"], 1e-3) / math.sqrt(6) + 0.01 * r[f"{kind}_exact"]
                assert abs(r[f"{kind}_mean"] - r[f"{kind}_exact"]) <= tol, (f, g, kind, r)


def test_dataloss_cli_with_domains(tmp_path, capsys):
    from st_tools import dataloss as dl

    png, js = tmp_path / "d.png", tmp_path / "d.json"
    assert (
        dl.main(
            [
                "--domains",
                "5",
                "--peers",
                "20",
                "--records",
                "500",
                "--trials",
                "3",
                "--seed",
                "2",
                "--classes",
                "2",
                "--plot",
                str(png),
                "--json",
                str(js),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "domain-aware vs blind" in out and "racks down" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import json

    res = json.loads(js.read_text())
    assert res["mode"] == "domains" and res["domains"] == 5 and len(res["rows"]) == 6
    assert dl.main(["--domains", "30", "--peers", "20"]) == 2
    assert "D > N" in capsys.readouterr().err


def test_markov_model_with_whole_racks_failing():
    from st_tools import reliability as rl

    lam, mu = 1 / (10 * rl.HOURS_PER_YEAR), 1 / 24
    aware = rl.mttdl_hours(100, 2, lam, mu, domains=10)
    blind = rl.mttdl_hours(100, 2, lam, mu, domains=10, aware=False)
    # blind: nearly every rack failure loses a record (6,250 blocks, C(10,2)/C(100,2) each)
    assert blind == pytest.approx(1 / (10 * lam), rel=0.01)
    # aware x2 is the textbook mirror over 10 racks: loss needs two racks down at once
    chain = rl.build_chain(100, 2, lam, mu, domains=10)
    assert chain.branch[0] == 0.0 and aware > 300 * blind
    # with a block on every pair of racks (B >> C(D,2)) the chain is the classic one:
    # 1/(D lam) (1 + mu/((D-1) lam)) + 1/((D-1) lam)
    d = 10
    classic = (1 / (d * lam)) * (1 + mu / ((d - 1) * lam)) + 1 / ((d - 1) * lam)
    assert aware == pytest.approx(classic, rel=1e-6)
    # the simulation with the real placement code agrees with the chain
    sim = rl.simulate(20, 2, 0.01, 0.2, 300, records=500, seed="dom", domains=5)
    m = rl.mttdl_hours(20, 2, 0.01, 0.2, records=500, domains=5)
    se = sim.loss_hours.std(ddof=1) / len(sim.loss_hours) ** 0.5
    assert abs(sim.loss_hours.mean() - m) < 4 * se, (sim.loss_hours.mean(), m, se)
    with pytest.raises(ValueError, match="rebuild"):
        rl.simulate(20, 2, 0.01, 0.2, 5, records=100, sim_repair="respread", domains=5)
    with pytest.raises(ValueError, match="D > N"):
        rl.mttdl_hours(4, 2, lam, mu, domains=5)
    res = rl.analyse(20, [2], 0.01, 0.2, 100.0, records=200, domains=5)
    assert res["domains"] == 5 and res["rows"][0]["blind"]["mttdl_hours"] < res["rows"][0]["mttdl_hours"]
