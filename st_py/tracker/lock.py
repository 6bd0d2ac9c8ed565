"""One tracker per namespace: an exclusive lock on the namespace root and on
the state directory, held for the tracker's life (issue "Integrity and
liveness"; docs/reliability.md).

Two trackers on one namespace would each group-commit into the same
infofiles and keep their own view of peers and leases: split brain. The
second one refuses to start, naming the holder. The lock is a POSIX
``flock`` on ``.st-tracker.lock`` in each directory (names starting with
``.st-`` are never listed as files, nor read by peers), so it is released
by the kernel when the holder dies, even by SIGKILL: no stale lock to clean.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import StoreTorrentError

LOCK_NAME = ".st-tracker.lock"


class TrackerLockedError(StoreTorrentError):
    """Another tracker holds the namespace (or state directory) lock.

    Attributes
    ----------
    path : str
        The lock file.
    pid : int
        The holder's process id (0 if it had not written it yet).
    addr : str
        The holder's ``host:port`` ("" if not serving yet).
    """

    def __init__(self, path: str, pid: int, addr: str):
        who = f"pid {pid}" if pid else "another process"
        at = f", serving {addr}" if addr else ""
        super().__init__(
            f"another tracker ({who}{at}) holds {path}: one tracker per namespace; stop it first, "
            "or point clients at it (STORETORRENT_TRACKER)"
        )
        self.path, self.pid, self.addr = path, pid, addr


def _holder(fd: int) -> tuple[int, str]:
    os.lseek(fd, 0, os.SEEK_SET)
    words = os.read(fd, 256).decode("utf-8", "replace").split()
    pid = int(words[0]) if words and words[0].isdigit() else 0
    return pid, words[1] if len(words) > 1 else ""


class TrackerLock:
    """Exclusive locks on ``dirs`` (namespace root, state directory), each
    the file ``name`` in it (a per-file tracker locks its shard's:
    ``.st-file-tracker-<i>.lock`` in the state directory, so two processes
    never write the same files).

    Raises
    ------
    TrackerLockedError
        At construction, if another process holds one of them.
    """

    def __init__(self, dirs: list[Path], name: str = LOCK_NAME):
        self._fds: list[int] = []
        try:
            for d in dict.fromkeys(Path(d).resolve() for d in dirs):  # once each, in order
                d.mkdir(parents=True, exist_ok=True)
                path = d / name
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pid, addr = _holder(fd)
                    os.close(fd)
                    raise TrackerLockedError(str(path), pid, addr) from None
                self._fds.append(fd)
            self.serving("")
        except BaseException:
            self.release()
            raise

    def serving(self, addr: str) -> None:
        """Write this tracker's pid and ``host:port`` into the lock files,
        for a second tracker's refusal to name."""
        line = f"{os.getpid()} {addr}\n".encode()
        for fd in self._fds:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing drops the flock
        self._fds = []
