"""Clients that read infofiles from local copies kept current by the
tracker (``metadata="fetch"``; issue 40, docs/metadata-log.md, "Metadata on
every node"), with real trackers and peers: the same answers as the shared
namespace mount gives, read-your-writes, a GET of a name committed after the
copy was made, and a copy far behind moving about the change, not the file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from st_integrations.duckdb_sql import connect_files
from st_py.client.infofile_copies import InfofileCopies

FILE = "/copies/a"


def answers(client, name: str) -> dict:
    """What a reader sees of ``name``: names, every record's bytes, the
    snapshot's names and bytes, DuckDB's counts, current and as of it."""
    f = client.open(name)
    out = {
        "names": f.names(),
        "data": {n: f.get(n).hex() for n in f.names()},
        "generation": f.generation,
    }
    f.close()
    old = client.open(name, as_of="s1")
    out["as_of_names"] = old.names()
    out["as_of_data"] = {n: old.get(n).hex() for n in old.names()}
    old.close()
    con = connect_files(client, [name])
    out["sql"] = con.execute("SELECT count(*), sum(size) FROM records").fetchall()[0]
    out["sql_files"] = con.execute("SELECT file, generation FROM files").fetchall()
    con.close()
    con = connect_files(client, [name], as_of="s1")
    out["sql_as_of"] = con.execute("SELECT count(*), sum(size) FROM records").fetchall()[0]
    con.close()
    return json.loads(json.dumps(out))


@pytest.fixture(scope="module")
def history(module_cluster):
    """A file with a snapshot, records put after it, one replaced and one deleted."""
    c = module_cluster.client()
    f = c.create(FILE, replication="x2")
    for i in range(30):
        f.put(f"r{i:03d}", os.urandom(100 + i))
    f.flush()
    c.snapshot(FILE, "s1")
    for i in range(30, 45):
        f.put(f"r{i:03d}", os.urandom(50))
    f.put("r003", b"new version", replace=True)
    f.delete("r004")
    f.close()
    c.close()
    return FILE


def test_fetch_reads_what_the_shared_mount_reads(module_cluster, history, tmp_path):
    """open, names, get, as_of a snapshot and DuckDB connect_files give the
    same answers from a local copy as from the shared mount; the copy is in
    the cache folder, mode 0600, and nothing of the namespace is opened."""
    shared = answers(module_cluster.client(), history)
    c = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "cache"))
    fetched = answers(c, history)
    assert fetched == shared
    info = c.tracker.open(history)
    assert info.infofile_path == str(tmp_path / "cache" / f"{info.file_id}.infofile")
    assert stat.S_IMODE(os.stat(info.infofile_path).st_mode) == 0o600
    assert not info.infofile_path.startswith(str(module_cluster.namespace))


CHILD = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[4])
    from st_py.client.client import Client
    from test_metadata_fetch import answers
    ns, addr, cache = sys.argv[1], sys.argv[2], sys.argv[3]
    assert os.listdir(ns) == [], "the namespace is hidden in this mount namespace"
    try:
        Client(addr, metadata="shared-mount").open(sys.argv[5]).names()
        hidden = False
    except FileNotFoundError:
        hidden = True  # the shared-mount client cannot read the file here: the issue's symptom
    fetch = Client(addr, metadata="fetch", metadata_cache=cache)
    print(json.dumps({"hidden": hidden, "answers": answers(fetch, sys.argv[5])}))
    """
)


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare -m (root): a mount namespace of its own")
def test_a_client_that_cannot_see_the_namespace_reads_the_same(module_cluster, history, tmp_path):
    """A client process in a mount namespace of its own with an empty tmpfs
    over the namespace root (a node that mounts nothing): with the shared
    mount it cannot read the file; with metadata="fetch" open, names, get,
    as_of a snapshot and DuckDB give what the shared mount gives here."""
    shared = answers(module_cluster.client(), history)
    ns = str(module_cluster.namespace)
    args = [ns, module_cluster.tracker_addr, str(tmp_path / "cache"), os.path.dirname(__file__), history]
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    cmd = f"mount -t tmpfs none {ns} && exec {sys.executable} {script} " + " ".join(args)
    out = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["hidden"], "the child saw the namespace"
    assert got["answers"] == shared
    assert os.listdir(ns), "the parent still sees the namespace (the tmpfs was the child's only)"


CHILD_DEFAULT = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[3])
    from st_py.client.client import Client
    from test_metadata_fetch import answers
    addr, name = sys.argv[1], sys.argv[2]
    c = Client(addr)  # no option: neither metadata= nor $STORETORRENT_METADATA
    got = answers(c, name)
    info = c.tracker.open(name)
    print(json.dumps({"answers": got, "path": info.infofile_path,
                      "direct": c.tracker.locator.reads_directly(info.file_id)}))
    """
)


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare -m (root): a mount namespace of its own")
def test_the_default_reads_a_copy_where_the_namespace_is_not_seen_and_the_namespace_where_it_is(
    module_cluster, history, tmp_path, monkeypatch
):
    """No option set (metadata="auto"): a client process whose namespace
    root is an empty tmpfs holding only a stale infofile of another cluster
    at the file's path (same file id and name, another metadata log, a
    record fewer) gives the shared mount's answers from a local copy, never
    the stale file's; a client on the tracker's machine reads the
    namespace itself and makes no copy."""
    import shutil
    import sqlite3

    monkeypatch.delenv("STORETORRENT_METADATA", raising=False)
    monkeypatch.delenv("STORETORRENT_METADATA_CACHE", raising=False)
    here = module_cluster.client(metadata_cache=str(tmp_path / "here"))
    shared = answers(here, history)
    info = here.tracker.open(history)
    assert here.tracker.locator.reads_directly(info.file_id)
    assert info.infofile_path.startswith(str(module_cluster.namespace.resolve()))
    assert not (tmp_path / "here").exists(), "a client that sees the namespace made copies"
    ns = str(module_cluster.namespace.resolve())
    rel = os.path.relpath(info.infofile_path, ns)
    stale = tmp_path / "stale.infofile"
    shutil.copyfile(info.infofile_path, stale)
    db = sqlite3.connect(stale)
    db.execute("UPDATE meta SET value = 'local:another-cluster' WHERE key = 'log_id'")
    db.execute("DELETE FROM records WHERE name = 'r000'")
    db.commit()
    db.close()
    script = tmp_path / "child.py"
    script.write_text(CHILD_DEFAULT)
    target = os.path.join(ns, rel)
    cmd = (
        f"mount -t tmpfs none {ns} && mkdir -p {os.path.dirname(target)} && cp {stale} {target} && "
        f"exec {sys.executable} {script} {module_cluster.tracker_addr} {history} {os.path.dirname(__file__)}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETORRENT_METADATA")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["answers"] == shared
    assert not got["direct"] and got["path"].startswith(str(tmp_path / "xdg" / "storetorrent"))


CHILD_FROZEN = textwrap.dedent(
    """
    import json, sys
    from st_py.client.client import Client
    addr, name = sys.argv[1], sys.argv[2]
    c = Client(addr)  # metadata="auto"
    f = c.open(name)
    direct = c.tracker.locator.reads_directly(f.file_id)
    f.put("after", b"written here")
    f.flush()
    got = f.get("after")  # the frozen infofile at the path lacks it: the client must see its write
    print(json.dumps({"direct_at_open": direct, "got": got.decode(), "names": f.names(),
                      "direct_after": c.tracker.locator.reads_directly(f.file_id)}))
    f.close()
    """
)


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare -m (root): a mount namespace of its own")
def test_the_default_leaves_an_infofile_at_the_path_that_falls_behind_for_a_copy(module_cluster, tmp_path):
    """metadata="auto" where the tracker's path holds the very file, but a
    frozen one (a follower's namespace, a restored backup): it is read at
    open (the same file, at the Open's generation), and when the client's
    own commit names a newer generation than it holds, the client reads a
    copy from then on and sees its write."""
    import shutil

    name = "/copies/frozen"
    with module_cluster.client().create(name, replication="x2") as f:
        f.put("before", b"b")
    info = module_cluster.client().tracker.open(name)
    ns = str(module_cluster.namespace.resolve())
    frozen = tmp_path / "frozen.infofile"
    shutil.copyfile(info.infofile_path, frozen)
    script = tmp_path / "child.py"
    script.write_text(CHILD_FROZEN)
    target = info.infofile_path
    cmd = (
        f"mount -t tmpfs none {ns} && mkdir -p {os.path.dirname(target)} && cp {frozen} {target} && "
        f"exec {sys.executable} {script} {module_cluster.tracker_addr} {name}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETORRENT_METADATA")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["direct_at_open"] and not got["direct_after"]
    assert got["got"] == "written here" and got["names"] == ["after", "before"]


def test_a_writer_reads_its_own_commits_and_a_reader_finds_a_later_name(module_cluster, tmp_path):
    """A fetch writer reads each record at once after its commit, its new
    version and its delete (its copy is brought to the generation of each
    reply); a fetch reader that opened the
    file before a record was committed finds it on GET (it asks the tracker
    once for newer changes before saying NOT_FOUND)."""
    w = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "w"))
    r = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "r"))
    f = w.create("/copies/ryw", replication="x2")
    f.put("first", b"1")
    f.flush()
    reader = r.open("/copies/ryw")
    assert reader.names() == ["first"]
    for i in range(5):
        f.put(f"k{i}", str(i).encode())
        f.flush()
        assert f.names() == ["first"] + [f"k{j}" for j in range(i + 1)]
        assert f.get(f"k{i}") == str(i).encode()
        assert reader.get(f"k{i}") == str(i).encode()
    f.put("first", b"2", replace=True)
    f.flush()
    assert f.get("first") == b"2"  # its own new version, not the copy's old one
    f.delete("k0")
    assert "k0" not in f.names()  # its own delete
    f.close()
    reader.close()


def test_a_copy_far_behind_moves_about_the_change_not_the_file(module_cluster, tmp_path):
    """A copy of a 10^5-record file 1,000 records behind is brought forward
    by changesets: the bytes received are a small part of the file's."""
    from st_py._proto import tracker_pb2 as pb

    c = module_cluster.client()
    f = c.create("/copies/big", replication="x1")
    for start in range(0, 100_000, 5000):
        recs = [
            pb.RecordCommit(name=f"r{i:08d}", size=4096, crc32c=i, peer_idx=[0]) for i in range(start, start + 5000)
        ]
        c.tracker.commit("/copies/big", f.file_id, recs)
    cache = tmp_path / "big"
    reader = module_cluster.client(metadata="fetch", metadata_cache=str(cache))
    info = reader.tracker.open("/copies/big")
    copies = reader.tracker.locator
    assert isinstance(copies, InfofileCopies)
    first = copies.last
    assert first is not None and first.kind == "snapshot"
    size = os.path.getsize(info.infofile_path)
    recs = [pb.RecordCommit(name=f"s{i:08d}", size=4096, crc32c=i, peer_idx=[0]) for i in range(1000)]
    c.tracker.commit("/copies/big", f.file_id, recs)
    info = reader.tracker.open("/copies/big")
    moved = copies.last
    print(
        f"copy of a {size}-byte infofile: first {first.bytes} bytes; 1000 records behind: {moved.bytes} bytes "
        f"({moved.kind}, {moved.seconds:.3f} s)"
    )
    assert moved.kind == "changes" and moved.to_generation == info.generation
    assert moved.bytes < 0.05 * size, (moved.bytes, size)
    h = reader.open("/copies/big")
    assert len(h) == 101_000
    h.close()
    f.close()


def test_fetch_asks_read_permission_as_open_does(make_site, tmp_path):
    """FetchInfofile gives a file's infofile only to a user who may read it:
    bob is refused alice's private file (and sees nothing of it), alice's
    own fetch client reads it."""
    from st_py.errors import PermissionDeniedError

    cluster, clients, keys = make_site(2, alice=(["physics"], {}), bob=(["chem"], {}))
    a = clients["alice"]
    f = a.create("/home/alice/private", replication="x1", mode=0o600)
    f.put("secret", b"s")
    f.close()
    info = a.tracker.open("/home/alice/private")
    bob = cluster.client(api_key=keys["bob"])
    with pytest.raises(PermissionDeniedError):
        bob.tracker.fetch_infofile("/home/alice/private", info.file_id)
    mine = cluster.client(api_key=keys["alice"], metadata="fetch", metadata_cache=str(tmp_path / "alice"))
    g = mine.open("/home/alice/private")
    assert g.get("secret") == b"s"
    g.close()


def test_a_copy_catches_up_across_a_tracker_restart_and_from_a_per_file_tracker(make_cluster, tmp_path):
    """A file served by a per-file tracker: its changes come from that
    tracker's writer. After the tracker restarts (its changesets are in
    memory only) a copy still reaches every commit, by a snapshot if the
    changes no longer reach back."""
    cluster = make_cluster(3, file_trackers=2)
    w = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "w"))
    r = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "r"))
    f = w.create("/ft/x", replication="x2")
    for i in range(20):
        f.put(f"a{i:02d}", b"x" * i)
    f.flush()
    assert f.names() == [f"a{i:02d}" for i in range(20)]
    h = r.open("/ft/x")
    assert len(h) == 20
    h.close()
    assert w.tracker.open("/ft/x").file_tracker, "the file is a per-file tracker's"
    f.put("more", b"m")
    f.flush()
    h = r.open("/ft/x")
    assert r.tracker.locator.last.kind == "changes"  # from the per-file tracker's writer
    assert h.get("more") == b"m"
    h.close()
    f.close()
    cluster.restart_tracker()
    f = w.open("/ft/x")
    f.put("after", b"restart")
    f.flush()
    assert f.get("after") == b"restart"
    f.close()
    h = r.open("/ft/x")
    assert h.get("after") == b"restart" and len(h) == 22
    h.close()


def test_a_copy_the_changes_no_longer_reach_gets_a_snapshot(make_cluster, monkeypatch):
    """A tracker that keeps only its newest changeset (a window of 1 byte):
    a copy two commits behind is sent a snapshot, one commit behind the
    change; both end at the tracker's state. LocalCluster(metadata="fetch")
    gives its clients copies in <data>/client-cache."""
    monkeypatch.setenv("STORETORRENT_CHANGESET_WINDOW_BYTES", "1")
    cluster = make_cluster(2, metadata="fetch")
    w, r = cluster.client(), cluster.client(metadata_cache=str(cluster.data_dir / "reader-cache"))
    f = w.create("/w/x", replication="x1")
    f.put("a", b"1")
    f.flush()
    h = r.open("/w/x")
    assert h.names() == ["a"]
    h.close()
    copies = r.tracker.locator
    assert isinstance(copies, InfofileCopies) and copies.folder == cluster.data_dir / "reader-cache"
    assert w.tracker.locator.folder == cluster.data_dir / "client-cache"
    f.put("b", b"2")
    f.flush()
    h = r.open("/w/x")
    assert copies.last.kind == "changes" and h.names() == ["a", "b"]
    h.close()
    for n in ("c", "d"):
        f.put(n, n.encode())
        f.flush()
    h = r.open("/w/x")
    assert copies.last.kind == "snapshot" and h.names() == ["a", "b", "c", "d"]
    assert h.get("d") == b"d"
    h.close()
    f.close()


def test_a_snapshot_made_after_the_copy_is_read_as_of(module_cluster, tmp_path):
    """A snapshot bumps no generation: a copy at the file's generation but
    made before the snapshot is still brought forward (Open's log position,
    or one question when as_of names a snapshot the copy lacks)."""
    c = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "c"))
    f = c.create("/copies/snap", replication="x2")
    f.put("one", b"1")
    f.close()
    h = c.open("/copies/snap")
    gen = h.generation
    h.close()
    module_cluster.client().snapshot("/copies/snap", "later")
    old = c.open("/copies/snap", as_of="later")
    assert old.generation == gen and old.names() == ["one"] and old.get("one") == b"1"
    old.close()


@pytest.mark.parametrize("mode", ["shared-mount", "fetch"])
def test_a_handle_reads_live_in_both_modes(module_cluster, tmp_path, mode, caplog):
    """One semantics, two transports (``metadata_max_age_s=0`` under
    fetch): a handle opened before another
    client's replacement, new record and delete sees all three on its next
    read (get, names, len, record_meta, the GET_LOCAL plan's generation)
    without a new Open, as the shared mount's live infofile gives; under
    fetch the read that waited for its copy to catch up logs it."""
    w = module_cluster.client()
    f = w.create(f"/copies/live-{mode}", replication="x2")
    f.put("doc", b"v0")
    f.put("gone", b"x")
    f.flush()
    r = module_cluster.client(metadata=mode, metadata_cache=str(tmp_path / "r"), metadata_max_age_s=0)
    h = r.open(f"/copies/live-{mode}")
    assert h.get("doc") == b"v0" and h.names() == ["doc", "gone"]
    f.put("doc", b"v1", replace=True)
    f.put("new", b"n")
    f.delete("gone")
    f.flush()
    caplog.set_level("INFO", logger="st.client")
    assert h.get("doc") == b"v1"
    assert h.names() == ["doc", "new"] and len(h) == 2
    assert h.record_meta("gone") is None and h.record_meta("new") is not None
    assert h.get_local_plan().generation == f.generation
    if mode == "fetch":
        assert r.tracker.locator.waits >= 1
        assert any("a read waited" in m and "to catch up from generation" in m for m in caplog.messages)
    h.close()
    f.close()


def test_a_copy_is_checked_at_open_on_a_missing_name_and_once_older_than_its_age(module_cluster, tmp_path):
    """Close-to-open with a bounded age (docs/decisions.md, "Freshness of a
    local copy"): GETs of a copy checked within ``metadata_max_age_s`` ask
    the tracker nothing; another client's replacement then reads as the
    previous committed version and its delete still reads (the copies are
    kept for history), a name committed elsewhere is read at once, a writer reads its own commits at
    once, a copy older than its age is checked before the read, 0 asks at
    every read, and a handle of a file deleted since gets
    StFileNotFoundError on GET within the age (its copies are gone: the
    failed GET brings the copy forward), never RecordUnavailableError."""
    from st_py.errors import StFileNotFoundError

    name = "/copies/age"
    w = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "w"), metadata_max_age_s=60)
    f = w.create(name, replication="x2")
    f.put("doc", b"v0")
    f.put("gone", b"x")
    f.flush()
    r = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "r"), metadata_max_age_s=60)
    loc = r.tracker.locator
    h = r.open(name)
    asked = loc.questions
    for _ in range(20):
        assert h.get("doc") == b"v0"
    assert h.names() == ["doc", "gone"] and len(h) == 2
    assert loc.questions == asked, "reads within the age asked the tracker"
    f.put("doc", b"v1", replace=True)
    f.delete("gone")
    f.flush()
    assert h.get("doc") == b"v0"  # within the age: the previous committed version, whole
    assert h.get("gone") == b"x"  # and a deleted record still reads (its copies are kept for history)
    f.put("new", b"n")
    f.flush()
    assert h.get("new") == b"n"  # a name the copy lacks: brought forward at once
    assert h.get("doc") == b"v1" and h.names() == ["doc", "new"]
    f.put("mine", b"m")
    f.flush()
    assert f.get("mine") == b"m" and "mine" in f.names()  # a writer's own commits, at once
    h.close()
    short = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "s"), metadata_max_age_s=0.3)
    g = short.open(name)
    assert g.get("doc") == b"v1"
    f.put("doc", b"v2", replace=True)
    f.flush()
    time.sleep(0.3)  # the copy is now older than its age: checked before the next read
    assert g.get("doc") == b"v2"
    g.close()
    live = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "l"), metadata_max_age_s=0)
    g = live.open(name)
    asked = live.tracker.locator.questions
    for _ in range(5):
        assert g.get("doc") == b"v2"
    assert live.tracker.locator.questions == asked + 5  # 0: every read asks, as before
    h = r.open(name)
    assert h.get("doc") == b"v2"
    f.close()
    w.delete(name)
    with pytest.raises(StFileNotFoundError):
        h.get("doc")  # within the age: the failed GET brings the copy forward, which says the file is gone
    h.close()
    g.close()


def test_the_copy_of_a_deleted_file_is_removed(module_cluster, tmp_path):
    """A copy goes with its file: when an Open says NOT_FOUND (another
    client deleted it), when the name was made again (a new file id), and
    when this client deletes the file itself."""
    from st_py.errors import StFileNotFoundError

    other = module_cluster.client()
    c = module_cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "c"))
    for name in ("/copies/del-a", "/copies/del-b"):
        with other.create(name, replication="x1") as f:
            f.put("k", b"v")
    a, b = c.open("/copies/del-a"), c.open("/copies/del-b")
    pa, pb_ = a.infofile_path, b.infofile_path
    a.close()
    b.close()
    assert os.path.isfile(pa) and os.path.isfile(pb_)
    other.delete("/copies/del-a")
    with pytest.raises(StFileNotFoundError):
        c.open("/copies/del-a")
    assert not os.path.exists(pa)
    other.delete("/copies/del-b")
    with other.create("/copies/del-b", replication="x1") as f:
        f.put("k", b"again")
    with c.open("/copies/del-b") as h:
        assert h.get("k") == b"again" and h.infofile_path != pb_
        pnew = h.infofile_path
    assert not os.path.exists(pb_)
    c.delete("/copies/del-b")
    assert not os.path.exists(pnew)


def test_status_shows_the_copies_and_how_far_behind_they_are(module_cluster, tmp_path, caplog):
    """``storetorrent status`` under fetch: the copies of the cache folder,
    the one 2 generations behind the tracker, the one of a deleted file, as
    JSON and as a line; the copies are not moved by being looked at. Each
    copy's generation and how far behind it was at its last check (the one
    a read brought 2 generations forward: that read logged one line on
    st.client with the file, both generations and its wait)."""
    import re

    from helpers import run_cli

    other = module_cluster.client()
    cache = tmp_path / "c"
    c = module_cluster.client(metadata="fetch", metadata_cache=str(cache), metadata_max_age_s=0)
    for name in ("/copies/st-a", "/copies/st-b", "/copies/st-c"):
        with other.create(name, replication="x1") as f:
            f.put("k", b"v")
        c.open(name).close()
    hb = c.open("/copies/st-b")
    for name in ("/copies/st-a", "/copies/st-b"):
        with other.open(name) as f:
            f.put("k1", b"1")
            f.flush()
            f.put("k2", b"2")
    caplog.set_level("INFO", logger="st.client")
    assert hb.names() == ["k", "k1", "k2"]
    hb.close()
    waited = [r.getMessage() for r in caplog.records if r.name == "st.client" and "/copies/st-b" in r.getMessage()]
    assert len(waited) == 1, waited
    m = re.search(r"a read waited [0-9.]+ ms to catch up from generation (\d+) to (\d+)", waited[0])
    assert m and int(m[2]) - int(m[1]) == 2, waited
    other.delete("/copies/st-c")
    env = {"STORETORRENT_METADATA": "fetch", "STORETORRENT_METADATA_CACHE": str(cache)}
    r = run_cli(module_cluster, "status", "--format", "json", env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["metadata_copies"]
    assert got["copies"] == 3 and got["behind"] == 1 and got["max_behind"] == 2 and got["deleted"] == 1
    lag = {x["name"]: x for x in got["files"]}
    assert lag["/copies/st-a"]["behind"] == 2 and lag["/copies/st-b"]["behind"] == 0
    assert lag["/copies/st-c"]["deleted"]
    assert lag["/copies/st-b"]["generation"] == int(m[2]) and lag["/copies/st-b"]["behind_at_check"] == 2
    assert lag["/copies/st-a"]["behind_at_check"] == 0 and lag["/copies/st-a"]["checked_s_ago"] >= 0
    assert got["behind_at_check"] == 1 and got["max_behind_at_check"] == 2
    r = run_cli(module_cluster, "status", env=env)
    assert r.returncode == 0, r.stderr
    assert "infofile copies (metadata=fetch): 3 in" in r.stdout and "at most 2 generations" in r.stdout
    assert "1 were behind at their last check (at most 2 generations)" in r.stdout
    mount = {"STORETORRENT_METADATA": "shared-mount"}
    r = run_cli(module_cluster, "status", "--format", "json", env=mount)
    assert json.loads(r.stdout)["metadata_copies"] is None


def test_live_reads_of_a_file_not_written_since_the_tracker_started_move_no_bytes(make_cluster, tmp_path):
    """After a tracker restart (no changesets kept for the file), a live
    read of a copy at the infofile's state is answered "current": no
    snapshot of the whole file per GET."""
    cluster = make_cluster(2)
    with cluster.client().create("/copies/quiet", replication="x1") as f:
        for i in range(200):
            f.queue_put(f"k{i:03d}", b"v" * 10)
    r = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "r"), metadata_max_age_s=0)
    h = r.open("/copies/quiet")
    assert h.get("k000") == b"v" * 10
    h.close()
    cluster.restart_tracker()
    h = r.open("/copies/quiet")
    loc = r.tracker.locator
    got = loc.bytes_received
    for i in range(20):
        assert h.get(f"k{i:03d}") == b"v" * 10
    assert loc.last.kind == "current" and loc.bytes_received == got
    h.close()


@pytest.mark.parametrize("mode", ["shared-mount", "fetch"])
def test_a_handle_of_a_file_deleted_since_says_so_in_both_modes(module_cluster, tmp_path, mode):
    """A handle whose file another client deleted (and whose name another
    file took) raises StFileNotFoundError on its next read in both modes
    (``metadata_max_age_s=0`` under fetch; within the default age a GET
    says so too: test_a_copy_is_checked_at_open...);
    on the mount it read the unlinked infofile before (old names, GET
    failing as unavailable)."""
    from st_py.errors import StFileNotFoundError

    w = module_cluster.client()
    name = f"/copies/gone-{mode}"
    with w.create(name, replication="x1") as f:
        f.put("k", b"v")
    r = module_cluster.client(metadata=mode, metadata_cache=str(tmp_path / "r"), metadata_max_age_s=0)
    h = r.open(name)
    assert h.get("k") == b"v" and h.names() == ["k"]
    w.delete(name)
    for read in (lambda: h.names(), lambda: h.get("k"), lambda: len(h)):
        with pytest.raises(StFileNotFoundError):
            read()
    with w.create(name, replication="x1") as f:
        f.put("other", b"file")
    with pytest.raises(StFileNotFoundError):
        h.names()
    h.close()
    with r.open(name) as h2:
        assert h2.names() == ["other"]
