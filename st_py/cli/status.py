"""``storetorrent status``: peers, liveness, space, copies and repair."""

from __future__ import annotations

import dataclasses
import time

import click

from st_py.cli.app import cli, data_opt, format_opt, tracker_address, tracker_opt
from st_py.cli.render import emit, say
from st_py.core import extras
from st_py.core.peer_counts import PeerCounts
from st_py.core.units import duration, human_bytes


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
    from st_py.client.client import Client

    client = Client(tracker_address(tracker, data))
    st = client.status()
    copies = _copies_status(client)
    counts = PeerCounts.of((p.alive, p.drain_state) for p in st.peers)  # as a refused create says
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
            **_peer_copies(p, time.time()),
        }
        for p in st.peers
    ]
    if fmt != "json" and not any(p.copies or p.copies_behind for p in st.peers):  # no peer keeps copies
        for row in rows:
            for k in _PEER_COPY_COLUMNS:
                row.pop(k)
    if fmt == "json":  # the cluster summary too
        import json

        r = st.repair
        click.echo(
            json.dumps(
                {
                    "alive_peers": st.alive_peers,
                    "failed_peers": st.failed_peers,
                    "in_service_peers": counts.in_service,
                    "draining_peers": counts.draining,
                    "retired_peers": counts.retired,
                    "files": st.files,
                    "capacity_bytes": st.capacity_bytes,
                    "used_bytes": st.used_bytes,
                    "retained_bytes": st.retained_bytes,
                    "snapshots": st.snapshots,
                    "free_bytes": st.free_bytes,
                    "filesystems": st.filesystems,
                    "records_short": st.records_short,
                    "files_short": st.files_short,
                    "records_pending": st.records_pending,
                    "records_quarantined": st.records_quarantined,
                    "records_lost": st.records_lost,
                    "records_waiting": st.records_waiting,
                    "versions_short": st.versions_short,
                    "versions_lost": st.versions_lost,
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
                    "metadata_log": _metadata_log(st),
                    "durability": [dataclasses.asdict(d) for d in durability],
                    "metadata_copies": copies.as_dict() if copies is not None else None,
                },
                indent=1,
            )
        )
        return
    emit(
        rows,
        fmt,
        title=f"{counts.summary()}, {st.files} files; "
        f"{_copies_line(st)}; {_repair_line(st.repair)}"
        + (
            f"; {st.snapshots} snapshots retain {human_bytes(st.retained_bytes)} of the "
            f"{human_bytes(st.used_bytes)} used"
            if st.snapshots
            else ""
        ),
        sizes=("used_bytes", "free_bytes", "reserved_bytes"),
        right=("up_s", "restarts", "records", "load", "last_announce_s", *_PEER_COPY_COLUMNS),
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
    if fmt == "table":
        _old_copies_lines(st)
        if copies is not None and (copies.copies or copies.mode != "auto"):  # auto reading the mount: nothing
            say(copies.line())
        _trackers_line(_metadata_log(st))
    if st.file_trackers and fmt == "table":  # csv: one table per output, the peers
        rows = [{**r, "pid": str(r["pid"])} for r in _file_tracker_rows(st)]  # a pid without a comma
        emit(
            rows,
            fmt,
            title=f"{len(st.file_trackers)} per-file trackers (files hash over "
            f"{st.file_trackers[0].shards} shards; shard 0: the tracker itself)",
            right=("shard", "pid", "up_s", "restarts", "commits", "records"),
        )


_PEER_COPY_COLUMNS = ("meta_copies", "meta_behind", "meta_max_lag", "meta_caught_up_s")


def _peer_copies(p, now: float) -> dict:
    """A peer's infofile copies (st-peer --metadata fetch) as it last
    announced them: how many, how many files it serves are below the
    tracker's generation, the largest lag (generations), and seconds since
    they were last all current (None: never)."""
    return {
        "meta_copies": p.copies,
        "meta_behind": p.copies_behind,
        "meta_max_lag": p.copies_max_lag,
        "meta_caught_up_s": round(max(0.0, now - p.copies_caught_up_at), 1) if p.copies_caught_up_at else None,
    }


def _copies_status(client):
    """With ``metadata=fetch`` or ``auto``: this user's infofile copies and
    how far behind the tracker they are (st_py/client/copies_status.py), else
    None (the shared mount)."""
    from st_py.client.copies_status import copies_status

    loc = client.tracker.locator
    return None if loc is None else copies_status(loc.folder, client.tracker, mode=loc.mode)


def _metadata_log(st) -> dict:
    """The serving tracker's metadata log, and with etcd the trackers, etcd
    members and failovers (newest first), as plain data."""
    m = st.metadata_log
    return {
        "backend": m.backend,
        "term": m.term,
        "last_index": m.last_index,
        "applied_index": m.applied_index,
        "trackers": [
            {
                "addr": t.addr,
                "role": t.role,
                "term": t.term,
                "host": t.host,
                "pid": t.pid,
                "applied_index": t.applied_index,
                "up_s": round(t.up_s, 1),
                "fetch_addr": t.fetch_addr,  # a standby's infofile port ("": none)
            }
            for t in m.trackers
        ],
        "members": [
            {
                "endpoint": e.endpoint,
                "healthy": e.healthy,
                "detail": e.detail,
                "raft_leader": e.raft_leader,
                "raft_index": e.raft_index,
            }
            for e in m.members
        ],
        "failovers": [
            {"term": f.term, "leader": f.leader, "at": f.at, "previous": f.previous, "reason": f.reason}
            for f in m.failovers
        ],
    }


def _trackers_line(m: dict) -> None:
    """With replicated trackers: who leads, the standbys, etcd's members and
    the last failover, in two lines (nothing with the local log)."""
    if not m["trackers"] and not m["members"]:
        return
    import time

    def one(t: dict) -> str:
        led = f" (term {t['term']}, applied {t['applied_index']})" if t["role"] == "leader" else ""
        return f"{t['addr']} {t['role']}{led}"

    ts = ", ".join(one(t) for t in m["trackers"])
    healthy = [e for e in m["members"] if e["healthy"]]
    bad = [f"{e['endpoint']} ({e['detail']})" for e in m["members"] if not e["healthy"]]
    say(
        ("trackers:", "green" if len(m["trackers"]) > 1 else "yellow"),
        f" {ts or 'none listed yet'}; etcd members {len(healthy)}/{len(m['members'])} healthy"
        + (f", not answering: {', '.join(bad)}" if bad else ""),
    )
    if m["failovers"]:
        f = m["failovers"][0]
        say(f"last election: term {f['term']}, {duration(max(0.0, time.time() - f['at']))} ago: {f['reason']}")


def _old_copies_lines(st) -> None:
    """A line per live peer out of service that still uses space: after a
    drain what it holds are old copies its scrubber keeps for older readers
    (st_py.maintenance.moves), so its used space falls only later."""
    from st_py.maintenance.moves import RECENT_HOLDER_S

    for p in st.peers:
        if p.alive and p.drain_state and p.used_bytes:
            say(
                (f"peer {p.addr} {p.drain_state}:", "yellow"),
                f" its {human_bytes(p.used_bytes)} used are copies moved off it (and older readers' copies), "
                f"which its scrubber removes at its first scrub --scrub-age after the move (default "
                f"{duration(RECENT_HOLDER_S)})"
                + ("; stop it and remove its data directory when convenient" if p.drain_state == "retired" else ""),
            )


def _durability(st, peer_mtbf_years: float) -> list:
    """The expected durability of x1..x3 on this cluster
    (the durability model st_tools registers, st_py.core.extras), from the repair service's
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
    if not st.records_short and not st.versions_short:
        return "no record short of copies"
    from st_py.core.copy_health import copy_states_text, versions_text

    keys = (
        "records_lost",
        "records_waiting",
        "records_quarantined",
        "records_pending",
        "versions_short",
        "versions_lost",
    )
    counts = {k: getattr(st, k) for k in keys}
    return (
        f"{st.records_short:,} record{'' if st.records_short == 1 else 's'} short of copies in "
        f"{st.files_short:,} file{'' if st.files_short == 1 else 's'}"
        + copy_states_text({**counts, "failed_after_s": st.failed_after_s})
        + versions_text(counts)
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
