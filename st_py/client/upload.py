"""Storing local files as records of a StoreTorrent file, as
``storetorrent put`` does: files up to the record limit as pipelined
records, larger ones as striped objects (docs/striping.md), with resume
(``skip_existing``) that compares the original bytes whatever the file's
filters, and every failure reported per record, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c

from st_py.client.striping import STRIPE_THRESHOLD
from st_py.client.write_batch import WriteBatch
from st_py.errors import BatchWriteError, QueuedOperationsError, StoreTorrentError

CHUNK = 8 << 20  # bytes read at a time when a large local file is checksummed
BATCH_RECORDS = 1024  # records of a write batch (StFile.write) at most
BATCH_BYTES = 16 << 20  # and their bytes


@dataclass
class UploadReport:
    """What :func:`upload` did, as plain data.

    Attributes
    ----------
    stored : list of str
        Record (and object) names stored and committed.
    skipped : list of str
        ``skip_existing``: names already committed with the same bytes.
    differ : list of str
        ``skip_existing``: names committed with other bytes (write-once:
        not stored).
    failures : list of (str, StoreTorrentError)
        Every record that failed, with its error.
    """

    stored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    failures: list[tuple[str, StoreTorrentError]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether no record failed and none differed from what was committed before."""
        return not self.failures and not self.differ


def local_items(paths: list[str | Path]) -> list[tuple[str, Path]]:
    """``(record name, local path)`` for local files and directories
    (recursively), named by their path relative to each argument's parent."""
    items: list[tuple[str, Path]] = []
    for p in map(Path, paths):
        if p.is_dir():
            items += [(str(q.relative_to(p.parent)), q) for q in sorted(p.rglob("*")) if q.is_file()]
        else:
            items.append((p.name, p))
    return items


def _crc_of(path: Path) -> tuple[int, int]:
    crc, size = 0, 0
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
    return size, crc


def _same_bytes(f, name: str, path: Path) -> bool:
    """Is committed record or object ``name`` of ``f`` the bytes at ``path``?
    Objects keep the original size and CRC-32C; records keep the stored
    ones, which are the original bytes only in a file without filters (a
    filtered record is read back and decoded to compare)."""
    obj = f.object_meta(name)
    if obj is not None:
        return (obj.size, obj.crc32c) == _crc_of(path)
    meta = f.record_meta(name)
    if meta is None:
        return False
    if not f.filters:
        return (meta.size, meta.crc32c) == _crc_of(path)
    return f.get(name) == path.read_bytes()


def upload(
    f,
    items: list[tuple[str, Path]],
    *,
    prefix: str = "",
    skip_existing: bool = False,
    replace: bool = False,
    on_bytes: Callable[[int], None] | None = None,
) -> UploadReport:
    """Store ``items`` (``(record name, local path)``) in open file ``f``.

    Files up to ``STRIPE_THRESHOLD`` bytes (64 MiB) are stored as records
    in write batches of up to ``BATCH_RECORDS`` records or ``BATCH_BYTES``
    (``StFile.write``; queued one by one with ``replace``), group-committed;
    larger ones are stored as striped objects
    (:meth:`StFile.put_object`, read from disk a stripe at a time). The file
    is flushed before this returns, so every stored name is committed.

    Parameters
    ----------
    f : StFile
        Open for writing.
    prefix : str
        Prepended to every record name.
    skip_existing : bool
        Resume: a name already committed with the same bytes (compared as
        the original bytes, whatever the file's filters) is skipped; with
        other bytes it is reported in ``differ`` and left alone.
    replace : bool
        Store new versions of the names that exist, records and striped
        objects alike (an object's replacement, or a record's by an object,
        at once: docs/striping.md, "Replacing an object").
    on_bytes : callable(int), optional
        Called with the byte count of each record stored or skipped
        (progress).

    Returns
    -------
    UploadReport
        Never raises for a record's failure: each is in ``failures``.
    """
    report = UploadReport()
    failed: dict[str, StoreTorrentError] = {}
    existing = set(f.names()) if (skip_existing and not replace) else set()

    def done(name: str, exc: Exception | None, n: int) -> None:
        # called on acknowledgement, and again if its commit fails
        if exc is not None:
            failed[name] = exc if isinstance(exc, StoreTorrentError) else StoreTorrentError(str(exc))
        elif on_bytes is not None:
            on_bytes(n)

    queued: list[str] = []
    batch, sizes = WriteBatch(), list[int]()  # records up to the limit go as write batches (not replace)

    def write_batch() -> None:
        if not batch:
            return
        try:
            f.write(batch)
            bad: dict = {}
        except BatchWriteError as e:
            bad = dict(e.failures)
        except StoreTorrentError as e:  # the whole batch (the handle closed, a quota refusal)
            bad = {n: e for n in batch.names}
        for n, size in zip(batch.names, sizes):
            if n in bad:
                failed[n] = bad[n]
                continue
            queued.append(n)
            if on_bytes is not None:
                on_bytes(size)
        batch.clear()
        sizes.clear()

    for local_name, path in items:
        name = prefix + local_name
        size = path.stat().st_size
        try:
            if name in existing:
                (report.skipped if _same_bytes(f, name, path) else report.differ).append(name)
                if on_bytes is not None:
                    on_bytes(size)
                continue
            if size > STRIPE_THRESHOLD:
                with path.open("rb") as fh:
                    f.put_object(name, fh, replace=replace)
                report.stored.append(name)
                if on_bytes is not None:
                    on_bytes(size)
                continue
            if not replace:
                batch.put(name, path.read_bytes())
                sizes.append(size)
                if len(batch) >= BATCH_RECORDS or batch.nbytes >= BATCH_BYTES:
                    write_batch()
                continue
            if f.object_meta(name) is not None:  # a record replacing an object: at once, not queued
                f.put(name, path.read_bytes(), replace=True)
                report.stored.append(name)
                if on_bytes is not None:
                    on_bytes(size)
                continue
            f.queue_put(name, path.read_bytes(), callback=lambda n, exc, size=size: done(n, exc, size), replace=replace)
            queued.append(name)
        except StoreTorrentError as e:
            failed[name] = e
    write_batch()
    try:
        f.flush()
    except StoreTorrentError as e:
        # Commits that failed (a batch's records have no callback), or not a
        # record's own failure: every queued name that is not committed now.
        named = dict(e.failures) if isinstance(e, QueuedOperationsError) else {}
        committed = set(f.names())
        for name in queued:
            if name not in committed:
                exc = named.get(name, e)
                failed.setdefault(name, exc if isinstance(exc, StoreTorrentError) else StoreTorrentError(str(exc)))
    report.stored += [n for n in queued if n not in failed]
    report.failures = sorted(failed.items())
    return report
