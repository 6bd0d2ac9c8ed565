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
    """Back up ``infofile`` whole, in one read transaction, to a temporary
    file (mode 0600) in ``tmp_dir`` (None: the system's).

    Raises FileNotFoundError if the infofile is gone, sqlite3.Error if it
    cannot be read."""
    if not infofile.is_file():
        raise FileNotFoundError(infofile)
    fd, name = tempfile.mkstemp(prefix="st-fetch-", suffix=".infofile", dir=tmp_dir)
    os.close(fd)
    out = Path(name)
    try:
        src = sqlite3.connect(f"file:{quote(str(infofile))}?mode=ro", uri=True)
        dst = sqlite3.connect(str(out))
        try:
            src.execute("PRAGMA busy_timeout=10000")
            src.backup(dst, pages=-1)  # one step: one consistent state
            meta = dict(dst.execute("SELECT key, value FROM meta"))
        finally:
            src.close()
            dst.close()
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


def current_for(meta: dict, req: pb.FetchInfofileRequest, file_id: int) -> list[pb.FetchInfofileChunk] | None:
    """The "current" reply when the copy ``req`` describes is at the state
    of the infofile whose ``meta`` table is given (same log, log position
    and generation: no change since), else None. Lets a live read of a
    file with no changesets kept (none written since the tracker started)
    move no bytes instead of a snapshot."""
    log_id, position = str(meta.get("log_id") or ""), int(meta.get("log_index") or 0)
    generation = int(meta.get("generation") or 0)
    if not req.have_log_id or req.have_log_id != log_id or req.have_position != position:
        return None
    if req.have_generation != generation or not position:
        return None
    return [
        pb.FetchInfofileChunk(kind="current", file_id=file_id, generation=generation, position=position, log_id=log_id)
    ]


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
