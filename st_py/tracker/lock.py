"""One tracker per namespace: an exclusive lock on the namespace root and on
the state directory, held for the tracker's life (issue "Integrity and
liveness"; docs/reliability.md).

Two trackers on one namespace would each group-commit into the same
infofiles and keep their own view of peers and leases: split brain. The
second one refuses to start, naming the holder. The lock is a POSIX
``flock`` on ``.st-tracker.lock`` in each directory (names starting with
``.st-`` are never listed as files, nor read by peers), so it is released
by the kernel when the holder dies, even by SIGKILL: no stale lock to clean.

**Nested namespaces.** A namespace inside a served one (or containing one)
would let two trackers write the same infofiles under two names. The
master's lock (``nest_root``) therefore also holds a shared ``flock`` on
every ancestor directory of its root (real paths: a symlink is no way
around it), for its life, and at start refuses

* a root **inside** a served one: an ancestor's ``.st-tracker.lock`` is held
  (a probe that takes nothing);
* a root **containing** a served one: its own directory cannot be locked
  exclusively, as the tracker below holds it shared; the holder is named
  from ``/proc/locks``.

The cost is one ``flock`` per path component, whatever the namespace
holds. Two trackers starting at once on nested roots cannot both pass:
each takes its own locks before it probes the other's.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from st_py.errors import StoreTorrentError

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


class NestedNamespaceError(TrackerLockedError):
    """The namespace root is inside, or contains, a namespace another
    tracker serves.

    Attributes
    ----------
    path, pid, addr :
        As :class:`TrackerLockedError`: the other namespace's root (or its
        lock file), its tracker's pid and address when known.
    inside : bool
        True: this root is inside the served one; False: it contains it.
    """

    def __init__(self, root: str, other: str, pid: int, addr: str, inside: bool):
        who = f"pid {pid}" if pid else "another process"
        at = f", serving {addr}" if addr else ""
        where = f"inside the namespace {other}" if inside else "around a namespace that"
        StoreTorrentError.__init__(
            self,
            f"namespace {root} is {where} another tracker ({who}{at}) serves: one tracker per namespace, "
            "and namespaces never nest; use a root beside it, or point clients at that tracker",
        )
        self.path, self.pid, self.addr, self.inside = other, pid, addr, inside


def _ancestors(root: Path) -> list[Path]:
    return list(root.parents)


def _dir_lock_holder(d: Path) -> int:
    """The pid of a process holding a ``flock`` on directory ``d``
    (``/proc/locks``), or 0."""
    try:
        st = os.stat(d)
        want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in Path("/proc/locks").read_text().splitlines():
            f = line.split()
            if len(f) > 5 and f[1] == "FLOCK" and f[5] == want and int(f[4]) != os.getpid():
                return int(f[4])
    except (OSError, ValueError):
        pass
    return 0


class TrackerLock:
    """Exclusive locks on ``dirs`` (namespace root, state directory), each
    the file ``name`` in it (a per-file tracker locks its shard's:
    ``.st-file-tracker-<i>.lock`` in the state directory, so two processes
    never write the same files).

    With ``nest_root`` (the master's namespace root) it also refuses a root
    inside or around a served one, and holds the shared locks that make a
    later nested tracker refuse (see the module).

    Raises
    ------
    TrackerLockedError
        At construction, if another process holds one of them.
    NestedNamespaceError
        ``nest_root`` is inside or around a namespace another tracker serves.
    """

    def __init__(self, dirs: list[Path], name: str = LOCK_NAME, nest_root: Path | None = None):
        self._fds: list[int] = []
        self._dir_fds: list[int] = []
        root = Path(os.path.realpath(nest_root)) if nest_root is not None else None
        if root is not None:
            self._refuse_inside(root)  # before creating anything in a served namespace
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
            if root is not None:
                self._guard_nesting(root)
            self.serving("")
        except BaseException:
            self.release()
            raise

    def _guard_nesting(self, root: Path) -> None:
        for a in _ancestors(root):  # held for life: a tracker below one of them sees it
            try:
                fd = os.open(a, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue  # not readable: nobody can serve a namespace there through us either
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._dir_fds.append(fd)
        self._refuse_inside(root)  # again, now that ours are held: two starting at once cannot both pass
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # around a served namespace?
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _dir_lock_holder(root)
            raise NestedNamespaceError(str(root), str(root), pid, "", inside=False) from None
        finally:
            os.close(fd)

    @staticmethod
    def _refuse_inside(root: Path) -> None:
        """Raise if an ancestor of ``root`` is a served namespace root."""
        for a in _ancestors(root):
            try:
                fd = os.open(a / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pid, addr = _holder(fd)
                raise NestedNamespaceError(str(root), str(a), pid, addr, inside=True) from None
            finally:
                os.close(fd)

    def serving(self, addr: str) -> None:
        """Write this tracker's pid and ``host:port`` into the lock files,
        for a second tracker's refusal to name."""
        line = f"{os.getpid()} {addr}\n".encode()
        for fd in self._fds:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)

    def release(self) -> None:
        """Drop every lock held (closing their descriptors); safe to call twice."""
        for fd in self._fds + self._dir_fds:
            os.close(fd)  # closing drops the flock
        self._fds, self._dir_fds = [], []
