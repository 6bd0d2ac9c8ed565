"""What a run cost each process and the disk, from /proc (no tracing, no
overhead): CPU seconds of the client (this process), the tracker and the
peers from ``/proc/<pid>/stat``, their read/write system calls from
``/proc/<pid>/io``, and the disk's requests from ``/proc/diskstats``
(docs/benchmarks.md, "Where a write's time goes").

Usage::

    s = Sampler(cluster, folder)
    ...  # the work
    cost = s.stop()  # a Cost
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), 0 if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15 of proc(5))


def io_counts(pid: int) -> dict[str, int]:
    """``/proc/<pid>/io`` as a dict (syscr, syscw, read_bytes, write_bytes...); {} if unreadable."""
    try:
        lines = Path(f"/proc/{pid}/io").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split(": ") for line in lines)}


def disk_of(folder: Path) -> str | None:
    """The /proc/diskstats name of the block device holding ``folder`` (None if not found)."""
    dev = os.stat(folder).st_dev
    want = (os.major(dev), os.minor(dev))
    for line in Path("/proc/diskstats").read_text().splitlines():
        p = line.split()
        if (int(p[0]), int(p[1])) == want:
            return p[2]
    return None


def disk_counts(name: str | None) -> dict[str, float]:
    """Requests and sectors of device ``name`` so far (proc's diskstats fields)."""
    if name is None:
        return {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        p = line.split()
        if p[2] == name:
            v = [int(x) for x in p[3:]]
            out = {"reads": v[0], "read_mb": v[2] / 2048, "writes": v[4], "written_mb": v[6] / 2048}
            if len(v) >= 15:
                out |= {"discards": v[11], "discarded_mb": v[13] / 2048}
            return out
    return {}


@dataclass
class Cost:
    """What one run cost: ``wall`` seconds; ``cpu`` seconds by role
    ("client", "tracker", "peers", and "s3" with an S3 endpoint); ``peer_syscalls`` the peers' read and
    write system calls; ``disk`` the device's requests and MB (deltas)."""

    wall: float
    cpu: dict[str, float] = field(default_factory=dict)
    peer_syscalls: int = 0
    disk: dict[str, float] = field(default_factory=dict)
    each_peer: list[float] = field(default_factory=list)  # CPU seconds of each peer, in the cluster's order

    def per_record_us(self, records: int) -> dict[str, float]:
        """CPU microseconds per record by role, and wall microseconds."""
        out = {k: v * 1e6 / records for k, v in self.cpu.items()}
        out["wall"] = self.wall * 1e6 / records
        return out

    def text(self, records: int) -> str:
        us = self.per_record_us(records)
        parts = [f"{k} {v:.0f}" for k, v in us.items()]
        disk = ", ".join(f"{k} {v:,.0f}" for k, v in self.disk.items() if v)
        return f"us/record: {', '.join(parts)}; peer read/write syscalls {self.peer_syscalls:,}; disk: {disk or 'idle'}"


class Sampler:
    """Samples the cluster's processes and the disk under ``folder`` at
    creation; :meth:`stop` returns the :class:`Cost` since then. Not
    thread-safe (one run at a time)."""

    def __init__(self, cluster, folder: Path):
        self.pids = {
            "client": [os.getpid()],
            "tracker": [cluster.tracker.pid] if cluster.tracker is not None else [],
            "peers": [p.pid for p in cluster.peers if p is not None],
        }
        if getattr(cluster, "s3_daemon", None) is not None:  # the S3 endpoint (bench/s3.py)
            self.pids["s3"] = [cluster.s3_daemon.pid]
        self.disk = disk_of(folder)
        self._start = self._sample()
        self._t = time.perf_counter()

    def _sample(self) -> tuple[dict[str, float], int, dict[str, float], list[float]]:
        each = [cpu_seconds(p) for p in self.pids["peers"]]
        cpu = {role: sum(each) if role == "peers" else sum(map(cpu_seconds, pids)) for role, pids in self.pids.items()}
        calls = 0
        for p in self.pids["peers"]:
            io = io_counts(p)
            calls += io.get("syscr", 0) + io.get("syscw", 0)
        return cpu, calls, disk_counts(self.disk), each

    def stop(self) -> Cost:
        wall = time.perf_counter() - self._t
        cpu, calls, disk, each = self._sample()
        cpu0, calls0, disk0, each0 = self._start
        return Cost(
            wall,
            {k: cpu[k] - cpu0[k] for k in cpu},
            calls - calls0,
            {k: disk[k] - disk0.get(k, 0) for k in disk},
            [a - b for a, b in zip(each, each0)],
        )
