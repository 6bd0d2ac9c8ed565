"""GETs the endpoint answers on its event loop (docs/s3.md, "The request
path"): a small object of a kept file with a copy on this host's disk is
read without a worker thread, and its answer (status, headers, bytes,
error document) is the one a worker thread gives. Two endpoints over one
cluster: A reads the peers' data directories (``--peer-data``: quick GETs),
B does not (every GET in a worker thread). Real tracker, peers, boto3."""

from __future__ import annotations

import datetime as dt
import os
import socket

import pytest
from botocore.exceptions import ClientError
from test_s3 import Endpoint, s3_users

from st_integrations.s3.ops import QUICK_GET_BYTES

VARYING = {"x-amz-request-id", "date", "server"}  # differ between any two answers


@pytest.fixture(scope="module")
def pair(make_module_cluster, tmp_path_factory):
    """``(client of A, client of B, A, B, alice's key)``, alice's clients, bucket ``quick`` made."""
    users, keys_file, keys = s3_users(tmp_path_factory.mktemp("s3quick"), "alice")
    key = keys["alice"]
    cluster = make_module_cluster(4, name="s3quick", users_file=users)
    dirs = [str(cluster.data_dir / "peers" / f"peer-{i}") for i in range(cluster.n_peers)]
    a = Endpoint(cluster.tracker_addr, keys_file, tls=cluster.client_tls, peer_data=dirs)
    b = Endpoint(cluster.tracker_addr, keys_file, tls=cluster.client_tls)
    ca, cb = a.client("alice", key), b.client("alice", key)
    ca.create_bucket(Bucket="quick")
    yield ca, cb, a, b, key
    a.stop()
    b.stop()


def _quick(ep: Endpoint) -> int:
    return ep.server.config.app.state.s3.read_stats()["quick_gets"]


def _answer(c, **kw) -> tuple[int, dict[str, str], bytes | dict]:
    """``(status, headers less the varying ones, body or the error)`` of a GET."""
    try:
        r = c.get_object(Bucket="quick", **kw)
        body: bytes | dict = r["Body"].read()
        meta = r["ResponseMetadata"]
    except ClientError as e:
        meta, body = e.response["ResponseMetadata"], dict(e.response["Error"])
    headers = {k: v for k, v in meta["HTTPHeaders"].items() if k not in VARYING}
    return meta["HTTPStatusCode"], headers, body


def test_quick_gets_answer_as_worker_threads_do(pair):
    """Whole and ranged GETs, conditionals met and failed, an invalid
    range, a response override and a missing key: the same status, headers
    and bytes (or error) from A's event loop as from B's worker threads;
    A answered the successful ones quickly, B none; an object over
    QUICK_GET_BYTES goes to a worker thread on A too."""
    ca, cb, a, b, _ = pair
    small = os.urandom(4096)
    large = os.urandom(QUICK_GET_BYTES + 1)
    ca.put_object(Bucket="quick", Key="d/small", Body=small, Metadata={"k": "v"}, ContentType="text/csv")
    ca.put_object(Bucket="quick", Key="d/large", Body=large)
    for c in (ca, cb):  # each endpoint keeps the file (the first GET opens its handle)
        assert c.get_object(Bucket="quick", Key="d/small")["Body"].read() == small
    etag = ca.head_object(Bucket="quick", Key="d/small")["ETag"]
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    past = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    cases = [
        ({"Key": "d/small"}, 200),
        ({"Key": "d/small", "Range": "bytes=10-99"}, 206),
        ({"Key": "d/small", "Range": "bytes=-7"}, 206),
        ({"Key": "d/small", "Range": "bytes=4000-"}, 206),
        ({"Key": "d/small", "Range": "bytes=5000-6000"}, 416),
        ({"Key": "d/small", "IfNoneMatch": etag}, 304),
        ({"Key": "d/small", "IfMatch": '"0123"'}, 412),
        ({"Key": "d/small", "IfModifiedSince": future}, 304),
        ({"Key": "d/small", "IfUnmodifiedSince": past}, 412),
        ({"Key": "d/small", "ResponseContentType": "application/x-test", "ResponseCacheControl": "no-cache"}, 200),
        ({"Key": "d/missing"}, 404),
    ]
    before_a, before_b = _quick(a), _quick(b)
    for kw, status in cases:
        got_a, got_b = _answer(ca, **kw), _answer(cb, **kw)
        assert got_a[0] == status, (kw, got_a)
        assert got_a == got_b, kw
    answered = sum(1 for _, status in cases if status in (200, 206, 304))
    assert _quick(a) - before_a == answered
    assert _answer(ca, Key="d/small", Range="bytes=10-99")[2] == small[10:100]
    assert _quick(b) == before_b == 0
    n = _quick(a)
    got_a, got_b = _answer(ca, Key="d/large"), _answer(cb, Key="d/large")
    assert got_a == got_b and got_a[2] == large
    assert _quick(a) == n  # over QUICK_GET_BYTES: a worker thread's


def _presigned_path(ep: Endpoint, key: str, method: str, obj: str) -> str:
    """The path and query of a presigned ``method`` URL of ``quick/obj`` (SigV4)."""
    signer = ep.client("alice", key, signature_version="s3v4")
    url = signer.generate_presigned_url(method, Params={"Bucket": "quick", "Key": obj}, ExpiresIn=60)
    return url.split(f"127.0.0.1:{ep.port}", 1)[1]


def test_a_small_answer_is_one_write_and_100_continue_is_not_held(pair):
    """With httptools a small GET's head and body leave in one write (one
    TCP segment on loopback: the first read of the raw socket holds the
    whole answer), and a PUT's ``100 Continue`` is sent at once, before
    the client sends its body (protocol._HeadCoalescer)."""
    ca, _, a, _, key = pair
    body = os.urandom(4096)
    ca.put_object(Bucket="quick", Key="seg/obj", Body=body)
    path = _presigned_path(a, key, "get_object", "seg/obj")
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", a.port), timeout=20) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{a.port}\r\n\r\n".encode())
            first = s.recv(1 << 20)
        assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(body), first[:200]
    path = _presigned_path(a, key, "put_object", "seg/put")
    with socket.create_connection(("127.0.0.1", a.port), timeout=20) as s:
        s.sendall(
            f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{a.port}\r\nContent-Length: 5\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        s.settimeout(5)
        assert s.recv(1 << 16) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(b"hello")
        assert s.recv(1 << 16).startswith(b"HTTP/1.1 200 ")
    assert ca.get_object(Bucket="quick", Key="seg/put")["Body"].read() == b"hello"
