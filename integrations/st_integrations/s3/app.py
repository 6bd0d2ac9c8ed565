"""The S3 endpoint's ASGI app (:class:`Asgi`: Starlette's requests and
responses, no router): path-style requests (and
virtual-host style under ``--domain``) routed to
the operations (:mod:`.ops`), each checked by SigV4 (:mod:`.auth`) and
answered with S3's headers and XML (:mod:`.xml`); every failure is S3's
error document, never a traceback (docs/s3.md).

Thread safety: the app keeps one :class:`.ops.Ops` (one client) per access
key, made under a lock; the operations run in the endpoint's worker threads
(:meth:`S3App._run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote

from starlette.datastructures import State
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from st_py.client.object_stream import STRIPES_AHEAD
from st_py.client.record_writer import STRIPE_THRESHOLD
from st_py.errors import StoreTorrentError

from . import xml
from .auth import Keys, authenticate
from .chunked import crc32c_b64
from .errors import S3Error, from_storetorrent
from .keepalive import answer_long
from .listing import list_bucket
from .objhttp import (
    RESPONSE_OVERRIDES,
    check_copy_source,
    not_modified,
    object_headers,
    parse_copy_range,
    parse_part_number,
    parse_range,
    response_overrides,
)
from .objstream import BodyReader, ObjectBody
from .ops import ObjectStat, Ops
from .payload import PayloadCheck, StreamedBody, check_payload
from .usermeta import from_headers

T = TypeVar("T")

log = logging.getLogger("storetorrent.s3")
_REQUEST_ID = "st.request_id"  # the request's id in its ASGI scope
EMPTY_MD5 = '"d41d8cd98f00b204e9800998ecf8427e"'  # the ETag of a directory marker (an empty object)
MAX_BODY = 5 * 1024**3  # S3's limit on one PUT
MAX_HEADER_BYTES = 8 * 1024  # S3's limit on a request's headers (names, values, ": " and CRLF)
UPLOAD_EXPIRY_S = 24 * 3600.0  # a multipart upload untouched this long is aborted (docs/s3.md; MinIO's default)
REAP_INTERVAL_S = 3600.0  # at most this long between reaper passes (less: a quarter of the expiry, COMPLETED_KEEP_S)
OP_THREADS = 40  # worker threads running the operations (anyio's default limit, which Starlette's hop had)
_KNOWN_BUCKET_QUERY = {
    "list-type",
    "prefix",
    "delimiter",
    "max-keys",
    "continuation-token",
    "start-after",
    "encoding-type",
    "fetch-owner",
    "marker",
    "location",
    "delete",
    "uploads",
    "max-uploads",
    "key-marker",
    "upload-id-marker",
    "versions",
    "version-id-marker",
    "versioning",
}
_KNOWN_OBJECT_QUERY = {"x-id", "uploads", "uploadId", "partNumber", "max-parts", "part-number-marker", "versionId"}
_KNOWN_OBJECT_QUERY |= set(RESPONSE_OVERRIDES)


class S3App:
    """The endpoint over the tracker at ``tracker``; :attr:`app` is its ASGI app (:class:`Asgi`).

    Parameters
    ----------
    tracker : str
        ``host:port`` of the tracker.
    keys : Keys
        The access keys (development mode if its file is None).
    replication : str
        Of the files PUTs create.
    tls : tuple
        The client's TLS files (as :class:`st_py.client.client.Client`).
    domain : str, optional
        Virtual-host-style requests: a ``Host`` of ``BUCKET.DOMAIN`` names
        the bucket, the path the key; any other host is path style.
    upload_expiry_s : float
        Multipart uploads untouched this many seconds are aborted by a
        reaper thread while the server runs (0: never).
    peer_data : list of str
        Data directories of the peers on this node: their copies are read
        from disk, checked, instead of by GET (``Client(local_data_dirs=)``).
    read_ahead : int
        Stripes a GET of a striped object keeps queued (:class:`.ops.Ops`).
    """

    def __init__(
        self,
        tracker: str,
        keys: Keys,
        replication: str = "x2",
        tls=(None, None, None),
        domain: str | None = None,
        upload_expiry_s: float = UPLOAD_EXPIRY_S,
        peer_data: list[str] | tuple[str, ...] = (),
        read_ahead: int = STRIPES_AHEAD,
    ):
        self.tracker, self.keys, self.replication, self.tls = tracker, keys, replication, tls
        self.peer_data, self.read_ahead = list(peer_data), read_ahead
        if self.peer_data:  # checked now: a directory that is not a peer's fails the start, not each request
            from st_py.client.local_copies import LocalCopies

            LocalCopies(self.peer_data)
        self.domain = domain.lower().strip(".") if domain else None
        self.upload_expiry_s = upload_expiry_s
        self._ops: dict[str | None, Ops] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(OP_THREADS, thread_name_prefix="s3-op")
        self.app = Asgi(self)
        if keys.open:
            log.warning("S3 endpoint without access keys (development mode): every request is taken unchecked")

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        """While the server runs: the reaper of abandoned multipart uploads
        (none aborted if ``upload_expiry_s`` is 0) and of completed ones;
        when it stops, every caller's kept handles and client are closed."""
        stop = threading.Event()
        threading.Thread(target=self._reaper, args=(stop,), name="s3-reaper", daemon=True).start()
        try:
            yield
        finally:
            stop.set()
            self._pool.shutdown(wait=False)
            with self._lock:
                every, self._ops = list(self._ops.values()), {}
            for ops in every:  # the kept handles (.handles) and the clients
                try:
                    ops.close()
                except Exception:  # noqa: BLE001 (stopping: a failure to close is logged, not raised)
                    log.exception("closing the S3 endpoint's handles failed")

    def _reaper(self, stop: threading.Event) -> None:
        from .multipart import COMPLETED_KEEP_S

        interval = min(REAP_INTERVAL_S, self.upload_expiry_s / 4 or REAP_INTERVAL_S, COMPLETED_KEEP_S)
        while True:
            try:
                n = self.reap_uploads()
                if n:
                    log.info("aborted %d multipart uploads untouched for %g s", n, self.upload_expiry_s)
            except Exception:  # a pass that failed (tracker down): the next one tries again
                log.exception("reaping multipart uploads failed")
            if stop.wait(interval):
                return

    def reap_uploads(self) -> int:
        """One pass of the reaper: in every bucket, abort the multipart
        uploads untouched for over ``upload_expiry_s`` seconds (0: none)
        and remove those completed over ``COMPLETED_KEEP_S`` ago
        (:meth:`.multipart.Multipart.reap`), with each access key's rights
        in turn (development mode: the endpoint's own), so each user's are
        reaped. Returns how many were aborted. Thread safety: any thread."""
        from .multipart import Multipart

        n = 0
        for api_key in [None] if self.keys.secrets is None else sorted(set(self.keys.secrets.values())):
            ops = self.ops(api_key)
            for bucket, _ in ops.list_buckets():
                try:
                    n += len(Multipart(ops).reap(bucket, self.upload_expiry_s))
                except (S3Error, StoreTorrentError) as e:  # a bucket gone meanwhile, or not this user's
                    log.debug("reaping uploads of %s: %s", bucket, e)
        return n

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of the endpoint's worker threads, awaited:
        the operations block (the tracker, the peers, a group commit), the
        event loop must not. One ``run_in_executor`` hop on a pool of
        :data:`OP_THREADS` threads (docs/s3.md, "The request path"): what
        Starlette's ``run_in_threadpool`` did through anyio (a capacity
        limiter, a cancel scope and a context copy a request), for less CPU."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    def ops(self, api_key: str | None) -> Ops:
        """The operations (one client) of a caller's API key."""
        with self._lock:
            o = self._ops.get(api_key)
            if o is None:
                from st_py.client.client import Client

                # metadata_max_age_s=0: with local infofile copies, each read asks the tracker whether its
                # copy is current, so a kept handle (.handles) answers every change acknowledged before
                # the request, as S3 does (within an age it could answer a key deleted or put since)
                client = Client(
                    self.tracker,
                    api_key=api_key,
                    tls=self.tls,
                    metadata_max_age_s=0.0,
                    local_data_dirs=list(self.peer_data) or None,
                )
                o = self._ops[api_key] = Ops(client, self.replication, self.read_ahead)
            return o

    def read_stats(self) -> dict[str, int]:
        """The endpoint's read counters, over every caller: ``stripes``
        fetched by GETs of striped objects, ``max_stripes_in_flight`` (the
        most stripe GETs one GET had sent and not yet answered at once) and
        ``max_stripes_held`` (the most stripes one GET held), ``local_reads``,
        ``local_bytes`` and ``local_fallbacks`` (copies read from a local
        peer's disk, and those found missing or bad there and read by GET:
        :mod:`st_py.client.local_copies`), ``quick_gets`` (GETs answered on
        the event loop: :meth:`.ops.Ops.get_object_quick`). Thread safety: any thread."""
        with self._lock:
            every = list(self._ops.values())
        out = dict.fromkeys(
            (
                "stripes",
                "max_stripes_in_flight",
                "max_stripes_held",
                "local_reads",
                "local_bytes",
                "local_fallbacks",
                "quick_gets",
            ),
            0,
        )
        for o in every:
            st = o.stream_totals()
            out["stripes"] += st.stripes
            out["quick_gets"] += o.quick_total()
            out["max_stripes_in_flight"] = max(out["max_stripes_in_flight"], st.max_outstanding)
            out["max_stripes_held"] = max(out["max_stripes_held"], st.max_held)
            lc = o.client.local_copies
            if lc is not None:
                out["local_reads"] += lc.stats.reads
                out["local_bytes"] += lc.stats.bytes
                out["local_fallbacks"] += lc.stats.fallbacks
        return out

    async def handle(self, request: Request) -> Response:
        """One request: authenticated, routed, answered (errors as S3's XML)."""
        rid = uuid.uuid4().hex[:16].upper()
        request.scope[_REQUEST_ID] = rid  # for an error document after the answer began (.keepalive)
        try:
            resp = await self._handle(request)
        except Exception as e:  # noqa: BLE001 - every failure is S3's error document (_as_s3_error)
            resp = self._error(_as_s3_error(e, request), request, rid)
        resp.headers["x-amz-request-id"] = rid
        return resp

    @staticmethod
    def _late_error(request: Request) -> Callable[[BaseException], bytes]:
        """The ``<Error>`` document of a failure of ``request``'s operation
        after its answer began (:func:`.keepalive.answer_long`)."""
        return lambda e: xml.error_doc(_as_s3_error(e, request), request.scope[_REQUEST_ID])

    @staticmethod
    def _error(e: S3Error, request: Request, rid: str) -> Response:
        headers = {}
        if e.code == "InvalidRange" and e.resource.startswith("bytes */"):
            headers["Content-Range"], e.resource = e.resource, ""
        if e.close or e.code == "RequestHeaderSectionTooLarge":  # its body not read to its end: none may follow
            headers["Connection"] = "close"
        body = b"" if request.method == "HEAD" else xml.error_doc(e, rid)
        return Response(body, status_code=e.status, media_type="application/xml", headers=headers)

    async def _handle(self, request: Request) -> Response:
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        raw_path_s = raw_path.decode("latin-1")
        raw_query = request.scope.get("query_string", b"").decode("latin-1")
        size = sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
        if size > MAX_HEADER_BYTES:
            raise S3Error(
                "RequestHeaderSectionTooLarge",
                f"your request's headers are {size} bytes, over the maximum allowed size ({MAX_HEADER_BYTES} bytes)",
            )
        headers: dict[str, list[str]] = {}
        for k, v in request.headers.raw:
            headers.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
        caller = authenticate(self.keys, request.method, raw_path_s, raw_query, headers)
        ops = self.ops(caller.api_key)
        path = unquote(raw_path_s.split("?", 1)[0])
        host = (headers.get("host") or [""])[0].lower().rsplit(":", 1)[0]
        if self.domain and host.endswith("." + self.domain):  # virtual-host style: BUCKET.DOMAIN/KEY
            bucket, key = host[: -len(self.domain) - 1], path.lstrip("/")
        else:
            bucket, _, key = path.lstrip("/").partition("/")
        query = {
            k: v for k, v in parse_qsl(raw_query, keep_blank_values=True) if not k.startswith("X-Amz-")
        }  # a presigned URL's signature fields are auth's
        m = request.method
        if not bucket:
            if m == "GET":
                buckets = await self._run(ops.list_buckets)
                return self._xml(xml.list_buckets(buckets, caller.user or "storetorrent"))
            raise S3Error("MethodNotAllowed", f"{m} / is not allowed")
        if not key:
            return await self._bucket(request, ops, bucket, query, headers, caller.user or "storetorrent")
        return await self._object(request, ops, bucket, key, query, headers)

    @staticmethod
    def _xml(body: bytes, status: int = 200) -> Response:
        return Response(body, status_code=status, media_type="application/xml")

    async def _raw_body(self, request: Request, headers: dict[str, list[str]]) -> bytes:
        """The request's body as received (``EntityTooLarge`` over
        :data:`MAX_BODY`, before it is read). Starlette joins the
        ``receive()`` messages once (none for a body in one message, as a
        small object's is)."""
        length = (headers.get("content-length") or [""])[0]
        if length and int(length) > MAX_BODY:
            raise S3Error("EntityTooLarge", "your proposed upload exceeds the maximum allowed object size")
        if length:
            return await request.body()
        pieces, size = [], 0  # no Content-Length (chunked transfer): counted as it arrives
        async for piece in request.stream():
            size += len(piece)
            if size > MAX_BODY:
                raise S3Error(
                    "EntityTooLarge", "your proposed upload exceeds the maximum allowed object size", close=True
                )
            pieces.append(piece)
        return b"".join(pieces)

    async def _body(self, request: Request, headers: dict[str, list[str]]) -> bytes:
        """The request's payload, decoded and checked on the event loop
        (:func:`.payload.check_payload`: the small XML bodies of bucket and
        multipart requests; an object's or a part's is checked in its worker
        thread, :func:`_checked`). Its bytes are copied once here: an
        ``aws-chunked`` payload is one join of views of its chunks; the put
        takes that ``bytes`` object as it is (docs/s3.md, "HTTP")."""
        body = await self._raw_body(request, headers)
        return check_payload(headers, body, self.keys)

    async def _bucket(self, request, ops: Ops, bucket: str, query: dict, headers, owner: str) -> Response:
        m = request.method
        unknown = set(query) - _KNOWN_BUCKET_QUERY
        if unknown:
            raise S3Error("NotImplemented", f"bucket subresource {sorted(unknown)[0]!r} is not implemented", bucket)
        if m == "PUT" and set(query) == {"versioning"}:
            data = await self._body(request, headers)
            await self._run(ops.need_bucket, bucket)
            status, mfa = xml.parse_versioning(data)
            if status == "Enabled" and mfa in ("", "Disabled"):  # as it is: files keep their history
                return Response(status_code=200)
            raise S3Error(
                "NotImplemented",
                f"versioning is always Enabled here (files keep their history, docs/s3.md); "
                f"Status {status!r} with MfaDelete {mfa!r} is not implemented",
                bucket,
            )
        if m in ("PUT", "HEAD", "DELETE") and query:  # PutBucketLifecycle, ...: not CreateBucket
            raise S3Error(
                "NotImplemented", f"{m} of bucket subresource {sorted(query)[0]!r} is not implemented", bucket
            )
        if m == "PUT":
            await self._run(ops.create_bucket, bucket)
            return Response(status_code=200, headers={"Location": "/" + bucket})
        if m == "HEAD":
            await self._run(ops.need_bucket, bucket)
            return Response(status_code=200, headers={"x-amz-bucket-region": self.keys.region})
        if m == "DELETE":
            await self._run(ops.delete_bucket, bucket)
            return Response(status_code=204)
        if m == "POST" and "delete" in query:
            data = await self._body(request, headers)
            keys, quiet = xml.parse_delete(data)
            return self._xml(await self._run(self._delete_many, ops, bucket, keys, quiet))
        if m == "GET" and "location" in query:
            await self._run(ops.need_bucket, bucket)
            region = "" if self.keys.region == "us-east-1" else self.keys.region  # S3's answer for us-east-1
            return self._xml(xml.doc("LocationConstraint", xml.escape(region)))
        if m == "GET" and "versioning" in query:  # files keep their history (docs/s3.md, "Versions")
            await self._run(ops.need_bucket, bucket)
            return self._xml(xml.doc("VersioningConfiguration", xml.el("Status", "Enabled")))
        if m == "GET" and "versions" in query:
            vs = await self._run(ops.list_versions, bucket, query.get("prefix", ""))
            return self._xml(xml.list_versions(bucket, query, vs, owner))
        if m == "GET" and "uploads" in query:
            from .multipart import Multipart

            ups = await self._run(Multipart(ops).list_uploads, bucket, query.get("prefix", ""))
            return self._xml(xml.list_uploads(bucket, query, ups, owner))
        if m == "GET":
            return self._xml(await self._run(list_bucket, ops, bucket, query))
        raise S3Error("NotImplemented", f"{m} on a bucket is not implemented", bucket)

    @staticmethod
    def _delete_many(ops: Ops, bucket: str, keys: list[tuple[str, str | None]], quiet: bool) -> bytes:
        """DeleteObjects: each key deleted, or its error in the result; an
        entry naming a version is ``NotImplemented`` (as ``DELETE
        ?versionId=``), never a delete of the current version."""
        ops.need_bucket(bucket)
        out = []
        for k, version in keys:
            vid = xml.el("VersionId", version) if version is not None else ""
            try:
                if version is not None:
                    raise S3Error(
                        "NotImplemented", "deleting one version is not implemented: versions are the file's history", k
                    )
                ops.delete_object(bucket, k)
                if not quiet:
                    out.append("<Deleted>" + xml.el("Key", k) + "</Deleted>")
            except (S3Error, StoreTorrentError) as e:
                err = from_storetorrent(e, k)
                out.append(
                    "<Error>"
                    + xml.el("Key", k)
                    + vid
                    + xml.el("Code", err.code)
                    + xml.el("Message", err.message)
                    + "</Error>"
                )
        return xml.doc("DeleteResult", "".join(out))

    async def _object(self, request, ops: Ops, bucket: str, key: str, query: dict, headers) -> Response:
        m = request.method
        unknown = set(query) - _KNOWN_OBJECT_QUERY
        if unknown:
            raise S3Error(
                "NotImplemented",
                f"object subresource {sorted(unknown)[0]!r} is not implemented (ACLs, tagging, versions: docs/s3.md)",
                key,
            )
        if "uploads" in query or "uploadId" in query:
            return await self._multipart(request, ops, bucket, key, query, headers)
        part = None
        if "partNumber" in query:
            if m not in ("GET", "HEAD"):
                raise S3Error("InvalidRequest", f"{m} with partNumber needs an uploadId", key)
            part = parse_part_number(query["partNumber"], bool(headers.get("range")))
        version = query.get("versionId")
        if version is not None and m not in ("GET", "HEAD"):
            raise S3Error(
                "NotImplemented", f"{m} of one version is not implemented: versions are the file's history", key
            )
        if version == "":
            raise S3Error("InvalidArgument", "Invalid version id specified", key)
        if m == "PUT":
            if "x-amz-copy-source" in headers:
                _refuse_unkept(headers, key)
                return await self._copy(request, ops, bucket, key, headers)
            if _payload_length(headers) > STRIPE_THRESHOLD:  # stored stripe by stripe as it arrives
                return await self._put_streamed(request, ops, bucket, key, headers)
            body = await self._raw_body(request, headers)  # read first: the connection stays in step

            def put() -> ObjectStat | None:  # one worker-thread hop: the payload's hashes off the event loop
                data = _checked(headers, body, self.keys)
                _refuse_unkept(headers, key)
                meta = from_headers(headers, key)
                if key.endswith("/") and not data:  # a directory marker: directories are implicit here
                    ops.need_bucket(bucket)
                    return None
                only_new, if_match = _write_conditions(headers, key)
                return ops.put_object(bucket, key, data, only_new, meta, if_match)

            stored = await self._run(put)
            if stored is None:
                return Response(status_code=200, headers={"ETag": EMPTY_MD5})
            h = {"ETag": stored.etag, "x-amz-checksum-crc32c": crc32c_b64(stored.crc32c)}
            if stored.version_id is not None:
                h["x-amz-version-id"] = str(stored.version_id)
            return Response(status_code=200, headers=h)
        if m in ("GET", "HEAD"):
            _refuse_unkept(headers, key)
        if m == "HEAD":
            st = await self._run(ops.head_object, bucket, key, version)
            if not_modified(headers, st):
                return Response(status_code=304, headers={"ETag": st.etag})
            h = object_headers(st) | response_overrides(query)
            h["Content-Length"] = str(st.size)
            if part is not None:
                h["x-amz-mp-parts-count"] = "1"
            if st.crc_of_bytes:
                h["x-amz-checksum-crc32c"] = crc32c_b64(st.crc32c)
            return Response(status_code=200, headers=h)
        if m == "GET":
            rng = (headers.get("range") or [""])[0]

            def decide(st: ObjectStat) -> tuple[int, int] | None | bool:
                if not_modified(headers, st):
                    return False
                if not rng:
                    return None
                try:
                    return parse_range(rng, st.size)
                except S3Error as e:
                    if e.code == "InvalidRange":
                        e.resource = f"bytes */{st.size}"
                    raise

            quick = ops.get_object_quick(bucket, key, decide) if version is None else None  # on the loop
            if quick is None:
                st, got, span = await self._run(ops.get_object, bucket, key, decide, version, True)
            else:
                st, got, span = quick
            if got is None:
                return Response(status_code=304, headers={"ETag": st.etag})
            h = object_headers(st) | response_overrides(query)
            status = 200
            if span is not None:
                h["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{st.size}"
                status = 206
            elif part is not None:  # part 1, the whole object, answered as S3 answers a part
                h["x-amz-mp-parts-count"] = "1"
                if st.size:
                    h["Content-Range"] = f"bytes 0-{st.size - 1}/{st.size}"
                    status = 206
            if status == 200 and st.crc_of_bytes:
                h["x-amz-checksum-crc32c"] = crc32c_b64(st.crc32c)
            return _answer(got, status, h)
        if m == "DELETE":
            await self._run(ops.delete_object, bucket, key)
            return Response(status_code=204)
        raise S3Error("NotImplemented", f"{m} on an object is not implemented (docs/s3.md)", key)

    async def _put_streamed(self, request: Request, ops: Ops, bucket: str, key: str, headers) -> Response:
        """PutObject of a body over ``STRIPE_THRESHOLD``: read from the
        network as its stripes are stored (:class:`.payload.StreamedBody`
        into :meth:`.ops.Ops.put_object_stream`), checked as it passes; a body that
        fails a check (its signature, hash, checksums, length) commits
        nothing. The endpoint holds a few pieces and two stripes of it,
        not the body (docs/s3.md, "Large PUTs"). An error before the body's
        end closes the connection (the rest is not read)."""
        if _payload_length(headers) > MAX_BODY:
            raise S3Error("EntityTooLarge", "your proposed upload exceeds the maximum allowed object size")
        loop = asyncio.get_running_loop()
        stream = request.stream().__aiter__()

        async def receive() -> bytes | None:
            try:
                return await stream.__anext__()
            except StopAsyncIteration:
                return None

        def next_piece() -> bytes | None:  # in the worker thread: the next piece, from the event loop
            while True:
                piece = asyncio.run_coroutine_threadsafe(receive(), loop).result()
                if piece is None or piece:
                    return piece

        def put() -> ObjectStat:
            _refuse_unkept(headers, key)
            meta = from_headers(headers, key)
            only_new, if_match = _write_conditions(headers, key)
            with StreamedBody(next_piece, PayloadCheck(headers, self.keys), MAX_BODY) as src:
                return ops.put_object_stream(bucket, key, src, _payload_length(headers), only_new, meta, if_match)

        try:
            stored = await self._run(put)
        except S3Error as e:
            e.close = True
            raise
        except StoreTorrentError as e:
            err = from_storetorrent(e)
            err.close = True
            raise err from e
        h = {"ETag": stored.etag, "x-amz-checksum-crc32c": crc32c_b64(stored.crc32c)}
        if stored.version_id is not None:
            h["x-amz-version-id"] = str(stored.version_id)
        return Response(status_code=200, headers=h)

    async def _copy(self, request: Request, ops: Ops, bucket: str, key: str, headers) -> Response:
        """CopyObject: the source's bytes stored at ``key`` (read with the
        caller's rights) with the source's metadata
        (``x-amz-metadata-directive: COPY``, the default) or the request's
        (``REPLACE``)."""
        directive = (headers.get("x-amz-metadata-directive") or ["COPY"])[0].strip().upper()
        if directive not in ("COPY", "REPLACE"):
            raise S3Error("InvalidArgument", f"unknown metadata directive {directive!r}: COPY or REPLACE", key)
        meta = from_headers(headers, key) if directive == "REPLACE" else None
        src_bucket, src_key, src_version = _copy_source(headers, key)

        def decide(src: ObjectStat) -> None:
            check_copy_source(headers, src)  # before any byte is read
            return None

        # a striped source streams into the copy (its stripes, two at a time), a record is read whole
        src, data, _ = await self._run(ops.get_object, src_bucket, src_key, decide, src_version, True)
        meta = src.meta if meta is None else meta
        if isinstance(data, ObjectBody):

            def copy(body: ObjectBody = data) -> ObjectStat:
                with BodyReader(body) as reader:
                    if body.length <= STRIPE_THRESHOLD:  # stored as one record: its bytes at once
                        return ops.put_object(bucket, key, reader.read(), False, meta)
                    return ops.put_object_stream(bucket, key, reader, body.length, False, meta)

            work = self._run(copy)
        else:
            assert isinstance(data, bytes)  # decide: the whole object or an error
            work = self._run(ops.put_object, bucket, key, data, False, meta)

        def copied(st: ObjectStat) -> Response:
            inner = xml.el("LastModified", xml.iso_time(st.mtime)) + xml.el("ETag", st.etag)
            return Response(
                xml.doc("CopyObjectResult", inner), media_type="application/xml", headers=_copy_headers(src, st)
            )

        return await answer_long(work, copied, self._late_error(request))

    async def _upload_part_copy(
        self, request: Request, mp, ops: Ops, bucket, key, upload_id, number, headers
    ) -> Response:
        """UploadPartCopy: part ``number`` is the source object's bytes, or
        the ``x-amz-copy-source-range`` of them (read with the caller's
        rights; only the stripes the range touches of a striped object)."""
        src_bucket, src_key, src_version = _copy_source(headers, key)
        rng = (headers.get("x-amz-copy-source-range") or [""])[0].strip()
        await self._run(mp.check, bucket, key, upload_id, number)  # NoSuchUpload before any byte is read

        def decide(st: ObjectStat) -> tuple[int, int] | None:
            check_copy_source(headers, st)
            return parse_copy_range(rng, st.size) if rng else None

        def copy_part() -> tuple[ObjectStat, str]:  # the source read, then stored: one operation
            src, data, _ = ops.get_object(src_bucket, src_key, decide, src_version)
            assert isinstance(data, bytes)  # decide never answers False; not streamed
            return src, mp.upload_part(bucket, key, upload_id, number, data)

        def copied(done: tuple[ObjectStat, str]) -> Response:
            src, etag = done
            inner = xml.el("LastModified", xml.iso_time(time.time())) + xml.el("ETag", etag)
            h = {"x-amz-copy-source-version-id": str(src.version_id)} if src.version_id is not None else {}
            return Response(xml.doc("CopyPartResult", inner), media_type="application/xml", headers=h)

        return await answer_long(self._run(copy_part), copied, self._late_error(request))

    async def _multipart(self, request, ops: Ops, bucket: str, key: str, query: dict, headers) -> Response:
        from .multipart import Multipart

        mp = Multipart(ops)
        m = request.method
        ids = xml.el("Bucket", bucket) + xml.el("Key", key)
        if m == "POST" and "uploads" in query:
            _refuse_unkept(headers, key)
            upload_id = await self._run(mp.create, bucket, key, from_headers(headers, key))
            return self._xml(xml.doc("InitiateMultipartUploadResult", ids + xml.el("UploadId", upload_id)))
        upload_id = query.get("uploadId", "")
        if m == "PUT":
            try:
                number = int(query.get("partNumber", ""))
            except ValueError:
                raise S3Error("InvalidArgument", "partNumber is not a number") from None
            if "x-amz-copy-source" in headers:
                return await self._upload_part_copy(request, mp, ops, bucket, key, upload_id, number, headers)
            body = await self._raw_body(request, headers)

            def upload() -> str:  # one worker-thread hop: the part's hashes off the event loop
                data = _checked(headers, body, self.keys)
                _refuse_unkept(headers, key)
                return mp.upload_part(bucket, key, upload_id, number, data)

            etag = await self._run(upload)
            return Response(status_code=200, headers={"ETag": etag})
        if m == "POST":
            data = await self._body(request, headers)
            only_new, if_match = _write_conditions(headers, key)

            def completed(st: ObjectStat) -> Response:
                inner = xml.el("Location", f"/{bucket}/{key}") + ids + xml.el("ETag", st.etag)
                r = self._xml(xml.doc("CompleteMultipartUploadResult", inner))
                if st.version_id is not None:  # the version made (an answer begun early cannot carry it)
                    r.headers["x-amz-version-id"] = str(st.version_id)
                return r

            work = self._run(mp.complete, bucket, key, upload_id, data, only_new, if_match)
            return await answer_long(work, completed, self._late_error(request))
        if m == "DELETE":
            await self._run(mp.abort, bucket, key, upload_id)
            return Response(status_code=204)
        if m == "GET":
            parts = await self._run(mp.list_parts, bucket, key, upload_id)
            inner = ids + xml.el("UploadId", upload_id) + xml.el("IsTruncated", "false")
            inner += "".join(
                "<Part>"
                + xml.el("PartNumber", n)
                + xml.el("LastModified", xml.iso_time(t))
                + xml.el("ETag", e)
                + xml.el("Size", size)
                + "</Part>"
                for n, size, e, t in parts
            )
            return self._xml(xml.doc("ListPartsResult", inner))
        raise S3Error("NotImplemented", f"{m} on a multipart upload is not implemented", key)


class Asgi:
    """The endpoint's ASGI application: every HTTP request goes straight to
    :meth:`S3App.handle` and its answer is sent; the ``lifespan`` scope runs
    :meth:`S3App._lifespan`. No router or middleware stands between
    (docs/s3.md, "The request path"): one route took every path and
    :meth:`S3App.handle` answers every error itself, so Starlette's
    routing and exception middleware only cost CPU per request.
    ``state.s3`` is the :class:`S3App` (its ``read_stats``, for tests and
    :mod:`.metrics`).

    Thread safety: called on the server's event loop.
    """

    def __init__(self, s3: S3App):
        self.s3 = s3
        self.state = State({"s3": s3})

    async def __call__(self, scope, receive, send) -> None:
        """Serve one ASGI connection scope (``http`` or ``lifespan``)."""
        kind = scope["type"]
        if kind == "http":
            resp = await self.s3.handle(Request(scope, receive))
            await resp(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:  # websocket: nothing of S3; refused as a router without such a route refuses it
            await send({"type": "websocket.close", "code": 1000})

    async def _lifespan(self, receive, send) -> None:
        await receive()  # lifespan.startup
        cm = self.s3._lifespan(self)
        try:
            await cm.__aenter__()
        except Exception as e:
            await send({"type": "lifespan.startup.failed", "message": f"{type(e).__name__}: {e}"})
            raise
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await cm.__aexit__(None, None, None)
        except Exception as e:
            await send({"type": "lifespan.shutdown.failed", "message": f"{type(e).__name__}: {e}"})
            raise
        await send({"type": "lifespan.shutdown.complete"})


_UNKEPT = (  # request headers asking for what the endpoint does not keep: refused, not ignored
    "x-amz-server-side-encryption",  # and -customer-*, -aws-kms-*, -context, -bucket-key-enabled
    "x-amz-tagging",
    "x-amz-object-lock-",
    "x-amz-website-redirect-location",
)


def _as_s3_error(e: BaseException, request: Request) -> S3Error:
    """The S3 error ``e`` is to the client of ``request``: an
    ``S3Error`` as it is, a StoreTorrent error translated
    (:func:`.errors.from_storetorrent`), a client gone mid-body
    ``IncompleteBody``, anything else ``InternalError`` (logged with its
    traceback, which never reaches the client)."""
    if isinstance(e, ClientDisconnect):  # gone before its body's end: nothing was stored, no one to answer
        log.info(
            "S3 request %s %s: the client closed the connection before the body's end",
            request.method,
            request.url.path,
        )
        return S3Error("IncompleteBody", "the client closed the connection before the body's end", close=True)
    if isinstance(e, S3Error):
        return e
    if isinstance(e, StoreTorrentError):
        return from_storetorrent(e)
    log.error("S3 request %s %s failed", request.method, request.url.path, exc_info=e)
    return S3Error("InternalError", f"{type(e).__name__}: {e}")


def _answer(got: bytes | ObjectBody, status: int, headers: dict[str, str]) -> Response:
    """A GET's answer: bytes as they are, a striped object's body streamed
    as its stripes arrive (:mod:`.objstream`), with its length."""
    if isinstance(got, ObjectBody):
        headers["Content-Length"] = str(got.length)
        return StreamingResponse(got.aiter(), status_code=status, headers=headers)
    return Response(got, status_code=status, headers=headers)


def _checked(headers: dict[str, list[str]], body: bytes, keys: Keys) -> bytes:
    """The payload of ``body``, checked as the client signed and summed it
    (:func:`.payload.check_payload`). Called in a PUT's worker thread:
    SHA-256 and CRC-32 of a 1 MiB body are about 1 ms of CPU, which the
    event loop would otherwise spend while every other connection waits
    (hashlib and zlib release the GIL).

    Raises
    ------
    S3Error
        ``XAmzContentSHA256Mismatch``, ``XAmzContentChecksumMismatch``,
        ``BadDigest``, a broken ``aws-chunked`` body's.
    """
    return check_payload(headers, body, keys)


def _payload_length(headers: dict[str, list[str]]) -> int:
    """The bytes of a request's payload as the client declared them:
    ``x-amz-decoded-content-length`` of an ``aws-chunked`` body, else
    ``Content-Length``; -1 if it declared none."""
    for name in ("x-amz-decoded-content-length", "content-length"):
        v = (headers.get(name) or [""])[0].strip()
        if v.isdigit():
            return int(v)
    return -1


def _refuse_unkept(headers: dict[str, list[str]], key: str) -> None:
    """Refuse a request that asks for server-side encryption (SSE-S3,
    SSE-KMS, SSE-C keys), tags, an object lock or a website redirect:
    the endpoint keeps none of them, and storing the object without what
    was asked would be a silent wrong answer (docs/s3.md). StoreTorrent's
    own encryption is a file's ``aes-256-gcm`` filter (docs/filters.md).

    Raises
    ------
    S3Error
        ``NotImplemented``.
    """
    for h in headers:
        if h.startswith(_UNKEPT):
            raise S3Error(
                "NotImplemented",
                f"{h} is not implemented: the endpoint keeps no server-side encryption, tags, object locks or "
                "redirects (docs/s3.md); StoreTorrent encrypts with a file's aes-256-gcm filter",
                key,
            )


def _write_conditions(headers: dict[str, list[str]], key: str) -> tuple[bool, str | None]:
    """``(only_new, if_match)`` of a PUT's or CompleteMultipartUpload's
    conditional headers: ``If-None-Match: *`` and ``If-Match: ETAG`` (or
    ``*``), as S3's conditional writes take them.

    Raises
    ------
    S3Error
        ``NotImplemented`` (an ``If-None-Match`` other than ``*``),
        ``InvalidRequest`` (both headers).
    """
    if_none = (headers.get("if-none-match") or [""])[0].strip()
    if_match = (headers.get("if-match") or [""])[0].strip() or None
    if if_none and if_none != "*":
        raise S3Error("NotImplemented", "a write's If-None-Match takes only '*'", key)
    if if_none and if_match:
        raise S3Error("InvalidRequest", "a write takes If-None-Match or If-Match, not both", key)
    return if_none == "*", if_match


def _copy_source(headers: dict[str, list[str]], key: str) -> tuple[str, str, str | None]:
    """``(bucket, key, version id or None)`` of a copy's
    ``x-amz-copy-source`` (``/B/K`` or ``B/K``, URL-encoded, optionally
    ``?versionId=V``: a version id as GET takes, a generation or a
    snapshot's name).

    Raises
    ------
    S3Error
        ``InvalidArgument`` (not ``B/K``, an empty or unknown query).
    """
    source, _, query = headers["x-amz-copy-source"][0].partition("?")
    version = None
    if query:
        q = dict(parse_qsl(query, keep_blank_values=True))
        version = q.pop("versionId", None)
        if q or version == "":
            raise S3Error("InvalidArgument", "x-amz-copy-source takes only ?versionId=V after BUCKET/KEY", key)
    src_bucket, _, src_key = unquote(source).lstrip("/").partition("/")
    if not src_key:
        raise S3Error("InvalidArgument", "x-amz-copy-source must be BUCKET/KEY", key)
    return src_bucket, src_key, version


def _copy_headers(src: ObjectStat, st: ObjectStat) -> dict[str, str]:
    """A copy's answer headers: the version copied and the one made."""
    h = {}
    if src.version_id is not None:
        h["x-amz-copy-source-version-id"] = str(src.version_id)
    if st.version_id is not None:
        h["x-amz-version-id"] = str(st.version_id)
    return h
