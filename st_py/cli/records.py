"""``storetorrent put``, ``get``, ``ls`` and ``rm``: records and files."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from st_py.cli.app import as_of_opt, as_of_value, cli, data_opt, format_opt, tracker_address, tracker_opt
from st_py.cli.render import console, emit, fail, say
from st_py.core.filters import FILTERS
from st_py.core.placement import POLICIES
from st_py.core.replication import PROTOCOLS
from st_py.errors import RecordExistsError


def inside_file(c, path: str):
    """``(file, record path)`` when ``path`` lies inside a StoreTorrent file
    (``/exp/run1/src/a.parquet``: ``("/exp/run1", "src/a.parquet")``, the
    longest prefix that is a file: :func:`st_py.client.namespace_paths.lookup`,
    as fsspec and the S3 endpoint resolve it), else None."""
    from st_py.client.namespace_paths import lookup

    loc = lookup("/" + path.strip("/"), lambda p: c.tracker.list(p, names_only=True).entries)
    return (loc.name, loc.rest) if loc.kind == "inside" else None


@cli.command()
@tracker_opt
@data_opt
@click.argument("file")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--replication", default="x2", show_default=True, help="class for a new file")
@click.option(
    "--protocol",
    type=click.Choice(PROTOCOLS),
    default="client-sync",
    show_default=True,
    help="how a new file's copies are written (docs/replication.md)",
)
@click.option(
    "--placement",
    type=click.Choice(POLICIES),
    default="random",
    show_default=True,
    help="where a new file's copies go (docs/replication.md)",
)
@click.option(
    "--filter",
    "filters",
    multiple=True,
    type=click.Choice(FILTERS),
    help="client-side filter of a new file, in order (repeat): zstd, aes-256-gcm (the key from "
    "$STORETORRENT_KEY_FILE or $STORETORRENT_ENCRYPTION_KEY; docs/filters.md)",
)
@click.option("--prefix", default="", help="prepended to every record name")
@click.option(
    "--skip-existing",
    is_flag=True,
    help="resume an interrupted put: records already committed with the same bytes are skipped, "
    "ones with other bytes are reported (exit status 1)",
)
@click.option(
    "--replace",
    is_flag=True,
    help="store new versions of records and striped objects that exist, under the file's writer lease "
    '(docs/replication.md, "Versioned records"; docs/striping.md, "Replacing an object")',
)
def put(tracker, data, file, paths, replication, protocol, placement, filters, prefix, skip_existing, replace) -> None:
    """Store local PATHS (files, or directories recursively) as records of FILE.

    Record names are the paths relative to each argument's parent; files over
    64 MiB are stored as striped objects (docs/striping.md). FILE is created
    if it does not exist; on an existing FILE, --replication, --protocol,
    --placement and --filter given otherwise than the file's are an error
    (they are fixed at creation). Exits with status 1 naming every record
    that was not stored."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    from st_py.client.client import Client
    from st_py.client.upload import local_items, upload
    from st_py.core import gc_tuning
    from st_py.core.record_names import path_problem
    from st_py.errors import StFileNotFoundError, StIsADirectoryError

    gc_tuning.tune()  # this process puts a folder's many records: st_py/core/gc_tuning.py

    if path_problem(prefix + "x"):  # the rule for record names (st_py.core.record_names)
        raise click.UsageError(
            f"--prefix {prefix!r} makes record names with an empty, '.' or '..' component (or a leading /): "
            "give a relative prefix such as 'run1/'"
        )
    items = local_items(list(paths))
    total = sum(q.stat().st_size for _, q in items)
    c = Client(tracker_address(tracker, data))
    try:
        f = c.open(file)
    except StFileNotFoundError:
        try:
            f = c.create(
                file, replication, est_size=total, protocol=protocol, placement=placement, filters=list(filters)
            )
        except StIsADirectoryError:  # never suggest deleting it: that removes every file below it
            fail(
                f"{file} is a directory in the namespace, not a file: store into a file below it, "
                f"e.g. storetorrent put {file.rstrip('/')}/NAME {' '.join(paths)}"
            )
    else:
        _check_fixed_options(f, replication=replication, protocol=protocol, placement=placement, filters=list(filters))
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with f, Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as prog:
        task = prog.add_task(f"put {file}", total=total)
        report = upload(
            f,
            items,
            prefix=prefix,
            skip_existing=skip_existing,
            replace=replace,
            on_bytes=lambda n: prog.advance(task, n),
        )
    say(
        f"stored {len(report.stored)} records in {file}"
        + (f"; {len(report.skipped)} already there" if report.skipped else "")
    )
    for name, exc in report.failures:
        hint = (
            "; pass --skip-existing to resume, or --replace to store new versions"
            if isinstance(exc, RecordExistsError) and not skip_existing
            else ""
        )
        say(("failed:", "red"), f" {name}: {exc}{hint}", err=True)
    if report.differ:
        say(
            ("error:", "red"),
            f" {len(report.differ)} records of {file} exist with other bytes (write-once; "
            "--replace stores new versions): " + ", ".join(report.differ),
            err=True,
        )
    if not report.ok:
        fail(f"{len(report.failures) + len(report.differ)} of {len(items)} records of {file} were not stored", status=1)


def _check_fixed_options(f, **given) -> None:
    """Options fixed when a file is created may not be given otherwise for
    an existing one: never silently ignored (a UsageError names each)."""
    ctx = click.get_current_context()
    have = {
        "replication": f.replication,
        "protocol": f.protocol,
        "placement": f.placement,
        "filters": list(f.filter_names),
    }
    wrong = [
        f"--{'filter' if k == 'filters' else k} {','.join(v) if k == 'filters' else v} (the file has "
        f"{','.join(have[k]) or 'none' if k == 'filters' else have[k]})"
        for k, v in given.items()
        if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE and v != have[k]
    ]
    if wrong:
        f.close()
        raise click.UsageError(
            f"{f.name} exists, and these are fixed when a file is created: "
            + "; ".join(wrong)
            + ". Leave them out to add records to it, or put into a new file"
        )


@cli.command()
@tracker_opt
@data_opt
@click.argument("file")
@click.argument("record", default="")
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="write here (default: stdout; an existing folder: into it, as cp; with -r a folder)",
)
@click.option(
    "-r",
    "--records",
    "--recursive",
    "recursive",
    is_flag=True,
    help="the file's records (as ls -r lists them) whose names start with RECORD (default: all) into the folder -o",
)
@as_of_opt
def get(tracker, data, file, record, output, recursive, as_of) -> None:
    """Fetch RECORD of FILE (CRC-checked, from any live copy), or with -r every
    record under the prefix RECORD into a folder (names with / make folders).
    FILE may be a path inside a file, naming the record (or prefix) itself:
    /exp/run1/src/a.parquet is record src/a.parquet of /exp/run1."""
    from st_py.client.client import Client

    c = Client(tracker_address(tracker, data))
    if not record:
        inside = inside_file(c, file)
        if inside is not None:
            file, record = inside
    with c.open(file, as_of=as_of_value(as_of)) as f:
        if not recursive:
            if not record:
                raise click.UsageError("give a RECORD, or -r to fetch many")
            body = f.get(record)
            if output:
                out = Path(output)
                if out.is_dir():  # as cp: into the folder, under the record's last name component
                    out = out / Path(record).name
                out.write_bytes(body)
            else:
                sys.stdout.buffer.write(body)
            return
        if not output:
            raise click.UsageError("-r needs -o FOLDER")
        from st_py.core.record_names import RULE, path_problem
        from st_py.errors import BadNameError

        root = Path(output).resolve()
        failures: dict[str, Exception] = {}
        targets = {}
        for n in f.names(record or None):
            t = (root / n).resolve()
            # A name that is no relative path (committed before the rule for record names) is
            # not written: never outside the folder, never onto another name; the others are.
            why = path_problem(n) or ("" if root in t.parents else f"it resolves outside {root}")
            if why:
                failures[n] = BadNameError(f"not written into the folder: {why} ({RULE}); fetch it alone with -o")
                continue
            targets[n] = t
        names, skipped = list(targets), len(failures)

        def save(name, body, exc):  # a callback receives the error, and the caller checks it
            if exc is not None:
                failures[name] = exc
                return
            targets[name].parent.mkdir(parents=True, exist_ok=True)
            targets[name].write_bytes(body)

        for n in names:  # records, and striped objects (their stripes in parallel, checked whole)
            f.queue_get(n, callback=save)
        f.flush()
        generation = f.generation
    say(f"fetched {len(names) + skipped - len(failures)} records of {file} (generation {generation}) into {root}")
    for name, exc in sorted(failures.items()):
        say(("failed:", "red"), f" {name}: {exc}", err=True)
    if failures:
        fail(f"{len(failures)} of {len(names) + skipped} records of {file} were not fetched", status=1)


@cli.command()
@tracker_opt
@data_opt
@click.argument("path", default="/")
@click.option("-r", "--records", is_flag=True, help="list the records of a file")
@format_opt
@as_of_opt
def ls(tracker, data, path, records, fmt, as_of) -> None:
    """List namespace directory PATH (or the records of a file with -r; a
    PATH inside a file, /exp/run1/src, lists the file's records below it)."""
    from st_py.client.client import Client
    from st_py.client.namespace_paths import lookup

    c = Client(tracker_address(tracker, data))
    under = ""  # a record path inside the file: only the records at or below it
    # PATH itself is listed with sizes as it is resolved (unless its records are wanted), and that
    # List is the one shown: one List of a directory, not a names-only one and then this one
    norm, listed = "/" + path.strip("/"), {}

    def list_entries(p: str) -> list:
        listed[p] = c.ls(p, sizes=p == norm and not records)
        return listed[p]

    loc = lookup(norm, list_entries)
    if loc.kind == "inside":
        (path, under), records = (loc.name, loc.rest), True

    def below(names):
        return [n for n in names if n == under or n.startswith(under + "/")] if under else list(names)

    if as_of is not None:
        if not records:
            raise click.UsageError("--as-of lists the records of a file: add -r")
        with c.open(path, as_of=as_of_value(as_of)) as f:
            if fmt == "table":
                say(f"{path} as of generation {f.generation}", err=True)
                for n in below(f.names()):
                    click.echo(n)
                return
            from st_py.core.history import AsOf

            view = f.infofile()
            assert isinstance(view, AsOf)  # a handle opened as_of reads through its view
            rows = view.entries()
            keep = set(below(row["name"] for row in rows))
            emit([{**row, "generation": f.generation} for row in rows if row["name"] in keep], fmt)
        return
    if records:
        with c.open(path) as f:
            if fmt == "table":
                for n in below(f.names()):
                    click.echo(n)
                return
            from st_py.core.copy_health import Liveness, file_health
            from st_py.core.infofile import stripe_name, user_size

            reader = f.infofile()
            liveness = Liveness.from_status(c.status())
            with reader.read_transaction():  # one snapshot; a record with no copy left is listed too
                names = below(f.names())
                recs = {r[0]: r for r in reader.records_between("")}
                objs = {o.name: o for o in reader.objects()}
                health = file_health(reader, liveness, f.name).records  # the copy model, as status counts
            from st_py.core.record_names import parents

            # a name that is also a folder (names below it: written before that was refused) says so
            folders = {p for n in names if "/" in n for p in parents(n)}
            rows = []
            for n in names:  # records and striped objects alike: one row per name, size = the user's bytes
                r = recs.get(n)
                o = objs.get(n) if r is None else None
                state = health[n].state.value if n in health else "available"
                if r is not None:
                    size = user_size(r[1], r[4])
                    rows.append(
                        {
                            "name": n,
                            "kind": "record+folder" if n in folders else "record",
                            "size": size,
                            "stored_size": r[1],
                            "crc32c": r[2],
                            "state": state,
                        }
                    )
                elif o is not None:
                    stored = sum(recs[k][1] for k in (stripe_name(n, i) for i in range(o.stripes)) if k in recs)
                    rows.append(
                        {"name": n, "kind": "object", "size": o.size, "stored_size": stored, "crc32c": o.crc32c}
                        | {"state": state}
                    )
            emit(rows, fmt)
        return
    from st_py.tracker.access import mode_text

    rows = []
    for e in listed[norm] if loc.kind in ("dir", "file") and norm in listed else c.ls(path):
        rows.append(
            {
                "mode": ("d" if e.is_dir else "-") + mode_text(e.mode),
                "owner": e.owner,
                "group": e.group,
                "name": e.name + ("/" if e.is_dir and fmt == "table" else ""),
                "type": "dir" if e.is_dir else "file",
                "class": e.replication or None,
                "records": None if e.is_dir else e.records,
                "bytes": None if e.is_dir else e.user_bytes,  # the user's bytes (docs/infofile.md, "Sizes")
                "stored_bytes": None if e.is_dir else e.bytes,  # one copy, as stored
            }
        )
    if fmt == "table":
        rows = [{k: v for k, v in r.items() if k not in ("type", "stored_bytes")} for r in rows]
    emit(rows, fmt, sizes=("bytes",), right=("records",))


@cli.command()
@tracker_opt
@data_opt
@click.argument("file")
@click.argument("record", required=False)
@click.option(
    "-r", "--recursive", is_flag=True, help="FILE is a directory: delete every file below it, then the directories"
)
def rm(tracker, data, file, record, recursive) -> None:
    """Delete FILE, or only RECORD of it, or an empty directory (as rmdir);
    with -r a directory and everything below it. FILE may be a path inside a
    file naming one record (/exp/run1/src/a.parquet: record src/a.parquet of
    /exp/run1)."""
    from st_py.client.client import Client
    from st_py.errors import StFileNotFoundError

    c = Client(tracker_address(tracker, data))
    if not record and not recursive:
        inside = inside_file(c, file)
        if inside is not None:
            file, record = inside
    if recursive:
        top = "/" + file.strip("/")
        entries = c.ls(file)
        if len(entries) == 1 and not entries[0].is_dir and entries[0].name == top:
            files, dirs = [top], []  # FILE is a file
        else:
            stack, files, dirs = list(entries), [], [top] if top != "/" else []
            while stack:
                e = stack.pop()
                if e.is_dir:
                    dirs.append(e.name)
                    stack.extend(c.ls(e.name))
                else:
                    files.append(e.name)
        for name in sorted(files):
            n = c.delete(name)
            console.print(f"deleted {name} ({n} records)")
        for d in sorted(dirs, key=lambda d: (-d.count("/"), d)):  # the deepest first
            c.rmdir(d)
            console.print(f"removed directory {d}")
        return
    if record:
        with c.open(file) as f:
            f.delete(record)
        console.print(f"deleted record {record} of {file}")
        return
    try:
        n = c.delete(file)
    except StFileNotFoundError:  # not a file: an empty directory?
        try:
            c.rmdir(file)
        except StFileNotFoundError:
            raise StFileNotFoundError(f"no such file or directory {file}") from None
        console.print(f"removed directory {file}")
        return
    console.print(f"deleted {file} ({n} records)")
