"""Signed chunks (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` and its ``-TRAILER``
form) through the S3 endpoint, with real signatures checked (access keys,
not development mode; docs/s3.md, "Signed chunks"):

* MinIO's Go client (minio-go, ``tests/s3_clients/minio_go``, built here with
  the machine's Go from the module proxy) signs every chunk of a PUT and of
  a multipart part over plain http, as the AWS SDK for Java v2 (Spark's s3a)
  does: it writes, reads back, lists and deletes, and boto3 and the
  StoreTorrent client read the same bytes;
* a body whose chunk was changed after signing, or whose chunk signature
  or trailer signature is not the chain's, is refused with
  ``SignatureDoesNotMatch`` and nothing is stored.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from test_s3 import Endpoint, s3_users

from st_integrations.s3.chunked import ChunkChain, crc32c_b64
from st_py.wire.transport import crc32c_many

GO_CLIENT = Path(__file__).parent / "s3_clients" / "minio_go"


def lcg_body(n: int, seed: int) -> bytes:
    """The Go client's deterministic ``body(n, seed)``."""
    out = bytearray(n)
    x = seed + 1
    for i in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = x >> 24
    return bytes(out)


@pytest.fixture(scope="module")
def s3check(tmp_path_factory) -> str:
    """The minio-go client, built (``go build``, go.sum pinned)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        pytest.fail("Go is not installed (the machine's Go builds the minio-go client of this test)")
    out = tmp_path_factory.mktemp("go") / "s3check"
    env = {**os.environ, "GOFLAGS": "-mod=readonly"}
    r = subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_CLIENT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"go build of the minio-go client failed:\n{r.stderr}"
    return str(out)


@pytest.fixture(scope="module")
def keyed(make_module_cluster, tmp_path_factory):
    """``(cluster, endpoint, secret)``: user dana and an endpoint with her key."""
    users, keys_file, keys = s3_users(tmp_path_factory.mktemp("s3go"), "dana")
    secret = keys["dana"]
    cluster = make_module_cluster(4, name="s3go", users_file=users)
    ep = Endpoint(cluster.tracker_addr, keys_file, tls=cluster.client_tls)
    yield cluster, ep, secret
    ep.stop()


def test_minio_go_writes_with_signed_chunks_and_every_reader_agrees(s3check, keyed):
    cluster, ep, secret = keyed
    r = subprocess.run(
        [s3check, f"127.0.0.1:{ep.port}", "dana", secret, "gobucket"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    want = {
        "go/small.bin": lcg_body(1000, 1),
        "go/empty.bin": b"",
        "go/chunks.bin": lcg_body(300_000, 3),
        "go/multipart.bin": lcg_body((11 << 20) + 17, 4),
    }
    for key, data in want.items():
        assert f"put {key} {len(data)} {hashlib.sha256(data).hexdigest()}" in lines, lines
        assert f"get {key} {len(data)} {hashlib.sha256(data).hexdigest()}" in lines, lines
    assert sorted(line for line in lines if line.startswith("list ")) == sorted(
        f"list {k} {len(d)}" for k, d in want.items()
    )
    assert lines[-1] == "removed go/empty.bin"
    s3 = ep.client("dana", secret)
    for key, data in want.items():
        if key == "go/empty.bin":
            with pytest.raises(ClientError):
                s3.head_object(Bucket="gobucket", Key=key)
            continue
        assert s3.get_object(Bucket="gobucket", Key=key)["Body"].read() == data
    with cluster.client(api_key=secret).open("/gobucket/go") as f:
        assert sorted(f.names()) == ["chunks.bin", "multipart.bin", "small.bin"]
        assert f.get("small.bin") == want["go/small.bin"]
        assert f.get("multipart.bin") == want["go/multipart.bin"]


def test_minio_go_with_a_wrong_secret_stores_nothing(s3check, keyed):
    """A PUT with signed chunks under a wrong secret: refused on the seed
    (the header's) signature, nothing stored; the right one stores it."""
    cluster, ep, secret = keyed
    s3 = ep.client("dana", secret)
    s3.create_bucket(Bucket="gobucket2")
    args = [s3check, f"127.0.0.1:{ep.port}", "dana"]
    r = subprocess.run([*args, "not-" + secret, "gobucket2", "put-only"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "signature we calculated does not match" in r.stderr, r.stderr
    assert s3.list_objects_v2(Bucket="gobucket2")["KeyCount"] == 0
    r = subprocess.run([*args, secret, "gobucket2", "put-only"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert s3.get_object(Bucket="gobucket2", Key="go/put-only.bin")["Body"].read() == lcg_body(300_000, 5)


class _Signer(S3SigV4Auth):
    """botocore's S3 SigV4 signer with ``x-amz-content-sha256`` given (a
    signed-chunks constant, or a hash of other bytes than the body)."""

    def __init__(self, payload: str, *args):
        super().__init__(*args)
        self._payload = payload

    def payload(self, request) -> str:
        return self._payload


def _signed_put(ep, secret: str, key: str, chunks: list[bytes], trailer: bool):
    """A PUT of ``key`` whose body is ``chunks`` in ``aws-chunked`` form, each
    signed in the chain from the header's signature (botocore signs the
    header); returns ``(headers, body)`` to send or spoil."""
    data = b"".join(chunks)
    payload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" + ("-TRAILER" if trailer else "")
    headers = {
        "x-amz-content-sha256": payload,
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
    }
    if trailer:
        headers["x-amz-trailer"] = "x-amz-checksum-crc32c"
    req = AWSRequest(method="PUT", url=f"{ep.url}/chk/{key}", headers=headers)
    _Signer(payload, Credentials("dana", secret), "s3", "us-east-1").add_auth(req)
    auth = req.headers["Authorization"]
    seed = auth.rsplit("Signature=", 1)[1]
    date = req.headers["X-Amz-Date"]
    from st_integrations.s3.auth import signing_key

    chain = ChunkChain(
        signing_key(secret, date[:8], "us-east-1", "s3"), date, f"{date[:8]}/us-east-1/s3/aws4_request", seed, trailer
    )
    body, prev = b"", seed
    for c in [*chunks, b""]:
        prev = chain.chunk(prev, c)
        body += f"{len(c):x};chunk-signature={prev}\r\n".encode() + c + (b"\r\n" if c or not trailer else b"")
    if trailer:
        line = f"x-amz-checksum-crc32c:{crc32c_b64(int(crc32c_many([data])[0]))}\n".encode()
        body += line + b"\r\nx-amz-trailer-signature:" + chain.trailing(prev, line).encode() + b"\r\n\r\n"
    return dict(req.headers.items()), body


def _send(ep, headers: dict, body: bytes, key: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", ep.port, timeout=30)
    try:
        conn.request("PUT", f"/chk/{key}", body=body, headers={**headers, "Content-Length": str(len(body))})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("trailer", [False, True], ids=["chunks", "chunks-and-trailer"])
def test_a_spoiled_chunk_or_signature_is_refused_and_stores_nothing(keyed, trailer):
    cluster, ep, secret = keyed
    s3 = ep.client("dana", secret)
    if "chk" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="chk")
    chunks = [os.urandom(65536), os.urandom(65536), os.urandom(1234)]
    key = f"t{int(trailer)}/obj.bin"
    headers, body = _signed_put(ep, secret, key, chunks, trailer)
    at = body.index(chunks[1]) + 100
    spoiled = {
        "a byte of a chunk": body[:at] + bytes([body[at] ^ 1]) + body[at + 1 :],
        "a chunk signature": body.replace(body[body.index(b"=") + 1 : body.index(b"=") + 5], b"0000", 1),
    }
    if trailer:
        i = body.index(b"x-amz-trailer-signature:") + 30
        spoiled["the trailer signature"] = body[:i] + (b"0" if body[i : i + 1] != b"0" else b"1") + body[i + 1 :]
    for what, bad in spoiled.items():
        status, reply = _send(ep, headers, bad, key)
        assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in reply, (what, status, reply[:300])
        with pytest.raises(ClientError):
            s3.head_object(Bucket="chk", Key=key)  # nothing stored
    status, reply = _send(ep, headers, body, key)
    assert status == 200, reply[:300]
    assert s3.get_object(Bucket="chk", Key=key)["Body"].read() == b"".join(chunks)


def test_a_payload_hash_is_checked_on_an_aws_chunked_body_too(keyed):
    """A request signed for one payload's SHA-256 whose body is another,
    sent as ``aws-chunked``: ``XAmzContentSHA256Mismatch``, nothing stored
    (the hash was once skipped for any ``aws-chunked`` body, so a body could
    be swapped under a captured signature)."""
    cluster, ep, secret = keyed
    s3 = ep.client("dana", secret)
    if "chk" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="chk")
    signed_for = b"5\r\nhello\r\n0\r\n\r\n"
    sent = b"5\r\nevil!\r\n0\r\n\r\n"
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "5"}
    req = AWSRequest(method="PUT", url=f"{ep.url}/chk/swap.bin", headers=headers)
    _Signer(hashlib.sha256(signed_for).hexdigest(), Credentials("dana", secret), "s3", "us-east-1").add_auth(req)
    status, reply = _send(ep, dict(req.headers.items()), sent, "swap.bin")
    assert status == 400 and b"<Code>XAmzContentSHA256Mismatch</Code>" in reply, (status, reply[:300])
    with pytest.raises(ClientError):
        s3.head_object(Bucket="chk", Key="swap.bin")
    status, reply = _send(ep, dict(req.headers.items()), signed_for, "swap.bin")
    assert status == 200, reply[:300]
    assert s3.get_object(Bucket="chk", Key="swap.bin")["Body"].read() == b"hello"


def test_a_put_over_64_mib_in_signed_chunks_is_checked_as_it_streams(keyed):
    """A 65 MiB payload in signed 1 MiB chunks with a signed CRC-32C
    trailer is stored as it arrives (a striped object) and reads back; the
    same body with a byte of its last chunk changed is refused when that
    chunk ends (``SignatureDoesNotMatch``), and nothing is committed."""
    cluster, ep, secret = keyed
    s3 = ep.client("dana", secret)
    if "chk" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="chk")
    chunks = [os.urandom(1 << 20) for _ in range(65)] + [os.urandom(4321)]
    headers, body = _signed_put(ep, secret, "big/bad.bin", chunks, True)
    at = body.index(chunks[-1]) + 10
    status, reply = _send(ep, headers, body[:at] + bytes([body[at] ^ 1]) + body[at + 1 :], "big/bad.bin")
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in reply, (status, reply[:300])
    with pytest.raises(ClientError):
        s3.head_object(Bucket="chk", Key="big/bad.bin")
    headers, body = _signed_put(ep, secret, "big/obj.bin", chunks, True)
    status, reply = _send(ep, headers, body, "big/obj.bin")
    assert status == 200, reply[:300]
    assert s3.get_object(Bucket="chk", Key="big/obj.bin")["Body"].read() == b"".join(chunks)
    with cluster.client(api_key=secret).open("/chk/big") as f:
        assert f.names() == ["obj.bin"] and f.object_meta("obj.bin") is not None
