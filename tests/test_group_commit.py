"""The client's group committer (st_py/client/group_commit.py) against a real
tracker: groups, draining, conflicts reported per record, staging."""

from __future__ import annotations

from dataclasses import dataclass, field

from st_py.client import group_commit
from st_py.client.group_commit import GroupCommitter
from st_py.core.infofile import InfofileReader
from st_py.errors import RecordExistsError


@dataclass
class Op:
    name: str
    size: int = 3
    crc: int = 7
    peers: list = field(default_factory=lambda: [0])
    acked: set = field(default_factory=lambda: {0})  # every copy stored (client-sync)
    commit_state: int = 0
    sent_pending: set = field(default_factory=set)
    late: list = field(default_factory=list)

    @property
    def name_b(self) -> bytes:
        return self.name.encode()


def _committer(cluster, name, **kw):
    c = cluster.client()
    f = c.create(name, replication="x1")
    f.close()
    failed = []
    gc = GroupCommitter(
        c.tracker, name, f.file_id, kw.pop("group_size", 10), lambda op, exc: failed.append((op.name, exc)), **kw
    )
    return gc, failed, InfofileReader(f.infofile_path)


def test_groups_then_drain(cluster, monkeypatch):
    monkeypatch.setattr(group_commit, "LINGER_S", 0.0)  # every group of group_size at once
    gc, failed, r = _committer(cluster, "/gc/a")
    for i in range(25):
        gc.add(Op(f"r{i:02d}"))
        gc.pump()
    gc.reap(all_=True)
    assert r.count() == 20 and gc.busy  # two full groups; five wait
    gc.drain()
    assert r.count() == 25 and not gc.busy and not failed


def test_a_streaming_writer_s_groups_linger_and_a_trickle_s_do_not(cluster, monkeypatch):
    """A commit started less than LINGER_S ago holds the next group back
    until LINGER_GROUP records wait (or COMMIT_BYTES, or the linger is
    over): a stream commits in large groups, where groups of group_size
    made the tracker's per-commit CPU the largest cost (issue 41). The
    first group, after no recent commit, goes at group_size as before."""
    monkeypatch.setattr(group_commit, "LINGER_S", 3600.0)
    monkeypatch.setattr(group_commit, "LINGER_GROUP", 12)
    gc, failed, r = _committer(cluster, "/gc/linger")
    for i in range(25):
        gc.add(Op(f"r{i:02d}"))
        gc.pump()
    gc.reap(all_=True)
    assert r.count() == 22 and gc.busy  # 10 at once (a trickle's group), then 12 (LINGER_GROUP); 3 linger
    for i in range(25, 35):
        gc.add(Op(f"r{i:02d}"))
        gc.pump()
    gc.reap(all_=True)
    assert r.count() == 34  # 12 more waited: one group; 1 lingers
    monkeypatch.setattr(group_commit, "LINGER_S", 0.0)  # the linger over: what waits goes at group_size
    gc.add(Op("r35"))
    gc.pump()
    gc.reap(all_=True)
    assert r.count() == 34 and gc.busy  # 2 wait: under group_size, for the next pump or the drain
    gc.drain()
    assert r.count() == 36 and not gc.busy and not failed


def test_conflicts_are_reported_per_record_by_name(cluster):
    gc, failed, r = _committer(cluster, "/gc/b")
    gc.add(Op("same"))
    gc.add(Op("clash"))
    gc.drain()
    gc.add(Op("same"))  # identical: already committed, fine
    gc.add(Op("clash", crc=8))  # other content: refused
    gc.add(Op("fresh"))
    gc.drain()
    assert [n for n, _ in failed] == ["clash"]
    assert isinstance(failed[0][1], RecordExistsError) and failed[0][1].names == ("clash",)
    assert r.count() == 3


def test_staged_records_are_handed_out_not_committed(cluster):
    gc, failed, r = _committer(cluster, "/gc/c", stage=True)
    for i in range(30):
        gc.add(Op(f"s{i}"))
        gc.pump()
    gc.drain()
    assert r.count() == 0
    staged = gc.take_staged().as_dicts()  # columns (StagedRecords); their dicts
    assert [s["name"] for s in staged] == [f"s{i}" for i in range(30)]
    assert staged[0] == {
        "name": "s0",
        "size": 3,
        "crc32c": 7,
        "peer_idx": [0],
        "schema": None,
        "logical_size": None,
        "meta": b"",
        "stored_as": "",  # a new record under its plain name
    }
    assert not gc.busy


def test_plain_groups_travel_as_columns_and_commit_as_records_did(cluster):
    """Issue 41: the tracker says it reads CommitRequest.columns
    (FileInfo.commit_columns), a group of plain records is sent as columns
    and a group with a pending copy as RecordCommit messages; both commit
    what they carry, and a conflict is reported by name either way."""
    from st_py.client.group_commit import _records

    c = cluster.client()
    f = c.create("/gc/cols", replication="x1")
    assert f.info.commit_columns
    f.close()
    failed: list = []
    gc = GroupCommitter(
        c.tracker, "/gc/cols", f.file_id, 10, lambda op, exc: failed.append((op.name, exc)), columns=True
    )
    plain = [Op(f"c{i:02d}", size=10 + i, crc=i) for i in range(10)]
    assert _records(plain, True)[2] is not None
    pending = Op("x", peers=[0, 1], acked={0})  # copy rank 1 not stored yet: one message a record
    assert _records([plain[0], pending], True)[2] is None and _records(plain, False)[2] is None
    for op in plain:
        op.commit_state = 0
        gc.add(op)
    gc.drain()
    gc.add(Op("c00", size=10, crc=0))  # a retry of a committed one: fine
    gc.add(Op("c01", size=11, crc=99))  # other content: refused, by name
    gc.add(Op("d", size=5, crc=5))
    gc.drain()
    r = InfofileReader(f.infofile_path)
    assert r.count() == 11 and [n for n, _ in failed] == ["c01"]
    assert isinstance(failed[0][1], RecordExistsError)
    assert (r.lookup("c07").size, r.lookup("c07").crc32c, r.lookup("c07").peers) == (17, 7, (0,))
    # only columns in the request: committed (a tracker that ignored them committed nothing)
    from st_py._proto import tracker_pb2 as pb

    cols = pb.RecordColumns(names=["e0", "e1"], sizes=[1, 2], crc32c=[3, 4], peer_idx=[0, 0])
    reply = c.tracker.commit("/gc/cols", f.file_id, [], columns=cols)
    assert reply.committed == 2 and InfofileReader(f.infofile_path).lookup("e1").size == 2
