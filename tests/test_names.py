"""Hostile record and file names against real processes: every name a user
can send is stored inside the peer's data directory and kept exactly in the
infofile, or refused with a clear error and nothing stored; file names never
leave the namespace root."""

import os
import unicodedata
from contextlib import closing
from pathlib import Path

import pytest

from st_py.core.infofile import InfofileReader
from st_py.core.namespace import infofile_path, normalize
from st_py.errors import BadNameError

HOSTILE_RECORD_NAMES = [
    ".hidden",
    "...",
    "a\\..\\..\\b",
    "%2e%2e",
    "%2E%2E%2Fetc",
    "x" * 4096,
    "\n",
    " ",
    "name\twith\rcontrols",
    "\u202egnp.exe",
    "e\u0301",
    "\u00e9",
    "\ufeffbom",
    "\u2215fake-slash",
    "\uff0e\uff0e",
    "con",
    "NUL",
    "emoji \U0001f4a9",
    "zero-width\u200bspace",
]
REFUSED_RECORD_NAMES = {
    "": "1 to 4096 bytes",
    "a\x00b": "without NUL",
    "x" * 4097: "1 to 4096 bytes",
    "\udcff\udcfe": "not valid UTF-8",  # bytes b"\xff\xfe" smuggled through surrogateescape
    # Names with path meaning were stored literally until issue 38 (item 4): one such
    # record blocked `get -r` of its whole file and fsspec stored `a/../b` under that
    # very name. Now refused by the rule for record names (docs/decisions.md,
    # "Record names"): a changed decision, not a weakened test.
    "..": "'..' component",
    ".": "'.' component",
    "../../../../etc/passwd": "'..' component",
    "/etc/passwd": "starts with '/'",
    "a/../../b": "'..' component",
    "./x": "'.' component",
    "/" * 300: "starts with '/'",
}


def all_files(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, fs in os.walk(root) for f in fs]


def test_hostile_record_names_stay_inside_the_data_dirs_and_are_kept_exactly(cluster, tmp_path):
    assert len(set(HOSTILE_RECORD_NAMES)) == len(HOSTILE_RECORD_NAMES)
    assert unicodedata.normalize("NFC", "e\u0301") == "\u00e9"  # two names that look the same
    outside_before = set(all_files(cluster.data_dir.parent))
    c = cluster.client()
    with c.create("/names/hostile", replication="x2") as f:
        for i, n in enumerate(HOSTILE_RECORD_NAMES):
            f.put(n, f"record {i}".encode())
    # kept exactly: no normalisation, no trimming
    with closing(InfofileReader(cluster.namespace / "names" / "hostile")) as r:
        assert sorted(r.names()) == sorted(HOSTILE_RECORD_NAMES)
    with c.open("/names/hostile") as f:
        for i, n in enumerate(HOSTILE_RECORD_NAMES):
            assert f.get(n) == f"record {i}".encode(), n
        recs = f.get_local()
    assert sorted(x.name for x in recs) == sorted(HOSTILE_RECORD_NAMES)
    # every copy is a file below <peer data>/files/<file id>/<bucket>/
    peers = cluster.data_dir / "peers"
    for x in recs:
        p = Path(x.path).resolve()
        assert p.is_relative_to(peers.resolve()) and p.parent.parent.parent.name == "files", p
    new = set(all_files(cluster.data_dir.parent)) - outside_before
    for p in new:
        assert p.resolve().is_relative_to(cluster.data_dir.resolve()), f"{p} escaped the cluster folder"


def test_refused_record_names_say_why_and_store_nothing(cluster):
    c = cluster.client()
    with c.create("/names/refused", replication="x1") as f:
        for n, why in REFUSED_RECORD_NAMES.items():
            with pytest.raises(BadNameError, match=why):
                f.put(n, b"x")
    with closing(InfofileReader(cluster.namespace / "names" / "refused")) as r:
        assert r.names() == []
    peers = cluster.data_dir / "peers"
    assert not [p for p in peers.rglob("*@*") if p.is_file()]


@pytest.mark.parametrize(
    "name",
    [
        "/../x",
        "/a/../../x",
        "..",
        "/a/./b",
        "//",
        "",
        "a\x00b",
        "/.st-creating-x",
        "/a/.st-tmp/b",
        "/\udcff",
        "/" + "d/" * 600 + "f",
    ],
)
def test_file_names_cannot_escape_the_namespace(module_cluster, name):
    c = module_cluster.client()
    with pytest.raises(BadNameError):
        c.create(name)
    with pytest.raises(BadNameError):
        normalize(name)


def test_a_symlink_in_the_namespace_cannot_lead_outside(tmp_path):
    root = tmp_path / "ns"
    (root / "d").mkdir(parents=True)
    (tmp_path / "ns-evil").mkdir()
    (root / "link").symlink_to(tmp_path / "ns-evil")  # a sibling whose name shares the prefix
    with pytest.raises(BadNameError, match="outside the namespace root"):
        infofile_path(root, "/link/f")
    assert infofile_path(root, "/d/f") == root / "d" / "f"
