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
from dataclasses import dataclass

from fsspec.utils import stringify_path

PROTOCOL = "storetorrent"

# host:port (or [v6]:port): the only form of URL host taken as a tracker address
_TRACKER_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}$")

_HIDDEN = (".st-stripe/", ".st-version/")  # reserved prefixes: stripes, stored names of versions


def _hidden(name: str) -> bool:
    return name.startswith(_HIDDEN)


def _split_url(path: str) -> tuple[str, str]:
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


def _norm(path: str) -> str:
    """``/a/b``: a leading ``/``, no trailing ``/`` (the root is ``/``)."""
    path = "/" + path.lstrip("/")
    return path.rstrip("/") or "/"


def _prefixes(path: str):
    """``/a/b/c``, ``/a/b``, ``/a``, ``/``: the path and its ancestors, longest first."""
    while True:
        yield path
        if path == "/":
            return
        path = path.rsplit("/", 1)[0] or "/"


def _upper(prefix: str) -> str:
    """The least string above every string starting with ``prefix``
    (non-empty): ``a/`` -> ``a0``. Code-point order is the UTF-8 byte order
    SQLite compares names in."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _not_found(path: str, what: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, what, path)


def _record_info(name: str, size: int, crc: int, committed_at: float, stored_size: int | None = None) -> dict:
    """A record's info: ``size`` the user's bytes (st_py.infofile.user_size),
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


def _object_info(name: str, size: int, crc: int, committed_at: float, stripes: int, stripe_size: int) -> dict:
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


def _object_info_at(path: str, om: tuple) -> dict:
    return _object_info(path, *om)


def _prefix_info(name: str) -> dict:
    return {"name": name, "size": 0, "type": "directory", "st_type": "prefix"}


@dataclass(frozen=True)
class _ObjectMeta:
    """What the infofile says of a striped object (``_record_of``)."""

    size: int
    crc32c: int
    committed_at: float
    stripes: int
    stripe_size: int
