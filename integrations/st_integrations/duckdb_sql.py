"""SQL over infofiles with DuckDB, on the client (paper 3.5: "pushing SQL
processing to the client machines").

DuckDB's sqlite extension comes from the PyPI package ``duckdb-ext-sqlite``
(no download at run time); it must match the DuckDB version exactly. So
does httpfs (``duckdb-ext-httpfs``, DuckDB's ``s3://`` URLs over the S3
endpoint): :func:`load_extension` loads either.

Views made by :func:`connect`:

``records``
    one row per name of every attached file, as every way in sees names
    (docs/composition.md): each committed record and each striped object,
    never the stripes of an object:
    ``file VARCHAR, name VARCHAR, size BIGINT, crc32c BIGINT, commit_seq BIGINT, committed_at DOUBLE,
    kind VARCHAR, stored_size BIGINT, state VARCHAR, reason VARCHAR``
    (``state``: ``available``, ``under_replicated`` or ``lost`` in the copy
    model ``status`` and ``repair`` read, st_py.core.copy_health, with the
    tracker's liveness at connect time; ``reason`` names the copies that are
    not live, NULL when available; ``kind``: ``'record'`` or ``'object'``;
    ``size`` is the user's bytes, before the file's filters, as everywhere
    (st_py.core.infofile.user_size; docs/infofile.md, "Sizes"); ``stored_size``
    one copy as the peers store it (an object: its stripes); ``crc32c`` of
    the stored bytes of a record, of an object's whole plaintext)
``stripes``
    one row per stripe of a committed striped object (docs/striping.md):
    ``file, object, stripe (index), name (the stripe's record), size, crc32c``
``copies``
    one row per stored copy (of records and of stripes):
    ``file, name, copy_rank, peer_idx, peer_id, addr``
``files``
    one row per file: ``file, file_id, replication, copies, records`` (names,
    as ``records``), ``bytes`` (the sum of their ``size``), ``stored_bytes``
    (one copy of each, stripes included, as stored), ``generation`` (the
    generation of the file the views read: its ``as_of`` one, else its
    committed generation when the query runs; provenance, docs/snapshots.md)

With ``as_of`` (docs/snapshots.md: a snapshot name, a generation or a time,
resolved per file), ``records``, ``stripes``, ``copies`` and ``files`` hold
each file as of that generation: the versions it had then (replaced records
at their old version, deleted ones present, later ones absent), read through
:func:`st_py.core.history.records_at_sql` and its siblings (the one
statement of what a generation holds); ``copies`` are the copies a read of
that generation uses (a current version's current holders, a past one's
last holders), ``state`` their state now.

With ``data=True`` (:func:`connect_files`), also:

``records_data``
    the records' contents as rows (Parquet, Arrow IPC, CSV, JSON lines;
    raw records as ``(record, data)``), across every file, read through
    :class:`st_integrations.records_data.RecordsData` by the readers' scan
    path (the copies GET_LOCAL reveals to this host many at a time by one
    native call, checked; pipelined GETs for the others) when the view is
    registered (DuckDB asks for its schema), and kept: a later query reads
    nothing again while no file's generation changes, and only the records
    a commit added or replaced when one does; each column is decoded once,
    by the first query that names it. DuckDB pushes column projection and
    filters into the scan.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from st_py.core.infofile import STRIPE_END, STRIPE_PREFIX

# DuckDB extensions StoreTorrent loads, each shipped in a PyPI package pinned
# beside duckdb (pyproject's duckdb extra), so nothing is downloaded at run time
EXTENSION_PACKAGES = {"sqlite": "duckdb-ext-sqlite", "httpfs": "duckdb-ext-httpfs"}
_EXTENSION_FILES = {"sqlite": "sqlite_scanner"}  # an extension whose file has another name


def extension_dir(extension: str = "sqlite") -> str:
    """The ``extensions`` folder (DuckDB's ``extension_directory``) of the
    ``duckdb_ext`` packages that holds ``extension`` (``"sqlite"``,
    ``"httpfs"``: :data:`EXTENSION_PACKAGES`) for the installed DuckDB.

    Raises
    ------
    RuntimeError
        If the extension's package is missing or does not match the
        installed DuckDB (the message names the package to install).
    """
    import duckdb

    package = EXTENSION_PACKAGES[extension]
    fname = f"{_EXTENSION_FILES.get(extension, extension)}.duckdb_extension"
    spec = importlib.util.find_spec("duckdb_ext")
    roots = [Path(p) / "extensions" for p in (spec.submodule_search_locations or [])] if spec else []
    have: list[str] = []
    for root in roots:
        version = root / f"v{duckdb.__version__}"
        if any(version.glob(f"*/{fname}")):
            return str(root)
        have += sorted(str(p.relative_to(root)) for p in root.glob(f"*/*/{fname}"))
    if not have:
        raise RuntimeError(
            f"DuckDB's {extension} extension is missing: pip install "
            f"{package}=={duckdb.__version__}.* (it must match duckdb {duckdb.__version__})"
        )
    raise RuntimeError(
        f"{package} ships {have}, but duckdb is v{duckdb.__version__}: "
        "install matching versions (pyproject pins duckdb==1.4.4)"
    )


def load_extension(con, extension: str) -> None:
    """Load DuckDB extension ``extension`` (``"sqlite"``, ``"httpfs"``) into
    connection ``con`` from its package (:func:`extension_dir`), never
    downloading one (autoinstall off). ``httpfs`` gives DuckDB ``s3://``
    URLs, for the S3 endpoint (docs/s3.md, "DuckDB").

    Raises
    ------
    RuntimeError
        As :func:`extension_dir`.
    """
    con.execute(f"SET extension_directory = {_quote(extension_dir(extension))}")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute(f"LOAD {extension}")


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _has_objects(path: str) -> bool:
    """Whether the infofile has the ``objects`` table (files made before
    striping do not)."""
    return _has(path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'objects'")


def _has_logical(path: str) -> bool:
    """Whether the infofile's records have ``logical_size`` (files whose
    tracker has not added it yet do not)."""
    return _has(path, "SELECT 1 FROM pragma_table_info('records') WHERE name = 'logical_size'")


def _has(path: str, sql: str) -> bool:
    import sqlite3
    from urllib.parse import quote

    # the path escaped in the URI: a '?' or '#' in a file name would end it
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchone() is not None
    finally:
        conn.close()


def connect(infofiles: dict[str, str] | list[str], database: str = ":memory:", liveness=None, as_of=None):
    """A DuckDB connection with each infofile attached read-only and the
    ``records``, ``copies`` and ``files`` views across all of them.

    Parameters
    ----------
    infofiles : dict {file name: infofile path} or list of infofile paths
        A list uses each path as the file name.
    liveness : st_py.core.copy_health.Liveness, optional
        The tracker's view of the peers, for ``records.state`` (as
        :func:`connect_files` fetches it); None: every peer counted live
        (a record is then ``lost`` or ``under_replicated`` only by its
        pending and quarantined copies).
    as_of : str, int or datetime, optional
        Each file as of a past state (see the module docstring), resolved
        per file (:func:`st_py.core.history.resolve_as_of`); None: the
        current state.

    Returns
    -------
    duckdb.DuckDBPyConnection

    Raises
    ------
    SnapshotNotFoundError, SnapshotExpiredError, InvalidOptionError
        ``as_of`` names no readable state of a file.
    """
    import duckdb

    from st_py.core.history import copies_at_sql, objects_at_sql, records_at_sql

    if not isinstance(infofiles, dict):
        infofiles = {str(p): str(p) for p in infofiles}
    for fname, path in infofiles.items():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"infofile {path} of {fname} does not exist")
    generations = _generations(infofiles, as_of) if as_of is not None else {}
    con = duckdb.connect(database)
    load_extension(con, "sqlite")
    rec, cop, stripes = [], [], []
    fmeta, frec, fobj = [], [], []
    for i, (fname, path) in enumerate(infofiles.items()):
        alias = f"f{i}"
        con.execute(f"ATTACH {_quote(str(path))} AS {alias} (TYPE sqlite, READ_ONLY)")
        q = _quote(fname)
        plain = f"NOT starts_with(name, {_quote(STRIPE_PREFIX)})"
        logical = _has_logical(path)
        user = "coalesce(logical_size, size)" if logical else "size"  # st_py.core.infofile.user_size
        has_objects = _has_objects(path)
        g = generations.get(fname)
        # the tables the views read: the current state, or the versions of generation g
        t_records = f"{alias}.records" if g is None else f"({records_at_sql(g, f'{alias}.', logical, False)})"
        t_objects = f"{alias}.objects" if g is None else f"({objects_at_sql(g, f'{alias}.')})"
        t_copies = f"{alias}.copies" if g is None else f"({copies_at_sql(g, f'{alias}.')})"
        rec.append(
            f"SELECT {q} AS file, name, {user} AS size, crc32c, commit_seq, committed_at, 'record' AS kind, "
            f"size AS stored_size FROM {t_records} WHERE {plain}"
        )
        if has_objects:
            t_stripes = _stripe_records(alias, g, logical)
            rec.append(
                f"SELECT {q} AS file, o.name, o.size, o.crc32c, o.commit_seq, o.committed_at, 'object' AS kind, "
                f"CAST(coalesce(s.b, 0) AS BIGINT) AS stored_size FROM {t_objects} o LEFT JOIN "
                f"(SELECT regexp_extract(name, '^\\.st-stripe/(.*)/[0-9]+$', 1) AS obj, sum(size) AS b "
                f"FROM {t_stripes} GROUP BY obj) s "
                "ON s.obj = o.name WHERE o.name IS NOT NULL"
            )  # a column read: WITHOUT ROWID
            stripes.append(
                f"SELECT {q} AS file, o.name AS object, CAST(regexp_extract(r.name, '/([0-9]+)$', 1) AS INTEGER) "
                f"AS stripe, r.name, r.size, r.crc32c FROM {t_stripes} r JOIN {t_objects} o "
                f"ON o.name = regexp_extract(r.name, '^\\.st-stripe/(.*)/[0-9]+$', 1)"
            )
        cop.append(
            f"SELECT {q} AS file, c.name, c.copy_rank, c.peer_idx, p.peer_id, p.addr "
            f"FROM {t_copies} c JOIN {alias}.peers p USING (peer_idx)"
        )
        # One row per file: three unions of one-row aggregates (meta, records, objects), joined on
        # the file once (cross joins inside every branch made DuckDB's planner superlinear in the
        # number of files); every aggregate reads a column, as DuckDB's sqlite scanner cannot scan
        # a WITHOUT ROWID table (meta, objects) by ROWID
        generation = "max(value) FILTER (WHERE key = 'generation')" if g is None else _quote(str(g))
        fmeta.append(
            f"SELECT {q} AS file, max(value) FILTER (WHERE key = 'file_id') AS file_id, "
            f"max(value) FILTER (WHERE key = 'replication') AS replication, "
            f"max(value) FILTER (WHERE key = 'copies') AS copies, {generation} AS generation FROM {alias}.meta "
            f"WHERE key IN ('file_id', 'replication', 'copies', 'generation')"
        )
        frec.append(
            f"SELECT {q} AS file, count(name) FILTER (WHERE {plain}) AS n, coalesce(sum(size), 0) AS b, "
            f"coalesce(sum({user}) FILTER (WHERE {plain}), 0) AS u FROM {t_records}"
        )
        fobj.append(
            f"SELECT {q} AS file, count(name) AS n, coalesce(sum(size), 0) AS u FROM {t_objects} WHERE name IS NOT NULL"
            if has_objects
            else f"SELECT {q} AS file, 0 AS n, 0 AS u"
        )
    if not rec:
        raise ValueError("connect() needs at least one infofile")
    _union_view(con, "_st_records", rec)
    _health_table(con, infofiles, liveness, generations)
    con.execute(
        "CREATE VIEW records AS SELECT r.*, coalesce(h.state, 'available') AS state, h.reason "
        "FROM _st_records r LEFT JOIN _st_health h USING (file, name)"
    )
    _union_view(con, "copies", cop)
    if stripes:
        _union_view(con, "stripes", stripes)
    else:
        con.execute(
            "CREATE VIEW stripes AS SELECT NULL::VARCHAR AS file, NULL::VARCHAR AS object, "
            "NULL::INTEGER AS stripe, NULL::VARCHAR AS name, NULL::BIGINT AS size, NULL::BIGINT AS crc32c "
            "WHERE false"
        )
    _union_view(con, "_st_files_meta", fmeta)
    _union_view(con, "_st_files_records", frec)
    _union_view(con, "_st_files_objects", fobj)
    con.execute(
        "CREATE VIEW files AS SELECT m.file, CAST(m.file_id AS BIGINT) AS file_id, "
        "CAST(m.replication AS VARCHAR) AS replication, CAST(m.copies AS INTEGER) AS copies, "
        "r.n + o.n AS records, CAST(r.u + o.u AS BIGINT) AS bytes, CAST(r.b AS BIGINT) AS stored_bytes, "
        "CAST(m.generation AS BIGINT) AS generation "
        "FROM _st_files_meta m "
        "JOIN _st_files_records r USING (file) JOIN _st_files_objects o USING (file)"
    )
    return con


def _stripe_records(alias: str, g: int | None, logical: bool) -> str:
    """A DuckDB table expression of the stripe records (``name, size,
    crc32c``) of attached infofile ``alias``, current or of generation
    ``g``: run inside SQLite, so the name index finds the stripes' range.
    (DuckDB's scan of an attached SQLite table reads every row: a second
    pass over every record name only to find no stripe made ``count(*)``
    over 10^6 records 0.25 s instead of 0.13.)"""
    from st_py.core.history import records_at_sql

    source = "records" if g is None else f"({records_at_sql(g, '', logical, False)})"
    # every name with the prefix sorts in [STRIPE_PREFIX, STRIPE_END) (BINARY collation)
    sql = (
        f"SELECT name, size, crc32c FROM {source} WHERE name >= {_quote(STRIPE_PREFIX)} AND name < {_quote(STRIPE_END)}"
    )
    return (
        "(SELECT CAST(name AS VARCHAR) AS name, CAST(size AS BIGINT) AS size, CAST(crc32c AS BIGINT) AS crc32c "
        f"FROM sqlite_query({_quote(alias)}, {_quote(sql)}))"
    )


def _generations(infofiles: dict[str, str], as_of) -> dict[str, int]:
    """``{file: the generation as_of names in it}`` (resolved per file)."""
    from st_py.core.history import resolve_as_of
    from st_py.core.infofile import InfofileReader

    out = {}
    for fname, path in infofiles.items():
        r = InfofileReader(path)
        try:
            out[fname] = resolve_as_of(r, as_of, fname)
        finally:
            r.close()
    return out


def _health_table(con, infofiles: dict[str, str], liveness, generations: dict[str, int]) -> None:
    """``_st_health(file, name, state, reason)``: the records of each file
    (as of its generation in ``generations``, if there) that are not
    available, in the one copy model (st_py.core.copy_health, the model
    ``storetorrent status`` and ``repair`` read), made once at connect time
    (their damaged records only: a healthy file costs a few index probes)."""
    import pyarrow as pa

    from st_py.core.copy_health import file_health
    from st_py.core.history import AsOf
    from st_py.core.infofile import InfofileReader

    rows: dict[str, list] = {"file": [], "name": [], "state": [], "reason": []}
    for fname, path in infofiles.items():
        r = InfofileReader(path)
        try:
            g = generations.get(fname)
            h = file_health(r if g is None else AsOf(r, g, fname), liveness, fname)  # type: ignore[arg-type]
        finally:
            r.close()
        for name, rh in sorted(h.records.items()):
            rows["file"].append(fname)
            rows["name"].append(name)
            rows["state"].append(rh.state.value)
            rows["reason"].append(rh.reason)
    con.register("_st_health", pa.table(rows, schema=pa.schema([(k, pa.string()) for k in rows])))


UNION_FANOUT = 64  # selects per UNION ALL: DuckDB's parser refuses expressions over 1,000 deep


def _union_view(con, name: str, parts: list[str]) -> None:
    """``CREATE VIEW name`` as the UNION ALL of ``parts``, as a tree of
    views of at most ``UNION_FANOUT`` selects each (thousands of files)."""
    level = 0
    while len(parts) > UNION_FANOUT:
        grouped = []
        for i in range(0, len(parts), UNION_FANOUT):
            sub = f"_st_{name}_{level}_{i // UNION_FANOUT}"
            con.execute(f"CREATE VIEW {sub} AS " + " UNION ALL ".join(parts[i : i + UNION_FANOUT]))
            grouped.append(f"SELECT * FROM {sub}")
        parts, level = grouped, level + 1
    con.execute(f"CREATE VIEW {name} AS " + " UNION ALL ".join(parts))


def connect_files(client, names: list[str], data: bool = False, as_of=None):
    """:func:`connect` for StoreTorrent files, directories or namespace
    globs (``"/exp/*"``), resolved by the tracker; with ``data`` also the
    ``records_data`` view of the records' contents.

    ``names`` are resolved as the readers resolve paths
    (:func:`st_integrations.readplan.resolve_targets`): a name that exists
    literally is that file (or record), even if it holds ``*``, ``?`` or
    ``[``; only other names are patterns. The metadata views cover each
    whole file; ``records_data`` holds only the records a path inside a
    file selects (``/exp/run1/part-0.parquet``).

    With ``as_of`` (a snapshot name, a generation or a time, resolved per
    file; docs/snapshots.md) every view, ``records_data`` included, holds
    each file as of that state, and ``files.generation`` says which
    generation of each file was read.

    A connection with ``data`` that the program leaves open is closed at
    interpreter exit (:func:`st_integrations.arrow_dataset.close_at_exit`).

    Raises
    ------
    StFileNotFoundError
        For an unknown file.
    SchemaConflictError
        (``data``) Records whose schemas cannot be unified, naming two.
    SnapshotNotFoundError, SnapshotExpiredError, InvalidOptionError
        ``as_of`` names no readable state of a file.
    """
    from st_py.core.copy_health import Liveness

    from .readplan import resolve_paths

    paths = {}
    for n in resolve_paths(client, names, as_of):  # files, directories, namespace globs
        info = client.tracker.open(n)
        paths[info.name] = info.infofile_path
    con = connect(paths, liveness=Liveness.from_status(client.status()), as_of=as_of)
    if data:
        from .arrow_dataset import close_at_exit
        from .records_data import RecordsData

        # the paths as given: a path inside a file selects its records here too; read when
        # registered, kept for the queries (st_integrations.records_data)
        rd = RecordsData(names, tracker=client.tracker.address, as_of=as_of)
        try:
            rd.current()  # planned and read here, so an error is raised as itself, not wrapped by DuckDB
        except BaseException:
            rd.close()
            con.close()
            raise
        con.register("records_data", rd)
        # A connection left open scans records through Python on Arrow's
        # threads: it is closed at exit, before Python finalizes.
        close_at_exit(con)
    return con


def sql(client, names: list[str], query: str, data: bool | None = None, as_of=None):
    """Run ``query`` over the files ``names`` (as of ``as_of``, if given:
    :func:`connect_files`); returns a pyarrow Table. The ``records_data``
    view is made when ``data`` is true, or (None) when the query names it."""
    if data is None:
        data = "records_data" in query.lower()
    con = connect_files(client, names, data=data, as_of=as_of)
    try:
        return con.execute(query).fetch_arrow_table()
    finally:
        con.close()
