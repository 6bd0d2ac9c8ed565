"""Replacing a name whose current or new version is a striped object
(docs/striping.md, "Replacing an object").

A record replaced by a record is a new version stored under a name of its
own and committed under the file's writer lease (:mod:`st_py.client.versions`).
When either side is a striped object (a record over 64 MiB, or an object
replaced by anything) the name's new bytes are one or many records: the
object's stripes are named by the object (``.st-stripe/<name>/<i>``), the
same names as the current object's. :class:`Replacing` stores them as
*staged* records of a twin handle of the file (stored on every holder under
names of their own, ``.st-version/new-.../...``, nothing committed), then
sends one Commit that removes the current version (a record, or an object
with its stripes: they become history, docs/snapshots.md) and commits the
new records and the new object's row, in one tracker transaction, under the
writer lease. Readers see the old version or the new one, never a mix, and
never the name missing; an object that cannot be committed commits nothing
of the request (the old version stays). A replacement that fails before
its commit leaves the current version as it was; the copies it stored are
never committed, and the peers' scrubbers remove them.

Thread safety: runs inside its file's public methods, under the file's
lock, as the other parts do.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from st_py.client.file_context import FileContext
from st_py.client.pending import Pending
from st_py.client.record_writer import STRIPE_THRESHOLD, RecordWriter
from st_py.client.striping import DEFAULT_STRIPE_SIZE, STRIPES_IN_FLIGHT, Objects, object_commit
from st_py.client.versions import Versions
from st_py.core import user_meta
from st_py.core.infofile import ObjectMeta
from st_py.core.record_names import check_new_name
from st_py.errors import BadNameError, RecordExistsError, StoreTorrentError


@dataclass(frozen=True)
class StagedTwin:
    """A second handle of the same file in staged mode (its records stored,
    not committed), with the parts a replacement writes through: ``file``
    (an ``StFile``, closed by the replacement), its ``writer`` and its
    ``objects``."""

    file: Any
    writer: RecordWriter
    objects: Objects


def is_object_data(data: bytes | BinaryIO) -> bool:
    """Whether ``data`` is stored as a striped object: over
    ``STRIPE_THRESHOLD`` bytes, or a readable stream (its size unknown)."""
    return not isinstance(data, (bytes, bytearray, memoryview)) or len(data) > STRIPE_THRESHOLD


class Replacing:
    """Replaces names of one open file when a striped object is involved.

    Parameters
    ----------
    ctx : FileContext
    writer : RecordWriter
        The file's own pipeline (its puts before a replacement are committed first).
    versions : Versions
        The file's writer lease, which a replacement holds.
    twin : callable
        Makes a :class:`StagedTwin` of the file.
    """

    def __init__(self, ctx: FileContext, writer: RecordWriter, versions: Versions, twin: Callable[[], StagedTwin]):
        self.ctx = ctx
        self.writer = writer
        self.versions = versions
        self.twin = twin

    def needed(self, name: str, data: bytes | BinaryIO) -> bool:
        """Whether a ``put(name, data, replace=True)`` takes this path: the
        name holds a striped object, or the new bytes are one."""
        return is_object_data(data) or self.ctx.infofile().object(name) is not None

    def replace(
        self,
        name: str,
        data: bytes | BinaryIO,
        meta: Mapping[str, str] | None = None,
        stripe_size: int = DEFAULT_STRIPE_SIZE,
        stripe_width: int | None = None,
        local_share: float = 1.0,
        in_flight: int = STRIPES_IN_FLIGHT,
        as_object: bool | None = None,
    ) -> ObjectMeta | None:
        """Make ``data`` the version of ``name`` (a record or an object now,
        or nothing), at once: a striped object when ``as_object`` (None:
        when :func:`is_object_data`), else a record. Returns the new
        object's :class:`ObjectMeta`, or None for a record.

        Raises
        ------
        BadNameError, MetadataTooLargeError, BadMetadataError
            Refused before any byte is stored.
        LeaseHeldError, LeaseLostError
            Another writer holds the file's writer lease; this one's ran out.
        NotEnoughPeersError, PeerError, StoreTorrentError
            A record or stripe could not be stored: nothing is committed,
            the current version stays.
        RecordExistsError, RecordIsADirectoryError, RecordNotADirectoryError
            The tracker refused the commit (a folder in the way, an object
            whose stripes did not all arrive): nothing is committed.
        """
        from st_py.client.group_commit import conflicts_of, schema_table
        from st_py.core.record_format import written_object_schema
        from st_py.core.record_names import commit_conflict
        from st_py.wire.tracker_client import RESTART_GRACE

        ctx = self.ctx
        ctx.check_open()
        meta_b = user_meta.encode(name, meta)  # refused before any byte is stored
        check_new_name(name)
        if stripe_size <= 0 or stripe_size > 64 << 20:
            raise BadNameError(f"stripe_size {stripe_size} must be 1 byte to 64 MiB")
        if in_flight < 1:
            raise BadNameError(f"in_flight {in_flight} must be at least 1 stripe")
        self.writer.commit_all()  # this handle's puts before it go first
        lease = self.versions.lease_for_put()
        twin = self.twin()
        obj: tuple | None = None
        try:
            if is_object_data(data) if as_object is None else as_object:
                queued: list[Pending] = []
                size, n, crc, head, tail = twin.objects.store_stripes(
                    name, data, stripe_size, stripe_width, local_share, in_flight, queued, own_name=True
                )
                schema = written_object_schema(name, head, tail) if self.writer.keep_schemas else None
                obj = (size, n, crc, schema)
            else:
                raw = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data.read()
                twin.writer.queue_put(name, raw, meta=meta, own_name=True).result()
            staged = twin.writer.staged_records()  # acknowledged by every holder, not committed
        except BaseException:
            _close_quietly(twin.file)
            raise
        twin.file.close()
        schemas, refs = schema_table(list(staged.schemas) + ([obj[3]] if obj is not None else []))
        new = None if obj is None else ObjectMeta(name, obj[0], stripe_size, obj[1], obj[2])
        objects = [] if new is None else [object_commit(new, refs[-1], meta_b)]
        reply = ctx.file_tracker_call(
            "commit",
            ctx.name,
            ctx.file_id,
            staged.record_commits(refs[: len(staged)]),
            lease_id=lease,
            request_id=uuid.uuid4().hex,  # one id for every try: a retry after a restart applies once
            delete=[name],
            schemas=schemas,
            grace=RESTART_GRACE,
            objects=objects,
        )
        if reply.conflicts:  # nothing of it was committed: the current version stays
            reason, kind, record = conflicts_of(reply).get(name, (reply.conflicts[0], "", ""))
            if kind:
                raise commit_conflict(ctx.name, name, reason, kind, record)
            raise RecordExistsError(
                f"the replacement of {name!r} in {ctx.name} was refused ({'; '.join(reply.conflicts[:3])}); "
                "nothing was committed",
                names=[name],
            )
        return new


def _close_quietly(f) -> None:
    """Close a twin whose writes failed: their failure is the news, not the close's."""
    try:
        f.close()
    except (StoreTorrentError, OSError):
        pass


__all__ = ["Replacing", "StagedTwin", "is_object_data"]
