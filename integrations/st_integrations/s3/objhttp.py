"""The HTTP side of objects: ``Range`` and ``partNumber`` parsed, the
conditional headers (``If-Match``, ``If-None-Match``,
``If-Modified-Since``, ``If-Unmodified-Since``, and a copy's
``x-amz-copy-source-if-*``) judged, and the headers GET and HEAD answer with.

Thread safety: pure functions.
"""

from __future__ import annotations

from . import xml
from .errors import S3Error
from .ops import ObjectStat
from .usermeta import to_headers


def parse_range(value: str, size: int) -> tuple[int, int]:
    """``(start, end)`` (end exclusive) of an HTTP ``Range: bytes=...``
    header over an object of ``size`` bytes.

    Raises
    ------
    S3Error
        ``InvalidRange``: not satisfiable; ``NotImplemented``: several ranges.
    """
    unit, _, spec = value.partition("=")
    if unit.strip() != "bytes" or not spec:
        raise S3Error("InvalidRange", f"the range {value!r} is not bytes=FIRST-LAST")
    if "," in spec:
        raise S3Error("NotImplemented", "multiple ranges in one GET are not supported")
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0 or size == 0:
                raise S3Error("InvalidRange", "the requested range is not satisfiable")
            return max(0, size - n), size
        a = int(first)
        b = int(last) + 1 if last else size
    except ValueError:
        raise S3Error("InvalidRange", f"the range {value!r} is not bytes=FIRST-LAST") from None
    if a >= size or b <= a:
        raise S3Error("InvalidRange", "the requested range is not satisfiable")
    return a, min(b, size)


def parse_copy_range(value: str, size: int) -> tuple[int, int]:
    """``(start, end)`` (end exclusive) of UploadPartCopy's
    ``x-amz-copy-source-range: bytes=FIRST-LAST`` over a source of ``size``
    bytes: both ends given, within the object (S3's rule).

    Raises
    ------
    S3Error
        ``InvalidArgument``: not of that form, or outside the object.
    """
    unit, _, spec = value.partition("=")
    first, _, last = spec.strip().partition("-")
    try:
        if unit.strip() != "bytes":
            raise ValueError
        a, b = int(first), int(last) + 1
    except ValueError:
        raise S3Error(
            "InvalidArgument", f"x-amz-copy-source-range {value!r} is not bytes=FIRST-LAST (zero-based, both given)"
        ) from None
    if not 0 <= a < b <= size:
        raise S3Error("InvalidArgument", f"range {value!r} is not valid for a source object of size {size}")
    return a, b


def object_headers(st: ObjectStat) -> dict[str, str]:
    """The headers of a GET or HEAD of ``st`` (ETag, Last-Modified, its
    metadata's Content-Type and ``x-amz-meta-*``: :func:`.usermeta.to_headers`, ...)."""
    h = {
        "ETag": st.etag,
        "Last-Modified": xml.http_time(st.mtime),
        "Accept-Ranges": "bytes",
        **to_headers(st.meta),
    }
    if st.version_id is not None:
        h["x-amz-version-id"] = str(st.version_id)
    return h


def _http_date(value: str) -> float | None:
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None  # S3 ignores a date it cannot parse


def not_modified(headers: dict[str, list[str]], st: ObjectStat) -> bool:
    """Whether a GET or HEAD of ``st`` answers 304, by its conditions in
    S3's (RFC 7232's) order: If-Match, If-Unmodified-Since (412), then
    If-None-Match, If-Modified-Since (304).

    Raises
    ------
    S3Error
        ``PreconditionFailed``.
    """
    failed = S3Error("PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
    want = (headers.get("if-match") or [""])[0].strip()
    if want and want not in (st.etag, "*"):
        raise failed
    since = _http_date((headers.get("if-unmodified-since") or [""])[0])
    if not want and since is not None and int(st.mtime) > since:
        raise failed
    nomatch = (headers.get("if-none-match") or [""])[0].strip()
    if nomatch and nomatch in (st.etag, "*"):
        return True
    since = _http_date((headers.get("if-modified-since") or [""])[0])
    if not nomatch and since is not None and int(st.mtime) <= since:
        return True
    return False


def check_copy_source(headers: dict[str, list[str]], st: ObjectStat) -> None:
    """Judge a copy's conditions on its source ``st``
    (``x-amz-copy-source-if-match``, ``-if-none-match``,
    ``-if-modified-since``, ``-if-unmodified-since``) in the order of
    :func:`not_modified`; any that fails is ``PreconditionFailed`` (a copy
    has no 304), as S3 answers.

    Raises
    ------
    S3Error
        ``PreconditionFailed``.
    """
    prefix = "x-amz-copy-source-"
    conds = {k[len(prefix) :]: v for k, v in headers.items() if k.startswith(prefix + "if-")}
    if conds and not_modified(conds, st):
        raise S3Error("PreconditionFailed", "At least one of the pre-conditions you specified did not hold")


MAX_PART_NUMBER = 10_000  # S3's range of part numbers


def parse_part_number(value: str, has_range: bool) -> int:
    """The part of a GET or HEAD ``?partNumber=N``. Every object here is
    one part (its ETag says ``-1``: docs/s3.md, "ETags"), so only part 1,
    the whole object, exists.

    Raises
    ------
    S3Error
        ``InvalidArgument`` (not 1 to 10000), ``InvalidRequest`` (with a
        ``Range`` too), ``InvalidPartNumber`` (416: a part after the first).
    """
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_PART_NUMBER:
        raise S3Error("InvalidArgument", f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive")
    if has_range:
        raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber query parameter")
    if n != 1:
        raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable")
    return n


RESPONSE_OVERRIDES = {  # GET's and HEAD's query parameters that set an answer's header (S3's)
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}


def response_overrides(query: dict[str, str]) -> dict[str, str]:
    """The headers a GET's or HEAD's ``response-*`` query parameters set
    (a presigned download naming its file: ``response-content-disposition``),
    in place of the object's own."""
    return {RESPONSE_OVERRIDES[k]: v for k, v in query.items() if k in RESPONSE_OVERRIDES}
