"""The tracker's own SQLite state (``<state-dir>/tracker.db``).

Record metadata lives in the infofiles; this database keeps what the tracker
needs across restarts besides them: the files it created and their owners,
the owner and mode of namespace directories, the peers it has seen with the
space they last announced, their recent events (failures, returns: the
status page's failure history), and the space reservations of files being
written (paper 5: all hard state in SQLite).
"""

from __future__ import annotations

import json
import secrets
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
CREATE TABLE IF NOT EXISTS file_ids(
  file_id INTEGER PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS deleted_files(
  file_id INTEGER PRIMARY KEY, name TEXT NOT NULL, deleted_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS peer_events(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL, addr TEXT NOT NULL,
  peer_id TEXT NOT NULL, detail TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS peer_drain(
  peer_id TEXT PRIMARY KEY, state TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations(
  file_id INTEGER PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL, copies INTEGER NOT NULL,
  est_size INTEGER NOT NULL, peer_ids TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS followed(
  log_id TEXT PRIMARY KEY, log_index INTEGER NOT NULL
);
"""

# Space last announced by each peer (NULL: never, or kept by a tracker before
# these columns): what the scheduler counts for a peer that has not announced
# since this tracker started (issue 14).
PEER_SPACE = ("capacity_bytes", "used_bytes", "free_bytes")
# When each peer's process last started (its announced Unix time) and how
# many times the tracker has seen it start again: the status page's uptime
# and restart count, kept across tracker restarts.
PEER_START = (("started_at", "REAL"), ("restarts", "INTEGER NOT NULL DEFAULT 0"))
# Each peer's failure domain as it last declared it (st-peer --domain; NULL
# or "": none, its host): the scheduler and the clients' placement know it
# before the peer announces again after a tracker restart.
PEER_DOMAIN = (("domain", "TEXT"),)


class TrackerState:
    """The tracker's SQLite state database (``<state-dir>/tracker.db``, WAL),
    created or migrated (columns added) on open.

    Owned by the tracker's event loop; the connection is opened with
    ``check_same_thread=False`` because a few reads (directory owners while
    listing) come from its worker threads. Autocommit mode: no method opens a
    transaction."""

    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.dir = state_dir
        self.conn = sqlite3.connect(str(state_dir / "tracker.db"), isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(peers)")}
        for col in PEER_SPACE:
            if col not in have:
                self.conn.execute(f"ALTER TABLE peers ADD COLUMN {col} INTEGER")
        for col, decl in PEER_START + PEER_DOMAIN:
            if col not in have:
                self.conn.execute(f"ALTER TABLE peers ADD COLUMN {col} {decl}")

    def add_file(self, name: str, file_id: int, owner: str) -> None:
        """Record file ``name`` with id ``file_id`` and owner ``owner`` (created now); replaces a row of that name.
        A file put back with the id of a deleted one (``storetorrent recover``) is no longer deleted."""
        self.conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", (name, file_id, time.time(), owner))
        self.conn.execute("DELETE FROM deleted_files WHERE file_id = ?", (file_id,))

    def new_file_id(self) -> int:
        """A random 63-bit file id no file has had: neither a file the
        tracker knows, nor one it handed out or restored before (a file put
        back by ``storetorrent recover`` keeps its id; its records on the
        peers are stored under it)."""
        while True:
            file_id = secrets.randbits(63) or 1
            if (
                self.conn.execute("SELECT 1 FROM file_ids WHERE file_id = ?", (file_id,)).fetchone() is None
                and self.conn.execute("SELECT 1 FROM files WHERE file_id = ?", (file_id,)).fetchone() is None
            ):
                self.remember_file_id(file_id)
                return file_id

    def remember_file_id(self, file_id: int) -> None:
        """``file_id`` is taken for good: :meth:`new_file_id` never returns it."""
        self.conn.execute("INSERT OR IGNORE INTO file_ids VALUES (?)", (file_id,))

    def remove_file(self, name: str, file_id: int) -> None:
        """Forget file ``name`` (of id ``file_id``), which was deleted: its id
        is kept as deleted (:meth:`file_by_id`), so that peers' scrubbers may
        remove its records."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.execute("DELETE FROM files WHERE name = ?", (name,))
            self.conn.execute("INSERT OR REPLACE INTO deleted_files VALUES (?, ?, ?)", (file_id, name, time.time()))

    def file_by_id(self, file_id: int) -> tuple[str | None, bool]:
        """``(name, deleted)`` of file id ``file_id``: its name if a file has
        it; else ``(None, True)`` if this tracker deleted the file of that id
        (or replayed its deletion from the metadata log), ``(None, False)`` if
        it knows nothing of it (an id it never saw, or one whose file went
        before this state was kept: a standby that copied the namespace, a
        tracker older than this table). Only a deletion this tracker recorded
        is an answer that a file id has no file any more (a peer's scrubber
        removes its records on it, docs/peer.md, "Scrubber")."""
        row = self.conn.execute("SELECT name FROM files WHERE file_id = ?", (file_id,)).fetchone()
        if row is not None:
            return str(row[0]), False
        gone = self.conn.execute("SELECT 1 FROM deleted_files WHERE file_id = ?", (file_id,)).fetchone()
        return None, gone is not None

    def file_count(self) -> int:
        """Number of files in the namespace."""
        return int(self.conn.execute("SELECT count(*) FROM files").fetchone()[0])

    def file_ids(self) -> list[tuple[str, int]]:
        """(name, file_id) of every file."""
        return list(self.conn.execute("SELECT name, file_id FROM files"))

    def files(self) -> list[tuple[str, str]]:
        """(name, owner) of every file."""
        return list(self.conn.execute("SELECT name, coalesce(owner, '') FROM files"))

    def dir_owner(self, path: str) -> tuple[str, str, int] | None:
        """(owner, group, mode) of a namespace directory, if recorded."""
        return self.conn.execute("SELECT owner, grp, mode FROM dirs WHERE path = ?", (path,)).fetchone()

    def set_dir_owner(self, path: str, owner: str, group: str, mode: int) -> None:
        """Record (or replace) the owner, group and mode bits of namespace directory ``path``."""
        self.conn.execute("INSERT OR REPLACE INTO dirs VALUES (?, ?, ?, ?)", (path, owner, group, mode))

    def remove_dir(self, path: str) -> None:
        """Forget the owner and mode of namespace directory ``path``."""
        self.conn.execute("DELETE FROM dirs WHERE path = ?", (path,))

    def dir_rows(self) -> list[tuple[str, str, str, int]]:
        """(path, owner, group, mode) of every namespace directory with a recorded owner."""
        return list(self.conn.execute("SELECT path, owner, grp, mode FROM dirs"))

    def replace_dirs(self, rows: list[tuple[str, str, str, int]]) -> None:
        """The directories' owners become ``rows`` (path, owner, group, mode),
        in one transaction (a checkpoint of the metadata log loaded)."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.execute("DELETE FROM dirs")
            self.conn.executemany("INSERT INTO dirs VALUES (?, ?, ?, ?)", rows)

    def replace_files(self, rows: list[tuple[str, int, str]]) -> None:
        """The files become ``rows`` (name, file_id, owner), in one transaction
        (a standby elected on the namespace its leader kept); their ids are
        remembered as taken."""
        now = time.time()
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.execute("DELETE FROM files")
            self.conn.executemany("INSERT INTO files VALUES (?, ?, ?, ?)", [(n, f, now, o) for n, f, o in rows])
            self.conn.executemany("INSERT OR IGNORE INTO file_ids VALUES (?)", [(f,) for _, f, _ in rows])
            self.conn.executemany("DELETE FROM deleted_files WHERE file_id = ?", [(f,) for _, f, _ in rows])

    def dirs(self) -> list[tuple[str, int]]:
        """(path, mode) of every namespace directory with a recorded owner."""
        return list(self.conn.execute("SELECT path, mode FROM dirs"))

    def known_peers(self) -> list[tuple[str, str, int | None, int | None, int | None]]:
        """(peer_id, addr, capacity, used, free bytes) of every peer seen;
        the space as last announced, None if never kept."""
        return list(self.conn.execute("SELECT peer_id, addr, capacity_bytes, used_bytes, free_bytes FROM peers"))

    def remember_peer(
        self, peer_id: str, addr: str, capacity: int | None = None, used: int | None = None, free: int | None = None
    ) -> None:
        """Insert or update peer ``peer_id``: its address, seen now, and the
        space it announced (bytes; None: not known)."""
        self.conn.execute(
            "INSERT INTO peers(peer_id, addr, seen_at, capacity_bytes, used_bytes, free_bytes) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(peer_id) DO UPDATE SET addr = excluded.addr, "
            "seen_at = excluded.seen_at, capacity_bytes = excluded.capacity_bytes, "
            "used_bytes = excluded.used_bytes, free_bytes = excluded.free_bytes",
            (peer_id, addr, time.time(), capacity, used, free),
        )

    def peer_starts(self) -> dict[str, tuple[float, int]]:
        """``{peer_id: (started_at, restarts)}``: when each peer's process
        last started (Unix time, as it announced) and the restarts seen;
        peers that never announced a start are not listed."""
        return {
            pid: (float(at), int(n))
            for pid, at, n in self.conn.execute(
                "SELECT peer_id, started_at, restarts FROM peers WHERE started_at IS NOT NULL"
            )
        }

    def remember_start(self, peer_id: str, started_at: float, restarts: int) -> None:
        """A peer (already remembered) announced a new process start."""
        self.conn.execute(
            "UPDATE peers SET started_at = ?, restarts = ? WHERE peer_id = ?", (started_at, restarts, peer_id)
        )

    def peer_domains(self) -> dict[str, str]:
        """``{peer_id: domain}`` as each peer last declared it (``--domain``);
        peers that declared none are not listed."""
        return dict(self.conn.execute("SELECT peer_id, domain FROM peers WHERE coalesce(domain, '') != ''"))

    def remember_domain(self, peer_id: str, domain: str) -> None:
        """A peer (already remembered) declared failure domain ``domain`` (``""``: none)."""
        self.conn.execute("UPDATE peers SET domain = ? WHERE peer_id = ?", (domain, peer_id))

    def add_peer_event(self, at: float, kind: str, addr: str, peer_id: str, detail: str, keep: int) -> int:
        """Keep a peer event (the failure history of the status page), and
        only the newest ``keep``; returns its row id."""
        seq = self.conn.execute(
            "INSERT INTO peer_events(at, kind, addr, peer_id, detail) VALUES (?, ?, ?, ?, ?)",
            (at, kind, addr, peer_id, detail),
        ).lastrowid
        seq = int(seq or 0)
        self.conn.execute("DELETE FROM peer_events WHERE seq <= ?", (seq - keep,))
        return seq

    def update_peer_event(self, seq: int, at: float, count: int) -> None:
        """Set the time (Unix) and repeat count of the peer event with row id ``seq``."""
        self.conn.execute("UPDATE peer_events SET at = ?, count = ? WHERE seq = ?", (at, count, seq))

    def peer_events(self, keep: int) -> list[tuple[int, float, str, str, str, str, int]]:
        """The newest ``keep`` peer events, oldest first: (seq, at, kind,
        addr, peer_id, detail, count)."""
        return list(
            reversed(
                self.conn.execute(
                    "SELECT seq, at, kind, addr, peer_id, detail, count FROM peer_events ORDER BY seq DESC LIMIT ?",
                    (keep,),
                ).fetchall()
            )
        )

    def drain_states(self) -> dict[str, str]:
        """``{peer_id: "draining" or "retired"}`` of every peer taken out of
        service (``storetorrent drain``); peers in service are not listed."""
        return dict(self.conn.execute("SELECT peer_id, state FROM peer_drain"))

    def set_drain_state(self, peer_id: str, state: str) -> None:
        """Keep a peer's drain state; ``""`` puts it back in service."""
        if state:
            self.conn.execute("INSERT OR REPLACE INTO peer_drain VALUES (?, ?, ?)", (peer_id, state, time.time()))
        else:
            self.conn.execute("DELETE FROM peer_drain WHERE peer_id = ?", (peer_id,))

    def reservations(self) -> list[tuple[int, str, str, int, int, list[str]]]:
        """(file_id, name, owner, copies, est_size, peer ids) of each reservation."""
        return [
            (fid, name, owner, copies, est, json.loads(pids))
            for fid, name, owner, copies, est, pids in self.conn.execute(
                "SELECT file_id, name, owner, copies, est_size, peer_ids FROM reservations"
            )
        ]

    def add_reservation(
        self, file_id: int, name: str, owner: str, copies: int, est_size: int, peer_ids: list[str]
    ) -> None:
        """Keep file ``file_id``'s space reservation: ``est_size`` user bytes (one
        copy) times ``copies``, held on ``peer_ids`` (st_py/tracker/reservations.py)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO reservations VALUES (?, ?, ?, ?, ?, ?)",
            (file_id, name, owner, copies, est_size, json.dumps(peer_ids)),
        )

    def replace_reservations(self, rows: list[tuple[int, str, str, int, int, list[str]]]) -> None:
        """The reservations become ``rows`` (as :meth:`reservations` gives
        them), in one transaction (a checkpoint of the metadata log loaded)."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.execute("DELETE FROM reservations")
            self.conn.executemany(
                "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?)",
                [(f, n, o, c, e, json.dumps(p)) for f, n, o, c, e, p in rows],
            )

    def drop_reservation(self, file_id: int) -> None:
        """Forget the space reservation of file ``file_id``."""
        self.conn.execute("DELETE FROM reservations WHERE file_id = ?", (file_id,))

    def followed(self, log_id: str) -> int:
        """The last entry of log ``log_id`` this tracker applied while it
        followed it as a standby with a namespace of its own (0: none)."""
        row = self.conn.execute("SELECT log_index FROM followed WHERE log_id=?", (log_id,)).fetchone()
        return int(row[0]) if row else 0

    def set_followed(self, log_id: str, index: int) -> None:
        """Remember that entries of ``log_id`` through ``index`` are applied here."""
        self.conn.execute("INSERT OR REPLACE INTO followed(log_id, log_index) VALUES(?, ?)", (log_id, index))

    def close(self) -> None:
        """Close the database connection."""
        self.conn.close()
