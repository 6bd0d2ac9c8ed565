"""GET with failover (paper 3.6): the read side of an open file.

Reads the infofile for a record's copies, asks one holder at a time (never
all at once, to avoid incast), verifies the CRC-32C and falls back to the
next copy on any error. Which copy first is load-aware (CEFT, seed 001
section 5: "hot-spot skipping" and "doubling the degree of parallelism";
docs/replication.md, "Load-aware reads"): the holder with the fewest of this
client's requests in flight, weighed with the load it announced, and a
holder that has become a hot spot (its replies much slower than the other
holders') is asked last. A batch of ``queue_get`` thus spreads over every
copy instead of piling on rank 0 (equally loaded copies take turns).
``balance_reads=False`` keeps the paper's copy-rank order. A file with hash placement
stays readable when its infofile cannot be read: the holders follow from the
record's name (st_py.core.placement.hash_ranking). :class:`RecordReader` reads
for one open file (:class:`st_py.client.file.StFile` delegates to it), through the
file's context (:class:`st_py.client.file_context.FileContext`): the transport,
the peerlist and the pipeline depth shared with PUTs.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable

from st_py.client.file_context import FileContext
from st_py.client.pending import Pending
from st_py.core.copy_health import unavailable_error, without_stored_copy
from st_py.core.infofile import ObjectMeta, ObjectVersion, RecordMeta, object_version, stripe_name
from st_py.core.placement import hash_ranking
from st_py.errors import (
    ChecksumError,
    PeerError,
    RecordNotFoundError,
    RecordUnavailableError,
    SnapshotExpiredError,
    StoreTorrentError,
)
from st_py.wire.protocol import ErrorCode, crc32c, encode_get

log = logging.getLogger("st.client")

# Load-aware reads: a score per copy holder, lowest first.
LOAD_WEIGHT = 8.0  # an announced load of 1.0 (a saturated peer) counts as 8 requests in flight
HOT_FACTOR = 4.0  # a holder whose GETs take 4x the typical holder's is a hot spot ...
HOT_FLOOR_S = 0.02  # ... and at least 20 ms
HOT_PENALTY = 1000.0  # then it is asked only after every other copy
LATENCY_ALPHA = 0.2  # smoothing of each holder's GET time
HOT_MEMORY_S = 3.0  # a holder's GET time is forgotten this long after its last GET
HOT_REFRESH_S = 0.05  # the hot spots are worked out again at most this often
GET_COALESCE_BYTES = 2048  # queued GET frames go out together once this many bytes wait (about 40)


class RecordReader:
    """GETs of one open file: owns the read side's state, the GETs' order
    of copies (each holder's smoothed GET time, the hot spots, whose turn
    a tie is) and whether reads are load-aware (:attr:`balance_reads`).

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock.
    """

    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.balance_reads = True  # False: copy-rank order (the paper's)
        self._warned_unreadable = False  # logged once per file that its infofile could not be read
        self._latency: dict[int, tuple[float, float]] = {}  # peer_idx -> (smoothed s per GET, when last seen)
        self._turn = -1
        self._hot: tuple[float, frozenset] | None = None

    def _read_order(self, holders: list[int]) -> list[int]:
        """The copies to ask, best first (see the module docstring)."""
        ctx = self.ctx
        usable = [i for i in holders if ctx.peer_usable(i)]
        if not self.balance_reads or len(usable) < 2:
            return usable + [i for i in holders if i not in usable]
        rest = [i for i in holders if i not in usable] if len(usable) < len(holders) else []
        # Ties go round the copies, GET after GET: a batch uses every copy.
        self._turn += 1
        turn = self._turn
        hot = self._hot_peers()
        n = len(usable)
        scored = []
        for pos, i in enumerate(usable):
            s = ctx.transport.in_flight_to(ctx.addr(i)) + LOAD_WEIGHT * getattr(ctx.peers[i], "load", 0.0)
            if i in hot:
                s += HOT_PENALTY  # a hot spot: only if no other copy answers
            scored.append((s, (pos - turn) % n, i))
        scored.sort()
        return [i for _, _, i in scored] + rest

    def _hot_peers(self) -> frozenset:
        """Holders whose recent GETs took ``HOT_FACTOR`` times the typical
        holder's: recomputed at most every ``HOT_REFRESH_S`` (it is per
        GET otherwise, and the latencies move slowly)."""
        now = time.monotonic()
        cached = self._hot
        if cached is not None and now - cached[0] < HOT_REFRESH_S:
            return cached[1]
        # a skipped hot spot is tried again after a while
        lat = {i: v for i, (v, at) in self._latency.items() if now - at < HOT_MEMORY_S}
        known = sorted(lat.values())
        typical = known[len(known) // 2] if known else 0.0
        hot = frozenset(i for i, v in lat.items() if typical > 0 and v > max(HOT_FACTOR * typical, HOT_FLOOR_S))
        self._hot = (now, hot)
        return hot

    def _observe(self, idx: int, seconds: float) -> None:
        lat = self._latency
        now = time.monotonic()
        old = lat.get(idx)
        if old is None or now - old[1] >= HOT_MEMORY_S:
            lat[idx] = (seconds, now)
        else:
            lat[idx] = (old[0] + LATENCY_ALPHA * (seconds - old[0]), now)

    def queue_get(
        self,
        name: str,
        callback: Callable[[str, bytes | None, Exception | None], None] | None = None,
        *,
        stored: bool = False,
    ) -> Pending:
        """Queue a GET of record ``name``: :meth:`st_py.client.file.StFile.queue_get` (the public docstring)."""
        ctx = self.ctx
        ctx.check_open()
        ctx.renew_capability()
        if ctx.committer.busy:
            ctx.committer.drain()  # read your own writes
        fut = Pending(ctx.transport.wait, name)
        try:
            meta = ctx.live_infofile().lookup(name)  # live: every commit acknowledged before this GET
            if meta is None and ctx.as_of is None and ctx.infofile().object(name) is None and ctx.refresh_infofile():
                meta = ctx.infofile().lookup(name)  # a local copy behind: asked once for newer changes
            holders = list(meta.peers) if meta is not None else []
        except (OSError, sqlite3.Error) as e:
            if not ctx.hash_placement:
                raise
            if not self._warned_unreadable:
                log.warning("%s: infofile unreadable (%s): reading records from their hash holders", ctx.name, e)
                self._warned_unreadable = True
            meta, holders = None, hash_ranking(ctx.file_id, name, ctx.peer_ids)
        else:
            if meta is None:
                obj = ctx.infofile().object(name)
                if obj is not None:  # a striped object (docs/striping.md)
                    try:
                        fut.set_result(self.get_object(obj))
                    except StoreTorrentError as e:
                        fut.set_exception(e)
                    if callback:
                        ctx.notify(name, callback, name, None if fut.exception() else fut.result(), fut.exception())
                    return fut
                h = without_stored_copy(ctx.infofile(), name, ctx.name) if ctx.as_of is None else None
                if h is not None:  # committed, but no stored copy is left (copy_health)
                    exc: Exception = unavailable_error(ctx.name, h)
                elif ctx.as_of is not None:
                    exc = RecordNotFoundError(f"no record {name!r} in {ctx.name} as of generation {ctx.as_of}")
                else:
                    exc = RecordNotFoundError(f"no committed record {name!r} in {ctx.name}")
                fut.set_exception(exc)
                if callback:
                    ctx.notify(name, callback, name, None, exc)
                return fut
        if meta is not None and not meta.peers and ctx.as_of is not None:
            h = without_stored_copy(ctx.infofile(), name, ctx.name)
            if h is not None:  # kept, but every copy quarantined or pending (copy_health)
                exc = unavailable_error(ctx.name, h)
            else:  # a past version whose copies are no longer kept (docs/snapshots.md, "Retention")
                hist = ctx.infofile().meta()
                exc = SnapshotExpiredError(
                    f"record {name!r} of {ctx.name} as of generation {ctx.as_of}: its copies are no longer kept",
                    ctx.name,
                    ctx.as_of,
                    int(hist.get("history_from", 0)),
                    (name,),
                )
            fut.set_exception(exc)
            if callback:
                ctx.notify(name, callback, name, None, exc)
            return fut
        if meta is not None and ctx.local_copies is not None:  # a copy on this host's disk (.local_copies)
            data = ctx.local_copies.read(ctx.file_id, ctx.peer_ids, meta)
            if data is not None:
                self._deliver(name, data, fut, callback, stored)
                return fut
        ctx.wait_for_slot()
        ctx.gets_inflight += 1
        self._try_get(name, meta, self._read_order(holders), [], fut, callback, stored)
        # Coalesce (paper 3.2): GET frames go out in one sendmsg per peer once
        # enough wait, when the pipeline is full, or at poll() / result().
        if ctx.transport.out_bytes >= GET_COALESCE_BYTES:
            ctx.transport.poll(0)
        return fut

    def _try_get(
        self,
        name: str,
        meta: RecordMeta | None,
        order: list[int],
        reasons: list[tuple[str, Exception]],
        fut,
        callback,
        stored: bool = False,
        fresh: bool = False,
        pinned: bool = False,
    ) -> None:
        """Ask the first peer of ``order``; on any error, the next one.
        ``meta`` None: a read without the infofile (hash placement), where
        NOT_FOUND only means "not on this peer". ``fresh``: ``meta`` is as
        the tracker has it now; else, when every copy failed and ``meta``
        came from a local copy of the infofile, the copy is brought forward
        and the GET tried once more as it then says (the record was deleted
        or moved since the copy was checked: docs/decisions.md, "Freshness
        of a local copy"). ``pinned``: that version and no other (a stripe
        of an object version being read): tried again only where its copies
        moved, never as a newer version."""
        ctx = self.ctx
        if not order and meta is not None and not fresh and ctx.as_of is None:
            again = self._recheck(name)
            same = not pinned or (
                isinstance(again, RecordMeta)
                and (again.key, again.crc32c, again.size) == (meta.key, meta.crc32c, meta.size)
            )
            if (
                isinstance(again, RecordMeta)
                and (again.key, tuple(again.peers)) != (meta.key, tuple(meta.peers))
                and same
            ):
                self._try_get(name, again, self._read_order(list(again.peers)), [], fut, callback, stored, True, pinned)
                return
            if isinstance(again, Exception):
                ctx.gets_inflight -= 1
                fut.set_exception(again)
                if callback:
                    ctx.notify(name, callback, name, None, again)
                return
        if not order:
            ctx.gets_inflight -= 1
            if meta is None and all(isinstance(e, PeerError) and e.code == ErrorCode.NOT_FOUND for _, e in reasons):
                exc: Exception = RecordNotFoundError(
                    f"no record {name!r} in {ctx.name} on any of its {len(reasons)} peers (read without "
                    "the infofile, from the record's hash holders)"
                )
            else:
                why = "every copy failed: " + "; ".join(f"{a}: {e}" for a, e in reasons)
                exc = RecordUnavailableError(f"record {name!r} of {ctx.name}: {why}", name, ctx.name, why)
            fut.set_exception(exc)
            if callback:
                ctx.notify(name, callback, name, None, exc)
            return
        idx = order[0]
        addr = ctx.addr(idx) if idx in ctx.peers else f"peer#{idx}"
        sent = time.monotonic()

        def done(fr, exc):
            if exc is None:
                self._observe(idx, time.monotonic() - sent)
                data = fr.fields["data"]
                actual = fr.fields.get("actual_crc32c")  # computed as it arrived (native receive path)
                if actual is None:
                    actual = crc32c(data)
                if meta is None:  # no committed CRC to compare with: the one stored beside the copy
                    if actual != fr.fields["crc32c"]:
                        exc = ChecksumError(f"copy on {addr} does not match its CRC-32C")
                elif fr.fields["crc32c"] != meta.crc32c or actual != meta.crc32c or len(data) != meta.size:
                    exc = ChecksumError(f"copy on {addr} does not match its CRC-32C")
            if exc is not None:
                reasons.append((addr, exc))
                self._try_get(name, meta, order[1:], reasons, fut, callback, stored, False, pinned)
                return
            ctx.gets_inflight -= 1
            self._deliver(name, data, fut, callback, stored)

        key = (meta.key if meta is not None else name).encode("utf-8", "surrogateescape")  # a version's own name
        ctx.transport.send(addr, lambda seq: [encode_get(seq, ctx.file_id, key)], done)

    def _deliver(self, name: str, data: bytes, fut: Pending, callback, stored: bool) -> None:
        """Complete a GET of ``name`` with the stored bytes ``data`` (checked):
        the file's filters undone unless ``stored``, then the callback."""
        ctx = self.ctx
        if not stored and ctx.filters:
            try:
                data = ctx.filters.decode(ctx.file_id, name, data)
            except StoreTorrentError as e:  # a wrong key, or bytes a filter cannot undo
                fut.set_exception(e)
                if callback:
                    ctx.notify(name, callback, name, None, e)
                return
        fut.set_result(data)
        if callback:
            ctx.notify(name, callback, name, data, None)

    def _recheck(self, name: str) -> RecordMeta | Exception | None:
        """After every copy of ``name`` failed: bring a local infofile copy
        forward (``metadata="fetch"``; nothing on the shared mount) and say
        what it holds now: the record's new metadata, the error to raise
        (deleted since, or the file is gone), or None (the copy did not
        move: the failure stands)."""
        ctx = self.ctx
        try:
            moved = ctx.refresh_infofile()
        except StoreTorrentError as e:
            return e
        if not moved:
            return None
        meta = ctx.infofile().lookup(name)
        if meta is None:
            return RecordNotFoundError(
                f"no committed record {name!r} in {ctx.name}: deleted since this client's copy of its infofile "
                "was last checked"
            )
        return meta

    def queue_get_version(self, meta: RecordMeta, stored: bool = True) -> Pending:
        """Queue a read of the version ``meta`` names (its stored bytes, or
        with ``stored`` False its user's bytes, a copy on this host's disk
        first): :meth:`st_py.client.file.StFile.queue_get_version` (the public docstring)."""
        ctx = self.ctx
        ctx.check_open()
        ctx.renew_capability()
        fut = Pending(ctx.transport.wait, meta.name)
        if not stored and ctx.local_copies is not None:  # a copy on this host's disk (.local_copies)
            data = ctx.local_copies.read(ctx.file_id, ctx.peer_ids, meta)
            if data is not None:
                self._deliver(meta.name, data, fut, None, False)
                return fut
        ctx.wait_for_slot()
        ctx.gets_inflight += 1
        # a user's read of one version (stored False): its copies followed if they moved, no other version read
        self._try_get(meta.name, meta, self._read_order(list(meta.peers)), [], fut, None, stored, stored, not stored)
        return fut

    def queue_get_stripe(self, ver: ObjectVersion, i: int) -> Pending:
        """Queue a GET of stripe ``i`` of the object version ``ver``: by its
        stored name and holders as ``ver`` pinned them, so a replacement
        committed meanwhile is not read into it (its user's bytes)."""
        meta = ver.stripes[i]
        if meta is None:  # no committed record then: by name, which says what is missing
            return self.queue_get(stripe_name(ver.obj.name, i))
        return self.queue_get_version(meta, stored=False)

    def get(self, name: str) -> bytes:
        """The bytes of record ``name``: :meth:`st_py.client.file.StFile.get` (the public docstring)."""
        return self.queue_get(name).result()

    def get_object(self, obj: ObjectMeta) -> bytes:
        """The whole object ``obj``: :meth:`st_py.client.file.StFile.get_object` (the public docstring)."""
        ver = object_version(self.ctx.infofile(), obj.name)
        if ver is None:
            raise RecordNotFoundError(f"no committed object {obj.name!r} in {self.ctx.name}")
        obj = ver.obj  # the version committed now, its stripes pinned with it
        futs = [self.queue_get_stripe(ver, i) for i in range(obj.stripes)]
        data = b"".join(f.result() for f in futs)
        if len(data) != obj.size:  # each stripe's CRC-32C was checked as it came
            raise ChecksumError(
                f"object {obj.name!r} of {self.ctx.name}: its {obj.stripes} stripes hold {len(data)} "
                f"bytes, the object {obj.size}"
            )
        return data

    def names(self, prefix: str | None = None) -> list[str]:
        """The committed records' names: :meth:`st_py.client.file.StFile.names` (the public docstring)."""
        return self.ctx.live_or_newer(lambda r: r.names(prefix))  # none: asked once for newer changes

    def count(self) -> int:
        """How many records are committed (from the infofile)."""
        return self.ctx.live_infofile().count()


__all__ = ["RecordReader"]
