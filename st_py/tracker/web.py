"""The tracker's status page (docs/operations.md, "Status page"): what the
tracker knows of its peers, files and recent failures, as a dict
(:func:`snapshot`, served as ``/status.json``) and as one server-rendered
HTML page (:func:`render_html`, served at ``/``) that refreshes itself.

Like the Status RPC it shows no file names, only counts, so it needs no
login.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from ..logs import utc_timestamp as rfc3339

if TYPE_CHECKING:
    from .service import TrackerService

REFRESH_S = 5


def snapshot(service: TrackerService, started: float, version: str, addr: str) -> dict[str, Any]:
    """Everything the page shows (run it on the tracker's event loop)."""
    reg = service.registry
    reg.sweep()
    now = time.time()
    held = service.reservations.on_peers()
    peers = []
    for p in sorted(reg.peers.values(), key=lambda p: p.addr):
        alive = reg.alive(p)
        peers.append({
            "addr": p.addr, "peer_id": p.peer_id, "alive": alive,
            "state": ("live" if alive else "failed (reported by a client)" if p.reported_failed else "failed")
            + (f", {p.drain_state}" if p.drain_state else ""), "drain_state": p.drain_state,
            "last_announce_age_s": round(reg.age(p), 3), "announced_since_start": p.announced,
            "records": p.records, "capacity_bytes": p.capacity_bytes, "used_bytes": p.used_bytes,
            "free_bytes": max(0, p.usable_free), "reserved_bytes": held.get(p.peer_id, 0), "load": round(p.load, 3),
            "copies_verified": p.copies_verified, "copies_bad": p.copies_bad,
            "copies_quarantined": p.copies_quarantined,
        })
    live = [p for p in peers if p["alive"]]
    events = [{"time": rfc3339(e.at), "age_s": round(now - e.at, 3), "kind": e.kind, "addr": e.addr,
               "peer_id": e.peer_id, "detail": e.detail, "count": e.count} for e in reversed(reg.events)]
    return {
        "tracker": {"version": version, "addr": addr, "started_at": rfc3339(started),
                    "uptime_s": round(now - started, 3), "announce_interval_s": reg.interval_s,
                    "liveness_window_s": round(reg.window_s, 3)},
        "generated_at": rfc3339(now),
        "files": service.state.file_count(),
        "reservations": len(service.reservations.by_file),
        "totals": {"peers": len(peers), "live_peers": len(live), "failed_peers": len(peers) - len(live),
                   "capacity_bytes": sum(p["capacity_bytes"] for p in live),
                   "used_bytes": sum(p["used_bytes"] for p in live),
                   "free_bytes": sum(p["free_bytes"] for p in live),
                   "reserved_bytes": sum(held.values())},
        "peers": peers,
        "recent_failures": events,
    }


def size(n: int) -> str:
    """Bytes for people: 1.5 GiB."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{int(v)} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{n} B"


def duration(s: float) -> str:
    """Seconds for people: 0.4 s, 12 min, 3 h 5 min, 2 d 4 h."""
    if s < 60:
        return f"{s:.1f} s"
    m = int(s // 60)
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin:0 0 .2em} h2{font-size:1.1em;margin:1.4em 0 .4em}
.meta{color:#555} .meta b{color:#222}
table{border-collapse:collapse;min-width:60%} th,td{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}
th{background:#f3f3f3} td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.failed td{background:#fde8e8} .state-live{color:#17702a;font-weight:600} .state-failed{color:#b3261e;font-weight:600}
.summary span{display:inline-block;margin-right:1.6em} .none{color:#777;font-style:italic}
footer{margin-top:2em;color:#777;font-size:.9em}
"""

KIND_TEXT = {"reported": "reported failed by a client", "failed": "failed: missed announces",
             "returned": "announced again", "draining": "drain started", "retired": "retired (drained)",
             "in-service": "back in service"}


def render_html(s: dict[str, Any]) -> str:
    e = html.escape
    t, tot = s["tracker"], s["totals"]
    rows = []
    for p in s["peers"]:
        state = f'<span class="state-{"live" if p["alive"] else "failed"}">{e(p["state"])}</span>'
        rows.append(
            f'<tr class="{"live" if p["alive"] else "failed"}"><td>{e(p["addr"])}</td>'
            f'<td title="{e(p["peer_id"])}">{e(p["peer_id"][:8])}</td><td>{state}</td>'
            f'<td class="n">{duration(p["last_announce_age_s"])} ago</td><td class="n">{p["records"]:,}</td>'
            f'<td class="n">{size(p["used_bytes"])}</td><td class="n">{size(p["free_bytes"])}</td>'
            f'<td class="n">{size(p["reserved_bytes"])}</td><td class="n">{p["load"] * 100:.0f}%</td>'
            f'<td class="n">{p["copies_verified"]:,}</td><td class="n">{p["copies_bad"]:,}</td>'
            f'<td class="n">{p["copies_quarantined"]:,}</td></tr>')
    peers = ('<table id="peers"><tr><th>address</th><th>peer id</th><th>state</th><th>last announce</th>'
             '<th>records</th><th>used</th><th>free</th><th>reserved</th><th>load</th>'
             '<th title="copies the verifying scrubber checked against their CRC-32C">verified</th>'
             '<th>bad</th><th>quarantined</th></tr>'
             + "".join(rows) + "</table>") if rows else '<p class="none">No peer has announced yet.</p>'
    events = []
    for ev in s["recent_failures"]:
        times = f' (&times;{ev["count"]})' if ev["count"] > 1 else ""
        events.append(
            f'<tr class="{"live" if ev["kind"] == "returned" else "failed"}"><td>{e(ev["time"])}</td>'
            f'<td class="n">{duration(ev["age_s"])} ago</td><td>{e(ev["addr"])}</td>'
            f'<td>{e(KIND_TEXT.get(ev["kind"], ev["kind"]))}{times}</td><td>{e(ev["detail"])}</td></tr>')
    failures = ('<table id="failures"><tr><th>time (UTC)</th><th>when</th><th>peer</th><th>event</th>'
                '<th>detail</th></tr>' + "".join(events) + "</table>") if events else \
        '<p class="none">No failures since the tracker started.</p>'
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
<p class="summary" id="summary"><span><b>{s["files"]:,}</b> files</span>
<span><b>{tot["live_peers"]}</b> live peers</span><span><b>{tot["failed_peers"]}</b> failed</span>
<span>capacity <b>{size(tot["capacity_bytes"])}</b></span><span>used <b>{size(tot["used_bytes"])}</b></span>
<span>free <b>{size(tot["free_bytes"])}</b></span><span>reserved <b>{size(tot["reserved_bytes"])}</b>
({s["reservations"]} file{"" if s["reservations"] == 1 else "s"})</span></p>
<h2>Peers</h2>
{peers}
<h2>Recent failures</h2>
{failures}
<footer>Generated {e(s["generated_at"])}; refreshes every {REFRESH_S} s.
Also as <a href="status.json">status.json</a>; Prometheus metrics at <a href="metrics">/metrics</a>.</footer>
</body></html>
"""
