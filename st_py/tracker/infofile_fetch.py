"""What FetchInfofile sends (issue 40; docs/metadata-log.md, "Metadata on
every node"): the changesets a copy lacks when the file's writer still keeps
them (st_py/tracker/changeset_window.py), else a snapshot of the infofile.

The snapshot is SQLite's online backup of the whole file in one step (one
read transaction: one consistent state, as the peers' mirrors are made,
st_core/src/meta_mirror.cc), into a temporary file streamed in chunks of
:data:`CHUNK` bytes, the way RestoreInfofile takes an infofile back.

Thread-safety: :func:`changes_for` reads a window under its lock; the
snapshot functions touch only their own temporary file.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import google_crc32c

from st_py._proto import tracker_pb2 as pb
from st_py.core.infofile import schema_fingerprint
from st_py.tracker.changeset_window import Window

CHUNK = 1 << 20  # bytes of a snapshot per message


def crc32c_extend(crc: int, data: bytes) -> int:
    """CRC-32C of what ``crc`` covered followed by ``data``."""
    return google_crc32c.extend(crc, data)


@dataclass
class Snapshot:
    """A consistent copy of an infofile in a temporary file (``path``; the
    caller removes it with :meth:`discard`) and the state it is at."""

    path: Path
    file_id: int
    generation: int
    position: int
    log_id: str

    def chunks(self) -> Iterator[pb.FetchInfofileChunk]:
        """The reply: a first message with the state, size and CRC-32C, then
        the bytes in :data:`CHUNK`-sized pieces (read as sent)."""
        crc, size = 0, self.path.stat().st_size
        with self.path.open("rb") as f:
            while piece := f.read(CHUNK):
                crc = crc32c_extend(crc, piece)
        yield pb.FetchInfofileChunk(
            kind="snapshot",
            file_id=self.file_id,
            generation=self.generation,
            position=self.position,
            log_id=self.log_id,
            total_size=size,
            crc32c=crc,
        )
        with self.path.open("rb") as f:
            while piece := f.read(CHUNK):
                yield pb.FetchInfofileChunk(data=piece)

    def discard(self) -> None:
        """Remove the temporary file."""
        self.path.unlink(missing_ok=True)


def take_snapshot(infofile: Path, tmp_dir: str | None = None) -> Snapshot:
    """Copy ``infofile`` whole, as of one committed state, to a temporary
    file (mode 0600) in ``tmp_dir`` (None: the system's).

    The infofile writer keeps a rollback journal (journal_mode=DELETE), where
    the database file is only written under an EXCLUSIVE lock: the file's
    bytes copied while a read transaction holds a SHARED lock are one
    committed state (SQLite's "copy the file while holding a read lock";
    https://www.sqlite.org/backup.html's alternative, 3-10x faster than the
    backup API's page-by-page copy; a writer waits for the copy, not for the
    stream that follows it). A file in WAL mode (none is written so, but a
    hand-made one could be) goes through the backup API, which sees the WAL.

    Raises FileNotFoundError if the infofile is gone, sqlite3.Error if it
    cannot be read."""
    if not infofile.is_file():
        raise FileNotFoundError(infofile)
    fd, name = tempfile.mkstemp(prefix="st-fetch-", suffix=".infofile", dir=tmp_dir)
    os.close(fd)
    out = Path(name)
    try:
        src = sqlite3.connect(f"file:{quote(str(infofile))}?mode=ro", uri=True, isolation_level=None)
        try:
            src.execute("PRAGMA busy_timeout=10000")
            if src.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                dst = sqlite3.connect(str(out))
                try:
                    src.backup(dst, pages=-1)  # one step: one consistent state
                finally:
                    dst.close()
            else:
                src.execute("BEGIN")
                src.execute("SELECT count(*) FROM meta").fetchone()  # the SHARED lock, held until COMMIT
                with open(infofile, "rb") as fin, open(out, "wb") as fout:
                    while chunk := fin.read(1 << 20):
                        fout.write(chunk)
                src.execute("COMMIT")
        finally:
            src.close()
        chk = sqlite3.connect(f"file:{quote(str(out))}?mode=ro", uri=True)
        try:
            meta = dict(chk.execute("SELECT key, value FROM meta"))
        finally:
            chk.close()
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return Snapshot(
        out,
        int(meta.get("file_id") or 0),
        int(meta.get("generation") or 0),
        int(meta.get("log_index") or 0),
        str(meta.get("log_id") or ""),
    )


def unchanged_since(infofile: Path, req: pb.FetchInfofileRequest, file_id: int) -> pb.FetchInfofileChunk | None:
    """The "current" reply if the copy ``req`` describes is at the
    infofile's state (same log position and log id, same schema), else None.
    For a copy the changeset window cannot vouch for (none kept: a tracker
    restarted, a file not written since), so that asking again costs a read
    of ``meta``, not a snapshot (peers ask every ``--mirror-interval``).

    Raises FileNotFoundError if the infofile is gone, sqlite3.Error if it
    cannot be read."""
    if not req.have_schema or not req.have_log_id:
        return None
    if not infofile.is_file():
        raise FileNotFoundError(infofile)
    db = sqlite3.connect(f"file:{quote(str(infofile))}?mode=ro", uri=True)
    try:
        db.execute("PRAGMA busy_timeout=10000")
        with db:  # one read transaction: meta and schema of one state
            db.execute("BEGIN")
            meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('generation', 'log_index', 'log_id')"))
            schema = schema_fingerprint(db)
    finally:
        db.close()
    if (
        int(meta.get("log_index") or 0) != req.have_position
        or str(meta.get("log_id") or "") != req.have_log_id
        or schema != req.have_schema
    ):
        return None
    return pb.FetchInfofileChunk(
        kind="current",
        file_id=file_id,
        generation=int(meta.get("generation") or 0),
        position=req.have_position,
        log_id=req.have_log_id,
    )


def changes_for(
    window: Window | None, req: pb.FetchInfofileRequest, file_id: int
) -> list[pb.FetchInfofileChunk] | None:
    """The reply that brings the copy ``req`` describes forward by
    changesets ("current" if it is at the window's last change), or None if
    a snapshot is needed: no window, no copy, another schema or log, or the
    window does not reach back to the copy's position."""
    if window is None or not req.have_schema or req.have_schema != window.schema:
        return None
    changes = window.since(req.have_position, req.have_log_id)
    if changes is None:
        return None
    if not changes:
        return [
            pb.FetchInfofileChunk(
                kind="current",
                file_id=file_id,
                generation=req.have_generation,
                position=req.have_position,
                log_id=req.have_log_id,
            )
        ]
    last = changes[-1]
    head = pb.FetchInfofileChunk(
        kind="changes", file_id=file_id, generation=last.generation, position=last.index, log_id=window.log_id
    )
    return [head] + [pb.FetchInfofileChunk(data=c.data) for c in changes]
