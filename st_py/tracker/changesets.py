"""SQLite sessions on the infofile writer's own connection (issue 40,
docs/metadata-log.md, "Changesets are the trackers' own writes"): each
infofile transaction's changes as a changeset, the format
``sqlite3changeset_apply`` (apsw's ``Changeset.apply`` on the clients)
replays row for row.

The writer's connection is the standard library's ``sqlite3``, linked to the
system ``libsqlite3``. The session is made with that same library (through
ctypes), on that same connection handle: apsw bundles its own SQLite, and two
SQLite libraries with the same file open in one process break each other's
POSIX locks (sqlite.org/howtocorrupt.html, 2.2.1) while the tracker reads its
infofiles with ``sqlite3`` everywhere. The handle is read from the
connection object (CPython's ``pysqlite_Connection.db``, the first field
after the object header) and checked before use: it must name the same file
and count the same changes as the connection, else :func:`capturer` returns
None and the writer keeps no changesets (clients fetch snapshots).

Thread-safety: a :class:`Session` is used by the thread that runs its
connection's transaction (the writer's, one at a time).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sqlite3
from typing import Any

log = logging.getLogger("st.tracker.changesets")

_lib: Any = None
_lib_error: str | None = None


def _library() -> Any:
    """The system libsqlite3 (the one ``_sqlite3`` links), with the session
    calls declared; None (and ``_lib_error`` says why) if it lacks them."""
    global _lib, _lib_error
    if _lib is not None or _lib_error is not None:
        return _lib
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        vp, ip, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
        for fn, args, res in (
            ("sqlite3session_create", [vp, cp, ctypes.POINTER(vp)], ip),
            ("sqlite3session_attach", [vp, cp], ip),
            ("sqlite3session_changeset", [vp, ctypes.POINTER(ip), ctypes.POINTER(vp)], ip),
            ("sqlite3session_delete", [vp], None),
            ("sqlite3_free", [vp], None),
            ("sqlite3_db_filename", [vp, cp], cp),
            ("sqlite3_total_changes", [vp], ip),
            ("sqlite3_libversion", [], cp),
        ):
            f = getattr(lib, fn)
            f.argtypes, f.restype = args, res
        if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            raise OSError(f"libsqlite3 {lib.sqlite3_libversion().decode()} is not sqlite3's {sqlite3.sqlite_version}")
        _lib = lib
    except (OSError, AttributeError) as e:
        _lib_error = str(e)
        log.warning("no SQLite sessions (%s): infofile changesets are not kept, clients fetch snapshots", e)
    return _lib


def _handle(conn: sqlite3.Connection, path: str) -> int | None:
    """The ``sqlite3*`` of ``conn`` (open on ``path``), or None if what is
    read there does not name that file with the same change count."""
    lib = _library()
    if lib is None:
        return None
    ptr = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    if not ptr:
        return None
    name = lib.sqlite3_db_filename(ptr, b"main")
    if name is None or os.path.realpath(name.decode()) != os.path.realpath(path):
        return None
    if lib.sqlite3_total_changes(ptr) != conn.total_changes:
        return None
    return ptr


class Session:
    """The changes of one transaction on a connection, from :meth:`begin`
    to :meth:`changeset`. Every table with a primary key is tracked (the
    infofile's are all keyed: ``copy_history.hist_id``)."""

    def __init__(self, handle: int):
        lib = _library()
        self._lib = lib
        s = ctypes.c_void_p()
        rc = lib.sqlite3session_create(handle, b"main", ctypes.byref(s))
        if rc != 0:
            raise OSError(f"sqlite3session_create failed ({rc})")
        self._s: int | None = s.value
        rc = lib.sqlite3session_attach(self._s, None)  # every table, also ones made later
        if rc != 0:
            self.close()
            raise OSError(f"sqlite3session_attach failed ({rc})")

    def changeset(self) -> bytes:
        """The changes made since the session began (b"": none)."""
        n, p = ctypes.c_int(), ctypes.c_void_p()
        rc = self._lib.sqlite3session_changeset(self._s, ctypes.byref(n), ctypes.byref(p))
        if rc != 0:
            raise OSError(f"sqlite3session_changeset failed ({rc})")
        try:
            return ctypes.string_at(p.value, n.value) if n.value and p.value else b""
        finally:
            self._lib.sqlite3_free(p)

    def close(self) -> None:
        """End the session (idempotent)."""
        if self._s is not None:
            self._lib.sqlite3session_delete(self._s)
            self._s = None


class Capturer:
    """Makes a :class:`Session` per transaction on one connection."""

    def __init__(self, handle: int):
        self.handle = handle

    def begin(self) -> Session:
        """A session recording from now on (call inside the transaction)."""
        return Session(self.handle)


def capturer(conn: sqlite3.Connection, path: str) -> Capturer | None:
    """A :class:`Capturer` for ``conn`` (open on ``path``), or None if the
    system SQLite has no sessions or the connection's handle cannot be
    checked (logged once)."""
    h = _handle(conn, path)
    if h is None:
        if _library() is not None:
            log.warning("cannot reach the SQLite handle of %s: its changesets are not kept", path)
        return None
    return Capturer(h)
