"""One infofile schema: st_py/infofile_schema.sql is what the tracker
creates and what docs/infofile.md shows."""

import re
import sqlite3
from pathlib import Path

from st_py.infofile import SCHEMA

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
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
                                        " AND name NOT LIKE 'sqlite_%'")}
    assert names == {"meta", "peers", "records", "copies", "copies_by_peer", "copy_history",
                     "copy_history_by_peer", "pending_copies", "objects", "commit_requests",
                     "commit_requests_by_time"}
