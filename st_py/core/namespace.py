"""The StoreTorrent namespace: file names and their infofile paths.

The file ``/a/b/c`` has its SQLite infofile at ``<root>/a/b/c``; ``a`` and
``b`` are plain directories (paper 3.5), so ``ls``, ``find`` and ``tar`` work.
"""

from __future__ import annotations

import os
from pathlib import Path

from st_py.errors import BadNameError

MAX_FILE_NAME = 1024
TMP_PREFIX = ".st-creating-"
RESERVED_PREFIX = ".st-"
# SQLite's files beside an infofile ``X``: ``X-journal`` (rollback journal),
# ``X-wal`` and ``X-shm`` (write-ahead log). No namespace name ends so.
SQLITE_SIDE_SUFFIXES = ("-journal", "-wal", "-shm")


def is_entry(name: str) -> bool:
    """Whether a directory entry called ``name`` (one path component) in the
    namespace tree is a namespace entry, a file's infofile or a folder: not
    a reserved ``.st-`` name (a file being created) and not one of SQLite's
    side files (``-journal``, ``-wal``, ``-shm``) beside an infofile. The
    one rule every walk of the namespace follows."""
    return not name.startswith(RESERVED_PREFIX) and not name.endswith(SQLITE_SIDE_SUFFIXES)


def normalize(name: str) -> str:
    """Return the canonical form of a file name: ``/a/b/c``.

    A leading ``/`` is optional. Empty, ``.`` and ``..`` components, NUL bytes,
    components starting with ``.st-`` (reserved) or ending with ``-journal``,
    ``-wal`` or ``-shm`` (SQLite's files beside an infofile: :func:`is_entry`)
    and names over 1024 bytes are refused, so no file name can reach outside
    the namespace root or be taken for another file's journal.

    Raises
    ------
    BadNameError
        With the reason.
    """
    if not isinstance(name, str):
        raise BadNameError(f"file name must be a str, not {type(name).__name__}")
    if "\x00" in name:
        raise BadNameError("file name contains a NUL byte")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadNameError(f"file name {name!r} is not valid UTF-8") from None
    if len(encoded) > MAX_FILE_NAME:
        raise BadNameError(f"file name longer than {MAX_FILE_NAME} bytes")
    parts = name.strip("/").split("/")
    if not name.strip("/"):
        raise BadNameError("empty file name: give a path such as /experiment/run1")
    for p in parts:
        if p in ("", ".", ".."):
            raise BadNameError(f"file name {name!r} has an empty, '.' or '..' component")
        if p.startswith(RESERVED_PREFIX):
            raise BadNameError(f"file name component {p!r}: names starting with '.st-' are reserved")
        if p.endswith(SQLITE_SIDE_SUFFIXES):
            raise BadNameError(
                f"file name component {p!r}: names ending with {', '.join(SQLITE_SIDE_SUFFIXES)} are "
                "reserved (SQLite's files beside an infofile); choose another name"
            )
    return "/" + "/".join(parts)


def ancestors(name: str) -> list[str]:
    """The directories above file ``name``, outermost first:
    ``/a/b/f`` -> ``["/a", "/a/b"]``."""
    parts = name.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def infofile_path(root: str | os.PathLike, name: str) -> Path:
    """The infofile of file ``name`` under namespace ``root``."""
    rel = normalize(name).lstrip("/")
    path = Path(root, rel)
    # normalize() already refuses '..'; this is a second fence against symlinks.
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path.parent)]) != real_root:
        raise BadNameError(f"file name {name!r} resolves outside the namespace root")
    return path


def dir_path(root: str | os.PathLike, name: str) -> Path:
    """The directory ``name`` (``/`` is the root itself)."""
    if name.strip("/") == "":
        return Path(root)
    return infofile_path(root, name)
