"""Streaming a striped object (docs/striping.md, "Reading"): the stripes a
byte range overlaps, fetched with bounded read-ahead and given in order.

:func:`stream_object` keeps up to ``ahead`` stripe GETs queued on the
file's pipelined transport (:meth:`st_py.client.file.StFile.queue_get`:
load-aware, each stripe from its least loaded holder, failing over to the
next copy, CRC-32C checked; a copy on a peer of this host read from disk
when the client knows that peer's data directory,
:mod:`st_py.client.local_copies`) while the caller consumes the stripe
before them, so several holders send at once and at most ``ahead`` stripes
are held (in flight or received, not yet given). ``ahead=1`` reads one
stripe after another, as :class:`st_py.client.striping.ObjectReader` does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from st_py.client.pending import Pending
from st_py.core.infofile import ObjectMeta, ObjectVersion, RecordMeta, stripe_name
from st_py.errors import ChecksumError, RecordNotFoundError

STRIPES_AHEAD = 4  # stripes a stream keeps queued (in flight or received, not yet given): its memory bound


class StripeSource(Protocol):
    """What a stream reads through: an open file's public ``queue_get``,
    ``queue_get_version`` and ``poll``."""

    def queue_get(self, name: str) -> Pending:
        """Queue a GET of record ``name``; its result is the record's bytes
        (StFile.queue_get)."""
        ...

    def queue_get_version(self, meta: RecordMeta, stored: bool = True) -> Pending:
        """Queue a GET of the version ``meta`` names (StFile.queue_get_version)."""
        ...

    def poll(self, timeout: float = 0.0) -> int:
        """Collect replies for up to ``timeout`` seconds; the number collected
        (StFile.poll)."""
        ...


@dataclass
class StreamStats:
    """What one or more streams did: ``stripes`` fetched, the most GETs
    ``max_outstanding`` queued and not yet answered at once (the stripes
    in flight together), and the most stripes ``max_held`` held at once.
    Not locked: one stream at a time updates it (callers that share one
    across threads lock around :func:`stream_object`'s steps or keep one
    per thread and add them up)."""

    stripes: int = 0
    max_outstanding: int = 0
    max_held: int = 0


def stripe_span(obj: ObjectMeta, start: int, end: int) -> range:
    """The indexes of the stripes of ``obj`` that bytes ``[start, end)`` overlap."""
    if end <= start:
        return range(0)
    ss = obj.stripe_size
    return range(start // ss, (end - 1) // ss + 1)


def stream_object(
    f: StripeSource,
    obj: ObjectMeta,
    start: int = 0,
    end: int | None = None,
    ahead: int = STRIPES_AHEAD,
    stats: StreamStats | None = None,
    version: ObjectVersion | None = None,
) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of the striped object ``obj`` (``end`` None:
    its size; clipped to it), as one piece per stripe, in order.

    Parameters
    ----------
    f : StripeSource
        The open file (:class:`st_py.client.file.StFile`).
    ahead : int
        Stripes queued at once (at least 1): at most ``ahead`` stripes of
        ``obj.stripe_size`` bytes are held by the stream, plus the piece
        the caller holds.
    stats : StreamStats, optional
        Updated as the stream goes.
    version : ObjectVersion, optional
        ``obj`` with its stripes' records as one read found them
        (:meth:`st_py.client.file.StFile.object_version`): each stripe is
        read by its stored name, so a replacement committed during the
        stream (docs/striping.md, "Replacing an object") is never mixed
        in. Without it, stripes are read by name.

    Raises
    ------
    RecordNotFoundError
        A stripe is gone (the object was deleted meanwhile).
    RecordUnavailableError
        Every copy of a stripe failed.
    ChecksumError
        A stripe's size is not what the object's size and stripe size say.

    Thread safety: a generator; step it from one thread at a time (any
    thread: the GETs run under the file's lock). Closing it early leaves
    the queued GETs to be answered and dropped by the file.
    """
    end = obj.size if end is None else min(end, obj.size)
    span = stripe_span(obj, max(0, start), end)
    ss = obj.stripe_size
    ahead = max(1, int(ahead))
    queued: deque[tuple[int, Pending]] = deque()
    todo = iter(span)
    st = stats if stats is not None else StreamStats()

    def fill() -> None:
        for i in todo:
            meta = version.stripes[i] if version is not None else None
            queued.append(
                (i, f.queue_get_version(meta, False) if meta is not None else f.queue_get(stripe_name(obj.name, i)))
            )
            st.stripes += 1
            if len(queued) >= ahead:
                break
        st.max_held = max(st.max_held, len(queued))
        st.max_outstanding = max(st.max_outstanding, sum(1 for _, p in queued if not p.done()))
        f.poll(0)  # the queued GETs leave now, not at the next wait

    fill()
    while queued:
        i, p = queued.popleft()
        try:
            data = p.result()
        except RecordNotFoundError:
            raise RecordNotFoundError(f"object {obj.name!r}: stripe {i} is gone") from None
        fill()  # the next stripe is queued before this one is given
        lo = i * ss
        want = min(ss, obj.size - lo)
        if len(data) != want:
            raise ChecksumError(
                f"object {obj.name!r}: stripe {i} holds {len(data)} bytes, the object's layout says {want}",
                record=stripe_name(obj.name, i),
            )
        a, b = max(start, lo) - lo, min(end, lo + want) - lo
        yield data if (a, b) == (0, len(data)) else data[a:b]


__all__ = ["STRIPES_AHEAD", "StreamStats", "StripeSource", "stream_object", "stripe_span"]
