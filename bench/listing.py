"""Listing a large file through fsspec (issue 31, item 4): ``find`` of one
StoreTorrent file of N records against ``os.walk`` over the same records'
files on the peers.

The file is class x1 on 4 real peers, so each record is exactly one file
in a peer's store (``<data>/files/<file_id:016x>/<bucket>/<name>@<rank>@<crc>``,
docs/peer.md); the baseline walks those four directories, which hold the
N files and nothing else (the count is checked). Both sides run warm (the
infofile's pages and the directories in the page cache), alternated over
``rounds`` rounds; the medians are reported. ``find`` answers from one
range query of the infofile's name index (docs/fsspec.md, "Listing");
``os.walk`` reads the bucket directories.

Rows: ``listing_find`` (target: within 3x of ``os.walk``),
``listing_s3_delimiter`` (issue 42: the same records listed through the S3
endpoint, ListObjectsV2 with a prefix and a delimiter, page by page, within
3x of ``find``), ``listing_s3_client_parse`` (the same pages parsed by the
client alone: what any S3 server's listing costs at least),
``listing_s3_native_client`` (the same listing by pyarrow's
``S3FileSystem``, the AWS SDK for C++: the server's part seen without
Python's XML parsing), and without a target ``find`` with details, ``ls`` of the
file (names, then details) and ``du``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from .cases import row

GROUP = "listing"
PAGE = 1000  # keys a ListObjectsV2 page: S3's default and largest
BODY = b"x" * 64  # each record's bytes


def _walk(dirs: list[str]) -> int:
    n = 0
    for d in dirs:
        for _, _, files in os.walk(d):
            n += len(files)
    return n


def _s3_client(url: str | None):
    import boto3
    from botocore.config import Config

    assert url is not None
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def _parse_pages(bodies: list[bytes]) -> int:
    """The keys of ListObjectsV2 pages already received, parsed as
    :func:`_list_http` parses them: what the client's side of a listing
    costs with no server at all (the floor of ``listing_s3_delimiter``)."""
    import xml.etree.ElementTree as ET

    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    n = 0
    for body in bodies:
        root = ET.fromstring(body)
        n += len([e.text or "" for e in root.iter(f"{ns}Key")])
    return n


def _fill_seaweedfs(url: str, n: int, body: bytes) -> None:
    """PUT keys ``f/r000000000`` ... of ``body`` into bucket ``listing`` of
    SeaweedFS's S3 gateway at ``url`` (made here), 16 keep-alive HTTP
    connections (unsigned: the gateway runs without identities)."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    u = urlsplit(url)

    def req(conn, method: str, path: str, data: bytes = b"") -> None:
        conn.request(method, path, body=data)
        r = conn.getresponse()
        out = r.read()
        assert r.status == 200, (method, path, r.status, out[:300])

    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    req(c, "PUT", "/listing")
    c.close()

    def part(k: int) -> None:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        try:
            for i in range(k, n, 16):
                req(conn, "PUT", f"/listing/f/r{i:09d}", body)
        finally:
            conn.close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(part, range(16)))


def case_listing_seaweedfs(tmp: Path, n: int, body: bytes, ours_s: float, rounds: int = 5) -> list[dict]:
    """``listing_s3_vs_seaweedfs``: the same listing (:func:`_list_http`:
    bucket ``listing``, prefix ``f/``, delimiter ``/``, 1,000 keys a page)
    of the same ``n`` keys against SeaweedFS's S3 gateway (``weed s3`` over
    a filer, a master and one volume server), the median of ``rounds``;
    StoreTorrent's median ``ours_s`` as the value. None without ``weed``."""
    from .seaweedfs import Seaweed, weed_bin

    if weed_bin() is None:
        return []
    with Seaweed(tmp, volumes=1, s3=True) as sw:
        _fill_seaweedfs(sw.s3_url, n, body)
        want = [f"f/r{i:09d}" for i in range(n)]
        assert _list_http(sw.s3_url, ours=False) == want  # warm, every key once, in order
        times = []
        for _ in range(rounds):
            dt, listed = _timed(_list_http, sw.s3_url, ours=False)
            assert listed == want
            times.append(dt)
    return [
        row(
            "listing_s3_vs_seaweedfs",
            ours_s,
            "s",
            "SeaweedFS weed s3 (filer, one volume server), the same listing of the same keys",
            statistics.median(times),
            note=f"{n:,} keys f/r..., ListObjectsV2 prefix f/, delimiter /, {PAGE} keys a page over one HTTP "
            f"connection, ElementTree; medians of {rounds}",
        )
    ]


def _list_http(url: str | None, bodies: list[bytes] | None = None, ours: bool = True) -> list[str]:
    """The same listing as :func:`_list_s3` over one keep-alive HTTP
    connection, each page's XML parsed by ElementTree (C): what the
    endpoint answers, without boto3's own parsing (about 65 ms a page of
    1,000 keys here, the same for any S3 server)."""
    import base64
    import http.client
    import xml.etree.ElementTree as ET
    from urllib.parse import quote, urlsplit

    assert url is not None
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    keys: list[str] = []
    token = ""
    try:
        while True:
            q = f"/listing?list-type=2&prefix=f%2F&delimiter=%2F&max-keys={PAGE}"
            conn.request("GET", q + (f"&continuation-token={quote(token)}" if token else ""))
            r = conn.getresponse()
            body = r.read()
            assert r.status == 200, (r.status, body[:300])
            if bodies is not None:
                bodies.append(body)
            root = ET.fromstring(body)
            assert root.find(f"{ns}CommonPrefixes") is None
            keys += [e.text or "" for e in root.iter(f"{ns}Key")]
            if root.findtext(f"{ns}IsTruncated") != "true":
                return keys
            token = root.findtext(f"{ns}NextContinuationToken") or ""
            assert not ours or base64.urlsafe_b64decode(token)  # the endpoint's own token
    finally:
        conn.close()


def _native_fs(url: str | None):
    """pyarrow's ``S3FileSystem`` (the AWS SDK for C++) on the endpoint
    at ``url``, signed with the bench's key (the endpoint runs without
    keys: development mode takes any)."""
    from urllib.parse import urlsplit

    from pyarrow import fs as pafs

    assert url is not None
    u = urlsplit(url)
    return pafs.S3FileSystem(
        access_key="bench",
        secret_key="bench",
        endpoint_override=f"{u.hostname}:{u.port}",
        scheme="http",
        region="us-east-1",
    )


def _list_native(s3fs) -> list[str]:
    """The keys under ``f/`` of bucket ``listing`` listed by pyarrow's
    ``S3FileSystem`` ``s3fs``: ``get_file_info`` of a ``FileSelector`` of
    ``listing/f/``, not recursive (ListObjectsV2 with prefix ``f/`` and
    delimiter ``/``, 1,000 keys a page, parsed in C++; a ``FileInfo`` a
    key), as ``f/r...`` in order."""
    from pyarrow import fs as pafs

    infos = s3fs.get_file_info(pafs.FileSelector("listing/f/", recursive=False))
    return sorted(i.path[len("listing/") :] for i in infos if i.type == pafs.FileType.File)


def _list_s3(s3) -> list[str]:
    """Every key under ``f/`` of bucket ``listing`` with delimiter ``/``,
    page by page (ListObjectsV2, continuation tokens); no common prefix may
    come back (the records' names hold no ``/``)."""
    keys: list[str] = []
    kw: dict = {"Bucket": "listing", "Prefix": "f/", "Delimiter": "/", "MaxKeys": PAGE}
    while True:
        page = s3.list_objects_v2(**kw)
        assert not page.get("CommonPrefixes"), page.get("CommonPrefixes")
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        kw["ContinuationToken"] = page["NextContinuationToken"]


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def case_listing(tmp: Path, n: int, rounds: int = 5) -> list[dict]:
    """fsspec ``find`` (and ``ls``, ``du``) of a file of ``n`` records,
    against ``os.walk`` of the peers' directories holding those records."""
    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="listing-", dir=tmp)), n_peers=4, s3=True).start()
    try:
        client = cluster.client()
        name = "/listing/f"
        body = BODY
        with client.create(name, replication="x1") as f:
            for i in range(n):
                f.queue_put(f"r{i:09d}", body)
        fs = StoreTorrentFileSystem(tracker=cluster.tracker_addr, skip_instance_cache=True)
        fid = fs.info(name)["file_id"]
        dirs = [str(cluster.data_dir / "peers" / f"peer-{i}" / "files" / f"{fid:016x}") for i in range(4)]
        dirs = [d for d in dirs if os.path.isdir(d)]
        assert _walk(dirs) == n, (_walk(dirs), n)  # the same n records, one file each
        assert len(fs.find(name)) == n  # warm both sides
        want = [f"f/r{i:09d}" for i in range(n)]
        boto3_s, listed = _timed(_list_s3, _s3_client(cluster.s3_url))
        assert listed == want  # every key once, in order
        bodies: list[bytes] = []
        assert _list_http(cluster.s3_url, bodies) == want
        native = _native_fs(cluster.s3_url)
        assert _list_native(native) == want
        finds, walks, lists, parses, natives = [], [], [], [], []
        for _ in range(rounds):
            dt, found = _timed(fs.find, name)
            assert len(found) == n
            finds.append(dt)
            dt, walked = _timed(_walk, dirs)
            assert walked == n
            walks.append(dt)
            dt, listed = _timed(_list_http, cluster.s3_url)
            assert listed == want
            lists.append(dt)
            dt, parsed = _timed(_parse_pages, bodies)
            assert parsed == n
            parses.append(dt)
            dt, listed = _timed(_list_native, native)
            assert listed == want
            natives.append(dt)
        detail_s, d = _timed(fs.find, name, detail=True)
        assert len(d) == n
        ls_s, names = _timed(fs.ls, name, detail=False)
        ls_detail_s, entries = _timed(fs.ls, name)
        assert len(names) == len(entries) == n
        du_s, total = _timed(fs.du, name)
        assert total == n * len(body)
        fs.close()
        client.close()
    finally:
        cluster.stop()
    med = statistics.median
    note = f"one file of {n:,} records (x1, 4 peers), warm"
    return [
        row(
            "listing_find",
            med(finds),
            "s",
            "os.walk of the peers' directories holding the same record files",
            med(walks),
            note=note + f", median of {rounds} alternated rounds",
        ),
        row(
            "listing_s3_delimiter",
            med(lists),
            "s",
            "fsspec find of the same records",
            med(finds),
            note=note + f": S3 ListObjectsV2 of bucket listing, prefix f/, delimiter /, {PAGE} keys a page "
            f"({-(-n // PAGE)} requests on one HTTP connection, ElementTree), median of {rounds} rounds "
            f"alternated with find; boto3's paginated listing of the same keys took {boto3_s:.2f} s once",
        ),
        row(
            "listing_s3_client_parse",
            med(parses),
            "s",
            "fsspec find of the same records",
            med(finds),
            note=note + f": the same {-(-n // PAGE)} ListObjectsV2 pages, received once, parsed again by the "
            "client's ElementTree with no server: the floor of listing_s3_delimiter on this machine "
            f"(median of {rounds} rounds)",
        ),
        row(
            "listing_s3_native_client",
            med(natives),
            "s",
            "fsspec find of the same records",
            med(finds),
            note=note + f": the same listing by pyarrow's S3FileSystem (the AWS SDK for C++: "
            f"get_file_info of FileSelector('listing/f/'), ListObjectsV2 prefix f/, delimiter /, {PAGE} keys a page, "
            "parsed in C++, a FileInfo a key): the endpoint's part without Python's XML parsing "
            f"(median of {rounds} rounds alternated with find)",
        ),
        row("listing_find_detail", detail_s, "s", note=note + ": find(detail=True), a dict per record"),
        row("listing_ls_names", ls_s, "s", note=note + ": ls(detail=False) of the file"),
        row("listing_ls_detail", ls_detail_s, "s", note=note + ": ls(detail=True) of the file"),
        row("listing_du", du_s, "s", note=note + ": du (a find with details)"),
    ]
