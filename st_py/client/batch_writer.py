"""The write batch path of an open file (docs/client.md, "Write batches").

:class:`BatchWriter` stores many records in one call: it checks every name
with the rules of ``put``, a slice at once (:meth:`RecordWriter.check_names_many`:
one look at the infofile, not one a record), applies the
file's filters, computes the CRC-32Cs in one call to the native extension
(GIL released), asks the infofile once for the whole slice which names may
hold a kept version's copies (:func:`st_py.core.history.names_with_copies`,
one query instead of one per record), places the records, frames each
peer's copies in one native call and sends them together
(:meth:`RecordWriter.send_batch`), then waits until every record of the
batch is acknowledged or failed. Acknowledgements, fail-over to spares and
the group commit are the ``queue_put`` path's, so a batch's record is
committed and visible exactly as a put one is.

What the fast path does not take goes through ``queue_put`` record by record,
with the same per-batch reporting: the ``chain`` protocols (one PUT_CHAIN a
record), and records over ``STRIPE_THRESHOLD`` (striped objects, as ``put``).
"""

from __future__ import annotations

from st_py.client.file_context import FileContext
from st_py.client.pending import Pending
from st_py.client.record_writer import STRIPE_THRESHOLD, RecordWriter
from st_py.client.striping import Objects
from st_py.core.history import names_with_copies
from st_py.errors import BatchWriteError, StoreTorrentError
from st_py.wire.transport import crc32c_many

# Records of a batch prepared and sent at once; the next slice is prepared
# while the peers store this one. Bounds the memory a batch adds (the
# copies framed and waiting) to two slices.
SLICE = 2048
SLICE_BYTES = 16 << 20


class BatchWriter:
    """Writes batches of records into one open file.

    Parameters
    ----------
    ctx : FileContext
    writer : RecordWriter
        The file's PUT pipeline, whose acknowledgement and commit path the
        batch's records take.
    objects : Objects
        Striped objects, for records over ``STRIPE_THRESHOLD``.

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock
    (threads writing batches to one handle take turns, batch by batch).
    """

    def __init__(self, ctx: FileContext, writer: RecordWriter, objects: Objects):
        self.ctx = ctx
        self.writer = writer
        self.objects = objects

    def write(self, names: list[str], datas: list) -> int:
        """Store records ``names[i]`` with ``datas[i]`` and wait until each
        is acknowledged or has failed: :meth:`st_py.client.file.StFile.write`
        (the public docstring). Returns the records acknowledged.

        Raises
        ------
        BatchWriteError
            Some records failed (names and errors in its fields).
        """
        ctx = self.ctx
        if len(names) != len(datas):
            raise ValueError(f"{len(names)} names and {len(datas)} data: one of each per record")
        ctx.check_open()
        ctx.renew_capability()
        ctx.check_may_write()
        self.writer.raise_quota()
        self.writer.slices.flush()  # the records queue_put queued before go first
        failures: list[tuple[str, Exception]] = []
        ops: list[Pending] = []  # each record's outcome
        big = [i for i, d in enumerate(datas) if len(d) > STRIPE_THRESHOLD]
        if big:  # striped objects, as put() stores them
            skip = set(big)
            for i in big:
                try:
                    self.objects.put_object(names[i], datas[i])
                except StoreTorrentError as e:
                    failures.append((names[i], e))
            names = [n for i, n in enumerate(names) if i not in skip]
            datas = [d for i, d in enumerate(datas) if i not in skip]
        waiter = _AllDone(ops)
        start = 0
        while start < len(names):
            end, nbytes = start, 0
            while end < len(names) and end - start < SLICE and nbytes < SLICE_BYTES:
                nbytes += len(datas[end])
                end += 1
            if ctx.chain:
                ops += self._queue_each(names[start:end], datas[start:end], failures)
            else:
                ops += self._queue_slice(names[start:end], datas[start:end], failures)
            start = end
            # at most two slices in flight: this one and the one being prepared
            ctx.transport.wait(lambda: waiter.pending() <= SLICE)
            ctx.committer.pump()
        ctx.transport.wait(lambda: waiter.pending() == 0)
        ctx.committer.pump()
        failed = {}
        for p in ops:
            exc = p.exception()  # done: no wait, no turn of the transport
            if exc is not None:
                failed[id(exc)] = exc
                failures.append((p.name, exc))
        if failed:  # told here: flush and close do not report them again
            kept = [(n, e) for n, e in ctx.errors if id(e) not in failed]
            ctx.errors.clear()
            ctx.errors.extend(kept)
        written = len(names) + len(big) - len(failures)
        if failures:
            order = {n: i for i, n in enumerate(names)}
            failures.sort(key=lambda f: order.get(f[0], -1))
            raise BatchWriteError(ctx.name, failures, written)
        return written

    def _queue_slice(self, names: list[str], datas: list, failures: list) -> list[Pending]:
        """Check, filter, CRC, place and send one slice (the fast path)."""
        ctx, writer = self.ctx, self.writer
        filters = ctx.filters
        c_names: list[str] = []
        c_names_b: list[bytes] = []
        c_datas: list[bytes] = []
        # every name checked at once: one look at the infofile for the slice
        ok, bad = writer.check_names_many(names, [len(d) for d in datas])
        failures += bad
        data_of: dict[str, bytes] = {}  # a name's first data: the one written (the rest: twice in one batch)
        for name, data in zip(names, datas):
            if isinstance(name, str) and name not in data_of:
                data_of[name] = data
        seen: set[str] = set()
        for name, name_b in ok:
            if name in seen:
                failures.append((name, writer_duplicate(ctx.name, name)))
                continue
            seen.add(name)
            data = data_of[name]
            c_names.append(name)
            c_names_b.append(name_b)
            c_datas.append(data if isinstance(data, bytes) else bytes(data))
        if not c_names:
            return []
        # the records' formats and schemas, of their plaintext, the slice at once
        schemas = writer.schemas_of(c_names, c_datas) if writer.keep_schemas else [None] * len(c_names)
        logical = [len(d) for d in c_datas]
        if filters:  # the peers store (and CRC) the filtered bytes
            c_datas = [filters.encode(ctx.file_id, n, d) for n, d in zip(c_names, c_datas)]
        crcs = crc32c_many(c_datas)
        try:
            reader = ctx.current_infofile()
            kept = names_with_copies(reader, c_names) if writer.retained.any_kept(reader) else set()
        except FileNotFoundError:  # no infofile yet: nothing kept
            kept = set()
        try:
            placed = writer.placer.place_many(c_names)  # the whole slice at once
        except StoreTorrentError as e:  # NotEnoughPeersError: no record of the slice can go
            failures += [(n, e) for n in c_names]
            return []
        ops = writer.batch_ops(c_names, c_names_b, c_datas, crcs, schemas, logical, kept, placed)
        writer.send_batch(ops)
        return [op.future for op in ops]

    def _queue_each(self, names: list[str], datas: list, failures: list) -> list[Pending]:
        """One slice through ``queue_put``, record by record (``chain``)."""
        out = []
        for name, data in zip(names, datas):
            try:
                out.append(self.writer.queue_put(name, data))
            except StoreTorrentError as e:
                failures.append((name, e))
        return out


def writer_duplicate(file: str, name: str) -> StoreTorrentError:
    """The error of a name given twice in one batch (write-once names)."""
    from st_py.errors import RecordExistsError

    return RecordExistsError(
        f"record {name!r} is given twice in one batch into {file}: records are write-once; the first is written",
        names=(name,),
    )


class _AllDone:
    """Counts the records of a batch not done yet, at most, in amortized
    O(1) a call: records are done in any order, and the count moves a
    cursor past the done ones in the batch's order."""

    def __init__(self, ops: list[Pending]):
        self.ops = ops
        self.cursor = 0

    def pending(self) -> int:
        ops, i = self.ops, self.cursor
        while i < len(ops) and ops[i].done():
            i += 1
        self.cursor = i
        return len(ops) - i


__all__ = ["BatchWriter", "SLICE", "SLICE_BYTES"]
