"""The client's public results are plain data, not protobuf messages
(the brief's rule; st_py/client/plain_reply.py): ``Client.status()`` gives
a :class:`ClusterStatus` tree of frozen dataclasses holding every field of
the tracker's reply, ``StFile.info`` a :class:`FileInfo`, ``Client.chmod``
a :class:`FileMode` and ``Client.ls`` :class:`NamespaceEntry` rows
(docs/operations.md, "Status page")."""

from __future__ import annotations

import dataclasses
import os
import pickle

from conftest import poll_for
from google.protobuf.message import Message

from st_py._proto import tracker_pb2 as pb
from st_py.client import cluster_status, file_info
from st_py.client.cluster_status import ClusterStatus, MetadataLogState, PeerStatus, RepairServiceStatus
from st_py.client.file_info import FileInfo, FileMode
from st_py.client.namespace_paths import NamespaceEntry


def _no_message_inside(value, path="status") -> None:
    """Fail if a protobuf message or container hides anywhere in ``value``."""
    assert not isinstance(value, Message), f"{path} is a protobuf {type(value).__name__}"
    assert type(value).__module__.split(".")[0] != "google", f"{path} is a {type(value)}"
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _no_message_inside(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            _no_message_inside(v, f"{path}[{i}]")


def _same(plain, msg, path="status") -> None:
    """Every field of ``plain`` equals the message's, nested ones too."""
    for f in dataclasses.fields(plain):
        a, b = getattr(plain, f.name), getattr(msg, f.name)
        if dataclasses.is_dataclass(a):
            _same(a, b, f"{path}.{f.name}")
        elif isinstance(a, tuple) and a and dataclasses.is_dataclass(a[0]):
            assert len(a) == len(b), f"{path}.{f.name}"
            for i, (x, y) in enumerate(zip(a, b)):
                _same(x, y, f"{path}.{f.name}[{i}]")
        else:
            assert a == (tuple(b) if isinstance(a, tuple) else b), f"{path}.{f.name}: {a!r} != {b!r}"


def test_every_field_of_every_status_message_is_kept():
    """A field added to the protocol and not here would be dropped silently."""
    for cls, message in {**cluster_status.MESSAGES, **file_info.MESSAGES}.items():
        want = [f.name for f in getattr(pb, message).DESCRIPTOR.fields]
        have = [f.name for f in dataclasses.fields(cls)]
        assert sorted(have) == sorted(want), f"{cls.__name__} against {message}"


def test_status_and_ls_are_plain_data_that_follow_a_killed_peer(cluster):
    c = cluster.client()
    with c.create("/exp/run1", "x2") as f:
        for j in range(30):
            f.queue_put(f"event-{j:03d}", os.urandom(500))
        info = f.info
        assert isinstance(info, FileInfo) and all(isinstance(p, PeerStatus) for p in info.peers)
        _no_message_inside(info, "info")
        _same(info, f._ctx.info, "info")
        assert (info.name, info.replication, info.copies) == ("/exp/run1", "x2", 2)
        assert sorted(p.addr for p in info.peers) == sorted(cluster.peer_addrs)
    mode = c.chmod("/exp/run1", 0o640)
    assert mode == FileMode(mode.owner, mode.group, 0o640) and isinstance(mode.owner, str)
    st = c.status()
    assert isinstance(st, ClusterStatus)
    assert isinstance(st.repair, RepairServiceStatus) and isinstance(st.metadata_log, MetadataLogState)
    assert all(isinstance(p, PeerStatus) for p in st.peers)
    _no_message_inside(st)
    assert st.files == 1 and st.alive_peers == len(cluster.peer_addrs) and st.failed_peers == 0
    assert pickle.loads(pickle.dumps(st)) == st  # plain data: travels to a task or a log as it is
    hash(st)  # frozen all the way down

    dead = cluster.kill_peer(1)
    c.tracker.report_failure(dead, "connection refused (test)")
    st = poll_for(lambda: (s := c.status()).failed_peers == 1 and s, what="the tracker to fail the killed peer")
    assert [p.addr for p in st.peers if not p.alive] == [dead]
    raw = c.tracker.status()
    plain = ClusterStatus.of(raw)
    _same(plain, raw)  # one conversion: every field, nested ones too, as the tracker sent it
    _no_message_inside(plain)

    entries = c.ls("/exp")
    assert entries == [e for e in entries if isinstance(e, NamespaceEntry)] and len(entries) == 1
    e = entries[0]
    assert (e.name, e.is_dir, e.replication, e.records) == ("/exp/run1", False, "x2", 30)
    _no_message_inside(e, "entry")
