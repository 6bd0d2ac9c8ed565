"""SQLite's files beside an infofile (``X-journal``, ``X-wal``, ``X-shm``)
are no namespace entries (issue 38, item 8): the repair service warned
"repair of /exp/ddist-journal failed: no StoreTorrent file"."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

from st_py.core import namespace
from st_py.errors import BadNameError


def test_sqlite_side_files_are_not_files(cluster):
    c = cluster.client()
    with c.create("/exp/ddist", "x2") as f:
        f.put("r0", b"data")
    ns = cluster.namespace / "exp"
    for side in ("ddist-journal", "ddist-wal", "ddist-shm"):
        (ns / side).write_bytes(b"\0" * 512)  # as SQLite leaves them beside the infofile

    assert c.files("/") == ["/exp/ddist"]
    assert [e.name for e in c.ls("/exp")] == ["/exp/ddist"]
    listed = json.loads(run_cli(cluster, "ls", "/exp", "--format", "json", check=True).stdout)
    assert [e["name"] for e in listed] == ["/exp/ddist"]
    r = run_cli(cluster, "repair", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "journal" not in r.stdout + r.stderr and "-wal" not in r.stdout + r.stderr
    assert [row["file"] for row in json.loads(r.stdout)] == ["/exp/ddist"]


@pytest.mark.parametrize("name", ["/exp/a-journal", "/exp/a-wal", "/exp/a-shm", "/x-wal/a"])
def test_a_name_ending_like_a_side_file_is_refused(name):
    with pytest.raises(BadNameError, match="reserved"):
        namespace.normalize(name)
