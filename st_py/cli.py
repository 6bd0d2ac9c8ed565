"""``storetorrent``: the command line.

storetorrent up        a local cluster (tracker + N peers) until Ctrl-C
storetorrent demo      the main job on real data (st_tools registers it; st_py.extras)
storetorrent put       store local files as records
storetorrent get       fetch a record
storetorrent ls        list the namespace
storetorrent sql       DuckDB SQL over infofiles (st_integrations registers it)
storetorrent status    peers, liveness, space
storetorrent rm        delete a file, a record or an empty directory (-r: a tree)
storetorrent rebalance restore F copies after peers are lost for good;
                       --spread: even the fill after peers are added
storetorrent drain     move everything off a live peer, then retire it
storetorrent chmod     permission bits, group, owner of a file or directory
storetorrent user add  a user with an API key in the tracker's users file
storetorrent recover   rebuild a lost namespace from the peers' infofile mirrors
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import extras
from .errors import RecordExistsError, StoreTorrentError
from .filters import FILTERS
from .placement import POLICIES
from .replication import PROTOCOLS
from .units import human_bytes

# Names are data: record and file names may hold "[", "]" or anything else,
# so nothing user-given is ever read as rich markup or highlighted; colour
# comes from explicit styles (say()). Lines are never wrapped (soft_wrap):
# a long path piped to a file stays one line.
console = Console(markup=False, highlight=False, soft_wrap=True)
DATA_DEFAULT = "st-data"


def tracker_address(tracker: str | None, data: str) -> str:
    """The tracker to use: ``--tracker`` (or $STORETORRENT_TRACKER) if given,
    else the one of the local cluster under ``--data`` (its cluster file)."""
    if tracker:
        return tracker
    from .locate import read_cluster_file

    if os.environ.get("STORETORRENT_TRACKER"):
        return os.environ["STORETORRENT_TRACKER"]
    info = read_cluster_file(data)
    if info:
        for var, path in zip(
            ("STORETORRENT_TLS_CA", "STORETORRENT_TLS_CERT", "STORETORRENT_TLS_KEY"), info.get("tls") or ()
        ):
            if path:
                os.environ.setdefault(var, path)
        return info["tracker"]
    raise click.UsageError(
        "no tracker: pass --tracker HOST:PORT, set STORETORRENT_TRACKER, "
        f"or start a local cluster with `storetorrent up --data {data}`"
    )


FORMATS = ("table", "json", "csv")
format_opt = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people; json (a list of objects) or csv for scripts",
)


def say(*parts: str | tuple[str, str], err: bool = False) -> None:
    """Print one line made of plain strings and ``(text, style)`` pairs;
    no part is read as markup (names are data)."""
    line = Text()
    for p in parts:
        line.append(*(p if isinstance(p, tuple) else (p,)))
    (Console(stderr=True, markup=False, highlight=False) if err else console).print(line, soft_wrap=True)


def _plain(v):
    """A value JSON and CSV can carry: SQL decimals that are whole (DuckDB's
    sum of integers) as ints, other decimals as floats, bytes as hex."""
    import decimal

    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return v


def emit(
    rows: list[dict], fmt: str, title: str | None = None, sizes: tuple[str, ...] = (), right: tuple[str, ...] = ()
) -> None:
    """Print ``rows`` (plain dicts with the same keys) as a table, JSON or
    CSV. ``sizes`` are byte counts: human-readable in a table, exact in
    JSON and CSV."""
    rows = [{k: _plain(v) for k, v in r.items()} for r in rows]
    if fmt == "json":
        import json

        click.echo(json.dumps(rows, indent=1, default=str))
        return
    if fmt == "csv":
        import csv

        if rows:
            w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        return
    if not rows:  # no table, and no empty line either
        if title:
            click.echo(title)
        return
    cols = list(rows[0])
    cells = [
        [
            ""
            if r[c] is None
            else human_bytes(r[c])
            if c in sizes and isinstance(r[c], int)
            else f"{r[c]:,}"
            if isinstance(r[c], int) and not isinstance(r[c], bool)
            else str(r[c])
            for c in cols
        ]
        for r in rows
    ]
    justify = ["right" if c in sizes or c in right else "left" for c in cols]
    if not console.is_terminal:  # piped: plain columns, one line per row, whatever the width
        click.echo(plain_table(cols, cells, justify, title))
        return
    natural = max(len(line) for line in plain_table(cols, cells, justify).splitlines())
    if natural > console.width:  # too wide to read folded: one block per row, a field per line (psql's \x)
        if title:
            console.print(Text(title))
        for i, row in enumerate(cells):
            if len(cells) > 1:
                console.print(Text(f"-[ {i + 1} of {len(cells)} ]-", style="dim"))
            block = Table(box=None, show_header=False, padding=(0, 1, 0, 0))
            block.add_column(style="bold", no_wrap=True)
            block.add_column(overflow="fold")
            for col, v in zip(cols, row):
                block.add_row(Text(col), Text(v))
            console.print(block)
        return
    tab = Table(title=Text(title) if title else None, box=None)
    for col, j in zip(cols, justify):
        tab.add_column(Text(col), justify=j, overflow="fold")  # type: ignore[arg-type]
    for row in cells:  # cells as Text: a name like "run[bold]2" is shown as it is
        tab.add_row(*[Text(v) for v in row])
    console.print(tab)


def plain_table(cols: list[str], cells: list[list[str]], justify: list[str], title: str | None = None) -> str:
    """A table as plain text for pipes and files: a header line, then one
    line per row, columns two spaces apart and as wide as their widest cell
    (never wrapped or cut), no trailing spaces; ``title`` first if given.
    Line breaks and tabs inside a cell are shown as ``\\n`` and ``\\t``."""
    cells = [[v.replace("\n", "\\n").replace("\t", "\\t") for v in row] for row in cells]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if j == "right" else v.ljust(w) for v, w, j in zip(values, widths, justify)
        ).rstrip()

    return "\n".join(([title] if title else []) + [line(cols)] + [line(row) for row in cells])


tracker_opt = click.option("--tracker", envvar="STORETORRENT_TRACKER", help="tracker HOST:PORT")
data_opt = click.option(
    "--data", default=DATA_DEFAULT, show_default=True, help="local cluster folder (to find its tracker)"
)


class _Commands(click.Group):
    """The commands of this module and those other packages register
    (entry-point group ``storetorrent.commands``: ``demo`` from st_tools,
    ``sql`` from st_integrations; st_py.extras), loaded when named."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(extras.names(extras.COMMANDS)))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is None and name in extras.names(extras.COMMANDS):
            cmd = extras.load(extras.COMMANDS, name)  # type: ignore[assignment]
        return cmd


@click.group(cls=_Commands)
@click.version_option(package_name="storetorrent", prog_name="storetorrent")
def cli() -> None:
    """StoreTorrent: distributed storage for datasets of many small records."""


@cli.command()
@click.option("--data", default=DATA_DEFAULT, show_default=True, type=click.Path(file_okay=False))
@click.option("--peers", default=4, show_default=True, help="number of peers")
@click.option("--announce-interval", default=1.0, show_default=True, help="seconds between announces")
@click.option("--tls", is_flag=True, help="serve the tracker over TLS with a local CA made in DATA/tls")
@click.option("--mtls", is_flag=True, help="mutual TLS: clients need a certificate of the local CA")
@click.option(
    "--users",
    "users_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="users file (API keys, groups, quotas); see `storetorrent user add`",
)
@click.option(
    "--port", "tracker_port", type=int, default=0, help="the tracker's port (default: the last run's, else a free one)"
)
@click.option(
    "--metrics-port",
    type=int,
    default=0,
    help="the tracker's status page and metrics port (default: the last run's, else a free one)",
)
@click.option(
    "--repair-interval",
    type=float,
    default=30.0,
    show_default=True,
    help="seconds between full repair passes (pending copies, long-failed peers); a peer returning or "
    "failed --failed-after starts one at once; 0: no repair",
)
@click.option(
    "--failed-after",
    type=float,
    default=600.0,
    show_default=True,
    help="the tracker's --failed-after: a peer failed this long (seconds) is lost, and repair restores its "
    "copies elsewhere; sooner its copies are suspect and their records waiting",
)
@click.option(
    "--file-trackers",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    help="per-file tracker processes the tracker spawns: each file's commits go to the one its name "
    "hashes to (of N+1 with the tracker itself); clients are redirected on open (paper 3.5)",
)
def up(
    data: str,
    peers: int,
    announce_interval: float,
    tls: bool,
    mtls: bool,
    users_file,
    tracker_port: int,
    metrics_port: int,
    repair_interval: float,
    failed_after: float,
    file_trackers: int,
) -> None:
    """Run a local cluster (tracker and PEERS peers under DATA) until Ctrl-C.

    A daemon that dies is restarted on its port with backoff while the others
    keep serving; the tracker (its gRPC and status page ports) and peers come
    back on the same ports after `up` itself is restarted. Capabilities are
    always on (a key is made in DATA/secret.key). docs/deployment.md, "A
    local cluster"."""
    from . import logs
    from .cluster import LocalCluster
    from .supervisor import Supervisor

    logs.setup("INFO", "text")  # the daemons' format (docs/operations.md, "Logs")
    cluster = LocalCluster(
        Path(data),
        n_peers=peers,
        announce_interval=announce_interval,
        die_with_parent=True,
        tls=tls,
        mutual_tls=mtls,
        users_file=Path(users_file).resolve() if users_file else None,
        tracker_port=tracker_port,
        metrics_port=metrics_port,
        keep_layout=True,
        file_trackers=file_trackers,
        tracker_args=["--failed-after", str(failed_after)],
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster.start()
    supervisor = Supervisor(cluster)
    if repair_interval > 0:
        threading.Thread(target=_repair_loop, args=(cluster, repair_interval, stop), name="repair", daemon=True).start()
    # One line per item, never wrapped (console: soft_wrap), no empty lines.
    try:
        console.print(f"tracker  {cluster.tracker_addr}")
        if cluster.tracker is not None and cluster.tracker.metrics_addr:
            console.print(f"status   http://{cluster.tracker.metrics_addr}/   (metrics: /metrics)")
        if file_trackers:
            from .tracker_client import TrackerClient

            t = TrackerClient(cluster.tracker_addr, timeout=5, tls=cluster.client_tls)
            try:
                for ft in t.status().file_trackers:
                    console.print(f"file-tracker-{ft.shard} {ft.addr}   (files hashing to {ft.shard} of {ft.shards})")
            finally:
                t.close()
        for i, a in enumerate(cluster.peer_addrs):
            console.print(f"peer-{i}   {a}")
        console.print(f"namespace {cluster.namespace}\nlogs      {cluster.data_dir / 'logs'}")
        console.print(f"export STORETORRENT_TRACKER={cluster.tracker_addr}   # Ctrl-C stops the cluster")
        ca, cert, key = cluster.client_tls
        if ca:
            console.print(f"export STORETORRENT_TLS_CA={ca}")
        if cert:
            console.print(f"export STORETORRENT_TLS_CERT={cert} STORETORRENT_TLS_KEY={key}")
        while not stop.wait(0.5):
            supervisor.check()
    finally:
        stop.set()
        cluster.stop()
        console.print("cluster stopped")


def _repair_loop(cluster, interval: float, stop: threading.Event) -> None:
    """``storetorrent up``'s healer: the repair service of ``storetorrent
    repair --watch`` (st_py.repair.watch: a pass every ``interval`` seconds,
    and at once when a peer returns or has been failed the tracker's
    ``--failed-after``), reporting its progress to the tracker, until
    ``stop``."""
    import logging

    from . import repair as rp
    from .client import Client

    log = logging.getLogger("storetorrent.repair")

    def show(r) -> None:
        if r.pending_found or r.lost_peers or not r.complete:
            log.info("repair %s", r.as_dict())

    while not stop.is_set():
        try:
            with Client(cluster.tracker_addr, tls=cluster.client_tls) as c:
                rp.watch(
                    c,
                    interval,
                    on_report=show,
                    stop=stop.is_set,
                    poll=min(rp.DEFAULT_POLL_S, cluster.announce_interval),
                )
        except Exception as e:  # the tracker restarting on a new port, ...: start again
            log.warning("repair service stopped (%s); starting it again", e)
            stop.wait(min(interval, 5.0))


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
    help="store new versions of records that exist, under the file's writer lease "
    '(docs/replication.md, "Versioned records")',
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

    from .client import Client
    from .errors import StFileNotFoundError
    from .upload import local_items, upload

    bad = [p for p in (prefix + "x").split("/") if p in ("", ".", "..")]
    if bad:  # names `get -r` could not write back inside its folder, or fsspec could not list
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
        f = c.create(file, replication, est_size=total, protocol=protocol, placement=placement, filters=list(filters))
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
        _fail(
            f"{len(report.failures) + len(report.differ)} of {len(items)} records of {file} were not stored", status=1
        )


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
def get(tracker, data, file, record, output, recursive) -> None:
    """Fetch RECORD of FILE (CRC-checked, from any live copy), or with -r every
    record under the prefix RECORD into a folder (names with / make folders)."""
    from .client import Client

    with Client(tracker_address(tracker, data)).open(file) as f:
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
        root = Path(output).resolve()
        names = f.names(record or None)
        targets = {}
        for n in names:
            t = (root / n).resolve()
            if root not in t.parents:  # a record name must not write outside the folder
                raise click.UsageError(f"record name {n!r} would be written outside {root}; fetch it alone")
            targets[n] = t

        failures: dict[str, Exception] = {}

        def save(name, body, exc):  # a callback receives the error, and the caller checks it
            if exc is not None:
                failures[name] = exc
                return
            targets[name].parent.mkdir(parents=True, exist_ok=True)
            targets[name].write_bytes(body)

        for n in names:  # records, and striped objects (their stripes in parallel, checked whole)
            f.queue_get(n, callback=save)
        f.flush()
    say(f"fetched {len(names) - len(failures)} records of {file} into {root}")
    for name, exc in sorted(failures.items()):
        say(("failed:", "red"), f" {name}: {exc}", err=True)
    if failures:
        _fail(f"{len(failures)} of {len(names)} records of {file} were not fetched", status=1)


@cli.command()
@tracker_opt
@data_opt
@click.argument("path", default="/")
@click.option("-r", "--records", is_flag=True, help="list the records of a file")
@format_opt
def ls(tracker, data, path, records, fmt) -> None:
    """List namespace directory PATH (or the records of a file with -r)."""
    from .client import Client

    c = Client(tracker_address(tracker, data))
    if records:
        with c.open(path) as f:
            if fmt == "table":
                for n in f.names():
                    click.echo(n)
                return
            from .copy_health import Liveness, file_health
            from .infofile import stripe_name, user_size

            reader = f.infofile()
            liveness = Liveness.from_status(c.status())
            with reader.read_transaction():  # one snapshot; a record with no copy left is listed too
                names = f.names()
                recs = {r[0]: r for r in reader.records_between("")}
                objs = {o.name: o for o in reader.objects()}
                health = file_health(reader, liveness, f.name).records  # the copy model, as status counts
            rows = []
            for n in names:  # records and striped objects alike: one row per name, size = the user's bytes
                r = recs.get(n)
                o = objs.get(n) if r is None else None
                state = health[n].state.value if n in health else "available"
                if r is not None:
                    size = user_size(r[1], r[4])
                    rows.append(
                        {"name": n, "kind": "record", "size": size, "stored_size": r[1], "crc32c": r[2], "state": state}
                    )
                elif o is not None:
                    stored = sum(recs[k][1] for k in (stripe_name(n, i) for i in range(o.stripes)) if k in recs)
                    rows.append(
                        {"name": n, "kind": "object", "size": o.size, "stored_size": stored, "crc32c": o.crc32c}
                        | {"state": state}
                    )
            emit(rows, fmt)
        return
    from .tracker.access import mode_text

    rows = []
    for e in c.ls(path):
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
@click.argument("mode")
@click.argument("path")
@click.option("--group", default="", help="new group (one of yours)")
@click.option("--owner", default="", help="new owner (admins only)")
def chmod(tracker, data, mode, path, group, owner) -> None:
    """Set the permission bits (octal MODE, e.g. 640; '-' keeps them) of a
    file or directory PATH, as UNIX does (docs/security.md)."""
    from .client import Client

    try:
        bits = 0 if mode == "-" else int(mode, 8)
    except ValueError:
        raise click.BadParameter(f"{mode!r} is not an octal mode such as 640") from None
    r = Client(tracker_address(tracker, data)).chmod(path, bits, group, owner)
    console.print(f"{path}: {r.mode:o} {r.owner}:{r.group}")


@cli.group()
def user() -> None:
    """Manage the tracker's users file (API keys, groups, quotas)."""


@user.command("add")
@click.argument("name")
@click.option(
    "--users",
    "users_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="the tracker's users file (TOML); created if missing",
)
@click.option("--group", "groups", multiple=True, help="a group (repeat); the first owns new files")
@click.option("--quota-bytes", type=int, default=None, help="stored bytes, all copies")
@click.option("--admin", is_flag=True, help="may do anything")
def user_add(name, users_file, groups, quota_bytes, admin) -> None:
    """Add user NAME with a new API key, printed once (only its hash is kept).
    The tracker picks up the change at its next request."""
    from .tracker.access import add_user

    try:
        key = add_user(Path(users_file), name, list(groups), quota_bytes, admin)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    console.print(f"user {name} added to {users_file}; give them this API key (shown once):")
    click.echo(key)


@cli.command()
@tracker_opt
@data_opt
@format_opt
@click.option(
    "--peer-mtbf-years",
    type=click.FloatRange(min=0.001),
    default=5.0,
    show_default=True,
    help="a peer's mean time between failures, for the durability of each class",
)
def status(tracker, data, fmt, peer_mtbf_years) -> None:
    """Peers (name, liveness or drain state, uptime, restarts, space, failure
    domain), the file count, the records short of copies and the files affected (counted
    by the tracker every few seconds), the repair service's progress, and the
    expected durability of each class (CEFT's Markov model, docs/reliability.md)
    from the cluster's own repair speed."""
    from .client import Client

    st = Client(tracker_address(tracker, data)).status()
    durability = _durability(st, peer_mtbf_years)
    rows = [
        {
            "name": p.name,
            "peer": p.addr,
            "state": _peer_state(p),
            "up_s": round(p.uptime_s, 1) if p.uptime_s else None,
            "restarts": p.restarts,
            "records": p.records,
            "used_bytes": p.used_bytes,
            "free_bytes": p.free_bytes,
            "reserved_bytes": p.reserved_bytes,
            "load": round(p.load, 2),
            "last_announce_s": round(p.last_announce_age_s, 1),
            "domain": p.domain,
        }
        for p in st.peers
    ]
    if fmt == "json":  # the cluster summary too
        import json

        r = st.repair
        click.echo(
            json.dumps(
                {
                    "alive_peers": st.alive_peers,
                    "failed_peers": st.failed_peers,
                    "files": st.files,
                    "capacity_bytes": st.capacity_bytes,
                    "used_bytes": st.used_bytes,
                    "free_bytes": st.free_bytes,
                    "filesystems": st.filesystems,
                    "records_short": st.records_short,
                    "files_short": st.files_short,
                    "records_pending": st.records_pending,
                    "records_quarantined": st.records_quarantined,
                    "records_lost": st.records_lost,
                    "records_waiting": st.records_waiting,
                    "failed_after_s": st.failed_after_s,
                    "counted_s_ago": round(st.short_age_s, 1),
                    "repair": {
                        "repairer": r.repairer,
                        "running": r.running,
                        "reason": r.reason,
                        "files_done": r.files_done,
                        "files_total": r.files_total,
                        "copies_stored": r.copies_stored,
                        "copies_restored": r.copies_restored,
                        "records_left": r.records_left,
                        "pass_seconds": round(r.pass_seconds, 3),
                        "passes": r.passes,
                        "reported_s_ago": round(r.age_s, 1),
                    }
                    if r.repairer
                    else None,
                    "peers": rows,
                    "file_trackers": _file_tracker_rows(st),
                    "durability": [dataclasses.asdict(d) for d in durability],
                },
                indent=1,
            )
        )
        return
    emit(
        rows,
        fmt,
        title=f"{st.alive_peers} alive, {st.failed_peers} failed, {st.files} files; "
        f"{_copies_line(st)}; {_repair_line(st.repair)}",
        sizes=("used_bytes", "free_bytes", "reserved_bytes"),
        right=("up_s", "restarts", "records", "load", "last_announce_s"),
    )
    if durability and fmt == "table":
        d0 = durability[0]
        say(
            f"durability, {st.alive_peers} peers failing once in {peer_mtbf_years:g} years each, a failed peer's "
            f"copies restored in {_hours(d0.repair_hours)} ("
            + (
                "the repair service's measured speed"
                if d0.repair_measured
                else "assumed: no repair pass has moved copies yet"
            )
            + "): "
            + ", ".join(
                f"{d.replication} MTTDL {_years(d.mttdl_years)}, P(loss in a year) {d.p_loss_year:.1e}"
                for d in durability
            )
        )
    if st.file_trackers and fmt == "table":  # csv: one table per output, the peers
        rows = [{**r, "pid": str(r["pid"])} for r in _file_tracker_rows(st)]  # a pid without a comma
        emit(
            rows,
            fmt,
            title=f"{len(st.file_trackers)} per-file trackers (files hash over "
            f"{st.file_trackers[0].shards} shards; shard 0: the tracker itself)",
            right=("shard", "pid", "up_s", "restarts", "commits", "records"),
        )


def _durability(st, peer_mtbf_years: float) -> list:
    """The expected durability of x1..x3 on this cluster
    (the durability model st_tools registers, st_py.extras), from the repair service's
    last pass that moved copies; [] without live peers."""
    cluster_durability = extras.load(extras.DURABILITY, "cluster")
    live = [p for p in st.peers if p.alive]
    if not live or cluster_durability is None:  # no live peer, or no durability model installed (st_tools)
        return []
    r = st.repair
    moved = r.copies_restored + r.copies_stored
    rate = moved / r.pass_seconds if r.repairer and moved and r.pass_seconds > 0 else None
    return cluster_durability(len(live), sum(p.records for p in live), rate, peer_mtbf_years)


def _hours(h: float) -> str:
    return f"{h * 3600:.0f} s" if h < 1 / 60 else f"{h * 60:.1f} min" if h < 1 else f"{h:.1f} h"


def _years(y: float) -> str:
    return f"{y * 365.25:.0f} days" if y < 1 else f"{y:,.0f} years" if y < 1e6 else f"{y:.1e} years"


def _file_tracker_rows(st) -> list[dict]:
    """The per-file trackers of a StatusReply as plain rows (paper 3.5)."""
    return [
        {
            "shard": t.shard,
            "addr": t.addr,
            "state": "alive" if t.alive else "restarting",
            "pid": t.pid,
            "up_s": round(t.uptime_s, 1) if t.alive else None,
            "restarts": t.restarts,
            "commits": t.commits,
            "records": t.records,
        }
        for t in st.file_trackers
    ]


def _copies_line(st) -> str:
    """``12 records short of copies in 1 file`` (the tracker's count)."""
    if st.short_age_s < 0:
        return "copies not counted yet"
    if not st.records_short:
        return "no record short of copies"
    from .copy_health import copy_states_text

    counts = {k: getattr(st, k) for k in ("records_lost", "records_waiting", "records_quarantined", "records_pending")}
    return (
        f"{st.records_short:,} record{'' if st.records_short == 1 else 's'} short of copies in "
        f"{st.files_short:,} file{'' if st.files_short == 1 else 's'}"
        + copy_states_text({**counts, "failed_after_s": st.failed_after_s})
    )


def _repair_line(r) -> str:
    """What the repair service last reported, in a few words."""
    if not r.repairer:
        return "no repair service (storetorrent repair --watch)"
    if r.running:
        return (
            f"repair running ({r.reason}): file {r.files_done:,} of {r.files_total:,}, "
            f"{r.copies_stored + r.copies_restored:,} copies written"
        )
    return f"repair idle, reported {r.age_s:.0f} s ago"


def _peer_state(p) -> str:
    """``alive`` / ``failed``, or the drain state of a peer out of service:
    ``draining`` (``draining, failed``), ``retired``."""
    live = "alive" if p.alive else "failed"
    if p.drain_state == "retired":
        return "retired"
    return f"draining, {live}" if p.drain_state == "draining" and not p.alive else p.drain_state or live


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
    with -r a directory and everything below it."""
    from .client import Client
    from .errors import StFileNotFoundError

    c = Client(tracker_address(tracker, data))
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


@cli.command()
@tracker_opt
@data_opt
@click.argument("files", nargs=-1)
@click.option(
    "--lost",
    multiple=True,
    metavar="HOST:PORT",
    help="a peer lost for good (repeat); default: every peer that is failed or silent",
)
@click.option(
    "--spread",
    is_flag=True,
    help="instead: move copies onto the peers with the most room (new peers first) until every peer's "
    "fill is within --tolerance of the mean, online",
)
@click.option("--all", "all_files", is_flag=True, help="with --spread: every file of the namespace")
@click.option(
    "--tolerance",
    type=float,
    default=0.1,
    show_default=True,
    help="with --spread: how far a peer's fill may stay from the mean, as a fraction of it",
)
@click.option(
    "--max-mb-per-s",
    type=float,
    default=None,
    help="with --spread: cap on the copies written, in MB/s (10^6 bytes); the peers' --max-write-mb-per-s hold as well",
)
@format_opt
def rebalance(tracker, data, files, lost, spread, all_files, tolerance, max_mb_per_s, fmt) -> None:
    """Restore F copies of every record of FILES (paper 4.4), or with
    --spread even out the peers' fill (paper 5).

    Without --spread: reads each record with a copy on a lost peer from a live
    holder and writes that copy to another live peer; live holders keep
    theirs. Exits with status 1 if records stay unavailable or
    under-replicated.

    With --spread (FILES, or --all): after peers are added, moves copies from
    the fullest peers to the emptiest, each file in proportion to the peers'
    space, while readers go on: every record is read exactly once by GET and
    GET_LOCAL throughout. A peer's fill is the bytes of the files' committed
    copies it holds over its space (used + free). The old copies are left to
    the old holders' scrubbers, which keep them --scrub-age after the move
    for readers planned before it. Exits with status 1 if the fill is not
    even within the tolerance or moves were left out (docs/operations.md,
    "Growing and draining the cluster").
    """
    from .client import Client

    ctx = click.get_current_context()
    given = {
        k
        for k in ("tolerance", "max_mb_per_s", "fmt")
        if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE
    }
    if spread:
        if lost:
            raise click.UsageError(
                "--lost restores lost peers' copies, --spread moves copies between live peers: give one of them"
            )
        if bool(files) == all_files:
            raise click.UsageError("--spread needs FILES or --all (not both)")
        _spread(Client(tracker_address(tracker, data)), list(files) if files else None, tolerance, max_mb_per_s, fmt)
        return
    if all_files or given:
        raise click.UsageError("--all, --tolerance, --max-mb-per-s and --format go with --spread")
    if not files:
        raise click.UsageError("give the FILES to rebalance (or --spread --all)")
    from rich.progress import Progress

    c = Client(tracker_address(tracker, data))
    ok = True
    for name in files:
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task(f"rebalance {name}", total=None)
            r = c.rebalance(
                name,
                list(lost) or None,
                progress=lambda done, total, task=task: bar.update(task, completed=done, total=total),
            )
        console.print(
            f"{name}: lost peers {', '.join(r.lost) or 'none'}; {r.records_affected:,} records "
            f"affected, {r.copies_moved:,} copies moved in {r.seconds:.1f} s"
            + (f"; peerlist grew by {', '.join(r.peers_added)}" if r.peers_added else "")
        )
        for what, names in (
            ("unavailable (every copy lost)", r.unavailable),
            ("under-replicated (no live peer could take a copy)", r.under_replicated),
            ("in conflict", r.conflicts),
        ):
            if names:
                ok = False
                say(
                    (f"{len(names):,} records {what}", "red"),
                    ": " + ", ".join(map(str, names[:5])) + (" ..." if len(names) > 5 else ""),
                )
        if r.shared_domain:  # restored, but not as far apart as the class wants (docs/replication.md)
            say(
                (f"{len(r.shared_domain):,} records", "yellow"),
                " restored with copies sharing a failure domain "
                "(no live peer in another domain could take them): "
                + ", ".join(map(str, r.shared_domain[:5]))
                + (" ..." if len(r.shared_domain) > 5 else ""),
            )
    if not ok:
        sys.exit(1)


def _move_progress(label: str):
    """A transient progress bar and its callback(file, moved, planned)."""
    from rich.progress import Progress

    err = Console(stderr=True, markup=False, highlight=False)
    bar = Progress(console=err, transient=True, disable=not err.is_terminal)  # no bar, no empty line in a pipe
    task = bar.add_task(label, total=None)

    def update(file: str, done: int, total: int) -> None:
        bar.update(task, description=f"{label} {file}", completed=done, total=total)

    return bar, update


def _spread(c, files, tolerance, max_mb_per_s, fmt) -> None:
    bar, update = _move_progress("spread")
    with bar:
        r = c.spread(files, tolerance, max_mb_per_s, update)
    if fmt == "json":
        import json

        click.echo(json.dumps(r.as_dict(), indent=1))
    else:
        mean = r.mean_fill or 1.0
        emit(
            [
                {
                    "peer": p.addr,
                    "space_bytes": p.space_bytes,
                    "bytes_before": p.bytes_before,
                    "bytes_after": p.bytes_after,
                    "vs_mean_before": round(p.fill_before / mean, 3),
                    "vs_mean_after": round(p.fill_after / mean, 3),
                }
                for p in r.peers
            ],
            fmt,
            title=f"spread: {r.copies_moved:,} copies ({human_bytes(r.bytes_moved)}) moved in {r.seconds:.1f} s; "
            f"largest distance from the mean fill {r.deviation_before:.1%} -> {r.deviation:.1%} "
            f"(tolerance {r.tolerance:.0%})",
            sizes=("space_bytes", "bytes_before", "bytes_after"),
            right=("vs_mean_before", "vs_mean_after"),
        )
        for fm in r.files:
            for what, items in (("left out", fm.skipped), ("refused", fm.conflicts)):
                if items:
                    say(
                        (f"{fm.file}: {len(items):,} moves {what}", "red"),
                        ": " + "; ".join(items[:3]) + (" ..." if len(items) > 3 else ""),
                    )
        if not r.even:
            say(
                ("not even:", "red"),
                f" a peer's fill is {r.deviation:.1%} from the mean (tolerance "
                f"{r.tolerance:.0%}): records too large or too few to split finely, or too few peers in service",
            )
    if not r.complete:
        sys.exit(1)


@cli.command()
@tracker_opt
@data_opt
@format_opt
@click.argument("peer")
@click.option(
    "--max-mb-per-s",
    type=float,
    default=None,
    help="cap on the copies written, in MB/s (10^6 bytes); the peers' --max-write-mb-per-s hold as well",
)
@click.option(
    "--cancel",
    is_flag=True,
    help="put PEER back in service instead (new files may use it again); copies moved stay moved",
)
def drain(tracker, data, fmt, peer, max_mb_per_s, cancel) -> None:
    """Move every copy off live PEER while it serves, then retire it.

    PEER is HOST:PORT, a peer id, or a host only one peer runs on. The
    tracker first marks it draining: no new file is scheduled on it and no
    peerlist grows by it. Every file's copies on it are then moved to the
    peers in service (its x1 records read from PEER itself, so every record
    stays readable), in passes until none is left; then it is marked retired
    (`storetorrent status` shows it; kept across tracker restarts) and may
    be stopped and its data directory removed. Exits with status 1 if copies
    are left on it (it stays draining: add peers, or run drain again). For a
    dead peer use `storetorrent rebalance --lost` (docs/operations.md,
    "Growing and draining the cluster").
    """
    from .client import Client
    from .spread import set_in_service

    c = Client(tracker_address(tracker, data))
    if cancel:
        ref = set_in_service(c, peer)
        console.print(f"peer {ref.addr} is in service again")
        return
    bar, update = _move_progress(f"drain {peer}")
    with bar:
        r = c.drain(peer, max_mb_per_s, update)
    if fmt == "json":
        import json

        click.echo(json.dumps(r.as_dict(), indent=1))
    elif fmt == "csv":
        emit([{k: v for k, v in r.as_dict().items() if k not in ("files", "failed_files")}], fmt)
    else:
        say(
            f"peer {r.peer}: {r.copies_moved:,} copies ({human_bytes(r.bytes_moved)}) moved off in "
            f"{r.seconds:.1f} s, {r.passes} passes; ",
            (r.drain_state, "green" if r.complete else "red"),
        )
        for fm in r.files:
            if fm.stuck:
                say(
                    (f"{fm.file}: {len(fm.stuck):,} records no peer in service can take", "red"),
                    ": " + ", ".join(fm.stuck[:5]) + (" ..." if len(fm.stuck) > 5 else ""),
                )
        for name, why in r.failed_files:
            say((f"{name}: not drained", "red"), f": {why}")
        if not r.complete:
            say(("not drained:", "red"), f" {r.copies_left:,} copies left on {r.peer}; it stays draining")
    if not r.complete:
        sys.exit(1)


@cli.command()
@tracker_opt
@data_opt
@format_opt
@click.argument("files", nargs=-1)
@click.option(
    "--watch",
    is_flag=True,
    help="the repair service: a pass every --interval seconds, and at once when a peer returns or has "
    "been failed --failed-after, until interrupted (SIGINT, SIGTERM)",
)
@click.option("--interval", type=float, default=10.0, show_default=True, help="seconds between full passes (--watch)")
@click.option(
    "--poll",
    type=float,
    default=1.0,
    show_default=True,
    help="seconds between looks at the tracker's status for returning or lost peers (--watch)",
)
@click.option(
    "--failed-after",
    type=float,
    default=None,
    help="seconds a peer must have been failed before its copies are restored elsewhere "
    "(default: the tracker's --failed-after)",
)
@click.option(
    "--wait-ok",
    is_flag=True,
    help="exit 0 when the only records short of copies are waiting for peers failed less than --failed-after",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="change nothing: report what a pass would find (copies pending and quarantined, lost peers, "
    "lost and waiting records); the exit status as a pass's",
)
def repair(tracker, data, fmt, files, watch, interval, poll, failed_after, wait_ok, dry_run) -> None:
    """Bring every record of FILES (default: all files) back to F stored copies.

    Stores the copies async protocols left pending and good copies in place
    of quarantined ones, on their holder if it is live (a returning peer
    catches up) or on another peer, and restores the copies of peers failed
    longer than --failed-after (docs/replication.md, "Repair"). Reports what
    is left in the copy model that `storetorrent status` counts with
    (docs/reliability.md, "Copy states"): records lost (no good copy left)
    and records waiting for failed peers (until they count as lost). Without
    --watch, exits with status 1 if a file is not complete (with --wait-ok,
    records waiting for failed peers do not count).
    With --watch it is the cluster's repair service (a systemd unit:
    deploy/storetorrent-repair.service); it reports its progress to the
    tracker (`storetorrent status`, the status page) and logs each pass that
    did something.
    """
    from . import repair as rp
    from .client import Client

    if watch and dry_run:
        raise click.UsageError("--dry-run and --watch do not go together")
    c = Client(tracker_address(tracker, data))
    sizes = ()

    def show(r) -> None:
        if watch and fmt == "table" and r.pending_found == 0 and not r.lost_peers and r.complete:
            return  # a quiet pass
        emit([r.as_dict()], fmt, sizes=sizes)

    if watch:
        from . import logs

        logs.setup("INFO", "text")  # pass summaries and warnings on stderr (the journal under systemd)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        rp.watch(c, interval, failed_after, list(files) or None, on_report=show, stop=stop.is_set, poll=poll)
        return
    reports = rp.repair(c, list(files) or None, failed_after, report=not dry_run, dry_run=dry_run)
    emit([r.as_dict() for r in reports], fmt, title="repair")
    if fmt == "table":
        for r in reports:
            if r.lost:
                say((f"{r.file}: {len(r.lost):,} records lost", "red"), ": no good copy left: " + _some(r.lost))
            if r.waiting:
                left = max(0.0, r.waiting_until - time.time())
                say(
                    (f"{r.file}: {len(r.waiting):,} records waiting", "yellow"),
                    f" for failed peers; they count as lost in {left:.0f} s (--failed-after {r.failed_after:g}): "
                    + _some(r.waiting),
                )
    if not all(r.complete_but_waiting if wait_ok else r.complete for r in reports):
        sys.exit(1)


def _some(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (" ..." if len(names) > n else "")


@cli.command()
@tracker_opt
@data_opt
@format_opt
@click.option(
    "--from-peers",
    is_flag=True,
    required=True,
    help="rebuild every infofile from the live peers' mirrors (the only source so far)",
)
@click.option("--dry-run", is_flag=True, help="fetch and check the mirrors and report; restore nothing")
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="STORETORRENT_CAPABILITY_KEY_FILE",
    help="the cluster's capability key, for peers that check capabilities [default: DATA/secret.key if it exists]",
)
def recover(tracker, data, fmt, from_peers, dry_run, key_file) -> None:
    """Rebuild a lost namespace from the peers' infofile mirrors.

    Start the tracker on the empty namespace and let the peers announce
    first. Each file comes back as its newest mirror was (at most
    --mirror-interval seconds of commits older than the lost infofile);
    records never committed do not come back. Reports, per file, whether it
    was restored, was present already, or conflicts with what holds its
    name (nothing is overwritten), and its records whose copies are on peers
    that are not alive. Exits with status 1 unless every file is back and
    every record has a live copy.
    """
    from . import recover as rc
    from .tracker_client import TrackerClient

    if key_file is None and (Path(data) / "secret.key").is_file():
        key_file = str(Path(data) / "secret.key")
    report = rc.recover_from_peers(
        TrackerClient(tracker_address(tracker, data)), rc.key_from(key_file), dry_run=dry_run
    )
    if fmt == "json":
        import json

        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        rows = [
            {
                "file": f.name,
                "file_id": f"{f.file_id:016x}",
                "outcome": f.outcome,
                "generation": f.generation,
                "records": f.records,
                "missing_copies": f.missing_copies,
                "unreadable": f.unreadable,
                "detail": f.detail,
            }
            for f in report.files
        ]
        emit(
            rows,
            fmt,
            title=f"recover --from-peers{' (dry run)' if dry_run else ''}: {len(report.files)} files "
            f"from {len(report.peers_alive)} live peers",
            right=("generation", "records"),
        )
        for peer, why in report.peers_failed:
            say((f"peer {peer}", "red"), f": mirrors not listed: {why}")
    if not report.complete:
        sys.exit(1)


def main() -> None:
    """The ``storetorrent`` entry point: runs :func:`cli`, printing a library
    error, a local OSError or a DuckDB SQL error as one line (exit status 2)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integrations"))
    try:
        cli(standalone_mode=True)
    except StoreTorrentError as e:
        _fail(str(e))
    except OSError as e:  # a local path: -o into a missing folder, a file not readable ...
        _fail(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    except Exception as e:
        duckdb = sys.modules.get("duckdb")
        if duckdb is not None and isinstance(e, duckdb.Error):  # a SQL mistake: DuckDB says what and where
            _fail(f"SQL: {e}")
        raise


def _fail(message: str, status: int = 2) -> None:
    """A user's error: one line on stderr, exit ``status``, no traceback."""
    say(("error:", "red"), f" {message}", err=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
