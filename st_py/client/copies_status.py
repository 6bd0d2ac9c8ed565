"""How far behind a client's infofile copies are (issue 40 item 4,
``metadata="fetch"``; docs/metadata-log.md, "Metadata on every node"): what
``storetorrent status`` shows of the cache folder.

A copy's state is read from the copy itself (its ``meta`` table: file name,
generation) and its file's modification time (the last catch-up that moved
it); its last check with the tracker from ``<file_id>.checked`` beside it
(written by st_py/client/infofile_copies.py: when, the copy's generation
then and the tracker's); the tracker's generation of each file now from an
Open. Nothing is
changed: a copy of a deleted file is reported as such, not removed.

Thread-safety: the functions touch only their own connections.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

from st_py.errors import PermissionDeniedError, StFileNotFoundError

ASKED = 100  # copies whose file's generation the tracker is asked for (one Open each); the rest are counted


@dataclass
class CopyLag:
    """One copy: its file (``name``, ``file_id``), the generation it holds,
    the tracker's (-1: not asked, 0 with ``deleted``: the file is gone),
    ``behind`` (generations), ``moved_s_ago`` (seconds since a catch-up last
    moved it), its size in bytes, and its last check with the tracker:
    ``checked_s_ago`` (seconds; -1: none noted) and ``behind_at_check``
    (generations the copy was behind the tracker's then, 0: current; -1:
    none noted), and the replica that answered then (``checked_from``,
    ``host:port``; ``from_standby``: a standby's infofile port, not the
    tracker the client talks to)."""

    file_id: int
    name: str
    generation: int
    tracker_generation: int
    behind: int
    deleted: bool
    moved_s_ago: float
    bytes: int
    checked_s_ago: float = -1.0
    behind_at_check: int = -1
    checked_from: str = ""
    from_standby: bool = False


@dataclass
class CopiesStatus:
    """The copies of one cache ``folder``: how many, their bytes, how many
    are behind the tracker and by how many generations at most, and each
    copy (:class:`CopyLag`, the first :data:`ASKED` compared with the
    tracker)."""

    folder: str
    mode: str = "fetch"
    copies: int = 0
    bytes: int = 0
    behind: int = 0
    max_behind: int = 0
    deleted: int = 0
    behind_at_check: int = 0  # copies that were behind at their last check (a read waited)
    max_behind_at_check: int = 0
    from_standbys: int = 0  # copies whose last check a standby answered (docs/metadata-log.md)
    files: list[CopyLag] = field(default_factory=list)

    def as_dict(self) -> dict:
        """Plain data (``status --format json``'s ``metadata_copies``)."""
        return asdict(self)

    def line(self) -> str:
        """One line for ``storetorrent status``."""
        if not self.copies:
            return f"infofile copies (metadata={self.mode}): none in {self.folder}"
        oldest = max(c.moved_s_ago for c in self.files)
        return (
            f"infofile copies (metadata={self.mode}): {self.copies} in {self.folder} ({self.bytes} bytes); "
            f"{self.behind} behind the tracker (at most {self.max_behind} generations), "
            f"{self.deleted} of deleted files; the oldest moved {oldest:.0f} s ago; "
            f"{self.behind_at_check} were behind at their last check (at most {self.max_behind_at_check} generations); "
            f"{self.from_standbys} last brought from a standby tracker"
        )


def _copy_meta(path: Path) -> tuple[str, int, int]:
    db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('name', 'generation', 'file_id')"))
    finally:
        db.close()
    return str(meta.get("name") or ""), int(meta.get("generation") or 0), int(meta.get("file_id") or 0)


def _last_check(path: Path, now: float) -> tuple[float, int, str, bool]:
    """(seconds since, generations behind then, the replica that answered,
    whether a standby) of the copy at ``path``'s last check, from its
    ``.checked`` file; (-1, -1, "", False) if none is noted."""
    try:
        c = json.loads(path.with_suffix(".checked").read_text())
        gen = int(c["generation"])  # -1: the check made the copy
        behind = max(int(c["tracker_generation"]) - gen, 0) if gen >= 0 else 0
        return round(now - float(c["at"]), 1), behind, str(c.get("source", "")), bool(c.get("standby", False))
    except (OSError, ValueError, KeyError, TypeError):
        return -1.0, -1, "", False


def copies_status(folder: str | os.PathLike, tracker=None, asked: int = ASKED, mode: str = "fetch") -> CopiesStatus:
    """The copies in cache ``folder``, compared with ``tracker`` (a
    TrackerClient, or None: not compared) for the first ``asked`` of them
    (newest first); ``mode`` the client's metadata mode, as shown.

    Raises TrackerUnavailableError."""
    st = CopiesStatus(str(folder), mode)
    paths = sorted(Path(folder).glob("*.infofile"), key=lambda p: -p.stat().st_mtime) if Path(folder).is_dir() else []
    now = time.time()
    for i, path in enumerate(paths):
        try:
            name, gen, file_id = _copy_meta(path)
            size, mtime = path.stat().st_size, path.stat().st_mtime
        except (OSError, sqlite3.Error):  # replaced or removed meanwhile: the next status counts it
            continue
        theirs, deleted = -1, False
        if tracker is not None and i < asked and name:
            try:
                info = tracker.open_unlocated(name)
                theirs, deleted = (int(info.generation), False) if info.file_id == file_id else (0, True)
            except StFileNotFoundError:
                theirs, deleted = 0, True
            except PermissionDeniedError:  # no longer readable by this user: not compared
                pass
        behind = max(theirs - gen, 0) if not deleted else 0
        checked, was_behind, source, standby = _last_check(path, now)
        st.files.append(
            CopyLag(
                file_id,
                name,
                gen,
                theirs,
                behind,
                deleted,
                round(now - mtime, 1),
                size,
                checked,
                was_behind,
                source,
                standby,
            )
        )
        st.from_standbys += standby
        st.behind_at_check += was_behind > 0
        st.max_behind_at_check = max(st.max_behind_at_check, was_behind)
        st.copies += 1
        st.bytes += size
        st.behind += behind > 0
        st.max_behind = max(st.max_behind, behind)
        st.deleted += deleted
    return st


__all__ = ["ASKED", "CopiesStatus", "CopyLag", "copies_status"]
