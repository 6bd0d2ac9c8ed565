"""Consecutive ``queue_put`` calls of a file ride the write batch path
(issue 41; docs/client.md, "queue_put slices").

:class:`PutSlices` holds the records ``queue_put`` has checked and placed
but not yet sent (a *slice*) and sends them together, as
:class:`st_py.client.batch_writer.BatchWriter` sends a slice of a write
batch: their formats and schemas in one call, the file's filters, the
CRC-32Cs in one call to the native extension, one infofile query for the
names that may hold a kept version's copies, and the copies for each peer
framed in one native call (:meth:`RecordWriter.send_batch`).

Everything ``queue_put`` raises is still raised at that call, before the
record joins the slice: a closed or read-only file, the capability, a
quota refusal met before, the user metadata, the name (write-once, folders,
reserved prefixes, this handle's puts in flight, buffered ones included),
a missing encryption key and the placement (``NotEnoughPeersError``). What
is left for the send (schemas, filters, CRCs, framing) fails no record in
practice; if it did, every record of the slice fails with that error
through its :class:`Pending`, its callback and ``flush`` (never silently).

A slice is sent when it holds ``slice_records()`` records (half the file's
``depth``, so one slice is prepared while the other is stored) or
``SLICE_BYTES`` bytes; when its oldest record has waited ``LINGER``
seconds, at the next call; and whenever the caller waits: ``poll``,
``flush``, ``close``, ``put``, a :class:`Pending`'s ``result`` or
``exception``, any other kind of write. Records in a slice count as in
flight (``StFile.inflight``, the ``depth`` bound). When ``depth`` records
are in flight, ``queue_put`` sends the slice and waits until a slice's
worth of room is free, not one record's: the next slice then fills
without a turn of the transport per record.

Only plain new records ride it: not ``replace=True`` (a version, under the
writer lease), not the stripes of an object, and not the ``chain``
protocols (one PUT_CHAIN a record); those go record by record as before,
after the slice waiting is sent (the order of the puts is kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from st_py.client.file_context import FileContext
from st_py.client.pending import Pending
from st_py.core.history import names_with_copies
from st_py.wire.transport import crc32c_many

# Bytes of records in one slice at most (the frames go out at once; larger
# records gain nothing from riding together).
SLICE_BYTES = 1 << 20
# Records in one slice at most, whatever the depth (the write batch's slice).
SLICE_MAX = 2048
# Seconds the oldest record of a slice waits for more before the next call
# sends it (docs/benchmarks.md, "queue_put one record at a time": in a
# tight loop the size sends every slice; this bounds the wait of a slow writer).
LINGER = 0.002


class PutSlices:
    """The slice of ``queue_put`` records of one open file not yet sent.

    Parameters
    ----------
    ctx : FileContext
    writer : RecordWriter
        The file's PUT pipeline: its name check and placement come before a
        record joins the slice, its acknowledgements and commits after.

    Thread safety: runs under its file's lock (``queue_put`` and every
    other public method of ``StFile``; :meth:`wait` takes it), like its
    writer.
    """

    def __init__(self, ctx: FileContext, writer) -> None:
        self.ctx = ctx
        self.writer = writer
        self._buf: list[tuple] = []
        self._bytes = 0
        self._since = 0.0  # monotonic time the oldest record of the slice joined it
        self.sent = 0  # slices sent by this handle (StFile.put_slices)
        self.records = 0  # records sent in them

    def slice_records(self) -> int:
        """Records a slice holds at most: half the file's ``depth`` (at least 1)."""
        return max(1, min(self.ctx.depth // 2, SLICE_MAX))

    def add(
        self,
        name: str,
        name_b: bytes,
        data: bytes,
        callback: Callable[[str, Exception | None], None] | None,
        meta_b: bytes,
    ) -> Pending:
        """Place record ``name`` (checked by :meth:`RecordWriter.check_name`)
        and add it to the slice, sending the slice if it is full; returns
        its :class:`Pending`. Waits while ``depth`` records are in flight.

        Raises
        ------
        NotEnoughPeersError
            Fewer usable peers than the file's class needs (nothing is queued).
        """
        ctx, writer = self.ctx, self.writer
        if ctx.puts_inflight + ctx.gets_inflight >= ctx.depth:
            self.flush()  # the pipeline is full: send what waits, then make a slice's room
            low = max(0, ctx.depth - self.slice_records())
            while ctx.puts_inflight + ctx.gets_inflight > low:
                ctx.poll(0.05)
        holders = writer.placer.place(name)
        fut = Pending(self.wait, name)
        seq = writer.reserve(name)
        ctx.puts_inflight += 1
        buf = self._buf
        now = time.monotonic()
        if not buf:
            self._since = now
        buf.append((name, name_b, data, holders, fut, callback, meta_b, seq))
        self._bytes += len(data)
        if len(buf) >= self.slice_records() or self._bytes >= SLICE_BYTES or now - self._since >= LINGER:
            self.flush()
        return fut

    def flush(self) -> None:
        """Send the slice waiting, if any (its frames go out with this call's poll)."""
        buf = self._buf
        if not buf:
            return
        self._buf, self._bytes = [], 0
        ctx, writer = self.ctx, self.writer
        from st_py.client.record_writer import PutOp, new_put

        names = [b[0] for b in buf]
        datas = [b[2] for b in buf]
        try:
            schemas = writer.schemas_of(names, datas) if writer.keep_schemas else [None] * len(buf)
            logical = [len(d) for d in datas]
            filters = ctx.filters
            if filters:  # the peers store (and CRC) the filtered bytes
                datas = [filters.encode(ctx.file_id, n, d) for n, d in zip(names, datas)]
            crcs = crc32c_many(datas)
            try:
                reader = ctx.current_infofile()
                kept = names_with_copies(reader, names) if writer.retained.any_kept(reader) else set()
            except FileNotFoundError:  # no infofile yet: nothing kept
                kept = set()
        except Exception as e:  # every record of the slice fails with it, told as any failed put
            for name, name_b, data, holders, fut, callback, _meta_b, seq in buf:
                op = PutOp(name, name_b, data, len(data), 0, holders, future=fut, callback=callback, seq=seq)
                writer.fail_put(op, e)
            return
        ops = []
        for (name, name_b, _, holders, fut, callback, meta_b, seq), data, crc, schema, size in zip(
            buf, datas, crcs, schemas, logical
        ):
            op = new_put(name, name_b, data, crc, holders, fut, schema, size, seq, callback, meta_b)
            if name in kept and not writer.plain_name_free(op):
                writer.take_own_name(op)  # a kept version's copies under its name, not all met
            ops.append(op)
        self.sent += 1
        self.records += len(ops)
        writer.send_batch(ops, counted=True)

    def wait(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """A :class:`Pending`'s wait: send the slice (under the file's
        lock), then turn the transport until ``done()``."""
        if self._buf:
            with self.ctx.lock:
                self.flush()
        self.ctx.transport.wait(done, timeout)


__all__ = ["PutSlices", "SLICE_BYTES", "SLICE_MAX", "LINGER"]
