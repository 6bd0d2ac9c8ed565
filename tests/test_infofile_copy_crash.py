"""A client's infofile copy after a crash of its machine (issue 40;
st_py/client/copy_seal.py, docs/decisions.md, "A local copy after a machine
crash"): copies are written without fsync, so a reboot can leave one torn
(pages of zeros, or short) under its name. With real trackers and peers, the
reboot made by giving the client another boot id: a torn copy, or one no
seal vouches for, is never read but fetched again whole; a whole copy from
before the reboot is checked by its CRC-32C and kept, moving no bytes."""

from __future__ import annotations

import logging
import os
import sqlite3
import uuid

import pytest

from st_py.client import copy_seal

N = 3000  # records: a copy of some hundred KB, so a tear can miss its first pages


@pytest.fixture
def reboot(monkeypatch, tmp_path):
    """Call to make this process see a new boot of the machine."""

    def boot() -> None:
        f = tmp_path / f"boot_id-{uuid.uuid4()}"
        f.write_text(f"{uuid.uuid4()}\n")
        monkeypatch.setattr(copy_seal, "BOOT_ID", str(f))
        copy_seal.boot_id.cache_clear()

    yield boot
    copy_seal.boot_id.cache_clear()


def _file(cluster, name: str) -> dict[str, bytes]:
    c = cluster.client()
    f = c.create(name, replication="x2")
    want = {f"r{i:05d}": os.urandom(16) + i.to_bytes(4, "little") for i in range(N)}
    for k, v in want.items():
        f.queue_put(k, v)
    f.close()
    c.close()
    return want


def _read(cluster, cache, name: str):
    """A new client's (a new process's) view of ``name`` from the copies in
    ``cache``: every name and record, and its locator."""
    # no age check while it reads (3,000 GETs can take longer than the default 1 s on a loaded
    # machine, and a check's "current" would then be the locator's last fetch, not the open's)
    c = cluster.client(metadata="fetch", metadata_cache=str(cache), metadata_max_age_s=3600)
    f = c.open(name)
    got = {k: f.get(k) for k in f.names()}
    f.close()
    return got, c.tracker.locator


def _tear(path, how: str) -> None:
    size = path.stat().st_size
    if how == "zeroed pages":  # the name and size on disk, some of the bytes not (delayed allocation)
        with open(path, "r+b") as f:
            f.seek(size // 2 - 16384)
            f.write(bytes(32768))
    elif how == "short":
        os.truncate(path, size // 2)
    else:  # "no seal": a copy whose seal the crash lost, or one made before seals
        copy_seal.seal_path(path).unlink()


@pytest.mark.parametrize("how", ["zeroed pages", "short", "no seal"])
def test_a_copy_torn_by_a_machine_crash_is_fetched_again_never_read(module_cluster, tmp_path, reboot, caplog, how):
    name = f"/crash/torn-{how.replace(' ', '-')}"
    want = _file(module_cluster, name)
    cache = tmp_path / "cache"
    got, loc = _read(module_cluster, cache, name)
    assert got == want and loc.last.kind == "snapshot"
    copy = loc.path(next(iter(loc.copies())))
    reboot()
    _tear(copy, how)
    caplog.set_level(logging.WARNING, logger="st.client.copies")
    got, loc = _read(module_cluster, cache, name)
    assert got == want
    assert loc.last is not None and loc.last.kind == "snapshot", "the torn copy was read, not fetched again"
    assert "is not known whole after a restart of the machine" in caplog.text
    db = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()


def test_a_whole_copy_from_before_a_reboot_is_checked_and_kept(module_cluster, tmp_path, reboot):
    """Its bytes match its seal's CRC-32C: read as it is (the tracker says
    "current", no bytes move) and sealed for the new boot; a copy brought
    forward by changes before the reboot (no CRC names its bytes) is
    fetched again whole."""
    name = "/crash/whole"
    want = _file(module_cluster, name)
    cache = tmp_path / "cache"
    got, loc = _read(module_cluster, cache, name)
    assert got == want
    copy = loc.path(next(iter(loc.copies())))
    reboot()
    got, loc = _read(module_cluster, cache, name)
    assert got == want
    assert loc.bytes_received == 0 and (loc.last is None or loc.last.kind == "current"), loc.last
    assert copy_seal.whole(copy)  # sealed for this boot now: no second check
    w = module_cluster.client()
    f = w.open(name)
    f.put("later", b"after the copy")
    f.close()
    got, loc = _read(module_cluster, cache, name)
    assert got == {**want, "later": b"after the copy"} and loc.last.kind == "changes"
    reboot()
    got, loc = _read(module_cluster, cache, name)
    assert got == {**want, "later": b"after the copy"}
    assert loc.last is not None and loc.last.kind == "snapshot"
