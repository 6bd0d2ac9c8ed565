"""Many rows into one infofile table with few statements (issue 41, item
2; docs/benchmarks.md, "The tracker's cost per committed record").

``executemany`` runs its statement once per row, and with the standard
library's ``sqlite3`` the per-row work around ``sqlite3_step`` (binding
each value, resetting the statement, Python's bookkeeping) costs about as
much as SQLite's B-tree inserts: a group commit's ``records`` and
``copies`` rows took 4.8 us a record through ``executemany`` against 2.9
us as multi-row ``INSERT ... VALUES (...), (...)`` statements (CPU,
bench/commit_profile.py). The rows, their order and the constraint checks
are the same: a statement that fails a constraint inserts none of its rows
and raises as ``executemany`` would (the caller's transaction rolls back).

Thread-safety: pure functions of their arguments plus a cache of statement
texts (a dict filled idempotently; safe under the GIL).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from itertools import chain

ROWS_PER_STATEMENT = 256  # more gains nothing measurable; bounded by the variable limit below
_DEFAULT_VARIABLE_LIMIT = 999  # SQLite's limit before 3.32, and where getlimit is missing (Python < 3.11)
_sql: dict[tuple[str, int], str] = {}


def _variable_limit(conn: sqlite3.Connection) -> int:
    getlimit = getattr(conn, "getlimit", None)
    if getlimit is None:
        return _DEFAULT_VARIABLE_LIMIT
    return int(getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))  # type: ignore[attr-defined]


def insert_rows(conn: sqlite3.Connection, head: str, rows: Sequence[tuple]) -> None:
    """Run ``head`` (``"INSERT INTO t(a, b, c)"``, or ``INSERT OR IGNORE``
    ...; the columns named, ``VALUES`` left out) for every row of ``rows``
    (tuples of as many values as ``head`` names columns, all the same
    length), in order, as multi-row statements of up to
    ``ROWS_PER_STATEMENT`` rows within SQLite's limit on bound values.

    Raises whatever ``executemany`` of the same rows would
    (``sqlite3.IntegrityError`` on a constraint)."""
    if not rows:
        return
    width = len(rows[0])
    per = max(1, min(ROWS_PER_STATEMENT, _variable_limit(conn) // width))
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        key = (head, len(chunk))
        sql = _sql.get(key)
        if sql is None:
            one = "(" + ",".join("?" * width) + ")"
            sql = _sql[key] = f"{head} VALUES {','.join([one] * len(chunk))}"
        conn.execute(sql, list(chain.from_iterable(chunk)))
