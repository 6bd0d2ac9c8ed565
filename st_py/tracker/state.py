"""The tracker's own SQLite state (``<state-dir>/tracker.db``).

Record metadata lives in the infofiles; this database keeps what the tracker
needs across restarts besides them: the files it created and their owners,
the owner and mode of namespace directories, and the peers it has seen
(paper 5: all hard state in SQLite).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS files(
  name TEXT PRIMARY KEY, file_id INTEGER NOT NULL, created_at REAL NOT NULL, owner TEXT
);
CREATE TABLE IF NOT EXISTS peers(
  peer_id TEXT PRIMARY KEY, addr TEXT NOT NULL, seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS dirs(
  path TEXT PRIMARY KEY, owner TEXT NOT NULL, grp TEXT NOT NULL, mode INTEGER NOT NULL
);
"""


class TrackerState:
    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(state_dir / "tracker.db"), isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)

    def add_file(self, name: str, file_id: int, owner: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", (name, file_id, time.time(), owner))

    def remove_file(self, name: str) -> None:
        self.conn.execute("DELETE FROM files WHERE name = ?", (name,))

    def file_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM files").fetchone()[0])

    def files(self) -> list[tuple[str, str]]:
        """(name, owner) of every file."""
        return list(self.conn.execute("SELECT name, coalesce(owner, '') FROM files"))

    def dir_owner(self, path: str) -> tuple[str, str, int] | None:
        """(owner, group, mode) of a namespace directory, if recorded."""
        return self.conn.execute("SELECT owner, grp, mode FROM dirs WHERE path = ?", (path,)).fetchone()

    def set_dir_owner(self, path: str, owner: str, group: str, mode: int) -> None:
        self.conn.execute("INSERT OR REPLACE INTO dirs VALUES (?, ?, ?, ?)", (path, owner, group, mode))

    def known_peers(self) -> list[tuple[str, str]]:
        return list(self.conn.execute("SELECT peer_id, addr FROM peers"))

    def remember_peer(self, peer_id: str, addr: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO peers VALUES (?, ?, ?)", (peer_id, addr, time.time()))

    def close(self) -> None:
        self.conn.close()
