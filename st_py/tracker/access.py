"""Who may do what (docs/security.md; the paper's §3.5 UNIX permissions).

Users authenticate to the tracker with an API key (``authorization: Bearer
<key>`` gRPC metadata; the tracker stores only its SHA-256) listed in a users
file. Without a users file the tracker runs in development mode: it trusts
the user name the client claims, as NFS AUTH_SYS does.

Files (infofiles) and directories have an owner, a group and UNIX mode bits.
The checks are UNIX's: search (x) on every ancestor directory, write (w) on a
directory to create or delete in it, read (r) on a file for a READ
capability, write (w) on a file for WRITE and DELETE capabilities, commits
and record deletes, read (r) on a directory to list it. Admins may do
anything. Per-user quotas count the stored bytes (all copies) of the files a
user owns.

Users file (TOML)::

    [defaults]
    quota_bytes = 1_000_000_000_000     # optional: for users without their own

    [users.alice]
    api_key_sha256 = "3f1c..."          # storetorrent user add alice --users FILE
    groups = ["physics"]                 # the first is the group of new files
    quota_bytes = 50_000_000_000         # optional
    admin = false
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

R, W, X = 4, 2, 1
DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755
ROOT_MODE = 0o777  # anyone may make top-level directories; chmod it to restrict


class AccessError(Exception):
    """Refused: ``code`` is "unauthenticated", "denied" or "quota"."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class User:
    """An authenticated user: name, groups (the first is the group of what they
    create), quota in bytes (all copies; None: the default) and admin flag."""

    name: str
    groups: tuple[str, ...] = ()
    quota_bytes: int | None = None
    admin: bool = False

    @property
    def group(self) -> str:
        """The group given to the files and directories this user creates."""
        return self.groups[0] if self.groups else self.name


@dataclass(frozen=True)
class Owner:
    """The owner, group and UNIX mode bits of a file or directory."""

    owner: str
    group: str
    mode: int


def may(user: User, obj: Owner, want: int) -> bool:
    """UNIX permission check: the owner's bits, else the group's, else others'."""
    if user.admin:
        return True
    if user.name == obj.owner:
        bits = (obj.mode >> 6) & 7
    elif obj.group in user.groups or obj.group == user.name:
        bits = (obj.mode >> 3) & 7
    else:
        bits = obj.mode & 7
    return bits & want == want


def mode_text(mode: int) -> str:
    """Mode bits as ``ls`` shows them, e.g. ``0o644`` -> ``'rw-r--r--'``."""
    out = ""
    for shift in (6, 3, 0):
        b = (mode >> shift) & 7
        out += ("r" if b & R else "-") + ("w" if b & W else "-") + ("x" if b & X else "-")
    return out


def hash_key(api_key: str) -> str:
    """The hex SHA-256 of an API key, as the users file stores it."""
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass
class Users:
    """The users file, reloaded when it changes. ``path`` None: development
    mode (claimed names are trusted, ``default_quota`` applies to all)."""

    path: Path | None = None
    default_quota: int | None = None
    _by_hash: dict[str, User] = field(default_factory=dict)
    _by_name: dict[str, User] = field(default_factory=dict)
    _mtime: float = -1.0

    @property
    def enabled(self) -> bool:
        """Whether a users file is in force (False: development mode)."""
        return self.path is not None

    def _reload(self) -> None:
        assert self.path is not None  # only called when enabled
        st = os.stat(self.path)
        if st.st_mtime == self._mtime:
            return
        data = tomllib.loads(self.path.read_text())
        default_quota = data.get("defaults", {}).get("quota_bytes", self.default_quota)
        by_hash = {}
        for name, u in data.get("users", {}).items():
            h = str(u.get("api_key_sha256", "")).lower()
            if len(h) != 64:
                raise ValueError(f"users file {self.path}: user {name} has no valid api_key_sha256")
            by_hash[h] = User(
                name, tuple(u.get("groups", ())), u.get("quota_bytes", default_quota), bool(u.get("admin", False))
            )
        self._by_hash, self._mtime = by_hash, st.st_mtime
        self._by_name = {u.name: u for u in by_hash.values()}
        self.default_quota = default_quota

    def quota_for(self, name: str) -> int | None:
        """The quota of user ``name`` in bytes (all copies), or None."""
        if self.enabled:
            self._reload()
            u = self._by_name.get(name)
            return u.quota_bytes if u is not None else self.default_quota
        return self.default_quota

    def lookup(self, name: str) -> User:
        """User ``name`` as another tracker vouched for them (a per-file
        tracker and its master, docs/architecture.md): from the users file,
        or, in development mode, by name alone.

        Raises
        ------
        AccessError("unauthenticated")
            A users file is in force and has no such user (any more).
        """
        if not self.enabled:
            return User(name or "anonymous", quota_bytes=self.default_quota)
        self._reload()
        u = self._by_name.get(name)
        if u is None:
            raise AccessError("unauthenticated", f"user {name} is not in the users file")
        return u

    def authenticate(self, metadata, claimed: str, cert_names: tuple[str, ...] | list[str] = ()) -> User:
        """The user making a request: from a client certificate's common name
        (mutual TLS, ``cert_names``), else from its API key (gRPC
        ``metadata``), else, in development mode, the ``claimed`` name.

        Raises
        ------
        AccessError("unauthenticated")
            No or an unknown API key (or certificate user) while a users file
            is in force.
        """
        if not self.enabled:
            name = cert_names[0] if cert_names else (claimed or "anonymous")
            return User(name, quota_bytes=self.default_quota)
        self._reload()
        if cert_names:
            u = self._by_name.get(cert_names[0])
            if u is None:
                raise AccessError("unauthenticated", f"certificate user {cert_names[0]} is not in the users file")
            return u
        key = ""
        for k, v in metadata or ():
            if k == "authorization" and v.startswith("Bearer "):
                key = v[len("Bearer ") :]
        if not key:
            raise AccessError(
                "unauthenticated",
                "this tracker requires an API key: set STORETORRENT_API_KEY "
                "(an admin makes one with `storetorrent user add NAME`)",
            )
        h = hash_key(key)
        for known, user in self._by_hash.items():
            if hmac.compare_digest(known, h):
                return user
        raise AccessError(
            "unauthenticated", "unknown API key: check STORETORRENT_API_KEY, or ask an admin for a new key"
        )


def add_user(path: Path, name: str, groups: list[str], quota_bytes: int | None = None, admin: bool = False) -> str:
    """Append user ``name`` to the users file with a fresh API key; returns
    the key (shown once: only its hash is stored)."""
    key = "st_" + secrets.token_urlsafe(32)
    existing = tomllib.loads(path.read_text()) if path.exists() else {}
    if name in existing.get("users", {}):
        raise ValueError(f"user {name} already exists in {path}")
    lines = [
        f"\n[users.{name}]",
        f'api_key_sha256 = "{hash_key(key)}"',
        "groups = [" + ", ".join(f'"{g}"' for g in groups) + "]",
    ]
    if quota_bytes is not None:
        lines.append(f"quota_bytes = {quota_bytes}")
    if admin:
        lines.append("admin = true")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write("\n".join(lines) + "\n")
    return key
