"""GETs of striped objects through the S3 endpoint (docs/s3.md, "The fast
path"): the stripes are fetched several at once with bounded read-ahead
and streamed in order, a peer killed during the GET is failed over per
stripe, and copies held by peers of the endpoint's node are read from
their data directories (checked) instead of by GET. Real tracker, peers,
endpoint (in a thread) and boto3; the counters are the endpoint's
(``S3App.read_stats``) and the peers' metrics. Large PUTs too: two of
one key at once, and bodies stored into files with filters."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import poll_for
from helpers import metric_value, scrape_metrics
from test_s3 import Endpoint

from st_integrations.s3.metrics import serve_metrics
from st_py.client.local_copies import copy_path
from st_py.core.infofile import stripe_name

MiB = 1 << 20


def _stats(ep: Endpoint) -> dict[str, int]:
    return ep.server.config.app.state.s3.read_stats()


def _peer_dirs(cluster) -> list[str]:
    return [str(cluster.data_dir / "peers" / f"peer-{i}") for i in range(cluster.n_peers)]


def _peer_gets(cluster) -> float:
    return sum(
        metric_value(scrape_metrics(p.metrics_addr), "st_peer_requests_total", type="GET")
        for p in cluster.peers
        if p is not None
    )


def _reports(cluster) -> float:
    """The tracker's count of ReportFailure RPCs (a client telling it a peer failed)."""
    m = scrape_metrics(cluster.tracker.metrics_addr)
    return metric_value(m, "st_tracker_rpcs_total", method="ReportFailure", code="OK")


@pytest.fixture(scope="module")
def stripes(make_module_cluster):
    """``(cluster, endpoint)``: 4 peers, an endpoint in development mode
    keeping 4 stripes in flight, told no peer data directory."""
    cluster = make_module_cluster(4, name="s3stripes")
    ep = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls, read_ahead=4)
    yield cluster, ep
    ep.stop()


def _put_striped(cluster, file: str, name: str, size: int, stripe: int) -> bytes:
    data = os.urandom(size)
    with cluster.client().create(file, replication="x2") as f:
        f.put_object(name, data, stripe_size=stripe)
    return data


def _upload_parts(s3, bucket: str, key: str, data: bytes, part: int | list[int]) -> tuple[str, list[dict]]:
    """A multipart upload of ``data`` in parts of ``part`` bytes (or of
    these sizes, then the rest), not completed: ``(upload id, the parts for
    CompleteMultipartUpload)``."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    if isinstance(part, int):
        cuts = list(range(0, len(data), part))
    else:
        cuts = [sum(part[:i]) for i in range(len(part) + 1)]
    parts = []
    for n, at in enumerate(cuts, 1):
        end = cuts[n] if n < len(cuts) else len(data)
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=data[at:end])
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    return up, parts


def _an_upload_of_two_parts(stripes, bucket: str):
    """Bucket ``bucket`` made and an upload of ``run/obj.bin`` (5 MiB and 7
    bytes, two parts) not completed: ``(cluster, boto3 client, data,
    upload id, the parts for CompleteMultipartUpload)``."""
    cluster, ep = stripes
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket=bucket)
    data = os.urandom(5 * MiB) + b"the end"
    up, parts = _upload_parts(s3, bucket, "run/obj.bin", data, 5 * MiB)
    return cluster, s3, data, up, parts


def test_multipart_object_of_several_stripes_whole_and_by_ranges(stripes):
    """A 72 MiB multipart upload (9 parts of 8 MiB: composed where they
    are, 9 stripes of 8 MiB, docs/s3.md "Multipart uploads") read whole and by ranges inside a stripe, across one stripe
    boundary and across two, and the last bytes, equals what was written;
    the whole GET had its stripes in flight together, a range fetched only
    the stripes it touches."""
    cluster, ep = stripes
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket="mpu")
    data = os.urandom(72 * MiB)
    up, parts = _upload_parts(s3, "mpu", "big/obj.bin", data, 8 * MiB)
    s3.complete_multipart_upload(Bucket="mpu", Key="big/obj.bin", UploadId=up, MultipartUpload={"Parts": parts})
    with cluster.client().open("/mpu/big") as f:
        obj = f.object_meta("obj.bin")
    assert obj is not None and (obj.stripes, obj.stripe_size) == (9, 8 * MiB)  # the parts
    before = _stats(ep)
    got = s3.get_object(Bucket="mpu", Key="big/obj.bin")
    assert got["ContentLength"] == len(data) and got["Body"].read() == data
    after = _stats(ep)
    assert after["stripes"] - before["stripes"] == 9
    assert after["max_stripes_in_flight"] >= 2  # several holders asked at once, not one after another
    assert after["max_stripes_held"] <= 4  # the read-ahead bound
    ss = obj.stripe_size
    for a, b, touched in (
        (5, 1000, 1),
        (ss - 100, ss + 100, 2),
        (ss - 1, 2 * ss + 1, 3),
        (len(data) - 10, len(data) - 1, 1),
    ):
        before = _stats(ep)["stripes"]
        r = s3.get_object(Bucket="mpu", Key="big/obj.bin", Range=f"bytes={a}-{b}")
        assert r["ContentRange"] == f"bytes {a}-{b}/{len(data)}"
        assert r["Body"].read() == data[a : b + 1]
        assert _stats(ep)["stripes"] - before == touched


def _peak_bytes(fn) -> int:
    """Bytes of Python memory (tracemalloc: bytes objects, buffers) this
    process held at most while ``fn()`` ran, beyond what it held before."""
    import tracemalloc

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_complete_and_copy_of_a_large_object_stream_it(stripes, monkeypatch):
    """Complete of a 72 MiB upload of 9 parts of 8 MiB composes the object
    of the parts where they are: no byte read (the endpoint held under 1
    MiB). Complete of one whose parts cannot be stripes (a part of 6 MiB
    among 8 MiB ones) and CopyObject of the object it made stream the
    bytes into the new object's stripes: the endpoint (in this process)
    holds a part and two stripes being stored, never the object (with 4 MiB
    stripes for the test: under 40 MiB at once, where reading the parts
    whole took over 72). All read back whole; a striped object of 12 MiB
    (not over 64) is copied as one record."""
    from st_integrations.s3 import ops as s3ops

    monkeypatch.setattr(s3ops, "STREAM_STRIPE_SIZE", 4 * MiB)
    cluster, ep = stripes
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket="mpstream")
    data = os.urandom(72 * MiB)
    up, parts = _upload_parts(s3, "mpstream", "big/composed.bin", data, 8 * MiB)
    peak = _peak_bytes(
        lambda: s3.complete_multipart_upload(
            Bucket="mpstream", Key="big/composed.bin", UploadId=up, MultipartUpload={"Parts": parts}
        )
    )
    assert peak < MiB, f"Complete held {peak / MiB:.1f} MiB composing a 72 MiB object"
    assert s3.get_object(Bucket="mpstream", Key="big/composed.bin")["Body"].read() == data
    up, parts = _upload_parts(s3, "mpstream", "big/obj.bin", data, [8 * MiB, 6 * MiB] + [8 * MiB] * 7)
    peak = _peak_bytes(
        lambda: s3.complete_multipart_upload(
            Bucket="mpstream", Key="big/obj.bin", UploadId=up, MultipartUpload={"Parts": parts}
        )
    )
    assert peak < 40 * MiB, f"Complete held {peak / MiB:.1f} MiB of a 72 MiB object"
    with cluster.client().open("/mpstream/big") as f:
        obj = f.object_meta("obj.bin")
    assert obj is not None and (obj.stripe_size, obj.stripes, obj.size) == (4 * MiB, 18, len(data))
    assert s3.get_object(Bucket="mpstream", Key="big/obj.bin")["Body"].read() == data
    src = {"Bucket": "mpstream", "Key": "big/obj.bin"}
    peak = _peak_bytes(lambda: s3.copy_object(Bucket="mpstream", Key="copy/obj.bin", CopySource=src))
    assert peak < 40 * MiB, f"CopyObject held {peak / MiB:.1f} MiB of a 72 MiB object"
    assert s3.get_object(Bucket="mpstream", Key="copy/obj.bin")["Body"].read() == data
    small = _put_striped(cluster, "/mpstream/small", "obj.bin", 12 * MiB + 5, MiB)
    s3.copy_object(Bucket="mpstream", Key="copy/small.bin", CopySource={"Bucket": "mpstream", "Key": "small/obj.bin"})
    with cluster.client().open("/mpstream/copy") as f:
        assert f.object_meta("small.bin") is None and f.get("small.bin") == small  # a record


def test_a_large_put_is_stored_as_it_arrives_and_a_bad_one_commits_nothing(stripes, monkeypatch):
    """A 72 MiB PutObject (boto3: a signed SHA-256 of the body and a CRC32
    header) is read from the network as its stripes are stored: the
    endpoint held under 40 MiB at once (4 MiB stripes for the test), not
    the body; the object reads back whole. A 70 MiB PUT whose bytes are not
    its signed SHA-256 is refused when its end arrives
    (``XAmzContentSHA256Mismatch``) with the connection closed, and nothing
    is committed."""
    import hashlib
    import http.client

    from st_integrations.s3 import ops as s3ops

    monkeypatch.setattr(s3ops, "STREAM_STRIPE_SIZE", 4 * MiB)
    cluster, ep = stripes
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket="bigput")
    data = os.urandom(72 * MiB)
    peak = _peak_bytes(lambda: s3.put_object(Bucket="bigput", Key="run/obj.bin", Body=data))
    assert peak < 40 * MiB, f"PutObject held {peak / MiB:.1f} MiB of a 72 MiB body"
    with cluster.client().open("/bigput/run") as f:
        obj = f.object_meta("obj.bin")
    assert obj is not None and (obj.stripe_size, obj.size) == (4 * MiB, len(data))
    assert s3.get_object(Bucket="bigput", Key="run/obj.bin")["Body"].read() == data
    bad = data[: 70 * MiB]
    conn = http.client.HTTPConnection("127.0.0.1", ep.port, timeout=60)
    try:
        headers = {"x-amz-content-sha256": hashlib.sha256(b"other bytes").hexdigest(), "Content-Length": str(len(bad))}
        conn.request("PUT", "/bigput/fresh/bad.bin", body=bad, headers=headers)
        r = conn.getresponse()
        reply = r.read()
        assert r.status == 400 and b"<Code>XAmzContentSHA256Mismatch</Code>" in reply, (r.status, reply[:300])
        assert r.getheader("Connection") == "close"
    finally:
        conn.close()
    with pytest.raises(Exception, match="404|Not Found"):
        s3.head_object(Bucket="bigput", Key="fresh/bad.bin")
    listed = s3.list_objects_v2(Bucket="bigput", Delimiter="/")
    assert [p["Prefix"] for p in listed.get("CommonPrefixes", [])] == ["run/"], listed  # no empty "fresh/"
    assert s3.list_objects_v2(Bucket="bigput")["KeyCount"] == 1
    # a client gone after 10 of its 70 MiB: nothing committed, the endpoint answers the next request
    import logging
    import socket

    gone: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda r: gone.append(r.getMessage())  # type: ignore[method-assign]
    s3log = logging.getLogger("storetorrent.s3")
    level = s3log.level
    s3log.setLevel(logging.INFO)
    s3log.addHandler(handler)
    try:
        with socket.create_connection(("127.0.0.1", ep.port)) as sock:
            head = f"PUT /bigput/fresh/bad.bin HTTP/1.1\r\nHost: x\r\nContent-Length: {len(bad)}\r\n\r\n"
            sock.sendall(head.encode())
            sock.sendall(bad[: 10 * MiB])
        # the endpoint is done with it (its stripes deleted) once it logs the client gone
        poll_for(
            lambda: any("before the body's end" in m for m in gone),
            timeout=60,
            what="the endpoint to see the client gone",
        )
    finally:
        s3log.removeHandler(handler)
        s3log.setLevel(level)
    with pytest.raises(Exception, match="404|Not Found"):
        s3.head_object(Bucket="bigput", Key="fresh/bad.bin")
    s3.put_object(Bucket="bigput", Key="fresh/bad.bin", Body=bad)  # the client's retry, with its right hash
    assert s3.get_object(Bucket="bigput", Key="fresh/bad.bin")["Body"].read() == bad


def test_stripes_are_in_flight_at_once_and_memory_is_bounded(stripes):
    """A 12-stripe object read whole through an endpoint with a read-ahead
    of 4: 4 stripe GETs were sent and unanswered at once and at most 4
    stripes were held; through one with a read-ahead of 1, one at a time
    (the setting the benchmark compares with). Each stripe is asked of
    the peers once."""
    cluster, ep = stripes
    data = _put_striped(cluster, "/par/run", "obj.bin", 12 * MiB + 5, MiB)
    s3 = ep.client("dev", "anything")
    gets = _peer_gets(cluster)
    assert s3.get_object(Bucket="par", Key="run/obj.bin")["Body"].read() == data
    assert _peer_gets(cluster) - gets == 13
    st = _stats(ep)
    assert st["max_stripes_in_flight"] == 4 and st["max_stripes_held"] == 4
    one = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls, read_ahead=1)
    try:
        c1 = one.client("dev", "anything")
        assert c1.get_object(Bucket="par", Key="run/obj.bin")["Body"].read() == data
        got = c1.get_object(Bucket="par", Key="run/obj.bin", Range=f"bytes={MiB - 3}-{5 * MiB}")["Body"].read()
        assert got == data[MiB - 3 : 5 * MiB + 1]
        st1 = _stats(one)
        assert st1["stripes"] == 13 + 6 and st1["max_stripes_in_flight"] == 1 and st1["max_stripes_held"] == 1
    finally:
        one.stop()


# Timing is the point: whether a stripe GET is in flight to the peer when it dies (so the stream
# meets it and reports it) or the client's connection saw it close first and chose the other copy
# by itself depends on the load; the body is checked whole either way (seen once beside a CI run)
@pytest.mark.flaky(reruns=2)
def test_a_peer_killed_during_a_streamed_get_fails_over(make_cluster):
    """A GET of a 32-stripe x2 object streams its first stripes, then the
    peer holding the most copies of the stripes not yet fetched is
    SIGKILLed: the rest come from the other copies and the body is whole."""
    cluster = make_cluster(3)
    ep = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls, read_ahead=2)
    try:
        data = _put_striped(cluster, "/kill/run", "obj.bin", 32 * MiB, MiB)
        with cluster.client().open("/kill/run") as f:
            addrs = {idx: addr for idx, _, addr in f.infofile().peerlist()}
            later = [addrs[i] for s in range(24, 32) for i in f.record_meta(stripe_name("obj.bin", s)).peers]
        victim = max(set(later), key=later.count)
        s3 = ep.client("dev", "anything")
        reports = _reports(cluster)
        body = s3.get_object(Bucket="kill", Key="run/obj.bin")["Body"]
        head = body.read(2 * MiB)  # the first stripes given; the next ones asked for as the body is read
        cluster.kill_peer(next(i for i, p in enumerate(cluster.peers) if p is not None and p.addr == victim))
        assert head + body.read() == data
        assert _reports(cluster) > reports  # the stream met the dead peer (and told the tracker) and failed over
    finally:
        ep.stop()


def test_copies_on_this_node_are_read_from_disk_and_checked(make_cluster):
    """An endpoint told one peer's data directory reads the stripes (and a
    record) that peer holds from its disk, counted by the endpoint and not
    asked of any peer; a local copy made bad (same size, other bytes) is
    not served: it is counted as a fallback and read by GET from a peer."""
    cluster = make_cluster(4)
    d0 = _peer_dirs(cluster)[0]
    ep = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls, peer_data=[d0])
    try:
        data = _put_striped(cluster, "/loc/run", "obj.bin", 8 * MiB, MiB)
        record = os.urandom(300_000)
        with cluster.client().open("/loc/run") as f:
            f.put("rec.bin", record)
            f.flush()
            pid0 = Path(d0, "PEER_ID").read_text().strip()
            idx0 = next(i for i, p in f.peers.items() if p.peer_id == pid0)
            metas = [f.record_meta(stripe_name("obj.bin", s)) for s in range(8)]
            rec_meta = f.record_meta("rec.bin")
            fid = f.file_id
        local = [m for m in metas if idx0 in m.peers]
        assert 0 < len(local) < 8  # x2 over 4 peers: some stripes on peer-0, some not
        s3 = ep.client("dev", "anything")
        gets = _peer_gets(cluster)
        assert s3.get_object(Bucket="loc", Key="run/obj.bin")["Body"].read() == data
        st = _stats(ep)
        assert st["local_reads"] == len(local) and st["local_bytes"] == len(local) * MiB
        assert st["local_fallbacks"] == 0
        assert _peer_gets(cluster) - gets == 8 - len(local)  # only the others went over the network
        on0 = idx0 in rec_meta.peers
        assert s3.get_object(Bucket="loc", Key="run/rec.bin")["Body"].read() == record
        assert _stats(ep)["local_reads"] == len(local) + on0
        # a bad local copy: not served, read by GET from another copy
        m = local[0]
        path = copy_path(d0, fid, m.key, m.ranks[m.peers.index(idx0)], m.crc32c)
        with open(path, "r+b") as fh:
            fh.write(b"\0" * 64)
        gets = _peer_gets(cluster)
        assert s3.get_object(Bucket="loc", Key="run/obj.bin")["Body"].read() == data
        st = _stats(ep)
        assert st["local_fallbacks"] == 1 and st["local_reads"] == 2 * len(local) - 1 + on0
        server, port = serve_metrics(ep.server.config.app.state.s3, "127.0.0.1", 0)  # as --metrics-port serves them
        try:
            m = scrape_metrics(f"127.0.0.1:{port}")
        finally:
            server.shutdown()
            server.server_close()
        assert metric_value(m, "st_s3_local_reads_total") == st["local_reads"]
        assert metric_value(m, "st_s3_local_read_bytes_total") == st["local_bytes"]
        assert metric_value(m, "st_s3_local_read_fallbacks_total") == 1
        assert metric_value(m, "st_s3_stripes_total") == 16
        assert _peer_gets(cluster) - gets >= 8 - len(local) + 1  # +1: that stripe (its copy on peer-0 may be asked too)
    finally:
        ep.stop()


def test_a_client_gone_mid_body_ends_the_stream(stripes):
    """A client that reads 1 MiB of a 24-stripe object's body and closes
    its connection: the endpoint ends the stream (its counters merged, its
    handle released) and serves the next GET of the object whole."""
    import http.client

    from conftest import poll_for

    cluster, ep = stripes
    data = _put_striped(cluster, "/gone/run", "obj.bin", 24 * MiB, MiB)
    before = _stats(ep)["stripes"]
    conn = http.client.HTTPConnection("127.0.0.1", ep.port, timeout=30)
    conn.request("GET", "/gone/run/obj.bin")  # development mode: unsigned requests are taken
    r = conn.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) == len(data)
    assert r.read(MiB) == data[:MiB]
    conn.close()
    poll_for(lambda: _stats(ep)["stripes"] > before, timeout=30, what="the abandoned stream to end")
    s3 = ep.client("dev", "anything")
    assert s3.get_object(Bucket="gone", Key="run/obj.bin")["Body"].read() == data


def test_a_list_without_sizes_counts_the_names_a_full_list_counts(stripes):
    """The tracker's List with ``counts_only`` (what S3 listings ask a page,
    :meth:`Client.ls` with ``sizes=False``) counts the same names as a full
    List: records once each, a striped object once (never its stripes),
    and leaves the bytes 0."""
    cluster, _ep = stripes
    client = cluster.client()
    with client.create("/counted/f", replication="x2") as f:
        f.put_object("big", os.urandom(3 * MiB), stripe_size=MiB)
        for i in range(5):
            f.put(f"r{i}", b"x" * 10)
    client.create("/counted/empty", replication="x1").close()
    full = {e.name: e for e in client.ls("/counted")}
    quick = {e.name: e for e in client.ls("/counted", sizes=False)}
    assert full.keys() == quick.keys() == {"/counted/f", "/counted/empty"}
    assert full["/counted/f"].records == quick["/counted/f"].records == 6
    assert full["/counted/empty"].records == quick["/counted/empty"].records == 0
    assert full["/counted/f"].bytes >= 3 * MiB + 50 and full["/counted/f"].user_bytes == 3 * MiB + 50
    assert quick["/counted/f"].bytes == quick["/counted/f"].user_bytes == 0


def test_two_large_puts_of_one_key_at_once_store_one_body_whole(stripes, monkeypatch):
    """Two boto3 clients (no retries) stream a large PutObject of the same
    new key at once (65 and 69 MiB: the streamed path, 17 and 18 stripes of
    4 MiB for the test). Each succeeds or answers an S3 error document
    (the loser is refused at or before its first stripe:
    ``ServiceUnavailable``, 503, which SDKs retry); exactly one
    succeeds, the key reads back as its body whole through the endpoint
    and the client, and the file's stripe records are exactly that
    object's (its count, each one's CRC-32C its slice's): nothing of the
    failed attempt is left visible. Before, each attempt could win some of
    the stripes and both fail, and a merged group commit told both writers
    of one stripe's conflict, leaving it committed under no object and
    the key refused to every later PUT."""
    import threading

    import boto3
    import google_crc32c
    from botocore.config import Config
    from botocore.exceptions import ClientError

    from st_integrations.s3 import ops as s3ops
    from st_py.core.infofile import stripe_range

    monkeypatch.setattr(s3ops, "STREAM_STRIPE_SIZE", 4 * MiB)
    cluster, ep = stripes
    ep.client("dev", "anything").create_bucket(Bucket="race")
    bodies = [os.urandom(65 * MiB), os.urandom(69 * MiB)]
    one_try = Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1})
    clients = [
        boto3.client(
            "s3",
            endpoint_url=ep.url,
            aws_access_key_id="dev",
            aws_secret_access_key="anything",
            region_name="us-east-1",
            config=one_try,
        )
        for _ in bodies
    ]
    ep.clients.extend(clients)  # closed with the endpoint
    outcome: list = [None] * len(bodies)
    start = threading.Barrier(len(bodies))

    def put(i: int) -> None:
        start.wait()
        try:
            outcome[i] = clients[i].put_object(Bucket="race", Key="run/obj.bin", Body=bodies[i])["ETag"]
        except ClientError as e:
            outcome[i] = e

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for o in outcome:  # an ETag, or S3's error document: a conflicting operation, to retry
        assert isinstance(o, (str, ClientError)), o
        if isinstance(o, ClientError):
            err = (o.response["Error"]["Code"], o.response["ResponseMetadata"]["HTTPStatusCode"])
            assert err == ("ServiceUnavailable", 503), o.response
    won = [i for i, o in enumerate(outcome) if isinstance(o, str)]
    assert len(won) == 1, outcome
    body = bodies[won[0]]
    got = ep.client("dev", "anything").get_object(Bucket="race", Key="run/obj.bin")
    assert got["ETag"] == outcome[won[0]] and got["Body"].read() == body
    with cluster.client().open("/race/run") as f:
        obj = f.object_meta("obj.bin")
        assert obj is not None and (obj.size, obj.stripe_size) == (len(body), 4 * MiB)
        assert f.get("obj.bin") == body
        rows = list(f.infofile().records_between(*stripe_range("obj.bin")))
    assert [r[0] for r in rows] == [stripe_name("obj.bin", i) for i in range(obj.stripes)]
    for i, (name, _size, crc, _t, _logical) in enumerate(rows):  # each stripe the winner's bytes
        assert crc == google_crc32c.value(body[i * 4 * MiB : (i + 1) * 4 * MiB]), name


def test_large_bodies_into_files_with_filters_read_back_whole_and_by_range(stripes, monkeypatch):
    """A 65 MiB PutObject (streamed) and a CompleteMultipartUpload of 65 MiB
    (two parts, streamed from them) into a bucket's files made with the
    zstd filter and with the AES-256-GCM filter (the endpoint's client
    holding the key), 4 MiB stripes for the test: the stripes are stored
    filtered (zstd: fewer bytes than the object; AES: 28 more a stripe),
    and each object reads back equal through the endpoint (whole, HEAD,
    a range across two stripe boundaries) and through the client (whole,
    and a range read with ``open``)."""
    from st_integrations.s3 import ops as s3ops
    from st_py.core.infofile import stripe_range

    monkeypatch.setattr(s3ops, "STREAM_STRIPE_SIZE", 4 * MiB)
    key = bytes(range(32))
    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", key.hex())  # read by the endpoint's client, made below
    cluster, _ = stripes
    ep = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls)
    try:
        s3 = ep.client("dev", "anything")
        s3.create_bucket(Bucket="flt")
        client = cluster.client(encryption_key=key)
        files = {"z": ["zstd"], "a": ["aes-256-gcm"]}
        for d, filters in files.items():
            client.create(f"/flt/{d}", replication="x2", filters=filters).close()
        lo, hi = 4 * MiB - 10, 8 * MiB + 10  # stripes 0, 1 and 2
        for d, filters in files.items():
            put, mpu = (os.urandom(64 << 10) * (65 * 16) + os.urandom(5) for _ in range(2))  # compressible
            s3.put_object(Bucket="flt", Key=f"{d}/put.bin", Body=put)
            up, parts = _upload_parts(s3, "flt", f"{d}/mpu.bin", mpu, 40 * MiB)
            s3.complete_multipart_upload(
                Bucket="flt", Key=f"{d}/mpu.bin", UploadId=up, MultipartUpload={"Parts": parts}
            )
            for name, data in (("put.bin", put), ("mpu.bin", mpu)):
                k = f"{d}/{name}"
                assert s3.head_object(Bucket="flt", Key=k)["ContentLength"] == len(data)
                assert s3.get_object(Bucket="flt", Key=k)["Body"].read() == data, k
                r = s3.get_object(Bucket="flt", Key=k, Range=f"bytes={lo}-{hi}")
                assert r["ContentRange"] == f"bytes {lo}-{hi}/{len(data)}" and r["Body"].read() == data[lo : hi + 1]
                with client.open(f"/flt/{d}") as f:
                    obj = f.object_meta(name)
                    assert obj is not None and (obj.size, obj.stripe_size, obj.stripes) == (len(data), 4 * MiB, 17)
                    stored = sum(row[1] for row in f.infofile().records_between(*stripe_range(name)))
                    assert f.get(name) == data, k
                    with f.open(name) as src:
                        src.seek(lo)
                        assert src.read(hi + 1 - lo) == data[lo : hi + 1]
                if filters == ["zstd"]:
                    assert stored < len(data) // 2, (k, stored)
                else:
                    assert stored == len(data) + 28 * obj.stripes, (k, stored)
        client.close()
    finally:
        ep.stop()


def test_stripes_a_killed_writer_left_are_cleared_by_a_large_put_through_s3_and_fsspec(stripes, tmp_path, monkeypatch):
    """A writer SIGKILLed midway through storing each of two objects leaves
    committed stripes and no object (docs/striping.md, "Stripes a writer
    left"). A large PutObject of one key through the endpoint (the streamed
    path, 4 MiB stripes for the test) and a large ``pipe_file`` of the
    other through fsspec (``put``'s striped path, over 64 MiB) are refused
    while the stripes are younger than the writer's silence limit (S3's
    ``ServiceUnavailable``, which SDKs retry; fsspec raises the client's
    ``ObjectBeingWrittenError``), storing nothing; past it, each clears
    them, stores its body, and the key reads back whole through the
    endpoint, fsspec and the client, with only the new object's stripes
    committed."""
    import fsspec
    from botocore.exceptions import ClientError
    from helpers import kill_a_writer_midway, stripe_names

    from st_integrations.s3 import ops as s3ops
    from st_py.client import striping
    from st_py.errors import ObjectBeingWrittenError

    monkeypatch.setattr(s3ops, "STREAM_STRIPE_SIZE", 4 * MiB)
    cluster, ep = stripes
    s3 = ep.client("dev", "anything")  # one try: the 503 is seen, not retried
    s3.create_bucket(Bucket="dead")
    c = cluster.client()
    c.create("/dead/run", "x2").close()
    left = {k: kill_a_writer_midway(c, cluster.tracker_addr, "/dead/run", k, tmp_path) for k in ("s3.bin", "fs.bin")}
    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, skip_instance_cache=True)
    body = os.urandom(65 * MiB)
    with pytest.raises(ClientError) as e:  # the writer may still be at work
        s3.put_object(Bucket="dead", Key="run/s3.bin", Body=body)
    err = e.value.response
    assert (err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]) == ("ServiceUnavailable", 503), err
    with pytest.raises(ObjectBeingWrittenError):
        fs.pipe_file("/dead/run/fs.bin", body)
    with c.open("/dead/run") as f:
        assert f.names() == [] and {k: stripe_names(f, k) for k in left} == left  # nothing stored, nothing cleared
    monkeypatch.setattr(striping, "WRITER_SILENT_S", 0.0)  # the writers taken for dead
    s3.put_object(Bucket="dead", Key="run/s3.bin", Body=body)
    fs.pipe_file("/dead/run/fs.bin", body)
    assert s3.get_object(Bucket="dead", Key="run/s3.bin")["Body"].read() == body
    assert fs.cat_file("/dead/run/fs.bin") == body
    with c.open("/dead/run") as f:
        assert f.names() == ["fs.bin", "s3.bin"]
        for k in left:
            obj = f.object_meta(k)
            assert obj is not None and obj.size == len(body) and f.get(k) == body, k
            assert stripe_names(f, k) == [stripe_name(k, i) for i in range(obj.stripes)], k


# Timing is the point (a 1 s read timeout against 2 s operations and 0.2 s between spaces): a loaded
# machine that stalls the endpoint's event loop for a second may run it again, its assertions unchanged.
@pytest.mark.flaky(reruns=2)
def test_a_long_complete_or_copy_keeps_the_connection_alive_and_tells_a_late_error(stripes, monkeypatch):
    """S3's answer to an operation that outlasts a client's read timeout
    (docs/s3.md, "Long operations"): a CompleteMultipartUpload, a
    CopyObject and an UploadPartCopy made to run 2.5 s (the keepalive
    interval 0.2 s for the test) through boto3 with a 1 s read timeout and
    one try succeed, their answers a 200 of the XML declaration, spaces,
    then the result; the objects read back whole. A Complete that fails
    after its answer began (a wrong ETag, found after the wait) is an
    error to boto3 with S3's code (botocore reads the 200's ``<Error>``
    document as a failure), the upload is still there and the key was
    never stored."""
    import hashlib

    from botocore.exceptions import ClientError

    from st_integrations.s3 import keepalive
    from st_integrations.s3.multipart import Multipart
    from st_integrations.s3.ops import Ops

    monkeypatch.setattr(keepalive, "KEEPALIVE_S", 0.2)

    slow_now = [False]

    def slow(fn):
        def run(*args, **kw):
            if slow_now[0]:
                time.sleep(2.0)  # twice the client's read timeout
            return fn(*args, **kw)

        return run

    monkeypatch.setattr(Multipart, "complete", slow(Multipart.complete))
    monkeypatch.setattr(Multipart, "upload_part", slow(Multipart.upload_part))
    monkeypatch.setattr(Ops, "put_object", slow(Ops.put_object))
    _, ep = stripes
    s3 = ep.client("dev", "anything")
    impatient = ep.client("dev", "anything", read_timeout=1)  # for the slow operations only
    answers: dict[str, bytes] = {}
    for op in ("CompleteMultipartUpload", "CopyObject", "UploadPartCopy"):
        impatient.meta.events.register(
            f"after-call.s3.{op}", lambda http_response, _op=op, **_: answers.__setitem__(_op, http_response.content)
        )
    s3.create_bucket(Bucket="slow")
    data = os.urandom(5 * MiB) + b"the end"
    up, parts = _upload_parts(s3, "slow", "run/mpu.bin", data, 5 * MiB)
    up2 = s3.create_multipart_upload(Bucket="slow", Key="run/parts.bin")["UploadId"]
    up3, parts3 = _upload_parts(s3, "slow", "run/bad.bin", data, 5 * MiB)
    slow_now[0] = True
    done = impatient.complete_multipart_upload(
        Bucket="slow", Key="run/mpu.bin", UploadId=up, MultipartUpload={"Parts": parts}
    )
    copy = impatient.copy_object(Bucket="slow", Key="run/copy.bin", CopySource={"Bucket": "slow", "Key": "run/mpu.bin"})
    part = impatient.upload_part_copy(
        Bucket="slow", Key="run/parts.bin", UploadId=up2, PartNumber=1, CopySource="slow/run/mpu.bin"
    )
    for op, root in (
        ("CompleteMultipartUpload", b"<CompleteMultipartUploadResult"),
        ("CopyObject", b"<CopyObjectResult"),
        ("UploadPartCopy", b"<CopyPartResult"),
    ):
        assert _after_spaces(answers[op]).startswith(root), (op, answers[op][:200])
    assert done["ETag"] == s3.head_object(Bucket="slow", Key="run/mpu.bin")["ETag"]
    assert copy["CopyObjectResult"]["ETag"] == s3.head_object(Bucket="slow", Key="run/copy.bin")["ETag"]
    assert part["CopyPartResult"]["ETag"].strip('"') == hashlib.md5(data).hexdigest()  # a part's ETag: its MD5
    for key in ("run/mpu.bin", "run/copy.bin"):
        assert s3.get_object(Bucket="slow", Key=key)["Body"].read() == data, key
    # a failure found after the answer began: the error document's code, nothing stored
    parts3[1]["ETag"] = '"' + "0" * 32 + '"'
    with pytest.raises(ClientError) as e:
        impatient.complete_multipart_upload(
            Bucket="slow", Key="run/bad.bin", UploadId=up3, MultipartUpload={"Parts": parts3}
        )
    slow_now[0] = False
    assert e.value.response["Error"]["Code"] == "InvalidPart", e.value.response
    assert _after_spaces(answers["CompleteMultipartUpload"]).startswith(b"<Error><Code>InvalidPart</Code>")
    listed = s3.list_multipart_uploads(Bucket="slow").get("Uploads", [])
    assert up3 in [u["UploadId"] for u in listed]
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="slow", Key="run/bad.bin")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def _after_spaces(answer: bytes) -> bytes:
    """A kept-alive answer after its XML declaration and at least one space
    (the document), or b"" if it is not one."""
    head = b'<?xml version="1.0" encoding="UTF-8"?>\n '
    return answer[len(head) :].lstrip(b" ") if answer.startswith(head) else b""


def test_an_upload_under_way_is_in_no_listing_of_the_bucket(stripes):
    """A multipart upload's file (``/B/.s3-upload-<id>``: its ``key`` and
    ``parts`` records) and its parts (hidden records of the key's file)
    are the endpoint's state, not data: while the upload runs, fsspec's
    ``find``, ``ls`` and ``glob`` of the bucket and the readers'
    paths (``resolve_paths``: Ray, Dask, DuckDB) leave it out, as S3's
    listing does (before, ``find`` gave its parts as files of the bucket);
    a path naming it still lists it. Completed, the key is in every listing."""
    from st_integrations.fsspec_fs import StoreTorrentFileSystem
    from st_integrations.readplan import resolve_paths

    cluster, ep = stripes
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket="during")
    s3.put_object(Bucket="during", Key="run/a.csv", Body=b"x,y\n1,2\n")
    up = s3.create_multipart_upload(Bucket="during", Key="run/b.csv")["UploadId"]
    etag = s3.upload_part(Bucket="during", Key="run/b.csv", UploadId=up, PartNumber=1, Body=b"x,y\n3,4\n")["ETag"]
    fs = StoreTorrentFileSystem(tracker=cluster.tracker_addr, skip_instance_cache=True)
    client = cluster.client()
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="during")["Contents"]] == ["run/a.csv"]
    assert fs.find("/during") == ["/during/run/a.csv"]
    assert fs.ls("/during", detail=False) == ["/during/.s3", "/during/run"]
    assert fs.glob("/during/*/*.csv") == ["/during/run/a.csv"]
    assert resolve_paths(client, "/during/*") == resolve_paths(client, "/during") == ["/during/.s3", "/during/run"]
    upload = f"/during/.s3-upload-{up}"
    assert [p.rsplit("/", 1)[1] for p in fs.ls(upload, detail=False)] == ["key", "parts"]
    assert fs.ls("/during/run", detail=False) == ["/during/run/a.csv"]  # the part: a hidden record of the key's file
    s3.complete_multipart_upload(
        Bucket="during", Key="run/b.csv", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
    )
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="during")["Contents"]] == ["run/a.csv", "run/b.csv"]
    fs.invalidate_cache()
    assert fs.find("/during") == ["/during/run/a.csv", "/during/run/b.csv"]
    assert fs.cat_file("/during/run/b.csv") == b"x,y\n3,4\n"


def test_a_complete_sent_again_answers_the_first_ones_result(stripes):
    """A CompleteMultipartUpload sent again after one that succeeded (its
    answer lost with the connection; SDKs retry) answers the first one's
    result, as AWS does, and stores nothing again: the key has one
    version. The completed upload is in no ListMultipartUploads, takes no
    part, lists none and cannot be aborted (``NoSuchUpload``); its file
    keeps only its key and result (the parts' commits deleted at once),
    and the reaper removes it ``COMPLETED_KEEP_S`` after, when a Complete
    is ``NoSuchUpload``. docs/s3.md, "Multipart uploads"."""
    from botocore.exceptions import ClientError

    from st_integrations.s3.multipart import COMPLETED_KEEP_S, Multipart

    cluster, s3, data, up, parts = _an_upload_of_two_parts(stripes, "again")
    done = {"Parts": parts}
    first = s3.complete_multipart_upload(Bucket="again", Key="run/obj.bin", UploadId=up, MultipartUpload=done)
    again = s3.complete_multipart_upload(Bucket="again", Key="run/obj.bin", UploadId=up, MultipartUpload=done)
    assert again["ETag"] == first["ETag"] == s3.head_object(Bucket="again", Key="run/obj.bin")["ETag"]
    assert s3.get_object(Bucket="again", Key="run/obj.bin")["Body"].read() == data
    versions = s3.list_object_versions(Bucket="again", Prefix="run/").get("Versions", [])
    assert len(versions) == 1, versions
    assert s3.list_multipart_uploads(Bucket="again").get("Uploads", []) == []
    for call in (
        lambda: s3.upload_part(Bucket="again", Key="run/obj.bin", UploadId=up, PartNumber=3, Body=b"more"),
        lambda: s3.list_parts(Bucket="again", Key="run/obj.bin", UploadId=up),
        lambda: s3.abort_multipart_upload(Bucket="again", Key="run/obj.bin", UploadId=up),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "NoSuchUpload"
    client = cluster.client()
    with client.open(f"/again/.s3-upload-{up}") as f:
        assert f.names() == ["completed", "key", "parts"]
    with client.open("/again/run") as f:  # the parts are the object's stripes now, under its names
        assert f.infofile().records_between(".st-stripe/.s3-upload-", ".st-stripe/.s3-upload.").fetchall() == []
    mp = Multipart(stripes[1].server.config.app.state.s3.ops(None))
    assert mp.reap("again", 24 * 3600.0) == []  # kept for a Complete sent again
    assert mp.reap("again", 24 * 3600.0, now=time.time() + COMPLETED_KEEP_S + 1) == [up]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket="again", Key="run/obj.bin", UploadId=up, MultipartUpload=done)
    assert e.value.response["Error"]["Code"] == "NoSuchUpload"
    assert s3.get_object(Bucket="again", Key="run/obj.bin")["Body"].read() == data


def test_completes_sent_together_store_the_key_once(stripes):
    """Completes of one upload sent together (an SDK's retry while the
    first still runs) store the key once: each takes the upload's claim
    (its file's writer lease) first, so a second one waits for the first
    and answers its object, the same ETag, and the key has one version. A
    claim whose holder died (its lease not renewed) holds a Complete back
    one TTL, no more. docs/s3.md, "Multipart uploads"."""
    from concurrent.futures import ThreadPoolExecutor

    cluster, s3, data, up, parts = _an_upload_of_two_parts(stripes, "together")
    done = {"Parts": parts}
    client = cluster.client()
    claim = client.open(f"/together/.s3-upload-{up}")
    claim.acquire_lease(ttl=60)  # a Complete under way
    with ThreadPoolExecutor(2) as pool:
        sent = [
            pool.submit(
                s3.complete_multipart_upload, Bucket="together", Key="run/obj.bin", UploadId=up, MultipartUpload=done
            )
            for _ in range(2)
        ]
        time.sleep(1.5)
        assert not any(f.done() for f in sent)  # both wait for the claim
        claim.release_lease()
        got = [f.result(timeout=120) for f in sent]
    claim.close()
    assert got[0]["ETag"] == got[1]["ETag"] == s3.head_object(Bucket="together", Key="run/obj.bin")["ETag"]
    assert s3.get_object(Bucket="together", Key="run/obj.bin")["Body"].read() == data
    versions = s3.list_object_versions(Bucket="together", Prefix="run/").get("Versions", [])
    assert len(versions) == 1, versions

    up, parts = _upload_parts(s3, "together", "run/next.bin", data, 5 * MiB)
    dead = client.open(f"/together/.s3-upload-{up}")
    dead.acquire_lease(ttl=3)  # its holder never renews it: as an endpoint killed mid-Complete
    t0 = time.monotonic()
    s3.complete_multipart_upload(Bucket="together", Key="run/next.bin", UploadId=up, MultipartUpload={"Parts": parts})
    assert 1.5 < time.monotonic() - t0 < 60
    assert s3.get_object(Bucket="together", Key="run/next.bin")["Body"].read() == data
    dead.close()


def test_a_key_is_replaced_at_once_whatever_its_new_or_current_version_is(stripes, monkeypatch):
    """PutObject and CompleteMultipartUpload over an existing key when the
    new or the current version is striped (docs/striping.md, "Replacing an
    object"; before 2026-12-01: ``NotImplemented``): a small record by a 65
    MiB object (streamed, 4 MiB stripes), that object by a multipart
    upload's object (composed of its two parts), that by a one-part
    upload's record, each read back whole; the old versions by
    ``versionId``; a GET on another thread during the replacements reads
    one whole version every time."""
    import threading

    from st_integrations.s3 import ops as s3ops

    monkeypatch.setattr(s3ops, "STREAM_STRIPE_SIZE", 4 * MiB)
    cluster, ep = stripes
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket="repl")
    small, big = b"the first version", os.urandom(65 * MiB)
    v0 = s3.put_object(Bucket="repl", Key="run/k.bin", Body=small)["VersionId"]
    bodies = {small}
    stop, bad = threading.Event(), []

    def read() -> None:
        r = ep.client("dev", "anything")
        while not stop.is_set():
            got = r.get_object(Bucket="repl", Key="run/k.bin")["Body"].read()
            if got not in bodies:
                bad.append(len(got))

    t = threading.Thread(target=read)
    t.start()
    try:
        bodies.add(big)
        v1 = s3.put_object(Bucket="repl", Key="run/k.bin", Body=big)["VersionId"]  # a record by an object
        mp = os.urandom(5 * MiB) + b"the end"
        bodies.add(mp)
        up, parts = _upload_parts(s3, "repl", "run/k.bin", mp, 5 * MiB)
        v2 = s3.complete_multipart_upload(
            Bucket="repl", Key="run/k.bin", UploadId=up, MultipartUpload={"Parts": parts}
        )["VersionId"]  # the object by an object composed of the parts where they are
        one = b"one part: " + os.urandom(1000)
        bodies.add(one)
        up, parts = _upload_parts(s3, "repl", "run/k.bin", one, len(one))
        v3 = s3.complete_multipart_upload(
            Bucket="repl", Key="run/k.bin", UploadId=up, MultipartUpload={"Parts": parts}
        )["VersionId"]  # the object by a record (one part: the part's copies)
    finally:
        stop.set()
        t.join(120)
    assert not bad, bad
    assert s3.get_object(Bucket="repl", Key="run/k.bin")["Body"].read() == one
    assert s3.get_object(Bucket="repl", Key="run/k.bin", VersionId=v0)["Body"].read() == small
    old = s3.get_object(Bucket="repl", Key="run/k.bin", VersionId=v1, Range="bytes=4194300-4194310")
    assert old["Body"].read() == big[4194300:4194311]
    assert s3.get_object(Bucket="repl", Key="run/k.bin", VersionId=v2)["Body"].read() == mp
    assert int(v0) < int(v1) < int(v2) < int(v3)
    with cluster.client().open("/repl/run") as f:
        assert f.object_meta("k.bin") is None and f.get("k.bin") == one and f.names() == ["k.bin"]
