"""The namespace on disk follows StoreTorrent's permissions (paper 3.5: the
infofiles' UNIX permissions govern access to the shared namespace), and
empty directories can be removed (rmdir; rm -r removes the directories it
empties), against a real tracker with a users file."""

import json
import os
import subprocess
import sys

import pytest

from st_py.errors import BadNameError, DirectoryNotEmptyError, PermissionDeniedError, StFileNotFoundError, TrackerError


@pytest.fixture
def site(make_site):
    return make_site(2, alice=(["physics"], {}), bob=(["physics"], {}), root=(["admin"], {"admin": True}))


def bits(path) -> int:
    return path.stat().st_mode & 0o777


def test_chmod_sets_the_permission_bits_of_the_infofile_on_disk(site):
    cluster, c, _ = site
    with c["alice"].create("/alice/run1", replication="x2") as f:
        f.put("a", b"alice's data")
    info = cluster.namespace / "alice" / "run1"
    assert bits(info) == 0o644 and bits(cluster.namespace / "alice") == 0o755
    c["alice"].chmod("/alice/run1", 0o600)
    assert bits(info) == 0o600
    c["alice"].chmod("/alice/run1", 0o640)
    assert bits(info) == 0o640
    # on disk nobody but the tracker's account writes, and that account
    # always reads and writes (it commits; peers running as it read)
    c["alice"].chmod("/alice/run1", 0o666)
    assert bits(info) == 0o644
    c["alice"].chmod("/alice/run1", 0o400)
    assert bits(info) == 0o600
    c["alice"].chmod("/alice/run1", 0o604)
    assert bits(info) == 0o604
    # the records stay readable, and writable again after a chmod back
    c["alice"].chmod("/alice/run1", 0o600)
    with c["alice"].open("/alice/run1") as f:
        assert f.get("a") == b"alice's data"
        f.put("b", b"more")
    assert bits(info) == 0o600  # commits keep the bits
    # a refused chmod changes nothing, on disk either
    with pytest.raises(PermissionDeniedError, match="only the owner"):
        c["bob"].chmod("/alice/run1", 0o644)
    assert bits(info) == 0o600
    # directories: r and x for the group and others, rwx for the tracker
    c["alice"].chmod("/alice", 0o750)
    assert bits(cluster.namespace / "alice") == 0o750
    c["alice"].chmod("/alice", 0o711)
    assert bits(cluster.namespace / "alice") == 0o711
    c["alice"].chmod("/alice", 0o777)
    assert bits(cluster.namespace / "alice") == 0o755
    c["root"].chmod("/", 0o755)
    assert bits(cluster.namespace) == 0o755


def test_a_new_file_has_its_mode_on_disk_from_the_start(site):
    cluster, c, _ = site
    c["alice"].create("/alice/deep/er/secret", replication="x1", mode=0o600).close()
    assert bits(cluster.namespace / "alice" / "deep" / "er" / "secret") == 0o600
    for d in ("alice", "alice/deep", "alice/deep/er"):  # new directories: 0755 whatever the umask
        assert bits(cluster.namespace / d) == 0o755
    c["alice"].create("/alice/shared", replication="x1", mode=0o640).close()
    assert bits(cluster.namespace / "alice" / "shared") == 0o640
    c["alice"].create("/alice/default", replication="x1").close()
    assert bits(cluster.namespace / "alice" / "default") == 0o644
    # no half-created file was ever left behind
    assert not [p for p in cluster.namespace.rglob(".st-creating-*")]


def test_a_restarted_tracker_makes_the_disk_follow_the_modes(site):
    cluster, c, _ = site
    c["alice"].create("/alice/run1", replication="x1").close()
    c["alice"].chmod("/alice/run1", 0o600)
    c["alice"].chmod("/alice", 0o700)
    # the bits drift (a restore from a backup, a chmod by hand, an older tracker)
    os.chmod(cluster.namespace / "alice" / "run1", 0o644)
    os.chmod(cluster.namespace / "alice", 0o755)
    cluster.restart_tracker()
    cluster.wait_for_peers(2)
    assert bits(cluster.namespace / "alice" / "run1") == 0o600
    assert bits(cluster.namespace / "alice") == 0o700


def test_rmdir_removes_only_empty_directories(site):
    cluster, c, _ = site
    with c["alice"].create("/alice/d/f1", replication="x1") as f:
        f.put("r", b"x")
    with pytest.raises(DirectoryNotEmptyError, match="directory /alice/d is not empty .*f1"):
        c["alice"].rmdir("/alice/d")
    with pytest.raises(DirectoryNotEmptyError, match="not empty"):
        c["alice"].rmdir("/alice")
    c["alice"].delete("/alice/d/f1")
    # as UNIX: write permission on the parent (/alice is alice's, rwxr-xr-x)
    with pytest.raises(PermissionDeniedError, match="bob may not delete entries in directory /alice"):
        c["bob"].rmdir("/alice/d")
    c["alice"].rmdir("/alice/d")
    assert not (cluster.namespace / "alice" / "d").exists()
    assert [e.name for e in c["alice"].ls("/alice")] == []
    with pytest.raises(StFileNotFoundError, match="no such directory /alice/d"):
        c["alice"].rmdir("/alice/d")
    c["alice"].create("/alice/f", replication="x1").close()
    with pytest.raises(TrackerError, match="/alice/f is a file, not a directory"):
        c["alice"].rmdir("/alice/f")
    with pytest.raises(BadNameError):
        c["root"].rmdir("/")
    # the root is 0777 (no sticky bit): bob may remove alice's empty top-level directory
    c["alice"].delete("/alice/f")
    c["bob"].rmdir("/alice")
    # a directory made again belongs to whoever makes it
    c["bob"].create("/alice/g", replication="x1").close()
    entries = {e.name: e for e in c["root"].ls("/")}
    assert entries["/alice"].owner == "bob"


def test_cli_rm_removes_empty_directories_and_rm_r_whole_trees(site, tmp_path):
    cluster, c, keys = site
    env = dict(os.environ, STORETORRENT_TRACKER=cluster.tracker_addr, STORETORRENT_API_KEY=keys["alice"])

    def st(*args):
        return subprocess.run(
            [sys.executable, "-m", "st_py.cli", *args], capture_output=True, text=True, env=env, timeout=120
        )

    for name in ("/alice/tree/a", "/alice/tree/sub/b", "/alice/tree/sub/deeper/c", "/alice/keep/x"):
        with c["alice"].create(name, replication="x1") as f:
            f.put("r", b"data")
    c["alice"].delete("/alice/keep/x")
    r = st("rm", "/alice/keep")  # an empty directory, as rmdir
    assert r.returncode == 0 and "removed directory /alice/keep" in r.stdout, r.stdout + r.stderr
    r = st("rm", "/alice/tree")  # not empty: refused, nothing deleted
    assert r.returncode == 2 and "not empty" in r.stderr and "rm -r /alice/tree" in r.stderr, r.stderr
    assert (cluster.namespace / "alice" / "tree" / "a").is_file()
    r = st("rm", "/alice/nothing")
    assert r.returncode == 2 and "no such file or directory /alice/nothing" in r.stderr, r.stderr
    r = st("rm", "-r", "/alice/tree")
    assert r.returncode == 0, r.stdout + r.stderr
    for line in (
        "deleted /alice/tree/a",
        "deleted /alice/tree/sub/deeper/c",
        "removed directory /alice/tree/sub/deeper",
        "removed directory /alice/tree/sub",
        "removed directory /alice/tree",
    ):
        assert line in r.stdout
    assert not (cluster.namespace / "alice" / "tree").exists()
    assert json.loads(st("ls", "/alice", "--format", "json").stdout) == []
    # rm -r of a file deletes the file
    c["alice"].create("/alice/one", replication="x1").close()
    r = st("rm", "-r", "/alice/one")
    assert r.returncode == 0 and "deleted /alice/one" in r.stdout
    assert not (cluster.namespace / "alice" / "one").exists()
