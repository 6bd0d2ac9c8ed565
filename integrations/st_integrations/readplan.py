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

import fnmatch
import hashlib
import math
from dataclasses import dataclass, field

from st_py.errors import GetLocalError, RecordNotFoundError, StFileNotFoundError
from st_py.getlocal import GetLocalPlan, check_complete, reveal_ring
from st_py.infofile import STRIPE_PREFIX

from .formats import ignored

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


@dataclass(frozen=True)
class ReadUnit:
    """The records of one read task, all on the node of ``peer``."""

    peer: str
    records: tuple[RecordRef, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.records)

    def __dask_tokenize__(self):
        """Dask's deterministic token, from one hash over the records (its
        default walks every RecordRef field by field: about 50 us a record,
        a second per 20,000 records when a DataFrame is built)."""
        token = self.__dict__.get("_token")
        if token is None:
            h = hashlib.blake2b(digest_size=16)
            for r in self.records:
                h.update(f"{r.file}\0{r.name}\0{r.path}\0{r.size}\0{r.kind}\0{r.peer}\0".encode())
            token = self.__dict__["_token"] = ("st-read-unit", self.peer, len(self.records), h.hexdigest())
        return token


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

    @property
    def peers(self) -> list[str]:
        """Peers with at least one unit, in ring order of first appearance."""
        seen: dict[str, None] = {}
        for u in self.units:
            seen.setdefault(u.peer)
        return list(seen)

    @property
    def num_records(self) -> int:
        return sum(len(u.records) for u in self.units)

    @property
    def size(self) -> int:
        return sum(u.size for u in self.units)


def _has_magic(path: str) -> bool:
    return any(c in path for c in "*?[")


def resolve_paths(client, paths: str | list[str]) -> list[str]:
    """File names for ``paths`` (see :func:`resolve_targets`), in order.

    Raises
    ------
    StFileNotFoundError
        If a path or glob matches nothing.
    """
    return list(resolve_targets(client, paths))


def resolve_targets(client, paths: str | list[str]) -> dict[str, list[str] | None]:
    """What ``paths`` name: ``{file name: record selection}``, in order.

    A path is a StoreTorrent file (all its records: selection None), a
    namespace directory (every file below it), a namespace glob (``*``,
    ``?``, ``[...]`` within one path component; ``**`` any depth), or a
    path inside a file: a record or object (``/exp/run1/part-0.parquet``),
    a record prefix (``/exp/run1/2024`` for ``2024/...``) or a glob of
    record names (``/exp/run1/*.parquet``). The selection lists such
    patterns; :func:`selected` applies them.

    Raises
    ------
    StFileNotFoundError
        If a path or glob matches no file (or no record name inside one:
        that is checked when planned).
    """
    if isinstance(paths, str):
        paths = [paths]
    out: dict[str, list[str] | None] = {}

    def add(fname: str, pattern: str | None) -> None:
        if pattern is None:
            out[fname] = None
        elif fname not in out:
            out[fname] = [pattern]
        elif out[fname] is not None:
            out[fname].append(pattern)  # type: ignore[union-attr]

    for p in paths:
        p = "/" + p.strip("/")
        inside = _inside_file(client, p)
        if inside is not None:
            add(*inside)
            continue
        if not _has_magic(p):
            entries = _list(client, p)
            if entries is None:  # not a file, directory, nor a path inside a file
                client.tracker.open(p)  # raises StFileNotFoundError saying so
                add(p, None)
            else:
                found = _files_below(client, p)
                if not found:
                    raise StFileNotFoundError(f"directory {p} holds no StoreTorrent file")
                for f in found:
                    add(f, None)
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
            add(f, None)
    return out


def _is_file(client, path: str) -> bool:
    entries = _list(client, path)
    return bool(entries) and len(entries) == 1 and entries[0].name == path and not entries[0].is_dir


def _inside_file(client, p: str) -> tuple[str, str] | None:
    """``(file, record pattern)`` if ``p`` lies inside a StoreTorrent file."""
    parts = p.strip("/").split("/")
    for n in range(len(parts) - 1, 0, -1):
        head = parts[:n]
        if any(_has_magic(x) for x in head):
            continue
        pre = "/" + "/".join(head)
        if _is_file(client, pre):
            return pre, "/".join(parts[n:])
    return None


def selected(name: str, patterns: list[str] | None) -> bool:
    """Whether record name ``name`` is in a selection of
    :func:`resolve_targets`: a name, a prefix of ``/``-separated names, or
    a glob of names."""
    if patterns is None:
        return True
    for q in patterns:
        if name == q or name.startswith(q.rstrip("/") + "/"):
            return True
        if _has_magic(q) and _glob_match(name, q):
            return True
    return False


def _glob_match(name: str, pattern: str) -> bool:
    if "**" in pattern:
        return fnmatch.fnmatchcase(name, pattern.replace("**", "*"))
    n, q = name.strip("/").split("/"), pattern.strip("/").split("/")
    return len(n) == len(q) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(n, q))


def _list(client, path: str):
    """The entries of directory ``path``, or None if it is a file or absent."""
    from st_py.errors import TrackerError

    try:
        return client.ls(path)
    except (StFileNotFoundError, TrackerError, NotADirectoryError):
        return None


def _files_below(client, root: str) -> list[str]:
    out, stack = [], [root]
    while stack:
        d = stack.pop()
        for e in sorted(_list(client, d) or [], key=lambda e: e.name, reverse=True):
            (stack.append if e.is_dir else out.append)(e.name)
    return sorted(out)


def _reveal_all(plan: GetLocalPlan) -> tuple[dict[str, list], list[tuple[int, tuple[str, ...]]]]:
    by_peer, parts = {}, []
    for peer in plan.ring:
        records, ring = reveal_ring(peer, plan)
        by_peer[peer] = records
        parts.append((len(records), ring))
    return by_peer, parts


def plan_file(f) -> tuple[GetLocalPlan, dict[str, list]]:
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


def _object_peer(obj: str, by_peer: dict[str, list], ring) -> str:
    """The peer revealing the most bytes of ``obj``'s stripes (the read task
    of the object runs on its node), else the first of the ring."""
    prefix = f"{STRIPE_PREFIX}{obj}/"
    best, best_bytes = ring[0], -1
    for peer in ring:
        n = sum(r.size for r in by_peer.get(peer, ()) if r.name.startswith(prefix))
        if n > best_bytes:
            best, best_bytes = peer, n
    return best


def split(records: list[RecordRef], peer: str, block_size: int) -> list[ReadUnit]:
    """Cut one peer's records (in name order) into units of about
    ``block_size`` bytes; a record larger than that is a unit of its own."""
    units, cur, cur_size = [], [], 0
    for r in sorted(records, key=lambda r: (r.file, r.name)):
        if cur and cur_size + r.size > block_size:
            units.append(ReadUnit(peer, tuple(cur)))
            cur, cur_size = [], 0
        cur.append(r)
        cur_size += r.size
    if cur:
        units.append(ReadUnit(peer, tuple(cur)))
    return units


def plan_scan(client, paths: str | list[str], block_size: int | None = None,
              num_blocks: int | None = None, skip_ignored: bool = False) -> ScanPlan:
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

    Returns
    -------
    ScanPlan

    Raises
    ------
    StFileNotFoundError, RecordsUnavailableError, GetLocalError
    RecordNotFoundError
        A path inside a file (a record name, prefix or glob) matches no
        committed record.
    """
    targets = resolve_targets(client, paths)
    files = list(targets)
    plans, per_peer, revealed = {}, {}, {}
    skipped = 0
    kept: dict[tuple[str, bytes], str] = {}
    unknown: set[tuple[str, str]] = set()
    for name in files:
        want = targets[name]
        with client.open(name) as f:
            plan, by_peer = plan_file(f)
            filters = tuple(n for n in f.info.filters.split(",") if n)
            fid, check = f.file_id, f.info.key_check
            infofile = f._infofile()
            objects = infofile.objects(plan.generation)
            if want is None:
                _kept_schemas(infofile, name, kept, unknown)
            else:
                names = [r.name for recs in by_peer.values() for r in recs
                         if not r.name.startswith(STRIPE_PREFIX) and selected(r.name, want)]
                names += [o.name for o in objects if selected(o.name, want)]
                have = infofile.schemas_of(names)
                for n in names:
                    if n in have:
                        kept.setdefault(have[n], n)
                    else:
                        unknown.add((name, n))
        plans[name] = plan
        revealed[name] = sum(len(v) for v in by_peer.values())
        for peer, recs in by_peer.items():
            # the stripes of striped objects are scanned as their objects (below)
            keep = [r for r in recs if not r.name.startswith(STRIPE_PREFIX) and selected(r.name, want)]
            if skip_ignored:
                skipped += sum(1 for r in keep if ignored(r.name))
                keep = [r for r in keep if not ignored(r.name)]
            per_peer.setdefault(peer, []).extend(RecordRef(name, r.name, r.path, r.size, filters, fid, check,
                                                           peer=peer) for r in keep)
        objects = [o for o in objects if selected(o.name, want)]
        if want is not None and not objects and not any(selected(r.name, want) for recs in by_peer.values()
                                                         for r in recs):
            raise RecordNotFoundError(f"no committed record of {name} matches {', '.join(want)}")
        for obj in objects:
            if skip_ignored and ignored(obj.name):
                skipped += 1
                continue
            peer = _object_peer(obj.name, by_peer, plan.ring)
            per_peer.setdefault(peer, []).append(RecordRef(name, obj.name, "", obj.size, filters, fid, check,
                                                           kind="object"))
    total = sum(r.size for recs in per_peer.values() for r in recs)
    if num_blocks:
        block_size = max(1, math.ceil(total / max(1, num_blocks)))
    block_size = block_size or DEFAULT_BLOCK_SIZE
    units = []
    for peer in sorted(per_peer):
        if num_blocks and total:
            # Proportional share of the units, by bytes, at least one.
            share = max(1, round(num_blocks * sum(r.size for r in per_peer[peer]) / total))
            peer_bytes = sum(r.size for r in per_peer[peer])
            units.extend(split(per_peer[peer], peer, max(1, math.ceil(peer_bytes / share))))
        else:
            units.extend(split(per_peer[peer], peer, block_size))
    return ScanPlan(files, plans, units, revealed, skipped, [(fmt, blob, first) for (fmt, blob), first in kept.items()],
                    unknown)


def _kept_schemas(infofile, file: str, kept: dict, unknown: set) -> None:
    """The record schemas of a whole file kept in its infofile, into
    ``kept`` (``{(format, schema): first record}``), and the names whose
    schema was not kept into ``unknown``: one indexed query, no record read."""
    groups = infofile.schema_groups()
    if groups is None:  # a file made before schemas were kept: every record's header is read
        unknown.update((file, n) for n in infofile.names())
        return
    for g in groups:
        kept.setdefault((g.format, g.schema), g.first)
    unknown.update((file, n) for n in infofile.names_without_schema())
