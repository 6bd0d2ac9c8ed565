"""The S3 operations over one caller's StoreTorrent client: buckets as
namespace directories and objects as records, placed by
:mod:`st_integrations.keymap` (docs/s3.md).

Each function is synchronous (the app runs it in a worker thread) and
raises :class:`.errors.S3Error` or a StoreTorrent error (mapped by
:func:`.errors.from_storetorrent`).

Thread safety: the client is shared (:class:`st_py.client.client.Client`
is thread-safe); the file handles are kept between calls by
:mod:`.handles` (the fast path: docs/s3.md), each used by one call at a
time, or opened for the call.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar

from st_py.client.object_stream import STRIPES_AHEAD, StreamStats, stream_object
from st_py.client.record_writer import STRIPE_THRESHOLD
from st_py.client.striping import DEFAULT_STRIPE_SIZE
from st_py.core.history import generation_of
from st_py.core.infofile import one_state, user_size
from st_py.errors import (
    DirectoryNotEmptyError,
    DirectoryNotFoundError,
    FileNotEmptyError,
    InvalidOptionError,
    RecordNotFoundError,
    SnapshotExpiredError,
    SnapshotHeldError,
    SnapshotNotFoundError,
    StFileExistsError,
    StFileNotFoundError,
    StoreTorrentError,
)

from ..keymap import TOP_FILE, BadKeyError, KeyMap, bucket_dir, check_key, is_upload_file
from .errors import S3Error
from .handles import FileHandles, HandleCache
from .objstream import ObjectBody
from .reccache import RecordCache

# Stripes of a streamed object (Complete, CopyObject) stored at once, and
# their size: its memory in the endpoint, about 2 x 32 MiB beside the part
# or stripe being read, whatever the object's size.
STREAM_STRIPES_IN_FLIGHT = 2
STREAM_STRIPE_SIZE = DEFAULT_STRIPE_SIZE

log = logging.getLogger("storetorrent.s3")
T = TypeVar("T")


def as_of_of(version_id: str) -> int | str:
    """The ``as_of`` a version id names: digits a generation of the key's
    file, anything else one of its snapshots' names (docs/s3.md)."""
    return int(version_id) if version_id.isdigit() else version_id


LEASE_WAIT_S = 30.0  # how long a PUT over an existing key waits for the file's writer lease
QUICK_GET_BYTES = 1 << 20  # records up to this size (stored) may be read on the event loop (get_object_quick)


class _NotQuick(Exception):
    """A quick GET that would block (a striped object, a large record, no
    local copy): the request goes to a worker thread instead."""


@dataclass(frozen=True)
class ObjectStat:
    """What S3 says of an object: ``size`` (user bytes), ``crc32c``,
    ``mtime`` (unix s of its commit), its ``etag`` (quoted) and ``meta``,
    the version's user metadata (content type, user pairs:
    :mod:`st_py.core.user_meta`; ``{}``: none)."""

    size: int
    crc32c: int
    mtime: float
    crc_of_bytes: bool = True  # False: the CRC is of the filtered bytes the peers keep (zstd, AES)
    version_id: int | None = None  # the generation that committed this version (docs/s3.md, "Versions")
    meta: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def etag(self) -> str:
        """The object's ETag, in S3's form for an ETag that is not the MD5
        of the bytes (a multipart one: ``"<32 hex>-1"``): the MD5 of its
        size, CRC-32C and commit time (docs/s3.md, "ETags"; nothing keeps
        an MD5 of the bytes), the same in PUT, HEAD, GET and listings.
        Clients that check an ETag against an MD5 (rclone) skip this form."""
        return etag_of(self.size, self.crc32c, self.mtime)


def etag_of(size: int, crc32c: int, mtime: float) -> str:
    """:attr:`ObjectStat.etag` of an object of ``size`` user bytes, CRC-32C
    ``crc32c`` and commit time ``mtime`` (unix s): its one definition, for
    listings that write a thousand a page without an ObjectStat each."""
    return etag_of_text(f"{size}:{crc32c}:{mtime!r}")


def etag_of_text(text: str) -> str:
    """:func:`etag_of` of its text ``f"{size}:{crc32c}:{mtime!r}"``: for a
    listing, which makes the time's part once a group commit (its records
    share the time; a float's repr costs more than the MD5)."""
    return '"' + hashlib.md5(text.encode(), usedforsecurity=False).hexdigest() + '-1"'


class StalePeerlistError(StoreTorrentError):
    """A record's holders include a peer that a handle's peerlist lacks
    (the file's peerlist grew since the handle was opened): the handle is
    replaced and the read done on a new one (:meth:`Ops._read_key`).

    Attributes
    ----------
    file, record : str
    missing : list of int
        The holders' peer indexes the handle does not know.
    """

    def __init__(self, file: str, record: str, missing: list[int]):
        super().__init__(f"{record!r} of {file} is held by peers {missing}, which this handle's peerlist lacks")
        self.file, self.record, self.missing = file, record, missing


def _check_peerlist(h, record: str, m=None) -> None:
    """Raise :class:`StalePeerlistError` when a holder of ``record`` (its
    metadata ``m``, read if None) is not in ``h``'s peerlist: a kept handle
    reading it would ask a peer it has no address for before the copies it
    knows (seconds per GET)."""
    if m is None:
        m = h.record_meta(record)
    if m is not None:
        missing = [i for i in m.peers if i not in h.peers]
        if missing:
            raise StalePeerlistError(h.name, record, missing)


def _lend(out: Any, release: Callable[[bool], None]) -> bool:
    """Lend the handle to ``out``'s streamed body, if it has one: it calls
    ``release(ok)`` when it ends (:class:`.objstream.ObjectBody`)."""
    body = out[1] if isinstance(out, tuple) and len(out) == 3 else None
    if not isinstance(body, ObjectBody):
        return False
    body.release = release
    if body.ended:  # nothing left to read (prefetch saw the end): released now
        release(True)
    return True


class Ops:
    """The operations of one caller.

    Parameters
    ----------
    client : st_py.client.client.Client
        The caller's client (their API key).
    replication : str
        Of the files a PUT creates (``x2``).
    read_ahead : int
        Stripes a GET of a striped object keeps queued at once (1: one
        after another); each GET holds at most this many stripes plus the
        one being sent.
    """

    def __init__(self, client, replication: str = "x2", read_ahead: int = STRIPES_AHEAD):
        self.client = client
        self.keys = KeyMap(client)
        self.replication = replication
        self.read_ahead = read_ahead  # stripes a GET of a striped object keeps queued (st_py.client.object_stream)
        self.stream_stats = StreamStats()  # every GET's of a striped object, merged (:meth:`_streamed`)
        self._stats_lock = threading.Lock()
        self._quick_gets = 0  # GETs answered by get_object_quick (read_stats' quick_gets)
        self.ranges = RecordCache()  # records read for ranged GETs (.reccache)
        self.handles = HandleCache(client)  # kept handles and key resolutions (.handles: the fast path)

    def _streamed(self, st: StreamStats) -> None:
        """Merge one stream's counters into :attr:`stream_stats`."""
        with self._stats_lock:
            t = self.stream_stats
            t.stripes += st.stripes
            t.max_outstanding = max(t.max_outstanding, st.max_outstanding)
            t.max_held = max(t.max_held, st.max_held)

    def stream_totals(self) -> StreamStats:
        """A copy of :attr:`stream_stats`, read under its lock (any thread)."""
        with self._stats_lock:
            t = self.stream_stats
            return StreamStats(t.stripes, t.max_outstanding, t.max_held)

    def quick_total(self) -> int:
        """GETs :meth:`get_object_quick` answered so far (any thread)."""
        with self._stats_lock:
            return self._quick_gets

    def close(self) -> None:
        """Close the kept handles and the client (the endpoint stops)."""
        self.handles.close()
        self.client.close()

    # -- buckets -------------------------------------------------------------------
    def need_bucket(self, bucket: str, listing: bool = False) -> str:
        """``/B``, or NoSuchBucket; with ``listing`` the name alone is
        checked (the caller's List of ``/B`` tells the rest)."""
        try:
            d = bucket_dir(bucket)
        except BadKeyError:
            raise S3Error("NoSuchBucket", "the specified bucket does not exist", bucket) from None
        if not listing and not self.keys.bucket_exists(bucket):
            raise S3Error("NoSuchBucket", "the specified bucket does not exist", bucket)
        return d

    def list_buckets(self) -> list[tuple[str, float]]:
        """``(name, created)`` of the top-level namespace directories
        (creation time unknown to the tracker's List: 0)."""
        return sorted((e.name.strip("/"), 0.0) for e in self.client.ls("/") if e.is_dir)

    def create_bucket(self, bucket: str) -> None:
        """Make ``/B`` by making its own file ``/B/.s3``."""
        try:
            bucket_dir(bucket)
        except BadKeyError as e:
            raise S3Error("InvalidBucketName", e.reason, bucket) from None
        if self.keys.bucket_exists(bucket):
            raise S3Error("BucketAlreadyOwnedByYou", "the bucket exists", bucket)
        try:
            self.client.create(f"/{bucket}/{TOP_FILE}", self.replication).close()
        except StFileExistsError:
            raise S3Error("BucketAlreadyOwnedByYou", "the bucket exists", bucket) from None

    def delete_bucket(self, bucket: str) -> None:
        """Delete a bucket that holds no key: its unfinished multipart
        uploads (their files, then their parts:
        :meth:`.multipart.Multipart.end_all`), then every file below it,
        each deleted by the tracker only while it holds no record
        (``Client.delete(if_empty=True)``: a key PUT meanwhile keeps its
        file, and the answer is ``BucketNotEmpty``, never a lost object),
        then its directories, deepest first, and ``/B``. Files left empty
        by deleted keys (``/B/a`` after PUT and DELETE of ``a/b``) go too,
        as S3 deletes a bucket whose keys were all deleted.

        Raises
        ------
        S3Error
            ``NoSuchBucket``; ``BucketNotEmpty`` (a file below it holds a
            key: nothing is deleted; or one was PUT while deleting).
        """
        from .multipart import Multipart

        d = self.need_bucket(bucket)
        files, dirs, uploads, below = [], [], [], [d]
        while below:
            for e in self.client.ls(below.pop(), sizes=False):
                if e.is_dir:
                    dirs.append(e.name)
                    below.append(e.name)
                elif is_upload_file(e.name):
                    uploads.append(e.name)  # unfinished multipart uploads go with the bucket
                elif e.records:
                    raise S3Error("BucketNotEmpty", "the bucket you tried to delete is not empty", bucket)
                else:
                    files.append(e.name)
        try:
            Multipart(self).end_all(uploads, files)
            for name in files:
                with contextlib.suppress(StFileNotFoundError):
                    self.client.delete(name, if_empty=True)
            for name in sorted(dirs, key=lambda x: -x.count("/")) + [d]:  # the deepest first
                with contextlib.suppress(StFileNotFoundError):
                    self.client.rmdir(name)
        except (FileNotEmptyError, DirectoryNotEmptyError):
            raise S3Error("BucketNotEmpty", "a key was stored in the bucket while it was deleted", bucket) from None
        except SnapshotHeldError as e:
            raise S3Error(
                "BucketNotEmpty", f"snapshots hold {e.file} of the bucket: delete them first ({e})", bucket
            ) from None
        finally:
            self.handles.forget_bucket(bucket)

    # -- objects -------------------------------------------------------------------
    def put_object(
        self,
        bucket: str,
        key: str,
        data: bytes | bytearray | memoryview,
        only_new: bool = False,
        meta: dict[str, str] | None = None,
        if_match: str | None = None,
    ) -> ObjectStat:
        """Store the bytes ``data`` at ``key`` (a new version if it exists)
        with the user metadata ``meta`` (:mod:`.usermeta`) and commit it:
        a record (a new key of a kept file in the file's next group commit,
        :mod:`.handles`), or a striped object over ``STRIPE_THRESHOLD``.
        With ``only_new`` (``If-None-Match: *``) refuse an existing key
        (``PreconditionFailed``: records are write-once, so a racing writer
        of the same new key gets it too, not an overwrite); with
        ``if_match`` (``If-Match``: an ETag or ``*``) store only over an
        existing key whose current ETag it is, judged under the file's
        writer lease, so no other replacement comes between the check and
        the put.

        Raises
        ------
        S3Error
            ``PreconditionFailed`` (a condition failed), ``NoSuchKey``
            (``if_match`` and no such key). An existing key is replaced at
            once whether the new or the existing version is a record or a
            striped object (docs/striping.md, "Replacing an object").
        StoreTorrentError
            The put or its commit failed (:func:`.errors.from_storetorrent` maps it).
        """
        data = bytes(data)
        st = self._put_fast(bucket, key, data, only_new, meta, if_match)
        if st is not None:
            return st

        def store(h, record: str, replace: bool) -> None:
            h.put(record, data, replace=replace, meta=meta)
            h.flush()

        return self.put_by(bucket, key, len(data), store, only_new, if_match)

    def put_object_stream(
        self,
        bucket: str,
        key: str,
        stream: io.RawIOBase | BinaryIO,
        size: int,
        only_new: bool = False,
        meta: dict[str, str] | None = None,
        if_match: str | None = None,
    ) -> ObjectStat:
        """Store the ``size`` bytes (over ``STRIPE_THRESHOLD``) read from the
        binary file ``stream`` at ``key`` as a striped object (a large
        PutObject's body, Complete's parts, CopyObject's striped source):
        read :data:`STREAM_STRIPE_SIZE` bytes at a time, at most
        :data:`STREAM_STRIPES_IN_FLIGHT` stripes in memory, committed when
        the stream's end was read; ``meta``, ``only_new`` and ``if_match``
        as :meth:`put_object`. A stream that fails (its read raises)
        commits nothing, and the stripes stored of it are deleted.
        ``size`` is what the caller declares (the file's size estimate, the
        striped-or-not rule); the object is the bytes read.

        Raises
        ------
        ValueError
            ``size`` is not over ``STRIPE_THRESHOLD``: bytes that fit a
            record go to :meth:`put_object`.
        S3Error
            As :meth:`put_object`; what the stream's reads raise.
        StoreTorrentError
            The put or its commit failed.
        """
        if size <= STRIPE_THRESHOLD:
            raise ValueError(f"a stream is stored as a striped object: its size must be over {STRIPE_THRESHOLD}")

        def store(h, record: str, replace: bool) -> None:  # committed when it returns
            h.put_object(
                record, stream, STREAM_STRIPE_SIZE, meta=meta, in_flight=STREAM_STRIPES_IN_FLIGHT, replace=replace
            )

        return self.put_by(bucket, key, size, store, only_new, if_match)

    def put_by(
        self,
        bucket: str,
        key: str,
        size: int,
        store: Callable[[Any, str, bool], None],
        only_new: bool,
        if_match: str | None,
    ) -> ObjectStat:
        """The slow way of every put (both above, and Complete's): ``key``'s
        file opened (made if need be), the conditions judged,
        ``store(handle, record, replace)`` called to store and commit
        ``size`` bytes (under the writer lease when it replaces), then the
        new version's stat. Raises as :meth:`put_object`."""
        self.need_bucket(bucket)
        t = self.keys.resolve(bucket, key)
        h = self.open_or_create(t.file, size, t.exists)
        try:
            replace = h.infofile().exists(t.record)
            if if_match is not None and not replace:
                raise S3Error("NoSuchKey", "the specified key does not exist", key)
            if replace and only_new:
                raise S3Error(
                    "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", key
                )
            if replace:
                h.acquire_lease(wait=LEASE_WAIT_S)
            try:
                if if_match is not None:  # under the lease: no other replacement until this put is done
                    cur = self._stat(h, t.record)
                    if cur is None:
                        raise S3Error("NoSuchKey", "the specified key does not exist", key)
                    if if_match not in (cur.etag, "*"):
                        raise S3Error(
                            "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", key
                        )
                store(h, t.record, replace)
            finally:
                if replace:
                    h.release_lease()
            st = self._stat(h, t.record)
        finally:
            h.close()
        if st is None:
            raise S3Error("InternalError", f"{key} was stored but is not committed in {t.file}", key)
        self.handles.keep(t.file)  # the next key of this file takes the fast path
        return st

    def open_or_create(self, file: str, size: int = 0, exists: bool = True):
        """File ``file`` open (a ``StFile``), made with the endpoint's
        replication (``size``: its estimate in bytes) if it is not there:
        where a key's record goes (:meth:`.keymap.KeyMap.resolve`), or an
        upload's parts. ``exists``: the caller's resolution saw it (else it
        is made first, opened if made meanwhile). A file is made only while
        its bucket exists (``in_directory``): a PUT racing DeleteBucket
        answers ``NoSuchBucket`` and never makes the bucket again."""
        if exists:
            try:
                return self.client.open(file)
            except StFileNotFoundError:  # gone meanwhile, or /B/.s3 of a directory not made by CreateBucket
                pass
        bucket = file.split("/")[1]
        try:
            return self.client.create(file, self.replication, est_size=size, in_directory=f"/{bucket}")
        except StFileExistsError:  # made meanwhile
            return self.client.open(file)
        except DirectoryNotFoundError:
            raise S3Error("NoSuchBucket", "the specified bucket does not exist (deleted meanwhile)", bucket) from None

    def _kept_file(self, bucket: str, key: str):
        """``(kept file entry, record)`` of a valid key under a kept file
        (:meth:`.handles.HandleCache.find`), or None."""
        try:
            check_key(key)
            return self.handles.find(bucket, key)
        except BadKeyError:
            return None

    def _kept(self, bucket: str, key: str) -> tuple[FileHandles, tuple, str] | None:
        """``(entry, borrowed handle, record)`` of a key whose file is kept
        (:mod:`.handles`), the handle checked to be the file's now; None
        when it is not kept, or no longer the file (then the entry is
        dropped): the caller goes the slow way."""
        hit = self._kept_file(bucket, key)
        if hit is None:
            return None
        f, record = hit
        try:
            return f, f.borrow(), record
        except StoreTorrentError:  # deleted, its name another file's, the tracker away: the slow way says
            self.handles.forget(f)
            return None

    def _put_fast(
        self, bucket: str, key: str, data: bytes, only_new: bool, meta: dict[str, str] | None, if_match: str | None
    ) -> ObjectStat | None:
        """A PUT of a new key into a kept file, in the file's next group
        commit (:meth:`.handles.FileHandles.put_new`): its stat once
        committed. None when the slow way takes it: the file not kept, the
        key existing (a replacement, under the writer lease), ``If-Match``,
        or a striped object.

        Raises
        ------
        S3Error
            ``PreconditionFailed`` (``only_new`` and the key exists).
        StoreTorrentError
            The put or its group's commit failed.
        """
        if if_match is not None or len(data) > STRIPE_THRESHOLD:
            return None
        kept = self._kept(bucket, key)
        if kept is None:
            return None
        f, got, record = kept
        ok = False
        try:
            exists = got[0].infofile().exists(record)
            ok = True
        finally:
            f.give_back(got, ok)
        st = None
        if not exists:
            try:
                st = f.put_new(record, data, meta, self._stat)
            except StFileNotFoundError:  # deleted since: the slow way
                self.handles.forget(f)
                return None
        if st is None and only_new:
            raise S3Error("PreconditionFailed", "At least one of the pre-conditions you specified did not hold", key)
        return st

    @staticmethod
    def _stat(h, record: str) -> ObjectStat | None:
        """The stat of ``record`` at the generation ``h`` reads (its current
        one, or its ``as_of``), or None."""
        inf = h.infofile()
        g = h.generation
        r = inf.record_stat(record)
        if r is not None:
            size, crc, t, logical = r
            vid = generation_of(inf, record, g, striped=False)
            meta = inf.user_meta_of(record)
            return ObjectStat(user_size(size, logical), int(crc), float(t), not h.filter_names, vid, meta)
        o = inf.object_stat(record)
        if o is not None:
            vid = generation_of(inf, record, g, striped=True)
            return ObjectStat(int(o[0]), int(o[1]), float(o[2]), version_id=vid, meta=inf.user_meta_of(record))
        return None

    def _read_key(self, bucket: str, key: str, version: str | None, read: Callable[[Any, str], T]) -> T:
        """``read(handle, record)`` of ``key``: on a kept handle of its file
        (:mod:`.handles`), given back after; for a ``version`` or a file not
        kept, on a handle opened for it and closed after (:meth:`_open_key`).
        A kept handle that fails other than with an answer about the key
        (an ``S3Error``, ``RecordNotFoundError``) is closed and ``read``
        runs once more the slow way, on a new handle: a handle kept across
        a change it cannot see (a grown peerlist, a tracker failover) costs
        a retry, never the request. ``read`` must be a read (it may run twice).
        When ``read`` returns ``(stat, ObjectBody, span)`` the handle stays
        lent to the body, which releases it when it ends (:mod:`.objstream`)."""
        kept = self._kept(bucket, key) if version is None else None
        if kept is not None:
            f, got, record = kept
            try:
                out = read(got[0], record)
            except (S3Error, RecordNotFoundError):  # an answer about the key: the handle is fine
                f.give_back(got, True)
                raise
            except Exception as e:  # noqa: BLE001 (the kept handle failed: retried below on a new one)
                f.give_back(got, False)
                self.handles.forget(f)
                log.info("a kept handle of %s failed (%s: %s); reading it anew", f.name, type(e).__name__, e)
            else:
                if not _lend(out, lambda ok: f.give_back(got, ok)):
                    f.give_back(got, True)
                return out
        h, record = self._open_key(bucket, key, version)
        lent = False
        try:
            out = read(h, record)
            lent = _lend(out, lambda ok: h.close())
        finally:
            if not lent:
                h.close()
        if version is None:
            self.handles.keep(h.name)  # the next request of this file takes the fast path
        return out

    def _open_key(self, bucket: str, key: str, version: str | None = None):
        """``(handle, record)`` of ``key``; with ``version`` (a version id:
        a generation of the key's file, or one of its snapshots' names) the
        handle reads the file as of it (docs/snapshots.md)."""
        self.need_bucket(bucket)
        try:
            check_key(key)
        except BadKeyError:
            raise S3Error("NoSuchKey", "the specified key does not exist", key) from None
        t = self.keys.resolve(bucket, key)
        if not t.exists:
            raise S3Error("NoSuchKey", "the specified key does not exist", key)
        try:
            if version is None:
                return self.client.open(t.file), t.record
            return self.client.open(t.file, as_of=as_of_of(version)), t.record
        except StFileNotFoundError:
            raise S3Error("NoSuchKey", "the specified key does not exist", key) from None
        except (InvalidOptionError, SnapshotNotFoundError, SnapshotExpiredError) as e:
            raise S3Error("NoSuchVersion", f"the specified version does not exist ({e})", key) from None

    @staticmethod
    def _missing(key: str, version: str | None) -> S3Error:
        if version is None:
            return S3Error("NoSuchKey", "the specified key does not exist", key)
        return S3Error("NoSuchVersion", f"{key} has no version {version}", key)

    def head_object(self, bucket: str, key: str, version: str | None = None) -> ObjectStat:
        """The object's stat (of ``version``, else the current one), from
        the infofile (no bytes read)."""
        st = self._read_key(bucket, key, version, self._stat)
        if st is None:
            raise self._missing(key, version)
        return st

    def get_object(
        self,
        bucket: str,
        key: str,
        decide: Callable[[ObjectStat], tuple[int, int] | None | bool] | None = None,
        version: str | None = None,
        stream: bool = False,
    ) -> tuple[ObjectStat, bytes | ObjectBody | None, tuple[int, int] | None]:
        """``(stat, bytes, span)`` of the object (of ``version``, else the
        current one). ``decide(stat)``, called
        before any byte is read, says what to read: None the whole object,
        ``(start, end)`` (end exclusive) a range, False nothing (bytes
        None: a 304); it may raise. A striped object (or a range of one)
        is read from the stripes it touches, :attr:`read_ahead` of them
        queued at once (:func:`st_py.client.object_stream.stream_object`);
        with ``stream`` its body is an :class:`.objstream.ObjectBody`
        (first stripe read, the rest as the client takes them; at most
        ``read_ahead`` + 1 stripes held), else bytes. A record is read
        whole (records are at most 64 MiB); a range of it is cut and the
        record kept for the next range of the same version (:mod:`.reccache`).

        Raises
        ------
        S3Error
            ``NoSuchBucket``, ``NoSuchKey``, ``NoSuchVersion``, or what ``decide`` raises.
        RecordUnavailableError, ChecksumError
        """

        return self._read_key(bucket, key, version, self._get_reader(key, version, decide, stream, False))

    def get_object_quick(
        self, bucket: str, key: str, decide: Callable[[ObjectStat], tuple[int, int] | None | bool] | None = None
    ) -> tuple[ObjectStat, bytes | ObjectBody | None, tuple[int, int] | None] | None:
        """:meth:`get_object` of the current version (its body bytes, never
        streamed), answered in the
        calling thread (the endpoint's event loop) when nothing in it
        blocks: the key's file kept with an idle handle (:mod:`.handles`)
        whose reads ask nothing of the tracker, and the object one record
        of at most :data:`QUICK_GET_BYTES` with a copy on this host's disk
        (:meth:`st_py.client.file.StFile.reads_locally`). None otherwise,
        before any byte is read (``decide`` may have run): the caller asks
        :meth:`get_object` in a worker thread, which answers the same. A
        kept handle that fails other than with an answer about the key is
        dropped, and None returned (the worker thread reads it anew).

        Raises
        ------
        S3Error
            As :meth:`get_object` (``NoSuchKey``, what ``decide`` raises).
        """
        hit = self._kept_file(bucket, key)
        if hit is None:
            return None
        f, record = hit
        got = f.borrow_idle()
        if got is None:
            return None
        ok = True
        try:
            if not got[0].reads_locally():
                return None
            try:
                got[0].generation  # noqa: B018 (as borrow(): raises StFileNotFoundError when the name moved on)
                out = self._get_reader(key, None, decide, False, True)(got[0], record)
                with self._stats_lock:
                    self._quick_gets += 1
                return out
            except (S3Error, RecordNotFoundError, _NotQuick):  # an answer about the key, or not quick
                raise
            except Exception as e:  # noqa: BLE001 (the kept handle failed: the worker thread reads it anew)
                ok = False
                log.info("a kept handle of %s failed (%s: %s); reading it anew", f.name, type(e).__name__, e)
                return None
        except _NotQuick:
            return None
        finally:
            f.give_back(got, ok)
            if not ok:
                self.handles.forget(f)

    def _get_reader(
        self,
        key: str,
        version: str | None,
        decide: Callable[[ObjectStat], tuple[int, int] | None | bool] | None,
        stream: bool,
        quick: bool,
    ) -> Callable[[Any, str], tuple[ObjectStat, bytes | ObjectBody | None, tuple[int, int] | None]]:
        """The read of :meth:`get_object` on a handle (``read(h, record)``);
        ``quick``: raise :class:`_NotQuick` before any byte is read when
        the read could block (:meth:`get_object_quick`)."""

        def read(h, record: str) -> tuple[ObjectStat, bytes | ObjectBody | None, tuple[int, int] | None]:
            try:
                with one_state(h.infofile()):  # the stat and the bytes' version of one commit
                    st = self._stat(h, record)
                    ver = h.object_version(record) if st is not None else None
                    pinned = h.infofile().lookup(record) if st is not None and ver is None else None

                def body_of() -> bytes:  # the record's version the stat is of, whatever replaced it since
                    if pinned is not None and pinned.peers:
                        return h.queue_get_version(pinned, stored=False).result()
                    return h.get(record)

                if st is None:
                    raise self._missing(key, version)
                asked = decide(st) if decide is not None else None
                if asked is False:
                    return st, None, None
                span = asked if isinstance(asked, tuple) else None  # None or True: the whole object
                whole = span is None
                obj = ver.obj if ver is not None else None
                if obj is None:
                    m = h.record_meta(record)
                    _check_peerlist(h, record, m)
                    if quick and (m is None or m.size > QUICK_GET_BYTES or not h.reads_locally(m)):
                        raise _NotQuick(record)
                elif quick:
                    raise _NotQuick(record)
                if obj is not None:
                    a, b = (0, obj.size) if span is None else span
                    stats = StreamStats()
                    pieces = stream_object(h, obj, a, b, self.read_ahead, stats, ver)
                    if not stream:
                        data = b"".join(pieces)
                        self._streamed(stats)
                        return st, data, None if whole else span
                    body = ObjectBody(pieces, b - a, stats, self._streamed)
                    body.prefetch()  # the first stripe's failure is this request's error, before any header
                    return st, body, None if whole else span
                if span is None:
                    return st, body_of(), None
                a, b = span
                ck = (h.file_id, record, st.version_id, st.crc32c, st.size, st.mtime)
                kept = self.ranges.get(ck)
                if kept is None:
                    kept = body_of()
                    self.ranges.put(ck, kept)
                return st, kept[a:b], span
            except RecordNotFoundError:
                raise self._missing(key, version) from None

        return read

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete the key's record; a key that does not exist is no error (S3)."""
        kept = self._kept(bucket, key)
        if kept is not None:
            f, got, record = kept
            ok = False
            try:
                got[0].delete(record)
                got[0].flush()
                ok = True
            except RecordNotFoundError:
                ok = True
            finally:
                f.give_back(got, ok)
            return
        self.need_bucket(bucket)
        try:
            check_key(key)
        except BadKeyError:
            return
        t = self.keys.resolve(bucket, key)
        if not t.exists:
            return
        try:
            h = self.client.open(t.file)
        except StFileNotFoundError:
            return
        try:
            h.delete(t.record)
            h.flush()
        except RecordNotFoundError:
            pass
        finally:
            h.close()

    def list_versions(self, bucket: str, prefix: str = "") -> list:
        """:func:`.versions.list_versions` over this caller's client, the
        bucket checked first (``NoSuchBucket``)."""
        from .versions import list_versions

        self.need_bucket(bucket)
        return list_versions(self.client, bucket, prefix)

    def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        delimiter: str = "",
        max_keys: int = 1000,
        after: str = "",
        token: bool = False,
    ) -> tuple[list[tuple], list[str], bool, str]:
        """:func:`.keylist.list_objects` over this caller's client, the
        bucket checked first (``NoSuchBucket``)."""
        from .keylist import dir_rolls_up, list_objects

        self.need_bucket(bucket, listing=True)
        counts = dir_rolls_up("", prefix, delimiter)  # names only when no file of /B can roll up
        top = self.keys.bucket_entries(bucket, counts)  # the bucket's List, once: checked, then walked
        if top is None:
            raise S3Error("NoSuchBucket", "the specified bucket does not exist", bucket)
        return list_objects(
            self.client, bucket, prefix, delimiter, max_keys, after, token, top, self._reading, top_counted=counts
        )

    @contextlib.contextmanager
    def _reading(self, file: str):
        """A kept read handle of ``file`` for a listing's page (:mod:`.handles`:
        checked to be the file's now, no tracker ``Open`` a page), or None
        when the file is gone (the entry dropped)."""
        got = None
        for _ in range(2):  # a kept handle of a file deleted and made again under its name: once more, anew
            f = self.handles.keep(file)
            try:
                got = f.borrow()
                break
            except StFileNotFoundError:
                self.handles.forget(f)
            except StoreTorrentError:
                self.handles.forget(f)
                raise
        if got is None:
            yield None
            return
        ok = False
        try:
            yield got[0]
            ok = True
        finally:
            f.give_back(got, ok)
