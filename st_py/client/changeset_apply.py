"""Bring a local copy of an infofile forward by the tracker's changesets
(issue 40; docs/metadata-log.md, "Metadata on every node").

The changesets are what the tracker's own transactions changed
(st_py/tracker/changesets.py); applying them in order with SQLite's
``sqlite3changeset_apply`` (apsw's ``Changeset.apply``) changes the copy's
rows exactly as the tracker's infofile changed, so the format keeps one
writer.

apsw bundles its own SQLite, and the client reads its copies with the
standard library's ``sqlite3`` (another SQLite library): two libraries with
one file open in a process break each other's locks. So apsw never opens a
copy a reader may have open: the changes are applied to a new file made from
the copy (a local file copy) and renamed over it. Readers with the old file
open keep reading the state they opened; new readers see the new one whole.
Nothing is synced (no journal on disk, ``synchronous=OFF``): the new file is
private until the rename, and after a crash of the machine a copy brought
forward by changes is fetched again whole (st_py/client/copy_seal.py).

Thread-safety: callers serialize catch-ups of one copy (the copy's lock in
st_py/client/infofile_copies.py).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from urllib.parse import quote

import apsw

from st_py.core.infofile import schema_fingerprint
from st_py.errors import StoreTorrentError


class ChangesetApplyError(StoreTorrentError):
    """A changeset did not apply cleanly to a copy (a row it changes is not
    as the tracker had it: the copy is not the state the changeset follows).
    The copy is left as it was; fetch a snapshot instead.

    Attributes: ``path`` (the copy), ``table`` (where it failed), ``reason``
    (SQLite's conflict kind)."""

    def __init__(self, path: str, table: str, reason: str):
        super().__init__(
            f"changes for the infofile copy {path} do not apply (table {table}: {reason}); "
            "it is left as it was, fetch a snapshot"
        )
        self.path, self.table, self.reason = path, table, reason


def copy_state(path: str | os.PathLike) -> tuple[int, int, str, str]:
    """``(generation, log position, log id, schema fingerprint)`` of the copy
    at ``path``, read in a private read-only connection (closed at once).

    Raises sqlite3.Error if it is no SQLite file."""
    db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('generation', 'log_index', 'log_id')"))
        return (
            int(meta.get("generation") or 0),
            int(meta.get("log_index") or 0),
            str(meta.get("log_id") or ""),
            schema_fingerprint(db),
        )
    finally:
        db.close()


def apply_changesets(path: str | os.PathLike, changesets: list[bytes]) -> None:
    """Apply ``changesets`` (in order) to the copy at ``path``, all or none:
    made on a new file beside it and renamed over it (its mode kept).

    Raises
    ------
    ChangesetApplyError
        A change conflicts with the copy's rows (nothing changed).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.applying-{os.getpid()}")
    shutil.copyfile(path, tmp)
    os.chmod(tmp, path.stat().st_mode & 0o777)
    failed: list[tuple[str, str]] = []

    def conflict(reason: int, change: apsw.TableChange) -> int:
        failed.append((change.name, str(apsw.mapping_session_conflict.get(reason, reason))))
        return apsw.SQLITE_CHANGESET_ABORT

    try:
        db = apsw.Connection(str(tmp))
        try:
            db.execute("PRAGMA journal_mode=MEMORY")  # the file is private until renamed: nothing to roll back on disk
            db.execute("PRAGMA synchronous=OFF")  # copy_seal: a copy is not synced, a crash-torn one is refetched
            with db:  # one transaction: every changeset or none
                for cs in changesets:
                    if cs:
                        apsw.Changeset.apply(cs, db, conflict=conflict)
        finally:
            db.close()
    except apsw.AbortError:
        tmp.unlink(missing_ok=True)
        table, reason = failed[0] if failed else ("?", "aborted")
        raise ChangesetApplyError(str(path), table, reason) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
