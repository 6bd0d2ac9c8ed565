"""An object's metadata over HTTP (docs/s3.md, "User metadata and
Content-Type"): the headers of a PUT, CreateMultipartUpload or CopyObject
(``REPLACE``) turned into the version's user metadata map of
:mod:`st_py.core.user_meta` (its rules and limits), and that map turned
back into the headers of GET and HEAD.

- ``Content-Type``, ``Content-Encoding``, ``Content-Disposition``,
  ``Cache-Control``, ``Content-Language``: kept under their lower-case
  names (:data:`st_py.core.user_meta.STANDARD`); ``aws-chunked`` is the
  transfer's, not the object's, and is left out of ``Content-Encoding``
  (as S3 does).
- ``x-amz-meta-NAME``: the user pair ``NAME`` (lower case, as S3 keeps
  it); at most 2 KB of names and values, counted as S3 counts
  (``MetadataTooLarge`` over it). A ``NAME`` that is one of the standard
  names above is refused (``InvalidArgument``): in the map it would be that
  header.
- Without a stored ``content-type`` GET and HEAD answer
  ``binary/octet-stream`` (S3's default).

Thread safety: pure functions.
"""

from __future__ import annotations

from st_py.core import user_meta
from st_py.errors import BadMetadataError, MetadataTooLargeError

from .errors import S3Error

USER_PREFIX = "x-amz-meta-"
DEFAULT_CONTENT_TYPE = "binary/octet-stream"
_HEADER = {
    "content-type": "Content-Type",
    "content-encoding": "Content-Encoding",
    "content-disposition": "Content-Disposition",
    "cache-control": "Cache-Control",
    "content-language": "Content-Language",
}  # the standard names (user_meta.STANDARD) as GET and HEAD spell them


def from_headers(headers: dict[str, list[str]], key: str) -> dict[str, str]:
    """The metadata map of a request's ``headers`` (lower-case names, as
    the app collects them) for object ``key``.

    Raises
    ------
    S3Error
        ``MetadataTooLarge`` (over S3's 2 KB of user metadata),
        ``InvalidArgument`` (a user name that is a standard header's, or
        one the rules refuse).
    """
    meta: dict[str, str] = {}
    for name in user_meta.STANDARD:
        if name in headers:
            meta[name] = headers[name][0]
    if "content-encoding" in meta:  # aws-chunked: how this request's body was sent, not the object's
        kept = [t.strip() for t in meta["content-encoding"].split(",") if t.strip().lower() != "aws-chunked"]
        if kept:
            meta["content-encoding"] = ", ".join(kept)
        else:
            del meta["content-encoding"]
    for h, values in headers.items():
        if h.startswith(USER_PREFIX):
            name = h[len(USER_PREFIX) :]
            if name in user_meta.STANDARD:
                raise S3Error(
                    "InvalidArgument",
                    f"user metadata {h!r} is not supported: its name is the {_HEADER[name]} header's here (docs/s3.md)",
                    key,
                )
            meta[name] = ",".join(values)
    try:
        user_meta.check(key, meta)
    except MetadataTooLargeError as e:
        raise S3Error(
            "MetadataTooLarge",
            f"Your metadata headers exceed the maximum allowed metadata size ({e.size} bytes of {e.limit})",
            key,
        ) from None
    except BadMetadataError as e:
        raise S3Error("InvalidArgument", str(e), key) from None
    return meta


def to_headers(meta: dict[str, str]) -> dict[str, str]:
    """The headers of a GET or HEAD of an object whose metadata is
    ``meta``: its standard headers (``Content-Type`` at least) and its user
    pairs as ``x-amz-meta-NAME``."""
    out = {"Content-Type": meta.get("content-type") or DEFAULT_CONTENT_TYPE}
    for name, value in sorted(meta.items()):
        if name in _HEADER:
            out[_HEADER[name]] = value
        else:
            out[USER_PREFIX + name] = value
    return out
