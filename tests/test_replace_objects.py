"""Replacing a name whose current or new version is a striped object
(docs/striping.md, "Replacing an object"): one tracker transaction removes
the current version (a record, or an object with its stripes: history)
and commits the new records and the new object's row, under the writer
lease; readers see the old version or the new one, never a mix; a
replacement that fails leaves the old one."""

from __future__ import annotations

import io
import os
import sqlite3
import threading

import pytest

from st_py.core.infofile import name_stats, stripe_name

KIB = 1024


def _writer(tmp_path):
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1}, [(0, "p", "h:1"), (1, "q", "h:2")])
    return InfofileWriter(path), path


def _stripes(obj: str, sizes: list[int], tag: str) -> list[tuple]:
    """New stripe records of ``obj`` stored under names of their own
    (``stored_as``, ``new_only``): what a replacement commits."""
    return [
        (
            stripe_name(obj, i),
            size,
            100 + i,
            [i % 2],
            (),
            f".st-version/new-{tag}/{stripe_name(obj, i)}",
            None,
            None,
            True,
        )
        for i, size in enumerate(sizes)
    ]


def _state(path) -> tuple:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        objs = conn.execute("SELECT name, size, stripes FROM objects ORDER BY name").fetchall()
        recs = conn.execute("SELECT name, size, stored_as FROM records ORDER BY name").fetchall()
        gen = conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]
        hist = conn.execute("SELECT name, size, stripes FROM object_history ORDER BY until").fetchall()
        return objs, recs, int(gen), hist, name_stats(conn)
    finally:
        conn.close()


def test_one_transaction_replaces_an_object_a_record_and_keeps_the_old_as_history(tmp_path):
    w, path = _writer(tmp_path)
    w.commit([(stripe_name("obj", i), s, 10 + i, [0]) for i, s in enumerate((100, 100, 50))])
    w.commit_objects([("obj", 250, 100, 3, 7)])
    w.commit([("rec", 40, 5, [1])])
    # the object by an object of two stripes
    gen, new, conflicts, removed, _ = w.commit_replacing(
        _stripes("obj", [100, 20], "a"), ["obj"], "", False, [("obj", 120, 100, 2, 9)]
    )
    assert not conflicts and "obj" in new and removed == 1
    objs, recs, g, hist, stats = _state(path)
    assert objs == [("obj", 120, 2)] and hist == [("obj", 250, 3)]
    assert [r for r in recs if r[0].startswith(".st-stripe/obj/")] == [
        (stripe_name("obj", 0), 100, f".st-version/new-a/{stripe_name('obj', 0)}"),
        (stripe_name("obj", 1), 20, f".st-version/new-a/{stripe_name('obj', 1)}"),
    ]
    assert g == gen and w.stats() == stats == (2, 40 + 120)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    seq, until = conn.execute("SELECT o.commit_seq, h.until FROM objects o, object_history h").fetchone()
    conn.close()
    assert seq == until == gen  # no generation between the old version and the new: never neither
    from st_py.core.infofile import InfofileReader

    r = InfofileReader(path)  # a GET_LOCAL plan's objects: as of its generation, a replaced one as it was
    assert [(o.size, o.stripes) for o in r.objects(gen - 1)] == [(250, 3)]
    assert [(o.size, o.stripes) for o in r.objects(gen)] == [(120, 2)]
    r.close()
    # a record by an object, then that object by a record
    w.commit_replacing(_stripes("rec", [100, 1], "b"), ["rec"], "", False, [("rec", 101, 100, 2, 3)])
    objs, recs, _, _, stats = _state(path)
    assert ("rec", 101, 2) in objs and "rec" not in [r[0] for r in recs] and w.stats() == stats
    w.commit_replacing([("rec", 8, 1, [0], (), ".st-version/new-c/rec", None, None, True)], ["rec"], "", False)
    objs, recs, _, _, stats = _state(path)
    assert [o[0] for o in objs] == ["obj"] and ("rec", 8, ".st-version/new-c/rec") in recs
    assert not [r for r in recs if r[0].startswith(".st-stripe/rec/")] and w.stats() == stats == (2, 120 + 8)
    w.close()


def test_an_object_that_cannot_be_committed_commits_nothing_of_the_replacement(tmp_path):
    w, path = _writer(tmp_path)
    w.commit([(stripe_name("obj", i), 100, 10 + i, [0]) for i in range(2)])
    w.commit_objects([("obj", 200, 100, 2, 7)])
    before = _state(path)
    # three stripes declared, two sent: the old object, its stripes and the generation stay
    gen, new, conflicts, removed, nbytes = w.commit_replacing(
        _stripes("obj", [100, 100], "a"), ["obj"], "rid-1", False, [("obj", 300, 100, 3, 9)]
    )
    assert [c.name for c in conflicts] == ["obj"] and "2 of its 3 stripes" in conflicts[0].reason
    assert (new, removed, nbytes) == (set(), 0, 0) and gen == before[2]
    assert _state(path) == before and w.stats() == before[4]
    # the same request id again is not taken for applied: it was rolled back
    gen, new, conflicts, *_ = w.commit_replacing(
        _stripes("obj", [100, 100, 100], "b"), ["obj"], "rid-1", False, [("obj", 300, 100, 3, 9)]
    )
    assert not conflicts and _state(path)[0] == [("obj", 300, 3)]
    w.close()


class _Broken(io.RawIOBase):
    """A source that fails after ``n`` bytes (a client gone mid-body)."""

    def __init__(self, data: bytes, n: int):
        self.src, self.n = io.BytesIO(data), n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.src.tell() >= self.n:
            raise OSError("the source went away")
        got = self.src.readinto(memoryview(b)[: self.n - self.src.tell()])
        return got or 0


def test_replacing_objects_and_records_through_the_client(cluster):
    c = cluster.client()
    v1, v2, v3 = os.urandom(300 * KIB), os.urandom(200 * KIB), os.urandom(150 * KIB)
    with c.create("/rep/a", "x2") as f:
        f.put_object("big", v1, stripe_size=128 * KIB)
        f.put("small", b"s" * 1000)
        f.flush()
    c.snapshot("/rep/a", "before")
    with c.open("/rep/a") as f:
        meta = f.put_object("big", v2, stripe_size=64 * KIB, replace=True, meta={"content-type": "x/y"})
        assert (meta.size, meta.stripes) == (len(v2), 4)
        assert f.get("big") == v2 and f.object_meta("big").stripes == 4
        f.put_object("small", v3, stripe_size=64 * KIB, replace=True)  # a record by an object
        assert f.get("small") == v3 and f.record_meta("small") is None
        f.put("big", b"tiny", replace=True)  # an object by a record
        assert f.get("big") == b"tiny" and f.object_meta("big") is None
        assert sorted(f.names()) == ["big", "small"]  # each name once, no stripe, no version's name
        with pytest.raises(OSError, match="went away"):  # a failed replacement leaves the current version
            f.put_object("small", _Broken(os.urandom(300 * KIB), 100 * KIB), stripe_size=64 * KIB, replace=True)
        assert f.get("small") == v3 and f.object_meta("small").size == len(v3)
    with c.open("/rep/a") as f:  # another handle, the committed state
        assert f.get("small") == v3 and f.get("big") == b"tiny"
        got = {}
        for s in f.local_stripes():  # every peer is on this host: GET_LOCAL reveals every stripe
            got.setdefault(s.object, {})[s.index] = f.read_local_stripe(s)
        assert b"".join(got["small"][i] for i in sorted(got["small"])) == v3 and "big" not in got
    with c.open("/rep/a", as_of="before") as old:  # history: the snapshot reads the old versions
        assert old.get("big") == v1 and old.get("small") == b"s" * 1000
    with c.open("/rep/a") as f:
        f.delete("small")
        f.delete("big")
    with c.open("/rep/a") as f:
        assert f.names() == []


def test_readers_see_the_old_object_or_the_new_never_a_mix(cluster):
    c = cluster.client()
    versions = [os.urandom(256 * KIB + i * 7 * KIB) for i in range(6)]
    with c.create("/rep/b", "x1") as f:
        f.put_object("obj", versions[0], stripe_size=32 * KIB)
    stop, seen, errors = threading.Event(), [], []

    def read():
        r = cluster.client()
        try:
            while not stop.is_set():
                with r.open("/rep/b") as h:
                    seen.append(versions.index(h.get("obj")))  # ValueError: bytes of no version
        except Exception as e:  # noqa: BLE001 - the test's verdict
            errors.append(e)

    t = threading.Thread(target=read)
    t.start()
    try:
        with c.open("/rep/b") as f:
            for v in versions[1:]:
                f.put_object("obj", v, stripe_size=32 * KIB, replace=True)
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert seen and seen == sorted(seen)  # whole versions, in the order they were committed
    with c.open("/rep/b") as f:
        assert f.get("obj") == versions[-1]


def test_a_replacement_waits_for_no_lease_another_writer_holds(cluster):
    from st_py.errors import LeaseHeldError

    c = cluster.client()
    with c.create("/rep/c", "x1") as f:
        f.put_object("obj", os.urandom(100 * KIB), stripe_size=32 * KIB)
    with c.open("/rep/c") as holder, c.open("/rep/c") as other:
        holder.acquire_lease()
        before = other.get("obj")
        with pytest.raises(LeaseHeldError):
            other.put_object("obj", os.urandom(10 * KIB), stripe_size=32 * KIB, replace=True)
        assert other.get("obj") == before


def test_an_open_object_keeps_the_version_it_opened(cluster):
    """A reader opened before a replacement reads the version it opened,
    stripe by stripe, whole (``StFile.open``: fsspec, Dask and Ray's
    readers, pyarrow); a GET after reads the new one."""
    c = cluster.client()
    v1, v2 = os.urandom(200 * KIB), os.urandom(260 * KIB)
    with c.create("/rep/d", "x1") as f:
        f.put_object("obj", v1, stripe_size=64 * KIB)
    with c.open("/rep/d") as r, c.open("/rep/d") as w:
        reader = r.open("obj")
        head = reader.read(10)  # stripe 0 fetched, the rest not yet
        w.put_object("obj", v2, stripe_size=32 * KIB, replace=True)
        assert head + reader.read() == v1
        assert r.get("obj") == v2 and r.open("obj").read() == v2


def test_storetorrent_put_replace_takes_objects_as_records(cluster, tmp_path, monkeypatch):
    """``storetorrent put --replace`` (``upload``): a local file over an
    object and a large local file over a record store new versions, where
    each such name failed before."""
    from st_py.client import upload as up

    c = cluster.client()
    with c.create("/rep/e", "x1") as f:
        f.put_object("was-object.bin", os.urandom(100 * KIB), stripe_size=32 * KIB)
        f.put("was-record.bin", b"r")
    (tmp_path / "was-object.bin").write_bytes(b"now a record")
    big = os.urandom(40 * KIB)
    (tmp_path / "was-record.bin").write_bytes(big)
    monkeypatch.setattr(up, "STRIPE_THRESHOLD", 32 * KIB)  # "large" for the test: stored as a striped object
    with c.open("/rep/e") as f:
        items = up.local_items([tmp_path / "was-object.bin", tmp_path / "was-record.bin"])
        report = up.upload(f, items, replace=True)
        assert not report.failures and sorted(report.stored) == ["was-object.bin", "was-record.bin"]
    with c.open("/rep/e") as f:
        assert f.get("was-object.bin") == b"now a record" and f.object_meta("was-object.bin") is None
        assert f.get("was-record.bin") == big and f.object_meta("was-record.bin") is not None


def test_a_replacement_in_a_file_with_filters_reads_back_through_every_way(cluster):
    """In a compressed and encrypted file (docs/filters.md) the twin handle
    stores the new stripes with the file's key, and GET, ``open`` and
    GET_LOCAL's stripes read the new version back."""
    key = bytes(range(32))
    c = cluster.client(encryption_key=key)
    v1, v2 = os.urandom(90 * KIB), os.urandom(50 * KIB) + bytes(70 * KIB)
    with c.create("/rep/f", "x2", filters=["zstd", "aes-256-gcm"]) as f:
        f.put_object("obj", v1, stripe_size=32 * KIB)
    with c.open("/rep/f") as f:
        f.put_object("obj", v2, stripe_size=32 * KIB, replace=True)
    with c.open("/rep/f") as f:
        assert f.get("obj") == v2 and f.open("obj").read() == v2
        parts = {s.index: f.read_local_stripe(s) for s in f.local_stripes() if s.object == "obj"}
        assert b"".join(parts[i] for i in sorted(parts)) == v2


@pytest.mark.parametrize("when", ["before_the_commit", "after_the_commit"])
def test_a_tracker_killed_around_a_replacements_commit_commits_it_once(make_cluster, monkeypatch, when):
    """The tracker SIGKILLed and started again once a replacement's new
    stripes are stored: before its commit reaches the tracker, or after the
    tracker applied it and before the reply came back (the reply lost, the
    client sends the commit again with the same request id). Either way
    the new version is committed once: readers get it whole, the old one is
    history once (one ``object_history`` row, one snapshot read of it), and
    no stripe of either version is missing."""
    from st_py.client.file_context import FileContext

    cluster = make_cluster(3)
    c = cluster.client()
    v1, v2 = os.urandom(200 * KIB), os.urandom(150 * KIB + 11)
    with c.create("/rep/k", "x2") as f:
        f.put_object("obj", v1, stripe_size=64 * KIB)
    c.snapshot("/rep/k", "v1")
    real, killed = FileContext.file_tracker_call, []

    def call(self, method, *args, **kwargs):
        if method != "commit" or not kwargs.get("objects") or killed:
            return real(self, method, *args, **kwargs)
        killed.append(kwargs["request_id"])
        if when == "before_the_commit":
            cluster.restart_tracker()
            return real(self, method, *args, **kwargs)
        real(self, method, *args, **kwargs)  # applied; its reply is lost with the tracker
        cluster.restart_tracker()
        return real(self, method, *args, **kwargs)

    monkeypatch.setattr(FileContext, "file_tracker_call", call)
    with c.open("/rep/k") as f:
        meta = f.put_object("obj", v2, stripe_size=64 * KIB, replace=True)
    assert killed and (meta.size, meta.stripes) == (len(v2), 3)
    monkeypatch.undo()
    cluster.wait_for_peers(3)
    with c.open("/rep/k") as f:
        assert f.get("obj") == v2 and f.open("obj").read() == v2
        assert f.names() == ["obj"]
        path = f.infofile().path
    _objs, recs, _g, hist, _stats = _state(path)
    assert hist == [("obj", len(v1), 4)]  # the old version became history once
    assert len([r for r in recs if r[0].startswith(".st-stripe/obj/")]) == 3
    with c.open("/rep/k", as_of="v1") as old:
        assert old.get("obj") == v1
