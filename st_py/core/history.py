"""Reading a file as of a past generation (docs/snapshots.md): the read
side of the format-4 history tables, beside :mod:`st_py.core.infofile`'s
reader of the current state.

:func:`resolve_as_of` turns ``as_of`` (a snapshot name, a generation or a
time) into a generation, once, for every way in. :class:`AsOf` answers
what :class:`~st_py.core.infofile.InfofileReader` answers about the current
state (names, count, lookups, objects, sizes) about that generation:

- the records of generation G are the current versions committed at or
  before G and the past versions current at G
  (``record_history.commit_seq <= G < until``);
- every version is read from its copies' current holders: a current one's
  (``copies``), a past one's (``retained_copies``), so a snapshot follows a
  record wherever rebalance, drain or spread moved its copies.

Only this module and :mod:`st_py.core.infofile` hold SQL over the
infofile's tables on the client side.
"""

from __future__ import annotations

import datetime as _dt
import os
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass

from st_py.core.infofile import (
    RESERVED_PREFIXES,
    STRIPE_END,
    STRIPE_PREFIX,
    InfofileReader,
    ObjectMeta,
    RecordMeta,
    prefix_upper,
    read_user_meta,
    user_size,
)
from st_py.errors import InvalidOptionError, SnapshotExpiredError, SnapshotNotFoundError


@dataclass(frozen=True)
class Snapshot:
    """A named generation of one file (docs/snapshots.md).

    Attributes
    ----------
    file : str
        The StoreTorrent file.
    name : str
        The snapshot's name.
    generation : int
        The file's committed generation it pins.
    created_at : float
        Unix seconds.
    owner : str
        The user who made it.
    """

    file: str
    name: str
    generation: int
    created_at: float
    owner: str = ""

    def as_dict(self) -> dict:
        """Plain data (the CLI's JSON)."""
        return {
            "file": self.file,
            "name": self.name,
            "generation": self.generation,
            "created_at": self.created_at,
            "owner": self.owner,
        }


def has_history(reader: InfofileReader) -> bool:
    """The file keeps history (the format-4 tables; a tracker of this
    release adds them when it first writes a file)."""
    try:
        reader.conn.execute("SELECT 1 FROM record_history LIMIT 0")
        return True
    except sqlite3.OperationalError:
        return False


def retained_on(reader: InfofileReader, key: str, peer_idx: int) -> bool:
    """Peer ``peer_idx`` keeps a copy stored under ``key``: of a version no
    longer current (``retained_copies``), of one moved off it
    (``copy_history``) that readers of older generations may still use, or
    of a current record: a new copy under that name must not replace it, and
    a move must not put another there."""
    try:
        return (
            reader.conn.execute(
                "SELECT 1 FROM retained_copies WHERE coalesce(stored_as, name) = ?1 AND peer_idx = ?2 "
                "UNION ALL SELECT 1 FROM copy_history WHERE coalesce(stored_as, name) = ?1 AND peer_idx = ?2 "
                "UNION ALL SELECT 1 FROM copies c JOIN records r ON r.name = c.name "
                "WHERE coalesce(r.stored_as, r.name) = ?1 AND c.peer_idx = ?2 LIMIT 1",
                (key, peer_idx),
            ).fetchone()
            is not None
        )
    except sqlite3.OperationalError:  # a file made before versions
        return (
            reader.conn.execute(
                "SELECT 1 FROM copy_history WHERE name = ? AND peer_idx = ? LIMIT 1", (key, peer_idx)
            ).fetchone()
            is not None
        )


LIVE, ADOPT, STALE = "live", "adopt", "stale"
"""A peer's standing for a copy to place (:func:`copy_standing`)."""


class Standings:
    """The placement rule's facts for a set of stored names, and the moves
    planned against them: what :func:`copy_standing` answers now
    (:meth:`of`), and what it will answer once the moves planned with
    :meth:`move` are committed, for every copy under those stored names
    (a current record's, an object stripe's, a kept past version's: they
    share the rule, and copies of several versions may share a stored
    name). A planner that reads :meth:`of` after each :meth:`move` sees
    what the next plan will see, so the next plan finds nothing this one
    did not. Not thread-safe (one planner)."""

    def __init__(
        self,
        live: dict[str, dict[int, Counter]],
        last: dict[str, dict[int, tuple[float, int, float | None]]],
        since: float,
    ):
        self._live = live  # stored name -> {peer: Counter((rank, crc32c, size)) of its committed copies under it}
        self._last = last  # stored name -> {peer: (until, rank, until_at) of its last moved-away copy}
        self.since = since
        # stored name -> {copy: ((rank, crc32c, size), from peer, to peer)}: the planned moves, one per copy
        self._moves: dict[str, dict[object, tuple[tuple[int, int, int], int, int]]] = {}
        self._cache: dict[str, tuple[dict[int, Counter], dict[int, tuple[float, int, float | None]]]] = {}

    def of(self, key: str, rank: int, crc32c: int | None = None, size: int | None = None) -> dict[int, str]:
        """``{peer: LIVE | ADOPT | STALE}`` for copy ``rank`` stored under
        ``key`` (see :func:`copy_standing`; with its ``crc32c`` and
        ``size``, a peer whose every live copy under ``key`` is that copy's
        bytes at that rank is ``ADOPT``); a peer left out is free."""
        live, last = self._state(key)
        out: dict[int, str] = {}
        for peer, (_, was, at) in last.items():
            if was == rank:
                out[peer] = ADOPT
            elif at is None or float(at) >= self.since:
                out[peer] = STALE
        same = (rank, crc32c, size)
        for peer, held in live.items():
            here = +held
            if here:
                out[peer] = ADOPT if crc32c is not None and set(here) == {same} else LIVE
        return out

    def adopts_all(self, key: str, peers: list[int], crc32c: int, size: int) -> bool:
        """Whether a new version whose copy rank ``r`` goes to ``peers[r]``
        (its bytes: ``crc32c``, ``size``) may be stored under ``key``: no
        live copy is stored under it, or the live copies under it are exactly
        this version's (every rank's peer holds these bytes at that rank, as
        its only copy under ``key``, and no other peer holds one): every rank
        adopts. A version that would meet only some of them, or none, must
        take a name of its own (docs/snapshots.md, "Putting a name again"):
        two versions sharing a stored name with copies on different peers
        can each leave the other's copy the only place for a lost one
        (``LIVE``), and neither is stored again."""
        live, _ = self._state(key)
        held = {peer: set(+c) for peer, c in live.items() if +c}
        return not held or held == {peer: {(rank, crc32c, size)} for rank, peer in enumerate(peers)}

    def move(self, copy: object, key: str, rank: int, src: int, dst: int, crc32c: int, size: int) -> None:
        """Plan the move of ``copy`` (the caller's name for one copy: the
        same for every move of it) stored under ``key`` at ``rank``
        (``crc32c``, ``size``: its bytes) from peer ``src`` to ``dst``. A
        copy moved again keeps the peer it is committed to as its source
        (one move is committed); moved back there, it does not move."""
        moves = self._moves.setdefault(key, {})
        first = moves.pop(copy, None)
        origin = first[1] if first is not None else src
        if dst != origin:
            moves[copy] = ((rank, crc32c, size), origin, dst)
        self._cache.pop(key, None)

    def _state(self, key: str) -> tuple[dict[int, Counter], dict[int, tuple[float, int, float | None]]]:
        if key not in self._cache:
            live = {p: Counter(c) for p, c in self._live.get(key, {}).items()}
            last = dict(self._last.get(key, {}))
            for its, src, dst in self._moves.get(key, {}).values():
                live.setdefault(src, Counter())[its] -= 1
                live.setdefault(dst, Counter())[its] += 1
                last[src] = (float("inf"), its[0], float("inf"))  # moved away now, at this rank
            self._cache[key] = (live, last)
        return self._cache[key]


def standings(reader: InfofileReader, names: list[str], since: float) -> Standings:
    """The :class:`Standings` of every stored name the records and past
    versions ``names`` (record names) are stored under, as committed now;
    ``since`` as for :func:`copy_standing`. Thread safety: as ``reader``."""
    names = sorted(set(names))
    live: dict[str, dict[int, Counter]] = {}
    last: dict[str, dict[int, tuple[float, int, float | None]]] = {}
    for i in range(0, len(names), 500):
        chunk = names[i : i + 500]
        marks = ",".join("?" * len(chunk))
        rows = reader.conn.execute(
            f"SELECT coalesce(r.stored_as, r.name), c.peer_idx, c.copy_rank, r.crc32c, r.size "
            f"FROM copies c JOIN records r ON r.name = c.name WHERE c.name IN ({marks})",
            chunk,
        ).fetchall()
        try:
            rows += reader.conn.execute(
                f"SELECT coalesce(k.stored_as, k.name), k.peer_idx, k.copy_rank, h.crc32c, h.size "
                f"FROM retained_copies k JOIN record_history h ON h.name = k.name AND h.until = k.until "
                f"WHERE k.name IN ({marks})",
                chunk,
            ).fetchall()
            hist = reader.conn.execute(
                f"SELECT coalesce(stored_as, name), peer_idx, until, copy_rank, until_at FROM copy_history "
                f"WHERE name IN ({marks})",
                chunk,
            ).fetchall()
        except sqlite3.OperationalError:  # a file made before versions: no history to consult
            hist = []
        for key, peer, rank, crc, size in rows:
            live.setdefault(str(key), {}).setdefault(int(peer), Counter())[(int(rank), int(crc), int(size))] += 1
        for key, peer, until, rank, at in hist:
            seen = last.setdefault(str(key), {})
            if int(peer) not in seen or int(until) > seen[int(peer)][0]:
                seen[int(peer)] = (int(until), int(rank), at)
    return Standings(live, last, since)


def may_store_under_name(reader: InfofileReader, name: str, peers: list[int], crc32c: int, size: int) -> bool:
    """Whether a new record ``name`` (not a replacement), its copy rank
    ``r`` placed on ``peers[r]``, its bytes as stored ``crc32c`` and
    ``size``, may be stored under its plain name on the peers: True when
    no live copy is stored under that name (a kept past version's,
    ``retained_copies``, or a current record's), or when every rank adopts
    the live ones (:meth:`Standings.adopts_all`: same peers, ranks and
    bytes), or when the name is a current record's (a write-once name put
    again: its peers answer ``EXISTS`` to other bytes at once, and the put
    raises RecordExistsError as it always did). False: the caller stores it under a name of its own
    (``.st-version/new-.../NAME``, committed ``new_only``). Reads the
    record's own rows by key only (no ``copy_history`` scan: a moved-away
    copy is no live one, and its peer answers ``EXISTS`` to other bytes).
    Thread safety: as ``reader``."""
    current = (
        "SELECT c.peer_idx, c.copy_rank, r.crc32c, r.size FROM copies c JOIN records r ON r.name = c.name "
        "WHERE c.name = ?1 AND r.stored_as IS NULL"
    )
    try:
        rows = reader.conn.execute(
            current + " UNION ALL SELECT k.peer_idx, k.copy_rank, h.crc32c, h.size FROM retained_copies k "
            "JOIN record_history h ON h.name = k.name AND h.until = k.until WHERE k.name = ?1 AND k.stored_as IS NULL",
            (name,),
        ).fetchall()
    except sqlite3.OperationalError:  # a file made before versions: nothing kept
        rows = reader.conn.execute(current, (name,)).fetchall()
    if not rows:  # the common case: a name no copy is stored under
        return True
    if reader.conn.execute("SELECT 1 FROM records WHERE name = ?", (name,)).fetchone() is not None:
        return True  # committed now: the plain name, whose peers refuse other bytes (RecordExistsError)
    live: dict[int, Counter] = {}
    for peer, rank, crc, sz in rows:
        live.setdefault(int(peer), Counter())[(int(rank), int(crc), int(sz))] += 1
    return Standings({name: live}, {}, 0.0).adopts_all(name, peers, crc32c, size)


class RetainedProbe:
    """Whether an infofile keeps any past version's copy under its plain
    name (a ``retained_copies`` row with ``stored_as`` NULL): without one,
    :func:`may_store_under_name` is True for every name, and a writer need
    not ask it record by record. Asked once per change of the infofile
    (its inode, size, mtime and ctime: the tracker's commits rewrite it in
    place, journal mode DELETE), not per record: a writer's query per
    record waited on the tracker's write lock at every commit (about 200 us
    a record under load, issue 41). A version kept after the look is met as
    before: its peer answers ``EXISTS`` and the writer stores the record
    under a name of its own.

    A look that finds the tracker writing the infofile (SQLite busy) does
    not wait for it: the answer of the last look stands, as if this look
    had come just before that commit began, and the next call looks again.
    Only a look ``STALE_S`` seconds after the last one that answered waits.
    Waiting cost a writer about 4.5 ms a look, one look per group commit
    (28% of the client's time of 20,000 ``queue_put`` calls, issue 41).

    Thread safety: as its reader (one file handle's, under its lock)."""

    STALE_S = 1.0

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._any = True
        self._at = 0.0  # monotonic time of the last look that answered

    def any_kept(self, reader: InfofileReader) -> bool:
        """True if ``reader``'s infofile may keep a version's copy under its plain name."""
        try:
            st = os.stat(reader.path)
        except OSError:
            return True  # cannot tell: ask per record
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key != self._key:
            now = time.monotonic()
            wait = self._key is None or now - self._at >= self.STALE_S
            conn = reader.conn
            if not wait:
                conn.execute("PRAGMA busy_timeout=0")
            try:
                row = conn.execute("SELECT 1 FROM retained_copies WHERE stored_as IS NULL LIMIT 1").fetchone()
                self._any = row is not None
            except sqlite3.OperationalError as e:
                if getattr(e, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:
                    return self._any  # the tracker is committing: the last answer, and a look next time
                self._any = False  # a file made before versions: nothing kept
            finally:
                if not wait:
                    conn.execute("PRAGMA busy_timeout=10000")
            self._key, self._at = key, now
        return self._any


def names_with_copies(reader: InfofileReader, names: list[str]) -> set[str]:
    """The names of ``names`` under which the infofile knows a live copy
    stored on a peer under the plain name (a current record's, or a kept
    past version's in ``retained_copies``): the only ones for which
    :func:`may_store_under_name` can answer False. One query for a whole
    write batch (``json_each`` of the names) instead of one per record.
    Thread safety: as ``reader``."""
    if not names:
        return set()
    import json

    arg = json.dumps(names)
    current = (
        "SELECT DISTINCT c.name FROM copies c JOIN records r ON r.name = c.name "
        "WHERE c.name IN (SELECT value FROM json_each(?1)) AND r.stored_as IS NULL"
    )
    try:
        rows = reader.conn.execute(
            current + " UNION SELECT k.name FROM retained_copies k "
            "WHERE k.name IN (SELECT value FROM json_each(?1)) AND k.stored_as IS NULL",
            (arg,),
        ).fetchall()
    except sqlite3.OperationalError:  # a file made before versions: nothing kept
        rows = reader.conn.execute(current, (arg,)).fetchall()
    return {r[0] for r in rows}


def copy_standing(
    reader: InfofileReader, copies: list[tuple[str, str, int, int, int]], since: float
) -> dict[tuple[str, int], dict[int, str]]:
    """Which peers may take each of ``copies`` (``(record name, stored name,
    copy rank, CRC-32C, size)``) moved or stored again by maintenance (drain, spread,
    rebalance, repair; docs/snapshots.md, "Maintenance of retained
    copies"): the one rule they all read (:class:`Standings` holds it; a
    planner of many moves reads it there). Returns ``{(stored name, copy
    rank): {peer index: standing}}`` for the peers that are not plainly
    free:

    - ``LIVE``: it holds a committed copy stored under that name (of a
      current record, ``copies``, or of a kept past version,
      ``retained_copies``; of this version or another one that shares the
      stored name) other than this copy's bytes at this rank: refused, a
      copy never lands over a live one;
    - ``ADOPT``: every live copy it holds under that name is this copy's
      bytes at this rank (same rank, CRC-32C and size: another version with
      the same bytes shares the stored name, as a name put again with the
      same bytes does when its peers answer ``OK``), or its last copy under
      that name was moved away (``copy_history``) at this copy rank: it has
      or may still have those bytes (its scrubber keeps a moved-away copy
      ``--scrub-age``), so a ``PUT`` without ``REPLACE`` is answered ``OK``
      without writing (same rank, CRC-32C and size: it takes the copy; the
      mover reads it back from there before it commits; written afresh if
      scrubbed), or ``EXISTS``;
    - ``STALE``: its last copy under that name was moved away at another
      rank at or after ``since`` (unix seconds), or at an unknown time: a
      ``REPLACE`` would change the file a reader planned before the move may
      still read (its path names the rank), so it takes the copy only when
      no other peer can.

    Any other peer of the peerlist is free. Thread safety: as ``reader``."""
    st = standings(reader, [c[0] for c in copies], since)
    return {(key, rank): st.of(key, rank, crc, size) for _, key, rank, crc, size in copies}


HELD = "EXISTS (SELECT 1 FROM snapshots s WHERE s.generation >= {v}.commit_seq AND s.generation < {v}.until)"
"""SQL: past version ``{v}`` (a ``record_history`` or ``object_history``
row) is held by a snapshot taken while it was current."""


def retained_bytes(conn) -> int:
    """Bytes (one copy, as stored) of the past versions that snapshots hold:
    what snapshots keep on the peers' disks beyond the current records
    (docs/snapshots.md, "Space"). 0 for a file without history."""
    try:
        (b,) = conn.execute(
            f"SELECT coalesce(sum(size), 0) FROM record_history WHERE {HELD.format(v='record_history')}"
        ).fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(b)


def snapshot_count(conn) -> int:
    """The file's snapshots (0 without history)."""
    try:
        return int(conn.execute("SELECT count(*) FROM snapshots").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def snapshots(reader: InfofileReader, file: str = "") -> list[Snapshot]:
    """The file's snapshots, oldest first (none in a file without history)."""
    if not has_history(reader):
        return []
    return [
        Snapshot(file, str(n), int(g), float(t), str(o))
        for n, g, t, o in reader.conn.execute(
            "SELECT name, generation, created_at, owner FROM snapshots ORDER BY generation, name"
        )
    ]


def _time_of(as_of) -> float | None:
    """Unix seconds if ``as_of`` is a time (a datetime, a pandas Timestamp,
    an ISO 8601 string, or a float), else None."""
    if isinstance(as_of, _dt.datetime):
        return as_of.timestamp()  # a naive datetime is local time, as datetime.timestamp() reads it
    if isinstance(as_of, float):
        return as_of
    if isinstance(as_of, str):
        try:
            return _dt.datetime.fromisoformat(as_of).timestamp()
        except ValueError:
            return None
    return None


def resolve_as_of(reader: InfofileReader, as_of, file: str = "") -> int:
    """The generation ``as_of`` names in this file (docs/snapshots.md,
    "``as_of``"): a snapshot's name (``str``), a generation (``int``), or a
    time (``datetime``, ``pandas.Timestamp``, an ISO 8601 string, or unix
    seconds as a ``float``): the latest generation committed at or before it.

    Returns
    -------
    int
        The generation, checked readable: at most the file's, and at least
        ``meta.history_from`` unless a snapshot pins it.

    Raises
    ------
    SnapshotNotFoundError
        A string that is neither a snapshot of the file nor a time.
    SnapshotExpiredError
        A generation or time older than the history kept.
    InvalidOptionError
        A generation newer than the file's, a negative one, or a value of
        another type.
    """
    meta = reader.meta()
    current = int(meta.get("generation", 0))
    history_from = int(meta.get("history_from", current))
    kept = has_history(reader)
    pinned = {s.generation: s.name for s in snapshots(reader, file)}
    if isinstance(as_of, bool) or as_of is None:
        raise InvalidOptionError(f"as_of {as_of!r}: give a snapshot name, a generation or a time", "as_of", as_of)
    if isinstance(as_of, str):
        by_name = {s.name: s.generation for s in snapshots(reader, file)}
        if as_of in by_name:
            return by_name[as_of]
    if isinstance(as_of, int):
        gen = as_of
        if gen < 0 or gen > current:
            raise InvalidOptionError(
                f"as_of generation {gen} of {file or reader.path}: the file is at generation {current}",
                "as_of",
                as_of,
            )
    else:
        at = _time_of(as_of)
        if at is None:
            if isinstance(as_of, str):
                raise SnapshotNotFoundError(
                    f"{file or reader.path} has no snapshot named {as_of!r}, and it is no ISO 8601 time "
                    f"(storetorrent snapshot ls {file})",
                    file,
                    as_of,
                )
            raise InvalidOptionError(
                f"as_of {as_of!r} ({type(as_of).__name__}): give a snapshot name, a generation (int) or a time",
                "as_of",
                as_of,
            )
        row = (
            reader.conn.execute("SELECT max(generation) FROM generations WHERE at <= ?", (at,)).fetchone()
            if kept
            else (None,)
        )
        if row[0] is None:
            raise SnapshotExpiredError(
                f"{file or reader.path} keeps no generation committed at or before {as_of} "
                f"(its history starts at generation {history_from})",
                file,
                -1,
                history_from,
            )
        gen = int(row[0])
    if gen == current:
        return gen
    if not kept or (gen < history_from and gen not in pinned):
        raise SnapshotExpiredError(
            f"{file or reader.path} at generation {gen} is no longer readable: its history is kept from "
            f"generation {history_from if kept else current} on (docs/snapshots.md, 'Retention'); "
            "a snapshot keeps a generation readable",
            file,
            gen,
            history_from if kept else current,
        )
    return gen


# -- what generation G holds, as SQL (docs/snapshots.md, "The model") ---------------------
# Each template takes the generation ``g`` (an int, inlined, or a placeholder
# such as ``"?1"``) and ``db``, a prefix of the tables (``""`` for an
# infofile's own connection; ``"f0."`` for one attached to DuckDB), and is
# plain SQL that SQLite and DuckDB both run. They are the one statement of
# the model: :class:`AsOf` reads through them, and so does
# :mod:`st_integrations.duckdb_sql` (``connect(..., as_of=...)``).


def _g(g) -> str:
    return g if isinstance(g, str) else str(int(g))


def records_at_sql(g, db: str = "", logical: bool = True, schema: bool = True) -> str:
    """SQL: the record versions of generation ``g`` (stripe records
    included), one row each, as ``name, size, crc32c, version, stored_as,
    logical_size, commit_seq, committed_at, schema_id``: the current
    versions committed at or before ``g`` and the past versions current at
    ``g`` (``record_history.commit_seq <= g < until``). ``logical`` and
    ``schema``: the file has the ``logical_size`` and ``schema_id`` columns
    (NULL in their place otherwise)."""
    g = _g(g)

    def cols(t: str) -> str:
        return (
            f"{t}.name AS name, {t}.size AS size, {t}.crc32c AS crc32c, {t}.version AS version, "
            f"{t}.stored_as AS stored_as, {f'{t}.logical_size' if logical else 'NULL'} AS logical_size, "
            f"{t}.commit_seq AS commit_seq, {t}.committed_at AS committed_at, "
            f"{f'{t}.schema_id' if schema else 'NULL'} AS schema_id"
        )

    return (
        f"SELECT {cols('r')} FROM {db}records r WHERE r.commit_seq <= {g} "
        f"UNION ALL SELECT {cols('v')} FROM {db}record_history v WHERE v.commit_seq <= {g} AND v.until > {g}"
    )


def objects_at_sql(g, db: str = "") -> str:
    """SQL: the striped objects of generation ``g`` as ``name, size,
    stripe_size, stripes, crc32c, commit_seq, committed_at, schema_id``."""
    g = _g(g)
    cols = "name, size, stripe_size, stripes, crc32c, commit_seq, committed_at, schema_id"
    return (
        f"SELECT {cols} FROM {db}objects WHERE commit_seq <= {g} "
        f"UNION ALL SELECT {cols} FROM {db}object_history WHERE commit_seq <= {g} AND until > {g}"
    )


@dataclass(frozen=True)
class VersionRow:
    """One version of a record or striped object (docs/snapshots.md): the
    current one (``until`` None) or a past one the file's history keeps,
    replaced or deleted by generation ``until`` at ``until_at`` (unix s).

    Attributes
    ----------
    name : str
        The record's or object's name in its file.
    generation : int
        The generation that committed it (its ``commit_seq``): reading the
        file ``as_of`` it gives this version.
    size : int
        The user's bytes (:func:`~st_py.core.infofile.user_size`; an
        object's, docs/striping.md).
    crc32c : int
        Of the stored bytes (an object's: of the user's bytes).
    committed_at : float
        Unix seconds of its commit.
    striped : bool
        A striped object, not a record.
    until, until_at : int | None, float | None
        The generation that replaced or deleted it and when; None for a
        current version.
    """

    name: str
    generation: int
    size: int
    crc32c: int
    committed_at: float
    striped: bool
    until: int | None = None
    until_at: float | None = None


def versions_between(reader, lo: str, hi: str) -> list[VersionRow]:
    """Every version of the records and striped objects named in ``[lo,
    hi)`` (code-point order) of the infofile ``reader`` reads (an
    :class:`~st_py.core.infofile.InfofileReader`): the current ones and the
    past ones its history keeps (none in a file without history), in no
    order. Stripe records are among the records (names under
    ``RESERVED_PREFIXES``: callers that show names leave them out). Raises
    ``sqlite3.Error`` of the connection. Thread safety: the reader's."""
    conn = reader.conn
    past = has_history(reader)
    rows = conn.execute(
        "SELECT name, commit_seq, size, crc32c, committed_at, logical_size, NULL, NULL FROM records "
        "WHERE name >= ?1 AND name < ?2"
        + (
            " UNION ALL SELECT name, commit_seq, size, crc32c, committed_at, logical_size, until, until_at "
            "FROM record_history WHERE name >= ?1 AND name < ?2"
            if past
            else ""
        ),
        (lo, hi),
    ).fetchall()
    out = [
        VersionRow(n, int(g), user_size(size, logical), int(crc), float(t), False, _opt(u, int), _opt(ua, float))
        for n, g, size, crc, t, logical, u, ua in rows
    ]
    try:  # striped objects, current and past
        objs = conn.execute(
            "SELECT name, commit_seq, size, crc32c, committed_at, NULL, NULL FROM objects "
            "WHERE name >= ?1 AND name < ?2"
            + (
                " UNION ALL SELECT name, commit_seq, size, crc32c, committed_at, until, until_at "
                "FROM object_history WHERE name >= ?1 AND name < ?2"
                if past
                else ""
            ),
            (lo, hi),
        ).fetchall()
    except sqlite3.OperationalError:  # a file made before striping
        objs = []
    out += [
        VersionRow(n, int(g), int(size), int(crc), float(t), True, _opt(u, int), _opt(ua, float))
        for n, g, size, crc, t, u, ua in objs
    ]
    return out


def _opt(v, kind):
    return None if v is None else kind(v)


def past_generations(reader, name: str) -> list[int]:
    """The generations that committed the past versions of ``name`` (a
    record or a striped object) the file's history keeps, newest first;
    none in a file without history. Thread safety: the reader's."""
    return sorted(
        {v.generation for v in versions_between(reader, name, name + "\0") if v.until is not None}, reverse=True
    )


def generation_of(reader, name: str, g: int, striped: bool) -> int | None:
    """The generation that committed the version of ``name`` (a striped
    object if ``striped``, else a record) that a read of generation ``g``
    sees (its S3 version id), or None if ``g`` has none. Thread safety: the
    reader's."""
    if striped:
        sql = f"SELECT commit_seq FROM ({objects_at_sql(int(g))}) WHERE name = ?2"
    else:
        sql = "SELECT commit_seq FROM records WHERE name = ?2 AND commit_seq <= ?1" + (
            " UNION ALL SELECT commit_seq FROM record_history WHERE name = ?2 AND commit_seq <= ?1 AND until > ?1"
            if has_history(reader)
            else ""
        )
    row = reader.conn.execute(sql, (int(g), name)).fetchone()
    return int(row[0]) if row else None


# A past version's holders: its retained_copies rows, the current holders of
# its copies (moved by rebalance and drain like current copies).
_PAST_COPY = "h.name = v.name AND h.until = v.until"


def copies_at_sql(g, db: str = "") -> str:
    """SQL: the copies a read of generation ``g`` uses, as ``name,
    copy_rank, peer_idx``: every version's current holders, a current
    version's (``copies``) and a past one's (``retained_copies``): a
    snapshot follows its records wherever moves took them."""
    g = _g(g)
    return (
        f"SELECT c.name AS name, c.copy_rank AS copy_rank, c.peer_idx AS peer_idx FROM {db}copies c "
        f"JOIN {db}records r ON r.name = c.name WHERE r.commit_seq <= {g} "
        f"UNION ALL SELECT h.name, h.copy_rank, h.peer_idx FROM {db}record_history v JOIN {db}retained_copies h "
        f"ON {_PAST_COPY} WHERE v.commit_seq <= {g} AND v.until > {g}"
    )


_LAST_HOLDERS = (
    f"SELECT h.copy_rank, h.peer_idx FROM record_history v JOIN retained_copies h ON {_PAST_COPY} "
    "WHERE v.name = ?2 AND v.commit_seq <= ?1 AND v.until > ?1 ORDER BY h.copy_rank"
)
"""The holders a past version of record ?2 current at generation ?1 is read
from: its copies' current holders (``retained_copies``; moved by rebalance
and drain like current copies)."""


_UNSTORED_AT = (
    "retained_unstored u JOIN record_history v ON v.name = u.name AND v.until = u.until "
    "WHERE v.commit_seq <= ?1 AND v.until > ?1"
)
"""SQL (after FROM): the unstored copies (quarantined, pending) of the past
versions current at generation ?1."""


class AsOf:
    """A read view of one infofile as of generation ``generation``: the
    subset of :class:`~st_py.core.infofile.InfofileReader` that reads use
    (``count``, ``names``, ``exists``, ``lookup``, ``lookup_many``,
    ``object``, ``objects``, ``stats``, ``user_bytes``,
    ``count_unavailable``, ``counted``), answered for that generation.

    Not safe to share between threads beyond what its reader allows (the
    open file's lock serializes its users)."""

    def __init__(self, reader: InfofileReader, generation: int, file: str = ""):
        self.reader, self.as_of, self.file = reader, int(generation), file
        self.conn = reader.conn
        self.path = reader.path
        self._records_sql: str | None = None

    def _has_column(self, column: str) -> bool:
        try:
            self.conn.execute(f"SELECT {column} FROM records LIMIT 0")
            return True
        except sqlite3.OperationalError:
            return False

    def _visible(self) -> str:
        """:func:`records_at_sql` at this view's generation (``?1``), with a
        column ``logical``: the user's bytes (:func:`~st_py.core.infofile.user_size`)."""
        if self._records_sql is None:
            at = records_at_sql("?1", logical=self._has_column("logical_size"), schema=self._has_column("schema_id"))
            self._records_sql = f"SELECT *, coalesce(logical_size, size) AS logical FROM ({at})"
        return self._records_sql

    def _objects(self) -> str | None:
        """:func:`objects_at_sql` at this view's generation (``?1``), or None
        in a file made before striping."""
        try:
            self.conn.execute("SELECT 1 FROM objects LIMIT 0")
        except sqlite3.OperationalError:
            return None
        return objects_at_sql("?1")

    # -- what InfofileReader answers, at the view's generation ------------------------
    def meta(self) -> dict:
        """The infofile's meta table (the current one: it has no history)."""
        return self.reader.meta()

    def generation(self) -> int:
        """The generation this view reads."""
        return self.as_of

    def counted(self) -> tuple[int, int]:
        """``(current generation, records at this view's generation)`` in one
        transaction, for a GET_LOCAL plan as of it (peers reveal the
        versions of this generation as held at the current one)."""
        c = self.conn
        c.execute("BEGIN")
        try:
            gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
            n = self._count_records(with_stripes=True)
        finally:
            c.execute("COMMIT")
        return gen, n

    def _count_records(self, with_stripes: bool) -> int:
        g = self.as_of
        stripes = "" if with_stripes else " AND NOT (name >= ?2 AND name < ?3)"
        (a,) = self.conn.execute(
            f"SELECT count(*) FROM records WHERE commit_seq <= ?1{stripes}",
            (g,) if with_stripes else (g, STRIPE_PREFIX, STRIPE_END),
        ).fetchone()
        (b,) = self.conn.execute(
            f"SELECT count(*) FROM record_history WHERE commit_seq <= ?1 AND until > ?1{stripes}",
            (g,) if with_stripes else (g, STRIPE_PREFIX, STRIPE_END),
        ).fetchone()
        return int(a) + int(b)

    def count(self) -> int:
        """Records and objects at this generation (not stripe records)."""
        return self._count_records(with_stripes=False) + len(self.objects())

    def names(self, prefix: str | None = None) -> list[str]:
        """Record and object names at this generation (not stripes), sorted."""
        p = prefix or ""
        rows = self.conn.execute(
            f"SELECT name FROM ({self._visible()}) WHERE substr(name, 1, ?2) = ?3",
            (self.as_of, len(p), p),
        )
        out = [r[0] for r in rows if not r[0].startswith(STRIPE_PREFIX)]
        out += [o.name for o in self.objects() if o.name.startswith(p)]
        return sorted(out)

    def exists(self, name: str) -> bool:
        """A record or object of that name at this generation."""
        return self.lookup(name) is not None or self.object(name) is not None

    def lookup(self, name: str) -> RecordMeta | None:
        """The version of record ``name`` at this generation with the holders
        it is read from, or None (no such record then). A past version whose
        copies are no longer kept has no holders (``peers == ()``)."""
        rows = self.conn.execute(
            "SELECT r.size, r.crc32c, c.copy_rank, c.peer_idx, r.version, r.stored_as FROM records r "
            "JOIN copies c ON c.name = r.name WHERE r.name = ?2 AND r.commit_seq <= ?1 ORDER BY c.copy_rank",
            (self.as_of, name),
        ).fetchall()
        if rows:
            f = rows[0]
            return RecordMeta(name, f[0], f[1], tuple(r[3] for r in rows), tuple(r[2] for r in rows), f[4], f[5])
        v = self.conn.execute(
            "SELECT size, crc32c, version, stored_as FROM record_history "
            "WHERE name = ?2 AND commit_seq <= ?1 AND until > ?1",
            (self.as_of, name),
        ).fetchone()
        if v is None:
            # a current version committed later, whose copies are not all
            # stored yet, or none: either way not a record at this generation
            return None
        held = self.conn.execute(_LAST_HOLDERS, (self.as_of, name)).fetchall()
        return RecordMeta(name, v[0], v[1], tuple(p for _, p in held), tuple(r for r, _ in held), v[2], v[3])

    def lookup_many(self, names: list[str]) -> dict[str, RecordMeta]:
        """:meth:`lookup` of many names (those that are records at this generation)."""
        out = {}
        for n in names:
            m = self.lookup(n)
            if m is not None:
                out[n] = m
        return out

    def object(self, name: str) -> ObjectMeta | None:
        """The striped object ``name`` at this generation, or None."""
        g = self.as_of
        try:
            row = self.conn.execute(
                "SELECT name, size, stripe_size, stripes, crc32c FROM objects WHERE name = ?2 AND commit_seq <= ?1 "
                "UNION ALL SELECT name, size, stripe_size, stripes, crc32c FROM object_history "
                "WHERE name = ?2 AND commit_seq <= ?1 AND until > ?1",
                (g, name),
            ).fetchone()
        except sqlite3.OperationalError:  # a file made before striping
            return None
        return ObjectMeta(*row) if row else None

    def objects(self, generation: int | None = None) -> list[ObjectMeta]:
        """The striped objects at this generation, sorted by name."""
        try:
            rows = self.conn.execute(
                "SELECT name, size, stripe_size, stripes, crc32c FROM objects WHERE commit_seq <= ?1 "
                "UNION ALL SELECT name, size, stripe_size, stripes, crc32c FROM object_history "
                "WHERE commit_seq <= ?1 AND until > ?1 ORDER BY name",
                (self.as_of,),
            )
            return [ObjectMeta(*r) for r in rows]
        except sqlite3.OperationalError:
            return []

    def stats(self) -> tuple[int, int]:
        """``(names, bytes)`` at this generation, as
        :func:`~st_py.core.infofile.name_stats` counts them now."""
        (b,) = self.conn.execute(f"SELECT coalesce(sum(size), 0) FROM ({self._visible()})", (self.as_of,)).fetchone()
        return self.count(), int(b)

    def user_bytes(self) -> int:
        """The user's bytes of the records and objects at this generation."""
        (b,) = self.conn.execute(
            f"SELECT coalesce(sum(logical), 0) FROM ({self._visible()}) WHERE NOT (name >= ?2 AND name < ?3)",
            (self.as_of, STRIPE_PREFIX, STRIPE_END),
        ).fetchone()
        return int(b) + sum(o.size for o in self.objects())

    # -- what scans and the fsspec filesystem ask (InfofileReader's names) ---------------
    # Every query below reads the versions of this generation through
    # records_at_sql / objects_at_sql: a range of names is one range of the
    # name index of records and of record_history each.
    def peerlist(self) -> list[tuple[int, str, str]]:
        """The file's peerlist (it only grows: the current one holds every
        peer index of any generation)."""
        return self.reader.peerlist()

    def has_stripes(self) -> bool:
        """Are there stripe records (of objects) at this generation?"""
        return (
            self.conn.execute(
                f"SELECT 1 FROM ({self._visible()}) WHERE name >= ?2 AND name < ?3 LIMIT 1",
                (self.as_of, STRIPE_PREFIX, STRIPE_END),
            ).fetchone()
            is not None
        )

    def is_empty(self) -> bool:
        """No record (nor stripe) at this generation."""
        return self.conn.execute(f"SELECT 1 FROM ({self._visible()}) LIMIT 1", (self.as_of,)).fetchone() is None

    def last_commit_at(self) -> float | None:
        """Unix seconds of the newest record of this generation, or None."""
        (t,) = self.conn.execute(f"SELECT max(committed_at) FROM ({self._visible()})", (self.as_of,)).fetchone()
        return None if t is None else float(t)

    def record_stat(self, name: str) -> tuple[int, int, float, int | None] | None:
        """``(size, crc32c, committed_at, logical_size)`` of record ``name``
        at this generation (as :meth:`InfofileReader.record_stat`), or None."""
        return self.conn.execute(
            f"SELECT size, crc32c, committed_at, logical_size FROM ({self._visible()}) WHERE name = ?2",
            (self.as_of, name),
        ).fetchone()

    def user_meta_of(self, name: str) -> dict[str, str]:
        """The user metadata of the version of record or object ``name``
        current at this generation (as
        :meth:`InfofileReader.user_meta_of`): the metadata that version
        was committed with, ``{}`` if none."""
        objs = self._objects()
        versions = f"SELECT commit_seq FROM ({self._visible()}) WHERE name = ?2"
        if objs is not None:
            versions += f" UNION ALL SELECT commit_seq FROM ({objs}) WHERE name = ?2"
        return read_user_meta(
            self.conn,
            name,
            f"SELECT meta FROM user_meta WHERE name = ?2 AND commit_seq IN ({versions})",
            (self.as_of, name),
        )

    def records_between(self, lo: str, hi: str | None = None) -> list[tuple]:
        """``(name, size, crc32c, committed_at, logical_size)`` of the
        records of this generation with ``lo <= name < hi`` (no upper bound
        if None), stripes included, in name order."""
        hi_sql = "" if hi is None else " AND name < ?3"
        args = (self.as_of, lo) if hi is None else (self.as_of, lo, hi)
        return self.conn.execute(
            f"SELECT name, size, crc32c, committed_at, logical_size FROM ({self._visible()}) "
            f"WHERE name >= ?2{hi_sql} ORDER BY name",
            args,
        ).fetchall()

    def any_between(self, lo: str, hi: str) -> bool:
        """Is a record named ``lo <= name < hi`` one of this generation?"""
        return (
            self.conn.execute(
                f"SELECT 1 FROM ({self._visible()}) WHERE name >= ?2 AND name < ?3 LIMIT 1", (self.as_of, lo, hi)
            ).fetchone()
            is not None
        )

    def object_stat(self, name: str) -> tuple[int, int, float, int, int] | None:
        """``(size, crc32c, committed_at, stripes, stripe_size)`` of striped
        object ``name`` at this generation, or None."""
        q = self._objects()
        if q is None:
            return None
        return self.conn.execute(
            f"SELECT size, crc32c, committed_at, stripes, stripe_size FROM ({q}) WHERE name = ?2", (self.as_of, name)
        ).fetchone()

    def objects_between(self, lo: str = "", hi: str | None = None) -> list[tuple]:
        """``(name, size, crc32c, committed_at, stripes, stripe_size)`` of
        the striped objects of this generation with ``lo <= name < hi``."""
        q = self._objects()
        if q is None:
            return []
        hi_sql = "" if hi is None else " AND name < ?3"
        args = (self.as_of, lo) if hi is None else (self.as_of, lo, hi)
        return self.conn.execute(
            f"SELECT name, size, crc32c, committed_at, stripes, stripe_size FROM ({q}) "
            f"WHERE name >= ?2{hi_sql} ORDER BY name",
            args,
        ).fetchall()

    def entries_between(self, lo: str = "", hi: str | None = None) -> list[tuple]:
        """The records (not stripes, nor the stored names of versions) and
        striped objects of this generation named ``lo <= name < hi``, as
        :meth:`InfofileReader.entries_between` gives them: ``(name,
        stored_size, logical_size, crc32c, committed_at, stripes,
        stripe_size)``, in name order."""
        rows = [
            (n, sz, lg, crc, t, None, None)
            for n, sz, crc, t, lg in self.records_between(lo, hi)
            if not n.startswith(RESERVED_PREFIXES)
        ]
        objs = [(n, sz, sz, crc, t, k, ss) for n, sz, crc, t, k, ss in self.objects_between(lo, hi)]
        if objs:
            rows = sorted(rows + objs, key=lambda r: r[0])
        return rows

    def names_between(self, lo: str = "", hi: str | None = None) -> list[str]:
        """The names users see at this generation in ``lo <= name < hi``
        (:meth:`entries_between`'s), sorted, each once."""
        return list(dict.fromkeys(r[0] for r in self.entries_between(lo, hi)))

    def level(self, prefix: str, detail: bool = True) -> tuple[list, list[str]]:
        """One level of the tree of names below ``prefix`` at this
        generation, as :meth:`InfofileReader.level` gives it. It reads every
        name below ``prefix`` (a past generation's listing is not on the
        hot path)."""
        plen = len(prefix)
        entries: list = []
        heads: dict[str, None] = {}
        if prefix.startswith(RESERVED_PREFIXES):
            return entries, []
        for row in self.entries_between(prefix, prefix_upper(prefix) if prefix else None):
            j = row[0].find("/", plen)
            if j < 0:
                entries.append(row if detail else row[0])
            else:
                heads.setdefault(row[0][plen:j])
        return entries, list(heads)

    def copy_rows(
        self, non_live_idxs: list[int], names: list[str] | None = None
    ) -> dict[str, list[tuple[int, int, str]]]:
        """What :meth:`InfofileReader.copy_rows` gives, at this generation:
        ``{name: [(copy_rank, peer_idx, "stored" | "pending" |
        "quarantined")]}`` of the records of this generation that have a
        copy on one of ``non_live_idxs``, or a pending or quarantined copy
        (of a version still current), or (with ``names``) of those records;
        their copies are those a read of this generation uses
        (:func:`copies_at_sql`). The input of
        :func:`st_py.core.copy_health.file_health` for a past state."""
        g = self.as_of
        at = f"SELECT * FROM ({copies_at_sql('?1')})"
        extra = []
        for table in ("pending_copies", "quarantined_copies"):
            if self.reader.has_table(table):
                extra.append(table)
        unstored = self.reader.has_table("retained_unstored")
        if names is not None:
            found_sql = f"SELECT name FROM ({self._visible()}) WHERE name IN ({','.join('?' * len(names))})"
            args: list[object] = [g, *names]
        else:
            marks = ",".join("?" * len(non_live_idxs)) or "NULL"
            found_sql = f"SELECT name FROM ({at}) WHERE peer_idx IN ({marks})"
            for table in extra:
                found_sql += (
                    f" UNION SELECT t.name FROM {table} t JOIN records r ON r.name = t.name WHERE r.commit_seq <= ?1"
                )
            if unstored:
                found_sql += f" UNION SELECT u.name FROM {_UNSTORED_AT}"
            args = [g, *non_live_idxs]
        c = self.conn
        own = not c.in_transaction
        if own:
            c.execute("BEGIN")  # one state of the tables
        try:
            found = [r[0] for r in c.execute(found_sql, args)]
            out: dict[str, list[tuple[int, int, str]]] = {n: [] for n in found}
            for i in range(0, len(found), 500):
                chunk = found[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for n, r, p in c.execute(
                    f"SELECT name, copy_rank, peer_idx FROM ({at}) WHERE name IN ({marks})", [g, *chunk]
                ):
                    out[n].append((int(r), int(p), "stored"))
                for table in extra:
                    kind = "pending" if table == "pending_copies" else "quarantined"
                    q = (
                        f"SELECT t.name, t.copy_rank, t.peer_idx FROM {table} t JOIN records r ON r.name = t.name "
                        f"WHERE r.commit_seq <= ?1 AND t.name IN ({marks})"
                    )
                    for n, r, p in c.execute(q, [g, *chunk]):
                        out[n].append((int(r), int(p), kind))
                if unstored:  # a past version's copies quarantined or pending (docs/snapshots.md)
                    q = f"SELECT u.name, u.copy_rank, u.peer_idx, u.state FROM {_UNSTORED_AT} AND u.name IN ({marks})"
                    for n, r, p, st in c.execute(q, [g, *chunk]):
                        out[n].append((int(r), int(p), str(st)))
        finally:
            if own:
                c.execute("COMMIT")
        return out

    # -- record schemas kept at write time, of this generation's versions ------------------
    def _schema_rows(self) -> str | None:
        """SQL: ``name, schema_id`` of the records (not stripes) and objects
        of this generation (``?1``), or None in a file without kept schemas."""
        if not self._has_column("schema_id"):
            return None
        q = f"SELECT name, schema_id FROM ({self._visible()}) WHERE NOT (name >= ?2 AND name < ?3)"
        objs = self._objects()
        return q if objs is None else f"{q} UNION ALL SELECT name, schema_id FROM ({objs})"

    def kept_schemas(self) -> list[tuple[str, bytes, str]] | None:
        """The distinct schemas of this generation's records and objects as
        ``(format, Arrow IPC schema, a record that has it)``, in the order of
        those records' names (as :meth:`InfofileReader.kept_schemas`); None
        for a file made before schemas were kept."""
        q = self._schema_rows()
        if q is None:
            return None
        try:
            rows = self.conn.execute(
                f"SELECT s.format, s.schema, min(v.name) FROM ({q}) v JOIN schemas s USING(schema_id) "
                "GROUP BY v.schema_id ORDER BY 3",
                (self.as_of, STRIPE_PREFIX, STRIPE_END),
            ).fetchall()
        except sqlite3.OperationalError:  # no schemas table
            return None
        return [(fmt, bytes(blob), first) for fmt, blob, first in rows]

    def names_without_schema(self, limit: int | None = None) -> list[str]:
        """This generation's record and object names (not stripes) whose
        schema was not kept, sorted (as :meth:`InfofileReader.names_without_schema`)."""
        q = self._schema_rows()
        if q is None:
            out = self.names()
            return out if limit is None else out[:limit]
        return [
            n
            for (n,) in self.conn.execute(
                f"SELECT name FROM ({q}) WHERE schema_id IS NULL ORDER BY name LIMIT ?4",
                (self.as_of, STRIPE_PREFIX, STRIPE_END, -1 if limit is None else int(limit)),
            )
        ]

    def schemas_of(self, names: list[str]) -> dict[str, tuple[str, bytes]]:
        """``{name: (format, Arrow IPC schema)}`` of the named records and
        objects of this generation whose schema was kept."""
        q = self._schema_rows()
        out: dict[str, tuple[str, bytes]] = {}
        if q is None:
            return out
        for i in range(0, len(names), 500):
            chunk = names[i : i + 500]
            marks = ",".join("?" * len(chunk))
            try:
                rows = self.conn.execute(
                    f"SELECT v.name, s.format, s.schema FROM ({q}) v JOIN schemas s USING(schema_id) "
                    f"WHERE v.name IN ({marks})",
                    (self.as_of, STRIPE_PREFIX, STRIPE_END, *chunk),
                )
            except sqlite3.OperationalError:  # no schemas table
                return out
            out.update((n, (fmt, bytes(blob))) for n, fmt, blob in rows)
        return out

    def count_unavailable(self, dead_idxs: list[int], copies: int) -> int:
        """Records of this generation with no kept copy outside
        ``dead_idxs`` (a GET_LOCAL plan's check, paper 4.2)."""
        marks = ",".join("?" * len(dead_idxs)) or "-1"
        g = self.as_of
        (a,) = self.conn.execute(
            "SELECT count(*) FROM records r WHERE r.commit_seq <= ? AND NOT EXISTS (SELECT 1 FROM copies c "
            f"WHERE c.name = r.name AND c.peer_idx NOT IN ({marks}))",
            [g, *dead_idxs],
        ).fetchone()
        (b,) = self.conn.execute(
            "SELECT count(*) FROM record_history v WHERE v.commit_seq <= ? AND v.until > ? AND NOT EXISTS "
            "(SELECT 1 FROM retained_copies r WHERE r.name = v.name AND r.until = v.until "
            f"AND r.peer_idx NOT IN ({marks}))",
            [g, g, *dead_idxs],
        ).fetchone()
        return int(a) + int(b)

    def entries(self) -> list[dict]:
        """One plain row per name at this generation (records, not stripes,
        and objects), sorted: ``name``, ``kind`` (record or object),
        ``size`` (the user's bytes), ``stored_size`` (one copy as stored),
        ``crc32c`` (``storetorrent ls -r --as-of``)."""
        rows = [
            {"name": n, "kind": "record", "size": int(lg), "stored_size": int(sz), "crc32c": int(crc)}
            for n, sz, crc, lg in self.conn.execute(
                f"SELECT name, size, crc32c, logical FROM ({self._visible()}) WHERE NOT (name >= ?2 AND name < ?3)",
                (self.as_of, STRIPE_PREFIX, STRIPE_END),
            )
        ]
        for o in self.objects():
            (stored,) = self.conn.execute(
                f"SELECT coalesce(sum(size), 0) FROM ({self._visible()}) WHERE name >= ?2 AND name < ?3",
                (self.as_of, f"{STRIPE_PREFIX}{o.name}/", f"{STRIPE_PREFIX}{o.name}0"),
            ).fetchone()
            rows.append(
                {"name": o.name, "kind": "object", "size": o.size, "stored_size": int(stored), "crc32c": o.crc32c}
            )
        return sorted(rows, key=lambda r: r["name"])

    def unavailable_names(self, dead_idxs: list[int], limit: int = 100) -> list[str]:
        """Up to ``limit`` records of this generation counted by
        :meth:`count_unavailable`, sorted."""
        marks = ",".join("?" * len(dead_idxs)) or "-1"
        g = self.as_of
        rows = self.conn.execute(
            "SELECT r.name FROM records r WHERE r.commit_seq <= ? AND NOT EXISTS (SELECT 1 FROM copies c "
            f"WHERE c.name = r.name AND c.peer_idx NOT IN ({marks})) "
            "UNION ALL SELECT v.name FROM record_history v WHERE v.commit_seq <= ? AND v.until > ? AND NOT EXISTS "
            "(SELECT 1 FROM retained_copies r WHERE r.name = v.name AND r.until = v.until "
            f"AND r.peer_idx NOT IN ({marks})) ORDER BY 1 LIMIT ?",
            [g, *dead_idxs, g, g, *dead_idxs, limit],
        )
        return [r[0] for r in rows]

    def gone(self, limit: int = 20) -> list[str]:
        """Past versions of this generation none of whose copies are kept
        (their history rows outlived their copies' rows), up to ``limit``."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT v.name FROM record_history v WHERE v.commit_seq <= ?1 AND v.until > ?1 AND NOT EXISTS "
                "(SELECT 1 FROM retained_copies r WHERE r.name = v.name AND r.until = v.until) LIMIT ?2",
                (self.as_of, limit),
            )
        ]


__all__ = [
    "HELD",
    "AsOf",
    "Snapshot",
    "has_history",
    "resolve_as_of",
    "retained_bytes",
    "retained_on",
    "may_store_under_name",
    "copy_standing",
    "standings",
    "Standings",
    "LIVE",
    "ADOPT",
    "STALE",
    "snapshot_count",
    "snapshots",
]
