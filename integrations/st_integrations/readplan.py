"""Planning a scan on the driver: which records each read task reads.

A scan of one or more StoreTorrent files (paper 3.7) is planned in three
steps, none of which reads a record:

1. **paths**: a file, a list of files, or a namespace glob (``"/exp/*"``)
   is resolved to file names with the tracker's listing;
2. **GET_LOCAL**: for each file, the live peerlist and commit generation
   (:meth:`st_py.StFile.get_local_plan`), then every live peer is asked which
   records it reveals (the peers run their ring exchange); the counts must add
   up to the plan's ``expected`` and every peer must have answered from the
   same ring, or the scan is planned again (a peer died meanwhile) and, if it
   still does not add up, :class:`st_py.GetLocalError` is raised;
3. **split**: each peer's records are cut, in name order, into read units of
   about ``block_size`` bytes (or into ``num_blocks`` units over the whole
   scan). A unit is a fixed list of records, so a retried read task reads the
   same records again and can never duplicate or drop rows.

Everything here is plain picklable data, handed to read tasks on the peers'
nodes (docs/analysis.md).
"""

from __future__ import annotations

import array
import bisect
import dataclasses
import fnmatch
import glob
import hashlib
import itertools
import math
from dataclasses import dataclass, field

from st_py.client.getlocal import GetLocalPlan, check_complete, reveal_entries
from st_py.client.namespace_paths import lookup
from st_py.core.infofile import STRIPE_PREFIX, InfofileReader
from st_py.errors import GetLocalError, RecordNotFoundError, StFileNotFoundError
from st_py.wire.protocol import LocalEntries

from .formats import ignored
from .keymap import is_upload_file
from .partitioning import HIVE, Partitions, check_partitioning, discover

DEFAULT_BLOCK_SIZE = 128 << 20  # bytes of records per read task (Ray's target block size)
PLAN_ATTEMPTS = 3


@dataclass(frozen=True)
class RecordRef:
    """One record revealed to a peer's node: read ``path`` there."""

    file: str
    name: str
    path: str
    size: int  # as stored (after the file's filters); an object's: its plaintext size
    # The file's client-side filters (docs/filters.md): the bytes at path
    # are decoded with them before they are parsed.
    filters: tuple[str, ...] = ()
    file_id: int = 0
    key_check: str = ""
    # "record": one revealed copy at ``path``; "object": a striped object
    # (docs/striping.md), read with ranged GETs of its stripes (no path),
    # planned on the peer that holds most of its stripes.
    kind: str = "record"
    peer: str = ""  # the address of the peer that revealed ``path``
    # The past generation the scan reads (docs/snapshots.md); None: the
    # current one. A striped object (or a record whose local copy fails its
    # check) is read by GET as of it.
    as_of: int | None = None


@dataclass(frozen=True)
class FileRef:
    """What the records of one file in a read unit share."""

    file: str
    filters: tuple[str, ...] = ()
    file_id: int = 0
    key_check: str = ""
    as_of: int | None = None  # as RecordRef.as_of


@dataclass(frozen=True)
class ReadUnit:
    """The records of one read task, all on the node of ``peer``, by column
    (issue "Many small records": a plan of a million records holds a few
    lists, not a million objects, and pickles to a task in one go).

    Record ``i`` is ``names[i]`` of file ``files[file_of[i]]``, read at
    ``paths[i]`` (``""``: a striped object, read by ranged GETs) with
    ``sizes[i]`` bytes. :attr:`records` gives them as :class:`RecordRef`.
    """

    peer: str
    files: tuple[FileRef, ...] = ()
    file_of: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    # Who planned it (set by :func:`plan_scan`): the scan's files with their
    # file ids, commit generations and rings, the block size, the peer and
    # the unit's place in the peer's records. It stands for the records in
    # Dask's token (the same plan always cuts the same units), so building a
    # DataFrame over 10^6 records hashes no name. "" for a unit made any
    # other way, whose token hashes its records.
    key: str = ""

    @classmethod
    def of(cls, peer: str, refs) -> "ReadUnit":
        """A unit of :class:`RecordRef` ``refs`` (in this order)."""
        files: dict[FileRef, int] = {}
        file_of, names, paths, sizes = [], [], [], []
        for r in refs:
            fr = FileRef(r.file, r.filters, r.file_id, r.key_check, r.as_of)
            file_of.append(files.setdefault(fr, len(files)))
            names.append(r.name)
            paths.append(r.path if r.kind == "record" else "")
            sizes.append(r.size)
        return cls(peer, tuple(files), tuple(file_of), tuple(names), tuple(paths), tuple(sizes))

    def __len__(self) -> int:
        return len(self.names)

    @property
    def records(self) -> tuple[RecordRef, ...]:
        """The records as :class:`RecordRef` (built on each call: keep it)."""
        files, peer = self.files, self.peer
        return tuple(
            RecordRef(
                f.file,
                n,
                p,
                z,
                f.filters,
                f.file_id,
                f.key_check,
                "record" if p else "object",
                peer if p else "",
                f.as_of,
            )
            for f, n, p, z in zip((files[i] for i in self.file_of), self.names, self.paths, self.sizes)
        )

    def ref(self, i: int) -> RecordRef:
        """Record ``i`` as a :class:`RecordRef`."""
        f, p = self.files[self.file_of[i]], self.paths[i]
        return RecordRef(
            f.file,
            self.names[i],
            p,
            self.sizes[i],
            f.filters,
            f.file_id,
            f.key_check,
            "record" if p else "object",
            self.peer if p else "",
            f.as_of,
        )

    def select(self, keep) -> "ReadUnit":
        """The unit with only the records at the indexes ``keep``."""
        keep = list(keep)
        return ReadUnit(  # no key: the records are no longer the planned ones
            self.peer,
            self.files,
            tuple(self.file_of[i] for i in keep),
            tuple(self.names[i] for i in keep),
            tuple(self.paths[i] for i in keep),
            tuple(self.sizes[i] for i in keep),
        )

    @property
    def size(self) -> int:
        """Bytes of the unit's records (as stored)."""
        return sum(self.sizes)

    @property
    def input_files(self) -> list[str]:
        """``/file/record`` of every record."""
        files = [f.file for f in self.files]
        return [f"{files[i]}/{n}" for i, n in zip(self.file_of, self.names)]

    def __reduce__(self):
        """Pickled by column, each column in one piece (names and paths as
        one NUL-joined string each, sizes and file indexes as one array):
        a Dask graph or a Ray read task of 10^5 records pickles and unpickles
        in a few memory copies, not an object per record (0.4 s of a 1.3 s
        Dask scan of 100,000 records went to pickling the units before)."""
        return (
            _unpack_unit,
            (
                self.peer,
                self.files,
                len(self.names),
                array.array("I", self.file_of).tobytes(),
                "\0".join(self.names),
                "\0".join(self.paths),
                array.array("Q", self.sizes).tobytes(),
                self.key,
            ),
        )

    def __dask_tokenize__(self):
        """Dask's deterministic token: the planner's :attr:`key` with the
        unit's length, ends and byte sum, or, for a unit without a key, one
        hash over the records (Dask's default walks every field: about 50 us
        a record, a second per 20,000 records when a DataFrame is built)."""
        token = self.__dict__.get("_token")
        if token is None:
            h = hashlib.blake2b(digest_size=16)
            if self.key and self.names:
                ends = (self.names[0], self.names[-1], self.paths[0], self.paths[-1], sum(self.sizes))
                h.update(repr((self.key, len(self.names), ends)).encode("utf-8", "surrogateescape"))
            else:
                h.update(repr(self.files).encode())
                h.update(repr(self.file_of).encode())
                for col in (self.names, self.paths):
                    h.update("\0".join(col).encode("utf-8", "surrogateescape"))
                h.update(repr(self.sizes).encode())
            token = self.__dict__["_token"] = ("st-read-unit", self.peer, len(self.names), h.hexdigest())
        return token


def _unpack_unit(peer, files, n, file_of, names, paths, sizes, key) -> ReadUnit:
    """:meth:`ReadUnit.__reduce__`'s inverse (record names and local paths hold no NUL)."""

    def column(text: str) -> tuple[str, ...]:
        return tuple(text.split("\0")) if n else ()

    def ints(code: str, raw: bytes) -> tuple[int, ...]:
        a = array.array(code)
        a.frombytes(raw)
        return tuple(a)

    return ReadUnit(peer, files, ints("I", file_of), column(names), column(paths), ints("Q", sizes), key)


@dataclass
class ScanPlan:
    """A planned scan: the GET_LOCAL plan of every file and the read units.

    ``revealed[file]`` is how many records the peers revealed for that file
    (stripes of striped objects included; they are scanned as their
    objects, one :class:`RecordRef` of kind ``"object"`` each); it equals
    ``plans[file].expected`` (checked when planned).
    """

    files: list[str]
    plans: dict[str, GetLocalPlan]
    units: list[ReadUnit]
    revealed: dict[str, int] = field(default_factory=dict)
    skipped: int = 0  # records left out by their name (skip_ignored)
    # The record schemas kept in the infofiles at write time (docs/infofile.md,
    # "Record schemas"): (format, Arrow IPC schema, a record that has it),
    # and the planned records whose schema was not kept, as (file, name):
    # only those are opened to learn the scan's schema.
    kept_schemas: list[tuple[str, bytes, str]] = field(default_factory=list)
    unknown_schemas: set[tuple[str, str]] = field(default_factory=set)
    # The hive partition columns of the records' paths (plan_scan's
    # ``partitioning``), None without any; and how the units were cut, for
    # cutting them again over the records a filter keeps (:func:`prune`).
    partitions: Partitions | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None
    scan_key: str = ""

    @property
    def generations(self) -> dict[str, int]:
        """``{file: the generation its records were read at}``: the ``as_of``
        generation of a scan of a past state, else the committed generation
        the peers revealed (docs/snapshots.md, "Provenance"). Cite it, and
        scan the same state again with ``as_of=`` it."""
        return {f: (p.as_of if p.as_of is not None else p.generation) for f, p in self.plans.items()}

    @property
    def peers(self) -> list[str]:
        """Peers with at least one unit, in ring order of first appearance."""
        seen: dict[str, None] = {}
        for u in self.units:
            seen.setdefault(u.peer)
        return list(seen)

    def records(self):
        """``(file, name)`` of every planned record, unit by unit."""
        for u in self.units:
            files = [f.file for f in u.files]
            for i, n in zip(u.file_of, u.names):
                yield files[i], n

    @property
    def num_records(self) -> int:
        """Records planned, over every unit."""
        return sum(len(u) for u in self.units)

    @property
    def size(self) -> int:
        """Bytes of the planned records (as stored), over every unit."""
        return sum(u.size for u in self.units)


def _has_magic(path: str) -> bool:
    return any(c in path for c in "*?[")


def escape(name: str) -> str:
    """``name`` as a pattern that matches it literally: each ``*``, ``?``
    and ``[`` in brackets (``run[bold]2`` -> ``run[[]bold]2``), as
    :func:`glob.escape` does."""
    return glob.escape(name)


def resolve_paths(client, paths: str | list[str], as_of=None) -> list[str]:
    """File names for ``paths`` (see :func:`resolve_targets`), in order.

    Raises
    ------
    StFileNotFoundError
        If a path or glob matches nothing.
    """
    return list(resolve_targets(client, paths, as_of))


def resolve_targets(client, paths: str | list[str], as_of=None) -> dict[str, list[str] | None]:
    """What ``paths`` name: ``{file name: record selection}``, in order.

    A path is a StoreTorrent file (all its records: selection None), a
    namespace directory (every file below it), a namespace glob (``*``,
    ``?``, ``[...]`` within one path component; ``**`` any depth), or a
    path inside a file: a record or object (``/exp/run1/part-0.parquet``),
    a record prefix (``/exp/run1/2024`` for ``2024/...``) or a glob of
    record names (``/exp/run1/*.parquet``). The selection lists such
    patterns; :func:`selected` applies them. With ``as_of``
    (docs/snapshots.md), a path inside a file is matched against the
    record names the file had at that state; files and directories are the
    namespace's as it is now.

    Names are data: a path that names an existing file, directory, record,
    object or record prefix *literally* means that one, whatever ``*``,
    ``?``, ``[`` or ``]`` it holds (``/nyc/run[bold]2``); only a path that
    names nothing literally is a pattern. In a pattern, ``[[]``, ``[*]``
    and ``[?]`` match ``[``, ``*`` and ``?`` (:func:`escape`). This is the
    one place every reader (Ray, Dask, pyarrow datasets, DuckDB's
    ``connect_files`` and ``storetorrent sql --file``) resolves paths.

    Raises
    ------
    StFileNotFoundError
        If a path or glob matches no file (or no record name inside one:
        that is checked when planned).
    """
    return _resolve(client, paths, as_of)[0]


def _resolve(client, paths: str | list[str], as_of=None) -> tuple[dict[str, list[str] | None], dict[str, str]]:
    """:func:`resolve_targets`, and the base of each file: the path given
    that reached it (for a glob, its part before the first pattern
    character), from which record paths are relative in hive partitioning
    (:func:`st_integrations.partitioning.relative`)."""
    if isinstance(paths, str):
        paths = [paths]
    out: dict[str, list[str] | None] = {}
    bases: dict[str, str] = {}

    def add(fname: str, pattern: str | None, base: str) -> None:
        bases.setdefault(fname, base)
        if pattern is None:
            out[fname] = None
        elif fname not in out:
            out[fname] = [pattern]
        elif out[fname] is not None:
            out[fname].append(pattern)  # type: ignore[union-attr]

    for p in paths:
        p = "/" + p.strip("/")
        inside = _inside_file(client, p, as_of)
        if inside is not None:
            fname, patterns = inside
            rest = p[len(fname) + 1 :]
            if patterns == [rest] and _has_magic(rest):  # a glob of record names: its fixed part
                fixed = list(itertools.takewhile(lambda c: not _has_magic(c), rest.split("/")))
                base = "/".join([fname, *fixed])
            else:
                base = p
            for q in patterns:
                add(fname, q, base)
            continue
        entries = _list(client, p)
        if entries is not None:  # a file or directory of this very name
            found = _files_below(client, p)
            if not found:
                raise StFileNotFoundError(f"directory {p} holds no StoreTorrent file")
            for f in found:
                add(f, None, p)
            continue
        if not _has_magic(p):  # not a file, directory, nor a path inside a file
            client.tracker.open(p)  # raises StFileNotFoundError saying so
            add(p, None, p)
            continue
        # Walk from the deepest directory without wildcards.
        parts = p.strip("/").split("/")
        fixed = []
        for part in parts:
            if _has_magic(part):
                break
            fixed.append(part)
        root = "/" + "/".join(fixed)
        matches = [f for f in _files_below(client, root) if _glob_match(f, p)]
        if not matches:
            raise StFileNotFoundError(f"no StoreTorrent file matches {p}")
        for f in matches:
            add(f, None, root)
    return out, bases


def _inside_file(client, p: str, as_of=None) -> tuple[str, list[str]] | None:
    """``(file, record patterns)`` if ``p`` lies inside a StoreTorrent file
    (named literally, whatever characters it holds; the longest prefix that
    is a file: :func:`st_py.client.namespace_paths.lookup`)."""
    loc = lookup(p, lambda pre: client.tracker.list(pre, names_only=True).entries)
    if loc.kind != "inside":
        return None
    return loc.name, _record_patterns(client, loc.name, loc.rest, as_of)


def _record_patterns(client, fname: str, rest: str, as_of=None) -> list[str]:
    """The selection of file ``fname`` that path ``rest`` inside it means:
    ``rest`` itself (a name or prefix; a pattern if it holds ``*``, ``?``
    or ``[``), or, when a record or object is named ``rest`` (or its names
    start with ``rest/``) literally (at ``as_of``, if given), patterns that
    match only those."""
    if not _has_magic(rest):
        return [rest]
    if as_of is not None:
        with client.open(fname, as_of=as_of) as f:
            return _patterns_in(f.infofile(), rest)
    reader = InfofileReader(client.tracker.open(fname).infofile_path)
    try:
        return _patterns_in(reader, rest)
    finally:
        reader.close()


def _patterns_in(reader, rest: str) -> list[str]:
    """:func:`_record_patterns` of ``rest`` read from ``reader`` (an
    :class:`InfofileReader` or an :class:`~st_py.core.history.AsOf` view)."""
    exact = reader.exists(rest)
    below = reader.any_between(rest + "/", rest + "0") or bool(reader.objects_between(rest + "/", rest + "0"))
    if not exact and not below:
        return [rest]  # a pattern
    esc = escape(rest)
    return ([esc] if exact else []) + ([esc + "/**"] if below else [])


def selected(name: str, patterns: list[str] | None) -> bool:
    """Whether record name ``name`` is in a selection of
    :func:`resolve_targets`: a name, a prefix of ``/``-separated names, or
    (holding ``*``, ``?`` or ``[``) a glob of names and folders
    (:func:`_glob_match`)."""
    if patterns is None:
        return True
    for q in patterns:
        if _has_magic(q):
            if _glob_match(name, q):
                return True
        elif name == q or name.startswith(q.rstrip("/") + "/"):
            return True
    return False


def _glob_match(name: str, pattern: str) -> bool:
    """Whether ``pattern`` (``*``, ``?``, ``[...]`` within a component,
    ``**`` across them) matches ``name`` or one of its folders, as a glob on
    a local disk selects a directory and a reader then takes everything
    below it (``carrier=*/*`` over ``carrier=DL/year=2020/a.parquet``)."""
    if "**" in pattern:
        return fnmatch.fnmatchcase(name, pattern.replace("**", "*"))
    n, q = name.strip("/").split("/"), pattern.strip("/").split("/")
    return len(n) >= len(q) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(n, q))


def _list(client, path: str):
    """The entries of directory ``path``, or None if it is a file or absent."""
    from st_py.errors import TrackerError

    try:
        entries = client.tracker.list(path, names_only=True).entries
    except (StFileNotFoundError, TrackerError, NotADirectoryError):
        return None
    # an S3 upload's state while it runs is not data: left out of a directory (keymap)
    return [e for e in entries if e.name == path or not is_upload_file(e.name)]


def _files_below(client, root: str) -> list[str]:
    out: list[str] = []
    stack = [root]
    while stack:
        d = stack.pop()
        for e in sorted(_list(client, d) or [], key=lambda e: e.name, reverse=True):
            (stack.append if e.is_dir else out.append)(e.name)
    return sorted(out)


def _reveal_all(plan: GetLocalPlan) -> tuple[dict[str, LocalEntries], list[tuple[int, tuple[str, ...]]]]:
    by_peer, parts = {}, []
    for peer in plan.ring:
        entries, ring = reveal_entries(peer, plan)
        by_peer[peer] = entries
        parts.append((len(entries), ring))
    return by_peer, parts


def plan_file(f) -> tuple[GetLocalPlan, dict[str, LocalEntries]]:
    """The GET_LOCAL plan of open file ``f`` and each live peer's revealed
    records, checked exactly once (paper 3.7).

    Raises
    ------
    RecordsUnavailableError
        More peers down than the class tolerates.
    GetLocalError
        The peers' answers did not add up ``PLAN_ATTEMPTS`` times in a row
        (peers failing during planning), saying by how much.
    """
    for attempt in range(PLAN_ATTEMPTS):
        plan = f.get_local_plan()
        by_peer, parts = _reveal_all(plan)
        try:
            check_complete(plan, parts)
        except GetLocalError:
            if attempt == PLAN_ATTEMPTS - 1:
                raise
            continue
        return plan, by_peer
    raise AssertionError("unreachable")


def _object_peer(obj: str, by_peer: dict[str, LocalEntries], ring) -> str:
    """The peer revealing the most bytes of ``obj``'s stripes (the read task
    of the object runs on its node), else the first of the ring."""
    prefix = f"{STRIPE_PREFIX}{obj}/"
    best, best_bytes = ring[0], -1
    for peer in ring:
        e = by_peer.get(peer)
        n = sum(z for name, z in zip(e.names, e.sizes) if name.startswith(prefix)) if e is not None else 0
        if n > best_bytes:
            best, best_bytes = peer, n
    return best


def split(cols: "_Columns", peer: str, block_size: int, scan_key: str = "") -> list[ReadUnit]:
    """Cut one peer's records (grouped by file, in name order within one)
    into units of about ``block_size`` bytes; a record larger than that is
    a unit of its own. ``scan_key`` (the plan's identity, see
    :attr:`ReadUnit.key`) keys the units.

    The cuts are found by bisecting the running byte sum, so the cost per
    record is C's (slices and one ``accumulate``), not a Python loop's."""
    units = []
    n = len(cols.names)
    files = tuple(cols.files)
    ends = list(itertools.accumulate(cols.sizes))  # ends[k]: bytes of records 0..k
    i = 0
    while i < n:
        base = ends[i - 1] if i else 0
        # the longest run i..j-1 of at most block_size bytes, at least one record
        j = max(i + 1, bisect.bisect_right(ends, base + block_size, lo=i))
        units.append(
            ReadUnit(
                peer,
                files,
                tuple(cols.file_of[i:j]),
                tuple(cols.names[i:j]),
                tuple(cols.paths[i:j]),
                tuple(cols.sizes[i:j]),
                f"{scan_key}/{peer}/{i}:{j}" if scan_key else "",
            )
        )
        i = j
    return units


class _Columns:
    """One peer's planned records by column, while a plan is built."""

    def __init__(self):
        self.files: list[FileRef] = []
        self.file_of: list[int] = []
        self.names: list[str] = []
        self.paths: list[str] = []
        self.sizes: list[int] = []

    def add(self, fref: FileRef, names, paths, sizes) -> None:
        if not self.files or self.files[-1] != fref:
            self.files.append(fref)
        k = len(self.files) - 1
        self.file_of += [k] * len(names)
        self.names += names
        self.paths += paths
        self.sizes += sizes

    @property
    def size(self) -> int:
        return sum(self.sizes)


def _any_maybe_ignored(names: list[str]) -> bool:
    """Could any of ``names`` be one readers skip? (Substring searches over
    all of them at once: names hold no NUL.)"""
    blob = "\0" + "\0".join(names)
    return any(s in blob for s in ("\0_", "\0.", "/_", "/."))


def _maybe_ignored(name: str) -> bool:
    """A quick superset test of :func:`formats.ignored` (substring checks in C)."""
    return "/_" in name or "/." in name or name[:1] in ("_", ".")


def plan_scan(
    client,
    paths: str | list[str],
    block_size: int | None = None,
    num_blocks: int | None = None,
    skip_ignored: bool = False,
    as_of=None,
    partitioning: str | None = None,
    partition_flavor: str = "arrow",
) -> ScanPlan:
    """Plan a scan of ``paths`` (see the module docstring). Reads no record.

    Parameters
    ----------
    client : st_py.Client
    paths : str or list of str
        Files, directories or namespace globs.
    block_size : int, optional
        Target bytes of records per read unit (default 128 MiB).
    num_blocks : int, optional
        Target number of read units over the whole scan (Ray's
        ``override_num_blocks``); overrides ``block_size``. Each peer with
        records gets at least one.
    skip_ignored : bool
        Leave out records whose last name component starts with ``_`` or
        ``.`` (``_SUCCESS``, ...; :func:`formats.ignored`), as format-detecting
        scans do (``ScanPlan.skipped`` counts them).
    as_of : str, int or datetime, optional
        Scan the files as of a past state (docs/snapshots.md): a snapshot
        name, a generation or a time, the same for every file (a snapshot
        name and a time resolve per file, each to its own generation:
        ``ScanPlan.generations``). None: the current state.
    partitioning : {"hive", None}
        ``"hive"``: ``key=value`` components of the records' paths relative
        to the path given become columns (``ScanPlan.partitions``,
        :mod:`st_integrations.partitioning`), typed by ``partition_flavor``
        (``"arrow"`` or ``"string"``). None: no partition columns.

    Returns
    -------
    ScanPlan

    Raises
    ------
    StFileNotFoundError, RecordsUnavailableError, GetLocalError
    RecordNotFoundError
        A path inside a file (a record name, prefix or glob) matches no
        committed record.
    SnapshotNotFoundError, SnapshotExpiredError, InvalidOptionError
        ``as_of`` names no state of a file that is still readable;
        ``partitioning`` is none of its values.
    """
    partitioning = check_partitioning(partitioning)
    targets, bases = _resolve(client, paths, as_of)
    files = list(targets)
    plans: dict[str, GetLocalPlan] = {}
    revealed: dict[str, int] = {}
    per_peer: dict[str, _Columns] = {}
    skipped = 0
    kept: dict[tuple[str, bytes], str] = {}
    unknown: set[tuple[str, str]] = set()
    for name in files:
        want = targets[name]
        with client.open(name, as_of=as_of) as f:
            skipped += _plan_one(f, name, want, skip_ignored, plans, revealed, per_peer, kept, unknown)
    parts = None
    if partitioning == HIVE and _any_key_value(per_peer, bases):
        parts = discover(_planned(per_peer), bases, partition_flavor)
    block_size = block_size or DEFAULT_BLOCK_SIZE
    scan_key = _scan_key(plans, targets, skip_ignored, block_size, num_blocks)
    return ScanPlan(
        files,
        plans,
        _cut(per_peer, block_size, num_blocks, scan_key),
        revealed,
        skipped,
        [(fmt, blob, first) for (fmt, blob), first in kept.items()],
        unknown,
        parts,
        block_size,
        num_blocks,
        scan_key,
    )


def _cut(per_peer: dict[str, _Columns], block_size: int, num_blocks: int | None, scan_key: str) -> list[ReadUnit]:
    """Every peer's records cut into read units (:func:`split`): of about
    ``block_size`` bytes, or ``num_blocks`` units over the whole scan."""
    total = sum(c.size for c in per_peer.values())
    if num_blocks:
        block_size = max(1, math.ceil(total / max(1, num_blocks)))
    units = []
    for peer in sorted(per_peer):
        cols = per_peer[peer]
        if not cols.names:
            continue
        if num_blocks and total:
            # Proportional share of the units, by bytes, at least one.
            peer_bytes = cols.size
            share = max(1, round(num_blocks * peer_bytes / total))
            units.extend(split(cols, peer, max(1, math.ceil(peer_bytes / share)), scan_key))
        else:
            units.extend(split(cols, peer, block_size, scan_key))
    return units


def _planned(per_peer: dict[str, _Columns]):
    """``(file, name)`` of every planned record."""
    for cols in per_peer.values():
        files = [f.file for f in cols.files]
        for i, n in zip(cols.file_of, cols.names):
            yield files[i], n


def _any_key_value(per_peer: dict[str, _Columns], bases: dict[str, str]) -> bool:
    """Could any planned record's path hold a ``key=value`` component? (A
    substring search in C over all names, so that a scan of 10^6 records
    without one parses none.)"""
    if any("=" in f[len(b) :] for f, b in bases.items()):
        return True
    return any("=" in "\0".join(c.names) for c in per_peer.values())


def prune(plan: ScanPlan, filter, schema) -> ScanPlan:
    """``plan`` without the records whose hive partition values contradict
    ``filter`` (a ``pyarrow.dataset`` expression over ``schema``, the
    scan's columns with the partition columns), decided on their names
    alone (:meth:`Partitions.keep`); the records kept are cut into units
    again as the plan was. The plan itself when there is nothing to prune.
    No record is opened."""
    parts = plan.partitions
    if parts is None or filter is None:
        return plan
    refs = list(plan.records())
    keep = parts.keep(refs, filter, schema)
    if len(keep) == len({(f, n.rpartition("/")[0]) for f, n in refs}):
        return plan
    per_peer: dict[str, _Columns] = {}
    for u in plan.units:
        cols = per_peer.setdefault(u.peer, _Columns())
        for k, (i, n) in enumerate(zip(u.file_of, u.names)):
            fref = u.files[i]
            if (fref.file, n.rpartition("/")[0]) in keep:
                cols.add(fref, [n], [u.paths[k]], [u.sizes[k]])
    key = hashlib.blake2b(f"{plan.scan_key}/{filter}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return dataclasses.replace(plan, units=_cut(per_peer, plan.block_size, plan.num_blocks, key), scan_key=key)


def _scan_key(plans: dict, targets: dict, skip_ignored: bool, block_size: int, num_blocks: int | None) -> str:
    """The identity of a scan's cut (:attr:`ReadUnit.key`): each file with
    its id, the commit generation its peers revealed and their ring (what
    GET_LOCAL's answer is a function of, paper 3.7), the selection, and the
    cutting parameters."""
    ident = [(name, p.file_id, p.generation, p.as_of, tuple(p.ring), targets.get(name)) for name, p in plans.items()]
    h = hashlib.blake2b(repr((ident, skip_ignored, block_size, num_blocks)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:32]


def _plan_one(
    f, name: str, want, skip_ignored: bool, plans: dict, revealed: dict, per_peer: dict, kept: dict, unknown: set
) -> int:
    """Plan open file ``f`` into ``per_peer`` (columns by peer) and learn
    its records' kept schemas; returns the records skipped by name."""
    skipped = 0
    plan, by_peer = plan_file(f)
    fref = FileRef(name, tuple(n for n in f.info.filters.split(",") if n), f.file_id, f.info.key_check, f.as_of)
    infofile = f.infofile()
    objects = infofile.objects(plan.generation)
    has_stripes = infofile.has_stripes()
    plans[name] = plan
    revealed[name] = sum(len(v) for v in by_peer.values())
    planned: list[str] = []  # names of a selection
    # A name readers skip is never given a schema at write time (it is kept
    # NULL: docs/infofile.md), so a file whose every name has one has none
    # to skip, and its names need no look (0.07 s at 10^6 records).
    may_skip = skip_ignored and bool(infofile.names_without_schema(limit=1))
    for peer, e in by_peer.items():
        names, paths, sizes = e.names, e.paths, e.sizes
        maybe_ignored = may_skip and _any_maybe_ignored(names)
        if want is not None or has_stripes or maybe_ignored:
            # the stripes of striped objects are scanned as their objects (below)
            keep = [
                k
                for k, n in enumerate(names)
                if not (has_stripes and n.startswith(STRIPE_PREFIX)) and (want is None or selected(n, want))
            ]
            if maybe_ignored:
                drop = {k for k in keep if _maybe_ignored(names[k]) and ignored(names[k])}
                skipped += len(drop)
                keep = [k for k in keep if k not in drop] if drop else keep
            if len(keep) != len(names):
                names, paths, sizes = [names[k] for k in keep], [paths[k] for k in keep], [sizes[k] for k in keep]
        if want is not None:
            planned += names
        per_peer.setdefault(peer, _Columns()).add(fref, names, paths, sizes)
    objects = [o for o in objects if selected(o.name, want)]
    if want is not None and not objects and not any(selected(n, want) for e in by_peer.values() for n in e.names):
        raise RecordNotFoundError(f"no committed record of {name} matches {', '.join(want)}")
    for obj in objects:
        if skip_ignored and ignored(obj.name):
            skipped += 1
            continue
        peer = _object_peer(obj.name, by_peer, plan.ring)
        per_peer.setdefault(peer, _Columns()).add(fref, [obj.name], [""], [obj.size])
        planned.append(obj.name)
    if want is None:
        _kept_schemas(infofile, name, kept, unknown)
    else:
        have = infofile.schemas_of(planned)
        for n in planned:
            if n in have:
                kept.setdefault(have[n], n)
            else:
                unknown.add((name, n))
    return skipped


def _kept_schemas(infofile, file: str, kept: dict, unknown: set) -> None:
    """The record schemas of a whole file kept in its infofile, into
    ``kept`` (``{(format, schema): first record}``), and the names whose
    schema was not kept into ``unknown``: one indexed query, no record read."""
    schemas = infofile.kept_schemas()
    if schemas is None:  # a file made before schemas were kept: every record's header is read
        unknown.update((file, n) for n in infofile.names())
        return
    for fmt, schema, first in schemas:
        kept.setdefault((fmt, schema), first)
    unknown.update((file, n) for n in infofile.names_without_schema())


def with_partitions(plan: ScanPlan, schema, enabled: bool = True):
    """``(plan, schema)`` for reading ``plan`` with its hive partition
    columns: a key that is also a column of the records' ``schema`` is
    read from the records (not a partition column), the others are
    appended to ``schema`` (:meth:`Partitions.extend`). With ``enabled``
    False (a ``format="raw"`` scan, whose rows are fixed) or no partition
    columns, ``plan`` without partitions and ``schema`` as it is."""
    parts = plan.partitions.without(schema.names) if plan.partitions is not None and enabled else None
    if parts is not plan.partitions:
        plan = dataclasses.replace(plan, partitions=parts)
    return plan, (parts.extend(schema) if parts is not None else schema)
