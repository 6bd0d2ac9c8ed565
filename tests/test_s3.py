"""The S3 endpoint (docs/s3.md) against a real tracker and peers, driven
by real clients: boto3 with its default checksum settings, s3fs with
pandas, and the StoreTorrent Client and fsspec reading what S3 wrote (and
the other way round). The endpoint is a real uvicorn server in a thread on
a free 127.0.0.1 port."""

from __future__ import annotations

import datetime
import hashlib
import io
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import boto3
import botocore
import fsspec
import pandas as pd
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from conftest import poll_for

from st_integrations.fsspec_fs import StoreTorrentFileSystem
from st_integrations.keymap import BadKeyError, Target, check_key, key_of
from st_integrations.s3.chunked import decode_aws_chunked
from st_integrations.s3.protocol import S3H11Protocol, protocol_class
from st_integrations.s3.server import listen, make_server, protocol_of
from st_py.client.namespace_paths import new_file
from st_py.errors import BadNameError, DirectoryNotFoundError, FileNotEmptyError, InvalidOptionError


def s3_client(url: str, access_key: str, secret: str, **config):
    """A boto3 S3 client of the endpoint at ``url`` (path style, one try,
    ``config`` added to botocore's Config); the caller closes it."""
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, **config),
    )


class Endpoint:
    """``storetorrent s3`` in a thread of this process, stopped by ``stop``."""

    def __init__(self, tracker: str, keys_file=None, tls=(None, None, None), domain=None, **kw):
        sock = listen("127.0.0.1", 0)  # bound here, on a port the kernel chose: no other process can take it first
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.keys_file, self.tls = keys_file, tls
        self.server = make_server(tracker, port=self.port, keys_file=keys_file, tls=tls, domain=domain, **kw)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.clients: list = []
        self.thread.start()
        poll_for(lambda: self.server.started, timeout=20, what="the S3 endpoint to listen")

    def client(self, access_key: str, secret: str, **config):
        """A boto3 S3 client with its default checksum settings."""
        c = s3_client(self.url, access_key, secret, **config)
        self.clients.append(c)
        return c

    def stop(self) -> None:
        for c in self.clients:
            c.close()
        self.server.should_exit = True
        self.thread.join(10)


def s3_users(d: Path, *names: str, quota_bytes: dict[str, int] | None = None) -> tuple[Path, Path, dict[str, str]]:
    """``(users file, endpoint keys file, {name: API key})`` in folder ``d``:
    each of ``names`` a StoreTorrent user of its own group (with its quota
    from ``quota_bytes``), its API key the S3 secret of access key ``name``."""
    from st_py.tracker.access import add_user

    users = d / "users.toml"
    keys = {
        u: add_user(users, u, [u], **({"quota_bytes": quota_bytes[u]} if u in (quota_bytes or {}) else {}))
        for u in names
    }
    (d / "s3keys.toml").write_text("[users]\n" + "".join(f'{u} = "{k}"\n' for u, k in keys.items()))
    return users, d / "s3keys.toml", keys


@pytest.fixture(scope="module")
def site(make_module_cluster, tmp_path_factory):
    """A cluster with users alice and bob and an endpoint with their keys:
    ``(cluster, endpoint, keys)``."""
    users, keys_file, keys = s3_users(
        tmp_path_factory.mktemp("s3site"),
        "alice",
        "bob",
        "carol",
        "dave",
        quota_bytes={"carol": 300_000, "dave": 20_000_000},
    )
    cluster = make_module_cluster(4, name="s3", users_file=users)
    ep = Endpoint(cluster.tracker_addr, keys_file, tls=cluster.client_tls)
    yield cluster, ep, keys
    ep.stop()


@pytest.fixture(scope="module")
def s3(site):
    cluster, ep, keys = site
    c = ep.client("alice", keys["alice"])
    c.create_bucket(Bucket="exp")
    return c


def code(e: ClientError) -> str:
    return e.response["Error"]["Code"]


def test_mapping_is_one_module():
    assert new_file("/exp", "run1/src/a.parquet") == ("/exp/run1", "src/a.parquet")
    assert new_file("/exp", "top.csv") is None  # a top-level key is a record of /exp/.s3 (KeyMap.resolve)
    assert key_of("exp", "/exp/run1", "src/a.parquet") == "run1/src/a.parquet"
    assert key_of("exp", "/exp/.s3", "top.csv") == "top.csv"
    for bad in ("a/../b", "..", "a//b", "/a", "a/", ".s3/x", "x" * 1025):
        with pytest.raises(BadKeyError):
            check_key(bad)


def test_aws_chunked_bodies_as_botocore_sends_them():
    """The trailer form botocore sends over https (STREAMING-UNSIGNED-PAYLOAD-TRAILER)."""
    from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum

    data = bytes(range(256)) * 1000
    body = AwsChunkedWrapper(
        io.BytesIO(data), checksum_cls=Crc32Checksum, checksum_name="x-amz-checksum-crc32", chunk_size=7000
    ).read()
    out, trailers = decode_aws_chunked(body)
    assert out == data and set(trailers) == {"x-amz-checksum-crc32"}


def test_aws_chunked_bodies_decode_the_same_fed_in_any_pieces():
    """The decoder of streamed bodies (a large PUT read as it arrives)
    gives what the whole body gives, whatever the pieces the network
    delivers: chunk headers, CRLFs and trailers cut anywhere, signed
    chunks checked across the cuts; a cut body is ``IncompleteBody``."""
    import random

    from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum

    from st_integrations.s3.chunked import ChunkChain, ChunkedDecoder
    from st_integrations.s3.errors import S3Error

    rng = random.Random(42)
    data = rng.randbytes(300_000)
    body = AwsChunkedWrapper(
        io.BytesIO(data), checksum_cls=Crc32Checksum, checksum_name="x-amz-checksum-crc32", chunk_size=7000
    ).read()
    chain = ChunkChain(b"k" * 32, "20261130T000000Z", "20261130/us-east-1/s3/aws4_request", "0" * 64, True)
    signed, prev = b"", chain.seed
    for c in [data[i : i + 65536] for i in range(0, len(data), 65536)] + [b""]:
        prev = chain.chunk(prev, c)
        signed += f"{len(c):x};chunk-signature={prev}\r\n".encode() + c + (b"\r\n" if c else b"")
    line = b"x-amz-checksum-crc32:abcd\n"
    signed += line + b"\r\nx-amz-trailer-signature:" + chain.trailing(prev, line).encode() + b"\r\n\r\n"
    for raw, ch in ((body, None), (signed, chain)):
        for _ in range(30):
            d, out, at = ChunkedDecoder(ch), [], 0
            while at < len(raw):
                n = rng.choice([1, 2, 3, 7, 100, 4096, 70_000])
                out += [bytes(p) for p in d.feed(raw[at : at + n])]
                at += n
            assert b"".join(out) == data
            assert set(d.finish()) in ({"x-amz-checksum-crc32"},)
        d = ChunkedDecoder(ch)
        d.feed(raw[: len(raw) // 2])
        with pytest.raises(S3Error, match="ended inside"):
            d.finish()


def test_put_get_head_delete_with_default_checksums(s3, site):
    cluster, ep, keys = site
    data = b"hello s3 " * 1000
    put = s3.put_object(Bucket="exp", Key="run1/src/a.bin", Body=data)
    got = s3.get_object(Bucket="exp", Key="run1/src/a.bin")
    assert got["Body"].read() == data
    assert got["ETag"] == put["ETag"] and re.fullmatch(r'"[0-9a-f]{32}-1"', put["ETag"])  # not an MD5 (docs/s3.md)
    head = s3.head_object(Bucket="exp", Key="run1/src/a.bin")
    assert head["ContentLength"] == len(data) and head["ETag"] == put["ETag"]
    # the same bytes through the Client: file /exp/run1, record src/a.bin
    with cluster.client(api_key=keys["alice"]).open("/exp/run1") as f:
        assert f.get("src/a.bin") == data
    # overwrite: a new version
    s3.put_object(Bucket="exp", Key="run1/src/a.bin", Body=b"v2")
    assert s3.get_object(Bucket="exp", Key="run1/src/a.bin")["Body"].read() == b"v2"
    s3.put_object(Bucket="exp", Key="top.txt", Body=b"top")
    assert s3.get_object(Bucket="exp", Key="top.txt")["Body"].read() == b"top"
    s3.delete_object(Bucket="exp", Key="run1/src/a.bin")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="run1/src/a.bin")
    assert code(e.value) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="exp", Key="run1/src/a.bin")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert "exp" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket="exp")


def test_range_reads(s3):
    data = bytes(range(256)) * 40
    s3.put_object(Bucket="exp", Key="ranges/r.bin", Body=data)
    assert s3.get_object(Bucket="exp", Key="ranges/r.bin", Range="bytes=10-19")["Body"].read() == data[10:20]
    assert s3.get_object(Bucket="exp", Key="ranges/r.bin", Range="bytes=-5")["Body"].read() == data[-5:]
    assert s3.get_object(Bucket="exp", Key="ranges/r.bin", Range="bytes=10000-")["Body"].read() == data[10000:]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="ranges/r.bin", Range=f"bytes={len(data)}-")
    assert code(e.value) == "InvalidRange"


def test_listing_with_delimiter_and_pages(s3):
    keys = sorted([f"list/run{i % 3}/part-{i:03d}" for i in range(25)] + ["list/a.txt", "listx/b"])
    s3.delete_objects(Bucket="exp", Delete={"Objects": [{"Key": k} for k in keys]})
    for k in keys:
        s3.put_object(Bucket="exp", Key=k, Body=k.encode())
    r = s3.list_objects_v2(Bucket="exp", Prefix="list/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["list/run0/", "list/run1/", "list/run2/"]
    assert [c["Key"] for c in r["Contents"]] == ["list/a.txt"]
    assert r["Contents"][0]["Size"] == len(b"list/a.txt")
    # pages of 4 over 26 keys under list/
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="exp", Prefix="list/", PaginationConfig={"PageSize": 4})
    seen = []
    n_pages = 0
    for page in pages:
        n_pages += 1
        assert page["KeyCount"] <= 4
        seen += [c["Key"] for c in page.get("Contents", [])]
    assert seen == [k for k in keys if k.startswith("list/")] and n_pages == 7
    r = s3.list_objects_v2(Bucket="exp", Prefix="list/run1/", StartAfter="list/run1/part-010")
    assert [c["Key"] for c in r["Contents"]] == [
        k for k in keys if k.startswith("list/run1/") and k > "list/run1/part-010"
    ]
    # delimiter over pages: prefixes count as entries
    r = s3.list_objects_v2(Bucket="exp", Prefix="list/", Delimiter="/", MaxKeys=2)
    assert r["IsTruncated"] and [c["Key"] for c in r["Contents"]] == ["list/a.txt"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["list/run0/"]
    r = s3.list_objects_v2(Bucket="exp", Prefix="list/", Delimiter="/", ContinuationToken=r["NextContinuationToken"])
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["list/run1/", "list/run2/"] and not r["IsTruncated"]
    out = s3.delete_objects(Bucket="exp", Delete={"Objects": [{"Key": k} for k in keys]})
    assert len(out["Deleted"]) == len(keys)
    assert s3.list_objects_v2(Bucket="exp", Prefix="list/")["KeyCount"] == 0


def test_s3fs_parquet_read_by_pandas_and_storetorrent(site, s3):
    import s3fs

    cluster, ep, keys = site
    fs = s3fs.S3FileSystem(
        key="alice", secret=keys["alice"], client_kwargs={"endpoint_url": ep.url}, use_listings_cache=False
    )
    df = pd.DataFrame({"x": range(100), "s": [f"r{i}" for i in range(100)]})
    with fs.open("exp/pq/part-0.parquet", "wb") as f:
        df.to_parquet(f, index=False)
    assert pd.read_parquet(
        "s3://exp/pq/part-0.parquet",
        storage_options={"key": "alice", "secret": keys["alice"], "client_kwargs": {"endpoint_url": ep.url}},
    ).equals(df)
    assert fs.ls("exp/pq") == ["exp/pq/part-0.parquet"]
    StoreTorrentFileSystem.clear_instance_cache()
    st = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, api_key=keys["alice"], tls=cluster.client_tls)
    assert pd.read_parquet(st.open("/exp/pq/part-0.parquet")).equals(df)


def test_client_records_are_listed_and_read_by_boto3(site, s3):
    cluster, ep, keys = site
    with cluster.client(api_key=keys["alice"]).create("/exp/fromclient", replication="x2") as f:
        f.put("a/1.bin", b"one")
        f.put("a/2.bin", b"two")
    r = s3.list_objects_v2(Bucket="exp", Prefix="fromclient/")
    assert [c["Key"] for c in r["Contents"]] == ["fromclient/a/1.bin", "fromclient/a/2.bin"]
    assert s3.get_object(Bucket="exp", Key="fromclient/a/2.bin")["Body"].read() == b"two"


def test_refusals_store_nothing(site, s3):
    cluster, ep, keys = site
    bad = ep.client("alice", keys["alice"] + "x")
    with pytest.raises(ClientError) as e:
        bad.put_object(Bucket="exp", Key="bad/x", Body=b"x")
    assert code(e.value) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as e:
        ep.client("mallory", "whatever").list_buckets()
    assert code(e.value) == "InvalidAccessKeyId"
    anon = boto3.client(
        "s3",
        endpoint_url=ep.url,
        region_name="us-east-1",
        config=Config(signature_version=botocore.UNSIGNED, retries={"max_attempts": 1}),
    )
    ep.clients.append(anon)
    with pytest.raises(ClientError) as e:
        anon.put_object(Bucket="exp", Key="bad/anon", Body=b"x")
    assert code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="nosuchbucket", Key="a/b", Body=b"x")
    assert code(e.value) == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="exp", Key="bad/../escape", Body=b"x")
    assert code(e.value) == "InvalidArgument"
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(
            Bucket="exp",
            Key="bad/copy",
            UploadId="0" * 32,
            PartNumber=1,
            CopySource={"Bucket": "exp", "Key": "top.txt"},
        )
    assert code(e.value) == "NoSuchUpload"  # checked before the source is read
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="top.txt", PartNumber=2)  # every object is one part (its ETag's -1)
    assert code(e.value) == "InvalidPartNumber"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_tagging(Bucket="exp", Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})
    assert code(e.value) == "NotImplemented"
    assert s3.list_objects_v2(Bucket="exp", Prefix="bad")["KeyCount"] == 0
    assert not (cluster.namespace / "exp" / "bad").exists() and not (cluster.namespace / "escape").exists()
    # bob may not write into alice's files (modes apply, docs/security.md)
    s3.put_object(Bucket="exp", Key="mine/a", Body=b"alice's")
    with pytest.raises(ClientError) as e:
        ep.client("bob", keys["bob"]).put_object(Bucket="exp", Key="mine/b", Body=b"bob's")
    assert code(e.value) == "AccessDenied"


def test_bucket_lifecycle(s3):
    s3.create_bucket(Bucket="tmpbucket")
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket="tmpbucket")
    assert code(e.value) == "BucketAlreadyOwnedByYou"
    s3.put_object(Bucket="tmpbucket", Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="tmpbucket")
    assert code(e.value) == "BucketNotEmpty"
    s3.delete_object(Bucket="tmpbucket", Key="k")
    s3.delete_bucket(Bucket="tmpbucket")
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="tmpbucket")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_a_bucket_whose_keys_were_deleted_is_deleted(site, s3):
    """Keys below a ``/`` live in StoreTorrent files (``/B/a`` for
    ``a/b``) that stay, empty, when the keys go: DeleteBucket deletes them
    as S3 deletes a bucket whose keys were all deleted, with its unfinished
    uploads and their parts (hidden records of the key's file); a file that
    still holds a key refuses it (``BucketNotEmpty``) and nothing goes,
    not even an empty file beside it; a file the tracker finds holding a
    record when it deletes it (``if_empty``) is never deleted."""
    cluster, ep, keys = site
    c = cluster.client(api_key=keys["alice"])
    s3.create_bucket(Bucket="nested")
    for k in ("a/b", "a/c", "d/e/f", "top"):
        s3.put_object(Bucket="nested", Key=k, Body=k.encode())
    up = s3.create_multipart_upload(Bucket="nested", Key="g/h")["UploadId"]
    s3.upload_part(Bucket="nested", Key="g/h", UploadId=up, PartNumber=1, Body=b"p" * 1000)
    for k in ("a/b", "a/c", "top"):
        s3.delete_object(Bucket="nested", Key=k)
    with c.create("/nested/deep/er/f", "x2") as f:  # a file in folders (the client's, fsspec's)
        f.put("k", b"v")
    s3.delete_object(Bucket="nested", Key="deep/er/f/k")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="nested")  # d/e/f is a key
    assert code(e.value) == "BucketNotEmpty"
    want = ["/nested/.s3", f"/nested/.s3-upload-{up}", "/nested/a", "/nested/d", "/nested/deep/er/f", "/nested/g"]
    assert c.files("/nested") == sorted(want)  # nothing went
    assert s3.list_multipart_uploads(Bucket="nested")["Uploads"][0]["UploadId"] == up
    with pytest.raises(FileNotEmptyError) as fe:
        c.delete("/nested/d", if_empty=True)  # the tracker decides: it holds a record
    assert fe.value.file == "/nested/d"
    with c.open("/nested/d") as f:
        assert f.get("e/f") == b"d/e/f"
    with pytest.raises(FileNotEmptyError):
        c.delete("/nested/g", if_empty=True)  # the upload's part, hidden, counts
    s3.delete_object(Bucket="nested", Key="d/e/f")
    s3.delete_bucket(Bucket="nested")
    assert "nested" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert not (cluster.namespace / "nested").exists()
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="nested")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_get_survives_a_killed_peer(make_cluster):
    """x2 objects stay readable through S3 right after a SIGKILL of a peer
    holding copies of them (before the tracker notices: the reader fails
    over to the other copy, or avoids the dead peer once it is reported)."""
    cluster = make_cluster(3)
    ep = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls)  # development mode: no keys
    try:
        s3 = ep.client("dev", "anything")
        s3.create_bucket(Bucket="kill")
        objects = {f"run/x{i}.bin": os.urandom(20000) for i in range(12)}
        for k, v in objects.items():
            s3.put_object(Bucket="kill", Key=k, Body=v)
        with cluster.client().open("/kill/run") as f:
            assert f.replication == "x2"
            addrs = {idx: addr for idx, _, addr in f.infofile().peerlist()}
            holders = [addrs[i] for k in objects for i in f.record_meta(k.split("/", 1)[1]).peers]
        victim = max(set(holders), key=holders.count)  # the peer holding the most copies
        cluster.kill_peer(next(i for i, p in enumerate(cluster.peers) if p is not None and p.addr == victim))
        for k, v in objects.items():
            assert s3.get_object(Bucket="kill", Key=k)["Body"].read() == v
    finally:
        ep.stop()


def test_checksums_boto3_sends_are_checked(s3):
    """boto3 sends x-amz-checksum-crc32 with every PutObject by default; a
    wrong one is refused and nothing is stored."""
    sent: list[dict] = []

    def capture(request, **kwargs):
        sent.append(dict(request.headers))

    s3.meta.events.register("before-send.s3.PutObject", capture)
    try:
        s3.put_object(Bucket="exp", Key="sums/good", Body=b"checked")
    finally:
        s3.meta.events.unregister("before-send.s3.PutObject", capture)
    assert any(k.lower() == "x-amz-checksum-crc32" for k in sent[-1])

    def corrupt(request, **kwargs):
        del request.headers["x-amz-checksum-crc32"]  # botocore's headers append on assignment
        request.headers["x-amz-checksum-crc32"] = "AAAAAA=="

    s3.meta.events.register("before-sign.s3.PutObject", corrupt)
    try:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="exp", Key="sums/bad", Body=b"checked")
    finally:
        s3.meta.events.unregister("before-sign.s3.PutObject", corrupt)
    assert code(e.value) == "XAmzContentChecksumMismatch"
    assert [c["Key"] for c in s3.list_objects_v2(Bucket="exp", Prefix="sums/")["Contents"]] == ["sums/good"]


def test_storetorrent_s3_command_serves(site, s3, tmp_path):
    """``storetorrent s3`` (run as ``python -m st_integrations.s3``, the same
    click command) as its own process: a listing through it, a GET read
    from its peers' disks (``--peer-data``) and counted on its metrics
    page (``--metrics-port``), then SIGTERM."""
    import subprocess
    import sys

    cluster, _, keys = site
    (tmp_path / "keys.toml").write_text(f'[users]\nalice = "{keys["alice"]}"\n')
    env = dict(os.environ)
    for var, path in zip(("STORETORRENT_TLS_CA", "STORETORRENT_TLS_CERT", "STORETORRENT_TLS_KEY"), cluster.client_tls):
        if path:
            env[var] = str(path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "st_integrations.s3",
            "--tracker",
            cluster.tracker_addr,
            "--port",
            "0",  # a free one, printed: no port picked here that another process could take first
            "--keys",
            str(tmp_path / "keys.toml"),
            "--metrics-port",
            "0",
            *[a for p in sorted((cluster.data_dir / "peers").glob("peer-*")) for a in ("--peer-data", str(p))],
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        mline = proc.stdout.readline()  # "metrics on HOST:PORT", or "" if it exited
        assert mline.startswith("metrics on "), proc.stderr.read() if proc.stderr else ""
        line = proc.stdout.readline()  # "listening on HOST:PORT"
        assert line.startswith("listening on "), proc.stderr.read() if proc.stderr else ""
        port = int(line.rsplit(":", 1)[1])
        assert _listening(port)
        c = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="alice",
            aws_secret_access_key=keys["alice"],
            region_name="us-east-1",
        )
        s3.put_object(Bucket="exp", Key="cmd/x", Body=b"x")
        assert [o["Key"] for o in c.list_objects_v2(Bucket="exp", Prefix="cmd/")["Contents"]] == ["cmd/x"]
        assert c.get_object(Bucket="exp", Key="cmd/x")["Body"].read() == b"x"
        c.close()
        from helpers import metric_value, scrape_metrics

        m = scrape_metrics(mline.split("metrics on ", 1)[1].strip())
        assert metric_value(m, "st_s3_local_reads_total") == 1  # every peer is on this host
        assert metric_value(m, "st_s3_local_read_fallbacks_total") == 0
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    # uvicorn shuts down gracefully, then re-raises the signal it caught
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in err, err


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


AWS = "/usr/bin/aws"  # Debian's AWS CLI v2 (./dev installs it); a pip-installed v1 may shadow it on PATH


def test_aws_cli_cp_ls_sync_rm(site, s3, tmp_path):
    """The AWS CLI's high-level commands, with its default settings, and
    the bytes read back through fsspec."""
    import subprocess

    if not os.path.exists(AWS):
        pytest.fail("Debian's awscli is not installed (./dev setup installs it)")
    cluster, ep, keys = site
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="alice",
        AWS_SECRET_ACCESS_KEY=keys["alice"],
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )

    def aws(*args: str) -> str:
        r = subprocess.run([AWS, "--endpoint-url", ep.url, *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.txt").write_text(f"file {i}\n" * (i + 1))
    aws("s3", "cp", str(src / "f0.txt"), "s3://exp/cli/one/f0.txt")
    aws("s3", "sync", str(src), "s3://exp/cli/sync/")
    listing = aws("s3", "ls", "--recursive", "s3://exp/cli/")
    assert [line.split()[-1] for line in listing.splitlines()] == [
        "cli/one/f0.txt",
        "cli/sync/f0.txt",
        "cli/sync/f1.txt",
        "cli/sync/f2.txt",
    ]
    assert "PRE one/" in aws("s3", "ls", "s3://exp/cli/")
    aws("s3", "cp", "s3://exp/cli/sync/f2.txt", str(tmp_path / "back.txt"))
    assert (tmp_path / "back.txt").read_text() == "file 2\n" * 3
    StoreTorrentFileSystem.clear_instance_cache()
    st = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, api_key=keys["alice"], tls=cluster.client_tls)
    assert st.cat_file("/exp/cli/sync/f1.txt") == b"file 1\n" * 2
    aws("s3", "rm", "--recursive", "s3://exp/cli/")
    assert s3.list_objects_v2(Bucket="exp", Prefix="cli/")["KeyCount"] == 0
    # rb --force: every key deleted, then the bucket, whose files under cli/ are left empty
    aws("s3", "mb", "s3://clirb")
    aws("s3", "sync", str(src), "s3://clirb/cli/sync/")
    aws("s3", "rb", "--force", "s3://clirb")
    assert "clirb" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_presigned_urls(site, s3):
    """Presigned GET and PUT work for anyone holding the URL, until it
    expires; a changed URL is refused."""
    import urllib.error
    import urllib.request

    s3.put_object(Bucket="exp", Key="signed/a.txt", Body=b"presigned bytes")
    v2 = s3.generate_presigned_url("get_object", Params={"Bucket": "exp", "Key": "signed/a.txt"})
    with pytest.raises(urllib.error.HTTPError) as e:  # boto3's default for presigning: SigV2, refused
        urllib.request.urlopen(v2)
    assert "Signature Version 2" in e.value.read().decode()
    e.value.close()
    cluster, ep, keys = site
    s3 = ep.client("alice", keys["alice"], signature_version="s3v4")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "exp", "Key": "signed/a.txt"}, ExpiresIn=60)
    with urllib.request.urlopen(url) as r:
        assert r.read() == b"presigned bytes"
    put = s3.generate_presigned_url("put_object", Params={"Bucket": "exp", "Key": "signed/b.txt"}, ExpiresIn=60)
    with urllib.request.urlopen(urllib.request.Request(put, data=b"uploaded", method="PUT")) as r:
        assert r.status == 200
    assert s3.get_object(Bucket="exp", Key="signed/b.txt")["Body"].read() == b"uploaded"
    for bad, want in ((url.replace("signed/a.txt", "signed/b.txt"), "SignatureDoesNotMatch"),):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad)
        assert e.value.code == 403 and f"<Code>{want}</Code>" in e.value.read().decode()
        e.value.close()
    short = s3.generate_presigned_url("get_object", Params={"Bucket": "exp", "Key": "signed/a.txt"}, ExpiresIn=1)
    time.sleep(2.1)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(short)
    body = e.value.read().decode()
    e.value.close()
    assert e.value.code == 403 and "<Code>AccessDenied</Code>" in body and "expired" in body


def test_multipart_uploads(site, s3, tmp_path):
    """boto3's managed upload (multipart over 8 MiB, default checksums),
    the low-level calls, their refusals, and abort."""
    from boto3.s3.transfer import TransferConfig

    cluster, ep, keys = site
    big = os.urandom(5 << 20) + bytes(range(256)) * 20000  # ~10 MiB: two parts of 5 MiB and a tail
    (tmp_path / "big.bin").write_bytes(big)
    s3.upload_file(
        str(tmp_path / "big.bin"),
        "exp",
        "mp/big.bin",
        Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20),
    )
    assert s3.get_object(Bucket="exp", Key="mp/big.bin")["Body"].read() == big
    with cluster.client(api_key=keys["alice"]).open("/exp/mp") as f:
        assert f.get("big.bin") == big
        # composed where the parts are (docs/s3.md, "Multipart uploads"): its stripes are the parts' copies
        obj = f.object_meta("big.bin")
        assert (obj.stripe_size, obj.stripes) == (5 << 20, 2)
        stripes = f.records_meta([f".st-stripe/big.bin/{i:08d}" for i in range(2)])
        assert all(m.key.startswith(".st-stripe/.s3-upload-") for m in stripes.values()) and len(stripes) == 2
        assert f.infofile().records_between(".st-stripe/.s3-upload-", ".st-stripe/.s3-upload.").fetchall() == []
    # by hand: parts listed, a small part that is not the last refused, abort
    up = s3.create_multipart_upload(Bucket="exp", Key="mp/manual.bin")["UploadId"]
    e1 = s3.upload_part(Bucket="exp", Key="mp/manual.bin", UploadId=up, PartNumber=1, Body=b"a" * 100)["ETag"]
    s3.upload_part(Bucket="exp", Key="mp/manual.bin", UploadId=up, PartNumber=2, Body=b"c" * 100)
    e2 = s3.upload_part(Bucket="exp", Key="mp/manual.bin", UploadId=up, PartNumber=2, Body=b"b" * 100)["ETag"]
    assert (e1, e2) == tuple(f'"{hashlib.md5(b * 100).hexdigest()}"' for b in (b"a", b"b"))  # a part's is its MD5
    parts = s3.list_parts(Bucket="exp", Key="mp/manual.bin", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in parts] == [(1, 100, e1), (2, 100, e2)]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket="exp",
            Key="mp/manual.bin",
            UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]},
        )
    assert code(e.value) == "EntityTooSmall"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket="exp",
            Key="mp/manual.bin",
            UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]},
        )
    assert code(e.value) == "InvalidPartOrder"
    done = s3.complete_multipart_upload(
        Bucket="exp", Key="mp/manual.bin", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2}]}
    )
    assert s3.get_object(Bucket="exp", Key="mp/manual.bin")["Body"].read() == b"b" * 100
    assert s3.head_object(Bucket="exp", Key="mp/manual.bin")["ETag"] == done["ETag"]
    up2 = s3.create_multipart_upload(Bucket="exp", Key="mp/aborted.bin")["UploadId"]
    s3.upload_part(Bucket="exp", Key="mp/aborted.bin", UploadId=up2, PartNumber=1, Body=b"x")
    ups = s3.list_multipart_uploads(Bucket="exp", Prefix="mp/")["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in ups] == [("mp/aborted.bin", up2)]
    s3.abort_multipart_upload(Bucket="exp", Key="mp/aborted.bin", UploadId=up2)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket="exp", Key="mp/aborted.bin", UploadId=up2)
    assert code(e.value) == "NoSuchUpload"
    listed = [c["Key"] for c in s3.list_objects_v2(Bucket="exp")["Contents"]]
    assert "mp/big.bin" in listed and "mp/aborted.bin" not in listed and not any(".s3" in k for k in listed)
    # the completed uploads' files stay, their parts deleted, to answer a Complete sent again
    left = sorted(p.name for p in (cluster.namespace / "exp").iterdir() if p.name.startswith(".s3-upload-"))
    assert f".s3-upload-{up}" in left and f".s3-upload-{up2}" not in left and len(left) == 2, left
    for name in left:
        with cluster.client(api_key=keys["alice"]).open(f"/exp/{name}") as f:
            assert f.names() == ["completed", "key", "parts"], name
    with cluster.client(api_key=keys["alice"]).open("/exp/mp") as f:  # the aborted upload's part went with it
        assert f.infofile().records_between(".st-stripe/.s3-upload-", ".st-stripe/.s3-upload.").fetchall() == []


@pytest.fixture
def done_skipped_once(monkeypatch) -> list[str]:
    """``Multipart._done`` skipped the first time for each upload (the
    state an endpoint or tracker that died after a Complete's compose
    committed leaves); the uploads it skipped."""
    from st_integrations.s3 import multipart

    skipped: list[str] = []
    real = multipart.Multipart._done

    def died_first(self, h, st, where, upload_id):
        if upload_id not in skipped:
            skipped.append(upload_id)
            return None
        return real(self, h, st, where, upload_id)

    monkeypatch.setattr(multipart.Multipart, "_done", died_first)
    return skipped


def _uploaded(s3, key: str, bodies: list[bytes]) -> tuple[str, list[dict]]:
    """A multipart upload of ``key`` in bucket exp with a part a body:
    ``(upload id, the parts as CompleteMultipartUpload lists them)``."""
    up = s3.create_multipart_upload(Bucket="exp", Key=key)["UploadId"]
    return up, [
        {"PartNumber": n, "ETag": s3.upload_part(Bucket="exp", Key=key, UploadId=up, PartNumber=n, Body=b)["ETag"]}
        for n, b in enumerate(bodies, 1)
    ]


def test_a_complete_sent_again_after_its_compose_committed_answers_its_object(s3, done_skipped_once):
    """The endpoint (or the tracker) dies after a Complete's compose
    committed and before the upload was ended (``Multipart._done`` skipped
    once: the state either death leaves). The parts are the object's
    stripes now, so none is left under its name; the Complete the client
    sends again answers the object composed of exactly the parts it lists
    (read from the names its stripes are stored under) and ends the
    upload, for an object of two parts and a record of one. Before, it
    answered ``InvalidPart`` for a stored object."""
    for key, bodies in (("again/two.bin", [os.urandom(5 << 20), b"tail" * 100]), ("again/one.bin", [b"only" * 100])):
        up, parts = _uploaded(s3, key, bodies)
        first = s3.complete_multipart_upload(Bucket="exp", Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        assert done_skipped_once[-1] == up
        assert up in [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="exp", Prefix=key)["Uploads"]]
        if len(parts) > 1:
            wrong = [parts[0], {"PartNumber": 2, "ETag": f'"{hashlib.md5(b"other").hexdigest()}"'}]
            with pytest.raises(ClientError) as e:  # other parts than those composed: still refused
                s3.complete_multipart_upload(Bucket="exp", Key=key, UploadId=up, MultipartUpload={"Parts": wrong})
            assert code(e.value) == "InvalidPart"
        again = s3.complete_multipart_upload(Bucket="exp", Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        assert (again["ETag"], again.get("VersionId")) == (first["ETag"], first.get("VersionId")), key
        assert s3.get_object(Bucket="exp", Key=key)["Body"].read() == b"".join(bodies)
        assert up not in [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="exp").get("Uploads", [])]


def test_a_complete_sent_again_after_the_key_was_replaced_answers_its_version(s3, done_skipped_once):
    """As above, but another PUT replaced the key between the compose and
    the Complete sent again: the retry answers the version this upload made
    (its ETag and version id, read from the file's history, as S3 answers
    a Complete retried after a later PUT), the key keeps the later PUT's
    bytes, and the version reads back as the upload's. Before, it answered
    ``InvalidPart``."""
    for key, bodies in (("again/r2.bin", [os.urandom(5 << 20), b"tail" * 100]), ("again/r1.bin", [b"only" * 100])):
        up, parts = _uploaded(s3, key, bodies)
        first = s3.complete_multipart_upload(Bucket="exp", Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        assert done_skipped_once[-1] == up and first.get("VersionId")
        s3.put_object(Bucket="exp", Key=key, Body=b"a later PUT")
        again = s3.complete_multipart_upload(Bucket="exp", Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        assert (again["ETag"], again.get("VersionId")) == (first["ETag"], first["VersionId"]), key
        assert s3.get_object(Bucket="exp", Key=key)["Body"].read() == b"a later PUT"
        old = s3.get_object(Bucket="exp", Key=key, VersionId=first["VersionId"])["Body"].read()
        assert old == b"".join(bodies)
        assert up not in [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="exp").get("Uploads", [])]


def test_large_writes_of_s3fs_and_the_aws_cli_are_multipart(site, s3, tmp_path):
    import subprocess

    import s3fs

    cluster, ep, keys = site
    fs = s3fs.S3FileSystem(
        key="alice", secret=keys["alice"], client_kwargs={"endpoint_url": ep.url}, use_listings_cache=False
    )
    data = os.urandom(11 << 20)
    with fs.open("exp/mpbig/s3fs.bin", "wb", block_size=5 << 20) as f:
        f.write(data)
    assert fs.cat_file("exp/mpbig/s3fs.bin") == data
    assert (
        fs.cat_file("exp/mpbig/s3fs.bin", start=(5 << 20) - 3, end=(5 << 20) + 3) == data[(5 << 20) - 3 : (5 << 20) + 3]
    )
    if not os.path.exists(AWS):
        pytest.fail("Debian's awscli is not installed (./dev setup installs it)")
    (tmp_path / "cli.bin").write_bytes(data[: 9 << 20])  # over the CLI's 8 MiB multipart threshold
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="alice",
        AWS_SECRET_ACCESS_KEY=keys["alice"],
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    r = subprocess.run(
        [AWS, "--endpoint-url", ep.url, "s3", "cp", str(tmp_path / "cli.bin"), "s3://exp/mpbig/cli.bin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert s3.get_object(Bucket="exp", Key="mpbig/cli.bin")["Body"].read() == data[: 9 << 20]


def test_virtual_host_style_and_conditional_put(make_cluster):
    """With --domain, ``Host: BUCKET.DOMAIN`` names the bucket (boto3's
    virtual addressing, its requests sent to 127.0.0.1 as no resolver knows
    the name); path style still works; ``If-None-Match: *`` refuses an
    existing key; ListObjects v1 and GetBucketLocation answer."""
    import urllib3
    from botocore.awsrequest import AWSResponse

    cluster = make_cluster(2)
    ep = Endpoint(cluster.tracker_addr, None, tls=cluster.client_tls, domain="s3.test")
    pool = urllib3.PoolManager()

    def to_loopback(request, **kwargs):
        u = urllib3.util.parse_url(request.url)
        headers = dict(request.headers.items())
        headers["Host"] = f"{u.host}:{u.port}"
        r = pool.request(
            request.method,
            f"http://127.0.0.1:{u.port}{u.request_uri}",
            body=request.body,
            headers=headers,
            redirect=False,
            preload_content=False,
        )
        return AWSResponse(request.url, r.status, r.headers, r)

    try:
        path = ep.client("dev", "x")
        path.create_bucket(Bucket="vhost")
        virt = boto3.client(
            "s3",
            endpoint_url=f"http://s3.test:{ep.port}",
            aws_access_key_id="dev",
            aws_secret_access_key="x",
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1}),
        )
        ep.clients.append(virt)
        virt.meta.events.register("before-send.s3", to_loopback)
        virt.put_object(Bucket="vhost", Key="run/a.txt", Body=b"virtual")
        assert path.get_object(Bucket="vhost", Key="run/a.txt")["Body"].read() == b"virtual"
        assert virt.get_object(Bucket="vhost", Key="run/a.txt")["Body"].read() == b"virtual"
        assert [c["Key"] for c in virt.list_objects_v2(Bucket="vhost")["Contents"]] == ["run/a.txt"]
        with pytest.raises(ClientError) as e:
            path.put_object(Bucket="vhost", Key="run/a.txt", Body=b"again", IfNoneMatch="*")
        assert code(e.value) == "PreconditionFailed"
        path.put_object(Bucket="vhost", Key="run/b.txt", Body=b"new", IfNoneMatch="*")
        assert path.get_object(Bucket="vhost", Key="run/a.txt")["Body"].read() == b"virtual"
        v1 = path.list_objects(Bucket="vhost", Prefix="run/", MaxKeys=1)
        assert [c["Key"] for c in v1["Contents"]] == ["run/a.txt"] and v1["IsTruncated"]
        v1 = path.list_objects(Bucket="vhost", Prefix="run/", Marker="run/a.txt")
        assert [c["Key"] for c in v1["Contents"]] == ["run/b.txt"] and not v1["IsTruncated"]
        assert path.get_bucket_location(Bucket="vhost")["LocationConstraint"] is None
    finally:
        pool.clear()
        ep.stop()


def reference_listing(keys: list[str], prefix: str, delimiter: str) -> list[str]:
    """S3's listing of ``keys`` as one list: keys and common prefixes
    (ending in the delimiter), in order, each once."""
    out: list[str] = []
    for k in sorted(keys):
        if not k.startswith(prefix):
            continue
        i = k.find(delimiter, len(prefix)) if delimiter else -1
        item = k[: i + len(delimiter)] if i >= 0 else k
        if not out or out[-1] != item:
            out.append(item)
    return out


def test_a_listing_page_reads_from_its_start_about_a_page(site):
    """InfofileReader.level with ``start`` and ``limit`` (what a page of a
    delimited listing reads): the entries and heads from ``start`` on, the
    scan stopped after ``limit`` of them; without them, the whole level. A
    page of a level of 2x10^4 keys read every key of it, each page (0.47 s a
    page), before ``start`` and ``limit`` were passed."""
    cluster, _, keys = site
    with cluster.client(api_key=keys["alice"]).create("/lvl/f", replication="x1") as f:
        for name in ("a", "b", "c/d", "c/e", "d", "e/f", "g"):
            f.put(name, b"x")
    with cluster.client(api_key=keys["alice"]).open("/lvl/f") as f:
        inf = f.infofile()
        assert inf.level("", detail=False) == (["a", "b", "d", "g"], ["c", "e"])
        assert inf.level("", detail=False, start="b", limit=3) == (["b", "d"], ["c"])
        assert inf.level("", detail=False, start="c0", limit=10) == (["d", "g"], ["e"])
        assert inf.level("", detail=False, start="h") == ([], [])


def test_listings_match_s3s_rules_page_by_page(site, s3):
    """Every listing (prefixes at each depth, delimiters '/' and '-', pages
    of 1, 2 and 1000, with start-after) equals S3's rule applied to all
    keys, over files made by S3 and by the Client in nested directories."""
    cluster, ep, keys = site
    s3.create_bucket(Bucket="lst")
    made = ["a-1", "a-2", "b", "run/x-1", "run/x-2", "run/y/z", "run-2/q", "deep/er/f1", "deep/er/f2"]
    for k in made:
        s3.put_object(Bucket="lst", Key=k, Body=k.encode())
    with cluster.client(api_key=keys["alice"]).create("/lst/d/run1", replication="x2") as f:
        for name in ("a", "b/c", "b/d", "b-e", "c/d/e"):
            f.put(name, name.encode())
            made.append("d/run1/" + name)
    with cluster.client(api_key=keys["alice"]).create("/lst/d/run2", replication="x2") as f:
        f.put("only", b"only")
        made.append("d/run2/only")
    prefixes = ["", "a", "d/", "d/run1/", "d/run1/b", "d/run1/b/", "d/run", "deep/", "run", "run/", "zz"]
    for prefix in prefixes:
        for delimiter in ("", "/", "-"):
            want = reference_listing(made, prefix, delimiter)
            for page in (1, 2, 1000):
                got: list[str] = []
                kw: dict = {"Bucket": "lst", "Prefix": prefix, "MaxKeys": page}
                if delimiter:
                    kw["Delimiter"] = delimiter
                for _ in range(100):
                    r = s3.list_objects_v2(**kw)
                    items = [c["Key"] for c in r.get("Contents", [])] + [
                        p["Prefix"] for p in r.get("CommonPrefixes", [])
                    ]
                    assert len(items) <= page
                    got += sorted(items)
                    if not r["IsTruncated"]:
                        break
                    kw["ContinuationToken"] = r["NextContinuationToken"]
                assert got == want, (prefix, delimiter, page)
            if want:
                mid = want[len(want) // 2]
                r = s3.list_objects_v2(Bucket="lst", Prefix=prefix, Delimiter=delimiter, StartAfter=mid)
                items = [c["Key"] for c in r.get("Contents", [])] + [p["Prefix"] for p in r.get("CommonPrefixes", [])]
                assert sorted(items) == [i for i in reference_listing([k for k in made if k > mid], prefix, delimiter)]


def test_a_pages_contents_are_what_element_by_element_writing_gives():
    """``list_bucket`` writes a page's ``<Contents>`` with one f-string an
    entry and the time's parts made once a run of equal times: the bytes
    are those of writing each element with ``xml.el`` (escaped, with
    ``encoding-type=url`` quoted first), ``ObjectStat``'s ETag and the
    time in milliseconds cut, not rounded, for times shared, alone, whole
    and just below a second."""
    from urllib.parse import quote

    from st_integrations.s3 import xml
    from st_integrations.s3.listing import list_bucket
    from st_integrations.s3.ops import ObjectStat

    t0 = 1764500000.123456
    contents = [
        ("a&b<c>", 0, 0, t0),
        ("q'\"", 7, 2**32 - 1, t0),
        ("x y+z%20", 64, 12345, 1764500000.0),
        ("\u00fc/\u00e9", 5, 1, 1764500000.9999),
        ("z", 5, 1, 1764500001.0005),
        ("zz", 10**12, 99, 1764500001.0005),
    ]

    class Page:
        def list_objects(self, *args, **kw):
            return contents, ["cp&/"], False, "zz"

    def written(url: bool) -> str:
        out = ""
        for key, size, crc, t in contents:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(t))) + f".{int(t * 1000) % 1000:03d}Z"
            out += (
                "<Contents>"
                + xml.el("Key", quote(key, safe="/") if url else key)
                + xml.el("LastModified", stamp)
                + f"<ETag>{ObjectStat(size, crc, t).etag}</ETag>"
                + xml.el("Size", size)
                + xml.el("StorageClass", "STANDARD")
                + "</Contents>"
            )
        return out

    for url in (False, True):
        q = {"list-type": "2", "prefix": "", "delimiter": "/"} | ({"encoding-type": "url"} if url else {})
        body = list_bucket(Page(), "b", q).decode()
        assert written(url) + "<CommonPrefixes>" in body
        assert body.count("<Contents>") == len(contents)


def test_listed_keys_escaped_url_encoded_and_files_without_records_not_rolled_up(site):
    """Keys that XML escapes (``&``, ``<``, ``>``) and that
    ``encoding-type=url`` quotes come back as they were put, in boto3's
    listing (which asks for URL encoding and decodes it) and in one that
    asks for none (the XML escaped), with the ETag, time and size HEAD
    gives; with a delimiter, a file with records rolls up into a common
    prefix and a file without records into none (a page's List names the
    files only; their directory is counted when their keys roll up)."""
    from botocore.handlers import set_list_objects_encoding_type_url

    cluster, ep, keys = site
    s3 = ep.client("alice", keys["alice"])
    raw = ep.client("alice", keys["alice"])
    raw.meta.events.unregister("before-parameter-build.s3.ListObjectsV2", set_list_objects_encoding_type_url)
    s3.create_bucket(Bucket="escb")
    put = ["amp/a&b<c>.txt", "amp/q'\"", "amp/t>g", "amp/x y+z%20.bin", "amp/\u00fc \u00e9"]
    for k in put:
        s3.put_object(Bucket="escb", Key=k, Body=k.encode())
    alice = cluster.client(api_key=keys["alice"])
    with alice.create("/escb/files/run1", replication="x2") as f:
        for name in ("r&1", "r<2>"):
            f.put(name, name.encode())
    alice.create("/escb/empty/f", replication="x2").close()
    want = sorted(put + ["files/run1/r&1", "files/run1/r<2>"])
    for c in (s3, raw):
        got = c.list_objects_v2(Bucket="escb")["Contents"]
        assert [o["Key"] for o in got] == want
        for o in got:
            head = s3.head_object(Bucket="escb", Key=o["Key"])
            assert (o["ETag"], o["LastModified"].replace(microsecond=0), o["Size"]) == (  # HTTP dates: seconds
                head["ETag"],
                head["LastModified"],
                head["ContentLength"],
            )
        pages = [c.list_objects_v2(Bucket="escb", Prefix="amp/", MaxKeys=2)]
        while pages[-1]["IsTruncated"]:
            token = pages[-1]["NextContinuationToken"]
            pages.append(c.list_objects_v2(Bucket="escb", Prefix="amp/", MaxKeys=2, ContinuationToken=token))
        assert [o["Key"] for p in pages for o in p["Contents"]] == sorted(put)
        r = c.list_objects_v2(Bucket="escb", Delimiter="/")
        assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["amp/", "files/"]  # not empty/
        assert c.list_objects_v2(Bucket="escb", Prefix="empty/", Delimiter="/")["KeyCount"] == 0
        r = c.list_objects_v2(Bucket="escb", Prefix="files/", Delimiter="/")
        assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["files/run1/"]
        r = c.list_objects_v2(Bucket="escb", Prefix="amp/", StartAfter="amp/q'\"")
        assert [o["Key"] for o in r["Contents"]] == sorted(put)[2:]


def test_copy_object_and_conditional_reads(s3):
    s3.put_object(Bucket="exp", Key="copy/src.bin", Body=b"copied bytes")
    r = s3.copy_object(Bucket="exp", Key="copy/dst/a.bin", CopySource={"Bucket": "exp", "Key": "copy/src.bin"})
    assert s3.get_object(Bucket="exp", Key="copy/dst/a.bin")["Body"].read() == b"copied bytes"
    head = s3.head_object(Bucket="exp", Key="copy/dst/a.bin")
    assert head["ETag"] == r["CopyObjectResult"]["ETag"]
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="exp", Key="copy/x", CopySource={"Bucket": "exp", "Key": "copy/missing"})
    assert code(e.value) == "NoSuchKey"
    later = head["LastModified"] + datetime.timedelta(seconds=5)
    earlier = head["LastModified"] - datetime.timedelta(seconds=5)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="copy/dst/a.bin", IfModifiedSince=later)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    assert s3.get_object(Bucket="exp", Key="copy/dst/a.bin", IfModifiedSince=earlier)["Body"].read() == b"copied bytes"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="copy/dst/a.bin", IfUnmodifiedSince=earlier)
    assert code(e.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="copy/dst/a.bin", IfMatch='"0123"')
    assert code(e.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="exp", Key="copy/dst/a.bin", IfNoneMatch=head["ETag"])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304


def test_sigv4_checks_against_botocores_signer(tmp_path):
    """The verifier against requests signed by botocore's own SigV4Auth:
    taken as signed (for the endpoint's region or the empty one, as DuckDB
    signs without ``s3_region``), and refused when the clock is skewed,
    the region or secret is wrong, a signed header or the query changed,
    or the header is not SigV4's form."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from st_integrations.s3.auth import Keys, authenticate
    from st_integrations.s3.errors import S3Error

    (tmp_path / "k.toml").write_text('[users]\nalice = "s3cr3t"\n')
    keys = Keys(tmp_path / "k.toml")

    def signed(secret="s3cr3t", region="us-east-1", url="http://h:1/b/k%20x?list-type=2&prefix=a%2Fb"):
        req = AWSRequest("GET", url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        S3SigV4Auth(Credentials("alice", secret), "s3", region).add_auth(req)
        headers = {k.lower(): [v] for k, v in req.headers.items()}
        headers["host"] = ["h:1"]
        path, _, query = url.split("//", 1)[1].partition("/")[2].partition("?")
        return "/" + path, query, headers

    def check(path, query, headers, now=None):
        return authenticate(keys, "GET", path, query, headers, now=now)

    path, query, headers = signed()
    assert check(path, query, headers).user == "alice"
    assert check(*signed(region="")).user == "alice"  # DuckDB's scope without s3_region: date//s3/aws4_request
    garbled = {**headers, "authorization": [headers["authorization"][0].replace("Credential=", "Cred=")]}
    for bad, want in (
        (lambda: check(path, query, headers, now=time.time() + 3600), "RequestTimeTooSkewed"),
        (lambda: check(*signed(region="eu-west-1")), "AuthorizationHeaderMalformed"),
        (lambda: check(path, query, garbled), "AuthorizationHeaderMalformed"),
        (lambda: check(*signed(secret="wrong", region="")), "SignatureDoesNotMatch"),
        (lambda: check(*signed(secret="wrong")), "SignatureDoesNotMatch"),
        (lambda: check(path, query.replace("prefix=a", "prefix=c"), headers), "SignatureDoesNotMatch"),
        (lambda: check(path + "y", query, headers), "SignatureDoesNotMatch"),
        (lambda: check(path, query, {**headers, "x-amz-date": ["20200101T000000Z"]}), "RequestTimeTooSkewed"),
        (lambda: check(path, query, {k: v for k, v in headers.items() if k != "authorization"}), "AccessDenied"),
    ):
        with pytest.raises(S3Error) as e:
            bad()
        assert e.value.code == want


def test_a_huge_key_is_refused(s3):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="exp", Key="huge/" + "k" * 1100, Body=b"x")
    assert code(e.value) == "KeyTooLongError"
    assert s3.list_objects_v2(Bucket="exp", Prefix="huge/")["KeyCount"] == 0


def test_keymap_and_fsspec_resolve_keys_alike(site, s3):
    """One mapping: for existing files the key map names the file and
    record fsspec's resolution finds, and a new path goes into the same new
    file whether fsspec, the endpoint or the key map places it
    (st_py.client.namespace_paths: lookup and new_file)."""
    from st_integrations.keymap import KeyMap

    cluster, ep, keys = site
    c = cluster.client(api_key=keys["alice"])
    for name in ("/exp/agree/run1", "/exp/agree/d/run2", "/exp/agree/d/run2x"):
        with c.create(name, replication="x2") as f:
            f.put("r", b"r")
    StoreTorrentFileSystem.clear_instance_cache()
    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, api_key=keys["alice"], tls=cluster.client_tls)
    km = KeyMap(c)
    for key in ("agree/run1/r", "agree/run1/a/b/c", "agree/d/run2/x.parquet", "agree/d/run2x/y/z"):
        kind, file, rest = fs.st_lookup("/exp/" + key)
        t = km.resolve("exp", key)
        assert kind == "inside" and (t.file, t.record, t.exists) == (file, rest, True), key
    # new keys: one component below the deepest directory, by every writer
    placed = {
        "agree/d/new/k/l": ("/exp/agree/d/new", "k/l"),  # /exp/agree/d is a directory
        "agree/fs/src/a.bin": ("/exp/agree/fs", "src/a.bin"),  # /exp/agree is one
        "agree/s3/src/a.bin": ("/exp/agree/s3", "src/a.bin"),
    }
    for key, (file, record) in placed.items():
        assert km.resolve("exp", key) == Target(file, record, False), key
        assert fs.st_lookup("/exp/" + key)[:2] == ("missing", file.rsplit("/", 1)[0]), key
    fs.pipe_file("/exp/agree/fs/src/a.bin", b"fs")
    s3.put_object(Bucket="exp", Key="agree/s3/src/a.bin", Body=b"s3")
    fs.invalidate_cache()
    for key in ("agree/fs/src/a.bin", "agree/s3/src/a.bin"):
        file, record = placed[key]
        assert km.resolve("exp", key) == Target(file, record, True), key
        assert fs.st_lookup("/exp/" + key) == ("inside", file, record), key
        with c.open(file) as f:
            assert f.names() == [record]
    # a sibling written after a deeper path goes into the same file, by either writer
    s3.put_object(Bucket="exp", Key="agree/fs/b.bin", Body=b"b")
    fs.pipe_file("/exp/agree/s3/b.bin", b"b")
    for file in ("/exp/agree/fs", "/exp/agree/s3"):
        with c.open(file) as f:
            assert sorted(f.names()) == ["b.bin", "src/a.bin"]
    assert (
        fs.cat_file("/exp/agree/fs/b.bin") == b"b"
        and s3.get_object(Bucket="exp", Key="agree/s3/b.bin")["Body"].read() == b"b"
    )


def test_a_striped_object_and_its_ranges(site, s3):
    """A striped object (written by the Client with 1 MiB stripes) through
    S3: HEAD, listing, a whole GET, and ranges inside and across stripes."""
    cluster, ep, keys = site
    data = os.urandom(5 << 20) + b"tail"
    with cluster.client(api_key=keys["alice"]).create("/exp/striped", replication="x2") as f:
        f.put_object("obj.bin", data, stripe_size=1 << 20)
    assert s3.head_object(Bucket="exp", Key="striped/obj.bin")["ContentLength"] == len(data)
    assert [(c["Key"], c["Size"]) for c in s3.list_objects_v2(Bucket="exp", Prefix="striped/")["Contents"]] == [
        ("striped/obj.bin", len(data))
    ]
    assert s3.get_object(Bucket="exp", Key="striped/obj.bin")["Body"].read() == data
    for a, b in ((0, 9), ((1 << 20) - 5, (1 << 20) + 5), ((3 << 20) + 7, (5 << 20) + 3)):
        got = s3.get_object(Bucket="exp", Key="striped/obj.bin", Range=f"bytes={a}-{b}")
        assert got["Body"].read() == data[a : b + 1] and got["ContentRange"] == f"bytes {a}-{b}/{len(data)}"
    assert s3.get_object(Bucket="exp", Key="striped/obj.bin", Range="bytes=-4")["Body"].read() == b"tail"


def test_pyarrow_s3filesystem_writes_and_reads_a_partitioned_dataset(site, s3):
    """pyarrow's own S3 client (the AWS C++ SDK): a bucket made, a
    partitioned Parquet dataset written (with its directory markers) and
    read back, and one part read through fsspec."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    cluster, ep, keys = site
    fs = pafs.S3FileSystem(
        access_key="alice",
        secret_key=keys["alice"],
        endpoint_override=f"127.0.0.1:{ep.port}",
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    fs.create_dir("arrowb")
    table = pa.table({"x": list(range(600)), "g": [i % 3 for i in range(600)]})
    ds.write_dataset(table, "arrowb/data", filesystem=fs, format="parquet", partitioning=["g"])
    files = sorted(
        f.path
        for f in fs.get_file_info(pafs.FileSelector("arrowb/data", recursive=True))
        if f.type == pafs.FileType.File
    )
    assert files == [f"arrowb/data/{g}/part-0.parquet" for g in range(3)]
    back = ds.dataset("arrowb/data", filesystem=fs, format="parquet", partitioning=["g"]).to_table()
    assert sorted(back.column("x").to_pylist()) == list(range(600))
    StoreTorrentFileSystem.clear_instance_cache()
    st = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, api_key=keys["alice"], tls=cluster.client_tls)
    part = pq.read_table(st.open("/arrowb/data/1/part-0.parquet"))
    assert part.column("x").to_pylist() == list(range(1, 600, 3))


def test_polars_reads_and_scans_parquet_over_s3(site, s3):
    """Polars (Rust object_store, its own S3 client and signer) reads and
    scans Parquet written through boto3."""
    import polars as pl

    cluster, ep, keys = site
    df = pd.DataFrame({"x": range(300), "s": [f"r{i}" for i in range(300)]})
    for i in range(2):
        b = io.BytesIO()
        df.iloc[i * 150 : (i + 1) * 150].to_parquet(b, index=False)
        s3.put_object(Bucket="exp", Key=f"polars/part-{i}.parquet", Body=b.getvalue())
    opts = {
        "aws_endpoint_url": ep.url,
        "aws_access_key_id": "alice",
        "aws_secret_access_key": keys["alice"],
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }
    one = pl.read_parquet("s3://exp/polars/part-1.parquet", storage_options=opts)
    assert one["x"].to_list() == list(range(150, 300))
    total = pl.scan_parquet("s3://exp/polars/*.parquet", storage_options=opts).select(pl.col("x").sum()).collect()
    assert total.item() == sum(range(300))


RCLONE = "/usr/bin/rclone"  # Debian's rclone (./dev installs it)


def test_rclone_copies_lists_and_checks(site, s3, tmp_path):
    """rclone (Go, its own S3 client): a folder copied up, listed, checked
    against the local copy (sizes and hashes as rclone compares them), and
    copied back."""
    import subprocess

    if not os.path.exists(RCLONE):
        pytest.fail("Debian's rclone is not installed (./dev setup installs it)")
    cluster, ep, keys = site
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}  # rclone's SDK fails on it over http
    env["RCLONE_CONFIG"] = str(tmp_path / "none.conf")
    remote = (
        f":s3,provider=Other,access_key_id=alice,secret_access_key={keys['alice']},"
        f"endpoint='{ep.url}',region=us-east-1,force_path_style=true:"
    )

    def rclone(*args: str) -> str:
        r = subprocess.run([RCLONE, *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for i in range(3):
        (src / f"f{i}.bin").write_bytes(os.urandom(1000 * (i + 1)))
    (src / "sub" / "g.txt").write_text("nested\n")
    rclone("copy", str(src), remote + "exp/rclone")
    listed = sorted(rclone("lsf", "-R", "--files-only", remote + "exp/rclone").split())
    assert listed == ["f0.bin", "f1.bin", "f2.bin", "sub/g.txt"]
    rclone("check", str(src), remote + "exp/rclone")
    rclone("copy", remote + "exp/rclone", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "g.txt").read_text() == "nested\n"
    assert (tmp_path / "back" / "f2.bin").read_bytes() == (src / "f2.bin").read_bytes()


def test_a_put_racing_delete_bucket_never_makes_the_bucket_again(site, s3, monkeypatch):
    """A PutObject and an UploadPart that found their bucket, paused
    before they make their key's file (``Ops.open_or_create``) while
    DeleteBucket removes the bucket, answer ``NoSuchBucket`` and the bucket
    stays gone: the endpoint creates a file only while its bucket exists
    (``Client.create(in_directory=...)``, judged by the tracker while
    RemoveDir of that directory is refused). Before, the PUT answered 200
    and made ``/B`` again, holding only its key, after DeleteBucket's 204."""
    from st_integrations.s3 import ops as ops_module

    cluster, ep, keys = site
    c = cluster.client(api_key=keys["alice"])
    with pytest.raises(DirectoryNotFoundError) as e:  # the tracker's check itself
        c.create("/no-bucket/k/v", "x2", in_directory="/no-bucket")
    assert e.value.directory == "/no-bucket" and "no-bucket" not in [x.name.strip("/") for x in c.ls("/")]
    with pytest.raises(BadNameError):
        c.create("/exp/a", "x2", in_directory="/other")  # not its parent
    real = ops_module.Ops.open_or_create
    reached, go = threading.Event(), threading.Event()

    def paused(self, file, size=0, exists=True):
        if file.startswith("/racing/"):
            reached.set()
            assert go.wait(60)
        return real(self, file, size, exists)

    monkeypatch.setattr(ops_module.Ops, "open_or_create", paused)
    for what in ("PutObject", "UploadPart"):
        s3.create_bucket(Bucket="racing")
        reached.clear()
        go.clear()
        answer: list = []
        if what == "PutObject":
            call = lambda: s3.put_object(Bucket="racing", Key="k/v", Body=b"x")  # noqa: E731
        else:
            up = s3.create_multipart_upload(Bucket="racing", Key="k/v")["UploadId"]
            call = lambda: s3.upload_part(  # noqa: E731
                Bucket="racing", Key="k/v", UploadId=up, PartNumber=1, Body=b"p" * 1000
            )

        def run(call=call, answer=answer) -> None:
            try:
                call()
                answer.append("200")
            except ClientError as e:
                answer.append(code(e))

        t = threading.Thread(target=run)
        t.start()
        assert reached.wait(30)
        s3.delete_bucket(Bucket="racing")  # the key's file not made yet: the bucket is empty
        go.set()
        t.join(60)
        assert answer == ["NoSuchBucket"], (what, answer)
        assert "racing" not in [x["Name"] for x in s3.list_buckets()["Buckets"]], what
        assert not (cluster.namespace / "racing").exists(), what


def test_a_directory_made_by_the_client_is_a_bucket(site, s3):
    """A top-level directory made by the Client (no /B/.s3) is listed as a
    bucket and takes top-level keys: the first such PUT makes /B/.s3."""
    cluster, ep, keys = site
    with cluster.client(api_key=keys["alice"]).create("/plainb/run1", replication="x2") as f:
        f.put("r", b"r")
    assert "plainb" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="plainb", Key="top.txt")
    assert code(e.value) == "NoSuchKey"
    s3.put_object(Bucket="plainb", Key="top.txt", Body=b"top")
    assert [c["Key"] for c in s3.list_objects_v2(Bucket="plainb")["Contents"]] == ["run1/r", "top.txt"]


def test_quotas_apply_through_s3(site):
    """carol's quota (300 kB stored, all copies) holds for S3 PUTs: an x2
    object of 200 kB is refused with QuotaExceeded and nothing is stored."""
    cluster, ep, keys = site
    c = ep.client("carol", keys["carol"])
    c.create_bucket(Bucket="carolb")
    c.put_object(Bucket="carolb", Key="run/small", Body=b"s" * 1000)
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="carolb", Key="run/big", Body=os.urandom(200_000))
    assert code(e.value) == "QuotaExceeded"
    assert [o["Key"] for o in c.list_objects_v2(Bucket="carolb")["Contents"]] == ["run/small"]


def test_a_multipart_upload_needs_room_for_its_object_once(site):
    """dave's quota (20 MB, all copies) holds an x2 object of 6 MiB once
    (12.6 MB) but not twice: its parts take 12.6 MB, and
    CompleteMultipartUpload makes them the object's stripes without storing
    a byte, so it is admitted (it was refused with QuotaExceeded: the
    compose was charged the object's bytes before the parts' left). So is a
    one-part upload (its part becomes the record). The usage is counted
    once after them: 2 MB more fits, 3 MB more does not."""
    cluster, ep, keys = site
    c = ep.client("dave", keys["dave"])
    c.create_bucket(Bucket="daveb")
    for key, parts in (("one/obj", [os.urandom(5 << 20), os.urandom(1 << 20)]), ("two/obj", [os.urandom(1_500_000)])):
        up = c.create_multipart_upload(Bucket="daveb", Key=key)["UploadId"]
        etags = [
            c.upload_part(Bucket="daveb", Key=key, UploadId=up, PartNumber=i + 1, Body=b)["ETag"]
            for i, b in enumerate(parts)
        ]
        c.complete_multipart_upload(
            Bucket="daveb",
            Key=key,
            UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]},
        )
        assert c.get_object(Bucket="daveb", Key=key)["Body"].read() == b"".join(parts)
    c.put_object(Bucket="daveb", Key="more/small", Body=os.urandom(1_000_000))
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="daveb", Key="more/big", Body=os.urandom(1_500_000))
    assert code(e.value) == "QuotaExceeded"
    keys_now = sorted(o["Key"] for o in c.list_objects_v2(Bucket="daveb")["Contents"])
    assert keys_now == ["more/small", "one/obj", "two/obj"]


def test_a_key_that_is_also_a_folder_is_refused(s3):
    """A record is a record or a folder, never both (docs/decisions.md,
    "Record names"): S3's keys "a" and "a/b" cannot both be objects here;
    the second is refused with InvalidArgument, the first kept."""
    s3.put_object(Bucket="exp", Key="tree/run/a", Body=b"a record")
    for key in ("tree/run/a/b", "tree/run"):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="exp", Key=key, Body=b"x")
        assert code(e.value) == "InvalidArgument"
    s3.put_object(Bucket="exp", Key="tree/run/c/d", Body=b"folder c")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="exp", Key="tree/run/c", Body=b"x")
    assert code(e.value) == "InvalidArgument"
    assert [c["Key"] for c in s3.list_objects_v2(Bucket="exp", Prefix="tree/")["Contents"]] == [
        "tree/run/a",
        "tree/run/c/d",
    ]


def test_upload_part_copy_with_ranges_and_the_aws_cli(site, s3, tmp_path):
    """UploadPartCopy: parts copied from an object (whole, and by
    ``x-amz-copy-source-range``) with boto3; the AWS CLI's copy of an
    object over its 8 MiB threshold from one key to another (its multipart
    copy: UploadPartCopy with ranges)."""
    import subprocess

    src = os.urandom(6 << 20) + bytes(range(256)) * 4096  # 7 MiB
    s3.put_object(Bucket="exp", Key="upc/src.bin", Body=src)
    up = s3.create_multipart_upload(Bucket="exp", Key="upc/dst.bin")["UploadId"]
    r1 = s3.upload_part_copy(
        Bucket="exp",
        Key="upc/dst.bin",
        UploadId=up,
        PartNumber=1,
        CopySource={"Bucket": "exp", "Key": "upc/src.bin"},
        CopySourceRange=f"bytes=0-{(5 << 20) - 1}",
    )["CopyPartResult"]
    assert r1["ETag"] == f'"{hashlib.md5(src[: 5 << 20]).hexdigest()}"'
    r2 = s3.upload_part_copy(Bucket="exp", Key="upc/dst.bin", UploadId=up, PartNumber=2, CopySource="exp/upc/src.bin")[
        "CopyPartResult"
    ]
    parts = s3.list_parts(Bucket="exp", Key="upc/dst.bin", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 5 << 20), (2, len(src))]
    for bad in ("bytes=5-", f"bytes=0-{len(src)}", "bytes=9-3"):
        with pytest.raises(ClientError) as e:
            s3.upload_part_copy(
                Bucket="exp",
                Key="upc/dst.bin",
                UploadId=up,
                PartNumber=3,
                CopySource="exp/upc/src.bin",
                CopySourceRange=bad,
            )
        assert code(e.value) == "InvalidArgument", bad
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(
            Bucket="exp", Key="upc/dst.bin", UploadId=up, PartNumber=3, CopySource="exp/upc/missing.bin"
        )
    assert code(e.value) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(
            Bucket="exp", Key="upc/dst.bin", UploadId="0" * 32, PartNumber=1, CopySource="exp/upc/src.bin"
        )
    assert code(e.value) == "NoSuchUpload"
    assert [p["PartNumber"] for p in s3.list_parts(Bucket="exp", Key="upc/dst.bin", UploadId=up)["Parts"]] == [1, 2]
    s3.complete_multipart_upload(
        Bucket="exp",
        Key="upc/dst.bin",
        UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r1["ETag"]}, {"PartNumber": 2, "ETag": r2["ETag"]}]},
    )
    assert s3.get_object(Bucket="exp", Key="upc/dst.bin")["Body"].read() == src[: 5 << 20] + src
    if not os.path.exists(AWS):
        pytest.fail("Debian's awscli is not installed (./dev setup installs it)")
    cluster, ep, keys = site
    big = os.urandom(9 << 20)
    s3.put_object(Bucket="exp", Key="upc/cli-src.bin", Body=big)
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="alice",
        AWS_SECRET_ACCESS_KEY=keys["alice"],
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    cmd = [AWS, "--endpoint-url", ep.url, "s3", "cp", "s3://exp/upc/cli-src.bin", "s3://exp/upc/cli-dst.bin"]
    r = subprocess.run([*cmd, "--copy-props", "none"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert s3.get_object(Bucket="exp", Key="upc/cli-dst.bin")["Body"].read() == big


def test_multipart_uploads_listed_by_page_and_reaped_when_abandoned(site, s3, tmp_path):
    """ListMultipartUploads by pages of one (key and upload-id markers),
    with a delimiter and its Initiated times, through boto3 and rclone; an
    endpoint that aborts uploads untouched for 8 s reaps the abandoned ones
    and keeps the one still getting parts."""
    import json
    import subprocess

    cluster, ep, keys = site
    t0 = datetime.datetime.now(datetime.timezone.utc)
    names = ("reap/a.bin", "reap/a.bin", "reap/b.bin", "reap/d/c.bin")
    ups = sorted((k, s3.create_multipart_upload(Bucket="exp", Key=k)["UploadId"]) for k in names)
    pages = s3.get_paginator("list_multipart_uploads").paginate(
        Bucket="exp", Prefix="reap/", PaginationConfig={"PageSize": 1}
    )
    seen = [u for page in pages for u in page.get("Uploads", [])]
    assert [(u["Key"], u["UploadId"]) for u in seen] == ups
    assert all(abs((u["Initiated"] - t0).total_seconds()) < 120 for u in seen)
    r = s3.list_multipart_uploads(Bucket="exp", Prefix="reap/", Delimiter="/")
    assert [u["Key"] for u in r["Uploads"]] == ["reap/a.bin", "reap/a.bin", "reap/b.bin"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["reap/d/"]
    if not os.path.exists(RCLONE):
        pytest.fail("Debian's rclone is not installed (./dev setup installs it)")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env["RCLONE_CONFIG"] = str(tmp_path / "none.conf")
    remote = (
        f":s3,provider=Other,access_key_id=alice,secret_access_key={keys['alice']},"
        f"endpoint='{ep.url}',region=us-east-1,force_path_style=true:"
    )
    out = subprocess.run(
        [RCLONE, "backend", "list-multipart-uploads", remote + "exp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    listed = [(u["Key"], u["UploadId"]) for u in json.loads(out.stdout)["exp"]]
    assert sorted(u for u in listed if u[0].startswith("reap/")) == ups
    (tmp_path / "keys.toml").write_text(f'[users]\nalice = "{keys["alice"]}"\n')
    reaper = Endpoint(cluster.tracker_addr, tmp_path / "keys.toml", tls=cluster.client_tls, upload_expiry_s=8)
    kept = ups[2]  # reap/b.bin, given a new part 1 on every look until the others are gone
    looks = iter(range(10**6))
    try:

        def abandoned_gone() -> bool:
            body = f"{next(looks):010d}".encode()  # other bytes each time: a new commit (the same is no change)
            s3.upload_part(Bucket="exp", Key=kept[0], UploadId=kept[1], PartNumber=1, Body=body)
            left = {u["UploadId"] for u in s3.list_multipart_uploads(Bucket="exp", Prefix="reap/").get("Uploads", [])}
            return left == {kept[1]}

        poll_for(abandoned_gone, timeout=90, interval=0.5, what="the abandoned uploads to be reaped")
    finally:
        reaper.stop()
    for key, upload_id in ups:
        if upload_id != kept[1]:
            with pytest.raises(ClientError) as e:
                s3.list_parts(Bucket="exp", Key=key, UploadId=upload_id)
            assert code(e.value) == "NoSuchUpload"
    assert [p["Size"] for p in s3.list_parts(Bucket="exp", Key=kept[0], UploadId=kept[1])["Parts"]] == [10]
    s3.abort_multipart_upload(Bucket="exp", Key=kept[0], UploadId=kept[1])


def test_object_versions_and_time_travel(site, s3):
    """Version ids are generations of the key's file: PUT answers one,
    ListObjectVersions lists every kept version and a delete marker (boto3,
    in pages of one), ``GET``/``HEAD ?versionId=`` read a past version or a
    snapshot, a version that does not exist is NoSuchVersion; s3fs with
    ``version_aware`` reads the same versions."""
    import s3fs

    cluster, ep, keys = site
    v1 = s3.put_object(Bucket="exp", Key="ver/a.txt", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket="exp", Key="ver/a.txt", Body=b"two!")["VersionId"]
    vb = s3.put_object(Bucket="exp", Key="ver/b.txt", Body=b"bee")["VersionId"]
    s3.delete_object(Bucket="exp", Key="ver/b.txt")
    assert int(v1) < int(v2) < int(vb)
    r = s3.list_object_versions(Bucket="exp", Prefix="ver/")
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"]) for v in r["Versions"]] == [
        ("ver/a.txt", v2, True, 4),
        ("ver/a.txt", v1, False, 3),
        ("ver/b.txt", vb, False, 3),
    ]
    [marker] = r["DeleteMarkers"]
    assert marker["Key"] == "ver/b.txt" and marker["IsLatest"] and int(marker["VersionId"]) > int(vb)
    pages = s3.get_paginator("list_object_versions").paginate(
        Bucket="exp", Prefix="ver/", PaginationConfig={"PageSize": 1}
    )
    paged = [(v["Key"], v["VersionId"]) for p in pages for v in p.get("Versions", []) + p.get("DeleteMarkers", [])]
    assert sorted(paged) == sorted((v["Key"], v["VersionId"]) for v in r["Versions"] + r["DeleteMarkers"])
    old = s3.get_object(Bucket="exp", Key="ver/a.txt", VersionId=v1)
    assert old["Body"].read() == b"one" and old["VersionId"] == v1
    head = s3.head_object(Bucket="exp", Key="ver/a.txt", VersionId=v1)
    assert head["ContentLength"] == 3 and head["ETag"] == r["Versions"][1]["ETag"]
    assert s3.get_object(Bucket="exp", Key="ver/a.txt")["VersionId"] == v2
    assert s3.get_object(Bucket="exp", Key="ver/b.txt", VersionId=vb)["Body"].read() == b"bee"  # deleted since
    cluster.client(api_key=keys["alice"]).snapshot("/exp/ver", "before-three")
    s3.put_object(Bucket="exp", Key="ver/a.txt", Body=b"three")
    assert s3.get_object(Bucket="exp", Key="ver/a.txt", VersionId="before-three")["Body"].read() == b"two!"
    for missing in (str(int(vb) + 10**6), "no-such-snapshot", marker["VersionId"]):
        with pytest.raises(ClientError) as e:
            s3.get_object(
                Bucket="exp", Key="ver/a.txt" if missing != marker["VersionId"] else "ver/b.txt", VersionId=missing
            )
        assert code(e.value) == "NoSuchVersion", missing
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket="exp", Key="ver/a.txt", VersionId=v1)
    assert code(e.value) == "NotImplemented"
    assert s3.get_bucket_versioning(Bucket="exp")["Status"] == "Enabled"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket="exp", VersioningConfiguration={"Status": "Suspended"})
    assert code(e.value) == "NotImplemented"
    fs = s3fs.S3FileSystem(
        key="alice",
        secret=keys["alice"],
        client_kwargs={"endpoint_url": ep.url},
        use_listings_cache=False,
        version_aware=True,
    )
    assert fs.cat_file("exp/ver/a.txt", version_id=v1) == b"one"
    with fs.open("exp/ver/a.txt", "rb", version_id=v2) as f:
        assert f.read() == b"two!"
    assert [v["VersionId"] for v in fs.object_version_info("exp/ver/a.txt")][1:] == [v2, v1]


def test_content_type_and_user_metadata_per_version(site, s3):
    """PUT keeps Content-Type, the content headers and ``x-amz-meta-*``
    with the version; HEAD and GET answer them (HEAD from the infofile), an
    older version (``VersionId``) keeps what it had after a PUT with other
    metadata, and the StoreTorrent client reads the same map."""
    cluster, ep, keys = site
    v1 = s3.put_object(
        Bucket="exp",
        Key="meta/a.txt",
        Body=b"one",
        ContentType="text/plain",
        CacheControl="max-age=60",
        ContentDisposition='attachment; filename="a.txt"',
        Metadata={"owner": "alice", "Run-Id": "7"},
    )["VersionId"]
    head = s3.head_object(Bucket="exp", Key="meta/a.txt")
    assert head["ContentType"] == "text/plain" and head["Metadata"] == {"owner": "alice", "run-id": "7"}
    assert head["CacheControl"] == "max-age=60" and head["ContentDisposition"] == 'attachment; filename="a.txt"'
    got = s3.get_object(Bucket="exp", Key="meta/a.txt")
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {"owner": "alice", "run-id": "7"}
    s3.put_object(Bucket="exp", Key="meta/a.txt", Body=b"two", ContentType="image/png", Metadata={"owner": "bob"})
    head = s3.head_object(Bucket="exp", Key="meta/a.txt")
    assert head["ContentType"] == "image/png" and head["Metadata"] == {"owner": "bob"}
    old = s3.get_object(Bucket="exp", Key="meta/a.txt", VersionId=v1)
    assert old["Body"].read() == b"one" and old["ContentType"] == "text/plain"
    assert old["Metadata"] == {"owner": "alice", "run-id": "7"}
    assert s3.head_object(Bucket="exp", Key="meta/a.txt", VersionId=v1)["Metadata"]["owner"] == "alice"
    s3.put_object(Bucket="exp", Key="meta/plain", Body=b"x")
    plain = s3.head_object(Bucket="exp", Key="meta/plain")
    assert plain["ContentType"] == "binary/octet-stream" and plain["Metadata"] == {}
    with cluster.client(api_key=keys["alice"]).open("/exp/meta") as f:
        assert f.infofile().user_meta_of("a.txt") == {"content-type": "image/png", "owner": "bob"}


def test_copy_object_metadata_directives(s3):
    """CopyObject copies the source's metadata (``COPY``, the default) or
    takes the request's (``REPLACE``)."""
    s3.put_object(Bucket="exp", Key="meta/src", Body=b"src", ContentType="text/csv", Metadata={"a": "1"})
    s3.copy_object(Bucket="exp", Key="meta/copied", CopySource="exp/meta/src")
    h = s3.head_object(Bucket="exp", Key="meta/copied")
    assert h["ContentType"] == "text/csv" and h["Metadata"] == {"a": "1"}
    s3.copy_object(
        Bucket="exp",
        Key="meta/replaced",
        CopySource="exp/meta/src",
        MetadataDirective="REPLACE",
        ContentType="application/json",
        Metadata={"b": "2"},
    )
    h = s3.head_object(Bucket="exp", Key="meta/replaced")
    assert h["ContentType"] == "application/json" and h["Metadata"] == {"b": "2"}
    assert s3.get_object(Bucket="exp", Key="meta/replaced")["Body"].read() == b"src"


def test_multipart_upload_keeps_the_metadata_of_its_creation(s3):
    up = s3.create_multipart_upload(Bucket="exp", Key="meta/mp.bin", ContentType="video/mp4", Metadata={"c": "3"})
    etag = s3.upload_part(Bucket="exp", Key="meta/mp.bin", UploadId=up["UploadId"], PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(
        Bucket="exp",
        Key="meta/mp.bin",
        UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
    )
    got = s3.get_object(Bucket="exp", Key="meta/mp.bin")
    assert got["Body"].read() == b"p" and got["ContentType"] == "video/mp4" and got["Metadata"] == {"c": "3"}


def test_too_much_metadata_is_refused_and_nothing_stored(s3):
    """Over S3's 2 KB of user metadata: ``MetadataTooLarge`` (400) on PUT,
    CreateMultipartUpload and a REPLACE copy; nothing stored."""
    big = {"k": "v" * 2048}  # 2049 bytes of names and values
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="exp", Key="meta/big", Body=b"x", Metadata=big)
    assert code(e.value) == "MetadataTooLarge" and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket="exp", Key="meta/big", Metadata=big)
    assert code(e.value) == "MetadataTooLarge"
    s3.put_object(Bucket="exp", Key="meta/small", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket="exp", Key="meta/big", CopySource="exp/meta/small", MetadataDirective="REPLACE", Metadata=big
        )
    assert code(e.value) == "MetadataTooLarge"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="exp", Key="meta/big")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert not s3.list_multipart_uploads(Bucket="exp", Prefix="meta/").get("Uploads")


def test_aws_chunked_is_not_the_objects_content_encoding():
    """``aws-chunked`` says how a body was sent (boto3 over https), not the
    object's encoding: S3 leaves it out of the stored Content-Encoding."""
    from st_integrations.s3.usermeta import from_headers, to_headers

    assert from_headers({"content-encoding": ["aws-chunked"]}, "k") == {}
    kept = from_headers({"content-encoding": ["gzip,aws-chunked"], "x-amz-meta-a": ["1"]}, "k")
    assert kept == {"content-encoding": "gzip", "a": "1"}
    assert to_headers(kept) == {"Content-Type": "binary/octet-stream", "Content-Encoding": "gzip", "x-amz-meta-a": "1"}


def test_duckdb_httpfs_reads_globs_and_copies_to_s3(site, s3, tmp_path, monkeypatch):
    """DuckDB's httpfs, loaded from its package as the README's block does
    (run as written, with this endpoint and alice's key): ``read_parquet``
    of globs (one level, the bucket's top level, ``**``) over what boto3
    and pandas (s3fs) wrote, and ``COPY ... TO 's3://...'`` (a multipart
    upload of 5 MiB parts: HEAD, ranged GETs to read it back) read by
    boto3, the Dask reader and the CLI; a second COPY to the key replaces
    it; a missing key is DuckDB's 404."""
    import duckdb
    import pyarrow.parquet as pq
    from helpers import run_cli
    from test_readme import python_blocks

    from st_integrations.dask_reader import read_storetorrent

    cluster, ep, keys = site
    s3.create_bucket(Bucket="duck")
    frames = [pd.DataFrame({"x": range(i * 100, i * 100 + 100), "s": [f"r{j}" for j in range(100)]}) for i in range(3)]
    for i, df in enumerate(frames[:2]):
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        s3.put_object(Bucket="duck", Key=f"in/part-{i}.parquet", Body=buf.getvalue())
    opts = {"key": "alice", "secret": keys["alice"], "client_kwargs": {"endpoint_url": ep.url}}
    frames[2].to_parquet("s3://duck/in/part-2.parquet", index=False, storage_options=opts)
    frames[0].to_parquet("s3://exp/pq/duck.parquet", index=False, storage_options=opts)  # what the README reads
    [block] = [b for b in python_blocks() if "read_parquet('s3://" in b]
    scope: dict = {}
    exec(block.replace("127.0.0.1:9000", f"127.0.0.1:{ep.port}").replace("ALICE_KEY", keys["alice"]), scope)  # noqa: S102
    con = scope["con"]
    answer = s3.get_object(Bucket="exp", Key="out/answer.parquet")["Body"].read()
    assert pq.read_table(io.BytesIO(answer)).to_pylist() == [{"answer": 42}]
    assert con.sql("SELECT count(*), sum(x) FROM read_parquet('s3://duck/in/*.parquet')").fetchone() == (300, 44850)
    con.execute("COPY (SELECT 1000 AS x, 'top' AS s) TO 's3://duck/top.parquet'")  # a record of /duck/.s3
    assert con.sql("SELECT sum(x) FROM read_parquet('s3://duck/*.parquet')").fetchone() == (1000,)
    assert con.sql("SELECT count(*) FROM read_parquet('s3://duck/**/*.parquet')").fetchone() == (301,)
    con.execute("SET s3_uploader_max_filesize = '10GB'; SET s3_uploader_max_parts_per_file = 2000")  # 5 MiB parts
    con.execute(
        "COPY (SELECT range AS y, md5(range::VARCHAR) AS h FROM range(200000)) "
        "TO 's3://duck/out/big.parquet' (COMPRESSION uncompressed)"
    )
    assert not s3.list_multipart_uploads(Bucket="duck").get("Uploads")
    body = s3.get_object(Bucket="duck", Key="out/big.parquet")["Body"].read()
    assert len(body) > 6 << 20  # more than one part
    t = pq.read_table(io.BytesIO(body))
    assert t.num_rows == 200_000 and sum(t["y"].to_pylist()) == 199_999 * 100_000
    assert con.sql("SELECT count(*), max(y) FROM read_parquet('s3://duck/out/big.parquet')").fetchone() == (
        200_000,
        199_999,
    )
    monkeypatch.setenv("STORETORRENT_API_KEY", keys["alice"])
    ddf = read_storetorrent("/duck/out", columns=["y"], tracker=cluster.tracker_addr)
    assert int(ddf["y"].sum().compute()) == 199_999 * 100_000
    r = run_cli(cluster, "get", "/duck/out", "big.parquet", "-o", str(tmp_path / "big.parquet"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "big.parquet").read_bytes() == body
    con.execute("COPY (SELECT 1 AS y) TO 's3://duck/out/big.parquet'")  # a new version of the key
    assert con.sql("SELECT y FROM read_parquet('s3://duck/out/big.parquet')").fetchall() == [(1,)]
    with pytest.raises(duckdb.HTTPException, match="404"):
        con.sql("SELECT * FROM read_parquet('s3://duck/in/nope.parquet')").fetchall()


def test_past_versions_of_striped_objects_are_listed_and_read(site, s3):
    """A striped object's past versions (deleted and put again, then
    replaced by a small PUT at once: docs/striping.md, "Replacing an
    object") are listed by ListObjectVersions with their delete markers and
    read by ``versionId``; the replacement leaves no delete marker between
    the object and the record that replaced it."""
    cluster, ep, keys = site
    one, two = os.urandom(3 << 20), os.urandom(2 << 20) + b"two"
    with cluster.client(api_key=keys["alice"]).create("/exp/sver", replication="x2") as f:
        f.put_object("obj.bin", one, stripe_size=1 << 20)
    v1 = s3.head_object(Bucket="exp", Key="sver/obj.bin")["VersionId"]
    s3.delete_object(Bucket="exp", Key="sver/obj.bin")
    with cluster.client(api_key=keys["alice"]).open("/exp/sver") as f:
        f.put_object("obj.bin", two, stripe_size=1 << 20)
    v2 = s3.head_object(Bucket="exp", Key="sver/obj.bin")["VersionId"]
    v3 = s3.put_object(Bucket="exp", Key="sver/obj.bin", Body=b"small")["VersionId"]  # the object replaced
    assert s3.get_object(Bucket="exp", Key="sver/obj.bin")["Body"].read() == b"small"
    s3.delete_object(Bucket="exp", Key="sver/obj.bin")
    r = s3.list_object_versions(Bucket="exp", Prefix="sver/")
    assert [(v["VersionId"], v["Size"], v["IsLatest"]) for v in r["Versions"]] == [
        (v3, 5, False),
        (v2, len(two), False),
        (v1, len(one), False),
    ]
    markers = [(m["VersionId"], m["IsLatest"]) for m in r["DeleteMarkers"]]
    assert len(markers) == 2 and markers[0][1] and not markers[1][1]
    assert int(v1) < int(markers[1][0]) < int(v2) < int(v3) < int(markers[0][0])
    for vid, data in ((v1, one), (v2, two), (v3, b"small")):
        got = s3.get_object(Bucket="exp", Key="sver/obj.bin", VersionId=vid)
        listed = next(v for v in r["Versions"] if v["VersionId"] == vid)
        assert got["Body"].read() == data and got["ETag"] == listed["ETag"]
        at = 1048570 if len(data) > 1 << 20 else 1
        part = s3.get_object(Bucket="exp", Key="sver/obj.bin", VersionId=vid, Range=f"bytes={at}-{at + 10}")
        assert part["Body"].read() == data[at : at + 11]


def test_copies_of_versions_under_conditions_parts_and_versioning(s3):
    """CopyObject and UploadPartCopy of a past version (``?versionId=``)
    under ``x-amz-copy-source-if-*`` conditions (a failed one is
    PreconditionFailed, nothing stored); GET and HEAD of part 1 (the whole
    object: every object is one part) and of part 2 (InvalidPartNumber);
    PutBucketVersioning Enabled taken (it is always on)."""
    v1 = s3.put_object(Bucket="exp", Key="copyv/src.bin", Body=b"first")["VersionId"]
    s3.put_object(Bucket="exp", Key="copyv/src.bin", Body=b"second!")
    old = s3.head_object(Bucket="exp", Key="copyv/src.bin", VersionId=v1)
    src = {"Bucket": "exp", "Key": "copyv/src.bin", "VersionId": v1}
    later = old["LastModified"] + datetime.timedelta(seconds=5)
    earlier = old["LastModified"] - datetime.timedelta(seconds=5)
    for cond in (
        {"CopySourceIfMatch": '"0123"'},
        {"CopySourceIfNoneMatch": old["ETag"]},
        {"CopySourceIfModifiedSince": later},
        {"CopySourceIfUnmodifiedSince": earlier},
    ):
        with pytest.raises(ClientError) as e:
            s3.copy_object(Bucket="exp", Key="copyv/dst.bin", CopySource=src, **cond)
        assert code(e.value) == "PreconditionFailed", cond
    assert s3.list_objects_v2(Bucket="exp", Prefix="copyv/dst")["KeyCount"] == 0
    r = s3.copy_object(Bucket="exp", Key="copyv/dst.bin", CopySource=src, CopySourceIfMatch=old["ETag"])
    assert r["CopySourceVersionId"] == v1 and r["VersionId"]
    assert s3.get_object(Bucket="exp", Key="copyv/dst.bin")["Body"].read() == b"first"
    up = s3.create_multipart_upload(Bucket="exp", Key="copyv/mp.bin")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(
            Bucket="exp", Key="copyv/mp.bin", UploadId=up, PartNumber=1, CopySource=src, CopySourceIfMatch='"0"'
        )
    assert code(e.value) == "PreconditionFailed"
    r = s3.upload_part_copy(Bucket="exp", Key="copyv/mp.bin", UploadId=up, PartNumber=1, CopySource=src)
    assert r["CopySourceVersionId"] == v1
    assert [p["Size"] for p in s3.list_parts(Bucket="exp", Key="copyv/mp.bin", UploadId=up)["Parts"]] == [5]
    s3.abort_multipart_upload(Bucket="exp", Key="copyv/mp.bin", UploadId=up)
    got = s3.get_object(Bucket="exp", Key="copyv/src.bin", PartNumber=1)
    assert got["Body"].read() == b"second!" and got["PartsCount"] == 1 and got["ContentRange"] == "bytes 0-6/7"
    assert s3.head_object(Bucket="exp", Key="copyv/src.bin", PartNumber=1)["PartsCount"] == 1
    bad_parts = (({"PartNumber": 2}, "InvalidPartNumber"), ({"PartNumber": 1, "Range": "bytes=0-1"}, "InvalidRequest"))
    for kw, want in bad_parts:
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="exp", Key="copyv/src.bin", **kw)
        assert code(e.value) == want
    s3.put_bucket_versioning(Bucket="exp", VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket="exp")["Status"] == "Enabled"


def _raw_request(port: int, request: bytes, pieces: int = 1) -> tuple[int, bytes]:
    """``request`` sent on a new connection in ``pieces`` (50 ms apart),
    then the answer read until the endpoint closes: ``(status, body)``."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        step = -(-len(request) // pieces)
        try:
            for i in range(0, len(request), step):
                s.sendall(request[i : i + step])
                time.sleep(0.05)
        except OSError:  # refused and closed before the rest was sent
            pass
        while chunk := s.recv(65536):
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_oversized_and_malformed_requests_get_s3_errors(site, s3, http):
    """With either HTTP protocol: headers over S3's 8 KiB (arrived whole:
    the app), a request line and headers over 16 KiB still arriving (the
    protocol: also one that never ends), a request line that is not HTTP and a malformed header:
    each S3's error XML (400), nothing stored, the endpoint up and
    answering boto3."""
    cluster, main, keys = site
    ep = Endpoint(cluster.tracker_addr, main.keys_file, tls=main.tls, http=http)
    try:
        assert protocol_of(ep.server) == http
        _refuse_bad_requests(ep, s3)
        c = ep.client("alice", keys["alice"])
        c.put_object(Bucket="exp", Key=f"hdr-ok/{http}", Body=b"x" * 100_000)
        assert c.get_object(Bucket="exp", Key=f"hdr-ok/{http}")["Body"].read() == b"x" * 100_000
    finally:
        ep.stop()


def test_http_protocol_choice():
    """httptools by default (it is installed with the s3 extra), h11 on
    request, anything else refused with the choices."""
    assert protocol_class()[1] == "httptools"
    assert protocol_class("h11") == (S3H11Protocol, "h11")
    with pytest.raises(InvalidOptionError, match="httptools, h11"):
        protocol_class("zttp")


def test_s3_command_says_which_http_protocol_runs(site, s3):
    """``storetorrent s3 --http h11`` (its own process) serves boto3 and
    names h11 in its start line; without --http it names httptools; an
    unknown protocol stops the start with the choices."""
    import subprocess
    import sys

    cluster, main, keys = site
    for args, name in (((), "httptools"), (("--http", "h11"), "h11")):
        d = cluster.s3_endpoint(0, ("--keys", str(main.keys_file), *args), name=f"s3-http-{name}")
        try:
            c = s3_client(f"http://{d.addr}", "alice", keys["alice"])
            c.put_object(Bucket="exp", Key=f"cmd/{name}", Body=b"via " + name.encode())
            assert c.get_object(Bucket="exp", Key=f"cmd/{name}")["Body"].read() == b"via " + name.encode()
            c.close()
        finally:
            d.stop()
        log = (cluster.data_dir / "logs" / f"s3-http-{name}.log").read_text()
        assert f"HTTP by {name}" in log, log
    bad = subprocess.run(
        [sys.executable, "-m", "st_integrations.s3", "--tracker", cluster.tracker_addr, "--http", "zttp"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "httptools, h11" in bad.stderr, bad.stderr


def _refuse_bad_requests(ep: Endpoint, s3) -> None:
    """The bad requests of the test above, sent to ``ep``, each answered with its S3 error."""
    host = f"Host: 127.0.0.1:{ep.port}\r\n".encode()
    pad = b"X-Pad: " + b"p" * 10_000 + b"\r\n"
    status, body = _raw_request(ep.port, b"GET /exp/ HTTP/1.1\r\n" + host + pad + b"\r\n")
    assert status == 400 and b"<Code>RequestHeaderSectionTooLarge</Code>" in body
    big = b"X-Pad: " + b"p" * 40_000 + b"\r\n"
    put = b"PUT /exp/hdr/x HTTP/1.1\r\n" + host + big + b"Content-Length: 3\r\n\r\nabc"
    status, body = _raw_request(ep.port, put, pieces=8)
    assert status == 400 and b"<Code>RequestHeaderSectionTooLarge</Code>" in body
    unfinished = b"GET /exp/ HTTP/1.1\r\n" + host + b"X-Pad: " + b"p" * 40_000  # a head that never ends
    status, body = _raw_request(ep.port, unfinished, pieces=8)
    assert status == 400 and b"<Code>RequestHeaderSectionTooLarge</Code>" in body
    status, body = _raw_request(ep.port, b"GARBAGE\r\n\r\n")
    assert status == 400 and b"<Code>InvalidRequest</Code>" in body
    status, body = _raw_request(ep.port, b"GET /exp/ HTTP/1.1\r\n" + host + b"Bad Header: v\r\n\r\n")
    assert status == 400 and b"<Code>InvalidRequest</Code>" in body
    assert s3.list_objects_v2(Bucket="exp", Prefix="hdr/")["KeyCount"] == 0


def test_conditional_writes(s3):
    """S3's conditional writes: a PUT with ``If-Match`` stores only over
    the key's current ETag (a stale or wrong one PreconditionFailed, a
    missing key NoSuchKey, nothing stored); CompleteMultipartUpload takes
    ``If-None-Match: *`` (the key exists: PreconditionFailed, the upload
    kept) and ``If-Match``."""
    e1 = s3.put_object(Bucket="exp", Key="cw/a.txt", Body=b"one")["ETag"]
    for etag in ('"0123-1"', None):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="exp", Key="cw/a.txt", Body=b"x", IfMatch=etag or e1.upper())
        assert code(e.value) == "PreconditionFailed"
    e2 = s3.put_object(Bucket="exp", Key="cw/a.txt", Body=b"two", IfMatch=e1)["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="exp", Key="cw/a.txt", Body=b"x", IfMatch=e1)  # stale
    assert code(e.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="exp", Key="cw/none.txt", Body=b"x", IfMatch=e1)
    assert code(e.value) == "NoSuchKey"
    assert [c["Key"] for c in s3.list_objects_v2(Bucket="exp", Prefix="cw/")["Contents"]] == ["cw/a.txt"]
    assert s3.get_object(Bucket="exp", Key="cw/a.txt")["Body"].read() == b"two"
    up = s3.create_multipart_upload(Bucket="exp", Key="cw/a.txt")["UploadId"]
    part = s3.upload_part(Bucket="exp", Key="cw/a.txt", UploadId=up, PartNumber=1, Body=b"three")["ETag"]
    parts = {"Parts": [{"PartNumber": 1, "ETag": part}]}
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket="exp", Key="cw/a.txt", UploadId=up, MultipartUpload=parts, IfNoneMatch="*")
    assert code(e.value) == "PreconditionFailed"
    s3.complete_multipart_upload(Bucket="exp", Key="cw/a.txt", UploadId=up, MultipartUpload=parts, IfMatch=e2)
    assert s3.get_object(Bucket="exp", Key="cw/a.txt")["Body"].read() == b"three"


def test_encryption_tags_and_locks_asked_for_are_refused(s3):
    """A write asking for server-side encryption, tags or an object lock
    is NotImplemented with nothing stored (they were ignored: the object
    was stored plain, untagged, unlocked); the connection stays usable."""
    asks = ({"ServerSideEncryption": "AES256"}, {"Tagging": "a=b"}, {"ObjectLockLegalHoldStatus": "ON"})
    for kw in asks:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="exp", Key="sse/a.bin", Body=b"x" * 1000, **kw)
        assert code(e.value) == "NotImplemented", kw
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket="exp", Key="sse/b.bin", ServerSideEncryption="aws:kms")
    assert code(e.value) == "NotImplemented"
    assert s3.list_objects_v2(Bucket="exp", Prefix="sse/")["KeyCount"] == 0
    assert not s3.list_multipart_uploads(Bucket="exp", Prefix="sse/").get("Uploads")
    s3.put_object(Bucket="exp", Key="sse/a.bin", Body=b"plain")
    assert s3.get_object(Bucket="exp", Key="sse/a.bin")["Body"].read() == b"plain"


def test_response_header_overrides_and_bulk_deletes_of_versions(site, s3):
    """GET and HEAD take S3's ``response-*`` parameters (a presigned
    download too); a DeleteObjects entry naming a version is
    NotImplemented in the result and deletes nothing (it deleted the
    current version)."""
    import urllib.request

    cluster, ep, keys = site
    v = s3.put_object(Bucket="exp", Key="ovr/a.json", Body=b"{}", ContentType="text/plain")["VersionId"]
    s3.put_object(Bucket="exp", Key="ovr/b.json", Body=b"[]")
    want = {"ContentType": "application/json", "ContentDisposition": 'attachment; filename="a.json"'}
    got = s3.get_object(
        Bucket="exp",
        Key="ovr/a.json",
        ResponseContentType=want["ContentType"],
        ResponseContentDisposition=want["ContentDisposition"],
        ResponseCacheControl="no-cache",
    )
    assert {k: got[k] for k in want} == want and got["CacheControl"] == "no-cache" and got["Body"].read() == b"{}"
    assert s3.head_object(Bucket="exp", Key="ovr/a.json", ResponseContentType="x/y")["ContentType"] == "x/y"
    assert s3.get_object(Bucket="exp", Key="ovr/a.json")["ContentType"] == "text/plain"
    signer = ep.client("alice", keys["alice"], signature_version="s3v4")
    url = signer.generate_presigned_url(
        "get_object",
        Params={"Bucket": "exp", "Key": "ovr/a.json", "ResponseContentDisposition": want["ContentDisposition"]},
    )
    with urllib.request.urlopen(url, timeout=20) as r:
        assert r.headers["Content-Disposition"] == want["ContentDisposition"] and r.read() == b"{}"
    r = s3.delete_objects(
        Bucket="exp", Delete={"Objects": [{"Key": "ovr/a.json", "VersionId": v}, {"Key": "ovr/b.json"}]}
    )
    assert [(d["Key"], d.get("VersionId"), d["Code"]) for d in r["Errors"]] == [("ovr/a.json", v, "NotImplemented")]
    assert [d["Key"] for d in r["Deleted"]] == ["ovr/b.json"]
    assert s3.get_object(Bucket="exp", Key="ovr/a.json")["Body"].read() == b"{}"


def test_ranges_of_a_record_read_it_from_the_peers_once(site, s3):
    """Ranged GETs of one record version (as DuckDB reads a Parquet file:
    the footer, then column chunks) move the record from the peers once
    (the endpoint keeps it, s3/reccache.py), counted by the peers' sent
    bytes; a new version of the same size is read again, and the old one
    by versionId still answers its own bytes."""
    from helpers import metric_sample, scrape_metrics

    cluster, ep, keys = site
    addrs = [p.metrics_addr for p in cluster.peers if p is not None]
    assert addrs and all(addrs)

    def sent() -> float:
        return sum(metric_sample(scrape_metrics(a), "st_peer_sent_bytes_total") for a in addrs)

    one, two = os.urandom(4 << 20), os.urandom(4 << 20)
    v1 = s3.put_object(Bucket="exp", Key="rc/a.bin", Body=one)["VersionId"]
    before = sent()
    for i in range(8):
        a = i * (512 << 10)
        got = s3.get_object(Bucket="exp", Key="rc/a.bin", Range=f"bytes={a}-{a + 999}")["Body"].read()
        assert got == one[a : a + 1000]
    assert sent() - before < 2 * len(one)  # once, not 8 times
    s3.put_object(Bucket="exp", Key="rc/a.bin", Body=two)
    assert s3.get_object(Bucket="exp", Key="rc/a.bin", Range="bytes=10-19")["Body"].read() == two[10:20]
    old = s3.get_object(Bucket="exp", Key="rc/a.bin", Range="bytes=10-19", VersionId=v1)["Body"].read()
    assert old == one[10:20]


def test_a_put_meeting_another_writers_put_is_service_unavailable():
    """A PUT over 64 MiB of a key whose stripes another writer committed
    moments ago, without its object yet (``ObjectBeingWrittenError``,
    docs/striping.md "Stripes a writer left"), is S3's ``ServiceUnavailable``
    (503, which the SDKs retry; S3's ``OperationAborted``, 409, they do not), with the wait in
    its message; so is a record another live writer holds uncommitted, and a
    PUT that lost the race for a new key (``RecordExistsError``)."""
    from st_integrations.s3.errors import from_storetorrent
    from st_py.errors import ObjectBeingWrittenError, RecordBeingWrittenError, RecordExistsError

    e = from_storetorrent(ObjectBeingWrittenError("k", "/b/.s3", 2, 1.0, 59.0), "/b/k")
    assert (e.code, e.status) == ("ServiceUnavailable", 503) and "retry in 59 s" in e.message
    e = from_storetorrent(RecordBeingWrittenError("k", "/b/.s3", ["127.0.0.1:1"]), "/b/k")
    assert (e.code, e.status) == ("ServiceUnavailable", 503)
    e = from_storetorrent(RecordExistsError("record 'k' is committed", names=["k"]), "/b/k")  # lost the race
    assert (e.code, e.status) == ("ServiceUnavailable", 503)
