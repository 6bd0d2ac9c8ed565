"""The one resolution of namespace paths (st_py.client.namespace_paths):
``lookup`` against a namespace given as the tracker's List answers it, and
``new_file``'s placement rule. The same rules against a real tracker, through
fsspec, the key map and the S3 endpoint: tests/test_s3.py
(test_keymap_and_fsspec_resolve_keys_alike), tests/test_fsspec.py."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest

from st_py.client import namespace_paths
from st_py.client.namespace_paths import Location, lookup, new_file
from st_py.errors import StFileNotFoundError

FILES = {"/exp/run1": 7, "/exp/d/run2": 8, "/stray": 0}  # name -> file id (0: not an infofile)


def list_entries(calls: list[str]):
    """The tracker's List over FILES: a directory its children, a file itself, else NOT_FOUND."""

    def ls(path: str):
        calls.append(path)
        if path in FILES:
            return [SimpleNamespace(name=path, is_dir=False, file_id=FILES[path])]
        below = {f for f in FILES if f.startswith(path.rstrip("/") + "/")}
        if not below:
            raise StFileNotFoundError(path)
        kids = {path.rstrip("/") + "/" + f[len(path.rstrip("/")) + 1 :].split("/")[0] for f in below}
        return [SimpleNamespace(name=k, is_dir=k not in FILES, file_id=FILES.get(k, 0)) for k in sorted(kids)]

    return ls


@pytest.mark.parametrize(
    "path, want",
    [
        ("/exp/run1", ("file", "/exp/run1", "")),
        ("/exp/run1/src/a.parquet", ("inside", "/exp/run1", "src/a.parquet")),
        ("/exp/d/run2/..", ("inside", "/exp/d/run2", "..")),  # record names are data
        ("/exp/d", ("dir", "/exp/d", "")),
        ("/exp/new/x/y", ("missing", "/exp", "new/x/y")),
        ("/nope/a", ("missing", "/", "nope/a")),
        ("/stray/a", ("missing", "/", "stray/a")),  # no infofile: not a StoreTorrent file
    ],
)
def test_lookup_finds_the_longest_prefix_that_is_a_file(path, want):
    calls: list[str] = []
    loc = lookup(path, list_entries(calls))
    assert (loc.kind, loc.name, loc.rest) == want
    assert calls == [p for p in namespace_paths.path_prefixes(path)][: len(calls)]  # longest first, no gaps


def test_known_files_and_a_floor_spare_the_tracker():
    calls: list[str] = []
    assert lookup("/exp/run1/a/b", list_entries(calls), known={"/exp/run1"}) == Location("inside", "/exp/run1", "a/b")
    assert calls == []
    # prefixes shorter than min_len are directories without a List (a bucket)
    assert lookup("/exp/new/k", list_entries(calls), min_len=len("/exp") + 2) == Location("missing", "/exp", "new/k")
    assert calls == ["/exp/new/k", "/exp/new"]


@pytest.mark.parametrize(
    "deepest, rest, want",
    [
        ("/exp", "run1/src/a.parquet", ("/exp/run1", "src/a.parquet")),
        ("/exp/d", "run3/x/y.csv", ("/exp/d/run3", "x/y.csv")),
        ("/", "exp/run2/part-0.parquet", ("/exp/run2", "part-0.parquet")),
        ("/", "exp/run2/src/a.parquet", ("/exp/run2", "src/a.parquet")),
        ("/", "exp/a.csv", ("/exp", "a.csv")),
        ("/exp", "a.csv", None),  # directly in a namespace directory: no file to go into
        ("/", "a.csv", None),
    ],
)
def test_a_new_path_goes_one_below_the_deepest_directory(deepest, rest, want):
    assert new_file(deepest, rest) == want


def test_examples_in_the_docstrings_hold():
    assert doctest.testmod(namespace_paths).failed == 0
