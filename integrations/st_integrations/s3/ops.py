"""The S3 operations over one caller's StoreTorrent client: buckets as
namespace directories and objects as records, placed by
:mod:`st_integrations.keymap` (docs/s3.md).

Each function is synchronous (the app runs it in a worker thread) and
raises :class:`.errors.S3Error` or a StoreTorrent error (mapped by
:func:`.errors.from_storetorrent`).

Thread safety: each call opens its own file handles; the client is shared
(:class:`st_py.client.client.Client` is thread-safe).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from st_py.core.infofile import RESERVED_PREFIXES, prefix_upper, user_size
from st_py.errors import RecordNotFoundError, StFileExistsError, StFileNotFoundError

from ..keymap import TOP_FILE, UPLOAD_PREFIX, BadKeyError, KeyMap, bucket_dir, check_key, key_of
from .errors import S3Error

LEASE_WAIT_S = 30.0  # how long a PUT over an existing key waits for the file's writer lease


def _first(item: tuple) -> str:
    return item[0]


@dataclass(frozen=True)
class ObjectStat:
    """What S3 says of an object: ``size`` (user bytes), ``crc32c``,
    ``mtime`` (unix s of its commit) and its ``etag`` (quoted)."""

    size: int
    crc32c: int
    mtime: float
    crc_of_bytes: bool = True  # False: the CRC is of the filtered bytes the peers keep (zstd, AES)

    @property
    def etag(self) -> str:
        """The object's ETag: an opaque 32-hex value of its size, CRC-32C and
        commit time (docs/s3.md, "ETags": not the MD5 of its bytes, which
        nothing keeps), the same in PUT, HEAD, GET and listings."""
        ident = f"{self.size}:{self.crc32c}:{self.mtime!r}".encode()
        return '"' + hashlib.md5(ident, usedforsecurity=False).hexdigest() + '"'


class Ops:
    """The operations of one caller.

    Parameters
    ----------
    client : st_py.client.client.Client
        The caller's client (their API key).
    replication : str
        Of the files a PUT creates (``x2``).
    """

    def __init__(self, client, replication: str = "x2"):
        self.client = client
        self.keys = KeyMap(client)
        self.replication = replication

    # -- buckets -------------------------------------------------------------------
    def need_bucket(self, bucket: str) -> str:
        """``/B``, or NoSuchBucket."""
        try:
            d = bucket_dir(bucket)
        except BadKeyError:
            raise S3Error("NoSuchBucket", "the specified bucket does not exist", bucket) from None
        if not self.keys.bucket_exists(bucket):
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
        """Delete an empty bucket: its own file, then its directory.

        Raises
        ------
        S3Error
            ``NoSuchBucket``, ``BucketNotEmpty``.
        """
        d = self.need_bucket(bucket)
        top = f"{d}/{TOP_FILE}"
        uploads = []
        for e in self.client.ls(d):
            if not e.is_dir and e.name.startswith(f"{d}/{UPLOAD_PREFIX}"):
                uploads.append(e.name)  # unfinished multipart uploads go with the bucket
            elif e.name != top or e.is_dir or e.records:
                raise S3Error("BucketNotEmpty", "the bucket you tried to delete is not empty", bucket)
        for name in uploads:
            try:
                self.client.delete(name)
            except StFileNotFoundError:
                pass
        try:
            self.client.delete(top)
        except StFileNotFoundError:
            pass
        try:
            self.client.rmdir(d)
        except StFileNotFoundError:
            pass

    # -- objects -------------------------------------------------------------------
    def put_object(self, bucket: str, key: str, data: bytes, only_new: bool = False) -> ObjectStat:
        """Store ``data`` at ``key`` (a new version if it exists) and commit
        it; with ``only_new`` (``If-None-Match: *``) refuse an existing key
        (``PreconditionFailed``: records are write-once, so a racing writer
        of the same new key gets it too, not an overwrite)."""
        self.need_bucket(bucket)
        t = self.keys.resolve(bucket, key)
        h = None
        if not t.exists:
            try:
                h = self.client.create(t.file, self.replication, est_size=len(data))
            except StFileExistsError:  # made meanwhile
                h = None
        if h is None:
            h = self.client.open(t.file)
        try:
            replace = h.infofile().exists(t.record)
            if replace and only_new:
                raise S3Error(
                    "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", key
                )
            if replace:
                h.acquire_lease(wait=LEASE_WAIT_S)
            try:
                h.put(t.record, data, replace=replace)
                h.flush()
            finally:
                if replace:
                    h.release_lease()
            st = self._stat(h, t.record)
        finally:
            h.close()
        if st is None:
            raise S3Error("InternalError", f"{key} was stored but is not committed in {t.file}", key)
        return st

    @staticmethod
    def _stat(h, record: str) -> ObjectStat | None:
        r = h.infofile().record_stat(record)
        if r is not None:
            size, crc, t, logical = r
            return ObjectStat(user_size(size, logical), int(crc), float(t), not h.filter_names)
        o = h.infofile().object_stat(record)
        if o is not None:
            return ObjectStat(int(o[0]), int(o[1]), float(o[2]))
        return None

    def _open_key(self, bucket: str, key: str):
        self.need_bucket(bucket)
        try:
            check_key(key)
        except BadKeyError:
            raise S3Error("NoSuchKey", "the specified key does not exist", key) from None
        t = self.keys.resolve(bucket, key)
        if not t.exists:
            raise S3Error("NoSuchKey", "the specified key does not exist", key)
        try:
            return self.client.open(t.file), t.record
        except StFileNotFoundError:
            raise S3Error("NoSuchKey", "the specified key does not exist", key) from None

    def head_object(self, bucket: str, key: str) -> ObjectStat:
        """The object's stat, from the infofile (no bytes read)."""
        h, record = self._open_key(bucket, key)
        try:
            st = self._stat(h, record)
        finally:
            h.close()
        if st is None:
            raise S3Error("NoSuchKey", "the specified key does not exist", key)
        return st

    def get_object(self, bucket: str, key: str) -> tuple[ObjectStat, bytes]:
        """The object's stat and bytes (the whole object: ranges are cut
        from it by the caller; docs/s3.md)."""
        h, record = self._open_key(bucket, key)
        try:
            st = self._stat(h, record)
            if st is None:
                raise S3Error("NoSuchKey", "the specified key does not exist", key)
            obj = h.object_meta(record)
            data = h.get_object(obj) if obj is not None else h.get(record)
        except RecordNotFoundError:
            raise S3Error("NoSuchKey", "the specified key does not exist", key) from None
        finally:
            h.close()
        return st, data

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete the key's record; a key that does not exist is no error (S3)."""
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

    # -- listing -------------------------------------------------------------------
    def _files(self, bucket: str, prefix: str) -> list[tuple[str, str, int]]:
        """``(file, key base, records)`` of every StoreTorrent file below
        ``/B`` whose keys may start with ``prefix``: the namespace walked
        (one tracker ``List`` per directory), pruned by the prefix."""
        d = bucket_dir(bucket)
        out: list[tuple[str, str, int]] = []
        todo = [d]
        while todo:
            for e in self.client.ls(todo.pop()):
                rel = e.name[len(d) + 1 :]
                if rel.startswith(UPLOAD_PREFIX):
                    continue  # a multipart upload's parts: not objects
                base = "" if rel == TOP_FILE else rel + "/"
                if base and not (prefix.startswith(base) or base.startswith(prefix)):
                    continue
                if e.is_dir:
                    todo.append(e.name)
                elif e.file_id:
                    out.append((e.name, base, int(e.records)))
        return out

    def _level(self, file: str, rp: str):
        """``InfofileReader.level(rp)`` of ``file`` (its entries and heads at
        that level), or None if the file is gone."""
        try:
            h = self.client.open(file)
        except StFileNotFoundError:
            return None
        try:
            return h.infofile().level(rp)
        finally:
            h.close()

    def _stream(
        self, bucket: str, file: str, base: str, records: int, prefix: str, delimiter: str, after: str, token: bool
    ) -> Generator[tuple, None, None]:
        """``(key, size, crc32c, mtime)`` of one file's keys that start with
        ``prefix`` and sort after ``after``, in key order, from its
        infofile's name index (rows, never objects). With a delimiter, a
        common prefix may come instead of the keys below it, as
        ``(prefix, None, 0, 0.0)``: a whole file below one (no row read),
        or one level of ``/`` (``InfofileReader.level``: one index search per
        sub-prefix, not a row per key)."""
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
            got = self._level(file, rp)
            if got is None:
                return
            entries, heads = got
            items = [
                (base + name, user_size(stored, logical), int(crc), float(t))
                for name, stored, logical, crc, t, _k, _ss in entries
            ]
            cps = [(here + head + "/", None, 0, 0.0) for head in heads if head]
            for item in heapq.merge(items, cps, key=_first):
                if item[0] > after:
                    yield item
            return
        lo, hi = rp, (prefix_upper(rp) if rp else None)
        if after.startswith(base) and after[len(base) :] > lo:
            lo = after[len(base) :]
        for name, size, crc, t in self._lazy_rows(file, lo, hi):
            if not base and "/" in name:
                continue  # not a top-level key: unaddressable through S3
            k = key_of(bucket, file, name)
            if k > after:
                yield k, size, crc, t

    def _lazy_rows(self, file: str, lo: str, hi: str | None) -> Iterator[tuple]:
        """``(name, size, crc32c, mtime)`` of the records and striped objects
        of ``file`` named in ``[lo, hi)``, in name order, read from an open
        cursor as they are taken (a page of a listing reads about the rows
        it returns, not every row after its start); the handle is closed
        when the generator ends or is closed."""
        try:
            h = self.client.open(file)
        except StFileNotFoundError:
            return
        try:
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
        finally:
            h.close()

    def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        delimiter: str = "",
        max_keys: int = 1000,
        after: str = "",
        token: bool = False,
    ) -> tuple[list[tuple], list[str], bool, str]:
        """ListObjectsV2's answer: ``(contents, common prefixes, truncated,
        last item)``; contents ``(key, size, crc32c, mtime)``. ``after``
        is where to start (exclusive): a start-after or marker key, or with
        ``token`` the last item of the previous page (a common prefix there
        skips every key below it)."""
        self.need_bucket(bucket)
        streams = [
            self._stream(bucket, f, b, n, prefix, delimiter, after, token) for f, b, n in self._files(bucket, prefix)
        ]
        try:
            return self._page(heapq.merge(*streams, key=_first), prefix, delimiter, max_keys, after, token)
        finally:
            for st in streams:
                st.close()  # their infofile cursors and handles

    @staticmethod
    def _page(items, prefix: str, delimiter: str, max_keys: int, after: str, token: bool):
        contents: list[tuple] = []
        prefixes: list[str] = []
        last = ""
        n = 0
        for item in items:
            key = item[0]
            if not key.startswith(prefix):
                continue
            if token and delimiter and after.endswith(delimiter) and key.startswith(after):
                continue
            cp = ""
            if delimiter:
                i = key.find(delimiter, len(prefix))
                if i >= 0:
                    cp = key[: i + len(delimiter)]
            if cp and cp == last:
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
