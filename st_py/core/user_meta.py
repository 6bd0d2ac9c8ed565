"""A record version's user metadata (docs/s3.md, "User metadata and
Content-Type"): the one owner of its rules and its encoding.

A version may carry a small map of names to text, given with its PUT
(``StFile.put(..., meta=...)``), sent with its commit (``RecordCommit.meta``,
``ObjectCommit.meta``) and kept by the tracker in the infofile's
``user_meta`` table beside the version (docs/infofile.md), so a read of an
older version or of a snapshot sees the metadata that version had.

- Names are lower-case, non-empty, of printable ASCII without spaces or
  ``:`` (they travel as HTTP header names); values are text.
- The standard names (:data:`STANDARD`: ``content-type``,
  ``content-encoding``, ...) are the object's content headers; every other
  name is a user pair (S3's ``x-amz-meta-NAME``).
- Limits: the user pairs' names and values at most :data:`USER_LIMIT`
  (2048) UTF-8 bytes, as S3 counts its user-defined metadata; the whole
  encoded map at most :data:`ENCODED_LIMIT` (8192) bytes.
- Encoding: JSON of the map with sorted keys, compact, UTF-8 (deterministic:
  the same map is the same bytes, as the metadata log needs); the empty map
  is ``b""`` (no metadata).

Thread safety: pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from st_py.errors import BadMetadataError, MetadataTooLargeError

STANDARD = frozenset({"content-type", "content-encoding", "content-disposition", "cache-control", "content-language"})
"""The names that are an object's content headers, not user pairs."""

USER_LIMIT = 2048
"""Most UTF-8 bytes of the user pairs' names and values (S3's 2 KB of user metadata)."""

ENCODED_LIMIT = 8192
"""Most bytes of a whole encoded map (S3's 8 KB of request headers)."""


def _check_name(record: str, key: object) -> None:
    if not isinstance(key, str) or not key:
        raise BadMetadataError(record, f"name {key!r} is not a non-empty str")
    if key != key.lower() or any(not (33 <= ord(ch) < 127) or ch == ":" for ch in key):
        raise BadMetadataError(record, f"name {key!r} is not lower-case printable ASCII without spaces or ':'")


def user_bytes(meta: Mapping[str, str]) -> int:
    """The UTF-8 bytes of the user pairs' names and values (S3's count)."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in meta.items() if k not in STANDARD)


def check(record: str, meta: Mapping[str, str]) -> None:
    """Check ``meta`` of record ``record`` against the rules above.

    Raises
    ------
    BadMetadataError
        Not a map of valid names to str.
    MetadataTooLargeError
        Over :data:`USER_LIMIT` or :data:`ENCODED_LIMIT`.
    """
    if not isinstance(meta, Mapping):
        raise BadMetadataError(record, f"a {type(meta).__name__}, not a mapping")
    for k, v in meta.items():
        _check_name(record, k)
        if not isinstance(v, str):
            raise BadMetadataError(record, f"the value of {k!r} is a {type(v).__name__}, not a str")
    n = user_bytes(meta)
    if n > USER_LIMIT:
        raise MetadataTooLargeError(record, n, USER_LIMIT)


def encode(record: str, meta: Mapping[str, str] | None) -> bytes:
    """The bytes a commit carries for ``meta`` of record ``record`` (``b""``:
    none), after :func:`check`.

    Raises
    ------
    BadMetadataError, MetadataTooLargeError
    """
    if not meta:
        return b""
    check(record, meta)
    out = json.dumps(dict(meta), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    if len(out) > ENCODED_LIMIT:
        raise MetadataTooLargeError(record, len(out), ENCODED_LIMIT, "encoded")
    return out


def decode(record: str, data: bytes | None) -> dict[str, str]:
    """The map :func:`encode` made (``{}`` for ``b""`` or None), checked
    (the tracker refuses a commit whose metadata does not decode).

    Raises
    ------
    BadMetadataError
        Not an encoding of a valid map.
    MetadataTooLargeError
    """
    if not data:
        return {}
    if len(data) > ENCODED_LIMIT:
        raise MetadataTooLargeError(record, len(data), ENCODED_LIMIT, "encoded")
    try:
        meta = json.loads(bytes(data).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise BadMetadataError(record, f"not a JSON map: {e}") from None
    check(record, meta)
    return meta
