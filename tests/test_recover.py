"""Recovery without the namespace (issue 13; paper 3.5): the peers' infofile
mirrors rebuild a namespace that was deleted whole, against real processes.
Every committed record readable before is readable after, records never
committed do not come back, and records whose copies were on a dead peer are
reported."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import poll_for

from st_py.core.capability import ADMIN, READ
from st_py.core.copy_health import user_name
from st_py.core.infofile import InfofileReader
from st_py.maintenance.recover import _PeerSession

ROOT = Path(__file__).resolve().parents[1]
N = 200  # records per file


def _token(cluster) -> bytes:
    return cluster.mint(READ | ADMIN) if cluster.auth else b""


def _mirrors(cluster, addr: str) -> dict[int, int]:
    """file id -> generation of the mirrors peer ``addr`` lists (LIST_META)."""
    s = _PeerSession(addr, _token(cluster))
    try:
        return {m.file_id: m.generation for m in s.list_meta()}
    finally:
        s.close()


def _infofile_state(cluster, name: str) -> tuple[int, int, dict[str, set[str]]]:
    """(file id, generation, record -> addresses of its holders) of file ``name``;
    an object's stripes are the object (one name: counts count names)."""
    r = InfofileReader(cluster.namespace / name.lstrip("/"))
    try:
        meta = r.meta()
        holders: dict[str, set[str]] = {}
        for rec, addr in r.conn.execute(
            "SELECT r.name, p.addr FROM records r JOIN copies c ON c.name = r.name "
            "JOIN peers p ON p.peer_idx = c.peer_idx"
        ):
            holders.setdefault(user_name(rec), set()).add(addr)
        return int(meta["file_id"]), int(meta["generation"]), holders
    finally:
        r.close()


def _wait_for_mirrors(cluster, names: list[str]) -> dict[str, tuple[int, int, dict[str, set[str]]]]:
    """Wait until every peer of each file's peerlist mirrors it at its current
    generation; returns each file's state."""
    state = {n: _infofile_state(cluster, n) for n in names}
    peers = {}
    for n in names:
        r = InfofileReader(cluster.namespace / n.lstrip("/"))
        peers[n] = [a for (a,) in r.conn.execute("SELECT addr FROM peers")]
        r.close()

    def caught_up() -> bool:
        listed = {a: _mirrors(cluster, a) for a in cluster.peer_addrs}
        return all(listed[a].get(state[n][0]) == state[n][1] for n in names for a in peers[n])

    poll_for(caught_up, timeout=20, interval=0.1, what="the peers' mirrors to catch up with every infofile")
    return state


def _recover(cluster, *args: str) -> tuple[int, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("STORETORRENT_TRACKER", None)
    argv = [
        sys.executable,
        "-m",
        "st_py.cli",
        "recover",
        "--from-peers",
        "--format",
        "json",
        "--tracker",
        cluster.tracker_addr,
        "--data",
        str(cluster.data_dir),
        *args,
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    return p.returncode, json.loads(p.stdout)


def _lose_namespace(cluster) -> None:
    """SIGKILL the tracker, delete the whole namespace and the tracker's
    metadata log (on one disk under `up`: what the peers' mirrors alone
    bring back; test_oplog has the namespace lost with the log kept), start
    the tracker again on the empty one (same port, same state directory)."""
    cluster.tracker.kill()
    shutil.rmtree(cluster.namespace)
    for p in (cluster.data_dir / "tracker").glob("log.db*"):
        p.unlink()
    assert not cluster.namespace.exists()
    cluster.start_tracker()


def test_recover_a_deleted_namespace_from_the_peers(make_cluster):
    cluster = make_cluster(4, peer_args=["--mirror-interval", "0.2"])
    c = cluster.client(group_size=1000)
    classes = {"/exp/a": "x2", "/exp/deep/b": "x2", "/exp/c1": "x1", "/exp/deep/er/d1": "x1"}
    blobs: dict[str, dict[str, bytes]] = {}
    for name, rep in classes.items():
        blobs[name] = {f"rec/{i:04d}": f"{name} {i} ".encode() * (i % 13 + 1) for i in range(N)}
        with c.create(name, replication=rep, blocksize=3) as f:
            for k, v in blobs[name].items():
                f.queue_put(k, v)
    with c.open("/exp/a") as f:  # a replaced record comes back as its current version
        blobs["/exp/a"]["rec/0001"] = b"version 1 of rec/0001"
        f.put("rec/0001", blobs["/exp/a"]["rec/0001"], replace=True)
    obj = os.urandom(300_000)
    with c.create("/obj/o", "x2") as f:
        f.put_object("o.bin", obj, stripe_size=32 * 1024)
        f.put("small", b"beside the object")
    # Records whose copies were acknowledged but never committed: a writer
    # that died before its commit, in a file of its own and in a loaded one.
    crashed = c.create("/exp/crashed", replication="x2")
    for i in range(20):
        crashed.queue_put(f"lost/{i}", b"never committed").result()
    crashed._transport.close()
    late = c.open("/exp/a")
    for i in range(15):
        late.queue_put(f"ghost/{i}", b"never committed either").result()
    late._transport.close()

    names = [*classes, "/obj/o", "/exp/crashed"]
    before = _wait_for_mirrors(cluster, names)
    ids = {n: before[n][0] for n in names}
    from helpers import metric_value, scrape_metrics

    m = scrape_metrics(cluster.peers[0].metrics_addr)  # the mirror's metrics (docs/operations.md)
    assert metric_value(m, "st_peer_meta_mirrors") == len(names)  # every peer is in every peerlist here
    assert metric_value(m, "st_peer_meta_mirror_passes_total", result="ok") >= 1
    assert metric_value(m, "st_peer_meta_mirror_copies_total") >= len(names)
    assert metric_value(m, "st_peer_meta_mirror_last_pass_timestamp_seconds") > 0

    _lose_namespace(cluster)
    dead = cluster.kill_peer(3)
    cluster.wait_for_peers(3)
    poll_for(
        lambda: not any(p.alive for p in c.tracker.status().peers if p.addr == dead),
        timeout=20,
        what=f"the tracker to count {dead} failed",
    )

    rc, report = _recover(cluster)
    assert rc == 1  # x1 records died with the peer
    assert dead not in report["peers_alive"] and report["peers_failed"] == []
    files = {f["name"]: f for f in report["files"]}
    assert set(files) == set(names)
    for n in names:
        f = files[n]
        assert f["outcome"] == "restored", f
        assert f["file_id"] == f"{ids[n]:016x}" and f["generation"] == before[n][1]
        holders = before[n][2]
        assert f["records"] == len(holders)
        on_dead = sorted(r for r, addrs in holders.items() if dead in addrs)
        assert f["missing_copies"] == len(on_dead)
        assert sorted(f["records_missing_copies"]) == on_dead
        if classes.get(n) == "x1":
            assert on_dead, f"no record of {n} was on {dead}: the test proves nothing"
            assert f["unreadable"] == len(on_dead) and sorted(f["records_unreadable"]) == on_dead
        else:
            assert f["unreadable"] == 0
    assert (cluster.namespace / "exp/deep/er/d1").is_file()

    c2 = cluster.client()
    for name, rep in classes.items():
        with c2.open(name) as f:
            assert f.file_id == ids[name]
            assert sorted(f.names()) == sorted(blobs[name])  # no ghost/*: never committed
            if rep == "x2":
                assert all(f.get(k) == v for k, v in blobs[name].items())
            else:
                alive = [k for k, addrs in before[name][2].items() if dead not in addrs]
                assert alive and all(f.get(k) == blobs[name][k] for k in alive)
    with c2.open("/obj/o") as f:
        assert f.get("o.bin") == obj and f.get("small") == b"beside the object"
    with c2.open("/exp/crashed") as f:
        assert len(f) == 0 and f.names() == []

    # A new file never gets a restored file's id; the tracker remembers them.
    with c2.create("/exp/new", "x2") as f:
        f.put("n", b"new")
        assert f.file_id not in ids.values()
    db = sqlite3.connect(f"file:{cluster.data_dir / 'tracker' / 'tracker.db'}?mode=ro", uri=True)
    try:
        kept = {r[0] for r in db.execute("SELECT file_id FROM file_ids")}
    finally:
        db.close()
    assert set(ids.values()) <= kept


def test_recover_is_idempotent_and_never_overwrites(make_cluster):
    cluster = make_cluster(3, peer_args=["--mirror-interval", "0.2"])
    c = cluster.client()
    for name in ("/r/keep", "/r/taken"):
        with c.create(name, replication="x2") as f:
            for i in range(50):
                f.queue_put(f"k{i}", f"{name}/{i}".encode())
    before = _wait_for_mirrors(cluster, ["/r/keep", "/r/taken"])
    _lose_namespace(cluster)
    cluster.wait_for_peers(3)

    rc, dry = _recover(cluster, "--dry-run")
    assert rc == 0 and dry["dry_run"]
    assert {f["name"]: f["outcome"] for f in dry["files"]} == {"/r/keep": "missing", "/r/taken": "missing"}
    assert not (cluster.namespace / "r").exists()  # a dry run restores nothing

    with c.create("/r/taken", replication="x2") as f:  # someone took the name meanwhile
        f.put("other", b"a new file")
        new_id = f.file_id
    old = {n: f"{before[n][0]:016x}" for n in before}

    def outcomes(report: dict) -> dict:
        # the new /r/taken may be mirrored already: it is then "present"
        got = {(f["name"], f["file_id"]): f for f in report["files"]}
        assert all(f["outcome"] == "present" for (n, i), f in got.items() if i == f"{new_id:016x}")
        return {n: got[(n, i)] for n, i in old.items()}

    rc, dry = _recover(cluster, "--dry-run")  # reports what a real run would do, per file
    assert rc == 1 and {n: f["outcome"] for n, f in outcomes(dry).items()} == {
        "/r/keep": "missing",
        "/r/taken": "conflict",
    }
    assert not (cluster.namespace / "r" / "keep").exists()

    rc, report = _recover(cluster)
    files = outcomes(report)
    assert rc == 1
    assert files["/r/keep"]["outcome"] == "restored"
    assert files["/r/taken"]["outcome"] == "conflict"
    assert f"{new_id:016x}" in files["/r/taken"]["detail"]
    with c.open("/r/taken") as f:  # nothing overwritten
        assert f.file_id == new_id and f.names() == ["other"]

    rc, again = _recover(cluster)  # a second run changes nothing
    assert {n: f["outcome"] for n, f in outcomes(again).items()} == {"/r/keep": "present", "/r/taken": "conflict"}
    rc, dry = _recover(cluster, "--dry-run")  # nor would it: a dry run on the healthy namespace says so
    assert {n: f["outcome"] for n, f in outcomes(dry).items()} == {"/r/keep": "present", "/r/taken": "conflict"}
    with c.open("/r/keep") as f:
        assert f.file_id == before["/r/keep"][0]
        assert all(f.get(f"k{i}") == f"/r/keep/{i}".encode() for i in range(50))


def test_recover_with_no_mirror_of_data_the_peers_hold_says_so_and_fails(make_cluster):
    """Peers that keep copies (--metadata fetch) but made none yet (their
    mirror pass ran at start, before the file existed; no GET_LOCAL) hold
    records of a lost namespace: recover restores nothing, and says so with
    status 1 and the count of records, never a success with an empty list."""
    cluster = make_cluster(2, peer_args=["--metadata", "fetch", "--mirror-interval", "3600"])
    with cluster.client().create("/u/a", replication="x2") as f:
        for i in range(20):
            f.queue_put(f"k{i}", b"held but never mirrored")
    assert not any(_mirrors(cluster, a) for a in cluster.peer_addrs), "the test needs peers with no copy yet"
    _lose_namespace(cluster)
    cluster.wait_for_peers(2)
    tracker = cluster.client().tracker
    poll_for(lambda: sum(p.records for p in tracker.status().peers) >= 40, what="the records announced")
    rc, report = _recover(cluster)
    assert rc == 1 and report["files"] == [] and report["unmirrored_records"] >= 40, report
