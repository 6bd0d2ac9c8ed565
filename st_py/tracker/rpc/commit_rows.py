"""The rows of a Commit request (proto/storetorrent/v1/tracker.proto,
``CommitRequest.records``): each record checked and turned into the tuple
:meth:`~st_py.tracker.infofile_writer.InfofileWriter.commit` takes. One
owner for the Commit handler (records_rpc.py) and the commit profile
(bench/commit_profile.py)."""

from __future__ import annotations

from st_py.core import user_meta
from st_py.core.record_format import ignored
from st_py.errors import BadMetadataError, MetadataTooLargeError


def commit_rows(request, f: int, npeers: int, schemas: list[tuple[str, bytes]]) -> tuple[list[tuple], str]:
    """``(rows, "")`` for the records of ``request`` (a CommitRequest) of a
    file of ``f`` copies over ``npeers`` peers, with the request's checked
    ``schemas`` (``(format, Arrow IPC schema)``); or ``([], why)`` for the
    first record that is not valid (the caller answers INVALID_ARGUMENT
    with ``why``): copies not on ``f`` distinct peers of the peerlist,
    pending ranks outside ``1..f-1``, a schema not among the request's, user
    metadata :mod:`st_py.core.user_meta` does not decode.

    A row: ``(name, size, crc32c, peer indexes, pending ranks (a set),
    stored_as, (format, schema) or None, logical_size or None, new_only,
    user metadata or None)``. Pure; thread-safe.

    The records are ``request.records`` then ``request.columns`` (plain
    records as columns, issue 41), read in one pass and checked in bulk
    (protobuf field reads are most of the cost); only a request with a bad
    record takes the record-by-record check, which names the first one."""
    recs = request.records
    if not recs and request.HasField("columns"):  # what the clients send for plain records: no detour
        rows = _column_rows(request.columns, f, npeers, schemas)
        if rows is not None:
            return rows, ""
    cols = [
        (r.name, r.size, r.crc32c, r.peer_idx[:], r.pending_ranks, r.stored_as, r.schema, r.new_only, r.meta)
        for r in recs
    ]
    logical = [r.logical_size if r.HasField("logical_size") else None for r in recs]
    if request.HasField("columns"):
        more, why = _columns(request.columns, f)
        if why:
            return [], why
        cols += more[0]
        logical += more[1]
    peers = [c[3] for c in cols]
    if not _all_valid(cols, peers, f, npeers, len(schemas)):
        why = _first_problem(cols, f, npeers, schemas)
        if why:
            return [], why
    rows = [
        (
            name,
            size,
            crc,
            p,
            tuple(sorted(set(pend))) if pend else (),  # encoded as the sorted ranks (apply/ops.py)
            stored_as,
            # a name readers skip keeps none, whoever sent one: scans rely on it (readplan.py)
            schemas[sch - 1] if sch and not ignored(name) else None,
            lg,
            new_only,
            meta or None,  # the version's user metadata (st_py/core/user_meta.py)
        )
        for (name, size, crc, p, pend, stored_as, sch, new_only, meta), lg in zip(cols, logical)
    ]
    return rows, ""


def _column_rows(c, f: int, npeers: int, schemas: list[tuple[str, bytes]]) -> list[tuple] | None:
    """:func:`commit_rows` of a request whose records are all the columns
    ``c`` (a RecordColumns), built in one pass with the checks of
    :func:`_all_valid` made on the columns in bulk; None if any column or
    record does not pass (the caller takes the general path, which says
    why). Columns carry no pending ranks, versions or user metadata."""
    names = list(c.names)
    n = len(names)
    sizes, crcs, flat = list(c.sizes), list(c.crc32c), list(c.peer_idx)
    sch = list(c.schema)
    lg: list = list(c.logical_sizes) or [None] * n
    if f < 1 or len(sizes) != n or len(crcs) != n or len(flat) != n * f or len(lg) != n or (sch and len(sch) != n):
        return None
    if flat and max(flat) >= npeers:
        return None
    if f == 1:
        peers = [[p] for p in flat]
    else:
        peers = [flat[i : i + f] for i in range(0, n * f, f)]
        if any(len(set(p)) != f for p in peers):
            return None
    if not sch:
        return [
            (nm, sz, cr, p, (), "", None, g, False, None) for nm, sz, cr, p, g in zip(names, sizes, crcs, peers, lg)
        ]
    if max(sch) > len(schemas):
        return None
    return [
        # a name readers skip keeps none, whoever sent one (as commit_rows)
        (nm, sz, cr, p, (), "", schemas[s - 1] if s and not ignored(nm) else None, g, False, None)
        for nm, sz, cr, p, s, g in zip(names, sizes, crcs, peers, sch, lg)
    ]


def _columns(c, f: int) -> tuple[tuple[list[tuple], list], str]:
    """The records of ``c`` (a RecordColumns of a file of ``f`` copies) as
    :func:`commit_rows` reads a RecordCommit, with their logical sizes; or
    why the columns do not describe whole records."""
    names = list(c.names)
    n = len(names)
    sizes, crcs, flat = list(c.sizes), list(c.crc32c), list(c.peer_idx)
    sch = list(c.schema) or [0] * n
    lg: list = list(c.logical_sizes) or [None] * n
    if len(sizes) != n or len(crcs) != n or len(flat) != n * f or len(sch) != n or len(lg) != n:
        return ([], []), (
            f"record columns of {n} names need {n} sizes, CRC-32Cs, schemas (or none) and logical sizes "
            f"(or none) and {n * f} peer indexes ({f} copies each); got {len(sizes)}, {len(crcs)}, "
            f"{len(c.schema)}, {len(c.logical_sizes)} and {len(flat)}"
        )
    peers = [flat[i : i + f] for i in range(0, n * f, f)] if f != 1 else [[p] for p in flat]
    return (
        [(nm, sz, cr, p, (), "", s, False, b"") for nm, sz, cr, p, s in zip(names, sizes, crcs, peers, sch)],
        lg,
    ), ""


def bytes_on_peers(rows: list[tuple]) -> dict[int, int]:
    """``{peer_idx: bytes}`` the peers hold of ``rows`` (:func:`commit_rows`'
    rows: a record's size on each of its copies' peers, pending or not)."""
    out: dict[int, int] = {}
    if rows and all(len(r[3]) == 1 for r in rows):  # one copy each: sum by peer in one pass
        for (p,), size in zip([r[3] for r in rows], [r[1] for r in rows]):
            out[p] = out.get(p, 0) + size
        return out
    for r in rows:
        for p in r[3]:
            out[p] = out.get(p, 0) + r[1]
    return out


def _all_valid(cols: list[tuple], peers: list[list[int]], f: int, npeers: int, nschemas: int) -> bool:
    """Every record of ``cols`` (as :func:`commit_rows` reads them) passes
    every check of :func:`_first_problem`."""
    if not cols:
        return True
    if any(len(p) != f for p in peers):
        return False
    if f > 1 and any(len(set(p)) != f for p in peers):
        return False
    if f and max(max(p) for p in peers) >= npeers:
        return False
    if any(c[4] for c in cols):  # pending copies (async protocols): 1 .. f-1
        if any(0 in c[4] or max(c[4]) >= f for c in cols if c[4]):
            return False
    if any(c[6] > nschemas for c in cols):
        return False
    return not any(c[8] and user_meta_problem(c[0], c[8]) for c in cols)


def _first_problem(cols: list[tuple], f: int, npeers: int, schemas: list[tuple[str, bytes]]) -> str:
    """What is wrong with the first record of ``cols`` (as
    :func:`commit_rows` reads them) that does not pass the checks, in
    record order ("" if none)."""
    for name, _, _, peer_idx, pending_ranks, _, schema, _, meta in cols:
        if len(peer_idx) != f or len(set(peer_idx)) != f or any(p >= npeers for p in peer_idx):
            return (
                f"record {name!r}: needs {f} copies on distinct peers of the peerlist, "
                f"got peer indexes {list(peer_idx)}"
            )
        pending = set(pending_ranks)
        if 0 in pending or any(p >= f for p in pending):
            return (
                f"record {name!r}: pending copy ranks {sorted(pending)} must be among "
                f"1..{f - 1}: copy rank 0 is stored before a record is committed"
            )
        if schema > len(schemas):
            return f"record {name!r}: schema {schema} is not among the request's {len(schemas)} schemas"
        why = user_meta_problem(name, meta)
        if why:
            return why
    return ""


def user_meta_problem(name: str, meta: bytes) -> str:
    """Why ``meta``, a commit's user metadata of ``name``, is not what
    :mod:`st_py.core.user_meta` encodes ("" if it is, or if it is empty):
    a client checks it first; this keeps a bad one out of the infofile."""
    if not meta:
        return ""
    try:
        user_meta.decode(name, meta)
    except (BadMetadataError, MetadataTooLargeError) as e:
        return str(e)
    return ""
