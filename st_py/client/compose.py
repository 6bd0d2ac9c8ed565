"""Composing a name of committed records, with no byte copied
(docs/striping.md, "Composing an object"; GCS's compose, S3's
CompleteMultipartUpload): the records ``parts`` of one file, in order,
become the stripes of striped object ``name`` (or, for one part, record
``name``) in one tracker transaction. Each new stripe is committed under
its stripe name with the part's copies as they are on the peers
(``stored_as``: the part's stored name, the same holders by copy rank),
the parts' own names leave the file in the same transaction, and the
object's CRC-32C is combined from the parts' (:mod:`st_py.core.crc32c_combine`).
Nothing is read or written on a peer: the cost is one commit, whatever
the size.

The stripes of an object all have one size but the last, so the parts
must too (every part but the last of one size, the last no larger); the
file must have no filters (a filtered record's CRC-32C is of its stored
bytes, the object's of the user's); each part must have every copy
stored (none pending). Otherwise :class:`~st_py.errors.InvalidOptionError`
says which, and the caller copies instead.

Thread safety: runs inside its file's public methods, under the file's
lock, as the other parts do.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from st_py.client.file_context import FileContext
from st_py.client.record_writer import RecordWriter
from st_py.client.striping import object_commit
from st_py.client.versions import Versions
from st_py.core import user_meta
from st_py.core.crc32c_combine import combine_all
from st_py.core.infofile import ObjectMeta, RecordMeta, stripe_name
from st_py.core.record_names import check_new_name
from st_py.errors import InvalidOptionError, RecordExistsError, RecordNotFoundError

MAX_STRIPE = 64 << 20  # bytes: a stripe is a record, at most a peer's frame


def compose_problem(ctx: FileContext, metas: Sequence[RecordMeta]) -> str:
    """Why records ``metas`` (in order) cannot be composed in this file
    without a copy; "" if they can."""
    if ctx.filter_names:
        return f"{ctx.name} has filters ({', '.join(ctx.filter_names)}): its records' CRC-32Cs are of stored bytes"
    if not metas:
        return "no part"
    first = metas[0].size
    if len(metas) > 1 and not (0 < first <= MAX_STRIPE):
        return f"part {metas[0].name!r} is {first} bytes: a stripe is 1 byte to 64 MiB"
    for m in metas[1:-1]:
        if m.size != first:
            return f"part {m.name!r} is {m.size} bytes, not {first}: every part but the last must have one size"
    if len(metas) > 1 and metas[-1].size > first:
        return f"the last part {metas[-1].name!r} is larger than the others ({metas[-1].size} > {first})"
    for m in metas:
        if len(m.peers) != ctx.copies or (m.ranks and tuple(m.ranks) != tuple(range(ctx.copies))):
            return f"part {m.name!r} has {len(m.peers)} of its {ctx.copies} copies stored"
    return ""


def compose(
    ctx: FileContext,
    writer: RecordWriter,
    versions: Versions,
    name: str,
    parts: Sequence[str],
    *,
    replace: bool = False,
    meta: Mapping[str, str] | None = None,
    delete: Sequence[str] = (),
) -> ObjectMeta | RecordMeta:
    """:meth:`st_py.client.file.StFile.compose` (the public docstring)."""
    from st_py._proto import tracker_pb2 as pb
    from st_py.client.group_commit import conflicts_of
    from st_py.core.record_names import commit_conflict
    from st_py.wire.tracker_client import RESTART_GRACE

    ctx.check_open()
    meta_b = user_meta.encode(name, meta)  # refused before anything is committed
    check_new_name(name)
    writer.commit_all()  # this handle's puts before it go first: the parts among them
    found = ctx.live_infofile().lookup_many(list(parts))
    missing = [p for p in parts if p not in found]
    if missing:
        raise RecordNotFoundError(f"{len(missing)} parts of {name!r} are not committed in {ctx.name}: {missing[:3]}")
    metas = [found[p] for p in parts]
    why = compose_problem(ctx, metas)
    if why:
        raise InvalidOptionError(
            f"cannot compose {name!r} of these parts without copying them: {why}", option="parts", value=list(parts)
        )
    lease = versions.lease_for_put() if replace else ""
    one = len(metas) == 1
    records = [
        pb.RecordCommit(
            name=name if one else stripe_name(name, i),
            size=m.size,
            crc32c=m.crc32c,
            peer_idx=list(m.peers),
            logical_size=m.size,
            meta=(meta_b or b"") if one else b"",
            stored_as=m.key,  # the part's copies, where they are
            new_only=True,
        )
        for i, m in enumerate(metas)
    ]
    crc = combine_all((m.crc32c, m.size) for m in metas)
    obj = None if one else ObjectMeta(name, sum(m.size for m in metas), metas[0].size, len(metas), crc)
    reply = ctx.file_tracker_call(
        "commit",
        ctx.name,
        ctx.file_id,
        records,
        lease_id=lease,
        request_id=uuid.uuid4().hex,  # one id for every try: a retry after a restart applies once
        delete=([name] if replace else []) + [p for p in dict.fromkeys([*parts, *delete]) if p != name],
        grace=RESTART_GRACE,
        objects=[] if obj is None else [object_commit(obj, 0, meta_b or b"")],
    )
    if reply.conflicts:  # nothing of it was committed
        reason, kind, record = conflicts_of(reply).get(name, (reply.conflicts[0], "", ""))
        if kind:
            raise commit_conflict(ctx.name, name, reason, kind, record)
        raise RecordExistsError(
            f"composing {name!r} in {ctx.name} was refused ({'; '.join(reply.conflicts[:3])}); nothing was committed",
            names=[name],
        )
    if obj is not None:
        return obj
    m = metas[0]
    return RecordMeta(name, m.size, m.crc32c, m.peers, m.ranks, 0, m.key)


__all__ = ["compose", "compose_problem"]
