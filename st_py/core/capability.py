"""Capabilities: HMAC-SHA256-signed tokens for the data path
(docs/capabilities.md; the paper leaves security to future work, §3.5, §8.1.1).

The tracker mints them (:func:`mint`) for the operations a user may do on one
file; peers verify them (in C++, st_core/src/capability.cc) with the same
shared key. This module is the Python side of the format, used by the
tracker, by operators' tools and by the tests.

    python -m st_py.capability new-key PATH     # a new key file, mode 0600
    python -m st_py.capability mint --key-file PATH --ops 16 --file-id 0 --ttl 3600 --user admin
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
import stat
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

VERSION = 1
DOMAIN = b"storetorrent-capability-v1"
MAC_SIZE = 32
MAX_USER = 256
CLOCK_SKEW_S = 30

READ, WRITE, DELETE, PEER, ADMIN = 1, 2, 4, 8, 16
# Between trackers only (a master and the per-file trackers it spawns, paper
# 3.5): the token's user is who the call is made for. Peers grant nothing for it.
TRACKER = 32
OP_NAMES = {READ: "read", WRITE: "write", DELETE: "delete", PEER: "peer", ADMIN: "admin", TRACKER: "tracker"}

_HEAD = struct.Struct("<BBQQH")  # version, ops, file_id, expires, user length


class CapabilityError(ValueError):
    """A token or key that cannot be used; the message says why."""


@dataclass(frozen=True)
class Capability:
    """The fields of a token. ``expires`` is unix seconds (UTC)."""

    ops: int
    file_id: int
    expires: int
    user: str = ""
    version: int = VERSION

    def allows(self, op: int) -> bool:
        """Whether the token grants operation ``op`` (a bit of READ, WRITE, ...)."""
        return bool(self.ops & op)


def ops_text(ops: int) -> str:
    """Operation bits as names joined by ``+`` (e.g. ``read+write``), ``nothing`` for 0."""
    return "+".join(name for bit, name in OP_NAMES.items() if ops & bit) or "nothing"


def load_key(path: str | os.PathLike) -> bytes:
    """The 32-byte key from a key file of 64 hex digits (docs/capabilities.md).

    Raises
    ------
    CapabilityError
        If the file does not hold exactly 64 hex digits (and a newline).
    OSError
        If it cannot be read.
    """
    text = Path(path).read_text(encoding="ascii", errors="replace").rstrip("\n")
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise CapabilityError(
            f"key file {path} must hold 64 hex digits (32 bytes); "
            "make one with: python -m st_py.capability new-key PATH"
        )
    return bytes.fromhex(text)


def new_key_file(path: str | os.PathLike) -> Path:
    """Write a fresh random key to ``path`` with mode 0600 (fails if it exists)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    return p


def mint(key: bytes, ops: int, file_id: int, ttl_s: float, user: str = "", now: float | None = None) -> bytes:
    """A signed token for ``ops`` on ``file_id`` (0: every file), valid for
    ``ttl_s`` seconds from ``now``."""
    u = user.encode("utf-8")[:MAX_USER]
    expires = int((time.time() if now is None else now) + ttl_s)
    body = _HEAD.pack(VERSION, ops, file_id, expires, len(u)) + u
    return body + hmac.new(key, DOMAIN + body, hashlib.sha256).digest()


def parse(token: bytes) -> Capability:
    """The fields of ``token``, without checking its signature.

    Raises
    ------
    CapabilityError
        If it is malformed or of an unknown version.
    """
    if len(token) < _HEAD.size + MAC_SIZE:
        raise CapabilityError(f"malformed capability: {len(token)} bytes")
    version, ops, file_id, expires, ulen = _HEAD.unpack_from(token)
    if version != VERSION:
        raise CapabilityError(f"capability version {version} is not supported (this is version {VERSION})")
    if ulen > MAX_USER or len(token) != _HEAD.size + ulen + MAC_SIZE:
        raise CapabilityError("malformed capability: wrong length")
    user = token[_HEAD.size : _HEAD.size + ulen].decode("utf-8", "replace")
    return Capability(ops, file_id, expires, user, version)


def verify(key: bytes, token: bytes, now: float | None = None) -> Capability:
    """Parse ``token`` and check its signature and expiry.

    Raises
    ------
    CapabilityError
        Malformed, bad signature (forged or another key), or expired.
    """
    cap = parse(token)
    body, mac = token[:-MAC_SIZE], token[-MAC_SIZE:]
    if not hmac.compare_digest(mac, hmac.new(key, DOMAIN + body, hashlib.sha256).digest()):
        raise CapabilityError("capability has a bad signature (forged, or signed with another key)")
    if (time.time() if now is None else now) > cap.expires + CLOCK_SKEW_S:
        raise CapabilityError(f"capability expired at {cap.expires} (unix s)")
    return cap


def main(argv: list[str] | None = None) -> None:
    """``python -m st_py.capability``: ``new-key PATH`` writes a key file,
    ``mint`` prints a token (hex). Exits with status 2 and a message on a bad
    key or an OS error."""
    ap = argparse.ArgumentParser(
        prog="python -m st_py.capability", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("new-key", help="write a new random key file (mode 0600)")
    k.add_argument("path")
    m = sub.add_parser("mint", help="print a token (hex) signed with a key file")
    m.add_argument("--key-file", required=True)
    m.add_argument("--ops", type=int, required=True, help="1 read, 2 write, 4 delete, 8 peer, 16 admin, 32 tracker")
    m.add_argument("--file-id", type=lambda s: int(s, 0), default=0)
    m.add_argument("--ttl", type=float, default=3600)
    m.add_argument("--user", default="")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "new-key":
            print(new_key_file(a.path))
        else:
            print(mint(load_key(a.key_file), a.ops, a.file_id, a.ttl, a.user).hex())
    except (CapabilityError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
