"""Striped objects (docs/striping.md) against real trackers and peers: an
object as stripes round-robin over the peers, visible only once every stripe
is committed; whole and range reads; GET_LOCAL's local stripes; holders
killed during PUT and GET; an object of more than 2 GiB."""

import io
import os
import time
from pathlib import Path

import google_crc32c
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import kill_a_writer_midway, stripe_names

from st_py.errors import BadNameError, ObjectBeingWrittenError, RecordExistsError

MiB = 1 << 20


class Source(io.RawIOBase):
    """``size`` bytes of deterministic data, read like a file; calls
    ``on_read(n)`` before the n-th read (a hook to kill a peer mid-PUT)."""

    def __init__(self, size: int, block: bytes, on_read=None):
        self.size, self.block, self.pos, self.reads, self.on_read = size, block, 0, 0, on_read
        self.crc = 0

    def readable(self):
        return True

    def read(self, n=-1):
        self.reads += 1
        if self.on_read:
            self.on_read(self.reads)
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        out = bytearray()
        while len(out) < n:
            i, off = divmod(self.pos + len(out), len(self.block))
            piece = self.block[off : off + n - len(out)]
            out += i.to_bytes(8, "little")[: len(piece)] + piece[8:] if off == 0 else piece
        self.pos += n
        self.crc = google_crc32c.extend(self.crc, bytes(out))
        return bytes(out)


def test_object_round_trip_range_reads_and_local_stripes(cluster):
    c = cluster.client()
    data = os.urandom(10 * MiB + 12345)
    with c.create("/obj/a", "x2") as f:
        meta = f.put_object("big.bin", data, stripe_size=MiB)
        assert meta.stripes == 11 and meta.size == len(data)
        f.put("small", b"a record")
        with pytest.raises(RecordExistsError):
            f.put_object("big.bin", data, stripe_size=MiB)
        with pytest.raises(BadNameError, match="stripes"):
            f.put(".st-stripe/big.bin/00000000", b"x")
    with c.open("/obj/a") as f:
        assert f.names() == ["big.bin", "small"]  # stripes are not records
        assert len(f) == 2
        assert f.get("big.bin") == data
        r = f.open("big.bin")
        r.seek(5 * MiB + 100)
        assert r.read(2 * MiB) == data[5 * MiB + 100 : 7 * MiB + 100]
        assert r.stripes_fetched == 3  # only the stripes the range touches
        r.seek(-10, io.SEEK_END)
        assert r.read() == data[-10:]
        stripes = f.local_stripes()
        assert [s.index for s in stripes] == list(range(11))  # each stripe once across the peers
        assert sum(s.size for s in stripes) == len(data)
        assert b"".join(Path(s.path).read_bytes() for s in stripes) == data
        assert len({s.peer for s in stripes}) > 1  # round-robin over the peers
        assert [r.name for r in f.get_local()] == ["small"]  # GET_LOCAL of records leaves stripes out
        f.delete("big.bin")
        assert f.names() == ["small"] and f.local_stripes() == []
        assert f.get_local(stripes=True) == [r for r in f.get_local(stripes=True) if r.name == "small"]


def test_an_object_read_from_a_pipe_is_whole(cluster):
    """A pipe gives at most its buffer (64 KiB) per read, fewer than a
    stripe: every stripe is filled from several reads, and the object ends
    only at the pipe's end (one short read once ended it there, silently)."""
    import threading

    data = os.urandom(3 * MiB + 777)
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb", buffering=0) as out:
            for i in range(0, len(data), 100_000):
                out.write(data[i : i + 100_000])

    t = threading.Thread(target=feed)
    t.start()
    with cluster.client().create("/obj/pipe", "x1") as f, os.fdopen(r, "rb", buffering=0) as src:
        meta = f.put_object("piped.bin", src, stripe_size=MiB)
    t.join()
    assert (meta.size, meta.stripes) == (len(data), 4)
    with cluster.client().open("/obj/pipe") as f:
        assert f.get("piped.bin") == data


def test_a_put_object_that_fails_midway_leaves_no_stripe_and_the_name_free(cluster):
    """A source that fails after 3 of its stripes: put_object raises the
    source's error, the stripes it had stored are deleted (none committed),
    and a put_object of the same name with other bytes then works (stripe
    names are write-once: they once blocked it for good)."""

    class Broken(io.RawIOBase):
        def __init__(self):
            self.left = 3

        def readable(self):
            return True

        def read(self, n=-1):
            if not self.left:
                raise OSError("the source's disk failed")
            self.left -= 1
            return os.urandom(n)

    c = cluster.client()
    with c.create("/obj/broken", "x2") as f:
        with pytest.raises(OSError, match="disk failed"):
            f.put_object("o.bin", Broken(), stripe_size=MiB)
        f.flush()  # nothing of the failed put is reported again
        assert f.infofile().records_between(".st-stripe/o.bin/", ".st-stripe/o.bin0").fetchall() == []
        data = os.urandom(5 * MiB + 3)
        f.put_object("o.bin", data, stripe_size=MiB)
    with c.open("/obj/broken") as f:
        assert f.get("o.bin") == data and f.names() == ["o.bin"]


def test_stripes_a_killed_writer_left_are_cleared_by_the_next_put_object(cluster, tmp_path):
    """A writer SIGKILLed midway through a put_object leaves committed
    stripes and no object (docs/striping.md, "Stripes a writer left"). A
    put_object of the name while the newest is younger than
    ``writer_silent_s`` is refused (ObjectBeingWrittenError: that writer may
    be at work) and changes nothing; one after it clears them and succeeds
    with other bytes (they once refused it: stripe names are write-once);
    the object reads back whole and only its own stripes are left."""
    c = cluster.client()
    with c.create("/obj/dead", "x2") as f:
        f.put("other", b"kept")
    left = kill_a_writer_midway(c, cluster.tracker_addr, "/obj/dead", "o.bin", tmp_path)
    with c.open("/obj/dead") as f:
        assert stripe_names(f, "o.bin") == left and f.names() == ["other"]
        data = os.urandom(5 * MiB + 3)
        # within the writer's silence limit it may still be at work: refused, nothing stored
        with pytest.raises(ObjectBeingWrittenError) as e:
            f.put_object("o.bin", data, stripe_size=MiB)
        assert e.value.object == "o.bin" and e.value.stripes == len(left) and 0 < e.value.retry_after_s <= 60
        assert stripe_names(f, "o.bin") == left
        time.sleep(0.6)  # the writer silent for longer than the limit below
        meta = f.put_object("o.bin", data, stripe_size=MiB, writer_silent_s=0.5)  # taken for dead: cleared
        assert meta.stripes == 6
    with c.open("/obj/dead") as f:
        assert f.get("o.bin") == data and f.names() == ["o.bin", "other"]
        assert stripe_names(f, "o.bin") == [f".st-stripe/o.bin/{i:08d}" for i in range(6)]


def test_a_tracker_killed_after_the_clearing_and_new_stripes_on_the_cleared_holders(
    make_cluster, tmp_path, monkeypatch
):
    """Stripes a killed writer left in a 2-peer x2 file (which keeps
    history: the cleared copies stay on both peers for older readers) are
    cleared by a put_object, and the tracker is SIGKILLed and restarted
    right after the clearing's delete, before the new stripes are stored.
    The put_object goes on through the restart; the object reads back
    whole; each new stripe whose name a cleared one had is stored under a
    name of its own on both peers (the snapshots rule: a copy kept for
    history is never replaced), and only the new object's stripes are
    committed (docs/striping.md, "Stripes a writer left")."""
    from st_py.client.record_writer import RecordWriter

    cluster = make_cluster(2)
    c = cluster.client()
    c.create("/obj/restart", "x2").close()
    left = kill_a_writer_midway(c, cluster.tracker_addr, "/obj/restart", "o.bin", tmp_path)
    clear = RecordWriter.delete_stripes
    restarted = []

    def clear_then_kill_the_tracker(self, names):
        kept = clear(self, names)
        if not restarted:
            restarted.append(names)
            cluster.restart_tracker()
        return kept

    monkeypatch.setattr(RecordWriter, "delete_stripes", clear_then_kill_the_tracker)
    data = os.urandom(5 * MiB + 3)
    with c.open("/obj/restart") as f:
        assert f.put_object("o.bin", data, stripe_size=MiB, writer_silent_s=0).stripes == 6
    assert restarted == [left]
    with c.open("/obj/restart") as f:
        assert f.get("o.bin") == data and f.names() == ["o.bin"]
        assert stripe_names(f, "o.bin") == [f".st-stripe/o.bin/{i:08d}" for i in range(6)]
        metas = f.infofile().lookup_many(stripe_names(f, "o.bin"))
    for name, m in metas.items():
        assert sorted(m.peers) == [0, 1], name  # both copies on the two peers, which hold the cleared ones
        assert (m.key != name) == (name in left), (name, m.key)  # the cleared names stay the old copies'


def test_the_tracker_never_deletes_the_stripes_of_a_committed_object(cluster):
    """A delete of an object's stripe records while the object is committed
    deletes none of them (``DeleteReply.kept`` names them) and the object
    reads back whole: a writer clearing a dead writer's stripes can never rob
    an object committed meanwhile. With the object in the same request, its
    stripes go with it."""
    c = cluster.client()
    data = os.urandom(3 * MiB + 1)
    with c.create("/obj/keep", "x1") as f:
        f.put_object("o.bin", data, stripe_size=MiB)
        f.put("r", b"plain")
        name, file_id, t = f.name, f.file_id, f._tracker
        stripes = stripe_names(f, "o.bin")
    assert len(stripes) == 4
    reply = t.delete(name, file_id, records=[*stripes, "r"])
    assert list(reply.kept) == stripes and reply.deleted == 1  # "r" alone
    with c.open("/obj/keep") as f:
        assert f.get("o.bin") == data and f.names() == ["o.bin"] and stripe_names(f, "o.bin") == stripes
    reply = t.delete(name, file_id, records=["o.bin", *stripes])
    assert list(reply.kept) == [] and reply.deleted == 5
    with c.open("/obj/keep") as f:
        assert f.names() == [] and stripe_names(f, "o.bin") == []


def test_a_put_object_whose_last_flush_fails_leaves_no_stripe(cluster):
    """A handle's put_object whose final flush raises (here for a record
    the handle queued before, which another writer committed with other
    bytes meanwhile): it raises that error and deletes the stripes it had
    committed, so the name stays free. Before, its flush was outside the
    cleanup: the object was not committed and its stripes stayed, refusing
    the name to any other bytes for good."""
    c = cluster.client()
    c.create("/obj/late", "x2").close()
    with c.open("/obj/late") as f1, cluster.client() as c2, c2.open("/obj/late") as f2:
        f1.queue_put("x", b"mine")  # sent at f1's next call
        f2.put("x", b"theirs")
        f2.flush()
        with pytest.raises(RecordExistsError, match=r"record '?x'?\b"):
            f1.put_object("o.bin", os.urandom(3 * MiB), stripe_size=MiB)
        f1.flush()  # nothing reported again
        assert f1.infofile().records_between(".st-stripe/o.bin/", ".st-stripe/o.bin0").fetchall() == []
        data = os.urandom(2 * MiB + 1)
        f2.put_object("o.bin", data, stripe_size=MiB)
    with c.open("/obj/late") as f:
        assert f.get("o.bin") == data and f.get("x") == b"theirs"


def test_of_two_writers_of_one_new_object_the_first_to_commit_its_stripe_0_stores_it(cluster):
    """Writer A stores stripe 0 of object ``o`` and is held before it reads
    its next stripe: put_object commits the first stripe before reading
    on, so by then A's stripe 0 is committed, and writer B (another
    client) is refused before its first stripe (``ObjectBeingWrittenError``:
    A's stripes are younger than ``writer_silent_s``), having read nothing
    of its source and committed nothing; A, let
    go, stores its object whole, every stripe its own. Before, B stored
    and committed its stripes while A waited, and two writers of one name
    at once could each win some stripes and both fail (docs/striping.md)."""
    import threading

    from st_py.core.infofile import stripe_range

    cluster.client().create("/obj/race", "x2").close()
    held, go = threading.Event(), threading.Event()

    def hold(n):
        if n == 2:  # A's read of stripe 1
            held.set()
            assert go.wait(60)

    src_a = Source(5 * MiB + 3, os.urandom(MiB), on_read=hold)
    src_b = Source(5 * MiB + 3, os.urandom(MiB))
    done: list = []

    def write_a():
        with cluster.client() as c, c.open("/obj/race") as f:
            done.append(f.put_object("o", src_a, stripe_size=MiB))

    a = threading.Thread(target=write_a)
    a.start()
    try:
        assert held.wait(60)
        with cluster.client() as c, c.open("/obj/race") as f, pytest.raises(ObjectBeingWrittenError):
            f.put_object("o", src_b, stripe_size=MiB)
        assert src_b.reads == 0
    finally:
        go.set()
        a.join(60)
    assert done and done[0].crc32c == src_a.crc
    with cluster.client() as c, c.open("/obj/race") as f:
        assert google_crc32c.value(f.get("o")) == src_a.crc
        rows = list(f.infofile().records_between(*stripe_range("o")))
    assert len(rows) == done[0].stripes == 6


def test_pyarrow_reads_a_parquet_objects_footer_and_one_column(cluster):
    c = cluster.client()
    n = 400_000
    t = pa.table(
        {"a": pa.array(range(n)), "b": [os.urandom(16) for _ in range(n)], "c": pa.array([float(i) for i in range(n)])}
    )
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=100_000)
    blob = buf.getvalue()
    with c.create("/obj/pq", "x2") as f:
        meta = f.put_object("t.parquet", blob, stripe_size=256 * 1024)
    with c.open("/obj/pq") as f:
        r = f.open("t.parquet")
        got = pq.ParquetFile(r).read(columns=["a"])
        assert got.column("a").to_pylist() == list(range(n))
        assert r.stripes_fetched < meta.stripes / 2, (r.stripes_fetched, meta.stripes)


def test_holder_killed_during_put_and_during_get(make_cluster):
    cluster = make_cluster(4)
    c = cluster.client(timeout=10.0)
    block = os.urandom(MiB)
    killed = []

    def kill_at(n):
        if n == 10 and not killed:
            killed.append(cluster.kill_peer(2))

    src = Source(40 * MiB + 7, block, on_read=kill_at)
    with c.create("/obj/kill", "x3") as f:  # two peers die in this test: x3 tolerates it
        meta = f.put_object("o", src, stripe_size=MiB)
    assert killed and meta.crc32c == src.crc
    with cluster.client(timeout=10.0) as c2, c2.open("/obj/kill") as f:
        r = f.open("o")
        first = r.read(3 * MiB)
        killed.append(cluster.kill_peer(3))  # another holder, mid-read
        rest = r.read()
        assert google_crc32c.value(first + rest) == meta.crc32c and len(first + rest) == meta.size


def test_an_object_of_more_than_2_gib(make_cluster):
    cluster = make_cluster(4)
    c = cluster.client()
    src = Source(2 * 1024 * MiB + 3 * MiB + 5, os.urandom(4 * MiB))
    with c.create("/obj/huge", "x1") as f:
        meta = f.put_object("huge.bin", src, stripe_size=32 * MiB)
    assert meta.size > 2 * 1024 * MiB and meta.stripes == 65
    with c.open("/obj/huge") as f:
        data = f.get("huge.bin")
        assert len(data) == meta.size and google_crc32c.value(data) == src.crc
        del data
        assert sum(s.size for s in f.local_stripes()) == meta.size
