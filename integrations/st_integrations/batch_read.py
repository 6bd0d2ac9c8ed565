"""Reading a read task's record copies many at a time (issue "Writes at the
disk's speed, scans at the machine's", item 3; docs/benchmarks.md, "Many
small records").

:func:`read_batch` reads a batch of revealed copies with one native call
(``st_py._native.read_into``, st_core/src/copy_reader.h) without the GIL:
each copy is opened, read and checked against its size and the CRC-32C in
its file name as its bytes pass, into one Arrow buffer from pyarrow's
memory pool (whose pages are reused from batch to batch instead of faulted
in afresh), at offsets that make a raw batch an Arrow binary array without
a Python object per record. :func:`read_ahead` runs the read of the next
batch in a background thread while the caller (the engine) consumes this
one.

Without the native module (``ST_NATIVE=0``, or an extension built before
``read_into``) the same batches are read in Python
(:func:`st_py.client.getlocal.read_copies`), with the same answers and faults.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa

try:
    if os.environ.get("ST_NATIVE", "1") == "0":
        raise ImportError("ST_NATIVE=0")
    from st_py import _native  # type: ignore[attr-defined]

    _read_into = _native.read_into
    _capacity = _native.batch_capacity
except (ImportError, AttributeError):
    _read_into = _capacity = None

NATIVE = _read_into is not None
"""Whether batches are read by the native call (else in Python)."""

MISSING, MISMATCH, IO_ERROR = 1, 2, 3  # the reasons of :attr:`Batch.bad`, as read_copies gives them


@dataclass(frozen=True)
class Batch:
    """Copies read into one buffer: copy ``i`` is
    ``data[offsets[i] : offsets[i] + sizes[i]]`` and ``offsets[-1]`` is the
    end of the last one.

    ``bad`` lists ``(index, reason)`` of the copies that failed (reason
    :data:`MISSING`, :data:`MISMATCH`: size or CRC-32C, :data:`IO_ERROR`);
    their slots hold garbage and must be read another way
    (:func:`st_py.client.getlocal.read_verified` raises the right error, or GET
    from another copy)."""

    data: pa.Buffer
    offsets: np.ndarray  # int64, len(copies) + 1
    bad: list[tuple[int, int]]

    def slice(self, i: int, size: int) -> pa.Buffer:
        """Copy ``i`` (of ``size`` bytes), without a copy."""
        return self.data.slice(int(self.offsets[i]), size)

    def binary_offsets(self) -> pa.Buffer:
        """The offsets as an Arrow binary array's (int32; ``align`` 1 only)."""
        return pa.py_buffer(self.offsets.astype(np.int32))


def read_batch(paths: Sequence[str], sizes: Sequence[int], align: int = 1, check: bool = True) -> Batch:
    """Read the copies at ``paths`` (revealed with ``sizes`` bytes) into one
    Arrow buffer, each start rounded up to ``align`` bytes (1: back to back,
    an Arrow binary array's layout; 64: where Arrow's readers use a
    record's buffers without a copy). With ``check``, each copy's CRC-32C is
    checked against the one in its file name as its bytes pass.

    A copy that cannot be read is reported in :attr:`Batch.bad`, never
    raised; the GIL is released while the native call reads. Thread-safe.

    Raises
    ------
    ValueError
        ``paths`` and ``sizes`` differ in length, or ``align`` is not a
        power of two.
    """
    if len(paths) != len(sizes):
        raise ValueError(f"{len(paths)} paths and {len(sizes)} sizes")
    if align < 1 or align & (align - 1):
        raise ValueError(f"align={align} is not a power of two")
    if _read_into is None:
        return _read_batch_python(paths, sizes, align, check)
    paths, sizes = list(paths), list(sizes)
    buf = pa.allocate_buffer(max(1, _capacity(sizes, align)))
    offsets, bad = _read_into(paths, sizes, buf, align, check)
    offs = np.frombuffer(offsets, dtype="<i8")
    return Batch(buf.slice(0, int(offs[-1])), offs, [(b[0], b[1]) for b in bad])


def _read_batch_python(paths: Sequence[str], sizes: Sequence[int], align: int, check: bool) -> Batch:
    """:func:`read_batch` without the native module: the same layout and faults."""
    from st_py.client.getlocal import read_copies

    sizes = list(sizes)
    starts = np.zeros(len(sizes) + 1, dtype=np.int64)
    end = 0
    for i, n in enumerate(sizes):
        starts[i] = -(-end // align) * align if i else 0
        end = int(starts[i]) + n
    starts[len(sizes)] = end
    packed, bad = read_copies(list(paths), sizes, check=check)
    out = pa.allocate_buffer(max(1, end))  # pool memory: 64-byte aligned, as the native path's
    view = memoryview(out).cast("B")
    src = 0
    for i, n in enumerate(sizes):
        view[int(starts[i]) : int(starts[i]) + n] = packed[src : src + n]
        src += n
    return Batch(out.slice(0, end), starts, bad)


# -- read-ahead -----------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R")

_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child makes its own


def executor() -> ThreadPoolExecutor:
    """This process's read-ahead threads (one per core, at least 2), made on
    first use; shared by the batch reads and records_data's column decoding.
    Thread-safe."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max(2, os.cpu_count() or 2), thread_name_prefix="st-read-ahead"))
        return _pool[1]


def read_ahead(fn: Callable[[T], R], jobs: Iterable[T], depth: int = 1) -> Generator[R, None, None]:
    """``fn(job)`` of each job, in order, with up to ``depth`` of the next
    jobs running in this process's read-ahead threads while the caller
    consumes the current result (``depth`` 0: no thread, each job runs
    when its result is asked for).

    ``fn`` must be safe to run in another thread (a native read that
    releases the GIL is what this is for). An exception of ``fn`` is raised
    here, when its result is reached, in order; the jobs after it are
    cancelled. Closing the iterator early cancels the jobs not started; one
    already running finishes in the background and its result is dropped.
    Memory: ``depth + 1`` results alive at most (the one yielded and those
    in flight).
    """
    it = iter(jobs)
    if depth <= 0:
        yield from map(fn, it)
        return
    pool = executor()
    pending: deque[Future] = deque(pool.submit(fn, j) for j in itertools.islice(it, depth))
    try:
        while pending:
            done = pending.popleft().result()
            pending.extend(pool.submit(fn, j) for j in itertools.islice(it, 1))
            yield done
    finally:
        for f in pending:
            f.cancel()
