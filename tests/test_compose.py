"""Composing an object of committed records with no byte copied
(docs/striping.md, "Composing an object"; ``StFile.put_parts``,
``StFile.compose``): the parts' copies become the object's stripes where
they are, in one tracker transaction."""

from __future__ import annotations

import os
import time

import google_crc32c
import pytest
from checks import admin_scrub
from conftest import poll_for

from st_py.core.crc32c_combine import combine_all
from st_py.core.infofile import stripe_name
from st_py.errors import RecordExistsError

KIB = 1024


def test_the_crc_of_pieces_combined_is_the_crc_of_their_bytes():
    for sizes in ([0], [1], [5, 0, 7], [4096] * 5 + [17], [65536, 65536, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9]):
        pieces = [os.urandom(n) for n in sizes]
        got = combine_all((google_crc32c.value(p), len(p)) for p in pieces)
        assert got == google_crc32c.value(b"".join(pieces)), sizes


def test_parts_become_an_object_where_they_are_and_stay_through_the_scrubber(make_cluster):
    """Parts stored hidden, composed: the object reads back whole (get,
    open, GET_LOCAL's stripes, another client), its stripes are the parts'
    copies (stored as the parts' names), the parts and the part left out
    are gone from the file, and the peers' scrubbers (``--scrub-age 0``,
    history dropped) keep every copy the object uses."""
    cluster = make_cluster(3, peer_args=["--scrub-age", "0"], tracker_args=["--history-age", "0.5"])
    c = cluster.client()
    parts = [os.urandom(64 * KIB) for _ in range(3)] + [os.urandom(10 * KIB + 5)]
    whole = b"".join(parts)
    with c.create("/comp/a", "x2") as f:
        names = [n for i, p in enumerate(parts) for n in f.put_parts(f"up-1/{i:05d}", p)]
        assert names == [stripe_name(f"up-1/{i:05d}", 0) for i in range(4)]
        for i in (0, 1, 2, 3, 0, 1, 2, 3):  # again: a retry, nothing new (placed anew, a put would be refused)
            assert f.put_parts(f"up-1/{i:05d}", parts[i]) == names[i : i + 1]
        with pytest.raises(RecordExistsError, match="other bytes"):
            f.put_parts("up-1/00001", parts[2])  # the same name, other bytes
        left_out = f.put_parts("up-1/99999", b"a part the object leaves out")
        assert f.names() == []  # hidden: in no listing
        stored = {n: m.key for n, m in f.records_meta(names).items()}
        obj = f.compose("obj", names, meta={"content-type": "x/y"}, delete=left_out)
    assert (obj.size, obj.stripe_size, obj.stripes) == (len(whole), 64 * KIB, 4)
    assert obj.crc32c == google_crc32c.value(whole)
    with c.open("/comp/a") as f:
        assert f.get("obj") == whole and f.open("obj").read() == whole
        assert f.names() == ["obj"] and f.object_meta("obj") == obj
        assert f.records_meta(names + left_out) == {}  # the parts' names are gone
        metas = f.records_meta([stripe_name("obj", i) for i in range(4)])
        assert [metas[stripe_name("obj", i)].key for i in range(4)] == [stored[n] for n in names]  # no copy
        got = {s.index: f.read_local_stripe(s) for s in f.local_stripes() if s.object == "obj"}
        assert b"".join(got[i] for i in sorted(got)) == whole
    time.sleep(0.6)
    with c.open("/comp/a") as f:
        f.put("later", b"a write after --history-age: the tracker drops the history")
    removed = sum(admin_scrub(cluster, a)["removed_uncommitted"] for a in cluster.peer_addrs)
    # the left-out part's two copies, nothing of the object (a retry stored nothing):
    held = [p for p in cluster.data_dir.glob("peers/*/files/**/*") if p.is_file() and "up-1" in str(p)]
    assert removed >= 2 and len(held) == 4 * 2, (removed, held)
    r = cluster.client()
    with r.open("/comp/a") as f:
        assert f.get("obj") == whole


def test_one_part_is_a_record_and_compose_replaces_under_the_lease(cluster):
    c = cluster.client()
    with c.create("/comp/b", "x2") as f:
        f.put("rec", b"old record")
        f.flush()
    c.snapshot("/comp/b", "before")
    with c.open("/comp/b") as f:
        one = f.put_parts("u/1", b"the new bytes")
        meta = f.compose("rec", one, replace=True, meta={"k": "v"})
        assert meta.name == "rec" and f.get("rec") == b"the new bytes"
        assert f.object_meta("rec") is None and f.names() == ["rec"]
        two = f.put_parts("u/2", os.urandom(40 * KIB)) + f.put_parts("u/3", b"tail")
        obj = f.compose("rec", two, replace=True)  # a record replaced by an object
        assert obj.stripes == 2 and f.get("rec")[-4:] == b"tail"
    with c.open("/comp/b", as_of="before") as old:
        assert old.get("rec") == b"old record"


def test_what_cannot_be_composed_changes_nothing(cluster):
    from st_py.errors import InvalidOptionError, RecordExistsError, RecordNotFoundError

    c = cluster.client()
    with c.create("/comp/c", "x1") as f:
        a = f.put_parts("u/a", os.urandom(10 * KIB))
        b = f.put_parts("u/b", os.urandom(20 * KIB))
        f.put("taken", b"x")
        f.flush()
        with pytest.raises(InvalidOptionError, match="larger than the others") as e:
            f.compose("obj", a + b)  # the last part larger: not stripes
        assert e.value.option == "parts"
        with pytest.raises(InvalidOptionError, match="one size"):
            f.compose("obj", a + b + a)
        with pytest.raises(RecordNotFoundError):
            f.compose("obj", a + ["u/none"])
        with pytest.raises(RecordExistsError):
            f.compose("taken", b + a)  # write-once without replace
        assert f.names() == ["taken"] and len(f.records_meta(a + b)) == 2  # the parts are there still
    with c.create("/comp/z", "x1", filters=["zstd"]) as z:
        p = z.put_parts("u/a", b"z" * 100)
        with pytest.raises(InvalidOptionError, match="filters"):
            z.compose("obj", p + p)


def test_a_composed_object_outlives_a_lost_peer_through_repair_and_drain(make_cluster):
    """A composed object's stripes are copies stored under the parts'
    names: a peer lost, repair stores each lost copy again (under the same
    stored name), a drain moves another peer's off, and the object reads
    back whole after both, with the lost and the drained peers gone (no
    copy left on either)."""
    from st_py.maintenance.drain import drain
    from st_py.maintenance.repair import repair_file

    cluster = make_cluster(4)
    c = cluster.client()
    parts = [os.urandom(32 * KIB) for _ in range(5)] + [os.urandom(7 * KIB)]
    whole = b"".join(parts)
    with c.create("/comp/r", "x2") as f:
        names = [n for i, p in enumerate(parts) for n in f.put_parts(f"up/{i}", p)]
        obj = f.compose("obj", names)
    assert obj.stripes == 6

    def holders() -> set[str]:
        with c.open("/comp/r") as f:
            addr = {p.peer_idx: p.addr for p in f.info.peers}
            metas = f.records_meta([stripe_name("obj", i) for i in range(6)])
            # stored as the parts' names, moved or not
            assert [metas[stripe_name("obj", i)].key for i in range(6)] == names
            return {addr[i] for m in metas.values() for i in m.peers}

    index = {p.addr: i for i, p in enumerate(cluster.peers)}
    lost = sorted(holders())[0]
    cluster.kill_peer(index[lost])
    poll_for(lambda: c.status().alive_peers == 3, what="the tracker to see the peer fail")
    rep = repair_file(c, "/comp/r", failed_after=0)
    assert rep.complete and rep.copies_restored > 0 and lost not in holders(), rep
    drained = sorted(holders())[0]
    assert drain(c, drained).complete
    assert drained not in holders()
    cluster.kill_peer(index[drained])
    with cluster.client().open("/comp/r") as f:
        assert f.get("obj") == whole and f.open("obj").read() == whole


def test_a_retry_of_put_parts_on_a_node_whose_infofile_copy_lags(cluster, tmp_path):
    """``put_parts`` sent again from a node without the shared mount
    (``metadata="fetch"``), whose copy of the infofile was taken before
    another node committed the parts (an hour's max age: not checked
    again by itself): the committed records are found past the stale copy
    and nothing is stored again; other bytes under a name are refused.
    Before, the lookup read the stale copy, stored every part anew and the
    commit was refused (``RecordExistsError``)."""
    parts = [os.urandom(16 * KIB) for _ in range(4)]
    with cluster.client().create("/comp/lag", "x2") as f:
        f.put("first", b"x")
    lagging = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "cache"), metadata_max_age_s=3600)
    with lagging.open("/comp/lag") as fa:
        assert fa.get("first") == b"x"  # its copy taken now
        with cluster.client().open("/comp/lag") as fb:  # the first try, from another node
            names = [n for i, p in enumerate(parts) for n in fb.put_parts(f"up/{i:05d}", p)]

        def held() -> list:
            return sorted(p for p in cluster.data_dir.glob("peers/*/files/**/*") if p.is_file() and "up" in str(p))

        before = held()
        assert len(before) == 4 * 2
        for i in range(4):
            assert fa.put_parts(f"up/{i:05d}", parts[i]) == names[i : i + 1]
        assert held() == before
        with pytest.raises(RecordExistsError, match="other bytes"):
            fa.put_parts("up/00001", parts[2])
        obj = fa.compose("obj", names)
    assert obj.size == sum(map(len, parts))
    with cluster.client().open("/comp/lag") as f:
        assert f.get("obj") == b"".join(parts)


def test_a_compose_needs_room_for_its_object_once(make_cluster):
    """Under a per-file quota (``--quota-bytes``, all copies) a compose is
    admitted when the object fits once: its stripes are the parts' copies,
    so it stores no byte (it was refused, charged the object's bytes before
    the parts' left). Parts a snapshot holds stay counted (retained), so
    composing them then needs room for the object as new bytes, and is
    refused with nothing changed. The usage after a compose is the object's,
    once: what fits and what does not says so."""
    from st_py.errors import QuotaExceededError

    quota = 700_000
    cluster = make_cluster(3, tracker_args=["--quota-bytes", str(quota)])
    c = cluster.client()
    parts = [os.urandom(64 * KIB) for _ in range(3)] + [os.urandom(10 * KIB)]  # 206,848 bytes: x2 413,696
    for path in ("/comp/q", "/comp/q-snap"):
        with c.create(path, "x2") as f:
            names = [n for i, p in enumerate(parts) for n in f.put_parts(f"up/{i:05d}", p)]
            if path == "/comp/q-snap":
                c.snapshot(path, "before")
                with pytest.raises(QuotaExceededError):
                    f.compose("obj", names)
                assert f.names() == [] and sorted(f.records_meta(names)) == sorted(names)  # nothing changed
                continue
            obj = f.compose("obj", names)
            assert obj.size == sum(len(p) for p in parts)
        with c.open(path) as f:
            assert f.get("obj") == b"".join(parts)
            f.put("fits", os.urandom(100_000))  # 413,696 + 200,000 <= 700,000
            f.flush()
            f.put("does-not", os.urandom(50_000))  # + 100,000 > 700,000
            with pytest.raises(QuotaExceededError):
                f.flush()
            assert f.names() == ["fits", "obj"]
