"""The keys of a bucket in S3's order, as a listing pages them: the
namespace below ``/B`` walked, each file's infofile name index read (rows,
common prefixes by ``InfofileReader.level`` or a file's record count,
never an object), the files' streams merged, delimiters rolled up, and a
page cut (docs/s3.md, "The mapping": listings).

Thread safety: each call opens and closes its own file handles, or
borrows them from the caller's ``reading`` (its own thread-safe cache).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager
from typing import Any

from st_py.core.infofile import RESERVED_PREFIXES, prefix_upper, user_size
from st_py.errors import StFileNotFoundError

from ..keymap import TOP_FILE, UPLOAD_PREFIX, bucket_dir, key_of


def _first(item: tuple) -> str:
    return item[0]


def rolls_up(base: str, prefix: str, delimiter: str) -> bool:
    """Whether every key of a file whose keys start with ``base`` rolls
    up into one common prefix of a listing of ``prefix`` and
    ``delimiter`` (the delimiter in ``base`` past the prefix): the one
    case where a file's emptiness decides the answer without its rows
    being read."""
    return bool(delimiter) and base.startswith(prefix) and base.find(delimiter, len(prefix)) >= 0


def dir_rolls_up(rel: str, prefix: str, delimiter: str) -> bool:
    """Whether a file directly in the directory ``rel`` below ``/B``
    (``""``: ``/B`` itself) may roll up (:func:`rolls_up`) in a listing of
    ``prefix`` and ``delimiter``: its key base ``rel/name/`` has its last
    ``/`` at its end, so with ``/`` only a prefix without one past
    ``rel/`` lets it; another delimiter may lie anywhere in the name. The
    directory's List then counts records (one RPC, not a second one)."""
    return bool(delimiter) and not (delimiter == "/" and "/" in prefix[len(rel) + 1 if rel else 0 :])


def files_below(
    client, bucket: str, prefix: str, top: list | None = None, delimiter: str = "", top_counted: bool = False
) -> list[tuple[str, str, int | None]]:
    """``(file, key base, records)`` of every StoreTorrent file below
    ``/B`` whose keys may start with ``prefix``: the namespace walked
    (one tracker ``List`` a directory; ``top``: the caller's List of
    ``/B`` itself, with record counts if ``top_counted``), pruned by the
    prefix. A directory's List counts records only where its files may
    roll up (:func:`dir_rolls_up`), and ``records`` is None (not counted:
    a file's rows tell) except for files whose keys all roll up into one
    common prefix (:func:`rolls_up`), shown only for a file with records
    (a count reads an index of each file listed; a page of one large
    file's keys skipped it: 2.7 against 1.5 ms a List of 10^5 records)."""
    d = bucket_dir(bucket)
    out: list[tuple[str, str, int | None]] = []
    todo = [d]
    while todo:
        here = todo.pop()
        if here == d and top is not None:
            entries, counted = top, top_counted
        else:
            counted = dir_rolls_up(here[len(d) + 1 :], prefix, delimiter)
            entries = client.ls(here, sizes=False) if counted else client.tracker.list(here, names_only=True).entries
        files: list[tuple[str, str]] = []
        for e in entries:
            rel = e.name[len(d) + 1 :]
            if rel.startswith(UPLOAD_PREFIX):
                continue  # a multipart upload's parts: not objects
            base = "" if rel == TOP_FILE else rel + "/"
            if base and not (prefix.startswith(base) or base.startswith(prefix)):
                continue
            if e.is_dir:
                todo.append(e.name)
            elif e.file_id:
                files.append((e.name, base))
        counts: dict[str, int] = {}
        if any(rolls_up(base, prefix, delimiter) for _, base in files):
            if not counted:  # a caller's top without counts
                entries = client.ls(here, sizes=False)
            counts = {e.name: int(e.records) for e in entries if e.file_id}
        out += [(f, base, counts.get(f, 0) if rolls_up(base, prefix, delimiter) else None) for f, base in files]
    return out


Reading = Callable[[str], AbstractContextManager[Any]]
"""``reading(file)``: a context manager giving an open handle of ``file``
(an :class:`st_py.client.file.StFile`) for the block, or None when the
file is gone."""


def opening(client) -> Reading:
    """A :data:`Reading` that opens and closes a handle of ``client``
    each time (one tracker ``Open``)."""

    @contextlib.contextmanager
    def reading(file: str):
        try:
            h = client.open(file)
        except StFileNotFoundError:
            yield None
            return
        try:
            yield h
        finally:
            h.close()

    return reading


def _level(reading: Reading, file: str, rp: str, start: str, limit: int):
    """``InfofileReader.level(rp, start=start, limit=limit)`` of ``file``
    (its entries and heads at that level, from ``start`` on, about a page),
    or None if the file is gone."""
    with reading(file) as h:
        return None if h is None else h.infofile().level(rp, start=start, limit=limit)


def _stream(
    reading: Reading,
    bucket: str,
    file: str,
    base: str,
    records: int | None,
    prefix: str,
    delimiter: str,
    after: str,
    token: bool,
    max_keys: int,
) -> Generator[tuple, None, None]:
    """``(key, size, crc32c, mtime)`` of one file's keys that start with
    ``prefix`` and sort after ``after``, in key order, from its
    infofile's name index (rows, never objects). With a delimiter, a
    common prefix may come instead of the keys below it, as
    ``(prefix, None, 0, 0.0)``: a whole file below one (no row read),
    or one level of ``/`` (``InfofileReader.level``: one index search per
    sub-prefix, not a row per key). ``records``: the file's count
    (:func:`files_below`), given where its keys roll up, else None."""
    i = base.find(delimiter, len(prefix)) if delimiter and base.startswith(prefix) else -1
    if i >= 0:  # every key of this file rolls up into one common prefix
        cp = base[: i + len(delimiter)]
        if token and after == cp:
            return  # the last page ended with this common prefix
        if not after.startswith(cp):
            if records and cp > after:
                yield cp, None, 0, 0.0
            return
        # a start-after inside the common prefix: its keys after it decide
    rp = prefix[len(base) :] if prefix.startswith(base) else ""
    here = base + rp
    if (
        delimiter == "/"
        and base
        and (rp == "" or rp.endswith("/"))
        and not (after.startswith(here) and "/" in after[len(here) :])
    ):
        # from the last page's end on, about a page: the keys before it and the level's rest unread
        # (a page of a level of 10^5 keys read the whole level: every page, 0.47 s for 2x10^4)
        got = _level(reading, file, rp, after[len(base) :] if after.startswith(here) else "", max_keys + 2)
        if got is None:
            return
        entries, heads = got
        items: list[tuple] = [
            (base + name, user_size(stored, logical), int(crc), float(t))
            for name, stored, logical, crc, t, _k, _ss in entries
        ]
        cps = [(here + head + "/", None, 0, 0.0) for head in heads if head]
        if cps:
            items = list(heapq.merge(items, cps, key=_first))
        yield from items[bisect.bisect_right(items, after, key=_first) :]  # in key order: past ``after``
        return
    lo, hi = rp, (prefix_upper(rp) if rp else None)
    if after.startswith(base) and after[len(base) :] > lo:
        lo = after[len(base) :]
    for name, size, crc, t in _lazy_rows(reading, file, lo, hi):
        if not base and "/" in name:
            continue  # not a top-level key: unaddressable through S3
        k = key_of(bucket, file, name)
        if k > after:
            yield k, size, crc, t


def _lazy_rows(reading: Reading, file: str, lo: str, hi: str | None) -> Iterator[tuple]:
    """``(name, size, crc32c, mtime)`` of the records and striped objects
    of ``file`` named in ``[lo, hi)``, in name order, read from an open
    cursor as they are taken (a page of a listing reads about the rows
    it returns, not every row after its start); the handle is given back
    when the generator ends or is closed."""
    with reading(file) as h:
        if h is None:
            return
        inf = h.infofile()
        objs = [(n, int(size), int(crc), float(t)) for n, size, crc, t, _k, _s in inf.objects_between(lo, hi)]
        cur = inf.records_between(lo, hi)
        try:
            recs = (
                (n, user_size(st, lg), int(crc), float(t))
                for n, st, crc, t, lg in cur
                if not n.startswith(RESERVED_PREFIXES)
            )
            yield from heapq.merge(recs, objs, key=_first)
        finally:
            cur.close()


def list_objects(
    client,
    bucket: str,
    prefix: str = "",
    delimiter: str = "",
    max_keys: int = 1000,
    after: str = "",
    token: bool = False,
    top: list | None = None,
    reading: Reading | None = None,
    top_counted: bool = False,
) -> tuple[list[tuple], list[str], bool, str]:
    """ListObjectsV2's answer for ``client`` (a
    :class:`st_py.client.client.Client`; the bucket must exist): ``(contents, common prefixes, truncated,
    last item)``; contents ``(key, size, crc32c, mtime)``. ``after``
    is where to start (exclusive): a start-after or marker key, or with
    ``token`` the last item of the previous page (a common prefix there
    skips every key below it); ``top``: the caller's tracker List of
    ``/B`` (one RPC less a page), with record counts if ``top_counted``
    (ask for them when :func:`dir_rolls_up`); ``reading``: how a file's
    handle is had (default :func:`opening`: a tracker ``Open`` a file a
    page)."""
    rd = reading or opening(client)
    streams = [
        _stream(rd, bucket, f, b, n, prefix, delimiter, after, token, max_keys)
        for f, b, n in files_below(client, bucket, prefix, top, delimiter, top_counted)
        if n is None or n  # a file without records when List counted has no key of this listing (it began before)
    ]
    try:
        items = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=_first)
        return _page(items, prefix, delimiter, max_keys, after, token)
    finally:
        for st in streams:
            st.close()  # their infofile cursors and handles


def _page(items, prefix: str, delimiter: str, max_keys: int, after: str, token: bool):
    contents: list[tuple] = []
    prefixes: list[str] = []
    last = ""
    n = 0
    plen = len(prefix)
    below = after if token and delimiter and after.endswith(delimiter) else None  # the last page's common prefix
    for item in items:
        key = item[0]
        if not key.startswith(prefix):
            continue
        if below is not None and key.startswith(below):
            continue
        cp = ""
        if delimiter:
            i = key.find(delimiter, plen)
            if i >= 0:
                cp = key[: i + len(delimiter)]
                if cp == last:
                    continue
        if n == max_keys:
            return contents, prefixes, True, last
        if cp:
            prefixes.append(cp)
            last = cp
        else:
            contents.append(item)
            last = key
        n += 1
    return contents, prefixes, False, last
