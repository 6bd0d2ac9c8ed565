"""ListObjectsV2 and ListObjects: the request's parameters read, the
continuation token made and read (base64 of the last item), and the
ListBucketResult written; the listing itself is :meth:`.ops.Ops.list_objects`.

Thread safety: pure functions over the caller's :class:`.ops.Ops`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from urllib.parse import quote

from . import xml
from .errors import S3Error
from .ops import Ops, etag_of_text


def list_bucket(ops: Ops, bucket: str, q: dict) -> bytes:
    """The ListBucketResult of ListObjectsV2 (``list-type=2``) or
    ListObjects, for query parameters ``q``.

    Raises
    ------
    S3Error
        ``InvalidArgument`` (max-keys, a token this endpoint did not give),
        ``NoSuchBucket``.
    """
    v2 = q.get("list-type") == "2"
    prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
    try:
        max_keys = max(0, min(1000, int(q.get("max-keys", "1000"))))
    except ValueError:
        raise S3Error("InvalidArgument", "max-keys is not an integer") from None
    token = q.get("continuation-token", "")
    if v2 and token:
        try:
            after = base64.urlsafe_b64decode(token.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            raise S3Error("InvalidArgument", "the continuation token is not one this endpoint gave") from None
    else:
        after = q.get("start-after", "") if v2 else q.get("marker", "")
    url = q.get("encoding-type") == "url"

    def enc(s: str) -> str:
        return quote(s, safe="/") if url else s

    contents, prefixes, truncated, last = ops.list_objects(
        bucket, prefix, delim, max_keys, after, token=bool(token) if v2 else bool(delim) and after.endswith(delim)
    )  # v1 pages on NextMarker, the last item, as v2 on its token
    parts = [xml.el("Name", bucket), xml.el("Prefix", enc(prefix)), xml.el("MaxKeys", max_keys)]
    if delim:
        parts.append(xml.el("Delimiter", enc(delim)))
    if url:
        parts.append(xml.el("EncodingType", "url"))
    parts.append(xml.el("IsTruncated", "true" if truncated else "false"))
    if v2:
        parts.append(xml.el("KeyCount", len(contents) + len(prefixes)))
        if token:
            parts.append(xml.el("ContinuationToken", token))
        if q.get("start-after"):
            parts.append(xml.el("StartAfter", enc(q["start-after"])))
        if truncated:
            parts.append(xml.el("NextContinuationToken", base64.urlsafe_b64encode(last.encode()).decode()))
    else:
        parts.append(xml.el("Marker", enc(after)))
        if truncated and delim:
            parts.append(xml.el("NextMarker", enc(last)))
    parts.append(_contents(contents, enc if url else None))
    for p in prefixes:
        parts.append("<CommonPrefixes>" + xml.el("Prefix", enc(p)) + "</CommonPrefixes>")
    return xml.doc("ListBucketResult", "".join(parts))


def _contents(contents: list[tuple], enc: Callable[[str], str] | None) -> str:
    """The ``<Contents>`` entries of a page's ``(key, size, crc32c,
    mtime)``, joined (``enc``: the keys' URL encoding, or None): one
    f-string an entry, only keys that need it escaped, and what depends
    on the commit time alone (LastModified, the time's part of the ETag's
    text) made once a run of entries with the same time (a group commit's
    records share it; a float's repr and the time's formatting cost more
    than the MD5)."""
    esc = xml.escape
    out = []
    last_t: float | None = None
    modified = tail = ""
    for key, size, crc, t in contents:
        if enc is not None:
            key = enc(key)
        if "&" in key or "<" in key or ">" in key:
            key = esc(key)
        if t != last_t:
            last_t, modified, tail = t, xml.iso_time(t), f":{t!r}"
        out.append(
            f"<Contents><Key>{key}</Key><LastModified>{modified}</LastModified>"
            f"<ETag>{etag_of_text(f'{size}:{crc}{tail}')}</ETag><Size>{size}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
        )
    return "".join(out)
