"""The path model of the fsspec filesystem (docs/fsspec.md), as pure
functions: ``storetorrent://`` URLs and plain paths, the reserved record
names, record-name ranges for the infofile's index, and the info dicts that
``ls``, ``info`` and ``find`` give. Nothing here talks to a tracker or peer;
:mod:`st_integrations.fsspec_fs` and :mod:`st_integrations.fsspec_write`
use it.
"""

from __future__ import annotations

import errno
import re
from bisect import bisect_left
from dataclasses import dataclass

from fsspec.utils import stringify_path

PROTOCOL = "storetorrent"

# host:port (or [v6]:port): the only form of URL host taken as a tracker address
_TRACKER_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}$")

_HIDDEN = (".st-stripe/", ".st-version/")  # reserved prefixes: stripes, stored names of versions


def hidden(name: str) -> bool:
    """A record name no user sees: a stripe record or a version's stored name."""
    return name.startswith(_HIDDEN)


def split_url(path: str) -> tuple[str, str]:
    """``(tracker or "", path)`` of a ``storetorrent://`` URL or a plain path."""
    path = stringify_path(path)
    host = ""
    for prefix in (PROTOCOL + "://", PROTOCOL + "::"):
        if path.startswith(prefix):
            path = path[len(prefix) :]
            if prefix.endswith("//") and not path.startswith("/"):
                netloc, _, rest = path.partition("/")
                if _TRACKER_RE.match(netloc):
                    host, path = netloc, rest
            break
    return host, path


AS_OF_QUERY = "?as_of="  # storetorrent://host:port/a/b?as_of=paper-v1: the filesystem's as_of
VERSION_QUERY = "?versionId="  # .../a/b?versionId=1234 (version_aware): that generation of the file


def as_of_text(text: str):
    """An ``as_of`` given as text (a URL's query): digits are a generation,
    anything else a snapshot name or an ISO 8601 time (as ``--as-of``)."""
    return int(text) if text.isdigit() else text


def split_as_of(url: str) -> tuple[str, str | None]:
    """``(url, as_of text or None)``: a ``storetorrent://`` URL's trailing
    ``?as_of=VALUE`` taken off (a plain path keeps it: names are data)."""
    url = stringify_path(url)
    if url.startswith(PROTOCOL + "://") and AS_OF_QUERY in url:
        head, _, value = url.rpartition(AS_OF_QUERY)
        if value and "/" not in value:
            return head, value
    return url, None


def split_version(path: str) -> tuple[str, int | None]:
    """``(path, generation or None)``: a trailing ``?versionId=GENERATION``
    taken off (s3fs's form; only for a ``version_aware`` filesystem)."""
    path = stringify_path(path)
    head, sep, value = path.rpartition(VERSION_QUERY)
    if sep and value.isdigit():
        return head, int(value)
    return path, None


def norm(path: str) -> str:
    """``/a/b``: a leading ``/``, no trailing ``/`` (the root is ``/``)."""
    path = "/" + path.lstrip("/")
    return path.rstrip("/") or "/"


def not_found(path: str, what: str) -> FileNotFoundError:
    """The ``FileNotFoundError`` (ENOENT) of ``path``, saying ``what``."""
    return FileNotFoundError(errno.ENOENT, what, path)


def record_info(name: str, size: int, crc: int, committed_at: float, stored_size: int | None = None) -> dict:
    """A record's info: ``size`` the user's bytes (st_py.core.infofile.user_size),
    ``stored_size`` as the peers store it (after the file's filters)."""
    return {
        "name": name,
        "size": int(size),
        "stored_size": int(size if stored_size is None else stored_size),
        "type": "file",
        "st_type": "record",
        "crc32c": int(crc),
        "created": float(committed_at),
        "mtime": float(committed_at),
    }


def object_info(name: str, size: int, crc: int, committed_at: float, stripes: int, stripe_size: int) -> dict:
    """A striped object's info dict: a file of ``size`` bytes, with its
    ``crc32c``, commit time (unix s) and ``stripes`` of ``stripe_size`` bytes."""
    return {
        "name": name,
        "size": int(size),
        "type": "file",
        "st_type": "object",
        "crc32c": int(crc),
        "created": float(committed_at),
        "mtime": float(committed_at),
        "stripes": int(stripes),
        "stripe_size": int(stripe_size),
    }


def prefix_info(name: str, also_record: bool = False) -> dict:
    """A record-name prefix's info dict: a directory of size 0.
    ``also_record``: a record of that very name is committed too (a file
    written before names were either a record or a folder, docs/fsspec.md,
    "Corner cases"); the entry is still the directory, once, and says so."""
    d = {"name": name, "size": 0, "type": "directory", "st_type": "prefix"}
    if also_record:
        d["also_record"] = True
    return d


@dataclass(frozen=True)
class ObjectStub:
    """What the infofile says of a striped object (``_record_of``)."""

    size: int
    crc32c: int
    committed_at: float
    stripes: int
    stripe_size: int


# -- listings: what find and ls make of the names one range query gives ------
def row_infos(pre: str, rows: list) -> list[dict]:
    """The info dicts of the rows of :meth:`st_py.core.infofile.InfofileReader.entries_between`
    (``(name, stored_size, logical_size, crc32c, committed_at, stripes,
    stripe_size)``), each named ``pre + name``: as :func:`record_info` and
    :func:`object_info` make them (``size`` the user's bytes,
    :func:`st_py.core.infofile.user_size`), built inline (one dict per row, no
    call per row). The values are already ``int`` and ``float``: SQLite's
    column affinity stores sizes and CRCs as INTEGER and
    ``committed_at`` as REAL."""
    return [
        {
            "name": pre + n,
            "size": lg if lg is not None else st,
            "stored_size": st,
            "type": "file",
            "st_type": "record",
            "crc32c": crc,
            "created": t,
            "mtime": t,
        }
        if k is None
        else object_info(pre + n, lg, crc, t, k, ss)
        for n, st, lg, crc, t, k, ss in rows
    ]


def all_addressable(names: list[str], plen: int) -> bool:
    """Whether no name has an empty component after its first ``plen``
    characters (a prefix: ``""`` or ending in ``/``), tested on the names
    joined (record names hold no NUL): ``//``, a trailing ``/``, or a
    leading one where the prefix is empty. See :func:`addressable`."""
    if not names:
        return True
    joined = "\0".join(names)
    if "//" in joined or "/\0" in joined or joined.endswith("/"):
        return False
    return plen > 0 or not (joined.startswith("/") or "\0/" in joined)


def addressable(rest: str) -> bool:
    """A name below a prefix (``rest``, the part after it) is a path only
    if no component is empty: not ``""``, ``/x``, ``a//b`` nor ``a/``
    (docs/fsspec.md, "Corner cases")."""
    return not (not rest or rest[0] == "/" or rest[-1] == "/" or "//" in rest)


def dirs_of(names: list[str], plen: int, room: int | None) -> list[str]:
    """The pseudo-directories that ``names`` (below one prefix of ``plen``
    characters, every component after it non-empty, in name order) make,
    relative to the prefix: each part of a name after the prefix that ends
    before one of its ``/``, at most ``room`` components deep (None: any),
    each once, unsorted. One pass: a name whose parent is the previous
    name's adds nothing, and a directory's ancestors are added with it."""
    seen: set[str] = set()
    out: list[str] = []
    last = None
    for name in names:
        j = name.rfind("/")
        if j < plen:
            continue  # directly below the prefix
        parent = name[plen:j]
        if parent == last:
            continue
        last = parent
        if room is not None and parent.count("/") >= room:
            parent = "/".join(parent.split("/", room)[:room])
        while parent and parent not in seen:
            seen.add(parent)
            out.append(parent)
            parent = parent.rpartition("/")[0]
    return out


class Found:
    """What one ``find`` collects: directories and files (records and
    objects) as paths, with their info dicts if ``detail``. A path found
    both as a directory and as a file (records ``a`` and ``a/b``) is the
    file; of a record and an object of one name, the one added last."""

    def __init__(self, detail: bool):
        self.detail = detail
        self.dirs: dict[str, dict | None] = {}
        self.files: list[str] = []
        self.infos: list[dict] = []

    def add_dir(self, path: str, info: dict | None) -> None:
        """A directory found (its info if ``detail``); the first info kept."""
        self.dirs.setdefault(path, info)

    def add_files(self, paths: list[str], infos: list[dict] | None) -> None:
        """Files found, with their infos (in the same order) if ``detail``."""
        self.files += paths
        if infos is not None:
            self.infos += infos

    def result(self) -> list[str] | dict[str, dict]:
        """The paths sorted, or ``{path: info}`` in path order."""
        if self.detail:
            out: dict = dict(self.dirs)
            out.update(zip(self.files, self.infos))
            return {p: out[p] for p in sorted(out)}
        files = sorted(self.files)  # already sorted per file: a merge of runs
        if not self.dirs:
            return files
        n = len(files)
        extra = [d for d in self.dirs if (i := bisect_left(files, d)) == n or files[i] != d]
        return sorted(files + extra) if extra else files
