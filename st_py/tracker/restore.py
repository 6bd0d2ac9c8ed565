"""RestoreInfofile: an infofile copied from a peer's mirror goes back into the
namespace (recovery without the namespace, issue 13; docs/operations.md,
"Recovering a lost namespace").

The client streams the infofile's bytes in chunks (the first names the user,
the total size and the CRC-32C of the whole). The tracker writes them to a
temporary file in the namespace root (``.st-creating-restore-*``: skipped by
peers and listings, removed at start like a half-created infofile), checks
that the bytes are whole and that the file is a sound storetorrent-infofile,
and links it at the path of its ``meta.name`` if nothing is there:

- ``restored``: the name was free; the infofile is there now.
- ``present``: an infofile of the same file id at the same or a newer
  generation holds the name (a repeated recovery, or a namespace that was
  not entirely lost); nothing changed.
- ``conflict``: something else holds the name (another file, an older
  generation of this one, or a file that is not an infofile); nothing was
  overwritten.

Only admins may restore when a users file is in force (anyone in
development mode, where every user is trusted by name). The restored file id
is remembered in the tracker's state, so no new file ever gets it, and any
state the tracker cached for the name (its committer, its peer ids) is
dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import google_crc32c
import grpc

from st_py._proto import tracker_pb2 as pb
from st_py.core import namespace
from st_py.core.infofile import FORMAT, InfofileReader
from st_py.errors import BadNameError

from .access import User
from .guard import disk_mode, owner_of_meta

log = logging.getLogger("st.tracker")

MAX_CHUNK = 4 << 20  # a chunk is at most a gRPC message
MAX_INFOFILE = 1 << 40


@dataclass
class _Checked:
    file_id: int
    generation: int
    name: str
    meta: dict
    bytes: int  # user bytes committed (one copy)


def _check_infofile(path: Path) -> _Checked:
    """What the infofile at ``path`` is; ValueError saying why it is not a
    sound storetorrent-infofile."""
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as e:
        raise ValueError(f"cannot open it as SQLite: {e}") from None
    try:
        check = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if check != ["ok"]:
            raise ValueError(f"SQLite integrity check failed: {'; '.join(map(str, check[:3]))}")
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"meta.format is {meta.get('format')!r}, not {FORMAT!r}")
        try:
            file_id, generation = int(meta["file_id"]), int(meta["generation"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("meta.file_id or meta.generation is missing or not a number") from None
        if file_id <= 0:
            raise ValueError(f"meta.file_id {file_id} is not a file id")
        try:
            name = namespace.normalize(str(meta.get("name", "")))
        except BadNameError as e:
            raise ValueError(f"meta.name: {e}") from None
        size = conn.execute("SELECT coalesce(sum(size), 0) FROM records").fetchone()[0]
        return _Checked(file_id, generation, name, meta, int(size))
    except sqlite3.Error as e:
        raise ValueError(f"not a readable infofile: {e}") from None
    finally:
        conn.close()


def _present(path: Path) -> tuple[int, int]:
    """(file id, generation) of the infofile at ``path``; (0, 0) if it is not
    one."""
    try:
        r = InfofileReader(path)
    except (OSError, sqlite3.Error):
        return 0, 0
    try:
        meta = r.meta()
        if meta.get("format") != FORMAT:
            return 0, 0
        return int(meta["file_id"]), int(meta["generation"])
    except (sqlite3.Error, KeyError, ValueError):
        return 0, 0
    finally:
        r.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _place(tmp: Path, target: Path, mode: int) -> bool:
    """Link ``tmp`` at ``target`` (False if something is there: nothing is
    replaced), with the permission bits of ``mode``; durable when it returns."""
    os.chmod(tmp, disk_mode(mode, False))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(tmp, target)  # atomic, and refuses to replace anything
    except FileExistsError:
        return False
    _fsync_dir(target.parent)
    return True


async def restore_infofile(service, request_iterator, context) -> pb.RestoreInfofileReply:
    """The RestoreInfofile RPC of :class:`st_py.tracker.service.TrackerService`."""
    root = Path(service.root)
    tmp = root / f"{namespace.TMP_PREFIX}restore-{os.getpid()}-{time.monotonic_ns()}"
    user: User | None = None
    total = crc = got = 0
    running = 0
    dry_run = False
    f = None
    try:
        async for chunk in request_iterator:
            if user is None:
                user = await service.authenticate(context, chunk.user)
                if service.users.enabled and not user.admin:
                    await context.abort(
                        grpc.StatusCode.PERMISSION_DENIED,
                        f"user {user.name} may not restore infofiles: only an admin may "
                        "(storetorrent user add NAME --admin)",
                    )
                total, crc, dry_run = chunk.total_size, chunk.crc32c, chunk.dry_run
                if total > MAX_INFOFILE:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"an infofile of {total:,} bytes is beyond what a restore takes",
                    )
                f = open(tmp, "xb")
            if len(chunk.data) > MAX_CHUNK or got + len(chunk.data) > total:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"more bytes than the {total:,} announced")
            assert f is not None  # opened with the first chunk
            f.write(chunk.data)
            running = google_crc32c.extend(running, chunk.data)
            got += len(chunk.data)
        if user is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no infofile sent")
        assert f is not None
        f.flush()
        os.fsync(f.fileno())
        f.close()
        f = None
        if got != total or running != crc:
            await context.abort(
                grpc.StatusCode.DATA_LOSS,
                f"received {got:,} of {total:,} bytes with CRC-32C {running:08x}, expected "
                f"{crc:08x}: the infofile was damaged on its way; send it again",
            )
        try:
            info = await asyncio.to_thread(_check_infofile, tmp)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a sound storetorrent-infofile: {e}")
        if dry_run:
            return await asyncio.to_thread(_dry_run, service, target_of(service, info), info)
        assert user is not None  # the first chunk named it
        return await _restore(service, tmp, info, user)
    finally:
        if f is not None:
            f.close()
        tmp.unlink(missing_ok=True)


def target_of(service, info: _Checked) -> Path | str:
    """Where ``info``'s infofile goes in the namespace, or why it cannot
    (a bad name; a parent that is a file, which cannot become a directory)."""
    try:
        target = namespace.infofile_path(service.root, info.name)
    except BadNameError as e:
        return str(e)
    parent = target.parent
    while parent != Path(service.root) and not parent.exists():
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        return f"{info.name}: /{parent.relative_to(service.root)} is a file, not a directory"
    return target


def _held(reply: pb.RestoreInfofileReply, target: Path, file_id: int, gen: int) -> None:
    """Fill ``reply`` for a name something holds already: ``present`` (this
    file at this or a newer generation) or ``conflict``."""
    pid, pgen = _present(target)
    reply.present_file_id, reply.present_generation = pid, pgen
    if pid == file_id and pgen >= gen:
        reply.outcome = "present"
        reply.detail = f"{reply.name} is there at generation {pgen}"
    else:
        reply.outcome = "conflict"
        reply.detail = (
            f"{reply.name} is held by file {pid:016x} at generation {pgen}"
            if pid
            else f"{reply.name} is held by something that is not an infofile"
        )


def _dry_run(service, target: Path | str, info: _Checked) -> pb.RestoreInfofileReply:
    """What :func:`_restore` would answer, writing nothing: ``missing``
    where it would restore the file."""
    reply = pb.RestoreInfofileReply(name=info.name, file_id=info.file_id, generation=info.generation)
    if isinstance(target, str):
        reply.outcome, reply.detail = "conflict", target
    elif target.exists() or target.is_symlink():
        _held(reply, target, info.file_id, info.generation)
    else:
        reply.outcome, reply.detail = "missing", f"{info.name} would be restored at generation {info.generation}"
    return reply


async def _restore(service, tmp: Path, info: _Checked, user: User) -> pb.RestoreInfofileReply:
    name, file_id, gen = info.name, info.file_id, info.generation
    reply = pb.RestoreInfofileReply(name=name, file_id=file_id, generation=gen)
    target = target_of(service, info)
    if isinstance(target, str):
        reply.outcome, reply.detail = "conflict", target
        return reply
    o = owner_of_meta(info.meta)
    new_dirs = [d for d in namespace.ancestors(name) if not namespace.dir_path(service.root, d).is_dir()]
    try:
        with service.creating(name):  # RemoveDir keeps its directories
            placed = await asyncio.to_thread(_place, tmp, target, o.mode)
    except NotADirectoryError:
        reply.outcome, reply.detail = "conflict", f"a parent of {name} is a file, not a directory"
        return reply
    if not placed:
        await asyncio.to_thread(_held, reply, target, file_id, gen)
        if reply.outcome == "conflict":
            log.warning(
                "restore of %s (file %x, generation %d) refused: %s; nothing overwritten",
                name,
                file_id,
                gen,
                reply.detail,
            )
        service.state.remember_file_id(file_id)
        return reply
    # The tracker's view of the name starts afresh from the restored file (and so does the view
    # of the per-file tracker that writes it, if another does).
    await service.forget_file(name)
    service.forget_peer_ids(file_id)
    service.state.remember_file_id(file_id)
    service.state.add_file(name, file_id, o.owner)
    for d in new_dirs:
        if service.state.dir_owner(d) is None:
            service.guard.made_dirs(User(o.owner, (o.group,) if o.group else ()), [d])
    service.guard.charge(o.owner, info.bytes * int(info.meta.get("copies", 1) or 1))
    # what the log holds beyond the copy: the changes acknowledged after the mirror was taken
    rep = await service.replay_log(file_id)
    if rep.applied:
        # those changes' bytes: the quota charge follows the infofile as it is now
        after = await asyncio.to_thread(_check_infofile, target)
        service.guard.charge(o.owner, (after.bytes - info.bytes) * int(info.meta.get("copies", 1) or 1))
        gen = int(after.meta.get("generation", gen))
    reply.outcome = "restored"
    reply.detail = f"{name} restored at generation {gen}" + (
        f" ({rep.applied} changes after the copy applied from the metadata log)" if rep.applied else ""
    )
    log.info("%s restored %s (file %x, generation %d, owner %s)", user.name, name, file_id, gen, o.owner)
    return reply
