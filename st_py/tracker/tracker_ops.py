"""The tracker's own state through the metadata log (issue 39;
docs/metadata-log.md, "The apply loop"): the one place its operations on
the tracker's state (not an infofile's) are applied, and the checkpoint a
replicated log keeps of that state before it drops old entries.

Operations (:data:`~st_py.tracker.apply.ops.TRACKER_OPS`,
:data:`~st_py.tracker.leases.LEASE_OPS`), each an overwrite of one key, so a
replay that applies one again on a checkpoint that has it changes nothing:

- ``set_dir`` (name: the directory; args: owner, group, mode): chmod/chown
  of a namespace directory; ``remove_dir`` (name): an rmdir;
- ``set_drain`` (name: the peer id; args: the drain state): `storetorrent
  drain` and its undo;
- ``end_reservation`` (name, file_id): the creator closed the file, its
  space reservation ends (a reservation starts with its file's
  ``create_file``, and ends with its ``delete_file`` too);
- ``request_done`` (name: a request id; args: the RPC, the user, the
  encoded reply): a delete, snapshot or rmdir was answered, so its retry
  across a restart or failover (the same request id) gets that reply
  instead of doing it again (:meth:`TrackerStateOps.replied`), for as long
  as the log keeps entries;
- the writer leases' ``grant_lease``, ``renew_lease``, ``release_lease``
  (st_py/tracker/leases.py).

Directories made by a create come from its ``create_file`` operation; files
themselves are the namespace's infofiles (:func:`namespace_files`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import msgpack

from st_py.core import namespace
from st_py.core.infofile import InfofileReader
from st_py.tracker.apply.ops import InfofileOp
from st_py.tracker.leases import LEASE_OPS, Leases

log = logging.getLogger("st.tracker.state_ops")

_CHECKPOINT_VERSION = 1


class TrackerStateOps:
    """Applies the tracker-state operations of the metadata log to
    ``state`` (tracker.db), ``registry`` (the peers) and ``leases``; a
    per-file tracker has leases only (``state`` and ``registry`` None).
    Not thread-safe: used on the tracker's event loop."""

    def __init__(self, state, registry, leases: Leases, reservations=None, keep_s: float = 600.0):
        self.state, self.registry, self.leases, self.reservations = state, registry, leases, reservations
        self.keep_s = keep_s
        self._replies: dict[str, tuple[str, str, bytes, float]] = {}  # request id -> (rpc, user, reply, at)

    def apply(self, op: InfofileOp) -> None:
        """Apply ``op`` (the leader once it is appended; a replay again).
        Raises ValueError for an operation that is not the tracker's."""
        if op.kind in LEASE_OPS:
            self.leases.apply(op.kind, op.file_id, op.args, op.at)
        elif op.kind == "set_dir":
            owner, group, mode = op.args
            self.state.set_dir_owner(op.name, str(owner), str(group), int(mode))
        elif op.kind == "remove_dir":
            self.state.remove_dir(op.name)
        elif op.kind == "set_drain":
            self.registry.apply_drain_state(op.name, str(op.args[0]))
        elif op.kind == "end_reservation":
            self.reservations.release(op.file_id)
        elif op.kind == "request_done":
            rpc, user, reply = op.args
            self._replies[op.name] = (str(rpc), str(user), bytes(reply), float(op.at))
            old = [k for k, v in self._replies.items() if v[3] < op.at - self.keep_s]
            for k in old:
                del self._replies[k]
        else:
            raise ValueError(f"{op.kind} is not an operation on the tracker's state")

    def replied(self, request_id: str, rpc: str, user: str) -> bytes | None:
        """The encoded reply request ``request_id`` of ``user`` to ``rpc`` got
        (a retry of it), or None (a new request, or one older than the log keeps)."""
        got = self._replies.get(request_id) if request_id else None
        if got is None or got[0] != rpc or got[1] != user:
            return None
        return got[2]

    def checkpoint(self) -> bytes:
        """The state these operations made, as one blob (MessagePack): the
        directories' owners and modes, the peers' drain states, the live
        writer leases (:meth:`Leases.live`) and the space reservations."""
        return msgpack.packb(
            [
                _CHECKPOINT_VERSION,
                [list(r) for r in self.state.dir_rows()],
                self.state.drain_states(),
                [list(x) for x in self.leases.live()],
                [list(r) for r in self.state.reservations()],
            ],
            use_bin_type=True,
        )

    def restore(self, blob: bytes) -> tuple[int, int]:
        """Make the state the checkpoint ``blob`` describes (a standby
        elected: before it replays the entries after the checkpoint).
        Returns (directories, drained peers). Raises ValueError for a blob of
        a version this tracker does not read."""
        version, dirs, drains, leases, reservations = msgpack.unpackb(blob, raw=False, use_list=True)
        if version != _CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {version}; this tracker reads {_CHECKPOINT_VERSION}")
        for file_id, args, at in leases:
            self.leases.apply("grant_lease", int(file_id), tuple(args), float(at))
        self.state.replace_reservations(
            [(int(f), str(n), str(o), int(c), int(e), list(p)) for f, n, o, c, e, p in reservations]
        )
        self.state.replace_dirs([(str(p), str(o), str(g), int(m)) for p, o, g, m in dirs])
        for peer_id in set(self.state.drain_states()) - set(drains):
            self.registry.apply_drain_state(peer_id, "")
        for peer_id, drain_state in drains.items():
            self.registry.apply_drain_state(str(peer_id), str(drain_state))
        return len(dirs), len(drains)


def namespace_files(root: str | os.PathLike) -> list[tuple[str, int, str]]:
    """(name, file_id, owner) of every file in the namespace at ``root``, from
    each infofile's meta (a standby elected on the namespace its leader kept
    learns the files made before the log's window). Unreadable infofiles are
    logged and left out. Blocks: run it in a thread."""
    out = []
    top = Path(root)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if namespace.is_entry(d)]
        for fn in filenames:
            if not namespace.is_entry(fn):
                continue
            path = Path(dirpath) / fn
            name = "/" + path.relative_to(top).as_posix()
            try:
                r = InfofileReader(path)
                try:
                    meta = r.meta()
                finally:
                    r.close()
                out.append((name, int(meta.get("file_id", 0)), str(meta.get("owner", ""))))
            except (OSError, sqlite3.Error, ValueError) as e:
                log.warning("%s: infofile not readable (%s); left out of the files this tracker counts", name, e)
    return out
