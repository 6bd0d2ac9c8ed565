"""What FetchInfofile sends (issue 40; docs/metadata-log.md, "Metadata on
every node"): the changesets a copy lacks when the file's writer still keeps
them (st_py/tracker/changeset_window.py), else a snapshot of the infofile.

The snapshot is the whole file's bytes read under one read transaction (one
consistent state), held in memory (small files) or a temporary file, and
streamed in chunks of :func:`chunk_size` bytes, the way RestoreInfofile takes an
infofile back.

Thread-safety: :func:`changes_for` reads a window under its lock; the
snapshot functions touch only their own memory and temporary file.
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

CHUNK = 1 << 20  # bytes of a snapshot per message at most
CHUNK_MIN = 1 << 18  # and at least (the last one aside)
PIECES = 4  # a snapshot is sent in this many messages at least, within those bounds
IN_MEMORY_MAX = 16 << 20  # bytes: a snapshot up to this size is held in memory, larger ones in a temporary file


def crc32c_extend(crc: int, data: bytes) -> int:
    """CRC-32C of what ``crc`` covered followed by ``data``."""
    return google_crc32c.extend(crc, data)


def chunk_size(size: int) -> int:
    """Bytes per message of a ``size``-byte snapshot: a quarter of it, within
    :data:`CHUNK_MIN` and :data:`CHUNK`. Small snapshots go in several
    messages so that the client writes one while the next is on its way (a
    1.2 MB infofile in 1 MiB messages took about 1.5 ms longer to fetch than
    in 256 KiB ones); large ones in 1 MiB messages, as each message has a
    cost of its own (docs/benchmarks.md)."""
    return min(CHUNK, max(CHUNK_MIN, size // PIECES))


@dataclass
class Snapshot:
    """A consistent copy of an infofile, its ``size`` and ``crc32c``, and the
    state it is at: held in ``data`` (up to :data:`IN_MEMORY_MAX` bytes) or
    in a temporary file ``path`` (the caller removes it with :meth:`discard`)."""

    data: bytes | None
    path: Path | None
    size: int
    crc32c: int
    file_id: int
    generation: int
    position: int
    log_id: str

    def chunks(self) -> Iterator[pb.FetchInfofileChunk]:
        """The reply: a first message with the state, size and CRC-32C, then
        the bytes in :func:`chunk_size` pieces (a file's read as sent)."""
        yield pb.FetchInfofileChunk(
            kind="snapshot",
            file_id=self.file_id,
            generation=self.generation,
            position=self.position,
            log_id=self.log_id,
            total_size=self.size,
            crc32c=self.crc32c,
        )
        step = chunk_size(self.size)
        if self.data is not None:
            for at in range(0, len(self.data), step):
                yield pb.FetchInfofileChunk(data=self.data[at : at + step])
            return
        assert self.path is not None
        with self.path.open("rb") as f:
            while piece := f.read(step):
                yield pb.FetchInfofileChunk(data=piece)

    def discard(self) -> None:
        """Remove the temporary file, if any, and drop the bytes held."""
        self.data = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def take_snapshot(infofile: Path, tmp_dir: str | None = None, in_memory_max: int = IN_MEMORY_MAX) -> Snapshot:
    """Copy ``infofile`` whole, as of one committed state: into memory if it
    is at most ``in_memory_max`` bytes, else to a temporary file (mode 0600)
    in ``tmp_dir`` (None: the system's); its CRC-32C computed on the copy.

    Up to ``in_memory_max``: SQLite's own serialization of the database
    (``sqlite3_serialize``: every page read through the pager, inside the
    read transaction that also reads ``meta``, from a map of the file), so
    the bytes and the meta are one committed state; 1.6 ms for 10 MB on
    the 2-core VM (0.3 ms for 1.2 MB), against 80-150 ms for the backup
    API's page-by-page copy into a file.
    Never the file read with ``open()``: closing a descriptor of a file
    drops every POSIX lock this process holds on it, the infofile writer's
    own locks included (the tracker writes infofiles in this process), so a
    reader elsewhere could take the writer's half-written transaction for a
    hot journal and roll it back (https://www.sqlite.org/howtocorrupt.html,
    2.2.1). Larger files, and a file in WAL mode (none is written so, but a
    hand-made one could be), go through the backup API, which holds one
    state for its one step and reads through SQLite too, into a temporary
    file. Memory up to :data:`IN_MEMORY_MAX` because writing a temporary
    file costs more than the rest of a small snapshot; concurrent snapshots
    hold that much each.

    Raises FileNotFoundError if the infofile is gone, sqlite3.Error if it
    cannot be read."""
    if not infofile.is_file():
        raise FileNotFoundError(infofile)
    src = sqlite3.connect(f"file:{quote(str(infofile))}?mode=ro", uri=True, isolation_level=None)
    try:
        src.execute("PRAGMA busy_timeout=10000")
        if src.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
            return _backup(src, tmp_dir)
        src.execute("BEGIN")
        meta = dict(src.execute("SELECT key, value FROM meta"))  # takes the SHARED lock, held until COMMIT
        pages = src.execute("PRAGMA page_count").fetchone()[0] * src.execute("PRAGMA page_size").fetchone()[0]
        if pages <= in_memory_max:
            # pages read from a map of the file, not a pread each: 1.6 ms for 10 MB against 5-17 ms;
            # safe, as the SHARED lock keeps the writer from changing or truncating the file meanwhile
            src.execute(f"PRAGMA mmap_size={pages}")
            data = src.serialize()
            src.execute("COMMIT")
            return _snapshot(data, None, len(data), google_crc32c.value(data), meta)
        src.execute("COMMIT")
        return _backup(src, tmp_dir)
    finally:
        src.close()


def _snapshot(data: bytes | None, path: Path | None, size: int, crc: int, meta: dict) -> Snapshot:
    return Snapshot(
        data,
        path,
        size,
        crc,
        int(meta.get("file_id") or 0),
        int(meta.get("generation") or 0),
        int(meta.get("log_index") or 0),
        str(meta.get("log_id") or ""),
    )


def _temp(tmp_dir: str | None) -> Path:
    fd, name = tempfile.mkstemp(prefix="st-fetch-", suffix=".infofile", dir=tmp_dir)
    os.close(fd)
    return Path(name)


def _backup(src: sqlite3.Connection, tmp_dir: str | None) -> Snapshot:
    """A WAL-mode infofile through SQLite's backup API (one step: one
    consistent state) into a temporary file; its meta read from the copy."""
    out = _temp(tmp_dir)
    try:
        dst = sqlite3.connect(str(out))
        try:
            src.backup(dst, pages=-1)
            meta = dict(dst.execute("SELECT key, value FROM meta"))
        finally:
            dst.close()
        crc, size = 0, 0
        with open(out, "rb") as f:
            while piece := f.read(CHUNK):
                crc, size = crc32c_extend(crc, piece), size + len(piece)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return _snapshot(None, out, size, crc, meta)


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
