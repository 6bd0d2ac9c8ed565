"""``storetorrent rebalance``, ``drain``, ``repair`` and ``recover``:
the maintenance commands (st_py.maintenance)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import click
from rich.console import Console

from st_py.cli.app import cli, data_opt, format_opt, tracker_address, tracker_opt
from st_py.cli.render import console, emit, say
from st_py.core.units import duration, human_bytes, when


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
    from st_py.client.client import Client

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

    from st_py.maintenance.rebalance import rebalance_file

    c = Client(tracker_address(tracker, data))
    ok = True
    for name in files:
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task(f"rebalance {name}", total=None)

            def shown(done: int, total: int, bar=bar, task=task) -> None:
                bar.update(task, completed=done, total=total)

            r = rebalance_file(c, name, list(lost) or None, progress=shown)
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
    from st_py.maintenance.spread import spread

    bar, update = _move_progress("spread")
    with bar:
        r = spread(c, files, tolerance, max_mb_per_s, update)
    if fmt == "json":
        import json

        from st_py.maintenance.moves import old_copies

        click.echo(json.dumps({**r.as_dict(), **old_copies(r.bytes_moved)}, indent=1))
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
        _old_copies_note(r.bytes_moved)
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
    from st_py.client.client import Client
    from st_py.maintenance.drain import drain
    from st_py.maintenance.moves import set_in_service

    c = Client(tracker_address(tracker, data))
    if cancel:
        ref = set_in_service(c, peer)
        if fmt in ("json", "csv"):
            out = {"peer": ref.addr, "peer_id": ref.peer_id, "alive": ref.alive, "drain_state": ref.drain_state}
            if fmt == "json":
                import json

                click.echo(json.dumps(out, indent=1))
            else:
                emit([out], fmt)
        else:
            console.print(f"peer {ref.addr} is in service again")
        return
    bar, update = _move_progress(f"drain {peer}")
    with bar:
        r = drain(c, peer, max_mb_per_s, update)
    if fmt == "json":
        import json

        from st_py.maintenance.moves import old_copies

        click.echo(json.dumps({**r.as_dict(), **old_copies(r.bytes_moved)}, indent=1))
    elif fmt == "csv":
        emit([{k: v for k, v in r.as_dict().items() if k not in ("files", "failed_files")}], fmt)
    else:
        say(
            f"peer {r.peer}: {r.copies_moved:,} copies ({human_bytes(r.bytes_moved)}) moved off in "
            f"{r.seconds:.1f} s, {r.passes} passes"
            + (f" ({r.taken_back:,} taken back by peers that still had them)" if r.taken_back else "")
            + "; ",
            (r.drain_state, "green" if r.complete else "red"),
        )
        for fm in r.files:
            if fm.stuck:
                say(
                    (f"{fm.file}: {len(fm.stuck):,} copies no peer in service can take", "red"),
                    ": " + "; ".join(fm.stuck[:5]) + (" ..." if len(fm.stuck) > 5 else ""),
                )
        for name, why in r.failed_files:
            say((f"{name}: not drained", "red"), f": {why}")
        _old_copies_note(r.bytes_moved)
        if not r.complete:
            say(("not drained:", "red"), f" {r.copies_left:,} copies left on {r.peer}; it stays draining")
        if r.to_finish:
            say(("to finish:", "red"), f" {r.to_finish}")
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
    from st_py.client.client import Client
    from st_py.maintenance import repair as rp

    if watch and dry_run:
        raise click.UsageError("--dry-run and --watch do not go together")
    c = Client(tracker_address(tracker, data))
    sizes = ()

    def show(r) -> None:
        if watch and fmt == "table" and r.pending_found == 0 and not r.lost_peers and r.complete:
            return  # a quiet pass
        emit([r.as_dict()], fmt, sizes=sizes, times=("waiting_until",))

    if watch:
        from st_py.core import logs

        logs.setup("INFO", "text")  # pass summaries and warnings on stderr (the journal under systemd)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        rp.watch(c, interval, failed_after, list(files) or None, on_report=show, stop=stop.is_set, poll=poll)
        return
    reports = rp.repair(c, list(files) or None, failed_after, report=not dry_run, dry_run=dry_run)
    emit([r.as_dict() for r in reports], fmt, title="repair", times=("waiting_until",))
    if fmt == "table":
        for r in reports:
            if r.lost:
                say((f"{r.file}: {len(r.lost):,} records lost", "red"), ": no good copy left: " + _some(r.lost))
            if r.waiting:
                say(
                    (f"{r.file}: {len(r.waiting):,} records waiting", "yellow"),
                    f" for failed peers; they count as lost at {when(max(r.waiting_until, time.time()))} "
                    f"(--failed-after {r.failed_after:g} s): " + _some(r.waiting),
                )
    if not all(r.complete_but_waiting if wait_ok else r.complete for r in reports):
        sys.exit(1)


def _old_copies_note(bytes_moved: int) -> None:
    """The line after a drain or spread that moved copies: their old copies
    stay on the old holders for the scrubbers (st_py.maintenance.moves), so
    used space falls only later."""
    from st_py.maintenance.moves import DEFAULT_SCRUB_INTERVAL_S, old_copies

    now = time.time()
    o = old_copies(bytes_moved, now)
    if not o["old_copies_bytes"]:
        return
    say(
        ("old copies:", "yellow"),
        f" {human_bytes(o['old_copies_bytes'])} stay on their old holders for older readers until each "
        f"peer's scrubber removes them at its first scrub --scrub-age after the move (default "
        f"{duration(o['scrub_age_s'])}: from {when(o['old_copies_freed_from'], now)}; a scrub runs every "
        f"--scrub-interval, default {duration(DEFAULT_SCRUB_INTERVAL_S)}); used space falls only then",
    )


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
    type=click.Path(dir_okay=False, exists=True),  # a key named and missing is an error, not "no key"
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
    from st_py.maintenance import recover as rc
    from st_py.wire.tracker_client import TrackerClient

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
        if report.unmirrored_records:
            say(
                ("nothing recovered", "red"),
                f": the live peers hold {report.unmirrored_records} records but list no infofile mirror "
                "to rebuild their files from; peers keep mirrors with the namespace mounted or with "
                "--metadata fetch (docs/operations.md, 'Recovering a lost namespace')",
            )
    if not report.complete:
        sys.exit(1)
