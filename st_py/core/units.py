"""Figures for people: byte counts and durations as the CLI and the
tracker's status page show them (one formatter for both)."""

from __future__ import annotations


def human_bytes(n: int | float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units, B to TiB)."""
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
