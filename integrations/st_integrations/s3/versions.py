"""Versions of objects (docs/s3.md, "Versions and time travel"): a
version id is a generation of the object's StoreTorrent file
(docs/snapshots.md). ListObjectVersions answers from each file's
``records`` and ``objects`` (the current versions of records and striped
objects) and ``record_history`` and ``object_history`` (the versions
replaced or deleted whose history is still kept); a GET or HEAD with
``?versionId=`` reads the file as of that generation (or snapshot) with
the client's ``as_of``.

A version's id is the generation that committed it (its ``commit_seq``),
so reading ``as_of`` it gives that version. A key deleted at generation U
(a history row ending at U that no other version starts at) has a delete
marker of id U.

Thread safety: each call opens and closes its own file handles.
"""

from __future__ import annotations

from dataclasses import dataclass

from st_py.core.history import VersionRow, versions_between
from st_py.core.infofile import RESERVED_PREFIXES, prefix_upper
from st_py.errors import StFileNotFoundError

from ..keymap import key_of
from .keylist import files_below


@dataclass(frozen=True)
class Version:
    """One version of a key, or a delete marker (``deleted``): its id
    (the generation that committed it, or that deleted the key), whether
    it is the key's latest, and of a version its user ``size``, ``crc32c``
    and ``mtime`` (unix s of its commit; of a delete marker, of the delete)."""

    key: str
    version_id: int
    latest: bool
    deleted: bool
    size: int = 0
    crc32c: int = 0
    mtime: float = 0.0


def _file_versions(client, bucket: str, file: str, base: str, prefix: str) -> list[Version]:
    rp = prefix[len(base) :] if prefix.startswith(base) else ""
    lo, hi = rp, (prefix_upper(rp) if rp else "\U0010ffff")
    try:
        h = client.open(file)
    except StFileNotFoundError:
        return []
    try:
        rows = versions_between(h.infofile(), lo, hi)
    finally:
        h.close()
    by_name: dict[str, list[VersionRow]] = {}
    for v in rows:
        if not v.striped and (v.name.startswith(RESERVED_PREFIXES) or (not base and "/" in v.name)):
            continue
        by_name.setdefault(v.name, []).append(v)
    out: list[Version] = []
    for name, versions in by_name.items():
        key = key_of(bucket, file, name)
        starts = {v.generation for v in versions}
        items = [(v.generation, False, v) for v in versions]  # and the deletes no version starts at:
        items += [(v.until, True, v) for v in versions if v.until is not None and v.until not in starts]
        items.sort(key=lambda it: -it[0])  # newest first, as S3 lists them
        for i, (vid, deleted, v) in enumerate(items):
            if deleted:
                out.append(Version(key, vid, i == 0, True, mtime=float(v.until_at or 0.0)))
            else:
                out.append(Version(key, vid, i == 0, False, v.size, v.crc32c, v.committed_at))
    return out


def list_versions(client, bucket: str, prefix: str = "") -> list[Version]:
    """Every version and delete marker of the bucket's keys that start
    with ``prefix``, in S3's order (key, then newest first), held in
    memory (this slice does not stream them)."""
    out: list[Version] = []
    for file, base, _n in files_below(client, bucket, prefix):
        out += [v for v in _file_versions(client, bucket, file, base, prefix) if v.key.startswith(prefix)]
    out.sort(key=lambda v: (v.key, -v.version_id))
    return out
