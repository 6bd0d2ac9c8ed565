"""fsspec listings (``find``, ``ls``, ``walk``, ``glob``, ``du``, ``info``)
over a file of several thousand records, against a reference computed here
from the list of names written (docs/fsspec.md, "Path model" and
"Listing").

The file mixes nested record names, striped objects (one name each, never
their stripes), names that need escaping in URLs and globs, and names no
put makes since the rule for record names (docs/decisions.md, "Record
names") but older files hold (``LEGACY``, given
their names in the infofile by ``rename_in_infofile``): a name that is
both a record and a prefix (``a`` and ``a/b``), listed once as the
directory, and names with an empty component (``x//y``, ``/lead``,
``trail/``), which no listing shows.
Correctness only: what a listing costs is measured by ``bench/listing.py``.
"""

from __future__ import annotations

import fnmatch
import math

import pytest
from fsspec.spec import AbstractFileSystem
from helpers import rename_in_infofile

from st_integrations.fsspec_fs import StoreTorrentFileSystem
from st_py.wire.protocol import crc32c

BIG = "/lst/big"
RECORD_KEYS = {"name", "size", "stored_size", "type", "st_type", "crc32c", "created", "mtime"}
OBJECT_KEYS = {"name", "size", "type", "st_type", "crc32c", "created", "mtime", "stripes", "stripe_size"}
PREFIX_KEYS = {"name", "size", "type", "st_type"}
STRIPE = 4096


def _record_names() -> list[str]:
    names = [f"runs/{i % 7}/{(i // 7) % 13:02d}/part-{i:05d}.csv" for i in range(2400)]
    names += [f"flat-{i:04d}.bin" for i in range(300)]
    names += [
        "a",  # a record and a prefix (a/b): ls and info the directory, find the record
        "a/b",
        "a/c/d",
        "a.b",  # sorts between a and a/...: '.' < '/'
        "a0",  # sorts right after every a/...: '0' follows '/'
        "a-b/c",
        "sp ace/[b]?*.csv",  # glob characters and a space: names are data
        "pct%20/x#y?.txt",  # URL characters
        "ü/é",
        "\U0001f600/x",  # outside the BMP
        ".hidden",
        ".st-stripeX/y",  # not the reserved prefix
        "deep/l0/l1/l2/l3/l4/l5/l6",
        "x/ok",
        # an empty component: never listed (docs/fsspec.md, "Corner cases")
        "x//y",
        "/lead",
        "trail/",
        "q/",
        "q",
    ]
    return names


LEGACY = ("a", "x//y", "/lead", "trail/", "q/")  # refused by puts now: an older file's names

OBJECTS = {"runs/0/00/whole.parquet": 3 * STRIPE + 17, "obj-top.bin": 2 * STRIPE, "a/c/obj": STRIPE + 1}


def _body(name: str) -> bytes:
    return (name * (1 + len(name) % 5)).encode()


def _addressable(name: str) -> bool:
    return "" not in name.split("/")


class Ref:
    """The namespace as the path model says it should look, built from the
    names written: paths of records and objects (files), of
    pseudo-directories, StoreTorrent files and namespace directories."""

    def __init__(self, files: dict[str, dict[str, dict]]):
        self.names = {f: sorted(entries) for f, entries in files.items()}
        self.files: dict[str, dict] = {}  # path -> expected info (no times)
        self.dirs: dict[str, str] = {"/": "dir"}  # path -> st_type: dir, file, prefix
        for fname, entries in files.items():
            parts = fname.strip("/").split("/")
            for k in range(1, len(parts)):
                self.dirs["/" + "/".join(parts[:k])] = "dir"
            self.dirs[fname] = "file"
            for name, info in entries.items():
                if not _addressable(name):
                    continue
                path = f"{fname}/{name}"
                self.files[path] = dict(info, name=path)
                comps = name.split("/")
                for k in range(1, len(comps)):
                    self.dirs.setdefault(f"{fname}/{'/'.join(comps[:k])}", "prefix")

    @staticmethod
    def _below(path: str, root: str) -> int | None:
        """Components of ``path`` below ``root`` (None: not below it)."""
        if root == "/":
            return path.count("/") if path != "/" else None
        if not path.startswith(root + "/"):
            return None
        return path[len(root) :].count("/")

    def find(self, root: str, maxdepth=None, withdirs=False) -> list[str]:
        """A record gives itself; a directory (a record that is also a
        prefix included) what lies below it."""
        if root in self.files and root not in self.dirs:
            return [root]
        if root not in self.dirs and root != "/":
            return []
        out = set()
        for p in list(self.files) + (list(self.dirs) if withdirs else []):
            d = self._below(p, root)
            if d is not None and (maxdepth is None or d <= maxdepth):
                out.add(p)
        if withdirs:
            out.add(root)
        return sorted(out)

    def ls_split(self, root: str) -> tuple[list[str], list[str]]:
        """``(files, directories)`` directly below ``root``. In a file, a
        directory is the first component of the rest of any name below that
        has a ``/`` after it, if not empty: ``trail/`` (not listed itself)
        makes the empty directory ``trail``, as ``ls`` always did."""
        files = [p for p in self.files if self._below(p, root) == 1]
        dirs = {p for p, t in self.dirs.items() if t != "prefix" and self._below(p, root) == 1}
        fname = next((f for f in self.names if root == f or root.startswith(f + "/")), None)
        if fname is not None:
            prefix = "" if root == fname else root[len(fname) + 1 :] + "/"
            for n in self.names[fname]:
                head, sep, _ = n[len(prefix) :].partition("/")
                if n.startswith(prefix) and sep and head:
                    dirs.add(f"{root}/{head}")
        # a record that is also a directory is listed once, as the directory
        return sorted(p for p in files if p not in dirs), sorted(dirs)

    def ls(self, root: str) -> list[str]:
        if root in self.files and root not in self.dirs:
            return [root]
        files, dirs = self.ls_split(root)
        return sorted(files + dirs)  # a record and a directory of one name: the directory, once

    def du(self, root: str) -> dict[str, int]:
        return {p: self.files[p]["size"] for p in self.find(root)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, peer_bin):
    from st_py.deploy.cluster import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("fslisting") / "cluster", n_peers=3, announce_interval=0.3)
    c.start()
    client = c.client()
    names = _record_names()
    written: dict[str, dict[str, dict]] = {BIG: {}, "/lst/other": {}, "/lst/ns/inner/f": {}, "/lst/ns/empty": {}}
    with client.create(BIG, replication="x1") as f:
        for n in names:
            f.queue_put(f"legacy-{LEGACY.index(n)}" if n in LEGACY else n, _body(n))
        for n, size in OBJECTS.items():
            data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
            f.put_object(n, data, stripe_size=STRIPE)
            written[BIG][n] = {
                "size": size,
                "type": "file",
                "st_type": "object",
                "crc32c": crc32c(data),
                "stripes": math.ceil(size / STRIPE),
                "stripe_size": STRIPE,
            }
    for n in names:
        b = _body(n)
        written[BIG][n] = {
            "size": len(b),
            "stored_size": len(b),
            "type": "file",
            "st_type": "record",
            "crc32c": crc32c(b),
        }
    for fname, recs in (("/lst/other", ["r1", "s/r2"]), ("/lst/ns/inner/f", ["one", "two/three"])):
        with client.create(fname, replication="x1") as f:
            for n in recs:
                b = _body(n)
                f.put(n, b)
                written[fname][n] = {
                    "size": len(b),
                    "stored_size": len(b),
                    "type": "file",
                    "st_type": "record",
                    "crc32c": crc32c(b),
                }
    client.create("/lst/ns/empty", replication="x1").close()
    client.close()
    rename_in_infofile(c, BIG, {f"legacy-{i}": n for i, n in enumerate(LEGACY)})
    yield c, Ref(written), written
    c.stop()


@pytest.fixture(scope="module")
def fs(setup):
    fs = StoreTorrentFileSystem(tracker=setup[0].tracker_addr, skip_instance_cache=True)
    yield fs
    fs.close()


def _check_info(info: dict, ref: Ref) -> None:
    """One info dict against the reference: every field, and exactly these
    fields, for records, objects and prefixes."""
    p = info["name"]
    if p in ref.files and ref.dirs.get(p) == "prefix" and info["type"] == "directory":  # as info() gives it
        assert info == {"name": p, "size": 0, "type": "directory", "st_type": "prefix", "also_record": True}
    elif p in ref.files:
        exp = ref.files[p]
        assert set(info) == (RECORD_KEYS if exp["st_type"] == "record" else OBJECT_KEYS), p
        assert {k: info[k] for k in exp} == exp, p
        assert type(info["created"]) is float and info["created"] == info["mtime"] > 0, p
        assert all(type(info[k]) is int for k in ("size", "crc32c")), p
    elif ref.dirs.get(p) == "prefix":
        assert info == {"name": p, "size": 0, "type": "directory", "st_type": "prefix"}
    else:
        assert (info["type"], info["st_type"], info["size"]) == ("directory", ref.dirs[p], 0), p


ROOTS = [
    "/",
    "/lst",
    BIG,
    f"{BIG}/runs",
    f"{BIG}/runs/3",
    f"{BIG}/runs/3/04",
    f"{BIG}/a",
    f"{BIG}/a/c",
    f"{BIG}/x",
    f"{BIG}/deep/l0/l1",
    f"{BIG}/sp ace",
    f"{BIG}/ü",
    f"{BIG}/a/b",  # a record: find gives it, ls lists it alone
    f"{BIG}/obj-top.bin",  # an object, likewise
    "/lst/ns",
    "/lst/ns/empty",
    f"{BIG}/nope",
    f"{BIG}/.st-stripe",
    "/nope",
]


def test_the_names_written_are_the_files_names(setup):
    cluster, ref, written = setup
    with cluster.client() as c, c.open(BIG) as f:
        assert f.names() == sorted(written[BIG])  # the reference's input, stripes left out


@pytest.mark.parametrize("root", ROOTS)
def test_find_matches_the_reference(fs, setup, root):
    _, ref, _ = setup
    for maxdepth in (None, 1, 2, 3):
        for withdirs in (False, True):
            want = ref.find(root, maxdepth, withdirs)
            got = fs.find(root, maxdepth=maxdepth, withdirs=withdirs)
            assert got == want, (root, maxdepth, withdirs)
            detail = fs.find(root, maxdepth=maxdepth, withdirs=withdirs, detail=True)
            assert list(detail) == want, (root, maxdepth, withdirs)
            for info in detail.values():
                _check_info(info, ref)
    assert not any(".st-stripe/" in p for p in fs.find(root, withdirs=True))


@pytest.mark.parametrize("root", ROOTS)
def test_ls_info_du_match_the_reference(fs, setup, root):
    _, ref, _ = setup
    if root not in ref.files and root not in ref.dirs and root != "/":
        for call in (fs.ls, fs.info):
            with pytest.raises(FileNotFoundError):
                call(root)
        assert fs.du(root) == 0 and fs.find(root) == []
        return
    want = ref.ls(root)
    assert fs.ls(root, detail=False) == want
    listing = fs.ls(root, detail=True)
    assert [i["name"] for i in listing] == want
    for info in listing:
        if info["type"] == "file" or ref.dirs.get(info["name"]) in ("dir", "file"):
            _check_info(info, ref)
        else:  # a pseudo-directory (of ls's rule: trail/ makes one), that may be a record too
            both = {"also_record": True} if info["name"] in ref.files else {}
            assert info == {"name": info["name"], "size": 0, "type": "directory", "st_type": "prefix", **both}
    if root in ref.files and ref.dirs.get(root) == "prefix":  # a record and a directory: info says directory
        assert fs.info(root) == {"name": root, "size": 0, "type": "directory", "st_type": "prefix", "also_record": True}
    elif root != "/":
        _check_info(fs.info(root), ref)
    sizes = ref.du(root)
    assert fs.du(root) == sum(sizes.values())
    assert fs.du(root, total=False) == sizes


def test_a_record_and_a_prefix_of_one_name(fs, setup):
    """An older file's name that is both a record and a folder (issue 38,
    item 2: listed twice before): ls and info say directory, once, and that
    a record has the name too; find still finds the record (its data), and
    reading the path reads it."""
    _, ref, _ = setup
    assert fs.ls(BIG, detail=False).count(f"{BIG}/a") == 1
    entries = [i for i in fs.ls(BIG) if i["name"] == f"{BIG}/a"]
    assert [(i["type"], i.get("also_record")) for i in entries] == [("directory", True)]
    assert fs.info(f"{BIG}/a")["type"] == "directory" and fs.isdir(f"{BIG}/a") and not fs.isfile(f"{BIG}/a")
    assert fs.find(BIG, withdirs=True, detail=True)[f"{BIG}/a"]["st_type"] == "record"
    assert fs.cat_file(f"{BIG}/a") == _body("a")
    assert fs.isdir(f"{BIG}/a/c") and fs.isfile(f"{BIG}/a/c/obj")


def test_walk_matches_the_reference(fs, setup):
    _, ref, _ = setup
    walked = {root: (sorted(dirs), sorted(files)) for root, dirs, files in fs.walk(BIG)}
    want = {}
    todo = [BIG]
    while todo:  # top-down, into every directory ls shows
        d = todo.pop()
        files, dirs = ref.ls_split(d)
        want[d] = ([p.rsplit("/", 1)[1] for p in dirs], [p.rsplit("/", 1)[1] for p in files])
        todo += dirs
    assert walked == want
    assert walked[BIG][0].count("a") == 1 and "a" not in walked[BIG][1]  # a record and a directory: the directory
    assert walked[f"{BIG}/trail"] == ([], [])
    # fsspec's own find, built on walk and ls, agrees with the one range query where
    # no name is both a record and a directory (a, q, trail/: the corner cases above)
    for root, kw in [
        (f"{BIG}/runs", {}),
        (f"{BIG}/runs", {"withdirs": True}),
        (f"{BIG}/runs", {"maxdepth": 2, "withdirs": True}),
        ("/lst/ns", {"withdirs": True}),
    ]:
        assert fs.find(root, detail=True, **kw) == AbstractFileSystem.find(fs, root, detail=True, **kw), (root, kw)


def test_glob_matches_the_reference(fs, setup):
    _, ref, _ = setup
    every = ref.find(BIG, withdirs=True)
    assert fs.glob(f"{BIG}/runs/3/*") == ref.ls(f"{BIG}/runs/3")
    assert fs.glob(f"{BIG}/**/*.csv") == [p for p in every if p.endswith(".csv") and p != BIG]
    assert fs.glob(f"{BIG}/flat-00[0-4]*") == sorted(
        p for p in ref.files if fnmatch.fnmatchcase(p, f"{BIG}/flat-00[0-4]*")
    )
    assert len(fs.glob(f"{BIG}/flat-00[0-4]*")) == 50
    assert fs.glob(f"{BIG}/runs/*/0[01]/part-0000*.csv") == sorted(
        p for p in ref.files if fnmatch.fnmatchcase(p, f"{BIG}/runs/*/0[01]/part-0000*.csv")
    )
    assert fs.glob(f"{BIG}/*/*/*/whole.parquet") == [f"{BIG}/runs/0/00/whole.parquet"]


def test_sizes_of_a_filtered_file_are_the_users(fs, setup):
    """``size`` is the user's bytes and ``stored_size`` what the peers store
    (after zstd), in find, ls and du alike (tests/test_sizes.py has the
    whole contract)."""
    from st_py.core.infofile import InfofileReader

    cluster, _, _ = setup
    bodies = {f"p{i % 3}/r{i:03d}": b"hello world " * (i + 1) for i in range(30)}
    with cluster.client() as c:
        with c.create("/lstz/f", replication="x1", filters=["zstd"]) as f:
            for n, b in bodies.items():
                f.queue_put(n, b)
        with c.open("/lstz/f") as f:
            reader = InfofileReader(f.infofile_path)
            stored = {n: reader.record_stat(n)[0] for n in bodies}
            reader.close()
    found = fs.find("/lstz/f", detail=True)
    assert list(found) == sorted(f"/lstz/f/{n}" for n in bodies)
    for n, b in bodies.items():
        info = found[f"/lstz/f/{n}"]
        assert (info["size"], info["stored_size"]) == (len(b), stored[n])
    assert any(len(b) != stored[n] for n, b in bodies.items())
    listed = {i["name"]: (i["size"], i["stored_size"]) for i in fs.ls("/lstz/f/p1")}
    assert listed == {f"/lstz/f/{n}": (len(b), stored[n]) for n, b in bodies.items() if n.startswith("p1/")}
    assert fs.du("/lstz/f") == sum(map(len, bodies.values()))


def test_listings_do_not_depend_on_the_copies(fs, setup):
    """(Last in this module: it kills a peer.) A listing reads the infofile only: records whose only copy is on a
    killed peer (class x1) are listed as before (their state is what
    ``storetorrent ls -r`` and the status report say)."""
    cluster, ref, _ = setup
    before = fs.find(BIG, detail=True)
    cluster.kill_peer(0)
    assert fs.find(BIG) == ref.find(BIG)
    assert fs.find(BIG, detail=True) == before
    assert fs.ls(f"{BIG}/runs/3/04", detail=False) == ref.ls(f"{BIG}/runs/3/04")
