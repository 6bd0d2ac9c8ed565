"""The group commit's per-record work done in bulk (issue 41, item 2): the
Commit handler's rows (st_py/tracker/rpc/commit_rows.py) and the writer's
path for a batch of new records (InfofileWriter._commit_new) answer exactly
as the record-by-record code does, checks and conflicts included."""

from __future__ import annotations

import sqlite3

import pytest

from st_py._proto import tracker_pb2 as pb
from st_py.core import user_meta
from st_py.tracker.bulk_insert import insert_rows
from st_py.tracker.infofile_writer import InfofileWriter, create_infofile
from st_py.tracker.rpc.commit_rows import bytes_on_peers, commit_rows

SCHEMA = ("arrow", b"not-read-here")


def _request(records: list[dict]) -> pb.CommitRequest:
    req = pb.CommitRequest(name="/c/f", file_id=1)
    req.records.extend(pb.RecordCommit(**r) for r in records)
    return pb.CommitRequest.FromString(req.SerializeToString())


GOOD = [
    dict(name="a", size=10, crc32c=1, peer_idx=[0, 2]),
    dict(name="b/c", size=11, crc32c=2, peer_idx=[1, 0], pending_ranks=[1], schema=1),
    dict(name="_skip", size=12, crc32c=3, peer_idx=[2, 1], schema=1, logical_size=5),
    dict(name="d", size=13, crc32c=4, peer_idx=[0, 1], stored_as=".st-version/d/x", new_only=True),
    dict(name="e", size=14, crc32c=5, peer_idx=[1, 2], meta=user_meta.encode("e", {"k": "v"})),
]


def test_rows_are_what_the_record_by_record_loop_built():
    rows, why = commit_rows(_request(GOOD), 2, 3, [SCHEMA])
    assert why == ""
    assert rows == [
        ("a", 10, 1, [0, 2], (), "", None, None, False, None),
        ("b/c", 11, 2, [1, 0], (1,), "", SCHEMA, None, False, None),
        ("_skip", 12, 3, [2, 1], (), "", None, 5, False, None),  # a name readers skip keeps no schema
        ("d", 13, 4, [0, 1], (), ".st-version/d/x", None, None, True, None),
        ("e", 14, 5, [1, 2], (), "", None, None, False, GOOD[4]["meta"]),
    ]
    assert bytes_on_peers(rows) == {0: 10 + 11 + 13, 1: 11 + 12 + 13 + 14, 2: 10 + 12 + 14}


@pytest.mark.parametrize(
    "bad, says",
    [
        (dict(peer_idx=[0]), "needs 2 copies on distinct peers of the peerlist, got peer indexes [0]"),
        (dict(peer_idx=[1, 1]), "got peer indexes [1, 1]"),
        (dict(peer_idx=[0, 3]), "got peer indexes [0, 3]"),
        (dict(pending_ranks=[0]), "pending copy ranks [0] must be among 1..1"),
        (dict(pending_ranks=[2]), "pending copy ranks [2] must be among 1..1"),
        (dict(schema=2), "schema 2 is not among the request's 1 schemas"),
        (dict(meta=b"\xffnot user metadata"), ""),
    ],
)
def test_a_bad_record_is_named_as_before(bad, says):
    """The first bad record (the third here; the fourth is bad too) is the
    one named, with the record-by-record check's words."""
    records = [*GOOD[:2], {**dict(name="bad", size=1, crc32c=1, peer_idx=[0, 1]), **bad}, {**GOOD[0], **bad}]
    rows, why = commit_rows(_request(records), 2, 3, [SCHEMA])
    assert rows == [] and says in why and "'bad'" in why


def _writer(tmp_path, tag: str) -> InfofileWriter:
    path = tmp_path / tag
    meta = dict(file_id=1, name="/c/f", replication="x2", copies=2, blocksize=16, est_size=0, created_at=0)
    create_infofile(path, {**meta, "owner": ""}, [(i, f"peer-{i}", f"h:{i}") for i in range(3)])
    return InfofileWriter(path)


def _content(w: InfofileWriter) -> list:
    c = sqlite3.connect(w.path)
    try:
        return [
            c.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
            for t in ("records", "copies", "pending_copies", "user_meta", "schemas")
        ]
    finally:
        c.close()


@pytest.mark.parametrize(
    "later",
    [
        [("x", 1, 1, [0, 1])],  # new names only: the bulk path
        [("a", 10, 1, [0, 2]), ("y", 1, 1, [0, 1])],  # a retry of a committed one
        [("a", 99, 1, [0, 2])],  # committed with other content: a conflict
        [("y", 1, 1, [0, 1]), ("w", 1, 1, [0, 1]), ("a", 10, 1, [0, 2])],  # a retry after new names
        [*((f"n{i:03d}", 1, i, [0, 1]) for i in range(300)), ("a", 10, 1, [0, 2])],  # ... after a statement's rows
        [("y", 1, 1, [0, 1]), ("a", 99, 1, [0, 2])],  # a conflict after a new name
        [("z", 1, 1, [0, 1]), ("z", 1, 1, [0, 1])],  # twice in the batch
        [("b", 1, 1, [0, 1])],  # a folder of a committed name (b/c)
        [("a/q", 1, 1, [0, 1])],  # below a committed record
        [("m", 1, 1, [0, 1]), ("m/n", 1, 1, [0, 1])],  # one a folder of the other in the batch
        [("./x", 1, 1, [0, 1]), ("ok/y", 1, 1, [0, 1])],  # breaks the path rule
        [("", 1, 1, [0, 1])],
        [(".st-stripe/o/00000000", 1, 1, [0, 1])],  # reserved: the tracker's
    ],
)
def test_the_bulk_path_writes_and_answers_as_the_record_by_record_one(tmp_path, later):
    """The same commits through 10-element rows (the Commit handler's, which
    may take the bulk path) and through 9-element rows (which never do):
    the same answers and the same rows."""
    first, _ = commit_rows(_request(GOOD), 2, 3, [SCHEMA])
    full = [(*r[:4], (), "", None, None, False, None) for r in later]
    short = [r[:9] for r in full]
    fast, slow = _writer(tmp_path, "fast"), _writer(tmp_path, "slow")
    try:
        for w, rows in ((fast, first), (slow, [r[:9] if not r[9] else r for r in first])):
            w.commit(rows)
        got_fast = fast.commit(full)
        got_slow = slow.commit(short)
        assert got_fast == got_slow
        assert _content(fast)[1:] == _content(slow)[1:]
        assert [r[:4] + r[5:] for r in _content(fast)[0]] == [r[:4] + r[5:] for r in _content(slow)[0]]
        assert fast.stats() == slow.stats()
    finally:
        fast.close()
        slow.close()


def _columns_request(records: list[dict], **more) -> pb.CommitRequest:
    req = pb.CommitRequest(name="/c/f", file_id=1)
    req.columns.names.extend(r["name"] for r in records)
    req.columns.sizes.extend(r["size"] for r in records)
    req.columns.crc32c.extend(r["crc32c"] for r in records)
    req.columns.peer_idx.extend(p for r in records for p in r["peer_idx"])
    for k, v in more.items():
        getattr(req.columns, k).extend(v)
    return pb.CommitRequest.FromString(req.SerializeToString())


PLAIN = [dict(name=f"p{i}", size=100 + i, crc32c=i, peer_idx=[i % 3, (i + 1) % 3]) for i in range(5)]


def test_columns_give_the_rows_of_the_same_records_sent_one_by_one():
    """CommitRequest.columns (issue 41): the same rows as RecordCommit
    messages of the same records, after the request's ``records``."""
    one_by_one, _ = commit_rows(_request(PLAIN), 2, 3, [SCHEMA])
    cols, why = commit_rows(_columns_request(PLAIN), 2, 3, [SCHEMA])
    assert why == "" and cols == one_by_one
    with_schema = [{**r, "schema": i % 2, "logical_size": 7} for i, r in enumerate(PLAIN)]
    one_by_one, _ = commit_rows(_request(with_schema), 2, 3, [SCHEMA])
    cols, _ = commit_rows(
        _columns_request(PLAIN, schema=[i % 2 for i in range(5)], logical_sizes=[7] * 5), 2, 3, [SCHEMA]
    )
    assert cols == one_by_one
    both = _request(GOOD[:2])
    both.columns.CopyFrom(_columns_request(PLAIN).columns)
    rows, _ = commit_rows(both, 2, 3, [SCHEMA])
    assert [r[0] for r in rows] == ["a", "b/c", "p0", "p1", "p2", "p3", "p4"]


def test_bad_columns_are_refused_with_what_is_wrong():
    bad = [*PLAIN[:2], {**PLAIN[2], "name": "bad", "peer_idx": [1, 1]}]
    rows, why = commit_rows(_columns_request(bad), 2, 3, [SCHEMA])
    assert rows == [] and "record 'bad': needs 2 copies on distinct peers" in why
    rows, why = commit_rows(_columns_request(PLAIN, schema=[1]), 2, 3, [SCHEMA])
    assert rows == [] and "record columns of 5 names need 5 sizes" in why
    req = _columns_request(PLAIN)
    del req.columns.peer_idx[-1]
    rows, why = commit_rows(req, 2, 3, [SCHEMA])
    assert rows == [] and "10 peer indexes (2 copies each)" in why and "and 9" in why
    rows, why = commit_rows(_columns_request(PLAIN, schema=[0, 0, 2, 0, 0]), 2, 3, [SCHEMA])
    assert rows == [] and "record 'p2': schema 2 is not among the request's 1 schemas" in why


def test_one_copy_columns_give_the_rows_of_messages_and_refuse_the_same():
    """The columns' one-pass rows (x1 and x2 files): the rows of the same
    records as messages, a name readers skip keeping no schema; a peer
    outside the peerlist or a repeated one is named as a message's is."""
    one = [
        dict(name=n, size=20 + i, crc32c=i, peer_idx=[i % 2], schema=1, logical_size=3 + i)
        for i, n in enumerate(("x", "d/_SUCCESS", "d/.crc", "y.parquet"))
    ]
    cols = _columns_request([{**r} for r in one], schema=[1] * len(one), logical_sizes=[r["logical_size"] for r in one])
    rows, why = commit_rows(cols, 1, 2, [SCHEMA])
    assert why == "" and rows == commit_rows(_request(one), 1, 2, [SCHEMA])[0]
    assert [r[6] for r in rows] == [SCHEMA, None, None, SCHEMA]
    far = [*one[:1], {**one[1], "peer_idx": [2]}]
    for req in (_request(far), _columns_request(far)):
        rows, why = commit_rows(req, 1, 2, [SCHEMA])
        assert rows == [] and "record 'd/_SUCCESS': needs 1 copies on distinct peers" in why
    rows, why = commit_rows(_columns_request([{**PLAIN[0], "peer_idx": [1, 1]}]), 2, 3, [])
    assert rows == [] and "record 'p0': needs 2 copies on distinct peers" in why


@pytest.mark.parametrize("limit", [None, 10])
def test_insert_rows_inserts_every_row_in_order_and_raises_as_executemany(limit):
    """bulk_insert.insert_rows (the group commit's rows as multi-row
    INSERTs): every row, in order, in statements within SQLite's limit on
    bound values; a duplicate key raises IntegrityError as executemany
    does."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    if limit is not None:
        if not hasattr(conn, "setlimit"):
            pytest.skip("sqlite3 limits need Python 3.11")
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    conn.execute("CREATE TABLE t(k TEXT PRIMARY KEY, a INTEGER, b BLOB)")
    rows = [(f"k{i:04d}", i, None if i % 3 else b"x") for i in range(1000)]
    insert_rows(conn, "INSERT INTO t(k, a, b)", rows)
    insert_rows(conn, "INSERT INTO t(k, a, b)", [])
    assert conn.execute("SELECT k, a, b FROM t ORDER BY rowid").fetchall() == rows
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.IntegrityError):
        insert_rows(conn, "INSERT INTO t(k, a, b)", [("new", 1, None), ("k0007", 2, None)])
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1000
