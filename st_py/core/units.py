"""Figures for people: byte counts and durations as the CLI and the
tracker's status page show them (one formatter for both)."""

from __future__ import annotations

import time


def human_bytes(n: int | float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units, B to TiB)."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{int(v)} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{n} B"


def duration(s: float) -> str:
    """Seconds for people: 0.4 s, 12 min, 3 h 5 min, 1 h, 2 d 4 h, 1 d."""
    if s < 60:
        return f"{s:.1f} s"
    m = int(s // 60)
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def when(t: float, now: float | None = None) -> str:
    """A unix time ``t`` (seconds) for people, in local time with how far
    it is from ``now`` (default: the current time): ``"01:23:45 (in 3
    min)"`` today, ``"2026-11-30 01:23:45 (in 1 d 0 h)"`` another day,
    ``"... (12.0 s ago)"`` past."""
    now = time.time() if now is None else now
    lt, ln = time.localtime(t), time.localtime(now)
    clock = time.strftime("%H:%M:%S" if lt[:3] == ln[:3] else "%Y-%m-%d %H:%M:%S", lt)
    d = round(t - now)  # whole seconds: a time rounded to 0.1 s an hour ahead is "in 1 h"
    return f"{clock} (in {duration(d)})" if d >= 0 else f"{clock} ({duration(-d)} ago)"
