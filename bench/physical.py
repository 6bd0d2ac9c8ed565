"""The machine's physical limits, measured by a C program (bench/physical.c)
beside every StoreTorrent path that has one (issue "Writes at the disk's
speed, scans at the machine's"; docs/benchmarks.md, "Physical limits").

- :func:`write_files`: records created as files laid out as the peers lay
  them out (one folder per copy, 256 buckets, ``O_TMPFILE`` + ``linkat``),
  one process per core, with the peers' sync setting;
- :func:`seq_write`: the same bytes as one sequential file, with and without
  ``fdatasync`` at the end;
- :func:`read_files`: open, read and close of the files a scan reads, one
  process per core;
- :func:`churn`: a cluster's churn (many small files created, then deleted),
  the filesystem state that :mod:`bench.churn` measures writes in.

The program is compiled with the system's C compiler (``cc``) into the
bench's temporary folder on first use; without one, :func:`tool` returns
None and the rows say so.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("physical.c")


@functools.cache
def tool() -> Path | None:
    """The compiled program, or None when no C compiler is installed."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    out = Path(tempfile.mkdtemp(prefix="st-physical-")) / "physical"
    subprocess.run([cc, "-O2", "-o", str(out), str(SOURCE)], check=True, capture_output=True)
    return out


def _run(*args: object) -> list[str]:
    exe = tool()
    if exe is None:
        raise RuntimeError("no C compiler (cc): the physical baselines need one")
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"physical {args[0]} failed: {r.stderr.strip()}")
    return r.stdout.split()


def cores() -> int:
    """Processes to use: one per core this process may run on."""
    return len(os.sched_getaffinity(0))


def write_files(
    folder: Path,
    count: int,
    size: int,
    copies: int = 1,
    procs: int | None = None,
    sync: bool = False,
    keep: bool = False,
) -> float:
    """Seconds for ``procs`` processes (default: one per core) to create
    ``count`` records of ``size`` bytes, ``copies`` times each, as files in
    the peers' layout under ``folder`` (emptied first); ``sync``: one syncfs
    at the end, as the peers' ``--sync`` group fsync. ``keep``: neither
    empty ``folder`` first nor remove the files after (a deletion is churn:
    it slows the next creations, see :func:`churn`)."""
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return float(_run("write", folder, count, size, copies, procs or cores(), int(sync))[0])
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def churn(folder: Path, count: int, size: int = 4096) -> tuple[float, float]:
    """(seconds to create, seconds to delete) ``count`` files of ``size``
    bytes in 256 directories under ``folder``: the churn of a cluster whose
    files are written and deleted (bench/physical.c ``churn``)."""
    create_s, delete_s = _run("churn", folder, count, size)
    return float(create_s), float(delete_s)


def seq_write(path: Path, nbytes: int, sync: bool = False) -> float:
    """Seconds to write ``nbytes`` sequentially into one file (1 MiB
    writes); ``sync``: ``fdatasync`` before the clock stops."""
    try:
        return float(_run("seq", path, nbytes, int(sync))[0])
    finally:
        path.unlink(missing_ok=True)


def read_files(paths: list[str], procs: int | None = None) -> tuple[float, int]:
    """(seconds, bytes) for ``procs`` processes (default: one per core) to
    open, read and close ``paths``, split between them."""
    with tempfile.NamedTemporaryFile("w", suffix=".list", delete=False) as fh:
        fh.write("\n".join(paths))
        fh.write("\n")
        listing = fh.name
    try:
        secs, nbytes = _run("read", listing, procs or cores())
        return float(secs), int(nbytes)
    finally:
        os.unlink(listing)
