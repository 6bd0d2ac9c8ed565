"""A record version's user metadata (st_py/core/user_meta.py; docs/s3.md,
"User metadata and Content-Type") against a real tracker and peers: sent
with the commit, kept per version in the infofile's ``user_meta``, read
back without reading the record, for older versions and snapshots too, and
refused over its limit with nothing stored."""

import pytest

from st_py.core import user_meta
from st_py.errors import BadMetadataError, MetadataTooLargeError


def test_put_meta_is_kept_per_version_and_read_from_the_infofile(module_cluster):
    c = module_cluster.client()
    first = {"content-type": "text/plain", "owner": "alice"}
    with c.create("/um/versions", "x2") as f:
        f.put("a", b"one", meta=first)
        f.put("plain", b"no metadata")
        f.queue_put("q", b"queued", meta={"k": "v"})
    with c.open("/um/versions") as f:
        inf = f.infofile()
        assert inf.user_meta_of("a") == first
        assert inf.user_meta_of("plain") == {} and inf.user_meta_of("nothing") == {}
        assert inf.user_meta_of("q") == {"k": "v"}
        old = f.generation
        f.put("a", b"two", replace=True, meta={"content-type": "image/png"})
        f.flush()
        assert f.infofile().user_meta_of("a") == {"content-type": "image/png"}
        f.put("a", b"three", replace=True)  # a version without metadata has none
        f.flush()
        assert f.infofile().user_meta_of("a") == {}
    with c.open("/um/versions", as_of=old) as f:  # the older version keeps what it had
        assert f.get("a") == b"one"
        assert f.infofile().user_meta_of("a") == first


def test_staged_records_carry_their_meta_to_the_job_commit(module_cluster):
    c = module_cluster.client()
    c.create("/um/staged", "x2").close()
    f = c.open_staged("/um/staged")
    try:
        f.put("s", b"staged", meta={"content-type": "text/plain"})
        f.flush()
        staged = f.staged_commits()
    finally:
        f.close()
    c.commit_staged("/um/staged", staged)
    with c.open("/um/staged") as f:
        assert f.infofile().user_meta_of("s") == {"content-type": "text/plain"}


def test_striped_object_keeps_its_meta(module_cluster):
    c = module_cluster.client()
    with c.create("/um/objects", "x2") as f:
        f.put_object("big", b"x" * 5000, stripe_size=1024, meta={"content-type": "application/x-big"})
    with c.open("/um/objects") as f:
        assert f.infofile().user_meta_of("big") == {"content-type": "application/x-big"}


def test_too_large_or_bad_meta_is_refused_and_nothing_stored(module_cluster):
    c = module_cluster.client()
    big = {"k": "v" * user_meta.USER_LIMIT}
    with c.create("/um/limits", "x2") as f:
        with pytest.raises(MetadataTooLargeError) as e:
            f.put("a", b"data", meta=big)
        assert e.value.name == "a" and e.value.size == user_meta.USER_LIMIT + 1 and e.value.limit == 2048
        with pytest.raises(MetadataTooLargeError):
            f.put_object("o", b"y" * 3000, stripe_size=1024, meta=big)
        with pytest.raises(BadMetadataError):
            f.put("b", b"data", meta={"Upper": "x"})
        # the standard headers do not count toward the user pairs' 2 KB
        f.put("c", b"data", meta={"content-disposition": "x" * 3000, "k": "v" * 2047})
    with c.open("/um/limits") as f:
        assert f.names() == ["c"]
        assert f.infofile().user_meta_of("c")["k"] == "v" * 2047


def test_history_pruned_takes_its_metadata_and_older_files_read_none(tmp_path):
    """The tracker's writer drops a past version's metadata with its
    history; a file made before ``user_meta`` reads as having none, and the
    writer adds the table when it opens it."""
    import sqlite3

    from st_py.core.infofile import InfofileReader
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 7, "copies": 2, "name": "/f"}, [(i, f"p{i}", f"h:{i}") for i in range(3)])
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE user_meta")  # as a file made before it existed
    conn.commit()
    conn.close()
    assert InfofileReader(path).user_meta_of("a") == {}
    w = InfofileWriter(path)
    m1, m2 = user_meta.encode("a", {"k": "1"}), user_meta.encode("a", {"k": "2"})
    w.commit([("a", 1, 1, [0, 1], set(), ".st-version/1", None, None, False, m1)])
    w.commit([("a", 2, 2, [0, 1], set(), ".st-version/2", None, None, False, m2)])
    rows = lambda: sorted(w.conn.execute("SELECT meta FROM user_meta").fetchall())  # noqa: E731
    assert rows() == [(m1,), (m2,)]
    w.prune(older_than=2e9)  # the past version (no snapshot holds it) goes, with its metadata
    assert rows() == [(m2,)]
    assert InfofileReader(path).user_meta_of("a") == {"k": "2"}
    w.close()


def test_the_tracker_refuses_metadata_the_client_would_not_send(module_cluster):
    """A commit whose metadata is too large or not an encoded map (a client
    that skipped the check) is refused INVALID_ARGUMENT; nothing committed."""
    import grpc

    from st_py._proto import tracker_pb2 as pb

    with module_cluster.client().create("/um/tracker", replication="x1") as f:
        f.put("a.bin", b"a")
        tracker, info = f._tracker, f.info
        for bad, says in ((b"not json", "bad metadata"), (b'{"k":"' + b"v" * 2048 + b'"}', "over the limit")):
            with pytest.raises(grpc.RpcError) as e:
                tracker._stub.Commit(
                    pb.CommitRequest(
                        name="/um/tracker",
                        file_id=info.file_id,
                        user=tracker.user,
                        records=[pb.RecordCommit(name="a.bin", size=1, crc32c=0, peer_idx=[0], meta=bad)],
                    ),
                    metadata=tracker._metadata,
                )
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in e.value.details()
    with module_cluster.client().open("/um/tracker") as f:
        assert f.infofile().user_meta_of("a.bin") == {}
