"""Whether a client's infofile copy on disk is whole (issue 40;
docs/decisions.md, "A local copy after a machine crash"): the one rule, read
by st_py/client/infofile_copies.py before it reads a copy it has not read
since its process started.

Copies are written without ``fsync``: every copy is made in a temporary file
and renamed over the old one, so no process ever sees one half-written, and
the page cache keeps what was written as long as the machine runs. Only a
crash of the machine (power, kernel) can leave a copy torn: the rename on
disk, its bytes not (ext4's delayed allocation), so a file of the right
name whose pages are zeros or short. SQLite does not checksum its pages; such
a file could read as a smaller or an older state than its ``meta`` claims.

So beside each copy ``<file_id>.seal`` (JSON, replaced by a rename, never
synced) says in which boot of the machine it was made or last checked
(``/proc/sys/kernel/random/boot_id``) and the size and CRC-32C of the
snapshot it was made from. A copy is whole:

- if its seal names the current boot (a copy is only ever replaced whole, so
  whatever is at the path in this boot is a whole state), or
- after a reboot, if its bytes have the seal's size and CRC-32C (checked once,
  then sealed for this boot).

Else (no seal, a torn seal, a copy brought forward by changesets before a
reboot, whose bytes no CRC names) it is not read: the caller removes it and
fetches a snapshot. A seal written in a lost rename's place cannot vouch for
the wrong file: a new boot id is only ever written after the bytes were
checked in that boot.

Thread-safety: the functions touch only the given files; callers hold the
copy's lock (a catch-up at a time per copy).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from pathlib import Path

import google_crc32c

log = logging.getLogger("st.client.copies")
SEAL = ".seal"  # beside each copy: the boot it was made or checked in, the snapshot's size and CRC-32C
BOOT_ID = "/proc/sys/kernel/random/boot_id"
READ = 1 << 20  # bytes read at a time when a copy's CRC-32C is checked


@functools.cache
def boot_id() -> str:
    """This boot of the machine (Linux's random boot id; "" where there is
    none: every process then checks a copy's CRC-32C before it reads it)."""
    try:
        return Path(BOOT_ID).read_text().strip()
    except OSError:
        return ""


def seal_path(copy: Path) -> Path:
    """The seal of the copy at ``copy`` (``<file_id>.infofile``)."""
    return copy.with_suffix(SEAL)


def seal(copy: Path, size: int | None, crc32c: int | None) -> None:
    """Note that the copy at ``copy`` is whole in this boot and, if given,
    that its bytes are ``size`` bytes of CRC-32C ``crc32c`` (a snapshot just
    written, or a copy just checked). Replaced by a rename, not synced. An
    error is logged, not raised: without its seal a copy is fetched again
    after a reboot, never read wrong."""
    boot = boot_id()
    tmp = copy.with_name(f".{copy.stem}{SEAL}-{os.getpid()}-{threading.get_ident()}")
    data = json.dumps({"boot": boot, "size": size, "crc32c": crc32c})
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, seal_path(copy))
    except OSError as e:
        log.warning("infofile copy %s: could not write its seal (%s); it will be fetched again after a reboot", copy, e)
        tmp.unlink(missing_ok=True)


def whole(copy: Path) -> bool:
    """Whether the copy at ``copy`` (which exists) may be read: sealed in
    this boot, or its bytes match its seal's size and CRC-32C (then sealed
    for this boot). False: remove it and fetch it again (logged at WARNING
    with the reason)."""
    boot = boot_id()
    try:
        s = json.loads(seal_path(copy).read_text())
        sealed_boot, size, crc = str(s["boot"]), s["size"], s["crc32c"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return _refused(copy, f"no readable seal ({type(e).__name__})")
    if boot and sealed_boot == boot:
        return True
    if size is None or crc is None:
        return _refused(copy, "made before a reboot and brought forward since: no CRC-32C names its bytes")
    try:
        got_size, got_crc = _size_crc(copy)
    except OSError as e:
        return _refused(copy, f"unreadable ({e})")
    if (got_size, got_crc) != (size, crc):
        return _refused(copy, f"{got_size} bytes of CRC-32C {got_crc:08x}, not the {size} of {crc:08x} it was made as")
    seal(copy, size, crc)
    return True


def _size_crc(path: Path) -> tuple[int, int]:
    crc, size = 0, 0
    with open(path, "rb") as f:
        while piece := f.read(READ):
            crc, size = google_crc32c.extend(crc, piece), size + len(piece)
    return size, crc


def _refused(copy: Path, why: str) -> bool:
    log.warning("infofile copy %s is not known whole after a restart of the machine (%s): fetching it again", copy, why)
    return False
