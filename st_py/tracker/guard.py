"""The tracker's permission and quota checks over the namespace
(docs/security.md). :mod:`.access` says who the user is and what mode bits
mean; this module knows where owners and modes are kept (directories in the
tracker's state, files in their infofile's meta) and what each user stores.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from st_py.core import namespace
from st_py.core.history import retained_bytes
from st_py.core.infofile import InfofileReader

from .access import DEFAULT_DIR_MODE, ROOT_MODE, AccessError, Owner, User, Users, W, X, may, mode_text
from .state import TrackerState


def _ancestors(name: str) -> list[str]:
    """ "/a/b/c" -> ["/", "/a", "/a/b"]."""
    parts = name.strip("/").split("/")
    return ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


log = logging.getLogger("st.tracker")


def disk_mode(mode: int, is_dir: bool) -> int:
    """The permission bits on disk of an infofile (or a namespace directory)
    whose StoreTorrent mode is ``mode`` (paper 3.5: the infofiles' UNIX
    permissions govern access to the shared namespace). The group's and
    others' read bits (and search bits of directories) are the mode's; the
    file's UNIX owner is the tracker's account, which keeps rw (rwx): the
    tracker writes every infofile, and peers, running as that account, read
    them. Nobody else gets w: only the tracker writes the namespace."""
    return (0o700 | (mode & 0o055)) if is_dir else (0o600 | (mode & 0o044))


def set_disk_mode(path: Path, mode: int, is_dir: bool) -> bool:
    """chmod ``path`` to :func:`disk_mode`; False if it already had it.
    Raises OSError (e.g. the tracker's account does not own it)."""
    want = disk_mode(mode, is_dir)
    if os.stat(path).st_mode & 0o7777 == want:
        return False
    os.chmod(path, want)
    return True


def owner_of_meta(meta: dict) -> Owner:
    """The owner, group and mode of a file from its infofile's ``meta`` dict
    (mode an octal string; 0o644 when missing)."""
    mode = meta.get("mode")
    return Owner(
        meta.get("owner") or "", meta.get("group") or "", int(mode, 8) if isinstance(mode, str) and mode else 0o644
    )


class Guard:
    """Permission and quota checks of one tracker (docs/security.md): owners and
    modes of directories from the tracker state, of files from their infofile
    meta, and each user's stored bytes (``usage``, all copies), counted from
    the infofiles at start and kept up to date with :meth:`charge`.

    Checks raise :class:`~.access.AccessError`. Not thread-safe: used on the
    tracker's event loop (its worker threads only read directory owners)."""

    def __init__(self, root, state: TrackerState, users: Users):
        self.root = root
        self.state = state
        self.users = users
        self.usage: dict[str, int] = {}  # user -> stored bytes (all copies) of the files they own
        # user -> bytes (all copies) reserved for their files and not committed yet (set by the service)
        self.reserved_of: Callable[[str], int] = lambda owner: 0
        self.count_usage()

    def count_usage(self) -> None:
        """Count each owner's stored bytes from the infofiles of the files the
        state lists (at start; a standby elected, once it knows the files),
        and give the namespace on disk the modes kept. Blocks: reads every
        infofile (a thread may run it before the tracker serves)."""
        usage: dict[str, int] = {}
        for name, owner in self.state.files():
            try:
                r = InfofileReader(namespace.infofile_path(self.root, name))
            except (FileNotFoundError, OSError):
                continue
            try:
                _, b = r.stats()
                b += retained_bytes(r.conn)  # past versions snapshots hold occupy disks too
                meta = r.meta()
                usage[owner] = usage.get(owner, 0) + b * int(meta.get("copies", 1))
            finally:
                r.close()
            self.follow_on_disk(name, owner_of_meta(meta).mode, False)
        self.usage = usage
        for path, mode in [("/", self.dir_owner("/").mode), *self.state.dirs()]:
            self.follow_on_disk(path, int(mode), True)

    def follow_on_disk(self, name: str, mode: int, is_dir: bool) -> None:
        """The infofile or directory ``name`` gets the permission bits of its
        mode (at start: files chmodded before the tracker did it on disk, a
        namespace restored from a backup; new directories); a failure is
        logged."""
        try:
            path = namespace.dir_path(self.root, name) if is_dir else namespace.infofile_path(self.root, name)
            if path.exists() and set_disk_mode(path, mode, is_dir):
                log.info("%s: permission bits on disk set to %o (mode %o)", name, disk_mode(mode, is_dir), mode)
        except (OSError, ValueError) as e:
            log.warning("%s: cannot set its permission bits on disk to follow mode %o: %s", name, mode, e)

    # -- ownership ------------------------------------------------------------
    def dir_owner(self, path: str) -> Owner:
        """Owner, group and mode of namespace directory ``path``: as recorded,
        else root:root 0777 for ``/``, else no owner and 0755 (made before modes
        were kept)."""
        row = self.state.dir_owner(path)
        if row is not None:
            return Owner(row[0], row[1], int(row[2]))
        if path == "/":
            return Owner("root", "root", ROOT_MODE)
        return Owner("", "", DEFAULT_DIR_MODE)  # made before modes were kept

    @staticmethod
    def _deny(user: User, what: str, name: str, o: Owner) -> AccessError:
        return AccessError(
            "denied", f"user {user.name} may not {what} {name} ({mode_text(o.mode)} {o.owner or '?'}:{o.group or '?'})"
        )

    def check_search(self, user: User, name: str) -> None:
        """x on every existing ancestor directory of ``name`` (a normalized
        name: its ancestors are plain paths under the root, so a stat says
        whether each exists; run for every commit)."""
        for d in _ancestors(name):
            if d != "/" and not os.path.isdir(os.path.join(self.root, d.lstrip("/"))):
                break
            o = self.dir_owner(d)
            if not may(user, o, X):
                raise self._deny(user, "search directory", d, o)

    def check_create(self, user: User, name: str) -> list[str]:
        """Search on the ancestors and write on the deepest existing one, where
        the new entries go. Returns the directories to create."""
        self.check_search(user, name)
        missing, deepest = [], "/"
        for d in _ancestors(name):
            if d == "/" or namespace.dir_path(self.root, d).is_dir():
                deepest = d
            else:
                missing.append(d)
        o = self.dir_owner(deepest)
        if not may(user, o, W):
            raise self._deny(user, "create entries in directory", deepest, o)
        return missing

    def check_file(self, user: User, name: str, meta: dict, want: int, what: str) -> Owner:
        """Search on ``name``'s ancestors and the ``want`` bits (R, W) on file
        ``name`` whose infofile meta is ``meta``; returns its owner. Raises
        AccessError("denied") naming ``what`` was refused."""
        self.check_search(user, name)
        o = owner_of_meta(meta)
        if not may(user, o, want):
            raise self._deny(user, what, name, o)
        return o

    def check_dir(self, user: User, path: str, want: int, what: str) -> None:
        """Search on ``path``'s ancestors and itself, and the ``want`` bits on
        directory ``path``. Raises AccessError("denied") naming ``what`` was refused."""
        self.check_search(user, path.rstrip("/") + "/x" if path != "/" else "/x")
        o = self.dir_owner(path)
        if not may(user, o, want):
            raise self._deny(user, what, path, o)

    def made_dirs(self, user: User, dirs: list[str]) -> None:
        """``user`` creates directories ``dirs``: they own those that have
        no owner yet (another create may have made one first)."""
        for d in dirs:
            if self.state.dir_owner(d) is None:
                self.state.set_dir_owner(d, user.name, user.group, DEFAULT_DIR_MODE)

    # -- quota ----------------------------------------------------------------
    def quota_of(self, owner: str) -> int | None:
        """``owner``'s quota in bytes (all copies), None: unlimited."""
        return self.users.quota_for(owner)

    def used(self, owner: str) -> tuple[int, int]:
        """(bytes counted against ``owner``'s quota, of which reserved): the
        committed bytes of their files (all copies) and the reserved bytes
        not committed yet (paper 4.4: the tracker's two-phase quota)."""
        reserved = self.reserved_of(owner)
        return self.usage.get(owner, 0) + reserved, reserved

    def check_quota(self, owner: str, add_bytes: int, doing: str) -> None:
        """Raise AccessError("quota") if ``owner`` storing ``add_bytes`` more
        would exceed their quota."""
        quota = self.quota_of(owner)
        if quota is None:
            return
        used, reserved = self.used(owner)
        if used + add_bytes > quota:
            held = f", {reserved:,} of them reserved by files being written" if reserved else ""
            raise AccessError(
                "quota",
                f"{doing} needs {add_bytes:,} bytes but {owner} has used {used:,}{held} of a "
                f"{quota:,}-byte quota; delete files or ask an admin for more",
            )

    def write_denied(self, user: User, name: str, o: Owner, own_reserved: int = 0) -> str:
        """Why ``user`` gets no WRITE capability on file ``name``, or ''.
        ``own_reserved``: bytes the file itself has reserved, which its
        writes may use even when they fill the quota."""
        if not may(user, o, W):
            return str(self._deny(user, "write", name, o))
        quota, (used, _) = self.quota_of(o.owner), self.used(o.owner)
        if quota is not None and used - own_reserved >= quota:
            return (
                f"{o.owner} has used {used:,} of a {quota:,}-byte quota: no more writes to {name}; "
                "delete files or ask an admin for more"
            )
        return ""

    def charge(self, owner: str, delta: int) -> None:
        """Add ``delta`` bytes (all copies; negative frees) to ``owner``'s usage, never below 0."""
        self.usage[owner] = max(0, self.usage.get(owner, 0) + delta)
