"""S3's XML documents: the error document and the operations' results
(namespace ``http://s3.amazonaws.com/doc/2006-03-01/``), and the parsing of
DeleteObjects' request body.

Thread safety: pure functions.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

__all__ = ["escape"]  # also the app's, for text inside an element

from .errors import S3Error

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def iso_time(t: float) -> str:
    """``2026-11-29T01:02:03.000Z`` of unix seconds ``t``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def http_time(t: float) -> str:
    """``Sun, 29 Nov 2026 01:02:03 GMT`` of unix seconds ``t``."""
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(t))


def el(tag: str, value) -> str:
    """``<tag>value</tag>``, the value escaped."""
    return f"<{tag}>{escape(str(value))}</{tag}>"


def error_doc(e: S3Error, request_id: str) -> bytes:
    """S3's ``<Error>`` document of ``e``."""
    body = el("Code", e.code) + el("Message", e.message)
    if e.resource:
        body += el("Resource", e.resource)
    return (HEAD + "<Error>" + body + el("RequestId", request_id) + "</Error>").encode()


def doc(root: str, inner: str) -> bytes:
    """A result document ``<root xmlns=...>inner</root>``."""
    return (HEAD + f'<{root} xmlns="{NS}">' + inner + f"</{root}>").encode()


def list_buckets(buckets: list[tuple[str, float]], owner: str) -> bytes:
    """ListAllMyBucketsResult of ``(name, created unix s)``."""
    items = "".join("<Bucket>" + el("Name", n) + el("CreationDate", iso_time(t)) + "</Bucket>" for n, t in buckets)
    who = "<Owner>" + el("ID", owner) + el("DisplayName", owner) + "</Owner>"
    return doc("ListAllMyBucketsResult", who + "<Buckets>" + items + "</Buckets>")


def parse_delete(body: bytes) -> tuple[list[tuple[str, str | None]], bool]:
    """``([(key, version id or None), ...], quiet)`` of a DeleteObjects request body.

    Raises
    ------
    S3Error
        ``MalformedXML``.
    """
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise S3Error("MalformedXML", "the XML you provided was not well-formed") from None

    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    keys: list[tuple[str, str | None]] = []
    quiet = False
    for child in root:
        if local(child.tag) == "Quiet":
            quiet = (child.text or "").strip().lower() == "true"
        elif local(child.tag) == "Object":
            got = {local(sub.tag): sub.text or "" for sub in child}
            keys.append((got.get("Key", ""), got.get("VersionId")))
    if not keys or len(keys) > 1000:
        raise S3Error("MalformedXML", "DeleteObjects takes 1 to 1000 keys")
    return keys, quiet


def parse_versioning(body: bytes) -> tuple[str, str]:
    """``(Status, MfaDelete)`` of a PutBucketVersioning body (``""`` where absent).

    Raises
    ------
    S3Error
        ``MalformedXML``.
    """
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise S3Error("MalformedXML", "the XML you provided was not well-formed") from None
    got = {child.tag.rsplit("}", 1)[-1]: (child.text or "").strip() for child in root}
    return got.get("Status", ""), got.get("MfaDelete", "")


def list_uploads(bucket: str, query: dict[str, str], uploads: list[tuple[str, str, float]], owner: str) -> bytes:
    """ListMultipartUploadsResult of the bucket's ``(key, upload id,
    initiated unix s)`` (sorted, already of ``prefix``), one page by the
    request's ``key-marker``, ``upload-id-marker`` (after that id of the
    marker key; without it, after every upload of that key),
    ``max-uploads`` (at most 1000) and ``delimiter`` (keys rolled up into
    ``CommonPrefixes``, which count towards the page).

    Raises
    ------
    S3Error
        ``InvalidArgument``: a ``max-uploads`` that is not a number.
    """
    prefix, delim = query.get("prefix", ""), query.get("delimiter", "")
    key_marker, id_marker = query.get("key-marker", ""), query.get("upload-id-marker", "")
    try:
        limit = min(1000, int(query.get("max-uploads", "1000")))
    except ValueError:
        raise S3Error("InvalidArgument", "max-uploads is not a number") from None
    if key_marker:
        uploads = [u for u in uploads if (u[0], u[1]) > (key_marker, id_marker) if id_marker or u[0] > key_marker]
    items: list[tuple[str, str, float] | str] = []  # uploads, and common prefixes (str)
    truncated = False
    for key, upload_id, t in uploads:
        rest = key[len(prefix) :]
        if delim and delim in rest:
            cp = prefix + rest[: rest.index(delim) + len(delim)]
            if items and items[-1] == cp:
                continue
            if key_marker.startswith(cp):
                continue  # rolled up on an earlier page
            entry: tuple[str, str, float] | str = cp
        else:
            entry = (key, upload_id, t)
        if len(items) == limit:
            truncated = True
            break
        items.append(entry)
    who = "<Owner>" + el("ID", owner) + el("DisplayName", owner) + "</Owner>"
    inner = el("Bucket", bucket) + el("KeyMarker", key_marker) + el("UploadIdMarker", id_marker)
    if truncated and items:
        last = items[-1]
        inner += el("NextKeyMarker", last if isinstance(last, str) else last[0])
        inner += el("NextUploadIdMarker", "" if isinstance(last, str) else last[1])
    inner += el("Prefix", prefix) + (el("Delimiter", delim) if delim else "")
    inner += el("MaxUploads", limit) + el("IsTruncated", "true" if truncated else "false")
    for it in items:
        if not isinstance(it, str):
            inner += (
                "<Upload>"
                + el("Key", it[0])
                + el("UploadId", it[1])
                + who.replace("Owner>", "Initiator>")
                + who
                + el("StorageClass", "STANDARD")
                + el("Initiated", iso_time(it[2]))
                + "</Upload>"
            )
    inner += "".join("<CommonPrefixes>" + el("Prefix", it) + "</CommonPrefixes>" for it in items if isinstance(it, str))
    return doc("ListMultipartUploadsResult", inner)


def list_versions(bucket: str, query: dict[str, str], versions: list, owner: str) -> bytes:
    """ListVersionsResult of the bucket's versions (:class:`.versions.Version`,
    in key then newest-first order, already of ``prefix``), one page by the
    request's ``key-marker``, ``version-id-marker`` (after that version of
    the marker key; without it, after every version of that key),
    ``max-keys`` (at most 1000) and ``delimiter``.

    Raises
    ------
    S3Error
        ``InvalidArgument``: a ``max-keys`` that is not a number.
    """
    from .ops import ObjectStat

    prefix, delim = query.get("prefix", ""), query.get("delimiter", "")
    key_marker, vid_marker = query.get("key-marker", ""), query.get("version-id-marker", "")
    try:
        limit = max(0, min(1000, int(query.get("max-keys", "1000"))))
    except ValueError:
        raise S3Error("InvalidArgument", "max-keys is not a number") from None
    if key_marker:
        if vid_marker:
            try:
                after = int(vid_marker)
            except ValueError:
                raise S3Error("InvalidArgument", "version-id-marker is not a version id of this endpoint") from None
            versions = [v for v in versions if v.key > key_marker or (v.key == key_marker and v.version_id < after)]
        else:
            versions = [v for v in versions if v.key > key_marker]
    items: list = []  # versions, and common prefixes (str)
    truncated = False
    for v in versions:
        rest = v.key[len(prefix) :]
        entry = v
        if delim and delim in rest:
            entry = prefix + rest[: rest.index(delim) + len(delim)]
            if (items and items[-1] == entry) or key_marker.startswith(entry):
                continue
        if len(items) == limit:
            truncated = True
            break
        items.append(entry)
    who = "<Owner>" + el("ID", owner) + el("DisplayName", owner) + "</Owner>"
    inner = el("Name", bucket) + el("Prefix", prefix) + el("KeyMarker", key_marker)
    inner += el("VersionIdMarker", vid_marker)
    if truncated and items:
        last = items[-1]
        inner += el("NextKeyMarker", last if isinstance(last, str) else last.key)
        if not isinstance(last, str):
            inner += el("NextVersionIdMarker", last.version_id)
    inner += el("MaxKeys", limit) + (el("Delimiter", delim) if delim else "")
    inner += el("IsTruncated", "true" if truncated else "false")
    for v in items:
        if isinstance(v, str):
            continue
        common = (
            el("Key", v.key)
            + el("VersionId", v.version_id)
            + el("IsLatest", "true" if v.latest else "false")
            + el("LastModified", iso_time(v.mtime))
        )
        if v.deleted:
            inner += "<DeleteMarker>" + common + who + "</DeleteMarker>"
        else:
            etag = ObjectStat(v.size, v.crc32c, v.mtime).etag
            inner += (
                "<Version>"
                + common
                + el("ETag", etag)
                + el("Size", v.size)
                + el("StorageClass", "STANDARD")
                + who
                + "</Version>"
            )
    inner += "".join("<CommonPrefixes>" + el("Prefix", it) + "</CommonPrefixes>" for it in items if isinstance(it, str))
    return doc("ListVersionsResult", inner)
