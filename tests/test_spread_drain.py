"""Growing and draining the cluster (paper 5; FreeLoader, seed 004, donor
withdrawal) against real processes: ``rebalance --spread`` after peers join,
a GET_LOCAL scan while copies move, a peer SIGKILLed mid-move, and a live
peer drained and retired."""

import itertools
import json
import subprocess
import threading
import time

import pytest
from checks import admin_scrub, check_exactly_once, check_file, reveal_all
from conftest import poll_for
from helpers import run_cli

from st_py.client.getlocal import reveal
from st_py.core.infofile import InfofileReader
from st_py.errors import InvalidOptionError, PeerNotLiveError, UnknownPeerError
from st_py.maintenance.drain import drain
from st_py.maintenance.spread import spread
from st_py.wire.protocol import encode_get


def put_records(c, name, n, replication="x2", size=64, blocksize=3):
    """``n`` records of about ``size`` bytes each (sizes vary by a third)."""
    blobs = {f"rec/{i:04d}": (f"{name} {i} ".encode() * size)[: size + (i % 3) * size // 6] for i in range(n)}
    with c.create(name, replication=replication, blocksize=blocksize) as f:
        for k, v in blobs.items():
            f.queue_put(k, v)
    return blobs


def copy_bytes(cluster, names) -> dict[str, int]:
    """{peer address: bytes of the committed copies it holds} over ``names``."""
    out: dict[str, int] = {}
    for name in names:
        r = InfofileReader(cluster.namespace / name.lstrip("/"))
        try:
            for addr, b in r.conn.execute(
                "SELECT p.addr, sum(r.size) FROM copies c JOIN records r USING(name) "
                "JOIN peers p USING(peer_idx) GROUP BY p.addr"
            ):
                out[addr] = out.get(addr, 0) + b
        finally:
            r.close()
    return out


def copies_on(cluster, name, addr) -> int:
    r = InfofileReader(cluster.namespace / name.lstrip("/"))
    try:
        return r.conn.execute(
            "SELECT count(*) FROM copies c JOIN peers p USING(peer_idx) WHERE p.addr = ?", (addr,)
        ).fetchone()[0]
    finally:
        r.close()


def check_every_copy(c, name, blobs):
    """Every committed copy (not only the one a GET reads first) is on its
    holder with the right bytes: a GET to each holder in turn."""
    with c.open(name) as f:
        metas = f.records_meta(list(blobs))
        got: dict[tuple[str, int], object] = {}
        for n, m in metas.items():
            for rank, idx in m.copies().items():
                key = (n, rank)
                f._transport.send(
                    f.peers[idx].addr,
                    lambda seq, n=n: [encode_get(seq, f.file_id, n)],
                    lambda fr, exc, key=key: got.__setitem__(key, exc or bytes(fr.fields["data"])),
                )
        f._transport.wait(lambda: len(got) == sum(len(m.peers) for m in metas.values()))
    bad = {k: v for k, v in got.items() if v != blobs[k[0]]}
    assert not bad, list(bad.items())[:3]
    assert set(metas) == set(blobs)


def assert_even(by_addr, addrs, tolerance):
    mean = sum(by_addr.get(a, 0) for a in addrs) / len(addrs)
    assert all(abs(by_addr.get(a, 0) - mean) <= tolerance * mean for a in addrs), (by_addr, mean)


def test_spread_after_growing_from_two_to_four_peers(make_cluster):
    cluster = make_cluster(2, peer_args=["--scrub-age", "8"])
    c = cluster.client()
    blobs2 = put_records(c, "/grow/x2", 500)
    blobs1 = put_records(c, "/grow/x1", 200, replication="x1")
    old = list(cluster.peer_addrs)
    with c.open("/grow/x2") as f:
        before_plan = f.get_local_plan()  # a scan planned before the cluster grows
    cluster.add_peer()
    cluster.add_peer()
    new = [a for a in cluster.peer_addrs if a not in old]
    assert len(new) == 2 and c.status().alive_peers == 4

    out = run_cli(cluster, "rebalance", "--spread", "--all", "--tolerance", "0.1", "--format", "json")
    moved_at = time.monotonic()
    assert out.returncode == 0, out.stdout + out.stderr
    # The old holders' scrubbers keep the moved-away copies (--scrub-age after the move).
    assert sum(admin_scrub(cluster, a)["removed_uncommitted"] for a in old) == 0
    report = json.loads(out.stdout)
    assert report["even"] and report["deviation"] <= 0.1 < report["deviation_before"], report
    moved = report["copies_moved"]
    assert moved > 0 and {p["peer"] for p in report["peers"]} == set(cluster.peer_addrs)
    by_addr = copy_bytes(cluster, ["/grow/x2", "/grow/x1"])
    assert_even(by_addr, cluster.peer_addrs, 0.1)
    assert all(by_addr.get(a, 0) > 0 for a in new)
    assert all(copies_on(cluster, "/grow/x2", a) > 0 for a in new)

    # Every record reads back equal, by GET and by GET_LOCAL exactly once.
    check_file(cluster, "/grow/x2", blobs2)
    check_file(cluster, "/grow/x1", blobs1, copies=1)
    check_every_copy(c, "/grow/x2", blobs2)
    for name, blobs in (("/grow/x2", blobs2), ("/grow/x1", blobs1)):
        with c.open(name) as f:
            plan, recs = reveal_all(f)
        assert set(plan.ring) == set(cluster.peer_addrs)
        check_exactly_once(recs, blobs)
    # The scan planned before the move still reveals each record once, from
    # the old holders, whose moved-away copies are still there to read.
    recs = [r for a in before_plan.ring for r in reveal(a, before_plan)]
    check_exactly_once(recs, blobs2)
    assert {r.peer for r in recs} <= set(old)

    # Even now: a second and a third spread move nothing, also once the peers
    # announced what they now hold (the moved-away copies still on the old
    # holders, as under storetorrent up, whose peers share one filesystem).
    poll_for(
        lambda: all(p.used_bytes >= by_addr.get(p.addr, 0) for p in c.status().peers if p.addr in new),
        timeout=20,
        what="the new peers to announce the copies they took",
    )
    for _ in range(2):
        again = spread(c, tolerance=0.1)
        assert again.copies_moved == 0 and again.even and again.complete, [
            (p.addr, p.bytes_before, p.bytes_after) for p in again.peers
        ]

    # Then they remove exactly those: nothing committed.
    time.sleep(max(0.0, moved_at + 8.5 - time.monotonic()))
    assert sum(admin_scrub(cluster, a)["removed_uncommitted"] for a in cluster.peer_addrs) == moved
    check_every_copy(c, "/grow/x2", blobs2)
    check_file(cluster, "/grow/x1", blobs1, copies=1)


def test_get_local_scan_during_spread_sees_each_record_once(make_cluster):
    cluster = make_cluster(2)
    c = cluster.client()
    blobs = put_records(c, "/scan/x2", 600, size=2000)
    cluster.add_peer()
    cluster.add_peer()
    with c.open("/scan/x2") as f:
        g0 = f.get_local_plan().generation
    result: dict = {}

    def run():
        with cluster.client() as c2:
            try:  # about 1.2 MB to move at 0.4 MB/s: a few seconds
                result["report"] = spread(c2, ["/scan/x2"], max_mb_per_s=0.4)
            except Exception as e:  # noqa: BLE001 (re-raised below)
                result["error"] = e

    mover = threading.Thread(target=run)
    mover.start()
    generations = []
    try:
        while mover.is_alive() or not generations:
            with c.open("/scan/x2") as f:
                plan, recs = reveal_all(f)
                check_exactly_once(recs, blobs)  # reads every revealed local path
                for n in list(blobs)[plan.generation % 50 :: 50]:
                    assert f.get(n) == blobs[n]
            generations.append(plan.generation)
    finally:
        mover.join()
    assert "error" not in result, result
    r = result["report"]
    assert r.copies_moved > 0 and r.even and r.complete, r.as_dict()
    g1 = r.files[0].generation
    assert any(g0 < g < g1 for g in generations), (g0, generations, g1)  # scans ran between moves
    assert_even(copy_bytes(cluster, ["/scan/x2"]), cluster.peer_addrs, 0.1)
    with c.open("/scan/x2") as f:
        check_exactly_once(reveal_all(f)[1], blobs)


def test_peer_killed_mid_spread_loses_no_committed_record(make_cluster):
    cluster = make_cluster(2)
    c = cluster.client()
    blobs2 = put_records(c, "/kill/x2", 500, size=2000)
    blobs1 = put_records(c, "/kill/x1", 200, replication="x1", size=2000)
    cluster.add_peer()
    cluster.add_peer()
    progress: list = []
    result: dict = {}

    def run():
        with cluster.client() as c2:
            try:
                result["report"] = spread(
                    c2, ["/kill/x2", "/kill/x1"], max_mb_per_s=0.3, progress=lambda *a: progress.append(a)
                )
            except Exception as e:  # noqa: BLE001 (checked below)
                result["error"] = e

    mover = threading.Thread(target=run)
    mover.start()
    try:
        poll_for(lambda: progress, timeout=60, what="the first batch of moves")
        victim = cluster.kill_peer(2)  # a new peer, receiving copies: the next batch is on its way
        assert progress[0][0] == "/kill/x2" and progress[0][1] < progress[0][2], progress
    finally:
        mover.join()
    assert "error" not in result, result  # the spread goes on without it
    r = result["report"]
    assert r.copies_moved > 0 and copies_on(cluster, "/kill/x2", victim) > 0
    # Its x2 copies are read from their other holders meanwhile.
    check_file(cluster, "/kill/x2", blobs2)

    # Back on its port with its store: every committed copy is there.
    cluster.start_peer(2, port=int(victim.rsplit(":", 1)[1]))
    poll_for(lambda: c.status().alive_peers == 4, what="the peer to announce again")
    for name, blobs in (("/kill/x2", blobs2), ("/kill/x1", blobs1)):
        check_every_copy(c, name, blobs)
        with c.open(name) as f:
            check_exactly_once(reveal_all(f)[1], blobs)
    again = spread(c, ["/kill/x1", "/kill/x2"])
    assert again.even and again.complete, again.as_dict()
    check_every_copy(c, "/kill/x2", blobs2)


def test_drain_a_live_peer_with_x1_records(make_cluster):
    cluster = make_cluster(3)
    c = cluster.client()
    blobs1 = put_records(c, "/drain/x1", 300, replication="x1", size=1000, blocksize=1)
    blobs2 = put_records(c, "/drain/x2", 200, size=1000)
    victim = cluster.peer_addrs[0]
    assert copies_on(cluster, "/drain/x1", victim) > 0 and copies_on(cluster, "/drain/x2", victim) > 0
    stop = threading.Event()
    errors: list = []
    rounds = [0]

    def read_all_the_time():
        with cluster.client() as r:
            while not stop.is_set():
                try:
                    for name, blobs in (("/drain/x1", blobs1), ("/drain/x2", blobs2)):
                        with r.open(name) as f:
                            futs = {n: f.queue_get(n) for n in blobs}
                            bad = [n for n, fut in futs.items() if fut.exception() or fut.result() != blobs[n]]
                            assert not bad, bad[:3]
                            check_exactly_once(reveal_all(f)[1], blobs)  # raises if any is unavailable
                    rounds[0] += 1
                except Exception as e:  # noqa: BLE001 (the test fails on any)
                    errors.append(e)
                    return

    reader = threading.Thread(target=read_all_the_time)
    reader.start()
    try:
        poll_for(lambda: rounds[0] >= 1, timeout=60, what="a first round of reads")
        at_start = rounds[0]
        out = run_cli(cluster, "drain", victim, "--max-mb-per-s", "0.1")  # about 230 kB: a few seconds
        assert rounds[0] >= at_start + 2 or errors  # whole rounds of reads ran during the drain
        at_end = rounds[0]
        poll_for(lambda: rounds[0] > at_end or errors, timeout=60, what="reads after the drain")
    finally:
        stop.set()
        reader.join()
    assert not errors, errors
    assert out.returncode == 0, out.stdout + out.stderr
    assert "retired" in out.stdout

    # The peer holds nothing the infofiles point to; every record is there.
    for name in ("/drain/x1", "/drain/x2"):
        assert copies_on(cluster, name, victim) == 0
    check_file(cluster, "/drain/x1", blobs1, copies=1)
    check_file(cluster, "/drain/x2", blobs2)
    st = json.loads(run_cli(cluster, "status", "--format", "json").stdout)
    assert {p["peer"]: p["state"] for p in st["peers"]}[victim] == "retired"

    # New files, and new records of old files, avoid it; a tracker restart keeps that.
    def new_file_avoids(name):
        with c.create(name, replication="x2") as f:
            assert victim not in {p.addr for p in f.peers.values()}
            for i in range(30):
                f.put(f"n{i}", b"new" * 10)
        assert copies_on(cluster, name, victim) == 0
        with c.open("/drain/x2") as f:
            for i in range(30):
                f.put(f"late{name}/{i}", b"late")  # late/drain/new1/0: a relative path
        assert copies_on(cluster, "/drain/x2", victim) == 0

    new_file_avoids("/drain/new1")
    cluster.restart_tracker()
    cluster.wait_for_peers(3)
    c = cluster.client()
    assert {p.addr: p.drain_state for p in c.status().peers}[victim] == "retired"
    new_file_avoids("/drain/new2")

    # Errors carry their facts; --cancel puts the peer back in service.
    with pytest.raises(UnknownPeerError) as e:
        drain(c, "127.0.0.1:1")
    assert e.value.peer == "127.0.0.1:1" and victim in e.value.known
    with pytest.raises(InvalidOptionError) as e2:
        spread(c, tolerance=1.5)
    assert e2.value.option == "tolerance"
    out = run_cli(cluster, "drain", victim, "--cancel", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "peer": victim,
        "peer_id": {p.addr: p.peer_id for p in c.status().peers}[victim],
        "alive": True,
        "drain_state": "",
    }
    assert {p.addr: p.drain_state for p in c.status().peers}[victim] == ""
    dead = cluster.kill_peer(2)
    poll_for(lambda: not {p.addr: p.alive for p in c.status().peers}[dead], what="the tracker to see it fail")
    with pytest.raises(PeerNotLiveError) as e3:
        drain(c, dead)
    assert e3.value.peer == dead


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MB tmpfs for a cluster's data: peers that share a filesystem
    with little free space, where what each peer announces as used plus free
    moves as copies move."""
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_a_second_spread_of_an_even_cluster_moves_nothing_on_a_full_shared_disk(small_disk, peer_bin):
    """Each peer's space was its used plus free bytes, which the spread's own
    copies change (the moved-away ones wait for the scrubber on the old
    holders): on a disk with little room the new peers got 27% less than
    the old, and the next spread planned against other shares (issue "One
    truth": a second and third spread moved hundreds of copies). Space is
    the peers' capacity, a shared disk split evenly between them."""
    from st_py.deploy.cluster import LocalCluster

    cluster = LocalCluster(small_disk / "c", n_peers=2, announce_interval=0.3)
    cluster.start()
    try:
        c = cluster.client()
        blobs = put_records(c, "/full/x2", 300, size=30_000)  # 18 MB of copies on 2 peers
        cluster.add_peer()
        cluster.add_peer()
        first = spread(c, tolerance=0.1)
        assert first.copies_moved > 0 and first.even, first
        by_addr = copy_bytes(cluster, ["/full/x2"])
        # even in the bytes each peer holds (equal disks): the moved-away copies the old holders
        # keep for the scrubber do not make their share larger
        assert_even(by_addr, cluster.peer_addrs, 0.1)
        poll_for(
            lambda: all(p.used_bytes >= by_addr.get(p.addr, 0) for p in c.status().peers),
            timeout=20,
            what="the peers to announce what they now hold",
        )
        for _ in range(2):
            again = spread(c, tolerance=0.1)
            assert again.copies_moved == 0 and again.even, [
                (p.addr, p.bytes_before, p.space_bytes) for p in again.peers
            ]
        check_file(cluster, "/full/x2", blobs)
    finally:
        cluster.stop()


# -- kept versions (issue 43): drain and spread converge with snapshots -------------------
KEPT_FILES = {
    "/kd/x3-zstd": ("x3", ["zstd"]),
    "/kd/x3": ("x3", []),
    "/kd/x2-zstd": ("x2", ["zstd"]),
    "/kd/x2": ("x2", []),
}


def _kept_rounds(c, between=None) -> dict[str, dict[str, dict[str, bytes]]]:
    """Each file of ``KEPT_FILES``: CSV records and a striped object, then two
    rounds of a snapshot and appends, replacements and deletes (of a record
    and of the object); ``between()`` runs after each round. Returns
    ``{file: {"s1"|"s2"|"now": {name: bytes}}}``."""
    from helpers import csv_bytes

    out = {}
    for file, (replication, filters) in KEPT_FILES.items():
        now = {f"part-{p}.csv": csv_bytes(p, 20) for p in range(6)}
        with c.create(file, replication, filters=filters, blocksize=1) as f:
            for n, v in now.items():
                f.put(n, v)
            f.put_object("big.csv", csv_bytes(9, 120), stripe_size=700)
        now["big.csv"] = csv_bytes(9, 120)
        states = {}
        for s, (new, old, gone) in {"s1": (6, 1, 2), "s2": (7, 3, 4)}.items():
            c.snapshot(file, s)
            states[s] = dict(now)
            with c.open(file) as f:
                f.put(f"part-{new}.csv", csv_bytes(new, 20))
                f.put(f"part-{old}.csv", csv_bytes(old + 20, 25), replace=True)
                f.delete(f"part-{gone}.csv")
                f.delete("big.csv")
                f.put_object("big.csv", csv_bytes(10 + new, 120), stripe_size=700)
            now[f"part-{new}.csv"] = csv_bytes(new, 20)
            now[f"part-{old}.csv"] = csv_bytes(old + 20, 25)
            del now[f"part-{gone}.csv"]
            now["big.csv"] = csv_bytes(10 + new, 120)
            if between is not None:
                between()
        states["now"] = now
        out[file] = states
    return out


def _read_every_way(cluster, c, states) -> None:
    """Every snapshot and the current state of every file read back exactly:
    Client get, get_local / local_stripes, Dask and DuckDB."""
    from helpers import assert_csv_rows

    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.duckdb_sql import connect_files

    for file, by in states.items():
        for s, want in by.items():
            as_of = None if s == "now" else s
            with c.open(file, as_of=as_of) as f:
                assert sorted(f.names()) == sorted(want), (file, s)
                assert {n: f.get(n) for n in want} == want, (file, s)
                revealed = f.get_local()
                assert sorted(r.name for r in revealed) == sorted(n for n in want if n != "big.csv"), (file, s)
                assert {r.name: f.read_local(r) for r in revealed} == {n: v for n, v in want.items() if n != "big.csv"}
                got = bytearray(len(want["big.csv"]))
                stripes = f.local_stripes()
                assert sorted(st.index for st in stripes) == list(range(-(-len(got) // 700))), (file, s)
                for st in stripes:
                    got[st.offset : st.offset + st.size] = f.read_local_stripe(st)
                assert bytes(got) == want["big.csv"], (file, s)
            assert_csv_rows(read_storetorrent(file, tracker=cluster.tracker_addr, as_of=as_of).compute(), want)
            con = connect_files(c, [file], data=True, as_of=as_of)
            try:
                assert con.execute("SELECT name, size FROM records ORDER BY name").fetchall() == [
                    (n, len(d)) for n, d in sorted(want.items())
                ], (file, s)
                assert_csv_rows(con.execute("SELECT i, part, v FROM records_data").fetch_arrow_table(), want)
            finally:
                con.close()


def _kept_on(cluster, addr) -> int:
    """Copies of kept past versions committed to peer ``addr``, over ``KEPT_FILES``."""
    n = 0
    for file in KEPT_FILES:
        r = InfofileReader(cluster.namespace / file.lstrip("/"))
        try:
            (k,) = r.conn.execute(
                "SELECT count(*) FROM retained_copies JOIN peers p USING(peer_idx) WHERE p.addr = ?", (addr,)
            ).fetchone()
            n += k
        finally:
            r.close()
    return n


def test_drain_and_spread_converge_with_kept_versions(make_cluster):
    """Issue 43: x2 and x3 files, plain and zstd, with records and striped
    objects replaced and deleted under two snapshots, on 3 peers, a peer
    SIGKILLed and started again after each round, then ``repair``. Two peers
    join and ``rebalance --spread --all`` evens the fill (kept copies moved
    away from their first holders, which still have them on disk); a second
    spread moves nothing. Both new peers are drained: each copy moved away
    goes back to a peer that had it (adopted: the peer has the bytes at that
    rank), or to the one peer that holds no copy of its version; each drain
    exits 0 and retires its peer. A third drain, of an original peer, cannot
    finish (3 copies need 3 peers in service; 2 would be) and says so. Every
    snapshot and the current state read back exactly every way, before and
    after."""
    cluster = make_cluster(3)
    c = cluster.client()
    restarts = itertools.cycle([0, 2, 1])

    def kill_and_restart():  # as the operator did between rounds: a peer SIGKILLed and started again
        i = next(restarts)
        port = int(cluster.peer_addrs[i].rsplit(":", 1)[1])
        cluster.kill_peer(i)
        cluster.start_peer(i, port=port)
        cluster.wait_for_peers(3)

    states = _kept_rounds(c, between=kill_and_restart)

    def repaired():  # a live peer whose announce came late (a loaded machine) looks failed for a moment:
        r = run_cli(cluster, "repair", "--format", "json")  # its copies "waiting", the pass incomplete
        return r if r.returncode == 0 else None

    rep = poll_for(repaired, timeout=60, interval=1.0, what="a repair pass that completes")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    _read_every_way(cluster, c, states)
    old = list(cluster.peer_addrs)
    cluster.add_peer()
    cluster.add_peer()
    new = [a for a in cluster.peer_addrs if a not in old]

    out = run_cli(cluster, "rebalance", "--spread", "--all", "--tolerance", "0.1", "--format", "json")
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["even"], out.stdout + out.stderr
    assert all(_kept_on(cluster, a) > 0 for a in new), [_kept_on(cluster, a) for a in new]
    again = run_cli(cluster, "rebalance", "--spread", "--all", "--tolerance", "0.1", "--format", "json")
    assert again.returncode == 0 and json.loads(again.stdout)["copies_moved"] == 0, again.stdout + again.stderr

    taken_back = 0
    for addr in new:
        out = run_cli(cluster, "drain", addr, "--format", "json")
        r = json.loads(out.stdout)
        assert out.returncode == 0 and r["drain_state"] == "retired" and r["copies_left"] == 0, out.stdout + out.stderr
        assert _kept_on(cluster, addr) == 0 and all(copies_on(cluster, f, addr) == 0 for f in KEPT_FILES)
        taken_back += r["taken_back"]
    assert taken_back > 0  # peers the spread moved copies off took them back
    _read_every_way(cluster, c, states)

    out = run_cli(cluster, "drain", old[0])
    assert out.returncode == 1, out.stdout + out.stderr
    text = " ".join((out.stdout + out.stderr).split())
    assert "3 copies need 3 peers in service; 2 are" in text, text
    assert "add a peer" in text, text
    run_cli(cluster, "drain", old[0], "--cancel", check=True)
