"""A standby's namespace made from a live replica's (issue 39;
docs/metadata-log.md, "Standbys that follow the log"): a standby with a
namespace of its own (``--own-namespace``) that is new, or was down longer
than the leader keeps the log's entries, cannot be brought forward from the
log alone. Instead of asking the operator to copy a replica's folders, it
copies the namespace from a live tracker of its cluster, as HDFS's
bootstrapStandby copies the active NameNode's image, then follows the log
from the checkpoint it started from:

1. the last checkpoint of the tracker's own state kept in etcd (``C``: the
   state as of entry ``C``; the entries after it are still in the log, and
   the leader compacts nothing a registered follower still needs);
2. every file the replica lists, each infofile fetched whole
   (FetchInfofile's snapshot: one committed state, its ``meta.log_index``
   saying which entries it has, so following skips them); local infofiles
   the replica does not list are removed;
3. the checkpoint's state (directories, drains, leases, reservations) and
   the files are this tracker's; it follows the log from ``C + 1``.

The calls carry a TRACKER capability signed with the cluster's key
(``--key-file``), which the replica takes as another tracker of the
cluster (st_py/tracker/rpc/identity.py): without a key there is no way to
tell a tracker from anyone, and the standby is refused as before
(StandbyBehindError).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core import namespace

from .guard import disk_mode, owner_of_meta, set_disk_mode
from .infofile_fetch import crc32c_extend
from .log.errors import StandbyBehindError
from .shards import TRACKER_USER_PREFIX, InternalTokens
from .tracker_ops import namespace_files

if TYPE_CHECKING:
    from .service import TrackerService

log = logging.getLogger("st.tracker")

CALL_TIMEOUT_S = 60.0


class BootstrapError(StandbyBehindError):
    """The namespace could not be copied from any live replica (``why``:
    each one tried and its error); the standby stops, nothing served."""

    def __init__(self, followed: int, first: int, why: str):
        super().__init__(followed, first)
        self.args = (f"{self.args[0]}; copying a live replica's namespace failed too: {why}",)
        self.why = why


async def copy_namespace(
    service: TrackerService,
    own_addr: str,
    key: bytes | None,
    channel_for: Callable[[str], grpc.aio.Channel],
    behind: StandbyBehindError,
) -> int:
    """Make ``service``'s namespace and state a live replica's (module
    docstring); returns the log index to follow from (the checkpoint's).

    Raises
    ------
    StandbyBehindError
        ``behind`` again when there is no key or no checkpoint to start from;
        :class:`BootstrapError` when no replica could be copied.
    """
    backend = service.oplog.backend
    cp = await backend.load_checkpoint()
    replicas = getattr(backend, "replicas", None)
    if key is None or cp is None or replicas is None:
        raise behind
    index, blob = cp
    view = await replicas.view()
    sources = [t["addr"] for t in view.trackers if t["addr"] != own_addr and t["role"] == "leader"]
    sources += [
        t["addr"]
        for t in view.trackers
        if t["addr"] != own_addr and t["role"] != "leader" and int(t.get("applied_index", 0)) >= index
    ]
    md = InternalTokens(key).metadata(TRACKER_USER_PREFIX + own_addr)
    errors = []
    for addr in sources:
        channel = channel_for(addr)
        try:
            stub = pb_grpc.TrackerStub(channel)
            names = await _list_files(stub, md)
            root = Path(service.root)
            for name in names:
                await _fetch(stub, md, name, namespace.infofile_path(root, name))
            wanted = {namespace.infofile_path(root, n) for n in names}
            for _, path in await asyncio.to_thread(_local_infofiles, root):
                if path not in wanted:
                    path.unlink(missing_ok=True)
            log.info(
                "namespace copied from the replica %s: %d files; following the metadata log from entry %d",
                addr,
                len(names),
                index + 1,
            )
            break
        except (grpc.aio.AioRpcError, OSError, sqlite3.Error, ValueError) as e:
            why = e.details() if isinstance(e, grpc.aio.AioRpcError) else str(e)
            errors.append(f"{addr}: {why}")
            log.warning("could not copy the namespace from %s (%s): trying the next replica", addr, why)
        finally:
            await channel.close()
    else:
        raise BootstrapError(behind.followed, behind.first, "; ".join(errors) or "no live replica is listed")
    service.tracker_ops.restore(blob)
    files = await asyncio.to_thread(namespace_files, Path(service.root))
    service.state.replace_files(files)
    service._recount_usage = True
    return index


async def _list_files(stub: pb_grpc.TrackerStub, md) -> list[str]:
    """Every file of the replica's namespace (List, names only, folder by folder)."""
    out: list[str] = []
    todo = ["/"]
    while todo:
        path = todo.pop()
        reply = await stub.List(pb.ListRequest(path=path, names_only=True), metadata=md, timeout=CALL_TIMEOUT_S)
        for e in reply.entries:
            (todo if e.is_dir else out).append(e.name)
    return sorted(out)


async def _fetch(stub: pb_grpc.TrackerStub, md, name: str, path: Path) -> None:
    """File ``name``'s infofile, whole, to ``path`` (a temporary file
    renamed over it, with the mode its owner's mode gives it on disk)."""
    call = stub.FetchInfofile(pb.FetchInfofileRequest(name=name), metadata=md, timeout=CALL_TIMEOUT_S)
    head = None
    parts: list[bytes] = []
    async for m in call:
        if head is None:
            head = m
        else:
            parts.append(m.data)
    if head is None or head.kind != "snapshot":
        raise ValueError(f"FetchInfofile of {name} sent {head.kind if head else 'nothing'}, not a snapshot")
    data = b"".join(parts)
    crc = crc32c_extend(0, data)
    if len(data) != head.total_size or crc != head.crc32c:
        raise ValueError(f"the infofile of {name} arrived damaged ({len(data)} of {head.total_size} bytes)")
    await asyncio.to_thread(_write, path, data)


def _write(path: Path, data: bytes) -> None:
    for d in reversed(path.parents):
        if not d.exists():
            d.mkdir(mode=disk_mode(0o755, True))
    tmp = path.with_name(f".{path.name}.bootstrap")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    conn = sqlite3.connect(f"file:{tmp}?mode=ro", uri=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
    finally:
        conn.close()
    set_disk_mode(tmp, owner_of_meta(meta).mode, False)
    os.replace(tmp, path)


def _local_infofiles(root: Path) -> list[tuple[str, Path]]:
    return [(name, namespace.infofile_path(root, name)) for name, _, _ in namespace_files(root)]
