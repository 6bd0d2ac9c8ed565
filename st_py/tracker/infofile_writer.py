"""The tracker's write side of the infofile (format in docs/infofile.md):
the tracker is its only writer.

:func:`create_infofile` makes a file's infofile; :class:`InfofileWriter` is
the tracker's read-write handle on one (the group commit of records, objects
and new versions; copies stored, moved and unstored; deletes; peerlist
growth), and opening one migrates a file made before a table or column
existed (:data:`VERSION_COLUMNS` and the ``*_SQL`` statements);
:func:`recover` rolls back what a tracker killed mid-transaction left. The
format itself (schema, constants, dataclasses) and the read-only
:class:`~st_py.core.infofile.InfofileReader` are in :mod:`st_py.core.infofile`, shared
with the clients.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from st_py.core.history import HELD, retained_bytes
from st_py.core.infofile import (
    FORMAT,
    FORMAT_VERSION,
    FORMAT_VERSION_HISTORY,
    FORMAT_VERSION_VERSIONS,
    HISTORY_SQL,
    RESERVED_PREFIXES,
    SCHEMA,
    STRIPE_PREFIX,
    name_stats,
    schema_fingerprint,
    stripe_name,
)
from st_py.core.record_names import (
    BAD_NAME,
    RULE,
    NameTree,
    conflict_reason,
    parents,
    path_problem,
    tree_conflict,
    tree_conflicts,
)
from st_py.tracker.bulk_insert import insert_rows
from st_py.tracker.changeset_window import Window
from st_py.tracker.changesets import capturer

# The time of the operation being applied, per applying thread (None: none
# is, and the wall clock is read). An operation of the metadata log carries
# the time it was proposed at, so applying it again (a replay, a replica)
# writes the same rows (docs/metadata-log.md, "The apply loop").
_CLOCK = threading.local()
# A group commit's rows (columns named, VALUES added by insert_rows)
INSERT_RECORDS = "INSERT INTO records(name, size, crc32c, commit_seq, committed_at, schema_id, logical_size, stored_as)"
INSERT_COPIES = "INSERT INTO copies(name, copy_rank, peer_idx, since)"
INSERT_PENDING = "INSERT INTO pending_copies(name, copy_rank, peer_idx, since)"
INSERT_USER_META = "INSERT INTO user_meta(name, commit_seq, meta)"


def _committed_as(c: sqlite3.Connection, names: list[str]) -> dict[str, tuple[int, int]]:
    """``{name: (size, crc32c)}`` of the committed records among ``names``."""
    out: dict[str, tuple[int, int]] = {}
    for i in range(0, len(names), 500):
        chunk = names[i : i + 500]
        for name, size, crc in c.execute(
            f"SELECT name, size, crc32c FROM records WHERE name IN ({','.join('?' * len(chunk))})", chunk
        ):
            out[name] = (size, crc)
    return out


def _held_as_sent(c: sqlite3.Connection, records: list[tuple]) -> set[str]:
    """The names of ``records`` (name, size, crc32c, ...) the file holds with
    that size and CRC: what a request applied before committed, for the
    answer to its retry."""
    want = {r[0]: (r[1], r[2]) for r in records}
    have = _committed_as(c, list(want))
    return {name for name, sent in want.items() if have.get(name) == sent}


def _per_request(
    c: sqlite3.Connection, jobs: list[tuple[str, list[tuple]]], new: set[str], conflicts: list[Conflict]
) -> list[tuple[set[str], list[Conflict]]]:
    """What each request of a merged commit ``jobs`` got, in order: the
    names it newly committed and its conflicts. A name only one request
    sent is that request's. A name several sent (two writers of one new
    name whose commits met in one transaction) is committed from the
    first of them whose record the file holds as sent (the first commit
    wins), and is a conflict only to those whose record the file does not
    hold: told by name alone, every one of them heard of the conflict,
    the writer whose record was committed too (which then took its
    committed record for refused), and each counted it as new."""
    if len(jobs) == 1 and not conflicts:  # one request, all its names new or held: nothing to share out
        return [(set(new), [])]
    by_name = {x.name: x for x in conflicts}
    senders: dict[str, int] = {}
    for _, recs in jobs:
        for name in {r[0] for r in recs}:
            senders[name] = senders.get(name, 0) + 1
    shared = [n for n, k in senders.items() if k > 1 and (n in new or n in by_name)]
    have = _committed_as(c, shared) if shared else {}
    taken: set[str] = set()
    out = []
    for _, recs in jobs:
        sent = {r[0]: (r[1], r[2]) for r in recs}
        mine: set[str] = set()
        hit: list[Conflict] = []
        for name in sent:
            if senders[name] == 1:
                if name in new:
                    mine.add(name)
                if name in by_name:
                    hit.append(by_name[name])
                continue
            holds = have.get(name) == sent[name]
            if holds and name in new and name not in taken:
                mine.add(name)
                taken.add(name)
            if not holds and name in by_name:
                hit.append(by_name[name])
        out.append((mine, hit))
    return out


def _now() -> float:
    """The applied operation's time (unix s), else the wall clock."""
    at = getattr(_CLOCK, "at", None)
    return time.time() if at is None else at


@contextlib.contextmanager
def clock_at(at: float):
    """In this block, in this thread, the infofile's writes read ``at``
    (unix s) as the time: an operation of the metadata log applied again
    writes the rows it wrote the first time."""
    _CLOCK.at = at
    try:
        yield
    finally:
        _CLOCK.at = None


@dataclass(frozen=True)
class Conflict:
    """A record of a request that was not applied, and why (``reason``).
    ``kind`` is "" (committed with other content, or another reason), or a
    name-tree conflict (:data:`st_py.core.record_names.IS_A_DIRECTORY`,
    ``NOT_A_DIRECTORY``) with ``record`` the committed name it met."""

    name: str
    reason: str
    kind: str = ""
    record: str = ""


def _insert_objects(c: sqlite3.Connection, objects: list[tuple], gen: int, now: float) -> tuple[int, list[Conflict]]:
    """Insert the rows of striped objects ``(name, size, stripe_size,
    stripes, crc32c[, (format, schema)[, user metadata]])`` at generation
    ``gen`` inside the caller's transaction: an object only if every one of
    its stripe records is committed (docs/striping.md) and its name is in
    nobody's way; the same object again is a retry. Returns (objects
    inserted, conflicts); the caller sets the generation."""
    added, conflicts = 0, []
    schema_ids = _schema_ids(c, objects, 5)
    for obj in objects:
        name, size, stripe_size, stripes, crc = obj[:5]
        sid = schema_ids.get(obj[5]) if len(obj) > 5 and obj[5] else None
        old = c.execute("SELECT size, crc32c FROM objects WHERE name = ?", (name,)).fetchone()
        if old is not None:
            if tuple(old) != (size, crc):
                conflicts.append(Conflict(name, "already committed with other content; delete it first"))
            continue
        if c.execute("SELECT 1 FROM records WHERE name = ?", (name,)).fetchone() is not None:
            conflicts.append(Conflict(name, "a record of that name is committed; names are write-once"))
            continue
        tree = _tree_conflict(c, name, NameTree(), True)  # objects committed before in this loop too
        if tree is not None:
            conflicts.append(tree)
            continue
        lo = stripe_name(name, 0)[:-8]
        have = int(
            c.execute("SELECT count(*) FROM records WHERE name >= ? AND name < ?", (lo, lo + "\uffff")).fetchone()[0]
        )
        if have != stripes or stripes != max(1, -(-size // stripe_size)):
            conflicts.append(Conflict(name, f"{have} of its {stripes} stripes are committed"))
            continue
        c.execute(
            "INSERT INTO objects(name, size, stripe_size, stripes, crc32c, commit_seq, committed_at, "
            "schema_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (name, size, stripe_size, stripes, crc, gen, now, sid),
        )
        if len(obj) > 6 and obj[6]:
            c.execute("INSERT INTO user_meta(name, commit_seq, meta) VALUES (?, ?, ?)", (name, gen, obj[6]))
        added += 1
    return added, conflicts


def _tree_conflict(
    c, name: str, batch: NameTree, objects: bool, known: dict[str, tuple[str, str]] | None = None
) -> Conflict | None:
    """Why a new name may not be committed (docs/decisions.md, "Record
    names"): it breaks the path rule, or it is a folder of or below a name
    earlier in this commit (``batch``) or committed (index lookups, or
    ``known``: :func:`~st_py.core.record_names.tree_conflicts` of the
    commit's names, read before its inserts); None if nothing, and then
    ``name`` joins ``batch``. Reserved names (stripes, versions) are the tracker's and not checked."""
    if name.startswith(RESERVED_PREFIXES):
        return None
    why = path_problem(name)
    if why:  # the rule for new names, whoever sends them
        return Conflict(name, f"is refused: {why}; {RULE}", BAD_NAME)
    ps = parents(name)
    hit = batch.conflict(name, ps) or (
        known.get(name) if known is not None else tree_conflict(c, name, objects=objects)
    )
    if hit is None:
        batch.add(name, ps)
        return None
    return Conflict(name, conflict_reason(*hit), hit[0], hit[1])


def _all_new(c: sqlite3.Connection, records: list[tuple]) -> bool | None:
    """True if the group commit of ``records`` (full rows of
    :func:`st_py.tracker.rpc.commit_rows.commit_rows`, 10 elements) inserts
    every one of them with no conflict, which :meth:`InfofileWriter._commit`
    would find record by record, unless one is committed already (not
    looked up here: the ``records`` primary key refuses it, and the caller
    then takes the record-by-record path): none is a new version, none
    comes twice, none is reserved (a stripe, a version), every name keeps
    the path rule, none is a folder of another in the batch, and no
    committed name is in the way of one
    (:func:`~st_py.core.record_names.tree_conflicts`). None if not (the
    caller takes the record-by-record path, which says why)."""
    if not records or any(len(r) != 10 or (r[5] and not r[8]) for r in records):
        return None
    names = [r[0] for r in records]
    unique = set(names)
    if len(unique) != len(names) or any(n.startswith(RESERVED_PREFIXES) for n in names):
        return None
    nested = [n for n in names if "/" in n]
    if any(n in ("", ".", "..") for n in names) or any(
        "//" in w or "/./" in w or "/../" in w for w in [f"/{n}/" for n in nested]
    ):
        return None  # breaks the path rule (path_problem)
    if nested and not unique.isdisjoint(p for n in nested for p in parents(n)):
        return None  # a name of the batch is a folder of another one
    if tree_conflicts(c, names, _has_objects(c)):
        return None
    return True


def _has_objects(c) -> bool:
    """Any striped object committed (a file made before them has no table)."""
    try:
        return c.execute("SELECT 1 FROM objects LIMIT 1").fetchone() is not None
    except sqlite3.OperationalError:
        return False


def _connect_rw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def create_infofile(path: Path, meta: dict, peers: list[tuple[int, str, str]], mode: int | None = None) -> None:
    """Create the infofile atomically: build it under a temporary name in the
    same directory, then link it into place (fails if ``path`` exists).
    ``mode``: its permission bits from the start (whatever the umask).

    Raises
    ------
    FileExistsError
        If ``path`` already exists.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".st-creating-{path.name}-{os.getpid()}-{time.monotonic_ns()}")
    if mode is not None:  # SQLite gives its journal the same bits
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.chmod(tmp, mode)
    conn = _connect_rw(tmp)
    try:
        conn.executescript("BEGIN;\n" + SCHEMA)  # one transaction (one sync), left open for the rows
        rows = {"format": FORMAT, "format_version": FORMAT_VERSION, "generation": 0, "history_from": 0, **meta}
        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", list(rows.items()))
        conn.execute("INSERT INTO generations(generation, at) VALUES (0, ?)", (_now(),))
        conn.executemany("INSERT INTO peers(peer_idx, peer_id, addr) VALUES (?, ?, ?)", peers)
        conn.execute("COMMIT")
    finally:
        conn.close()
    try:
        os.link(tmp, path)  # atomic, and refuses to replace an existing file
    finally:
        os.unlink(tmp)


def recover(root: Path) -> tuple[int, int]:
    """Finish what a tracker killed mid-transaction left under namespace
    ``root``: roll back each infofile's hot journal (readers open infofiles
    read-only and cannot, so until then they fail with "attempt to write a
    readonly database"), and remove half-created infofiles
    (``.st-creating-*``). Run by the tracker before it serves.

    Returns
    -------
    (infofiles rolled back, temporary files removed)
    """
    rolled = removed = 0
    for journal in root.rglob("*-journal"):
        db = journal.with_name(journal.name[: -len("-journal")])
        if db.is_file():
            conn = sqlite3.connect(str(db), isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout=10000")
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # rolls the journal back
                rolled += 1
            finally:
                conn.close()
    for tmp in root.rglob(".st-creating-*"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return rolled, removed


PENDING_COPIES_SQL = (
    "CREATE TABLE IF NOT EXISTS pending_copies(name TEXT NOT NULL, copy_rank INTEGER NOT NULL, "
    "peer_idx INTEGER NOT NULL, since INTEGER NOT NULL, PRIMARY KEY(name, copy_rank)) "
    "WITHOUT ROWID"
)

QUARANTINED_COPIES_SQL = (
    "CREATE TABLE IF NOT EXISTS quarantined_copies(name TEXT NOT NULL, copy_rank INTEGER NOT NULL, "
    "peer_idx INTEGER NOT NULL, since INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY(name, copy_rank)) "
    "WITHOUT ROWID"
)


OBJECTS_SQL = (
    "CREATE TABLE IF NOT EXISTS objects(name TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "stripe_size INTEGER NOT NULL, stripes INTEGER NOT NULL, crc32c INTEGER NOT NULL, "
    "commit_seq INTEGER NOT NULL, committed_at REAL NOT NULL) WITHOUT ROWID"
)

USER_META_SQL = (
    "CREATE TABLE IF NOT EXISTS user_meta(name TEXT NOT NULL, commit_seq INTEGER NOT NULL, "
    "meta BLOB NOT NULL, PRIMARY KEY(name, commit_seq)) WITHOUT ROWID"
)

COMMIT_REQUESTS_SQL = (
    "CREATE TABLE IF NOT EXISTS commit_requests(request_id TEXT PRIMARY KEY, "
    "generation INTEGER NOT NULL, at REAL NOT NULL) WITHOUT ROWID; "
    "CREATE INDEX IF NOT EXISTS commit_requests_by_time ON commit_requests(at)"
)
# How long a Commit request's id is remembered: far beyond the client's retries (30 s per outage).
COMMIT_REQUEST_TTL_S = 3600.0
# How long history no snapshot holds is kept (the tracker's --history-age;
# docs/snapshots.md, "Retention"): the peers' default --scrub-age, so a
# GET_LOCAL planned before a change finds the copies it was given.
DEFAULT_HISTORY_AGE_S = 3600.0
PRUNE_EVERY_S = 60.0  # history is pruned by a write at most this often


class SnapshotExistsError(Exception):
    """A snapshot of that name exists already in the file."""


class NoSuchSnapshotError(Exception):
    """The file has no snapshot of that name."""


def _carry_unstored(c: sqlite3.Connection, gen: int, where: str, args: list) -> None:
    """The pending and quarantined copies of the records named by ``name
    {where}`` (``args``), whose current versions end at ``gen`` (replaced or
    deleted), stay in the copy model as their past versions' unstored copies
    (``retained_unstored``), so ``status`` counts and ``repair`` restores
    them as long as the version is kept (docs/snapshots.md, "Maintenance")."""
    for table, state in (("quarantined_copies", "quarantined"), ("pending_copies", "pending")):
        c.execute(
            "INSERT OR REPLACE INTO retained_unstored(name, until, copy_rank, peer_idx, since, state) "
            f"SELECT t.name, ?, t.copy_rank, t.peer_idx, t.since, ? FROM {table} t JOIN records r ON r.name = t.name "
            f"WHERE t.name {where} AND r.commit_seq < ?",
            [gen, state, *args, gen],
        )


def _retained_to_history(c: sqlite3.Connection, name: str, until: int, rank: int, gen: int) -> None:
    """The holder of copy ``rank`` of the kept version ``(name, until)``
    stops holding it at ``gen`` (moved away, or quarantined): its row goes
    to ``copy_history`` tagged with the version (``retained_until``), so the
    peers' reads planned before ``gen`` still find it."""
    c.execute(
        "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at, retained_until) "
        "SELECT name, copy_rank, peer_idx, since, ?, stored_as, ?, until FROM retained_copies "
        "WHERE name = ? AND until = ? AND copy_rank = ?",
        (gen, _now(), name, until, rank),
    )


def _stripes_of_committed_objects(c: sqlite3.Connection, names: list[str]) -> list[str]:
    """The stripe records among ``names`` whose object has a row in the
    ``objects`` table and is not itself among ``names``, in their order."""
    stripes = [n for n in names if n.startswith(STRIPE_PREFIX)]
    if not stripes:
        return []
    asked = set(names)
    objs = {n[len(STRIPE_PREFIX) :].rpartition("/")[0] for n in stripes}
    objs -= asked
    if not objs:
        return []
    have: set[str] = set()
    ordered = sorted(objs)
    for i in range(0, len(ordered), 500):
        chunk = ordered[i : i + 500]
        try:
            rows = c.execute(f"SELECT name FROM objects WHERE name IN ({','.join('?' * len(chunk))})", chunk)
        except sqlite3.OperationalError:  # a file made before striping: no object committed
            return []
        have.update(r[0] for r in rows)
    return [n for n in stripes if n[len(STRIPE_PREFIX) :].rpartition("/")[0] in have] if have else []


def _set_generation(c: sqlite3.Connection, gen: int) -> None:
    """Make ``gen`` the file's generation and log when (the generation log,
    docs/snapshots.md), inside the caller's transaction."""
    c.execute("UPDATE meta SET value=? WHERE key='generation'", (gen,))
    c.execute("INSERT OR REPLACE INTO generations(generation, at) VALUES (?, ?)", (gen, _now()))


_HELD = HELD  # a past version v is held by a snapshot taken while it was current

VERSION_COLUMNS = (
    ("records", "version", "INTEGER NOT NULL DEFAULT 0"),
    ("records", "stored_as", "TEXT"),
    ("copy_history", "stored_as", "TEXT"),
    ("copy_history", "until_at", "REAL"),
    ("records", "schema_id", "INTEGER"),
    ("objects", "schema_id", "INTEGER"),
    ("records", "logical_size", "INTEGER"),
    ("copy_history", "retained_until", "INTEGER"),
)

SCHEMAS_SQL = (
    "CREATE TABLE IF NOT EXISTS schemas(schema_id INTEGER PRIMARY KEY, format TEXT NOT NULL, "
    "schema BLOB NOT NULL, UNIQUE(format, schema)); "
    "CREATE INDEX IF NOT EXISTS records_by_schema ON records(schema_id)"
)


def _key_copy_history(conn: sqlite3.Connection) -> None:
    """Give ``copy_history`` of a file made before it had one its key
    ``hist_id`` (the rowid, kept), in one transaction: SQLite sessions
    track only tables with a primary key (docs/metadata-log.md). Readers
    name the columns they read, so ``meta.format_version`` stays."""
    cols = [r[1] for r in conn.execute("PRAGMA table_info(copy_history)")]
    if "hist_id" in cols:
        return
    create = SCHEMA[SCHEMA.index("CREATE TABLE copy_history(") :]
    create = create[: create.index("\n);") + 3].replace("copy_history(", "copy_history_keyed(", 1)
    names = ", ".join(cols)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(create)
        conn.execute(f"INSERT INTO copy_history_keyed(hist_id, {names}) SELECT rowid, {names} FROM copy_history")
        conn.execute("DROP TABLE copy_history")
        conn.execute("ALTER TABLE copy_history_keyed RENAME TO copy_history")
        conn.execute("CREATE INDEX copy_history_by_peer ON copy_history(peer_idx, name)")
        conn.execute("CREATE INDEX copy_history_by_peer_until ON copy_history(peer_idx, until)")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class InfofileWriter:
    """The tracker's read-write handle on one infofile.

    Each transaction applied from the metadata log leaves its changes as a
    SQLite changeset in :attr:`window` (st_py/tracker/changeset_window.py),
    for copies of the infofile to catch up by (FetchInfofile)."""

    def __init__(self, path: Path):
        self.path = path
        if not path.is_file():
            raise FileNotFoundError(path)
        self.conn = _connect_rw(path)
        # Files made before async protocols, striping or versions existed lack these.
        self.conn.execute(PENDING_COPIES_SQL)
        self.conn.execute(QUARANTINED_COPIES_SQL)
        self.conn.execute(OBJECTS_SQL)
        self.conn.execute(USER_META_SQL)
        self.conn.executescript(COMMIT_REQUESTS_SQL)
        for table, column, decl in VERSION_COLUMNS:
            have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        self.conn.executescript(SCHEMAS_SQL)
        had_retained = self._has_table("retained_copies")
        had_history = self._has_table("record_history")
        self.conn.executescript(HISTORY_SQL)
        # the peers' reads as of a generation use it (st_core/src/infofile.cc)
        self.conn.execute("CREATE INDEX IF NOT EXISTS copy_history_by_peer_until ON copy_history(peer_idx, until)")
        # history (docs/snapshots.md) is whole from the generation a file has the tables
        self.conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) SELECT 'history_from', value FROM meta WHERE key = 'generation'"
        )
        self.history_age = DEFAULT_HISTORY_AGE_S
        # when history was last pruned, kept in meta so a replay prunes where the first apply did
        self._pruned_at = float(self._meta_value("pruned_at", 0.0))
        # the index of the metadata log's last operation applied here (meta.log_index, written
        # in the transaction that applied it: docs/metadata-log.md, "The apply loop"); None
        # while no operation is being applied
        self.log_index = int(self._meta_value("log_index", 0))
        # which log that index is of (meta.log_id): an index of another log (the local log
        # before --etcd, a state folder made again) says nothing of this one's entries
        self.log_id = str(self._meta_value("log_id", ""))
        self._applying: tuple[int, str] | None = None
        # (names, bytes) as :meth:`stats` counts them, kept up to date by the
        # plain group commits of this writer (the infofile's only one) so a
        # quota check per commit does not sum 10^6 sizes; None: count again.
        self._stats: tuple[int, int] | None = None
        self._delta: tuple[int, int] | None = None  # this transaction's change, if exactly known
        if had_history and not had_retained:
            self._migrate_to_retained_copies()
        _key_copy_history(self.conn)
        # the changesets of the transactions applied from the log (issue 40): the window
        # starts here, after every change of the schema
        self._schema_version = self._schema_cookie()
        self.window = Window(schema_fingerprint(self.conn))
        self._capture = capturer(self.conn, str(path)) if self.window.enabled else None
        # whether any copy of this file is kept now (changeset_window.CopyDemand): set by the
        # tracker; a writer made elsewhere (tools, benchmarks) captures every transaction
        self.copies_wanted: Callable[[], bool] = lambda: True

    def _schema_cookie(self) -> int:
        return int(self.conn.execute("PRAGMA schema_version").fetchone()[0])

    def _has_table(self, table: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
            is not None
        )

    def _migrate_to_retained_copies(self) -> None:
        """A file with history but made before ``retained_copies`` kept each
        past version's last holders in ``copy_history``: move them there, in
        one transaction (left in copy_history a version would be lost to
        plans made after it ended; copied without the delete, revealed
        twice)."""
        with self._transaction() as c:
            c.execute(
                "INSERT OR IGNORE INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
                "SELECT h.name, h.until, h.copy_rank, h.peer_idx, h.since, h.stored_as FROM copy_history h "
                "JOIN record_history v ON v.name = h.name AND v.until = h.until "
                "AND coalesce(v.stored_as, v.name) = coalesce(h.stored_as, h.name)"
            )
            c.execute(
                "DELETE FROM copy_history WHERE EXISTS (SELECT 1 FROM record_history v "
                "WHERE v.name = copy_history.name AND v.until = copy_history.until "
                "AND coalesce(v.stored_as, v.name) = coalesce(copy_history.stored_as, copy_history.name))"
            )

    def meta(self) -> dict:
        """The infofile's meta table as a dict of strings."""
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def _meta_value(self, key: str, default):
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None or row[0] is None else row[0]

    def position(self, log_id: str) -> int:
        """The index of the last entry of log ``log_id`` applied here (0:
        none, or the infofile's index is of another log)."""
        return self.log_index if self.log_id == log_id else 0

    @contextlib.contextmanager
    def applying(self, index: int, at: float, log_id: str):
        """Apply the operation ``index`` of log ``log_id``, proposed at
        ``at`` (unix s), in this block, in this thread: the writer's
        transactions read ``at`` as the time and record ``index`` and
        ``log_id`` as ``meta.log_index`` and ``meta.log_id`` in the same
        transaction (etcd's consistent index), so applying is idempotent by
        log position (st_py/tracker/apply/applier.py)."""
        self._applying = (index, log_id)
        try:
            with clock_at(at):
                yield self
        finally:
            self._applying = None

    @contextlib.contextmanager
    def _transaction(self):
        """One write transaction (BEGIN IMMEDIATE: the write lock at once);
        rolled back if the block raises."""
        c = self.conn
        self._delta = None  # unknown unless the transaction says (see _commit)
        c.execute("BEGIN IMMEDIATE")
        session = (
            self._capture.begin()
            if self._capture is not None and self._applying is not None and self.copies_wanted()
            else None
        )
        kept: tuple[int, bytes] | None = None
        try:
            yield c
            if self._applying is not None:
                c.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                    [("log_index", self._applying[0]), ("log_id", self._applying[1])],
                )
            if session is not None:
                kept = (int(self._meta_value("generation", 0)), session.changeset())
            c.execute("COMMIT")
        except BaseException:
            self._stats = None
            c.execute("ROLLBACK")
            self._pruned_at = float(self._meta_value("pruned_at", 0.0))
            raise
        finally:
            if session is not None:
                session.close()
        self._keep_changes(kept)
        if self._applying is not None:
            self.log_index, self.log_id = self._applying
        if self._stats is not None and self._delta is not None:
            self._stats = (self._stats[0] + self._delta[0], self._stats[1] + self._delta[1])
        else:
            self._stats = None

    def _keep_changes(self, kept: tuple[int, bytes] | None) -> None:
        """Keep a committed transaction's changeset in the window; one not
        captured (outside the log) or after a change of the schema empties it."""
        if self._capture is None:
            return
        cookie = self._schema_cookie()
        if kept is None or cookie != self._schema_version or self._applying is None:
            if cookie != self._schema_version:
                self._schema_version = cookie
                self.window = Window(schema_fingerprint(self.conn), self.window.max_bytes, self.window.max_age_s)
            self.window.reset()
            return
        prev = self.position(self._applying[1])
        self.window.add(prev, self._applying[0], kept[0], kept[1], self._applying[1])

    def set_meta(self, values: dict) -> None:
        """Set meta keys (owner, group, mode) in one transaction."""
        with self._transaction() as c:
            c.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(values.items()))

    def commit_requests(
        self, jobs: list[tuple[str, list[tuple]]]
    ) -> tuple[int, set[str], list[tuple[set[str], list[Conflict]]], set[str]]:
        """:meth:`commit` of the records of several Commit requests
        ``(request_id, records)`` in one transaction, each request applied
        at most once: a request whose id was applied before (a client's
        retry after a lost reply) is left out, so a record deleted since
        does not come back. Ids are kept for ``COMMIT_REQUEST_TTL_S``.

        Returns
        -------
        (generation, names newly committed, per request, ids of the requests left out as applied before)
            ``per request``: for each of ``jobs``, in order, ``(names it
            newly committed, its conflicts)``; a name two requests sent is
            the first one's whose record the file holds, a conflict to
            those whose record it does not hold (:func:`_per_request`).
        """
        ids = [rid for rid, _ in jobs if rid]
        with self._transaction() as c:
            done: set[str] = set()
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                done |= {
                    r
                    for (r,) in c.execute(
                        f"SELECT request_id FROM commit_requests WHERE request_id IN ({','.join('?' * len(chunk))})",
                        chunk,
                    )
                }
            records = [r for rid, recs in jobs if not (rid and rid in done) for r in recs]
            self._delta = (0, 0)
            gen, new, conflicts = self._commit(c, records)
            if done:  # a retry's records count as committed where the file holds them as sent
                new |= _held_as_sent(c, [r for rid, recs in jobs if rid in done for r in recs])
            now = _now()
            c.executemany(
                "INSERT OR IGNORE INTO commit_requests(request_id, generation, at) VALUES (?, ?, ?)",
                [(rid, gen, now) for rid in ids if rid not in done],
            )
            c.execute("DELETE FROM commit_requests WHERE at < ?", (now - COMMIT_REQUEST_TTL_S,))
            self._maybe_prune(c)
            per = _per_request(c, jobs, new, conflicts)
        return gen, new, per, done

    def commit(self, records: list[tuple]) -> tuple[int, set[str], list[Conflict]]:
        """Group commit: add ``records`` (name, size, crc32c, peer_idx per copy
        rank[, pending ranks[, stored_as[, (format, schema)[, logical_size[,
        new_only[, user metadata]]]]]]) in one
        transaction (paper 3.5). The ``(format, Arrow IPC schema)`` of a
        record goes to the ``schemas`` table once and the record points to it
        (docs/infofile.md, "Record schemas"). User metadata (bytes of
        :mod:`st_py.core.user_meta`; None or empty: none) goes to
        ``user_meta`` under the version's name and commit_seq.

        A record already committed (or earlier in this batch, which merges
        the requests of several clients) with the same size and CRC counts as
        committed (an idempotent retry); with other content it is a conflict
        (records are write-once, paper 2.1: the first commit wins) and is left
        out.

        A record with ``stored_as`` and ``new_only`` (element 8) is a new
        record stored under a name of its own (docs/snapshots.md): committed
        as any new record, write-once. A record with ``stored_as`` alone is a new version (``put(replace=True)``,
        under the file's writer lease, which the caller checks): it replaces
        the committed one in this transaction, whose copies move to
        ``copy_history`` (``until`` this generation, ``until_at`` now) so
        GET_LOCAL at an older generation still reveals them; or it is
        committed as version 0 if the name is new. The same ``stored_as``
        again is a retry.

        Returns
        -------
        (generation, set of newly committed names, conflicts)
        """
        with self._transaction() as c:
            self._delta = (0, 0)
            out = self._commit(c, records)
            self._maybe_prune(c)
            return out

    def _commit(self, c: sqlite3.Connection, records: list[tuple]) -> tuple[int, set[str], list[Conflict]]:
        """:meth:`commit` inside the caller's transaction."""
        gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]) + 1
        now = _now()
        schema_ids = _schema_ids(c, records, 6)
        if _all_new(c, records):  # the common batch: every record new, nothing in the way
            # A committed name is refused by the primary key rather than looked up first (issue 41):
            # then nothing of the batch stays (a SQLite session leaves rows rolled back to a savepoint
            # out of its changeset) and the record-by-record path below says what each record is.
            c.execute("SAVEPOINT st_all_new")
            try:
                out = self._commit_new(c, records, gen, now, schema_ids)
            except sqlite3.IntegrityError:
                c.execute("ROLLBACK TO st_all_new")
                c.execute("RELEASE st_all_new")
            else:
                c.execute("RELEASE st_all_new")
                return out
        existing: dict[str, tuple[int, int]] = {}
        names = [r[0] for r in records]
        for i in range(0, len(names), 500):
            chunk = names[i : i + 500]
            q = f"SELECT name, size, crc32c FROM records WHERE name IN ({','.join('?' * len(chunk))})"
            for name, size, crc in c.execute(q, chunk):
                existing[name] = (size, crc)
        new_rows: list[tuple] = []
        meta_rows: list[tuple] = []  # (name, commit_seq, user metadata) of the versions that have some
        copy_rows: list[tuple] = []
        conflicts: list[Conflict] = []
        pending_rows: list[tuple] = []

        def is_version(rec: tuple) -> bool:  # a replacement: stored_as, and not new_only
            return len(rec) > 5 and bool(rec[5]) and not (len(rec) > 8 and rec[8])

        versions = [rec for rec in records if is_version(rec)]
        batch = NameTree()  # the new names accepted so far (a name is a record or a folder, not both)
        objects = _has_objects(c)
        known = tree_conflicts(  # the committed names in the way of the new ones: two statements a table
            c,
            [
                r[0]
                for r in records
                if not is_version(r) and r[0] not in existing and not r[0].startswith(RESERVED_PREFIXES)
            ],
            objects,
        )
        for rec in records:
            if is_version(rec):
                continue
            name, size, crc, peer_idx = rec[:4]
            pending = rec[4] if len(rec) > 4 else ()
            old = existing.get(name)
            if old is not None:
                if old != (size, crc):
                    conflicts.append(Conflict(name, "already committed with other content; delete it first"))
                continue
            tree = _tree_conflict(c, name, batch, objects, known)
            if tree is not None:
                conflicts.append(tree)
                continue
            existing[name] = (size, crc)  # a later duplicate in this batch (another client's
            new_rows.append(
                (
                    name,
                    size,
                    crc,
                    gen,
                    now,  # request merged in) is judged against it
                    schema_ids.get(rec[6]) if len(rec) > 6 and rec[6] else None,
                    rec[7] if len(rec) > 7 else None,  # the user's bytes (docs/infofile.md, "Sizes")
                    (rec[5] or None) if len(rec) > 5 else None,  # new_only: a name of its own on the peers
                )
            )
            if len(rec) > 9 and rec[9]:
                meta_rows.append((name, gen, rec[9]))
            for rank, p in enumerate(peer_idx):
                (pending_rows if rank in pending else copy_rows).append((name, rank, p, gen))
        if new_rows:
            insert_rows(c, INSERT_RECORDS, new_rows)
            insert_rows(c, INSERT_COPIES, copy_rows)
            insert_rows(c, INSERT_PENDING, pending_rows)
            insert_rows(c, INSERT_USER_META, meta_rows)
        replaced = self._commit_versions(c, versions, gen, now, schema_ids, conflicts) if versions else set()
        if not versions and self._delta == (0, 0):  # only new records: the change is known exactly
            self._delta = (
                sum(1 for r in new_rows if not r[0].startswith(STRIPE_PREFIX)),
                sum(r[1] for r in new_rows),
            )
        else:
            self._delta = None
        if new_rows or replaced:
            _set_generation(c, gen)
        else:
            gen -= 1
        return gen, {r[0] for r in new_rows} | replaced, conflicts

    def _commit_new(
        self, c: sqlite3.Connection, records: list[tuple], gen: int, now: float, schema_ids: dict
    ) -> tuple[int, set[str], list[Conflict]]:
        """:meth:`_commit` of a batch :func:`_all_new` passed: every record
        is inserted, as the general path would, with no Python work per
        record beyond building its rows (issue 41)."""
        insert_rows(
            c,
            INSERT_RECORDS,
            [(r[0], r[1], r[2], gen, now, schema_ids.get(r[6]) if r[6] else None, r[7], r[5] or None) for r in records],
        )
        if any(r[4] for r in records):  # pending copies (async protocols)
            copy_rows: list[tuple] = []
            pending_rows: list[tuple] = []
            for r in records:
                pending = r[4]
                for rank, p in enumerate(r[3]):
                    (pending_rows if rank in pending else copy_rows).append((r[0], rank, p, gen))
            insert_rows(c, INSERT_PENDING, pending_rows)
        else:
            copy_rows = [(r[0], rank, p, gen) for r in records for rank, p in enumerate(r[3])]
        insert_rows(c, INSERT_COPIES, copy_rows)
        insert_rows(c, INSERT_USER_META, [(r[0], gen, r[9]) for r in records if r[9]])
        # no stripe among them (_all_new): every one is a name of the file
        self._delta = (len(records), sum([r[1] for r in records])) if self._delta == (0, 0) else None
        if records:
            _set_generation(c, gen)
        else:
            gen -= 1
        return gen, {r[0] for r in records}, []

    @staticmethod
    def _commit_versions(
        c: sqlite3.Connection, versions: list[tuple], gen: int, now: float, schema_ids: dict, conflicts: list
    ) -> set[str]:
        """The new versions of :meth:`commit`, in order; returns their names.
        A new name that is a folder or below a record goes to ``conflicts``."""
        done: set[str] = set()
        for rec in versions:
            name, size, crc, peer_idx, pending, stored_as = rec[:6]
            sid = schema_ids.get(rec[6]) if len(rec) > 6 and rec[6] else None
            logical = rec[7] if len(rec) > 7 else None
            old = c.execute("SELECT version, coalesce(stored_as, name) FROM records WHERE name = ?", (name,)).fetchone()
            if old is not None and old[1] == stored_as:
                continue  # this version is committed: a retry
            if old is None:  # a new name (a replacement of a record is never a tree conflict)
                tree = _tree_conflict(c, name, NameTree(), True)  # the batch's new rows are inserted
                if tree is not None:
                    conflicts.append(tree)
                    continue
            if old is not None:  # the version it replaces becomes history (docs/snapshots.md)
                c.execute(
                    "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, committed_at, "
                    "schema_id, logical_size, until, until_at) SELECT name, version, stored_as, size, crc32c, "
                    "commit_seq, committed_at, schema_id, logical_size, ?, ? FROM records "
                    "WHERE name = ? AND commit_seq < ?",
                    (gen, now, name, gen),
                )
            if old is None:
                c.execute(
                    "INSERT INTO records(name, size, crc32c, commit_seq, committed_at, version, stored_as, "
                    "schema_id, logical_size) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?)",
                    (name, size, crc, gen, now, stored_as, sid, logical),
                )
            else:
                # its copies stay where they are, as the replaced version's
                # current holders (retained_copies: moved like copies)
                c.execute(
                    "INSERT INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
                    "SELECT c.name, ?, c.copy_rank, c.peer_idx, c.since, r.stored_as FROM copies c "
                    "JOIN records r ON r.name = c.name WHERE c.name = ? AND r.commit_seq < ?",
                    (gen, name, gen),
                )
                _carry_unstored(c, gen, "= ?", [name])
                c.execute("DELETE FROM copies WHERE name = ?", (name,))
                c.execute("DELETE FROM pending_copies WHERE name = ?", (name,))
                c.execute("DELETE FROM quarantined_copies WHERE name = ?", (name,))
                c.execute(
                    "UPDATE records SET size = ?, crc32c = ?, commit_seq = ?, committed_at = ?, "
                    "version = ?, stored_as = ?, schema_id = ?, logical_size = ? WHERE name = ?",
                    (size, crc, gen, now, old[0] + 1, stored_as, sid, logical, name),
                )
            if len(rec) > 9 and rec[9]:  # the new version's user metadata (the old one's stays with it)
                c.execute("INSERT INTO user_meta(name, commit_seq, meta) VALUES (?, ?, ?)", (name, gen, rec[9]))
            for rank, p in enumerate(peer_idx):
                table = "pending_copies" if rank in pending else "copies"
                c.execute(
                    f"INSERT INTO {table}(name, copy_rank, peer_idx, since) VALUES (?, ?, ?, ?)", (name, rank, p, gen)
                )
            done.add(name)
        if done:
            c.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('format_version', ?)", (FORMAT_VERSION_VERSIONS,)
            )
        return done

    def store_copies(self, stored: list[tuple]) -> tuple[int, int, list[Conflict]]:
        """Pending copies (async protocols) and good copies in place of
        quarantined ones are now stored: each ``(name, copy_rank, peer_idx)``
        leaves ``pending_copies`` (or ``quarantined_copies``) and joins
        ``copies`` from the new generation on, so GET and GET_LOCAL start
        using it. The holder may differ from the pending one (its writer or
        repair put it on a spare). Already stored there: an idempotent retry.

        A copy is a conflict (left out) when its record is gone or has no
        such pending copy, the holder already holds another copy of the
        record (invariant 3), or (with a fourth element, ``stored_as``; ""
        for the record's name) the record was replaced by another version
        meanwhile.

        Returns
        -------
        (generation, copies now stored, conflicts)
        """
        with self._transaction() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]) + 1
            npeers = int(c.execute("SELECT count(*) FROM peers").fetchone()[0])
            done, conflicts = 0, []
            for item in stored:
                name, rank, peer = item[:3]
                if len(item) > 3 and self._other_version(c, name, item[3]):
                    conflicts.append(Conflict(name, "replaced by a newer version meanwhile"))
                    continue
                held = dict(c.execute("SELECT copy_rank, peer_idx FROM copies WHERE name = ?", (name,)))
                pending = dict(c.execute("SELECT copy_rank, peer_idx FROM pending_copies WHERE name = ?", (name,)))
                quarantined = dict(
                    c.execute("SELECT copy_rank, peer_idx FROM quarantined_copies WHERE name = ?", (name,))
                )
                for r, p in quarantined.items():  # a rank is pending or quarantined, never both
                    pending.setdefault(r, p)
                if held.get(rank) == peer:
                    continue  # stored before: a retry
                if rank not in pending:
                    conflicts.append(
                        Conflict(name, f"copy rank {rank} is not pending (record deleted, or stored elsewhere)")
                    )
                elif (
                    peer in held.values()
                    or peer in {p for r, p in pending.items() if r != rank}
                    or not 0 <= peer < npeers
                ):
                    conflicts.append(
                        Conflict(
                            name,
                            f"peer {peer} cannot take copy rank {rank}: it holds "
                            "another copy or is not in the peerlist",
                        )
                    )
                else:
                    c.execute("DELETE FROM pending_copies WHERE name = ? AND copy_rank = ?", (name, rank))
                    c.execute("DELETE FROM quarantined_copies WHERE name = ? AND copy_rank = ?", (name, rank))
                    c.execute(
                        "INSERT INTO copies(name, copy_rank, peer_idx, since) VALUES (?, ?, ?, ?)",
                        (name, rank, peer, gen),
                    )
                    done += 1
            if done:
                _set_generation(c, gen)
            else:
                gen -= 1
        return gen, done, conflicts

    def commit_objects(self, objects: list[tuple]) -> tuple[int, int, list[Conflict]]:
        """Make striped objects ``(name, size, stripe_size, stripes, crc32c[,
        (format, schema)[, user metadata]])`` visible, in one transaction: an object is committed only if every
        one of its stripe records is (docs/striping.md). Names are write-once
        across records and objects; the same object again is a retry.

        Returns
        -------
        (generation, objects newly committed, conflicts)
        """
        with self._transaction() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]) + 1
            added, conflicts = _insert_objects(c, objects, gen, _now())
            if added:
                _set_generation(c, gen)
            else:
                gen -= 1
        return gen, added, conflicts

    def delete_records(self, names: list[str]) -> tuple[int, int, int, list[str]]:
        """Remove records and their copies. Returns (generation, removed,
        bytes removed (one copy), kept).

        ``kept``: the stripe records of ``names`` (:func:`stripe_name`) not
        removed because their object is committed and not in ``names``
        itself: an object's stripes go only after (or with) its row, so a
        writer clearing the stripes a dead writer left under a name never
        takes those of an object another writer committed meanwhile
        (docs/striping.md, "Stripes a writer left"). Decided inside the
        transaction from the infofile alone, so a replay of the log keeps
        the same ones."""
        with self._transaction() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]) + 1
            kept = _stripes_of_committed_objects(c, names)
            if kept:
                held = set(kept)
                names = [n for n in names if n not in held]
            removed, nbytes = self._delete(c, names, gen)
            _set_generation(c, gen)
            self._maybe_prune(c)
        return gen, removed, nbytes, kept

    def commit_replacing(
        self,
        records: list[tuple],
        names: list[str],
        request_id: str = "",
        replace_all: bool = False,
        objects: list[tuple] | tuple = (),
    ) -> tuple[int, set[str], list[Conflict], int, int]:
        """In one transaction: remove the committed records and objects
        ``names`` (an object with its stripe records; with ``replace_all``,
        every record and object the file holds), then commit ``records`` as
        :meth:`commit` does, then the striped ``objects`` as
        :meth:`commit_objects` does. Readers see the file before or after, never
        between (a write job's ``mode="overwrite"``; a record or object
        replaced by an object, or an object by a record: docs/striping.md,
        "Replacing an object"). With ``objects``, a conflict of any record
        or object commits nothing (the transaction's changes are rolled
        back; the conflicts are returned). A ``request_id``
        applied before (a retry after a lost reply) changes nothing and
        answers with the records of ``records`` the file holds as they were
        sent, as :meth:`commit_requests` does.

        Returns
        -------
        (generation, names newly committed, conflicts, names removed, bytes removed (one copy))
        """
        with self._transaction() as c:
            if request_id:
                row = c.execute("SELECT generation FROM commit_requests WHERE request_id = ?", (request_id,)).fetchone()
                if row is not None:
                    gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
                    return gen, _held_as_sent(c, records), [], 0, 0
            if replace_all:
                names = [n for (n,) in c.execute("SELECT name FROM records") if not n.startswith(STRIPE_PREFIX)]
                try:
                    names += [n for (n,) in c.execute("SELECT name FROM objects")]
                except sqlite3.OperationalError:  # a file made before striping
                    pass
            objs: list[str] = []
            for i in range(0, len(names), 500):
                chunk = names[i : i + 500]
                try:
                    objs += [
                        o
                        for (o,) in c.execute(
                            f"SELECT name FROM objects WHERE name IN ({','.join('?' * len(chunk))})", chunk
                        )
                    ]
                except sqlite3.OperationalError:  # a file made before striping
                    break
            stripes = (
                [
                    n
                    for (n,) in c.execute(
                        "SELECT name FROM records WHERE substr(name, 1, ?) = ?", (len(STRIPE_PREFIX), STRIPE_PREFIX)
                    )
                    if n[len(STRIPE_PREFIX) :].rpartition("/")[0] in set(objs)
                ]
                if objs
                else []
            )
            before = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
            gen = before + 1
            if objects:  # all or nothing: rolled back to here on any conflict
                c.execute("SAVEPOINT st_replacing")
            removed, nbytes = self._delete(c, list(names) + stripes, gen)
            # The new records at the same generation the old names leave at (their history's
            # `until`): a read as of any generation finds the old version or the new one, never
            # neither (before, the removal took a generation of its own).
            committed_at, new, conflicts = self._commit(c, records)
            added, refused = _insert_objects(c, list(objects), gen, _now()) if objects else (0, [])
            if objects and (conflicts or refused):
                c.execute("ROLLBACK TO st_replacing")
                c.execute("RELEASE st_replacing")
                return before, set(), conflicts + refused, 0, 0
            if objects:
                c.execute("RELEASE st_replacing")
                new = new | {o[0] for o in objects}
            if committed_at < gen:  # nothing of `records` new
                if removed or added:
                    _set_generation(c, gen)
                else:
                    gen = before  # nothing changed
            if request_id:
                c.execute(
                    "INSERT OR IGNORE INTO commit_requests(request_id, generation, at) VALUES (?, ?, ?)",
                    (request_id, gen, _now()),
                )
        return gen, new, conflicts, removed - len(stripes), nbytes  # names: an object once, not its stripes

    @staticmethod
    def _delete(c: sqlite3.Connection, names: list[str], gen: int) -> tuple[int, int]:
        """Remove ``names`` (records, objects' rows) with their copies inside
        the caller's transaction, at generation ``gen``; (records and
        objects removed, bytes freed: one copy, less what snapshots hold
        and keep retained). What is removed becomes history
        (docs/snapshots.md): the records' rows go to ``record_history`` and
        objects' to ``object_history`` (``until = gen``), their copies' rows
        to ``copy_history``, so a read as of an older generation still finds
        them while they are retained."""
        removed = nbytes = 0
        now = _now()
        for i in range(0, len(names), 500):
            chunk = names[i : i + 500]
            marks = ",".join("?" * len(chunk))
            # freed: what no snapshot holds (a snapshot taken since its commit keeps it retained)
            nbytes += int(
                c.execute(
                    f"SELECT coalesce(sum(size), 0) FROM records WHERE name IN ({marks}) AND NOT EXISTS "
                    "(SELECT 1 FROM snapshots s WHERE s.generation >= records.commit_seq)",
                    chunk,
                ).fetchone()[0]
            )
            c.execute(
                "INSERT OR REPLACE INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
                "committed_at, schema_id, logical_size, until, until_at) SELECT name, version, stored_as, size, "
                f"crc32c, commit_seq, committed_at, schema_id, logical_size, ?, ? FROM records WHERE name IN ({marks}) "
                "AND commit_seq < ?",
                [gen, now, *chunk, gen],
            )
            c.execute(
                "INSERT INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
                "SELECT c.name, ?, c.copy_rank, c.peer_idx, c.since, r.stored_as FROM copies c "
                f"JOIN records r ON r.name = c.name WHERE c.name IN ({marks}) AND r.commit_seq < ?",
                [gen, *chunk, gen],
            )
            _carry_unstored(c, gen, f"IN ({marks})", chunk)
            removed += c.execute(f"DELETE FROM records WHERE name IN ({marks})", chunk).rowcount
            c.execute(f"DELETE FROM copies WHERE name IN ({marks})", chunk)
            c.execute(f"DELETE FROM pending_copies WHERE name IN ({marks})", chunk)
            c.execute(f"DELETE FROM quarantined_copies WHERE name IN ({marks})", chunk)
            c.execute(
                "INSERT OR REPLACE INTO object_history(name, size, stripe_size, stripes, crc32c, commit_seq, "
                "committed_at, schema_id, until, until_at) SELECT name, size, stripe_size, stripes, crc32c, "
                f"commit_seq, committed_at, schema_id, ?, ? FROM objects WHERE name IN ({marks}) AND commit_seq < ?",
                [gen, now, *chunk, gen],
            )
            removed += c.execute(f"DELETE FROM objects WHERE name IN ({marks})", chunk).rowcount
        return removed, nbytes

    # -- history and snapshots (docs/snapshots.md) ----------------------------------
    def _maybe_prune(self, c: sqlite3.Connection) -> None:
        """:meth:`prune` inside the caller's transaction, at most every
        ``PRUNE_EVERY_S`` seconds."""
        now = _now()
        if now - self._pruned_at >= min(PRUNE_EVERY_S, self.history_age):
            self._pruned_at = now
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('pruned_at', ?)", (now,))
            self._prune(c, now - self.history_age)

    def prune(self, older_than: float | None = None) -> int:
        """Drop the history no snapshot holds that ended before
        ``older_than`` (unix s; default ``history_age`` ago), in one
        transaction; ``meta.history_from`` moves past what went. Returns the
        past versions dropped. Their copies are then uncommitted on the
        peers, whose scrubbers remove them after ``--scrub-age``."""
        with self._transaction() as c:
            return self._prune(c, _now() - self.history_age if older_than is None else older_than)

    @staticmethod
    def _prune(c: sqlite3.Connection, cutoff: float) -> int:
        held = _HELD.format(v="record_history")
        (end,) = c.execute(
            f"SELECT max(until) FROM record_history WHERE until_at < ? AND NOT {held}", (cutoff,)
        ).fetchone()
        # a past version's copies go with it: the peers then scrub them as uncommitted
        c.execute(
            f"DELETE FROM retained_copies WHERE EXISTS (SELECT 1 FROM record_history WHERE "
            f"record_history.name = retained_copies.name AND record_history.until = retained_copies.until "
            f"AND until_at < ? AND NOT {held})",
            (cutoff,),
        )
        c.execute(
            f"DELETE FROM retained_unstored WHERE EXISTS (SELECT 1 FROM record_history WHERE "
            f"record_history.name = retained_unstored.name AND record_history.until = retained_unstored.until "
            f"AND until_at < ? AND NOT {held})",
            (cutoff,),
        )
        # and so does its user metadata (the row of the same name and commit_seq)
        for table in ("record_history", "object_history"):
            c.execute(
                f"DELETE FROM user_meta WHERE EXISTS (SELECT 1 FROM {table} WHERE {table}.name = user_meta.name "
                f"AND {table}.commit_seq = user_meta.commit_seq AND until_at < ? AND NOT {_HELD.format(v=table)})",
                (cutoff,),
            )
        dropped = c.execute(f"DELETE FROM record_history WHERE until_at < ? AND NOT {held}", (cutoff,)).rowcount
        c.execute(
            f"DELETE FROM object_history WHERE until_at < ? AND NOT {_HELD.format(v='object_history')}", (cutoff,)
        )
        # holders a copy was moved off (of current or past versions): only plans
        # made before the move read them, within --history-age
        c.execute("DELETE FROM copy_history WHERE until_at < ?", (cutoff,))
        if end is not None:
            c.execute("UPDATE meta SET value = max(CAST(value AS INTEGER), ?) WHERE key = 'history_from'", (int(end),))
        return int(dropped)

    def create_snapshot(self, name: str, owner: str = "") -> tuple[str, int, float]:
        """Pin the file's committed generation as snapshot ``name`` (O(1): one
        row; docs/snapshots.md). The file becomes format 4, which peers that
        do not keep snapshots' copies refuse.

        Returns
        -------
        (name, generation, created_at)

        Raises
        ------
        SnapshotExistsError
        """
        now = _now()
        with self._transaction() as c:
            if c.execute("SELECT 1 FROM snapshots WHERE name = ?", (name,)).fetchone() is not None:
                raise SnapshotExistsError(name)
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
            c.execute(
                "INSERT INTO snapshots(name, generation, created_at, owner) VALUES (?, ?, ?, ?)",
                (name, gen, now, owner),
            )
            c.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('format_version', "
                "max(?, coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'format_version'), 0)))",
                (FORMAT_VERSION_HISTORY,),
            )
        return name, gen, now

    def delete_snapshot(self, name: str) -> tuple[str, int, float, int]:
        """Delete snapshot ``name``; what only it held is pruned once older
        than ``history_age`` (at once if so), and the peers' scrubbers then
        reclaim the space.

        Returns
        -------
        (name, generation, created_at, bytes released: one copy) of the snapshot deleted

        Raises
        ------
        NoSuchSnapshotError
        """
        with self._transaction() as c:
            row = c.execute("SELECT name, generation, created_at FROM snapshots WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NoSuchSnapshotError(name)
            before = retained_bytes(c)
            c.execute("DELETE FROM snapshots WHERE name = ?", (name,))
            released = before - retained_bytes(c)
            self._prune(c, _now() - self.history_age)
        return str(row[0]), int(row[1]), float(row[2]), released

    def retained_bytes(self) -> int:
        """Bytes (one copy) of the past versions snapshots hold
        (:func:`st_py.core.history.retained_bytes`): quotas count them."""
        return retained_bytes(self.conn)

    def snapshots(self) -> list[tuple[str, int, float, str]]:
        """``(name, generation, created_at, owner)`` of every snapshot, oldest first."""
        return [
            (str(n), int(g), float(t), str(o))
            for n, g, t, o in self.conn.execute(
                "SELECT name, generation, created_at, owner FROM snapshots ORDER BY generation, name"
            )
        ]

    @staticmethod
    def _other_version(c: sqlite3.Connection, name: str, stored_as: str) -> bool:
        """Record ``name`` is committed under another version than
        ``stored_as`` ("": its name)."""
        row = c.execute("SELECT coalesce(stored_as, name) FROM records WHERE name = ?", (name,)).fetchone()
        return row is not None and row[0] != (stored_as or name)

    def move_copies(self, moves: list[tuple]) -> tuple[int, int, list[Conflict]]:
        """Rebalance (paper 4.4): move copies to new holders in one transaction.

        Each move is ``(name, copy_rank, old_peer_idx, new_peer_idx[,
        stored_as[, until]])``; a record replaced by another version than the one
        copied (``stored_as``, "" for its name) is a conflict. With ``until``
        (not 0) the copy is of the past version of ``name`` that ended at that
        generation (``retained_copies``; docs/snapshots.md), kept for
        snapshots: it moves as a current copy does. The
        old row goes to ``copy_history`` (valid until this generation), so a
        GET_LOCAL at an older generation still sees the old holder and one at
        this generation or later sees only the new one: each record stays
        revealed exactly once (paper 3.7, invariant 2). ``until_at`` (now)
        makes the old holder's scrubber keep its copy ``--scrub-age`` more
        seconds, for readers planned before the move (docs/infofile.md).

        A move is a conflict (left out) when the record is gone, its copy
        rank is no longer held by ``old_peer_idx`` (moved by someone else), or
        the new holder already holds another copy of it (invariant 3).

        Returns
        -------
        (generation, copies moved, conflicts)
        """
        with self._transaction() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]) + 1
            npeers = int(c.execute("SELECT count(*) FROM peers").fetchone()[0])
            moved = 0
            conflicts: list[Conflict] = []
            for move in moves:
                name, rank, old, new = move[:4]
                until = move[5] if len(move) > 5 else 0
                if until:  # a copy of a past version (docs/snapshots.md): its own rows
                    if self._move_retained(c, name, until, rank, old, new, npeers, gen, conflicts):
                        moved += 1
                    continue
                if len(move) > 4 and self._other_version(c, name, move[4]):
                    conflicts.append(Conflict(name, "replaced by a newer version meanwhile"))
                    continue
                rows = dict(c.execute("SELECT copy_rank, peer_idx FROM copies WHERE name = ?", (name,)))
                if rank not in rows:
                    conflicts.append(Conflict(name, f"copy rank {rank} is not committed (record deleted?)"))
                elif rows[rank] != old:
                    conflicts.append(Conflict(name, f"copy rank {rank} is held by peer {rows[rank]}, not {old}"))
                elif new in rows.values() or not 0 <= new < npeers:
                    conflicts.append(
                        Conflict(
                            name,
                            f"peer {new} cannot take copy rank {rank}: it holds another copy or is not in the peerlist",
                        )
                    )
                else:
                    since = c.execute(
                        "SELECT since FROM copies WHERE name = ? AND copy_rank = ?", (name, rank)
                    ).fetchone()[0]
                    c.execute(
                        "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, "
                        "until_at) SELECT ?, ?, ?, ?, ?, stored_as, ? FROM records WHERE name = ?",
                        (name, rank, old, since, gen, _now(), name),
                    )
                    c.execute(
                        "UPDATE copies SET peer_idx = ?, since = ? WHERE name = ? AND copy_rank = ?",
                        (new, gen, name, rank),
                    )
                    moved += 1
            if moved:
                _set_generation(c, gen)
            else:
                gen -= 1
        return gen, moved, conflicts

    @staticmethod
    def _move_retained(
        c: sqlite3.Connection,
        name: str,
        until: int,
        rank: int,
        old: int,
        new: int,
        npeers: int,
        gen: int,
        conflicts: list[Conflict],
    ) -> bool:
        """Move copy ``rank`` of the past version ``(name, until)`` from peer
        ``old`` to ``new`` (its ``retained_copies`` row), the old holder to
        ``copy_history`` for the plans made before this generation; a
        conflict (False) when the version is no longer kept, the rank is
        held elsewhere, or ``new`` holds another of its copies."""
        rows = {
            int(r): (int(p), int(since))
            for r, p, since in c.execute(
                "SELECT copy_rank, peer_idx, since FROM retained_copies WHERE name = ? AND until = ?", (name, until)
            )
        }
        if rank not in rows:
            unstored = c.execute(
                "SELECT peer_idx FROM retained_unstored WHERE name = ? AND until = ? AND copy_rank = ?",
                (name, until, rank),
            ).fetchone()
            if unstored is None or int(unstored[0]) != old:
                conflicts.append(Conflict(name, f"copy rank {rank} of the version replaced at {until} is not kept"))
                return False
            if new in {p for p, _ in rows.values()} or not 0 <= new < npeers:
                conflicts.append(
                    Conflict(name, f"peer {new} cannot take copy rank {rank} of the version replaced at {until}")
                )
                return False
            # repair stored a quarantined or pending copy again (docs/snapshots.md, "Maintenance")
            c.execute(
                "INSERT INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
                "SELECT name, until, ?, ?, ?, stored_as FROM record_history WHERE name = ? AND until = ?",
                (rank, new, gen, name, until),
            )
            c.execute(
                "DELETE FROM retained_unstored WHERE name = ? AND until = ? AND copy_rank = ?", (name, until, rank)
            )
            return True
        if rows[rank][0] != old:
            conflicts.append(Conflict(name, f"copy rank {rank} of that version is held by {rows[rank][0]}, not {old}"))
            return False
        if new in {p for p, _ in rows.values()} or not 0 <= new < npeers:
            conflicts.append(
                Conflict(name, f"peer {new} cannot take copy rank {rank} of the version replaced at {until}")
            )
            return False
        _retained_to_history(c, name, until, rank, gen)
        c.execute(
            "UPDATE retained_copies SET peer_idx = ?, since = ? WHERE name = ? AND until = ? AND copy_rank = ?",
            (new, gen, name, until, rank),
        )
        return True

    @staticmethod
    def _unstore_retained(c: sqlite3.Connection, stored: str, rank: int, idx: int | None, crc: int, gen: int) -> bool:
        """Copy ``rank`` of a kept past version stored as ``stored`` on peer
        ``idx``, found bad by its verifier: its ``retained_copies`` row goes
        to ``retained_unstored`` (quarantined), the holder to
        ``copy_history`` tagged with the version (plans made before this
        generation still list it). False: no such kept copy with that
        CRC-32C."""
        if idx is None:
            return False
        row = c.execute(
            "SELECT k.name, k.until, k.since FROM retained_copies k JOIN record_history v "
            "ON v.name = k.name AND v.until = k.until "
            "WHERE coalesce(k.stored_as, k.name) = ? AND k.copy_rank = ? AND k.peer_idx = ? "
            "AND (v.crc32c & 4294967295) = ?",
            (stored, rank, idx, crc & 0xFFFFFFFF),
        ).fetchone()
        if row is None:
            return False
        name, until, since = row
        _retained_to_history(c, name, until, rank, gen)
        c.execute("DELETE FROM retained_copies WHERE name = ? AND until = ? AND copy_rank = ?", (name, until, rank))
        c.execute(
            "INSERT OR REPLACE INTO retained_unstored(name, until, copy_rank, peer_idx, since, state) "
            "VALUES (?, ?, ?, ?, ?, 'quarantined')",
            (name, until, rank, idx, gen),
        )
        return True

    def unstore_copies(self, bad: list[tuple[str, int, str, int]]) -> tuple[int, int, list[Conflict]]:
        """Copies a peer's verifier found corrupt and quarantined (docs/peer.md,
        "Verifier"): each ``(stored name, copy_rank, peer_id, crc32c)`` leaves
        ``copies`` for ``quarantined_copies`` at the same rank and holder, in
        one transaction, so GET and GET_LOCAL stop using it from the new
        generation and ``repair`` restores it from a good copy (its first
        step), or reports the record lost when no good copy is left
        (:mod:`st_py.core.copy_health`). The old row goes to ``copy_history``, as
        a rebalance move.

        A copy of a version no longer current that is kept
        (``retained_copies``; docs/snapshots.md) leaves it for
        ``retained_unstored`` (state ``quarantined``) the same way.

        A report is left out (a conflict) when the stored name is not the
        record's current version nor a kept one, the copy rank is not
        committed to that peer, or the CRC-32C differs (the copy was
        replaced meanwhile).

        Returns
        -------
        (generation, copies now quarantined, conflicts)
        """
        with self._transaction() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0]) + 1
            peer_idx = {pid: idx for idx, pid in c.execute("SELECT peer_idx, peer_id FROM peers")}
            done, conflicts = 0, []
            for stored, rank, peer_id, crc in bad:
                row = c.execute(
                    "SELECT name, crc32c, stored_as FROM records WHERE name = ? OR stored_as = ?", (stored, stored)
                ).fetchall()
                row = [r for r in row if (r[2] or r[0]) == stored]
                idx = peer_idx.get(peer_id)
                if not row:
                    if self._unstore_retained(c, stored, rank, idx, crc, gen):
                        done += 1
                    else:
                        conflicts.append(Conflict(stored, "not a committed record's current or kept version"))
                    continue
                name, have_crc, _ = row[0]
                held = c.execute(
                    "SELECT peer_idx, since FROM copies WHERE name = ? AND copy_rank = ?", (name, rank)
                ).fetchone()
                if held is None or idx is None or held[0] != idx:
                    conflicts.append(Conflict(name, f"copy rank {rank} is not committed to peer {peer_id}"))
                elif (have_crc & 0xFFFFFFFF) != (crc & 0xFFFFFFFF):
                    conflicts.append(Conflict(name, "the record was stored with another CRC-32C"))
                else:
                    c.execute(
                        "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as) "
                        "SELECT ?, ?, ?, ?, ?, stored_as FROM records WHERE name = ?",
                        (name, rank, idx, held[1], gen, name),
                    )
                    c.execute("DELETE FROM copies WHERE name = ? AND copy_rank = ?", (name, rank))
                    c.execute(
                        "INSERT OR REPLACE INTO quarantined_copies(name, copy_rank, peer_idx, since, at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (name, rank, idx, gen, _now()),
                    )
                    done += 1
            if done:
                _set_generation(c, gen)
            else:
                gen -= 1
        return gen, done, conflicts

    def add_peers(self, peers: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
        """Append peers ``(peer_id, addr)`` not yet in the peerlist; existing
        peer indexes never change. Returns the rows added."""
        with self._transaction() as c:
            have = {pid for (pid,) in c.execute("SELECT peer_id FROM peers")}
            nxt = int(c.execute("SELECT coalesce(max(peer_idx) + 1, 0) FROM peers").fetchone()[0])
            rows = []
            for pid, addr in peers:
                if pid not in have:
                    rows.append((nxt, pid, addr))
                    have.add(pid)
                    nxt += 1
            c.executemany("INSERT INTO peers(peer_idx, peer_id, addr) VALUES (?, ?, ?)", rows)
        return rows

    def committed_among(self, names: list[str]) -> set[str]:
        """Those of ``names`` that are committed records."""
        return {n for (n,) in self.records_among("name", names)}

    def records_among(self, select: str, names: list[str], unheld: bool = False) -> Iterator[tuple]:
        """The rows ``SELECT <select> FROM records`` of the committed records
        among ``names`` (500 names a statement); with ``unheld`` only those
        no snapshot holds (one taken at or after a record's commit holds it:
        what deleting or replacing it frees, docs/snapshots.md "Space")."""
        where = ""
        if unheld:
            try:
                self.conn.execute("SELECT 1 FROM snapshots LIMIT 0")
                where = " AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.generation >= records.commit_seq)"
            except sqlite3.OperationalError:  # a file without the history tables: no snapshot
                pass
        for i in range(0, len(names), 500):
            chunk = names[i : i + 500]
            q = f"SELECT {select} FROM records WHERE name IN ({','.join('?' * len(chunk))}){where}"
            yield from self.conn.execute(q, chunk)

    def stats(self) -> tuple[int, int]:
        """``(names, bytes)``: see :func:`name_stats`. Counted once, then
        carried along by this writer's group commits of new records (an
        exact sum of what each one inserted); any other change (a delete,
        a version, an object, a rolled-back transaction) has it counted
        again at the next call."""
        if self._stats is None:
            self._stats = name_stats(self.conn)
        return self._stats

    def close(self) -> None:
        """Close the SQLite connection."""
        self.conn.close()


def _schema_ids(c: sqlite3.Connection, rows: list[tuple], at: int) -> dict[tuple[str, bytes], int]:
    """The ``schema_id`` of every distinct ``(format, schema)`` at index
    ``at`` of ``rows``, added to the ``schemas`` table if new (inside the
    caller's transaction)."""
    keys = {r[at] for r in rows if len(r) > at and r[at]}
    out: dict[tuple[str, bytes], int] = {}
    for fmt, blob in keys:
        c.execute("INSERT OR IGNORE INTO schemas(format, schema) VALUES (?, ?)", (fmt, blob))
        out[(fmt, blob)] = int(
            c.execute("SELECT schema_id FROM schemas WHERE format = ? AND schema = ?", (fmt, blob)).fetchone()[0]
        )
    return out
