"""ListObjectsV2 and ListObjects: the request's parameters read, the
continuation token made and read (base64 of the last item), and the
ListBucketResult written; the listing itself is :meth:`.ops.Ops.list_objects`.

Thread safety: pure functions over the caller's :class:`.ops.Ops`.
"""

from __future__ import annotations

import base64
from urllib.parse import quote

from . import xml
from .errors import S3Error
from .ops import Ops, etag_of


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
    sec, head = -1, ""
    esc = xml.escape
    for key, size, crc, t in contents:  # a page's 1,000 entries: one f-string each, what needs escaping escaped
        k = enc(key) if url else key
        if "&" in k or "<" in k or ">" in k:
            k = esc(k)
        if int(t) != sec:  # xml.iso_time's date and time, made once a second (a group commit's records share it)
            sec = int(t)
            head = xml.iso_time(sec)[:-5]  # without ".000Z"
        parts.append(
            f"<Contents><Key>{k}</Key><LastModified>{head}.{int(t * 1000) % 1000:03d}Z</LastModified>"
            f"<ETag>{etag_of(size, crc, t)}</ETag><Size>{size}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
        )
    for p in prefixes:
        parts.append("<CommonPrefixes>" + xml.el("Prefix", enc(p)) + "</CommonPrefixes>")
    return xml.doc("ListBucketResult", "".join(parts))
