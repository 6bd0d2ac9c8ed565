"""The scrubber of peers that mount nothing (``st-peer --metadata fetch``,
no ``--namespace``; docs/peer.md, "Scrubber"), real processes: each file id
the peer holds records of has its copy brought to the tracker's latest by
FetchInfofile by id alone; committed records stay, old uncommitted ones go,
a deleted file's records go only on the tracker's explicit word
(``st-error: file-deleted``), and with the tracker down a SCRUB removes
nothing and says why."""

from __future__ import annotations

import sqlite3

import grpc
import pytest
from checks import leave_scrub_work, scrub_everywhere, scrub_frame, stored
from conftest import poll_for

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core import capability, namespace
from st_py.errors import ERROR_KIND_KEY, ErrorCode
from st_py.wire import protocol as P


@pytest.fixture
def fetch_cluster(make_cluster):
    """4 peers with ``--metadata fetch``, no namespace, ``--scrub-age 0``
    (every record not committed is old enough to go)."""
    return make_cluster(4, peer_metadata="fetch", peer_args=["--scrub-age", "0"])


def peerlist(cluster, name: str) -> list[str]:
    """The peer ids of file ``name``'s peerlist, from the tracker's infofile."""
    path = namespace.infofile_path(cluster.namespace, name)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [str(r[0]) for r in db.execute("SELECT peer_id FROM peers ORDER BY peer_idx")]
    finally:
        db.close()


def fetch_by_id(cluster, peer_id: str, file_id: int) -> list:
    """FetchInfofile by file id alone, as peer ``peer_id``'s scrubber asks."""
    md = []
    if cluster.auth:
        key = capability.load_key(cluster.key_file)
        md = [("x-st-capability", capability.mint(key, capability.PEER, 0, 60, user=f"peer:{peer_id}").hex())]
    with grpc.insecure_channel(cluster.tracker_addr) as channel:
        stub = pb_grpc.TrackerStub(channel)
        req = pb.FetchInfofileRequest(name="", user=f"peer:{peer_id}", file_id=file_id)
        return list(stub.FetchInfofile(req, metadata=md, timeout=10))


def error_kind(e: grpc.RpcError) -> str:
    return dict(e.trailing_metadata() or ()).get(ERROR_KIND_KEY, "")


def test_a_peer_fetches_by_file_id_and_only_a_deletion_is_said_so(fetch_cluster):
    """FetchInfofile with a file id and no name (a peer's scrubber): the
    file's snapshot for a peer of its peerlist; NOT_FOUND with
    ``st-error: file-deleted`` for a file the tracker deleted; NOT_FOUND
    without it for an id it never knew; PERMISSION_DENIED for a peer not in
    the peerlist (before: INVALID_ARGUMENT, an empty name)."""
    c = fetch_cluster.client()
    with c.create("/scrubfetch/byid", replication="x2") as f:
        f.put("a", b"x")
    live = f.file_id
    with c.create("/scrubfetch/byid-gone", replication="x2") as g:
        g.put("a", b"x")
    gone = g.file_id
    peer = peerlist(fetch_cluster, "/scrubfetch/byid")[0]
    c.delete("/scrubfetch/byid-gone")

    first = fetch_by_id(fetch_cluster, peer, live)[0]
    assert (first.kind, first.file_id) == ("snapshot", live)
    with pytest.raises(grpc.RpcError) as e:
        fetch_by_id(fetch_cluster, peer, gone)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_kind(e.value) == "file-deleted"
    assert f"{gone:016x} was deleted" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        fetch_by_id(fetch_cluster, peer, 0x1234567)  # never a file of this tracker
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_kind(e.value) == ""
    with pytest.raises(grpc.RpcError) as e:
        fetch_by_id(fetch_cluster, "not-a-peer-of-it", live)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_scrub_without_a_namespace_removes_uncommitted_and_deleted_keeps_committed(fetch_cluster):
    """The peers mount nothing: SCRUB removes the records a crashed writer
    never committed and those of a deleted file, and keeps every committed
    one (before: NO_NAMESPACE, nothing scrubbed)."""
    cluster = fetch_cluster
    c = cluster.client(group_size=1000)
    leave_scrub_work(c, "/scrubfetch")
    assert stored(cluster) == 60 + 40 + 10
    totals = scrub_everywhere(cluster)
    assert totals["removed_uncommitted"] == 40
    assert totals["removed_deleted_files"] == 10
    assert stored(cluster) == 60
    with c.open("/scrubfetch/keep") as f:
        assert len(f) == 30 and all(f.get(f"ok/{i}") == b"committed" * 10 for i in range(30))
        assert sorted(r.name for r in f.get_local()) == sorted(f"ok/{i}" for i in range(30))


def test_scrub_with_the_tracker_down_removes_nothing_and_says_why(make_cluster):
    """No namespace and no tracker: no file can be told committed or
    deleted, so SCRUB answers STALE_INFOFILE naming the tracker and removes
    nothing; once the tracker is back the same SCRUB removes what it should."""
    cluster = make_cluster(2, peer_metadata="fetch", peer_args=["--scrub-age", "0"])
    c = cluster.client(group_size=1000)
    with c.create("/scrubfetch/down/keep", replication="x2") as keep:
        for i in range(5):
            keep.put(f"ok/{i}", b"committed")
    crashed = c.create("/scrubfetch/down/crashed", replication="x2")
    for i in range(5):
        crashed.queue_put(f"lost/{i}", b"never committed").result()
    crashed._transport.close()
    with c.create("/scrubfetch/down/gone", replication="x2") as gone:
        gone.put("g", b"orphan")
    c.tracker.delete("/scrubfetch/down/gone", gone.file_id, whole_file=True)
    c.close()
    assert stored(cluster) == 10 + 10 + 2

    cluster.tracker.kill()
    for addr in cluster.peer_addrs:
        fr = scrub_frame(addr, cluster.mint(capability.ADMIN) if cluster.auth else b"")
        assert fr.type == P.MsgType.ERROR, fr.fields
        assert fr.fields["code"] == ErrorCode.STALE_INFOFILE, fr.fields
        assert cluster.tracker_addr in fr.fields["message"], fr.fields
        assert "nothing removed" in fr.fields["message"], fr.fields
    assert stored(cluster) == 10 + 10 + 2

    cluster.start_tracker()
    totals: dict[str, int] = {}
    for addr in cluster.peer_addrs:
        # the peer's channel to the tracker reconnects within its backoff (at most 1 s): until
        # then a SCRUB still says the tracker cannot be reached, and removes nothing
        def scrubbed(addr=addr):
            fr = scrub_frame(addr, cluster.mint(capability.ADMIN) if cluster.auth else b"")
            if fr.type == P.MsgType.ERROR and fr.fields["code"] == ErrorCode.STALE_INFOFILE:
                return None
            assert fr.type == P.MsgType.OK, fr.fields
            return dict(zip(P.SCRUB_REPLY_FIELDS, P.SCRUB_REPLY.unpack(fr.fields["payload"])))

        counts = poll_for(scrubbed, timeout=15, interval=0.2, what=f"a scrub of {addr} to reach the tracker")
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
    assert (totals["removed_uncommitted"], totals["removed_deleted_files"]) == (10, 2)
    assert stored(cluster) == 10


def test_the_tracker_state_keeps_a_deleted_id_until_a_file_has_it_again(tmp_path):
    """TrackerState.file_by_id: the deletion the tracker recorded is its
    answer; a file put back with that id (recover) or found in the namespace
    (a standby's replace_files) is a file again; an id never seen is
    unknown, not deleted."""
    from st_py.tracker.state import TrackerState

    s = TrackerState(tmp_path)
    s.add_file("/a", 11, "alice")
    assert s.file_by_id(11) == ("/a", False)
    s.remove_file("/a", 11)
    assert s.file_by_id(11) == (None, True)
    assert s.file_by_id(12) == (None, False)
    s.add_file("/a", 11, "alice")  # storetorrent recover puts it back
    assert s.file_by_id(11) == ("/a", False)
    s.remove_file("/a", 11)
    s.replace_files([("/b", 11, "bob")])
    assert s.file_by_id(11) == ("/b", False)
    s.replace_files([])
    assert s.file_by_id(11) == (None, False)  # gone without a deletion this tracker saw
