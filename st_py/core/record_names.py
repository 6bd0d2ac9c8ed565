"""The rule for record names (docs/decisions.md, "Record names"): the one
owner of what a record name may be, read by the client's put, the
tracker's commit, fsspec, the writers and the CLI.

A record name is UTF-8 text of 1 to ``MAX_NAME`` bytes without NUL
(:func:`name_bytes`). A *new* name (a put) is also a relative path:
``/``-separated components, none of them empty, ``.`` or ``..`` (so no
leading or trailing ``/`` and no ``//``) (:func:`check_new_name`). Nothing
else is interpreted: spaces, brackets, ``\\``, ``%2e``, unicode stay exact.
Names already committed before the rule stay readable and deletable: only
new puts are refused.

The ``/`` in names makes a tree (listings, fsspec, get -r), so a name is
either a record or a folder, never both (:func:`tree_conflict`): ``a/b``
may not be committed while a record ``a`` is (a prefix of the name is a
record: ``NotADirectoryError``), nor while a record ``a/b/c`` is (the name
is a folder: ``IsADirectoryError``). Both are index lookups (one per
component, and one range), never a scan; many names at once
(:func:`name_states`, :func:`tree_conflicts`) in two statements a table.
"""

from __future__ import annotations

import json
import re
import sqlite3

from st_py.errors import BadNameError, RecordIsADirectoryError, RecordNameRuleError, RecordNotADirectoryError

IS_A_DIRECTORY = "is-a-directory"
"""Conflict kind: the name is a folder (a committed record starts with ``name + "/"``)."""
NOT_A_DIRECTORY = "not-a-directory"
"""Conflict kind: a component-prefix of the name is a committed record."""
BAD_NAME = "bad-name"
"""Conflict kind: the name breaks the path rule (the tracker's own check)."""

MAX_NAME = 4096
"""Bytes a record name may have (UTF-8); the peer's frames carry at most
this many (st_core's protocol, docs/wire-protocol.md)."""

RULE = (
    "a record name is a relative path: '/'-separated components, none empty, '.' or '..' "
    "(no leading or trailing '/', no '//')"
)


def name_bytes(name: str) -> bytes:
    """``name`` as the peers and the infofile keep it (UTF-8). The check of
    every name used (reads, deletes of names committed before the path
    rule); new names also pass :func:`check_new_name`.

    Raises
    ------
    BadNameError
        Not a str, not UTF-8, empty, over ``MAX_NAME`` bytes or with a NUL.
    """
    if not isinstance(name, str):
        raise BadNameError(f"record name must be a str, not {type(name).__name__}")
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadNameError(
            f"record name {name[:80]!r} is not valid UTF-8 (the infofile keeps names as "
            "UTF-8 text); decode it first, e.g. bytes.hex() or base64"
        ) from None
    if not b or len(b) > MAX_NAME or b"\x00" in b:
        raise BadNameError(f"record name must be 1 to {MAX_NAME} bytes without NUL: {name[:80]!r}")
    return b


def path_problem(name: str) -> str:
    """What breaks the path rule in ``name`` (a str), or "" if nothing."""
    if name.startswith("/"):
        return "it starts with '/'"
    if name.endswith("/"):
        return "it ends with '/'"
    for part in name.split("/"):
        if part == "":
            return "it has an empty component ('//')"
        if part in (".", ".."):
            return f"it has a {part!r} component"
    return ""


def check_new_name(name: str) -> bytes:
    """Check ``name`` for a put: :func:`name_bytes` and the path rule.
    Returns its UTF-8 bytes. Pure; thread-safe.

    Raises
    ------
    BadNameError
        As :func:`name_bytes`.
    RecordNameRuleError
        (a BadNameError) a leading or trailing ``/``, an empty component,
        or a ``.`` or ``..`` component; ``name`` and ``reason`` say which.
    """
    b = name_bytes(name)
    why = path_problem(name)
    if why:
        raise RecordNameRuleError(name, why, RULE)
    return b


# A "." or ".." component: between the start, a "/" or a NUL (the joint of
# check_new_names) and the end, a "/" or a NUL.
_DOT_PART = re.compile(r"(?:^|[/\x00])\.\.?(?=$|[/\x00])")


def check_new_names(names: list, reserved: tuple[str, ...] = ()) -> list[bytes] | None:
    """The UTF-8 bytes of every name of ``names`` when **each** passes
    :func:`check_new_name` and starts with none of ``reserved``, checked
    all at once (one join, encode and split; a write batch's slice: issue
    41); None if any name might not, and the caller checks them one by
    one, which says which and why. Pure; thread-safe.

    Names never hold a NUL, so the names joined by NUL split back into
    exactly themselves, and every rule of a name is a pattern of the
    joined text at a name's start (after a NUL), end (before one) or
    within it."""
    if not names:
        return []
    try:
        joined = "\x00".join(names)  # TypeError: a name that is no str
        raw = joined.encode("utf-8")  # UnicodeEncodeError: a lone surrogate
    except (TypeError, UnicodeEncodeError):
        return None
    parts = raw.split(b"\x00")
    if len(parts) != len(names):  # a NUL inside a name
        return None
    if min(map(len, parts)) == 0 or max(map(len, parts)) > MAX_NAME:
        return None
    if joined.startswith("/") or joined.endswith("/") or "\x00/" in joined or "/\x00" in joined:
        return None
    if "//" in joined or ("." in joined and _DOT_PART.search(joined)):
        return None
    for prefix in reserved:
        if joined.startswith(prefix) or "\x00" + prefix in joined:
            return None
    return parts


def parents(name: str) -> list[str]:
    """The proper component-prefixes of ``name``, shortest first:
    ``a/b/c`` -> ``[a, a/b]``."""
    out = []
    i = name.find("/")
    while i >= 0:
        out.append(name[:i])
        i = name.find("/", i + 1)
    return out


def _below_upper(name: str) -> str:
    return name + "0"  # "0" follows "/": [name + "/", name + "0") is every name below it


def name_state(conn, name: str, objects: bool = True) -> tuple[bool, tuple[str, str] | None]:
    """Whether ``name`` is committed (a record or striped object) and the
    committed name that keeps it from being committed anew, as
    :func:`tree_conflict` gives it, in **one** statement: the name and its
    parents (an ``IN`` on each table's primary key) and the first name
    below it (an index range per table). A put's whole check against the
    infofile (:meth:`st_py.core.infofile.InfofileReader.name_state`).

    ``conn``: an infofile connection (``execute``), read inside the
    caller's transaction if it holds one; ``objects=False``: the file has
    no objects table (made before striped objects).
    """
    ps = parents(name)
    keys = [name, *ps]
    marks = ",".join("?" * len(keys))
    below = (name + "/", _below_upper(name))
    tables = ("records", "objects") if objects else ("records",)
    sql = " UNION ALL ".join(
        f"SELECT name, 0 FROM {t} WHERE name IN ({marks}) UNION ALL "
        f"SELECT * FROM (SELECT name, 1 FROM {t} WHERE name >= ? AND name < ? ORDER BY name LIMIT 1)"
        for t in tables
    )
    rows = conn.execute(sql, [*keys, *below] * len(tables)).fetchall()
    exists = any(n == name for n, b in rows if not b)
    hit = min((n for n, b in rows if not b and n != name), key=len, default=None)
    if hit is not None:
        return exists, (NOT_A_DIRECTORY, hit)
    first = min((n for n, b in rows if b), default=None)
    return exists, (None if first is None else (IS_A_DIRECTORY, first))


def name_states(conn, names: list[str], objects: bool = True) -> dict[str, tuple[bool, tuple[str, str] | None]]:
    """:func:`name_state` of many ``names`` at once (a write batch's
    slice): ``{name: (committed, conflict)}`` with one entry for **every**
    distinct name given (``(False, None)`` for a name free to put), each
    equal to what :func:`name_state` gives for it. Two statements per
    table whatever the count, as :func:`tree_conflicts` (the names go in as
    one JSON array): one lookup on the primary key of the names and all
    their parents (existence and the not-a-directory conflicts), and one
    index range per name (the first name below it). The kinds are judged
    across both tables as :func:`name_state` does: the shortest committed
    parent first, else the first name below, records and objects together.

    ``conn``: an infofile connection (``execute``), read inside the
    caller's transaction if it holds one; ``objects=False``, or a file
    made before striped objects (no objects table), reads records only.
    Pure reads; as thread-safe as ``conn``.
    """
    uniq = list(dict.fromkeys(names))
    if not uniq:
        return {}
    dirs = {n[: n.rfind("/")] for n in uniq if "/" in n}  # one per name; their parents are few
    keys = json.dumps(sorted(dirs.union(uniq, *(parents(d) for d in dirs))))
    arr = json.dumps(uniq)
    committed: set[str] = set()
    below: dict[str, str] = {}  # name -> the first committed name below it, of every table
    for table in ("records", "objects") if objects else ("records",):
        try:
            committed.update(
                r[0]
                for r in conn.execute(
                    f"SELECT name FROM {table} WHERE name IN (SELECT value FROM json_each(?))", (keys,)
                )
            )
            rows = conn.execute(
                f"SELECT j.value, (SELECT name FROM {table} WHERE name >= j.value || '/' AND name < j.value || '0' "
                "ORDER BY name LIMIT 1) AS below FROM json_each(?) j WHERE below IS NOT NULL",
                (arr,),
            ).fetchall()
        except sqlite3.OperationalError:  # a file made before striped objects has no objects table
            if table == "objects":
                break
            raise
        for n, b in rows:
            if n not in below or b < below[n]:  # str order is UTF-8 byte order: SQLite's
                below[n] = b
    out: dict[str, tuple[bool, tuple[str, str] | None]] = {}
    for n in uniq:
        hit = next((p for p in parents(n) if p in committed), None)  # shortest first
        b = below.get(n)
        conflict = (NOT_A_DIRECTORY, hit) if hit is not None else None if b is None else (IS_A_DIRECTORY, b)
        out[n] = (n in committed, conflict)
    return out


def tree_conflict(conn, name: str, objects: bool = True) -> tuple[str, str] | None:
    """The committed record or striped object that keeps ``name`` from
    being committed, as ``(kind, that name)``: :data:`NOT_A_DIRECTORY` (it
    is a component-prefix of ``name``; the shortest) or
    :data:`IS_A_DIRECTORY` (it starts with ``name + "/"``); None if none.
    ``name`` itself never conflicts (a replacement, an idempotent retry).

    ``conn``: an infofile connection (``execute``), read inside the
    caller's transaction if it holds one. One statement of index lookups
    (:func:`name_state`); ``objects=False`` leaves out the objects table
    (the caller knows it is empty or absent).
    """
    return name_state(conn, name, objects)[1]


def tree_conflicts(conn, names: list[str], objects: bool = True) -> dict[str, tuple[str, str]]:
    """:func:`tree_conflict` of many ``names`` at once (a group commit):
    ``{name: (kind, committed name)}`` for those that conflict. Two
    statements per table, whatever the count (the names go in as one JSON
    array; each is an index lookup or an index range inside SQLite, no
    round trip per name). Parents are judged first, as
    :func:`tree_conflict` does."""
    out: dict[str, tuple[str, str]] = {}
    if not names:
        return out
    dirs = {n[: n.rfind("/")] for n in names if "/" in n}  # one per name; their parents are few
    ps = sorted(dirs.union(*(parents(d) for d in dirs)))
    for table in ("records", "objects") if objects else ("records",):
        try:
            if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None:
                continue  # nothing committed in the way (a job's new file): no statement over the names
            if ps:
                hit = {
                    r[0]
                    for r in conn.execute(
                        f"SELECT name FROM {table} WHERE name IN (SELECT value FROM json_each(?))", (json.dumps(ps),)
                    )
                }
                if hit:
                    for n in names:
                        if n not in out:
                            p = next((p for p in parents(n) if p in hit), None)
                            if p is not None:
                                out[n] = (NOT_A_DIRECTORY, p)
            rows = conn.execute(
                f"SELECT j.value, (SELECT name FROM {table} WHERE name >= j.value || '/' AND name < j.value || '0' "
                "ORDER BY name LIMIT 1) AS below FROM json_each(?) j WHERE below IS NOT NULL",
                (json.dumps(names),),
            ).fetchall()
        except sqlite3.OperationalError:  # a file made before striped objects has no objects table
            if table == "objects":
                return out
            raise
        for n, below in rows:
            out.setdefault(n, (IS_A_DIRECTORY, below))
    return out


class NameTree:
    """Names being committed together (a batch, a handle's puts in
    flight), checked against each other as :func:`tree_conflict` checks
    against the infofile. Not thread-safe (used under its owner's lock)."""

    def __init__(self) -> None:
        self._names: dict[str, int] = {}  # name -> how many times added
        self._folders: dict[str, int] = {}  # proper parents of the names -> how many names below

    def conflict(self, name: str, ps: list[str] | None = None) -> tuple[str, str] | None:
        """``(kind, name in the tree)`` that blocks ``name``, or None
        (``ps``: its :func:`parents`, if the caller has them)."""
        if not self._names:
            return None
        for p in parents(name) if ps is None else ps:
            if p in self._names:
                return NOT_A_DIRECTORY, p
        if name in self._folders:
            lo = name + "/"
            return IS_A_DIRECTORY, next((n for n in self._names if n.startswith(lo)), lo)
        return None

    def conflicts_many(self, names: list[str]) -> dict[str, tuple[str, str]]:
        """:meth:`conflict` of each of ``names``, ``{name: (kind, name in
        the tree)}`` for those that have one (a write batch's slice: the
        parents of names sharing a folder looked up once)."""
        counts = self._names
        if not counts:
            return {}
        folders = self._folders
        out: dict[str, tuple[str, str]] = {}
        above: dict[str, str | None] = {}  # a folder -> the name in the tree at or above it, or None
        for name in names:
            i = name.rfind("/")
            if i >= 0:
                head = name[:i]
                if head in above:
                    hit = above[head]
                else:
                    hit = above[head] = next((p for p in (*parents(head), head) if p in counts), None)
                if hit is not None:
                    out[name] = (NOT_A_DIRECTORY, hit)
                    continue
            if name in folders:
                found = self.conflict(name)
                if found is not None:
                    out[name] = found
        return out

    def add(self, name: str, ps: list[str] | None = None) -> None:
        """Count ``name`` in (``ps``: its :func:`parents`, if the caller has them)."""
        self._names[name] = self._names.get(name, 0) + 1
        folders = self._folders
        for p in parents(name) if ps is None else ps:
            folders[p] = folders.get(p, 0) + 1

    def add_many(self, names: list[str]) -> None:
        """Count each of ``names`` in, as :meth:`add` of each does (a
        write batch's slice: one call, each folder counted once)."""
        counts, folders = self._names, self._folders
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        for folder, k in _folders_of(names).items():
            folders[folder] = folders.get(folder, 0) + k

    def discard_many(self, names: list[str]) -> None:
        """Count each of ``names`` out, as :meth:`discard` of each does
        (a group commit's records)."""
        counts, folders = self._names, self._folders
        out = []
        for name in names:
            n = counts.get(name, 0)
            if n == 1:
                del counts[name]
            elif n:
                counts[name] = n - 1
            else:
                continue
            out.append(name)
        for folder, k in _folders_of(out).items():
            left = folders.get(folder, 0) - k
            if left > 0:
                folders[folder] = left
            else:
                folders.pop(folder, None)

    def discard(self, name: str) -> None:
        """Count ``name`` out (once per :meth:`add`)."""
        n = self._names.get(name, 0)
        if not n:
            return
        if n == 1:
            del self._names[name]
        else:
            self._names[name] = n - 1
        for p in parents(name):
            k = self._folders.get(p, 0) - 1
            if k > 0:
                self._folders[p] = k
            else:
                self._folders.pop(p, None)


def _folders_of(names: list[str]) -> dict[str, int]:
    """How many of ``names`` each proper parent has below it (``a/b/c``
    counts in ``a`` and ``a/b``): names of one folder share one call of
    :func:`parents`."""
    heads: dict[str, int] = {}
    for name in names:
        i = name.rfind("/")
        if i >= 0:
            head = name[:i]
            heads[head] = heads.get(head, 0) + 1
    out: dict[str, int] = {}
    for head, k in heads.items():
        for p in (*parents(head), head):
            out[p] = out.get(p, 0) + k
    return out


def conflict_error(kind: str, file: str, name: str, other: str) -> RecordIsADirectoryError | RecordNotADirectoryError:
    """The error for a :func:`tree_conflict` of ``name`` in ``file``."""
    if kind == IS_A_DIRECTORY:
        return RecordIsADirectoryError(file, name, other)
    return RecordNotADirectoryError(file, name, other)


def commit_conflict(file: str, name: str, reason: str, kind: str = "", record: str = ""):
    """The client's error for a name the tracker's commit refused with
    ``"name: reason"`` (CommitReply.conflicts) and ``kind``/``record``
    (CommitReply.conflict_kinds/conflict_records; "" from a tracker that
    predates them): a tree conflict's error, else RecordExistsError."""
    from st_py.errors import RecordExistsError

    if kind in (IS_A_DIRECTORY, NOT_A_DIRECTORY):
        return conflict_error(kind, file, name, record)
    if kind == BAD_NAME:
        return RecordNameRuleError(name, path_problem(name) or reason, RULE)
    return RecordExistsError(f"record {reason}", names=[name])


def conflict_reason(kind: str, other: str) -> str:
    """The tracker's reason text for a conflict (after ``"name: "``)."""
    if kind == IS_A_DIRECTORY:
        return f"is a folder: record {other!r} is below it (a name is a record or a folder, not both)"
    return f"is below record {other!r}, which is not a folder (a name is a record or a folder, not both)"


__all__ = [
    "BAD_NAME",
    "IS_A_DIRECTORY",
    "NOT_A_DIRECTORY",
    "RULE",
    "NameTree",
    "check_new_name",
    "commit_conflict",
    "conflict_error",
    "conflict_reason",
    "name_bytes",
    "name_state",
    "name_states",
    "parents",
    "path_problem",
    "tree_conflict",
    "tree_conflicts",
]
