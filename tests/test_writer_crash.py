"""A crashed writer's leftovers never block its retry (paper 4.4; issue
"One truth", item 9; docs/replication.md, "A crashed writer's leftovers").

A writer that dies after its copies were acknowledged but before they were
committed leaves uncommitted copies on the peers. The retry replaces them
(a PUT with LEFTOVER, which a peer honours only once the connection that
stored the copy has closed), while a live writer's uncommitted copy is never
overwritten (``RecordBeingWrittenError``), and ``RecordExistsError`` means a
committed record. Real tracker and peer processes; the writer is SIGKILLed.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from checks import check_file

from st_py.errors import RecordBeingWrittenError, RecordExistsError

# Puts 60 records into an x3 file on 3 peers: 40 committed, then 20
# acknowledged by every peer but not committed (the group is not full), and
# waits to be killed.
WRITER = """
import sys, time
from st_py.client.client import Client
f = Client(sys.argv[1], group_size=1000).create(sys.argv[2], replication="x3")
for i in range(40):
    f.queue_put(f"r{i:03d}", f"attempt-1 r{i:03d} ".encode() * 40)
f.flush()
pending = [f.queue_put(f"r{i:03d}", f"attempt-1 r{i:03d} ".encode() * 40) for i in range(40, 60)]
for p in pending:
    p.result()
print("ready", flush=True)
time.sleep(600)
"""


def _copies_on_disk(cluster) -> Counter:
    """Every record file on the peers' disks, by its bytes."""
    seen: Counter = Counter()
    for i in range(len(cluster.peers)):
        root = cluster.data_dir / "peers" / f"peer-{i}" / "files"
        for p in root.rglob("*"):
            if p.is_file() and not p.name.endswith(".name"):
                seen[p.read_bytes()] += 1
    return seen


def _crash_a_writer(cluster, tmp_path: Path, file: str) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    with subprocess.Popen([sys.executable, str(script), cluster.tracker_addr, file], stdout=subprocess.PIPE) as w:
        assert w.stdout is not None
        assert w.stdout.readline().strip() == b"ready"
        w.kill()  # SIGKILL: its connections to the peers close with it


def test_retry_after_a_writer_crash_replaces_its_uncommitted_copies(make_cluster, tmp_path):
    cluster = make_cluster(3)
    _crash_a_writer(cluster, tmp_path, "/crash/x3")
    v1 = {f"r{i:03d}": f"attempt-1 r{i:03d} ".encode() * 40 for i in range(60)}
    v2 = {f"r{i:03d}": f"attempt-2 r{i:03d} ".encode() * 40 for i in range(60)}
    # the crashed writer's 20 uncommitted copies sit on all 3 peers
    assert all(_copies_on_disk(cluster)[v1[f"r{i:03d}"]] == 3 for i in range(40, 60))

    exists = []
    with cluster.client().open("/crash/x3") as f:
        for n, v in v2.items():
            try:
                f.queue_put(n, v)
            except RecordExistsError as e:
                exists.append(n)
                assert e.names == (n,)  # it names the committed record
    # RecordExistsError for exactly the committed ones; the rest stored
    assert exists == [f"r{i:03d}" for i in range(40)]
    expected = {**{n: v1[n] for n in exists}, **{n: v2[n] for n in v2 if n not in exists}}
    check_file(cluster, "/crash/x3", expected, copies=3)
    on_disk = _copies_on_disk(cluster)
    for i in range(40, 60):  # every copy of a retried record is the retry's: none of the crashed one's is left
        n = f"r{i:03d}"
        assert (on_disk[v2[n]], on_disk[v1[n]]) == (3, 0), n


def test_a_live_writers_uncommitted_copy_is_never_overwritten(make_cluster):
    cluster = make_cluster(3)
    a = cluster.client(group_size=1000).create("/crash/live", replication="x3")
    a.queue_put("x", b"from writer A").result()  # on every peer, not committed
    b = cluster.client().open("/crash/live")
    with pytest.raises(RecordBeingWrittenError) as info:
        b.put("x", b"from writer B")
    e = info.value
    assert not isinstance(e, RecordExistsError)  # nothing of that name is committed
    assert (e.record, e.file) == ("x", "/crash/live")
    assert e.peers and set(e.peers) <= set(cluster.peer_addrs)  # the peer(s) seen holding A's copy
    a.close()  # A commits its record, whole and untouched
    assert b.get("x") == b"from writer A"
    with pytest.raises(RecordExistsError) as info2:  # now it is committed
        b.put("x", b"from writer B")
    assert info2.value.names == ("x",)
    b.close()
    assert _copies_on_disk(cluster)[b"from writer A"] == 3
    assert _copies_on_disk(cluster)[b"from writer B"] == 0


def test_cli_put_resumes_after_a_killed_writer(make_cluster, tmp_path):
    # storetorrent put --skip-existing after a crash: the names the crashed
    # writer committed are skipped, the ones it left uncommitted are stored.
    cluster = make_cluster(3)
    _crash_a_writer(cluster, tmp_path, "/crash/cli")
    src = tmp_path / "src"
    src.mkdir()
    # the CLI names records by their path relative to the argument's parent: put
    # the files of src/ under the writer's names with a prefix-free layout
    for i in range(60):
        (src / f"r{i:03d}").write_bytes(f"attempt-1 r{i:03d} ".encode() * 40)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "st_py.cli",
            "put",
            "--tracker",
            cluster.tracker_addr,
            "--skip-existing",
            "/crash/cli",
            *sorted(str(p) for p in src.iterdir()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stored 20 records" in out.stdout and "40 already there" in out.stdout, out.stdout
    check_file(cluster, "/crash/cli", {f"r{i:03d}": f"attempt-1 r{i:03d} ".encode() * 40 for i in range(60)}, copies=3)
