"""S3's buckets and keys onto StoreTorrent files and records (docs/s3.md,
"The mapping"), over the one resolution of namespace paths that the fsspec
filesystem, the readers and the CLI use too
(:mod:`st_py.client.namespace_paths`: ``lookup``, the longest prefix of a
path that is a file; ``new_file``, where a new path goes).

**A bucket** ``B`` is the top-level namespace directory ``/B``. **A key**
``K`` names the path ``/B/K``, resolved as any path. A key without ``/``
lies at the bucket's top level: its record is the key itself in the
bucket's own file ``/B/.s3`` (made by CreateBucket), so
``storetorrent://HOST/B/.s3/K`` is the same object. Files of the bucket
whose names start with ``.s3`` are the endpoint's (``.s3``, and
``.s3-upload-<id>`` for multipart uploads), so keys whose first part starts
with ``.s3`` and goes on below it are refused.

Thread safety: the functions are; :class:`KeyMap` holds no state but its client, and is as thread-safe as
:class:`st_py.client.client.Client`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from st_py.client.namespace_paths import lookup, new_file
from st_py.errors import BadNameError, StFileNotFoundError, StoreTorrentError

TOP_FILE = ".s3"  # the bucket's own StoreTorrent file: its marker, and the records of its top-level keys
UPLOAD_PREFIX = ".s3-upload-"  # /B/.s3-upload-<id>: one multipart upload's parts, until completed or aborted
MAX_KEY_BYTES = 1024  # S3's limit on a key's UTF-8 length
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class BadKeyError(StoreTorrentError, ValueError):
    """A bucket or key that names no object: empty or ``.``/``..``
    components, a leading or trailing ``/``, the reserved first component
    ``.s3``, over 1024 bytes, or a bucket name S3 does not allow.

    Attributes
    ----------
    name : str
        The bucket or key refused.
    reason : str
        Why, in words.
    too_long : bool
        Refused for its length alone.
    """

    def __init__(self, name: str, reason: str, too_long: bool = False):
        super().__init__(f"{name[:100]!r}: {reason}")
        self.name, self.reason, self.too_long = name, reason, too_long


@dataclass(frozen=True)
class Target:
    """Where a key's object lives: record ``record`` of StoreTorrent file
    ``file``; ``exists`` False when no file holds it yet (a PUT creates
    ``file``). For a top-level key ``exists`` is True without asking the
    tracker: ``/B/.s3`` is made with the bucket (a directory made
    otherwise lacks it until its first top-level PUT)."""

    file: str
    record: str
    exists: bool


def bucket_dir(bucket: str) -> str:
    """``/B``: the namespace directory of bucket ``B``.

    Raises
    ------
    BadKeyError
        Not an S3 bucket name (3 to 63 of ``a-z 0-9 . -``, starting and
        ending with a letter or digit).
    """
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise BadKeyError(bucket, "bucket names are 3 to 63 characters of a-z, 0-9, '.' and '-'")
    return "/" + bucket


def is_upload_file(path: str) -> bool:
    """``path`` is a multipart upload's StoreTorrent file (``/B/.s3-upload-<id>``):
    the endpoint's state while the upload runs (its ``key`` record and its
    parts), not data. The listings of the analysis ways in (fsspec's
    ``ls``/``find``/``glob``/``walk``, the Ray, Dask and DuckDB readers'
    paths) leave it out, as S3's listings do; a path naming it still reads
    it, and ``storetorrent ls`` shows it (its bytes count in quotas).
    docs/s3.md, "Multipart uploads"."""
    parent, _, leaf = path.rstrip("/").rpartition("/")
    return leaf.startswith(UPLOAD_PREFIX) and parent.count("/") == 1 and len(parent) > 1


def check_key(key: str) -> None:
    """Refuse a key that names no record (see :class:`BadKeyError`).

    Raises
    ------
    BadKeyError
    """
    if not key:
        raise BadKeyError(key, "the key is empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise BadKeyError(key, f"keys are at most {MAX_KEY_BYTES} bytes", too_long=True)
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise BadKeyError(key, "a key's '/'-separated parts may not be empty, '.' or '..'")
    if parts[0].startswith(TOP_FILE) and len(parts) > 1:
        raise BadKeyError(
            key, f"keys below {parts[0]}/ are reserved (names starting with {TOP_FILE} are the endpoint's files)"
        )
    if "\0" in key:
        raise BadKeyError(key, "keys may not hold NUL")


def key_path(bucket: str, key: str) -> str:
    """``/B/K``: the namespace path key ``K`` of bucket ``B`` names."""
    check_key(key)
    return bucket_dir(bucket) + "/" + key


def key_of(bucket: str, file: str, record: str) -> str:
    """The key of record ``record`` of file ``file`` in bucket ``B``
    (the inverse of :meth:`KeyMap.resolve`)."""
    rel = file[len(bucket_dir(bucket)) + 1 :]
    return record if rel == TOP_FILE else rel + "/" + record


class KeyMap:
    """The mapping against a tracker: which file holds a key (the tracker's
    ``List``, as the fsspec filesystem's ``st_lookup`` asks it).

    Parameters
    ----------
    client : st_py.client.client.Client
    """

    def __init__(self, client):
        self.client = client

    def bucket_exists(self, bucket: str) -> bool:
        """Whether ``/B`` is a namespace directory."""
        return self.bucket_entries(bucket, counts=False) is not None

    def bucket_entries(self, bucket: str, counts: bool = True) -> list | None:
        """What the tracker's List gives for ``/B`` when it is a namespace
        directory (its entries, one RPC: a listing walks on from them), or
        None when it is not. The entries' records are counted with
        ``counts`` (never their bytes: a count reads an index, a sum every
        row of a file's infofile)."""
        d = bucket_dir(bucket)
        try:
            if counts:
                entries = self.client.ls(d, sizes=False)
            else:
                entries = list(self.client.tracker.list(d, names_only=True).entries)
        except (StFileNotFoundError, BadNameError):
            return None
        return None if len(entries) == 1 and entries[0].name == d and not entries[0].is_dir else entries

    def resolve(self, bucket: str, key: str) -> Target:
        """The file and record key ``K`` names: the longest prefix of
        ``/B/K`` (below ``/B``) that is a StoreTorrent file and the rest
        (:func:`lookup`); where a new key goes (:func:`new_file`) if none is.

        Raises
        ------
        BadKeyError
            The key is refused, its whole path is a StoreTorrent file (a
            file is not an object) or a namespace directory, or it lies
            directly in a namespace directory below the bucket's.
        TrackerUnavailableError
        """
        path = key_path(bucket, key)
        if "/" not in key:
            return Target(bucket_dir(bucket) + "/" + TOP_FILE, key, True)
        d = bucket_dir(bucket)
        loc = lookup(path, self._names, min_len=len(d) + 2)  # /B itself is not listed: a bucket is a directory
        if loc.kind == "inside":
            return Target(loc.name, loc.rest, True)
        if loc.kind == "file":
            raise BadKeyError(key, f"{path} is a StoreTorrent file, not a record in one")
        placed = new_file(loc.name, loc.rest) if loc.kind == "missing" else None
        if placed is None:
            raise BadKeyError(key, f"{path} is a namespace directory, or a file directly in one")
        return Target(placed[0], placed[1], False)

    def _names(self, pre: str) -> list:
        return list(self.client.tracker.list(pre, names_only=True).entries)  # file ids, no counts
