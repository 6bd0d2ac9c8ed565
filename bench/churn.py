"""Writes on a fresh cluster directory and after a cluster's churn (issue 31,
item 1; docs/benchmarks.md, "Churn: writes after deletions").

The same writes (4 KiB and 1 MiB records, x1 and x2, one pipelined client,
4 peers) are measured twice on one cluster, and the C loop of
bench/physical.c writing the same records as files in the peers' layout is
measured beside each:

- **fresh**: a new cluster directory, nothing deleted by this case yet;
- **after churn**: every file of the fresh phase deleted (StoreTorrent's
  through the client, the C loop's with ``rmtree``), then before each
  measurement a churn of ``churn_files`` small files created and deleted
  where the writes go: in ``files/`` of each peer's data directory (of each
  copy's folder for the C loop), beside the record files' own directories,
  as on a cluster whose files are written and deleted all the time
  (``physical churn``; a file id no record uses).

Rows: ``churn_put_<size>_<class>`` StoreTorrent after churn against itself
fresh (target >= 0.8), ``churn_physical_<size>_<class>`` the C loop after
churn against itself fresh, and each state's StoreTorrent against the C loop.
Every write is checked: the file's committed record count and bytes.
Notes give the per-record CPU of client, tracker and peers and the disk's
reads in each state (bench/procstat.py).

The case runs twice when it can: on the filesystem of the bench's
temporary folder (this machine's: ext4 without a journal, where a churn
slows file creation for 60-360 s; st_core/src/fs_check.h), and on a new
ext4 with a journal made in a sparse image file and mounted through a loop
device (rows ending ``_journaled``; root, ``mkfs.ext4`` and ``mount``
needed, else those rows are left out and a row says why).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from . import physical
from .cases import fresh_cluster, put_records, row
from .procstat import Cost, Sampler

GROUP = "churn"
MiB = 1 << 20
CHURN_ID = "00000000c4a2c4a2"  # the churn's folder in files/: a file id no record of the bench uses
SHAPES = (("4kib", 4096, "x1"), ("4kib", 4096, "x2"), ("1mib", MiB, "x1"), ("1mib", MiB, "x2"))


def _check(cluster, name: str, records: int, size: int) -> None:
    c = cluster.client()
    with c.open(name) as f:
        names = f.names()
        got = sum(m.size for m in f.records_meta(names).values())
    c.close()
    if (len(names), got) != (records, records * size):
        raise AssertionError(f"{name}: {len(names)} records of {got} bytes committed, wrote {records} x {size}")


def _st(cluster, name: str, size: int, n: int, rep: str) -> tuple[float, Cost]:
    data = os.urandom(size)
    records = [(f"r{i:07d}", data) for i in range(n)]
    sampler = Sampler(cluster, cluster.data_dir)
    put_records(cluster, name, records, rep, depth=64 if size <= 65536 else 16)
    cost = sampler.stop()
    _check(cluster, name, n, size)
    return n / cost.wall, cost


def _churn(folders: list[Path], files: int) -> tuple[float, float]:
    """``files`` small files created and deleted, split between ``folders``
    (in a subfolder named as a file id no record uses): (create s, delete s)."""
    made = gone = 0.0
    for f in folders:
        a, b = physical.churn(f / CHURN_ID, files // len(folders))
        made, gone = made + a, gone + b
    return made, gone


def _c_loop(folder: Path, size: int, n: int, rep: str) -> float:
    return n / physical.write_files(folder, n, size, copies=2 if rep == "x2" else 1, keep=True)


@contextlib.contextmanager
def journaled_ext4(tmp: Path, size_bytes: int) -> Iterator[Path | str]:
    """A new ext4 with a journal (mkfs.ext4's default) in a sparse image
    under ``tmp``, mounted through a loop device for the block: its mount
    point, or a string saying why there is none. Unmounted and removed after."""
    if os.geteuid() != 0:
        yield "not root: a loop mount needs root"
        return
    if not (shutil.which("mkfs.ext4") and shutil.which("mount")):
        yield "no mkfs.ext4 or mount"
        return
    img, mnt = tmp / "journaled-ext4.img", tmp / "journaled-ext4"
    with open(img, "wb") as fh:
        fh.truncate(size_bytes)
    mnt.mkdir()
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True, text=True)
    mounted = made.returncode == 0 and (
        subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True).returncode == 0
    )
    try:
        yield mnt if mounted else f"could not make or mount an ext4 image: {made.stderr.strip()[:200]}"
    finally:
        if mounted and subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        img.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def case_churn(tmp: Path, n4k: int, n1m: int, churn_files: int, journaled: bool = True) -> list[dict]:
    """Writes on a fresh cluster directory and after a churn, beside the C
    loop in both states; with ``journaled`` (full runs: it mounts a loop
    image as root) again on a journaled ext4."""
    if physical.tool() is None:
        return [row("churn_skipped", 0, "records/s", note="no C compiler: the C loop and the churn need one")]
    rows = _states(tmp, "", n4k, n1m, churn_files)
    if not journaled:
        rows.append(
            row("churn_journaled_skipped", 0, "records/s", note="quick run: the journaled image runs in full runs")
        )
        return rows
    # what every copy and the C loop write, both states, with room for the churn and the metadata
    need = 2 * 2 * 3 * (n4k * 4096 + n1m * MiB) + churn_files * 8192 + (2 << 30)
    with journaled_ext4(tmp, need) as where:
        if isinstance(where, str):
            rows.append(row("churn_journaled_skipped", 0, "records/s", note=where))
        else:
            rows += _states(where, "_journaled", n4k, n1m, churn_files)
    return rows


def _states(tmp: Path, suffix: str, n4k: int, n1m: int, churn_files: int) -> list[dict]:
    """The fresh and after-churn measurements of a cluster under ``tmp``;
    row names end in ``suffix``."""
    cluster = fresh_cluster(tmp, "churn-").start()
    data = Path(cluster.data_dir)
    states: dict[str, dict[str, tuple[float, float, Cost]]] = {"fresh": {}, "churn": {}}
    churn_s: list[tuple[float, float]] = []
    try:
        c = cluster.client()
        for state in ("fresh", "churn"):
            for label, size, rep in SHAPES:
                n = n4k if size < MiB else n1m
                key = f"{label}_{rep}"
                peers = [Path(cluster.data_dir) / "peers" / f"peer-{i}" / "files" for i in range(len(cluster.peers))]
                phys = data / "phys" / f"{state}-{key}"
                copies = [phys / f"copy{c}" / "files" for c in range(2 if rep == "x2" else 1)]
                if state == "churn":
                    churn_s.append(_churn(peers, churn_files))
                rate, cost = _st(cluster, f"/bench/churn/{state}-{key}", size, n, rep)
                if state == "churn":
                    churn_s.append(_churn(copies, churn_files))
                c_rate = _c_loop(phys, size, n, rep)
                states[state][key] = (rate, c_rate, cost)
            if state == "fresh":  # files deleted: the first half of the churn
                for label, _, rep in SHAPES:
                    c.delete(f"/bench/churn/fresh-{label}_{rep}")
                shutil.rmtree(data / "phys")
        c.close()
    finally:
        cluster.stop()
    made = sum(a for a, _ in churn_s) / len(churn_s)
    gone = sum(b for _, b in churn_s) / len(churn_s)
    how = (
        f"before each measurement after churn, {churn_files:,} files of 4 KiB were created ({made:.1f} s) "
        f"and deleted ({gone:.1f} s) in files/ of the peers (of the C loop's copies), after the fresh "
        "phase's files were deleted"
    )
    fs = "ext4 with a journal, in a loop-mounted image" if suffix else "the bench's temporary folder's filesystem"
    rows = []
    for label, size, rep in SHAPES:
        key = f"{label}_{rep}"
        unit = "B/s" if size >= MiB else "records/s"
        scale = size if size >= MiB else 1
        (f_rate, f_c, f_cost), (a_rate, a_c, a_cost) = states["fresh"][key], states["churn"][key]
        n = n4k if size < MiB else n1m
        rows += [
            row(
                f"churn_put_{key}{suffix}",
                a_rate * scale,
                unit,
                "the same writes on the fresh cluster directory",
                f_rate * scale,
                note=f"{n:,} records, one client, on {fs}; {how}. "
                f"Fresh: {f_cost.text(n)}. After churn: {a_cost.text(n)}",
            ),
            row(
                f"churn_physical_{key}{suffix}",
                a_c * scale,
                unit,
                "the C loop on the fresh directory",
                f_c * scale,
                note="bench/physical.c write, the same records as files in the peers' layout, one process per core",
            ),
            row(f"churn_fresh_{key}{suffix}_vs_physical", f_rate * scale, unit, "the C loop, fresh", f_c * scale),
            row(f"churn_after_{key}{suffix}_vs_physical", a_rate * scale, unit, "the C loop, after churn", a_c * scale),
        ]
    return rows
