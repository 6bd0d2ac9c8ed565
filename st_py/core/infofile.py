"""The SQLite infofile of one StoreTorrent file: the format, shared by the
client and the tracker, and its read side (format in docs/infofile.md).

This module owns what every reader needs: the format constants, the schema
(``st_py/core/infofile_schema.sql``), the dataclasses of what an infofile holds,
and :class:`InfofileReader`, the read-only handle that clients open for GET
and SQL (as in paper 3.5, where clients run SQLite on the infofile over NFS)
and the tracker uses for its own reads. Nothing here writes an infofile.

The tracker is the only writer: creating infofiles, the group commit, and
the migrations of files made before a table or column existed are in
:mod:`st_py.tracker.infofile_writer` (:class:`InfofileWriter`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from st_py.core import user_meta

FORMAT = "storetorrent-infofile"
FORMAT_VERSION = 2
# A file with a replaced record (docs/infofile.md, "Versions"): peers that do
# not know versions must not read it (they would look for the copies under
# the record's name and could find an older version there).
FORMAT_VERSION_VERSIONS = 3
# A file with a snapshot (docs/snapshots.md): a peer that does not know
# snapshots would let its scrubber remove the copies a snapshot holds.
FORMAT_VERSION_HISTORY = 4

# Where a replaced record's new version is stored on the peers: its own name,
# so the copies of the old and the new version never mix (docs/infofile.md).
VERSION_PREFIX = ".st-version/"

SCHEMA = (Path(__file__).with_name("infofile_schema.sql")).read_text()
"""The infofile's tables (st_py/core/infofile_schema.sql: the one copy, also
compiled into the C++ tests)."""

HISTORY_SQL = (
    SCHEMA[SCHEMA.index("-- Format 4") :]
    .replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
    .replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ")
)
"""The format-4 tables (history and snapshots), as statements that add them
to a file made before them (the part of :data:`SCHEMA` from its "Format 4"
comment on)."""


@dataclass(frozen=True)
class RecordMeta:
    """Committed metadata of one record: its stored size in bytes (after
    the file's filters: what the peers hold and check; users see
    :func:`user_size`), CRC-32C, and the
    peer indexes holding its stored copies in copy-rank order. ``ranks``
    gives each one's copy rank; it is ``0 .. F-1`` unless copies are still
    pending (async protocols), which are left out. ``version`` counts the
    record's replacements (0: never replaced) and ``stored_as`` is the name
    a replaced record's copies are stored under (docs/infofile.md,
    "Versions"). Immutable: may be shared between threads."""

    name: str
    size: int
    crc32c: int
    peers: tuple[int, ...]
    ranks: tuple[int, ...] = ()
    version: int = 0
    stored_as: str | None = None

    @property
    def key(self) -> str:
        """The name its copies are stored under on the peers: the record's
        name, or its version's for a replaced record."""
        return self.stored_as or self.name

    def copies(self) -> dict[int, int]:
        """``{copy_rank: peer_idx}`` of the stored copies."""
        return dict(zip(self.ranks or range(len(self.peers)), self.peers))


@dataclass(frozen=True)
class SchemaGroup:
    """Committed records (and objects) that share one format and schema,
    as kept at write time: ``schema`` is the Arrow IPC serialization
    (:func:`st_py.core.record_format.load_schema`), ``records`` how many,
    ``first`` the first name (by name order) that has it. Immutable."""

    format: str
    schema: bytes
    records: int
    first: str


# The records that hold the stripes of object ``name`` (docs/striping.md);
# names with this prefix are not user records.
STRIPE_PREFIX = ".st-stripe/"
# The stripe records' names are the range [STRIPE_PREFIX, STRIPE_END): one index range in SQL.
STRIPE_END = STRIPE_PREFIX[:-1] + chr(ord(STRIPE_PREFIX[-1]) + 1)


# Record names that are no user's: stripe records and the stored names of
# versions. Listings leave them out, as index ranges [prefix, end).
RESERVED_PREFIXES = (STRIPE_PREFIX, VERSION_PREFIX)


def prefix_upper(prefix: str) -> str:
    """The least string above every string that starts with ``prefix``
    (non-empty): ``a/`` -> ``a0``. Code-point order is the order SQLite
    compares UTF-8 text in."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


RESERVED_RANGES = tuple(sorted((p, prefix_upper(p)) for p in RESERVED_PREFIXES))


def stripe_name(obj: str, index: int) -> str:
    """The record name of stripe ``index`` (0-based) of striped object
    ``obj``: ``.st-stripe/<obj>/<index, 8 digits>`` (docs/striping.md), so
    an object's stripes sort in order and stay out of user listings."""
    return f"{STRIPE_PREFIX}{obj}/{index:08d}"


def stripe_range(obj: str) -> tuple[str, str]:
    """``(lo, hi)``: the record names ``lo <= name < hi`` are exactly the
    stripes of object ``obj`` (:func:`stripe_name`), for a range query."""
    lo = f"{STRIPE_PREFIX}{obj}/"
    return lo, lo[:-1] + "0"  # "0" follows "/"


@dataclass(frozen=True)
class ObjectMeta:
    """A striped object (docs/striping.md; MORRIS, seed 003 section 3):
    ``size`` bytes in ``stripes`` stripes of ``stripe_size`` bytes (the
    last may be shorter), ``crc32c`` the CRC-32C of the whole. Immutable:
    may be shared between threads."""

    name: str
    size: int
    stripe_size: int
    stripes: int
    crc32c: int


@dataclass(frozen=True)
class ObjectVersion:
    """One version of a striped object with its stripes' records, as one
    read of the infofile found them (:func:`object_version`): what a reader
    fetches the stripes of, by their stored names (``stripes[i].key``), so
    that a replacement committed while it reads (docs/striping.md,
    "Replacing an object") does not mix two versions' stripes. A stripe
    with no committed record is None. Immutable: may be shared between
    threads."""

    obj: ObjectMeta
    stripes: tuple[RecordMeta | None, ...]


def one_state(reader):
    """A read transaction of ``reader`` (an :class:`InfofileReader` of the
    current state: its queries inside see one commit), or nothing: a view
    of a past generation does not change, and a transaction already open
    is the caller's."""
    rt = getattr(reader, "read_transaction", None)
    if rt is None or reader.conn.in_transaction:
        return contextlib.nullcontext()
    return rt()


def object_version(reader, name: str) -> ObjectVersion | None:
    """Object ``name`` and its stripes' records in one snapshot of
    ``reader`` (an :class:`InfofileReader`, in one read transaction, or an
    as-of view, which reads one generation), or None when no object of that
    name is committed."""
    with one_state(reader):
        obj = reader.object(name)
        if obj is None:
            return None
        names = [stripe_name(name, i) for i in range(obj.stripes)]
        metas = reader.lookup_many(names)
    return ObjectVersion(obj, tuple(metas.get(n) for n in names))


def user_size(stored: int, logical: int | None) -> int:
    """A record's ``size`` everywhere users see one (``ls``, fsspec, DuckDB,
    docs/infofile.md "Sizes"): the bytes the user wrote, before the file's
    filters, kept at commit (``records.logical_size``). A record committed
    before they were kept shows its stored size: exact in a file without
    filters, the filtered size otherwise (``stored_size`` says which).
    Quotas and space count stored bytes of every copy."""
    return int(logical) if logical is not None else int(stored)


def name_stats(conn: "sqlite3.Connection | _ReadOnlyConnection") -> tuple[int, int]:
    """``(names, bytes)`` of an infofile: committed records and striped
    objects (one name each, never their stripe records; docs/striping.md),
    and the bytes stored for one copy of each (stripes included, as stored
    after filters)."""
    lo = STRIPE_PREFIX
    hi = STRIPE_END
    n, b = conn.execute(
        "SELECT count(*) FILTER (WHERE NOT (name >= ? AND name < ?)), coalesce(sum(size), 0) FROM records", (lo, hi)
    ).fetchone()
    try:
        n += conn.execute("SELECT count(*) FROM objects").fetchone()[0]
    except sqlite3.OperationalError:  # a file made before striping
        pass
    return int(n), int(b)


def holds_no_record(conn: "sqlite3.Connection | _ReadOnlyConnection") -> bool:
    """Whether an infofile holds no record at all: committed, a stripe of
    an object or a hidden part (an object always has stripe records). What
    a whole-file delete ``if_empty`` (S3 DeleteBucket) asks, live and on a
    replay of the metadata log."""
    return conn.execute("SELECT 1 FROM records LIMIT 1").fetchone() is None


def name_count(conn: "sqlite3.Connection | _ReadOnlyConnection") -> int:
    """The names of :func:`name_stats` without their bytes: whole-table
    ``count(*)`` (SQLite counts an index's pages, not its rows) less the
    stripe records' range of the name index, plus the striped objects.
    About 0.1 ms at 2x10^4 records where :func:`name_stats` (a sum over
    every row) takes several (an S3 listing's List a page, issue 42)."""
    (n,) = conn.execute("SELECT count(*) FROM records").fetchone()
    (s,) = conn.execute(
        "SELECT count(*) FROM records WHERE name >= ? AND name < ?", (STRIPE_PREFIX, STRIPE_END)
    ).fetchone()
    n -= s
    try:
        n += conn.execute("SELECT count(*) FROM objects").fetchone()[0]
    except sqlite3.OperationalError:  # a file made before striping
        pass
    return int(n)


def schema_fingerprint(conn) -> str:
    """A digest (hex) of the tables and indexes of an infofile (``conn`` open
    on it): a changeset made on one applies row for row only to a copy with
    the same fingerprint (issue 40, FetchInfofile)."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:32]


def read_user_meta(conn, name: str, sql: str, args: tuple) -> dict[str, str]:
    """The decoded ``user_meta`` row that the query ``sql`` (one column:
    meta) finds for ``name``, or ``{}``: none, or a file made before the
    table existed. The readers' one decoding of the table (this module's and
    :class:`st_py.core.history.AsOf`'s ``user_meta_of``)."""
    try:
        row = conn.execute(sql, args).fetchone()
    except sqlite3.OperationalError:  # made before user_meta (or objects) existed: none
        return {}
    return user_meta.decode(name, row[0]) if row else {}


def user_bytes(conn: "sqlite3.Connection | _ReadOnlyConnection") -> int:
    """The sum of :func:`user_size` over an infofile's names: records (not
    stripes) and striped objects (their whole size)."""
    try:
        conn.execute("SELECT logical_size FROM records LIMIT 0")
        size = "coalesce(logical_size, size)"
    except sqlite3.OperationalError:  # a file made before logical sizes
        size = "size"
    (b,) = conn.execute(
        f"SELECT coalesce(sum({size}), 0) FROM records WHERE NOT (name >= ? AND name < ?)", (STRIPE_PREFIX, STRIPE_END)
    ).fetchone()
    try:
        b += conn.execute("SELECT coalesce(sum(size), 0) FROM objects").fetchone()[0]
    except sqlite3.OperationalError:  # a file made before striping
        pass
    return int(b)


class _ReadOnlyConnection:
    """A read-only SQLite connection to an infofile that survives a tracker
    killed in the middle of a transaction. Its rollback journal is then hot,
    and a read-only connection cannot roll it back (SQLITE_READONLY_ROLLBACK,
    "attempt to write a readonly database") until a writer opens the file.
    A statement that fails so, outside a transaction, rolls the journal
    back through a short read-write connection when this process may write
    the file (SQLite does it on the first read), else waits for the tracker
    to do it, and runs again on a fresh read-only connection (up to about
    10 s). Everything else is the sqlite3 connection's."""

    def __init__(self, path: Path):
        self._path = path
        self._c = self._open()

    def _open(self) -> sqlite3.Connection:
        # the path escaped in the URI: a '?' or '#' in a file name would end it
        uri = f"file:{quote(str(self._path))}?mode=ro"
        c = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA busy_timeout=10000")
        return c

    def execute(self, sql: str, params=()):
        delay = 0.01
        deadline = time.monotonic() + 10.0
        while True:
            try:
                return self._c.execute(sql, params)
            except sqlite3.OperationalError as e:
                code = getattr(e, "sqlite_errorcode", 0) & 0xFF
                if code != sqlite3.SQLITE_READONLY or self._c.in_transaction or time.monotonic() > deadline:
                    raise
                self._recover()
                time.sleep(delay)
                delay = min(0.5, delay * 2)

    def _recover(self) -> None:
        if os.access(self._path, os.W_OK):
            try:
                rw = sqlite3.connect(self._path, timeout=10)
                try:
                    rw.execute("SELECT count(*) FROM meta").fetchone()  # rolls a hot journal back
                finally:
                    rw.close()
            except sqlite3.Error:
                pass
        self._c.close()
        self._c = self._open()

    def __getattr__(self, name: str):
        return getattr(self._c, name)


class InfofileReader:
    """A read-only handle on an infofile, for clients (GET, listing, SQL;
    paper 3.5: clients read infofiles directly with SQLite) and for the
    tracker's own reads. Each query is one statement (or one read
    transaction), so it sees whole commits only.

    Parameters
    ----------
    path : str or path-like
        The infofile (SQLite; docs/infofile.md).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.

    Thread safety: not safe to use from several threads at once (its
    connection is shared and :meth:`snapshot` opens a transaction on it); it
    may move between threads (the connection does not check the thread).
    An :class:`~st_py.client.file.StFile`'s reader runs under the file's lock.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"infofile {self.path} does not exist")
        self.conn = _ReadOnlyConnection(self.path)

    def meta(self) -> dict:
        """The ``meta`` table as ``{key: value}`` (format, format version,
        file id, generation, ...; docs/infofile.md), values as stored."""
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def generation(self) -> int:
        """The commit generation: bumped by every commit, delete and move
        of copies; a GET_LOCAL plan reveals the records of one generation
        (paper 3.7)."""
        return int(self.conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])

    def counted(self) -> tuple[int, int]:
        """``(generation, records committed at it)`` read in one transaction,
        for a GET_LOCAL plan (peers reveal that generation's records).

        Every record row of a snapshot has ``commit_seq <= generation`` (the
        writer sets the generation in the transaction that adds the rows;
        docs/infofile.md, "Snapshots"), so this is a plain ``count(*)``,
        which SQLite answers from its smallest index (3 ms at 10^6 records,
        where filtering on ``commit_seq`` reads every row: 70 ms)."""
        c = self.conn
        c.execute("BEGIN")
        try:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
            n = int(c.execute("SELECT count(*) FROM records").fetchone()[0])
        finally:
            c.execute("COMMIT")
        return gen, n

    def copies_held_by(self, peer_idxs: list[int]) -> dict[str, RecordMeta]:
        """Committed records with at least one copy on one of ``peer_idxs``."""
        if not peer_idxs:
            return {}
        marks = ",".join("?" * len(peer_idxs))
        names = [
            r[0]
            for r in self.conn.execute(f"SELECT DISTINCT name FROM copies WHERE peer_idx IN ({marks})", list(peer_idxs))
        ]
        return self.lookup_many(names)

    def count_unavailable(self, dead_idxs: list[int], copies: int) -> int:
        """Committed records with no stored copy outside ``dead_idxs``
        (``copies`` is F; a record with pending or quarantined copies has
        fewer stored, and one whose every copy was quarantined has none)."""
        damaged = self.count_pending() + self.count_quarantined()
        if len(dead_idxs) < copies and not damaged:
            return 0  # every record has F stored copies on distinct peers
        marks = ",".join("?" * len(dead_idxs))
        return int(
            self.conn.execute(
                "SELECT count(*) FROM records r WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.name = r.name "
                f"AND c.peer_idx NOT IN ({marks}))",
                list(dead_idxs),
            ).fetchone()[0]
        )

    def exists(self, name: str) -> bool:
        """A committed record or striped object of that name."""
        if self.conn.execute("SELECT 1 FROM records WHERE name = ?", (name,)).fetchone() is not None:
            return True
        return self.object(name) is not None

    def tree_conflict(self, name: str) -> tuple[str, str] | None:
        """The committed record or object that keeps new ``name`` from
        being committed (a name is a record or a folder, never both): see
        :func:`st_py.core.record_names.tree_conflict`. Index lookups."""
        return self.name_state(name)[1]

    def tree_conflicts(self, names: list[str]) -> dict[str, tuple[str, str]]:
        """:meth:`tree_conflict` of many names at once, in two statements a
        table: :func:`st_py.core.record_names.tree_conflicts`."""
        from st_py.core.record_names import tree_conflicts

        return tree_conflicts(self.conn, names, objects=self._has_objects())

    def name_state(self, name: str) -> tuple[bool, tuple[str, str] | None]:
        """Whether ``name`` is committed (record or object), and its tree
        conflict, in one statement: :func:`st_py.core.record_names.name_state`."""
        from st_py.core.record_names import name_state

        return name_state(self.conn, name, objects=self._has_objects())

    def name_states(self, names: list[str]) -> dict[str, tuple[bool, tuple[str, str] | None]]:
        """:meth:`name_state` of many names at once, ``{name: (committed,
        conflict)}`` for every name given, in two statements a table:
        :func:`st_py.core.record_names.name_states`."""
        from st_py.core.record_names import name_states

        return name_states(self.conn, names, objects=self._has_objects())

    _has_versions = False  # the columns exist (once added, they stay)

    def _version_columns(self) -> str:
        """``r.version, r.stored_as``, or constants for a file made before
        versions existed (checked again until found: the tracker adds the
        columns to an open file)."""
        if not self._has_versions:
            try:
                self.conn.execute("SELECT version, stored_as FROM records LIMIT 0")
            except sqlite3.OperationalError:
                return "0, NULL"
            self._has_versions = True
        return "r.version, r.stored_as"

    def lookup(self, name: str) -> RecordMeta | None:
        """The committed metadata of record ``name`` (its current version),
        or None. One statement (a replacement committed meanwhile shows
        whole or not at all), the same text every time (SQLite's statement
        cache keeps it prepared): the per-GET cost."""
        cols = self._version_columns()
        rows = self.conn.execute(
            f"SELECT r.size, r.crc32c, c.copy_rank, c.peer_idx, {cols} FROM records r "
            "JOIN copies c ON c.name = r.name WHERE r.name = ? ORDER BY c.copy_rank",
            (name,),
        ).fetchall()
        if not rows:
            return None
        first = rows[0]
        return RecordMeta(
            name, first[0], first[1], tuple(r[3] for r in rows), tuple(r[2] for r in rows), first[4], first[5]
        )

    def superseded_copies(self, name: str) -> list[tuple[str, int]]:
        """``(stored name, peer index)`` of the copies of record ``name`` kept
        in ``copy_history``: its older versions and copies moved off a
        holder, left on their peers for GET_LOCAL plans of older
        generations until the scrubber removes them (paper 4.4). Deleting
        the record deletes them too."""
        key = "coalesce(stored_as, name)" if self._version_columns() != "0, NULL" else "name"
        return [
            (str(k), int(p))
            for k, p in self.conn.execute(f"SELECT DISTINCT {key}, peer_idx FROM copy_history WHERE name = ?", (name,))
        ]

    def retained_held_by(
        self, peer_idxs: list[int] | None = None, keys: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], RecordMeta]:
        """The past versions kept for snapshots and older readers
        (``retained_copies``; docs/snapshots.md) that have a copy on one of
        ``peer_idxs`` (default: every one), or those of ``keys`` (``(name,
        until)``) that have a stored copy, as ``{(name, until): RecordMeta}``
        with every current holder of each (``peers``, ``ranks``), its size,
        CRC-32C, version and stored name. Empty for a file without them."""
        try:
            if keys is not None:
                self.conn.execute("SELECT 1 FROM retained_copies LIMIT 0")
            elif peer_idxs is None:
                keys = self.conn.execute("SELECT DISTINCT name, until FROM retained_copies").fetchall()
            else:
                marks = ",".join("?" * len(peer_idxs)) or "-1"
                keys = self.conn.execute(
                    f"SELECT DISTINCT name, until FROM retained_copies WHERE peer_idx IN ({marks})", list(peer_idxs)
                ).fetchall()
        except sqlite3.OperationalError:  # a file made before them
            return {}
        out: dict[tuple[str, int], RecordMeta] = {}
        for name, until in keys:
            v = self.conn.execute(
                "SELECT size, crc32c, version, stored_as FROM record_history WHERE name = ? AND until = ?",
                (name, until),
            ).fetchone()
            if v is None:
                continue
            held = self.conn.execute(
                "SELECT copy_rank, peer_idx FROM retained_copies WHERE name = ? AND until = ? ORDER BY copy_rank",
                (name, until),
            ).fetchall()
            out[(str(name), int(until))] = RecordMeta(
                str(name),
                int(v[0]),
                int(v[1]),
                tuple(int(p) for _, p in held),
                tuple(int(r) for r, _ in held),
                int(v[2]),
                v[3],
            )
        return out

    def lookup_many(self, names: list[str]) -> dict[str, RecordMeta]:
        """:meth:`lookup` of many names. Each record's metadata comes from
        one statement: a replacement committed meanwhile shows whole or not
        at all."""
        out: dict[str, list] = {}
        cols = self._version_columns()
        for i in range(0, len(names), 500):
            chunk = names[i : i + 500]
            q = (
                f"SELECT r.name, r.size, r.crc32c, c.copy_rank, c.peer_idx, {cols} FROM records r "
                f"JOIN copies c ON c.name = r.name WHERE r.name IN ({','.join('?' * len(chunk))}) "
                "ORDER BY r.name, c.copy_rank"
            )
            for name, size, crc, rank, peer, version, stored_as in self.conn.execute(q, chunk):
                v = out.setdefault(name, [size, crc, [], [], version, stored_as])
                v[2].append(peer)
                v[3].append(rank)
        return {n: RecordMeta(n, v[0], v[1], tuple(v[2]), tuple(v[3]), v[4], v[5]) for n, v in out.items()}

    def pending_copies(self, limit: int = 100_000) -> list[tuple[RecordMeta, int, int]]:
        """Copies of committed records not stored yet (async protocols), as
        ``(record, copy_rank, pending holder's peer_idx)``, oldest first."""
        try:
            rows = self.conn.execute(
                "SELECT name, copy_rank, peer_idx FROM pending_copies ORDER BY since, name LIMIT ?", (limit,)
            ).fetchall()
        except sqlite3.OperationalError:  # a file made before async protocols: none pending
            return []
        metas = self.lookup_many(sorted({r[0] for r in rows}))
        return [(metas[n], rank, peer) for n, rank, peer in rows if n in metas]

    def count_pending(self) -> int:
        """Copies committed as pending (async protocols, docs/replication.md;
        0 in a file made before the table)."""
        try:
            return int(self.conn.execute("SELECT count(*) FROM pending_copies").fetchone()[0])
        except sqlite3.OperationalError:
            return 0

    def count_quarantined(self) -> int:
        """Copies a peer's verifier quarantined that no good copy replaced yet."""
        try:
            return int(self.conn.execute("SELECT count(*) FROM quarantined_copies").fetchone()[0])
        except sqlite3.OperationalError:  # a file made before the table: they are pending_copies rows
            return 0

    def copies_to_restore(self, limit: int = 100_000) -> list[tuple[RecordMeta, int, int, str]]:
        """Copies repair must store again: pending ones (async protocols) and
        quarantined ones (a verifier found them bad), as ``(record,
        copy_rank, holder's peer_idx, "pending" | "quarantined")``, oldest
        first. A record with no stored copy left is included, its
        ``RecordMeta.peers`` empty (it cannot be restored: it is lost)."""
        rows: list[tuple[str, int, int, str]] = []
        for table, kind in (("pending_copies", "pending"), ("quarantined_copies", "quarantined")):
            try:
                rows += [
                    (n, int(r), int(p), kind)
                    for n, r, p in self.conn.execute(
                        f"SELECT name, copy_rank, peer_idx FROM {table} ORDER BY since, name LIMIT ?", (limit,)
                    )
                ]
            except sqlite3.OperationalError:  # a file made before the table
                pass
        rows = rows[:limit]
        metas = self.lookup_many(sorted({r[0] for r in rows}))
        missing = sorted({r[0] for r in rows} - set(metas))
        if missing:  # no stored copy: RecordMeta without peers
            cols = self._version_columns()
            for i in range(0, len(missing), 500):
                chunk = missing[i : i + 500]
                marks = ",".join("?" * len(chunk))
                q = f"SELECT r.name, r.size, r.crc32c, {cols} FROM records r WHERE r.name IN ({marks})"
                for name, size, crc, version, stored_as in self.conn.execute(q, chunk):
                    metas[name] = RecordMeta(name, size, crc, (), (), version, stored_as)
        return [(metas[n], rank, peer, kind) for n, rank, peer, kind in rows if n in metas]

    def copy_rows(
        self, non_live_idxs: list[int], names: list[str] | None = None
    ) -> dict[str, list[tuple[int, int, str]]]:
        """Every copy row of the committed records that have a copy pending,
        quarantined, or stored on one of ``non_live_idxs`` (or, with
        ``names``, of those committed records): ``{name: [(copy_rank,
        peer_idx, "stored" | "pending" | "quarantined")]}``. The input of
        :func:`st_py.core.copy_health.file_health`; records with F copies stored
        on other peers are not read (cost: the damaged records, plus an
        index range per non-live peer)."""
        parts: list[str] = []
        args: list[object] = []
        if names is not None:
            parts.append(f"SELECT name FROM records WHERE name IN ({','.join('?' * len(names))})")
            args += list(names)
        else:
            for table in ("pending_copies", "quarantined_copies"):
                if self._has_table(table):
                    parts.append(f"SELECT name FROM {table}")
            if non_live_idxs:
                parts.append(f"SELECT name FROM copies WHERE peer_idx IN ({','.join('?' * len(non_live_idxs))})")
                args += list(non_live_idxs)
        if not parts:
            return {}
        c = self.conn
        own = not c.in_transaction
        if own:
            c.execute("BEGIN")  # one snapshot of the three tables
        try:
            found = [r[0] for r in c.execute(" UNION ".join(parts), args)]
            out: dict[str, list[tuple[int, int, str]]] = {n: [] for n in found}
            for table, kind in (
                ("copies", "stored"),
                ("pending_copies", "pending"),
                ("quarantined_copies", "quarantined"),
            ):
                if kind != "stored" and not self._has_table(table):
                    continue
                for i in range(0, len(found), 500):
                    chunk = found[i : i + 500]
                    q = f"SELECT name, copy_rank, peer_idx FROM {table} WHERE name IN ({','.join('?' * len(chunk))})"
                    for n, r, p in c.execute(q, chunk):
                        out[n].append((int(r), int(p), kind))
        finally:
            if own:
                c.execute("COMMIT")
        return out

    def retained_copy_rows(self, non_live_idxs: list[int]) -> dict[tuple[str, int], list[tuple[int, int, str]]]:
        """The copies of the past versions kept for snapshots and older
        readers (docs/snapshots.md) that have a copy unstored (quarantined or
        pending: ``retained_unstored``) or on one of ``non_live_idxs``:
        ``{(name, until): [(copy_rank, peer_idx, "stored" | "pending" |
        "quarantined")]}``, as :meth:`copy_rows` gives a current record's.
        Empty for a file without them. The input of
        :func:`st_py.core.copy_health.file_health` for past versions."""
        if not self._has_table("retained_unstored"):
            return {}
        marks = ",".join("?" * len(non_live_idxs)) or "NULL"
        c = self.conn
        own = not c.in_transaction
        if own:
            c.execute("BEGIN")  # one state of both tables
        try:
            keys = c.execute(
                "SELECT name, until FROM retained_unstored UNION "
                f"SELECT name, until FROM retained_copies WHERE peer_idx IN ({marks})",
                list(non_live_idxs),
            ).fetchall()
            out: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
            for name, until in keys:
                rows = [
                    (int(r), int(p), "stored")
                    for r, p in c.execute(
                        "SELECT copy_rank, peer_idx FROM retained_copies WHERE name = ? AND until = ?", (name, until)
                    )
                ]
                rows += [
                    (int(r), int(p), str(st))
                    for r, p, st in c.execute(
                        "SELECT copy_rank, peer_idx, state FROM retained_unstored WHERE name = ? AND until = ?",
                        (name, until),
                    )
                ]
                out[(str(name), int(until))] = rows
        finally:
            if own:
                c.execute("COMMIT")
        return out

    def retained_unstored(self) -> dict[tuple[str, int], tuple[RecordMeta, list[tuple[int, int]]]]:
        """The past versions with copies to store again (``retained_unstored``:
        quarantined or pending), as ``{(name, until): (version, [(copy_rank,
        peer_idx)])}``: the version's :class:`RecordMeta` with its stored
        copies' holders (``peers``, ``ranks``; none: no good copy left), and
        the unstored copies with the holder each was committed to. Empty
        for a file without them. What ``repair`` restores."""
        if not self._has_table("retained_unstored"):
            return {}
        keys: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for name, until, rank, peer in self.conn.execute(
            "SELECT name, until, copy_rank, peer_idx FROM retained_unstored ORDER BY name, until, copy_rank"
        ):
            keys.setdefault((str(name), int(until)), []).append((int(rank), int(peer)))
        held = self.retained_held_by(None, list(keys))
        out = {}
        for k, unstored in keys.items():
            m = held.get(k)
            if m is None:
                v = self.conn.execute(
                    "SELECT size, crc32c, version, stored_as FROM record_history WHERE name = ? AND until = ?", k
                ).fetchone()
                if v is None:
                    continue
                m = RecordMeta(k[0], int(v[0]), int(v[1]), (), (), int(v[2]), v[3])
            out[k] = (m, unstored)
        return out

    def has_table(self, table: str) -> bool:
        """The infofile has table ``table`` (files made before a table existed lack it)."""
        return self._has_table(table)

    def _has_table(self, table: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
            is not None
        )

    def names(self, prefix: str | None = None) -> list[str]:
        """Committed record and object names (not the stripe records), sorted."""
        p = prefix or ""
        out = [
            r[0]
            for r in self.conn.execute(
                "SELECT name FROM records WHERE substr(name, 1, ?) = ? ORDER BY name", (len(p), p)
            )
            if not r[0].startswith(STRIPE_PREFIX)
        ]
        objs = [o.name for o in self.objects() if o.name.startswith(p)]
        return sorted(out + objs) if objs else out

    def count(self) -> int:
        """Committed records and objects (not the stripe records), without
        reading the records' rows: ``count(*)``, which SQLite answers from
        its smallest index (3 ms at 10^6 records, against 70 ms for
        :meth:`stats`, which sums their sizes), less the stripes' range of
        names, plus the objects."""
        lo = STRIPE_PREFIX
        hi = STRIPE_END
        (n,) = self.conn.execute("SELECT count(*) FROM records").fetchone()
        (stripes,) = self.conn.execute("SELECT count(*) FROM records WHERE name >= ? AND name < ?", (lo, hi)).fetchone()
        try:
            (objects,) = self.conn.execute("SELECT count(*) FROM objects").fetchone()
        except sqlite3.OperationalError:  # a file made before striping
            objects = 0
        return int(n) - int(stripes) + int(objects)

    def object(self, name: str) -> ObjectMeta | None:
        """The striped object ``name``, or None."""
        try:
            row = self.conn.execute(
                "SELECT name, size, stripe_size, stripes, crc32c FROM objects WHERE name = ?", (name,)
            ).fetchone()
        except sqlite3.OperationalError:  # a file made before striping
            return None
        return ObjectMeta(*row) if row else None

    def objects(self, generation: int | None = None) -> list[ObjectMeta]:
        """The striped objects, sorted by name; with ``generation`` those
        current at it (a GET_LOCAL plan's snapshot): committed at or before
        it, and an object replaced or deleted since as it was then."""
        q = "SELECT name, size, stripe_size, stripes, crc32c FROM objects"
        if generation is None:
            try:
                return [ObjectMeta(*r) for r in self.conn.execute(q + " ORDER BY name")]
            except sqlite3.OperationalError:
                return []
        try:
            rows = self.conn.execute(
                q + " WHERE commit_seq <= ?1 UNION ALL SELECT name, size, stripe_size, stripes, crc32c "
                "FROM object_history WHERE commit_seq <= ?1 AND until > ?1 ORDER BY name",
                (generation,),
            ).fetchall()
        except sqlite3.OperationalError:  # no object_history (a file made before history): current rows only
            try:
                rows = self.conn.execute(q + " WHERE commit_seq <= ? ORDER BY name", (generation,)).fetchall()
            except sqlite3.OperationalError:
                return []
        return [ObjectMeta(*r) for r in rows]

    def user_meta_of(self, name: str) -> dict[str, str]:
        """The user metadata (content type, user pairs:
        :mod:`st_py.core.user_meta`) of the current version of record or
        striped object ``name``: ``{}`` if it has none, no such name is
        committed, or the file was made before ``user_meta`` existed. One
        primary-key probe; no record is read."""
        return read_user_meta(
            self.conn,
            name,
            "SELECT m.meta FROM user_meta m JOIN records r ON r.name = m.name AND r.commit_seq = m.commit_seq "
            "WHERE m.name = ?1 UNION ALL SELECT m.meta FROM user_meta m JOIN objects o ON o.name = m.name "
            "AND o.commit_seq = m.commit_seq WHERE m.name = ?1",
            (name,),
        )

    def stats(self) -> tuple[int, int]:
        """``(names, bytes)``: see :func:`name_stats`."""
        return name_stats(self.conn)

    def count_names(self) -> int:
        """See :func:`name_count`."""
        return name_count(self.conn)

    def user_bytes(self) -> int:
        """See :func:`user_bytes`."""
        return user_bytes(self.conn)

    _has_logical = False  # the column exists (once added, it stays)

    def _logical_column(self, prefix: str = "") -> str:
        """``logical_size`` (with a table alias ``prefix``), or NULL for a
        file whose tracker has not added the column yet."""
        if not self._has_logical:
            try:
                self.conn.execute("SELECT logical_size FROM records LIMIT 0")
            except sqlite3.OperationalError:
                return "NULL"
            self._has_logical = True
        return prefix + "logical_size"

    # -- point and range queries of names (the fsspec filesystem, listings) --
    # ``name`` is the primary key of records and objects: a point lookup or
    # a range [lo, hi) of names is one index search.
    def peerlist(self) -> list[tuple[int, str, str]]:
        """The file's peerlist: ``(peer_idx, peer_id, addr)``, by index."""
        return self.conn.execute("SELECT peer_idx, peer_id, addr FROM peers ORDER BY peer_idx").fetchall()

    def record_stat(self, name: str) -> tuple[int, int, float, int | None] | None:
        """``(size, crc32c, committed_at, logical_size)`` of committed record
        ``name`` (size as stored, after filters; :func:`user_size` of the two
        is what users see), or None."""
        lg = self._logical_column()
        return self.conn.execute(
            f"SELECT size, crc32c, committed_at, {lg} FROM records WHERE name = ?", (name,)
        ).fetchone()

    def records_between(self, lo: str, hi: str | None = None):
        """``(name, size, crc32c, committed_at, logical_size)`` of the
        committed records with ``lo <= name < hi`` (no upper bound if None),
        in name order: a cursor (close it, or read it to the end)."""
        lg = self._logical_column()
        if hi is None:
            return self.conn.execute(
                f"SELECT name, size, crc32c, committed_at, {lg} FROM records WHERE name >= ? ORDER BY name", (lo,)
            )
        return self.conn.execute(
            f"SELECT name, size, crc32c, committed_at, {lg} FROM records WHERE name >= ? AND name < ? ORDER BY name",
            (lo, hi),
        )

    def any_between(self, lo: str, hi: str) -> bool:
        """Is a record named ``lo <= name < hi`` committed?"""
        return (
            self.conn.execute("SELECT 1 FROM records WHERE name >= ? AND name < ? LIMIT 1", (lo, hi)).fetchone()
            is not None
        )

    def object_stat(self, name: str) -> tuple[int, int, float, int, int] | None:
        """``(size, crc32c, committed_at, stripes, stripe_size)`` of striped
        object ``name``, or None."""
        try:
            return self.conn.execute(
                "SELECT size, crc32c, committed_at, stripes, stripe_size FROM objects WHERE name = ?", (name,)
            ).fetchone()
        except sqlite3.OperationalError:  # a file made before striping
            return None

    def objects_between(self, lo: str = "", hi: str | None = None) -> list[tuple]:
        """``(name, size, crc32c, committed_at, stripes, stripe_size)`` of the
        striped objects with ``lo <= name < hi`` (all from ``lo`` if None)."""
        q = "SELECT name, size, crc32c, committed_at, stripes, stripe_size FROM objects WHERE name >= ?"
        args: tuple = (lo,)
        if hi is not None:
            q, args = q + " AND name < ?", (lo, hi)
        try:
            return self.conn.execute(q + " ORDER BY name", args).fetchall()
        except sqlite3.OperationalError:  # a file made before striping
            return []

    # -- listings: one range query per call (the fsspec filesystem's find and ls) --
    # A name listing costs what it returns: one index range, no Python object
    # per row beyond what is returned, the reserved names (stripes, versions)
    # cut out as index ranges rather than tested row by row. Like every
    # method of a reader these use its one connection: call them from one
    # thread at a time (the fsspec filesystem keeps a reader per thread).
    def _user_ranges(self, lo: str, hi: str | None) -> list[tuple[str, str | None]]:
        """``[lo, hi)`` less the reserved ranges of record names (stripe
        records, the stored names of versions): at most three ranges, in
        order; ``None`` is no upper bound."""
        out: list[tuple[str, str | None]] = []
        for r_lo, r_hi in RESERVED_RANGES:
            if (hi is None or r_lo < hi) and lo < r_hi:  # they overlap
                if lo < r_lo:
                    out.append((lo, r_lo))
                lo = r_hi
        if hi is None or lo < hi:
            out.append((lo, hi))
        return out

    _objects_table = False  # the objects table exists (once made, it stays)

    def _has_objects(self) -> bool:
        if not self._objects_table:
            self._objects_table = self._has_table("objects")
        return self._objects_table

    def _listing(self, cols: str, obj_cols: str, lo: str, hi: str | None, names: bool = False) -> tuple[list, list]:
        """``cols`` of the records named in ``[lo, hi)`` but not reserved
        (one index range each, so in name order) and ``obj_cols`` of the
        objects in it, in one read transaction (unless the caller holds
        one). ``names``: the first column alone, not rows."""
        c = self.conn
        rows: list = []
        objs: list = []
        own = not c.in_transaction
        if own:
            c.execute("BEGIN")
        try:
            for a, b in self._user_ranges(lo, hi):
                if b is None:
                    cur = c.execute(f"SELECT {cols} FROM records WHERE name >= ? ORDER BY name", (a,))
                else:
                    cur = c.execute(f"SELECT {cols} FROM records WHERE name >= ? AND name < ? ORDER BY name", (a, b))
                rows += [r[0] for r in cur] if names else cur
            if self._has_objects():
                q = f"SELECT {obj_cols} FROM objects WHERE name >= ?" + ("" if hi is None else " AND name < ?")
                objs = c.execute(q + " ORDER BY name", (lo,) if hi is None else (lo, hi)).fetchall()
        finally:
            if own:
                c.execute("COMMIT")
        return rows, objs

    def names_between(self, lo: str = "", hi: str | None = None) -> list[str]:
        """The names users see in ``lo <= name < hi`` (no upper bound if
        None): committed records and striped objects, never stripe records
        or the stored names of versions, sorted (code-point order, which is
        SQLite's order of UTF-8 text), each once.

        One range of the name index per table (the reserved names are cut
        out as ranges, not tested row by row), in one read transaction (a
        commit meanwhile shows whole or not at all); only the names are
        read. Cost: about 0.5 us per name on this machine (10^5 names:
        0.05 s), most of it making the Python strings.

        Returns
        -------
        list of str
        """
        names, objs = self._listing("name", "name", lo, hi, names=True)
        if objs:  # rarely many: merge the two sorted runs, each name once
            names += [r[0] for r in objs]
            names = list(dict.fromkeys(sorted(names)))
        return names

    def entries_between(
        self, lo: str = "", hi: str | None = None
    ) -> list[tuple[str, int, int | None, int, float, int | None, int | None]]:
        """The records and striped objects named ``lo <= name < hi`` (as
        :meth:`names_between`), with what a listing shows of each, in name
        order (a record and an object of one name, which writers refuse,
        would both be there, the record first).

        One range per table in one read transaction, like
        :meth:`names_between`; each row is read from the table (about
        3 us per record here).

        Returns
        -------
        list of (name, stored_size, logical_size, crc32c, committed_at, stripes, stripe_size)
            Sizes in bytes, ``committed_at`` in unix seconds (a float).
            A record: ``stored_size`` as the peers store it, ``logical_size``
            the user's bytes or None where they were not kept
            (:func:`user_size` of the two is its size), ``stripes`` and
            ``stripe_size`` None. A striped object: both sizes are its
            whole size, ``stripes`` its stripe count (an int).
        """
        lg = self._logical_column()
        rows, objs = self._listing(
            f"name, size, {lg}, crc32c, committed_at, NULL, NULL",
            "name, size, size, crc32c, committed_at, stripes, stripe_size",
            lo,
            hi,
        )
        if objs:
            rows += objs
            rows.sort(key=lambda r: r[0])  # stable: two sorted runs merged
        return rows

    def level(
        self, prefix: str, detail: bool = True, start: str = "", limit: int | None = None
    ) -> tuple[list, list[str]]:
        """One level of the tree that ``/`` in names makes: what lies
        directly below ``prefix`` (``""``, or ending in ``/``), as a
        directory listing shows it.

        Record names are read in order from ``prefix``; at the first name
        below a sub-prefix (``prefix + head + "/"``) the scan jumps past
        all of that sub-prefix's names with one index search, so a level
        costs its entries plus one search per head, not the names below
        them. One read transaction (a snapshot), unless the caller holds
        one.

        Parameters
        ----------
        prefix : str
        detail : bool
            Entries as rows (see :meth:`entries_between`) or as names.
        start : str
            Scan the record names from ``max(prefix, start)`` on (a page of
            a listing that goes on after its last key: what sorts before it
            is not read); entries and heads before it may still come from
            the objects.
        limit : int, optional
            Stop the scan of record names after this many entries and heads
            together (a page needs about its length, not the whole level):
            the answer is then exact up to the last name read; objects,
            fewer, are all read.

        Returns
        -------
        (entries, heads)
            ``entries``: the records and objects named ``prefix + rest``
            with no ``/`` in ``rest`` (``rest`` may be empty), in name
            order, as names or rows. ``heads``: each distinct ``head`` for
            which a name starts with ``prefix + head + "/"`` (``head`` may
            be empty: a name ``prefix + "/..."``), in order; never a
            reserved one (the stripes' and versions' prefixes).
        """
        c = self.conn
        plen = len(prefix)
        hi = prefix_upper(prefix) if prefix else None
        lg = self._logical_column()
        cols = f"name, size, {lg}, crc32c, committed_at, NULL, NULL" if detail else "name"
        sql = f"SELECT {cols} FROM records WHERE name >= ?" + ("" if hi is None else " AND name < ?")
        entries: list = []
        heads: list[str] = []
        own = not c.in_transaction
        if own:
            c.execute("BEGIN")
        try:
            lo: str | None = None if prefix.startswith(RESERVED_PREFIXES) else max(prefix, start)
            while lo is not None and (limit is None or len(entries) + len(heads) < limit):
                cur = c.execute(sql + " ORDER BY name", (lo,) if hi is None else (lo, hi))
                nxt = None
                for row in cur:
                    name = row[0]
                    j = name.find("/", plen)
                    if j < 0:
                        entries.append(row if detail else name)
                        if limit is not None and len(entries) + len(heads) >= limit:
                            break
                        continue
                    if not name.startswith(RESERVED_PREFIXES):
                        heads.append(name[plen:j])
                    nxt = name[:j] + "0"  # "0" follows "/": past every name below this head
                    break
                cur.close()
                lo = nxt
            if self._has_objects():
                ocols = "name, size, size, crc32c, committed_at, stripes, stripe_size" if detail else "name"
                q = f"SELECT {ocols} FROM objects WHERE name >= ?" + ("" if hi is None else " AND name < ?")
                objs = c.execute(q + " ORDER BY name", (prefix,) if hi is None else (prefix, hi)).fetchall()
            else:
                objs = []
        finally:
            if own:
                c.execute("COMMIT")
        if objs:
            seen = set(heads)
            for row in objs:
                name = row[0]
                j = name.find("/", plen)
                if j < 0:
                    entries.append(row if detail else name)
                elif name[plen:j] not in seen:
                    seen.add(name[plen:j])
                    heads.append(name[plen:j])
            entries.sort(key=(lambda r: r[0]) if detail else None)
            heads.sort()
        return entries, heads

    def last_commit_at(self) -> float | None:
        """Unix seconds of the newest committed record, or None."""
        (t,) = self.conn.execute("SELECT max(committed_at) FROM records").fetchone()
        return None if t is None else float(t)

    def is_empty(self) -> bool:
        """No record (committed or a stripe) at all: :func:`holds_no_record`."""
        return holds_no_record(self.conn)

    @contextlib.contextmanager
    def read_transaction(self):
        """Queries inside see one snapshot of the infofile (a read
        transaction: a commit meanwhile shows whole or not at all)."""
        self.conn.execute("BEGIN")
        try:
            yield self
        finally:
            self.conn.execute("COMMIT")

    def has_stripes(self) -> bool:
        """Are there stripe records (of objects, committed or not)?"""
        lo, hi = STRIPE_PREFIX, STRIPE_END
        return (
            self.conn.execute("SELECT 1 FROM records WHERE name >= ? AND name < ? LIMIT 1", (lo, hi)).fetchone()
            is not None
        )

    # -- record schemas kept at write time (docs/infofile.md, "Record schemas") --
    def schema_groups(self) -> list[SchemaGroup] | None:
        """The distinct schemas of the committed records and objects (not
        the stripe records), each with its count and the first record name
        that has it; None for a file made before schemas were kept. Records
        whose schema was not kept count in no group (see
        :meth:`names_without_schema`). One indexed query over the records,
        whatever their number; no record is read."""
        lo, hi = STRIPE_PREFIX, STRIPE_END
        try:
            rows = self.conn.execute(
                "SELECT s.schema_id, s.format, s.schema, g.n, g.first FROM schemas s JOIN ("
                "  SELECT schema_id, count(*) AS n, min(name) AS first FROM records "
                "  WHERE schema_id IS NOT NULL AND NOT (name >= ? AND name < ?) GROUP BY schema_id"
                "  UNION ALL SELECT schema_id, count(*), min(name) FROM objects WHERE schema_id IS NOT NULL "
                "  GROUP BY schema_id) g USING(schema_id) ORDER BY g.first",
                (lo, hi),
            ).fetchall()
        except sqlite3.OperationalError:  # no schemas table (yet): a file made before they were kept
            return None
        return [SchemaGroup(fmt, bytes(blob), int(n), first) for _, fmt, blob, n, first in rows]

    def kept_schemas(self) -> list[tuple[str, bytes, str]] | None:
        """The distinct schemas of the committed records and objects (not
        the stripe records) as ``(format, Arrow IPC schema, a record that
        has it)``, in the order of those records' names; None for a file made
        before schemas were kept. What a scan needs of
        :meth:`schema_groups` without its counts: one index probe per
        distinct schema (``records_by_schema``), so its cost does not grow
        with the records (0.2 s at 10^6 records for ``schema_groups``)."""
        lo, hi = STRIPE_PREFIX, STRIPE_END
        try:
            kinds = self.conn.execute("SELECT schema_id, format, schema FROM schemas ORDER BY schema_id").fetchall()
        except sqlite3.OperationalError:  # no schemas table (yet): a file made before they were kept
            return None
        out = []
        for schema_id, fmt, blob in kinds:
            row = self.conn.execute(
                "SELECT name FROM records WHERE schema_id = ? AND NOT (name >= ? AND name < ?) LIMIT 1",
                (schema_id, lo, hi),
            ).fetchone()
            if row is None:
                try:
                    row = self.conn.execute(
                        "SELECT name FROM objects WHERE schema_id = ? LIMIT 1", (schema_id,)
                    ).fetchone()
                except sqlite3.OperationalError:  # a file made before striping
                    row = None
            if row is not None:  # else: kept for records deleted since
                out.append((fmt, bytes(blob), row[0]))
        return sorted(out, key=lambda k: k[2])

    def names_without_schema(self, limit: int | None = None) -> list[str]:
        """Committed record and object names (not stripes) whose schema was
        not kept, sorted: names readers skip (``_SUCCESS``), records whose
        bytes did not decode, and every record of a file made before
        schemas were kept."""
        lo, hi = STRIPE_PREFIX, STRIPE_END
        lim = -1 if limit is None else int(limit)
        try:
            out = [
                n
                for (n,) in self.conn.execute(
                    "SELECT name FROM records WHERE schema_id IS NULL AND NOT (name >= ? AND name < ?) "
                    "ORDER BY name LIMIT ?",
                    (lo, hi, lim),
                )
            ]
        except sqlite3.OperationalError:  # no schema_id column: nothing was kept
            if limit is None:
                return self.names()
            out = [
                n
                for (n,) in self.conn.execute(
                    "SELECT name FROM records WHERE NOT (name >= ? AND name < ?) ORDER BY name LIMIT ?", (lo, hi, lim)
                )
            ]
            try:
                out += [n for (n,) in self.conn.execute("SELECT name FROM objects ORDER BY name LIMIT ?", (lim,))]
            except sqlite3.OperationalError:  # a file made before striping
                pass
            return sorted(out)[:limit]
        try:
            out += [n for (n,) in self.conn.execute("SELECT name FROM objects WHERE schema_id IS NULL")]
        except sqlite3.OperationalError:
            pass
        return sorted(out)[:limit]

    def schemas_of(self, names: list[str]) -> dict[str, tuple[str, bytes]]:
        """``{name: (format, Arrow IPC schema)}`` of the named records and
        objects whose schema was kept (others are left out)."""
        out: dict[str, tuple[str, bytes]] = {}
        for table in ("records", "objects"):
            for i in range(0, len(names), 500):
                chunk = names[i : i + 500]
                try:
                    rows = self.conn.execute(
                        f"SELECT t.name, s.format, s.schema FROM {table} t JOIN schemas s USING(schema_id) "
                        f"WHERE t.name IN ({','.join('?' * len(chunk))})",
                        chunk,
                    )
                except sqlite3.OperationalError:
                    break
                out.update((n, (fmt, bytes(blob))) for n, fmt, blob in rows)
        return out

    def close(self) -> None:
        """Close the SQLite connection; the reader is unusable after."""
        self.conn.close()
