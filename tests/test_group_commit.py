"""The client's group committer (st_py/client/group_commit.py) against a real
tracker: groups, draining, conflicts reported per record, staging."""

from __future__ import annotations

from dataclasses import dataclass, field

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


def test_groups_then_drain(cluster):
    gc, failed, r = _committer(cluster, "/gc/a")
    for i in range(25):
        gc.add(Op(f"r{i:02d}"))
        gc.pump()
    gc.reap(all_=True)
    assert r.count() == 20 and gc.busy  # two full groups; five wait
    gc.drain()
    assert r.count() == 25 and not gc.busy and not failed


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
    staged = gc.take_staged()
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
