"""The tracker's status page (docs/operations.md, "Status page"): what the
tracker knows of its peers, files and recent failures, as a dict
(:func:`snapshot`, served as ``/status.json``) and as one server-rendered
HTML page (:func:`render_html`, served at ``/``) that refreshes itself.

First the operator's first question: how many records are short of
copies, in how many files, and whether a repair is at work
(:mod:`st_py.tracker.health`; the count is the tracker's cached one, never
made per request).

Like the Status RPC it shows no file names, only counts, so it needs no
login.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from st_py.core.copy_health import copy_states_text, versions_text
from st_py.core.logs import utc_timestamp as rfc3339
from st_py.core.units import duration, human_bytes

from .health import space_totals

if TYPE_CHECKING:
    from .service import TrackerService

REFRESH_S = 5


def snapshot(service: TrackerService, started: float, version: str, addr: str) -> dict[str, Any]:
    """Everything the page shows, as plain data (run it on the tracker's
    event loop). Sizes in bytes, times in seconds; see docs/operations.md,
    "Status page", for the keys."""
    reg = service.registry
    reg.sweep()
    now = time.time()
    held = service.reservations.on_peers()
    fs_label: dict[str, str] = {}  # filesystem id -> "disk 1", ... in address order
    peers = []
    for p in sorted(reg.peers.values(), key=lambda p: (p.name, p.addr)):  # peer-0, peer-1, ... under up
        alive = reg.alive(p)
        if p.fs_id and p.fs_id not in fs_label:
            fs_label[p.fs_id] = f"disk {len(fs_label) + 1}"
        peers.append(
            {
                "name": p.name,
                "addr": p.addr,
                "peer_id": p.peer_id,
                "alive": alive,
                "state": ("live" if alive else "failed (reported by a client)" if p.reported_failed else "failed")
                + (f", {p.drain_state}" if p.drain_state else ""),
                "drain_state": p.drain_state,
                "last_announce_age_s": round(reg.age(p), 3),
                "announced_since_start": p.announced,
                "records": p.records,
                "capacity_bytes": p.capacity_bytes,
                "used_bytes": p.used_bytes,
                "free_bytes": max(0, p.usable_free),
                "reserved_bytes": held.get(p.peer_id, 0),
                "load": round(p.load, 3),
                "copies_verified": p.copies_verified,
                "copies_bad": p.copies_bad,
                "copies_quarantined": p.copies_quarantined,
                "started_at": rfc3339(p.started_at) if p.started_at else None,
                "uptime_s": round(reg.uptime(p), 3) if alive else None,
                "restarts": p.restarts,
                "fs_id": p.fs_id,
                "filesystem": fs_label.get(p.fs_id, ""),
                "domain": "/".join(p.failure_domain),
                "domain_declared": bool(p.domain),
            }
        )
    live = [p for p in peers if p["alive"]]
    counts = reg.counts()  # the one count of peers in service (st_py.core.peer_counts)
    space = space_totals(reg)
    h = service.copy_health
    shared = {f for f in fs_label if sum(1 for p in live if p["fs_id"] == f) > 1}
    events = [
        {
            "time": rfc3339(e.at),
            "age_s": round(now - e.at, 3),
            "kind": e.kind,
            "addr": e.addr,
            "peer_id": e.peer_id,
            "detail": e.detail,
            "count": e.count,
        }
        for e in reversed(reg.events)
    ]
    return {
        "tracker": {
            "version": version,
            "addr": addr,
            "started_at": rfc3339(started),
            "uptime_s": round(now - started, 3),
            "announce_interval_s": reg.interval_s,
            "liveness_window_s": round(reg.window_s, 3),
        },
        "generated_at": rfc3339(now),
        "files": service.state.file_count(),
        "metadata_log": service.oplog.view(),
        "reservations": len(service.reservations.by_file),
        "copies": {
            "records_short": h.records_short,
            "files_short": h.files_short,
            "records_pending": h.records_pending,
            "records_quarantined": h.records_quarantined,
            "retained_bytes": h.retained_bytes,
            "snapshots": h.snapshots,
            "records_lost": h.records_lost,
            "records_waiting": h.records_waiting,
            "versions_short": h.versions_short,
            "versions_lost": h.versions_lost,
            "failed_after_s": service.failed_after_s,
            "counted": h.at > 0,
            "counted_at": rfc3339(h.at) if h.at else None,
            "age_s": round(h.age(now), 3),
            "files_counted": h.files,
            "unreadable_infofiles": h.errors,
            "count_seconds": round(h.seconds, 3),
        },
        "repair": service.repair_progress.as_dict() if service.repair_progress is not None else None,
        "totals": {
            "peers": len(peers),
            "live_peers": len(live),
            "failed_peers": len(peers) - len(live),
            "in_service_peers": counts.in_service,
            "draining_peers": counts.draining,
            "retired_peers": counts.retired,
            "peers_summary": counts.summary(),
            "capacity_bytes": space.capacity_bytes,
            "used_bytes": space.used_bytes,
            "free_bytes": space.free_bytes,
            "filesystems": space.filesystems,
            "shared_filesystems": len(shared),
            "reserved_bytes": sum(held.values()),
            "failure_domains": len({p["domain"] for p in live}),
        },
        "peers": peers,
        "file_trackers": _file_trackers(service),
        "recent_failures": events,
    }


def _file_trackers(service: TrackerService) -> list[dict[str, Any]]:
    """The per-file trackers the master runs (paper 3.5; tracker
    --file-trackers): shard, address, pid, state, uptime, restarts and the
    commits and records the master admitted for their files."""
    if service.file_trackers is None:
        return []
    return [
        {
            "shard": t.shard,
            "shards": t.shards,
            "addr": t.addr,
            "alive": t.alive,
            "pid": t.pid,
            "uptime_s": round(t.uptime_s, 3) if t.alive else None,
            "restarts": t.restarts,
            "commits": t.commits,
            "records": t.records,
        }
        for t in service.file_trackers.status(service.shard_load)
    ]


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin:0 0 .2em} h2{font-size:1.1em;margin:1.4em 0 .4em}
.meta{color:#555} .meta b{color:#222}
table{border-collapse:collapse;min-width:60%} th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}
td{white-space:nowrap} td.wrap{white-space:normal}
th{background:#f3f3f3} td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.failed td{background:#fde8e8} .state-live{color:#17702a;font-weight:600} .state-failed{color:#b3261e;font-weight:600}
.summary span{display:inline-block;margin-right:1.6em} .none{color:#777;font-style:italic}
.health{font-size:1.15em;padding:.45em .8em;border-radius:4px;margin:.8em 0 .3em}
.health.ok{background:#e6f4ea;color:#17702a} .health.short{background:#fde8e8;color:#8c1d18}
.health.unknown{background:#f3f3f3;color:#555} .repair{margin:.2em 0 .8em;color:#333}
footer{margin-top:2em;color:#777;font-size:.9em}
"""

KIND_TEXT = {
    "reported": "reported failed by a client",
    "failed": "failed: missed announces",
    "returned": "announced again",
    "draining": "drain started",
    "retired": "retired (drained)",
    "in-service": "back in service",
    "restarted": "restarted",
}


def _health_html(s: dict[str, Any]) -> str:
    """The first line: records short of copies (or not), then the repair."""
    e = html.escape
    c = s["copies"]
    when = f" <small>(counted {duration(c['age_s'])} ago)</small>" if c["counted"] else ""
    if not c["counted"]:
        line = '<p class="health unknown" id="copies">Counting copies&hellip;</p>'
    elif c["records_short"] or c["versions_short"]:
        pending = copy_states_text(c) + versions_text(c)
        line = (
            f'<p class="health short" id="copies"><b>{c["records_short"]:,}</b> record'
            f"{'' if c['records_short'] == 1 else 's'} short of copies in <b>{c['files_short']:,}</b> "
            f"file{'' if c['files_short'] == 1 else 's'}{pending}{when}</p>"
        )
    else:
        line = f'<p class="health ok" id="copies">Every record has all its copies on live peers{when}</p>'
    r = s["repair"]
    if r is None:
        rep = (
            "No repair service has reported: run <code>storetorrent repair --watch</code> "
            "(deploy/storetorrent-repair.service)"
        )
    else:
        last = f"{r['copies_stored']:,} pending copies stored, {r['copies_restored']:,} copies restored" + (
            f", {r['records_left']:,} records left" if r["records_left"] else ""
        )
        why = f" ({e(r['reason'])})" if r["reason"] else ""
        if r["running"]:
            rep = (
                f"Repair <b>running</b>{why}: file {r['files_done']:,} of {r['files_total']:,}, {last}, "
                f"for {duration(r['pass_seconds'])}"
            )
        else:
            rep = f"Repair idle; last pass{why}: {r['files_total']:,} files, {last}, took {duration(r['pass_seconds'])}"
        rep += f". Reported {duration(r['age_s'])} ago by {e(r['repairer'])}; {r['passes']:,} passes."
    return line + f'\n<p class="repair" id="repair">{rep}</p>'


def _reserved_for(n: int) -> str:
    """What the reserved bytes are held for, or nothing when no file holds any."""
    return f" for {n:,} file{'' if n == 1 else 's'} being written" if n else ""


def _replicas_html(m: dict[str, Any]) -> str:
    """The replicated trackers' section (with etcd): trackers, etcd members,
    elections; empty with the local log."""
    r = m.get("replicas")
    if not r:
        return ""
    e = html.escape
    rows = "".join(
        f'<tr><td>{e(t["addr"])}</td><td class="state-{"live" if t["role"] == "leader" else "draining"}">'
        f'{e(t["role"])}</td><td class="n">{t.get("term", 0) or "&ndash;"}</td><td>{e(t.get("host", ""))}</td>'
        f'<td class="n">{t.get("pid", 0)}</td><td class="n">{t.get("applied_index", 0):,}</td>'
        f'<td class="n">{duration(t.get("up_s", 0.0))}</td><td>{e(t.get("fetch", "")) or "&ndash;"}</td></tr>'
        for t in r["trackers"]
    )
    members = "".join(
        f'<tr><td>{e(x["endpoint"])}</td><td class="state-{"live" if x["healthy"] else "failed"}">'
        f"{'healthy' if x['healthy'] else 'not answering'}</td><td>{'raft leader' if x['raft_leader'] else ''}</td>"
        f'<td class="n">{x["raft_index"]:,}</td><td class="wrap">{e(x["detail"])}</td></tr>'
        for x in r["members"]
    )
    elections = "".join(
        f'<tr><td class="n">{f["term"]}</td><td>{e(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(f["at"])))}</td>'
        f'<td>{e(f["leader"])}</td><td class="wrap">{e(f["reason"])}</td></tr>'
        for f in r["failovers"]
    )
    return (
        f'<h2>Trackers</h2><p class="meta">The metadata log is in {e(m["backend"])}; this tracker leads term '
        f"{m['term']} and applied entry {m['applied_index']:,} of {m['last_index']:,}. Standbys apply the log "
        'when elected.</p><table id="trackers"><tr><th>address</th><th>role</th><th>term</th><th>host</th>'
        "<th>pid</th><th>applied</th><th>up</th>"
        '<th title="a standby&rsquo;s FetchInfofile port (--fetch-port): clients and peers copy infofiles there">'
        f"infofile copies</th></tr>{rows}</table>"
        '<table id="etcd-members"><tr><th>etcd member</th><th>health</th><th></th><th>raft index</th>'
        f"<th>detail</th></tr>{members}</table>"
        '<table id="elections"><tr><th>term</th><th>elected (UTC)</th><th>leader</th><th>why</th></tr>'
        f"{elections}</table>"
    )


def render_html(s: dict[str, Any]) -> str:
    """The status page of :func:`snapshot`'s data: one HTML document, every
    value escaped, refreshed by the browser every ``REFRESH_S`` seconds."""
    e = html.escape
    t, tot = s["tracker"], s["totals"]
    rows = []
    for p in s["peers"]:
        state = f'<span class="state-{"live" if p["alive"] else "failed"}">{e(p["state"])}</span>'
        restarts = f"{p['restarts']:,}" if p["started_at"] or p["restarts"] else "?"
        up = "&ndash;" if p["uptime_s"] is None else duration(p["uptime_s"]) if p["started_at"] else "?"
        fs = f'<td title="{e(p["fs_id"])}">{e(p["filesystem"])}</td>' if p["fs_id"] else "<td>?</td>"
        dom = (
            f'<td class="domain">{e(p["domain"])}</td>'
            if p["domain_declared"]
            else f'<td class="domain" title="no --domain: its host">{e(p["domain"])}</td>'
        )
        rows.append(
            f'<tr class="{"live" if p["alive"] else "failed"}">'
            f'<td class="name" title="peer id {e(p["peer_id"])}">{e(p["name"] or "?")}</td>'
            f'<td>{e(p["addr"])}</td><td class="wrap">{state}</td>'
            f'<td class="n">{up}</td>'
            f'<td class="n restarts">{restarts}</td>'
            f'<td class="n">{duration(p["last_announce_age_s"])} ago</td><td class="n">{p["records"]:,}</td>'
            f'<td class="n">{human_bytes(p["used_bytes"])}</td>'
            f'<td class="n">{human_bytes(p["free_bytes"])}</td>{fs}{dom}'
            f'<td class="n">{human_bytes(p["reserved_bytes"])}</td><td class="n">{p["load"] * 100:.0f}%</td>'
            f'<td class="n">{p["copies_verified"]:,}</td><td class="n">{p["copies_bad"]:,}</td>'
            f'<td class="n">{p["copies_quarantined"]:,}</td></tr>'
        )
    peers = (
        (
            '<table id="peers"><tr><th title="its data directory; its id is in status.json">name</th>'
            "<th>address</th><th>state</th>"
            '<th title="since its process started">up</th><th title="process restarts seen by the tracker">'
            "restarts</th><th>last announce</th><th>records</th><th>used</th><th>free</th>"
            '<th title="the filesystem of its data directory: peers on one disk share its space">disk</th>'
            '<th title="its failure domain (st-peer --domain; else its host): copies of a record go to '
            'distinct domains">domain</th>'
            '<th title="held for files being written (est_size)">reserved</th><th>load</th>'
            '<th title="copies the verifying scrubber checked against their CRC-32C">verified</th>'
            "<th>bad</th><th>quarantined</th></tr>" + "".join(rows) + "</table>"
        )
        if rows
        else '<p class="none">No peer has announced yet.</p>'
    )
    events = []
    for ev in s["recent_failures"]:
        times = f" (&times;{ev['count']})" if ev["count"] > 1 else ""
        events.append(
            f'<tr class="{"live" if ev["kind"] == "returned" else "failed"}"><td>{e(ev["time"])}</td>'
            f'<td class="n">{duration(ev["age_s"])} ago</td><td>{e(ev["addr"])}</td>'
            f'<td>{e(KIND_TEXT.get(ev["kind"], ev["kind"]))}{times}</td><td class="wrap">{e(ev["detail"])}</td></tr>'
        )
    fts = [
        f'<tr class="{"live" if t["alive"] else "failed"}"><td class="n">{t["shard"]}</td><td>{e(t["addr"])}</td>'
        f'<td class="state-{"live" if t["alive"] else "failed"}">{"live" if t["alive"] else "restarting"}</td>'
        f'<td class="n">{t["pid"]}</td>'
        f'<td class="n">{"&ndash;" if t["uptime_s"] is None else duration(t["uptime_s"])}</td>'
        f'<td class="n">{t["restarts"]:,}</td><td class="n">{t["commits"]:,}</td><td class="n">{t["records"]:,}</td>'
        "</tr>"
        for t in s["file_trackers"]
    ]
    file_trackers = (
        (
            f'<h2>Per-file trackers</h2><p class="meta">Files hash over {s["file_trackers"][0]["shards"]} '
            "shards by name; shard 0 is this tracker, each other one a process it runs and restarts. "
            'Clients send a file&rsquo;s commits to its tracker.</p><table id="file-trackers"><tr>'
            "<th>shard</th><th>address</th><th>state</th><th>pid</th><th>up</th><th>restarts</th>"
            '<th title="Commit requests this tracker admitted for its files">commits</th><th>records</th>'
            "</tr>" + "".join(fts) + "</table>"
        )
        if fts
        else ""
    )
    failures = (
        (
            '<table id="failures"><tr><th>time (UTC)</th><th>when</th><th>peer</th><th>event</th>'
            "<th>detail</th></tr>" + "".join(events) + "</table>"
        )
        if events
        else '<p class="none">No failures since the tracker started.</p>'
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<title>StoreTorrent tracker {e(t["addr"])}</title>
<style>{STYLE}</style></head>
<body>
<h1>StoreTorrent tracker</h1>
<p class="meta"><b>{e(t["addr"])}</b> &middot; version {e(t["version"])} &middot; up {duration(t["uptime_s"])}
(since {e(t["started_at"])}) &middot; announces every {t["announce_interval_s"]:g} s, failed after
{t["liveness_window_s"]:g} s without one</p>
{_health_html(s)}
<p class="summary" id="summary"><span><b>{s["files"]:,}</b> files</span>
<span title="in service: live peers neither draining nor retired, those that take new files">\
{e(tot["peers_summary"])}</span>
<span title="each filesystem counted once, however many peers store on it">capacity
<b>{human_bytes(tot["capacity_bytes"])}</b> on {tot["filesystems"]} disk{"" if tot["filesystems"] == 1 else "s"}</span>
<span>used <b>{human_bytes(tot["used_bytes"])}</b></span>
<span id="retained" title="of the used bytes: past versions that snapshots hold (all copies)">retained
<b>{human_bytes(s["copies"]["retained_bytes"])}</b> by {s["copies"]["snapshots"]:,} snapshots</span>
<span>free <b>{human_bytes(tot["free_bytes"])}</b></span>
<span id="domains" title="distinct failure domains of the live peers: a record's copies go to distinct ones">
<b>{tot["failure_domains"]}</b> failure domain{"" if tot["failure_domains"] == 1 else "s"}</span>
<span id="reserved" title="space held on the peers for files being written (est_size at create)">reserved
<b>{human_bytes(tot["reserved_bytes"])}</b>{_reserved_for(s["reservations"])}</span></p>
<h2>Peers</h2>
{peers}
{file_trackers}
{_replicas_html(s["metadata_log"])}
<h2>Recent failures</h2>
{failures}
<footer>Generated {e(s["generated_at"])}; refreshes every {REFRESH_S} s.
Also as <a href="status.json">status.json</a>; Prometheus metrics at <a href="metrics">/metrics</a>.</footer>
</body></html>
"""
