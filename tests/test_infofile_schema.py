"""One infofile schema: st_py/core/infofile_schema.sql is what the tracker
creates and what docs/infofile.md shows."""

import re
import sqlite3
from pathlib import Path

import pytest

from st_py.core.infofile import SCHEMA

ROOT = Path(__file__).resolve().parent.parent


def _statements(sql: str) -> list[str]:
    sql = re.sub(r"--[^\n]*", "", sql)
    return [" ".join(s.split()) for s in sql.split(";") if s.strip()]


def test_docs_show_the_schema_file():
    doc = (ROOT / "docs" / "infofile.md").read_text()
    block = doc.split("```sql\n", 1)[1].split("```", 1)[0]
    assert _statements(block) == _statements(SCHEMA)


def test_schema_creates_every_table_and_index(tmp_path):
    conn = sqlite3.connect(tmp_path / "f")
    conn.executescript(SCHEMA)
    names = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'"
        )
    }
    assert names == {
        "meta",
        "peers",
        "records",
        "copies",
        "copies_by_peer",
        "quarantined_copies",
        "copy_history",
        "copy_history_by_peer",
        "copy_history_by_peer_until",
        "pending_copies",
        "objects",
        "user_meta",
        "commit_requests",
        "commit_requests_by_time",
        "schemas",
        "records_by_schema",
        "record_history",
        "record_history_by_seq",
        "record_history_by_until_at",
        "object_history",
        "generations",
        "snapshots",
        "retained_copies",
        "retained_copies_by_peer_until",
        "retained_unstored",
    }


def test_a_reader_survives_a_hot_journal_left_by_a_killed_tracker(tmp_path):
    """A tracker SIGKILLed mid-transaction leaves a hot rollback journal; a
    read-only connection cannot roll it back (SQLITE_READONLY_ROLLBACK). The
    client's InfofileReader still reads the committed state (the soak found
    a writer failing with "attempt to write a readonly database")."""
    import sqlite3
    import subprocess
    import sys

    from st_py.core.infofile import InfofileReader

    p = tmp_path / "f.db"
    c = sqlite3.connect(p)
    c.execute("PRAGMA journal_mode=DELETE")
    c.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    c.execute("INSERT INTO meta VALUES('generation', '7')")
    c.commit()
    c.close()
    killed = (
        f"import sqlite3, os\nc = sqlite3.connect({str(p)!r}, isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=1')\nc.execute('BEGIN IMMEDIATE')\n"
        "for i in range(3000): c.execute('INSERT INTO meta VALUES(?, ?)', (f'k{i}', 'x' * 200))\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", killed], check=True)
    assert (tmp_path / "f.db-journal").exists()
    raw = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError):  # what a plain read-only connection gets
        raw.execute("SELECT value FROM meta").fetchall()
    raw.close()
    r = InfofileReader(p)
    assert r.generation() == 7 and len(r.meta()) == 1  # the uncommitted rows rolled back
    r.close()


def _rows_past_generation(path: str) -> tuple[int, int, int]:
    """(generation, record rows, rows of records and copies written past it)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        gen = int(c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
        n = c.execute("SELECT count(*) FROM records").fetchone()[0]
        past = c.execute("SELECT count(*) FROM records WHERE commit_seq > ?", (gen,)).fetchone()[0]
        past += c.execute("SELECT count(*) FROM copies WHERE since > ?", (gen,)).fetchone()[0]
    return gen, n, past


def test_no_row_is_written_past_the_generation_of_its_transaction(cluster):
    """What ``InfofileReader.snapshot`` counts on: after commits, striped
    objects, replaced versions, conflicts and deletes, no record or copy
    row has a ``commit_seq``/``since`` above ``meta.generation``."""
    c = cluster.client()
    with c.create("/inv/f", "x2") as f:
        path = f.infofile_path
        for i in range(50):
            f.queue_put(f"r{i:02}", b"x" * 100)
        f.flush()
        f.put_object("big.bin", b"y" * 300_000, stripe_size=64 << 10)
        f.put("r00", b"z" * 10, replace=True)
    with c.open("/inv/f") as f:
        f.delete("r01")
        f.delete("big.bin")
        gen, n, past = _rows_past_generation(str(path))
        assert past == 0
        assert f._infofile().counted() == (gen, n)
    assert n == 49  # 50 records, one deleted; the object's stripes deleted with it


def test_a_file_made_before_kept_schemas_has_every_name_without_one(tmp_path):
    """An infofile of a writer from before record schemas (no ``schema_id``
    column, no ``schemas`` table): every name counts as without a schema,
    ``limit`` is taken in SQL, and a scan reads headers (kept_schemas None)."""
    from st_py.core.infofile import InfofileReader

    path = tmp_path / "old"
    with sqlite3.connect(path) as c:
        c.executescript(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
            "CREATE TABLE records(name TEXT PRIMARY KEY, size INTEGER NOT NULL, crc32c INTEGER NOT NULL,"
            " commit_seq INTEGER NOT NULL, committed_at REAL NOT NULL);"
            "CREATE TABLE objects(name TEXT PRIMARY KEY, size INTEGER NOT NULL, stripe_size INTEGER NOT NULL,"
            " stripes INTEGER NOT NULL, crc32c INTEGER NOT NULL, commit_seq INTEGER NOT NULL,"
            " committed_at REAL NOT NULL) WITHOUT ROWID;"
        )
        c.executemany(
            "INSERT INTO records VALUES (?, 1, 0, 1, 0)",
            [("b",), ("_SUCCESS",), (".st-stripe/big/00000000",), ("c",)],
        )
        c.execute("INSERT INTO objects VALUES ('big', 1, 1, 1, 0, 1, 0)")
    r = InfofileReader(path)
    try:
        assert r.names_without_schema() == ["_SUCCESS", "b", "big", "c"]
        assert r.names_without_schema(limit=1) == ["_SUCCESS"]
        assert r.names_without_schema(limit=3) == ["_SUCCESS", "b", "big"]
        assert r.kept_schemas() is None and r.schema_groups() is None
        assert r.count() == 4
    finally:
        r.close()
