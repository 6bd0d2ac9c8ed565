"""Namespace paths onto StoreTorrent files and records: the one resolution
of a path that the client's callers share (the fsspec filesystem, the Ray,
Dask and DuckDB readers, the S3 endpoint's key map, ``storetorrent ls``;
docs/fsspec.md, docs/s3.md "The mapping").

**A path** ``/a/b/c`` is resolved by :func:`lookup`: the StoreTorrent file
is the longest prefix of the path that is one, the record the rest; a path
that no prefix's file holds is a namespace directory, or missing below the
deepest directory on it. **A new path** (:func:`new_file`) goes into a new
file one component below the deepest namespace directory on it, its record
the rest of the path; below the root, a path of three or more components
keeps its first as a directory (``/exp/run1/src/a.parquet`` on an empty
namespace: file ``/exp/run1``, record ``src/a.parquet``), so a top-level
name stays a directory (an S3 bucket). A path directly in a namespace
directory has no file to go into.

Thread safety: the functions are, given a thread-safe ``list_entries``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from st_py.errors import BadNameError, StFileNotFoundError


@dataclass(frozen=True, slots=True)
class NamespaceEntry:
    """One entry of a namespace directory (:meth:`st_py.client.client.Client.ls`).

    Attributes
    ----------
    name : str
        Its full path (``/exp/run1``).
    is_dir : bool
        A namespace directory (else a StoreTorrent file).
    file_id : int
        The file's id (0 for a directory).
    replication : str
        The file's class (``x1``, ``x2``, ``x3``; ``""`` for a directory).
    records : int
        The file's names (records and striped objects).
    bytes : int
        One copy of each name as stored, stripes included (what quotas
        count); 0 when listed without sizes.
    user_bytes : int
        The user's bytes of its names, before filters (docs/infofile.md,
        "Sizes"); 0 when listed without sizes.
    owner, group : str
    mode : int
        UNIX permission bits (docs/security.md).
    """

    name: str
    is_dir: bool
    file_id: int
    replication: str
    records: int
    bytes: int
    user_bytes: int
    owner: str
    group: str
    mode: int

    @classmethod
    def of(cls, e) -> "NamespaceEntry":
        """From the tracker's ``ListEntry``."""
        return cls(
            e.name, e.is_dir, e.file_id, e.replication, e.records, e.bytes, e.user_bytes, e.owner, e.group, e.mode
        )


@dataclass(frozen=True)
class Location:
    """What a namespace path is (:func:`lookup`).

    Attributes
    ----------
    kind : str
        ``"dir"``: a namespace directory (``name`` is the path, ``entries``
        its List entries); ``"file"``: a StoreTorrent file (``name``);
        ``"inside"``: a record path ``rest`` inside file ``name``;
        ``"missing"``: nothing, ``name`` being the deepest namespace
        directory on the path and ``rest`` the path below it.
    name : str
    rest : str
    entries : list or None
        What ``list_entries`` gave for the directory (:class:`NamespaceEntry`
        from ``Client.ls``), for ``"dir"``.
    """

    kind: str
    name: str
    rest: str = ""
    entries: list | None = None


def path_prefixes(path: str):
    """``/a/b/c``, ``/a/b``, ``/a``, ``/``: the path and its ancestors, longest first."""
    while True:
        yield path
        if path == "/":
            return
        path = path.rsplit("/", 1)[0] or "/"


def lookup(
    path: str, list_entries: Callable[[str], Sequence], known: Collection[str] = (), min_len: int = 1
) -> Location:
    """What normalized path ``path`` (``/a/b``) is: the StoreTorrent file it
    is or lies in (the longest prefix that is one), else a namespace
    directory, else missing below the deepest directory on it.

    ``list_entries(prefix)`` is the tracker's List of a prefix (raising
    :class:`~st_py.errors.StFileNotFoundError` or
    :class:`~st_py.errors.BadNameError` for a name that is neither a
    file nor a directory: a path inside a file is one): a directory gives its
    entries, a file itself alone. The path is listed, then its ancestors,
    until one exists: one List for a directory or file, one more per
    component of a record path. ``known``: names known to be files (a
    caller's cache), answered without a List; ``min_len``: prefixes shorter
    than this are taken as directories without a List (a bucket's ``/B``):
    when the walk reaches one, the path is missing below it.

    A name that lists as a single non-directory entry without a file id (a
    stray file in the namespace that is no infofile) is no StoreTorrent
    file: the path is missing below its parent.

    Raises
    ------
    TrackerUnavailableError
        From ``list_entries``.
    """
    if path == "/":
        return Location("dir", "/", "", None)
    for pre in path_prefixes(path):
        if pre in known:
            return Location("file", pre) if pre == path else Location("inside", pre, path[len(pre) + 1 :])
    for pre in path_prefixes(path):
        if len(pre) < min_len:  # taken as a directory without asking
            return Location("missing", pre, path[len(pre) :].lstrip("/"))
        try:
            entries = list(list_entries(pre))
        except (StFileNotFoundError, BadNameError):  # record names may hold '..', '.st-', ...
            continue
        if len(entries) == 1 and entries[0].name == pre and not entries[0].is_dir:
            if not entries[0].file_id:  # a stray non-infofile in the namespace: not ours
                parent = pre.rsplit("/", 1)[0] or "/"
                return Location("missing", parent, path[len(parent) :].lstrip("/"))
            return Location("file", pre) if pre == path else Location("inside", pre, path[len(pre) + 1 :])
        if pre == path:
            return Location("dir", path, "", entries)
        return Location("missing", pre, path[len(pre) :].lstrip("/"))
    return Location("missing", "/", path.lstrip("/"))  # not reached: the root always lists


def new_file(deepest: str, rest: str) -> tuple[str, str] | None:
    """``(file, record)`` a new path goes into: ``rest`` being the path
    below ``deepest``, the deepest namespace directory on it (a missing
    :class:`Location`), the file is ``rest``'s first component below
    ``deepest`` and the record the rest; below the root, a path of three or
    more components keeps its first as a directory. None when the path lies
    directly in ``deepest`` (one component: no file to go into).

    >>> new_file("/exp", "run1/src/a.parquet")
    ('/exp/run1', 'src/a.parquet')
    >>> new_file("/", "exp/run1/a.parquet")
    ('/exp/run1', 'a.parquet')
    >>> new_file("/", "exp/a.parquet")
    ('/exp', 'a.parquet')
    >>> new_file("/exp", "a.parquet") is None
    True

    The record name is the caller's to check (``st_py.core.record_names``,
    :func:`check_key`).
    """
    parts = rest.split("/")
    if deepest == "/" and len(parts) >= 3:
        return "/" + parts[0] + "/" + parts[1], "/".join(parts[2:])
    if len(parts) < 2 or not parts[0]:
        return None
    return deepest.rstrip("/") + "/" + parts[0], "/".join(parts[1:])


__all__ = ["Location", "NamespaceEntry", "lookup", "new_file", "path_prefixes"]
