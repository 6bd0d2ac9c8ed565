"""Multipart uploads (docs/s3.md, "Multipart uploads"): each upload is a
StoreTorrent file of the bucket, ``/B/.s3-upload-<id>``, holding the key
(record ``key``, with the object's user metadata), where the key's object
will be (record ``parts``: the file and record the key resolved to at
CreateMultipartUpload) and, once completed, the result (record
``completed``). The parts themselves are hidden records of that file
(:meth:`st_py.client.file.StFile.put_parts`: ``.st-stripe/.s3-upload-<id>/<n>-<md5>-<size>/<i>``,
one record a part of up to 64 MiB, 32 MiB records for a larger one), so
any endpoint of the cluster can take the next part, and Complete makes
them the object's stripes where they are, in one tracker transaction,
with no byte read or written (:meth:`st_py.client.file.StFile.compose`),
when they can be stripes: every part but the last of one size, the last
no larger, the file without filters, the key still in that file. Otherwise
Complete reads the parts in order and stores the object anew (a record up
to 64 MiB, else a striped object streamed from the parts:
:class:`PartsReader` holds a part's piece and two stripes being stored,
whatever the object's size). Either way the parts' records leave the file
and the result is kept for :data:`COMPLETED_KEEP_S`, so a Complete sent
again gets it, as from AWS; the reaper then deletes the upload's file.
A Complete holds the upload file's writer lease while it stores (its claim,
:data:`CLAIM_TTL_S`), so one sent while another runs waits and answers the
same object: the key is stored once. Aborting deletes the parts' records
and the upload's file. An upload made by an endpoint before 2026-12-01 has
no ``parts`` record and its parts in its own file (records
``part-00001-<MD5 hex>``): it goes on and completes as then, by copy.

A part's ETag is the MD5 of its bytes, as S3's is (clients such as rclone
check it), computed when it arrives and kept in its records' names, so
ListParts and Complete read it from the infofile without reading the part.

Thread safety: as :class:`.ops.Ops`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import secrets
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from st_py.client.record_writer import STRIPE_THRESHOLD
from st_py.client.striping import DEFAULT_STRIPE_SIZE
from st_py.core.history import past_generations
from st_py.core.infofile import STRIPE_PREFIX, prefix_upper, stripe_name, user_size
from st_py.errors import (
    DirectoryNotFoundError,
    InvalidOptionError,
    LeaseHeldError,
    RecordNotFoundError,
    StFileNotFoundError,
)

from ..keymap import UPLOAD_PREFIX, check_key
from . import ops as ops_module
from .errors import S3Error
from .ops import ObjectStat, Ops
from .pieces import PieceReader

MIN_PART = 5 * 1024 * 1024  # S3's smallest part but the last
MAX_PART_NUMBER = 10_000
# Bytes of a part read at once by a Complete that streams (a record part is
# held whole anyway; a striped one is read this much at a time)
PART_PIECE = 8 << 20
# A completed upload's record (in its file, its parts deleted): the object's
# size, CRC-32C, commit time and version, so a Complete sent again (its answer
# lost with the connection: SDKs retry) gets the first one's result, as
# AWS answers it; the reaper removes the file COMPLETED_KEEP_S seconds after.
DONE = "completed"
COMPLETED_KEEP_S = 900.0
# The upload file's record of where its parts and its key's object are:
# JSON {"file": ..., "record": ...} (none: an upload made before 2026-12-01,
# its parts records of its own file).
WHERE = "parts"
PART_RECORD = DEFAULT_STRIPE_SIZE  # bytes a record of a part over 64 MiB holds (the last less)
# A Complete holds the upload file's writer lease while it stores the object
# (renewed as it reads the parts), so a second Complete of the same upload
# (an SDK's retry while the first still runs) waits for the first one's
# result instead of storing the key again; a Complete whose endpoint died
# stops renewing, and the next one goes on within CLAIM_TTL_S.
CLAIM_TTL_S = 30.0
CLAIM_WAIT_S = 900.0  # how long a Complete waits for another of the same upload (then a 503 to retry)

log = logging.getLogger("storetorrent.s3")


@dataclass(frozen=True)
class Part:
    """One uploaded part: its ``number``, MD5 (hex), ``size`` in bytes, the
    newest commit time of its records (unix s), and its records in order
    with their sizes (one record, or 32 MiB pieces of a larger part)."""

    number: int
    md5: str
    size: int
    mtime: float
    records: tuple[str, ...]
    sizes: tuple[int, ...]


def _record(n: int, md5: str) -> str:
    """A part's record in an upload made before 2026-12-01 (in its own file)."""
    return f"part-{n:05d}-{md5}"


def _parts(rows) -> dict[int, dict[str, Part]]:
    """``{number: {md5: Part}}`` of the part rows of an upload made before
    2026-12-01 (``entries_between`` of its own file); a part uploaded twice
    has two until the first is deleted."""
    out: dict[int, dict[str, Part]] = {}
    for name, stored, logical, _crc, t, _k, _s in rows:
        num, _, md5 = name[5:].partition("-")
        if num.isdigit() and len(md5) == 32:
            size = user_size(stored, logical)
            out.setdefault(int(num), {})[md5] = Part(int(num), md5, size, float(t), (name,), (size,))
    return out


def _hidden_range(upload_id: str | None) -> tuple[str, str]:
    """The names ``[lo, hi)`` of an upload's part records in its key's
    file; with ``upload_id`` None, of every upload's."""
    lo = f"{STRIPE_PREFIX}{UPLOAD_PREFIX}" + ("" if upload_id is None else f"{upload_id}/")
    return lo, prefix_upper(lo)


def _part_name(upload_id: str, number: int, md5: str, size: int) -> str:
    """What :meth:`StFile.put_parts` stores part ``number`` under."""
    return f"{UPLOAD_PREFIX}{upload_id}/{number:05d}-{md5}-{size}"


def _hidden_rows(inf, upload_id: str) -> list[tuple]:
    """``(name, size, crc32c, committed_at, logical_size)`` of every part
    record of the upload in its key's file (``inf``), whole parts or not."""
    return inf.records_between(*_hidden_range(upload_id)).fetchall()


def _hidden_parts(rows: list[tuple], upload_id: str) -> dict[int, dict[str, Part]]:
    """``{number: {md5: Part}}`` of the whole parts among ``rows``
    (:func:`_hidden_rows`): a part is whole when its records are numbered
    0 to k-1 and hold its size (an endpoint killed midway leaves less)."""
    lo, _ = _hidden_range(upload_id)
    groups: dict[tuple[int, str, int], list[tuple[int, str, int, float]]] = {}
    for name, stored, _crc, t, logical in rows:
        head, _, idx = name[len(lo) :].rpartition("/")
        num, _, rest = head.partition("-")
        md5, _, total = rest.partition("-")
        if num.isdigit() and len(md5) == 32 and total.isdigit() and idx.isdigit():
            groups.setdefault((int(num), md5, int(total)), []).append(
                (int(idx), name, user_size(stored, logical), float(t))
            )
    out: dict[int, dict[str, Part]] = {}
    for (num, md5, total), recs in groups.items():
        recs.sort()
        if [r[0] for r in recs] == list(range(len(recs))) and sum(r[2] for r in recs) == total:
            part = Part(num, md5, total, max(r[3] for r in recs), tuple(r[1] for r in recs), tuple(r[2] for r in recs))
            out.setdefault(num, {})[md5] = part
    return out


class PartsReader(PieceReader):
    """The bytes of an upload's part records ``names``, in order, as one
    read-only binary file (:class:`.pieces.PieceReader`): each read through
    ``handle.open`` :data:`PART_PIECE` bytes at a time (a record read once,
    a striped part a stripe at a time), so at most one part is held, and
    ``read(n)`` gives up to ``n`` bytes of the current piece (fewer at its
    end, as a raw file may; -1: the rest of the parts).

    The lease of ``claim`` (the upload file's handle; default ``handle``) is
    renewed as the parts are read. A read raises ``S3Error``
    (``InternalError``) when a part's bytes are not its ``sizes`` entry (the object is not committed), and
    ``RecordNotFoundError`` or ``RecordUnavailableError`` when a part is
    gone or unreadable (``StFile.open``).

    Not thread-safe: one reader, one thread (the Complete's)."""

    def __init__(self, handle, names: list[str], sizes: list[int], claim=None):
        super().__init__(self._next_part_piece)
        self._h, self._names, self._sizes = handle, names, sizes
        self._claim = handle if claim is None else claim  # the upload file's handle: its lease renewed
        self._i = 0
        self._renewed = time.monotonic()
        self._cur: io.RawIOBase | None = None
        self._got = 0  # bytes of the current part given

    def _next_part_piece(self) -> bytes:
        """The next piece of the parts, b"" after the last; a part's size
        checked at its end."""
        if self._claim.lease and time.monotonic() - self._renewed > CLAIM_TTL_S / 3:
            self._claim.acquire_lease()  # held: renewed (the Complete's claim on the upload)
            self._renewed = time.monotonic()
        while self._i < len(self._names):
            if self._cur is None:
                self._cur, self._got = self._h.open(self._names[self._i]), 0
            piece = self._cur.read(PART_PIECE)
            if piece:
                self._got += len(piece)
                return piece
            self._cur.close()
            self._cur = None
            if self._got != self._sizes[self._i]:
                name, want = self._names[self._i], self._sizes[self._i]
                raise S3Error("InternalError", f"part {name} read {self._got} bytes, not {want}")
            self._i += 1
        return b""

    def close(self) -> None:
        """Close the part being read, then this stream."""
        if self._cur is not None:
            self._cur.close()
            self._cur = None
        super().close()


class Multipart:
    """The multipart operations over one caller's :class:`.ops.Ops`."""

    def __init__(self, ops: Ops):
        self.ops = ops
        self.client = ops.client

    def _file(self, bucket: str, upload_id: str) -> str:
        if not (len(upload_id) == 32 and all(c in "0123456789abcdef" for c in upload_id)):
            raise S3Error("NoSuchUpload", "the specified multipart upload does not exist", upload_id)
        return f"/{bucket}/{UPLOAD_PREFIX}{upload_id}"

    def _open(self, bucket: str, key: str, upload_id: str, completed: bool = False):
        """The upload's file, open; ``NoSuchUpload`` if there is none for
        ``key``, or (unless ``completed``) it was completed."""
        self.ops.need_bucket(bucket)
        try:
            h = self.client.open(self._file(bucket, upload_id))
        except StFileNotFoundError:
            raise S3Error("NoSuchUpload", "the specified multipart upload does not exist", upload_id) from None
        try:
            if h.get("key").decode("utf-8", "surrogatepass") != key:
                raise S3Error("NoSuchUpload", "the upload is of another key", upload_id)
            if not completed and h.infofile().exists(DONE):
                raise S3Error("NoSuchUpload", "the multipart upload was completed", upload_id)
        except RecordNotFoundError:
            h.close()
            raise S3Error("NoSuchUpload", "the specified multipart upload does not exist", upload_id) from None
        except S3Error:
            h.close()
            raise
        return h

    def create(self, bucket: str, key: str, meta: dict[str, str] | None = None) -> str:
        """Start an upload of ``key`` whose object will have the user
        metadata ``meta`` (kept with the upload's ``key`` record, given to
        the object at :meth:`complete`); its upload id (32 hex). Where the
        key resolves now (its file and record) is kept (:data:`WHERE`): the
        parts are stored in that file."""
        self.ops.need_bucket(bucket)
        check_key(key)
        t = self.ops.keys.resolve(bucket, key)  # refuse a key that names a file or directory now, not at Complete
        upload_id = secrets.token_hex(16)
        try:
            h = self.client.create(self._file(bucket, upload_id), self.ops.replication, in_directory=f"/{bucket}")
        except DirectoryNotFoundError:
            raise S3Error("NoSuchBucket", "the specified bucket does not exist (deleted meanwhile)", bucket) from None
        with h:
            h.put("key", key.encode("utf-8", "surrogatepass"), meta=meta)
            h.put(WHERE, json.dumps({"file": t.file, "record": t.record}).encode())
        return upload_id

    @staticmethod
    def _where(h) -> tuple[str, str] | None:
        """``(file, record)`` where the upload (``h``: its file, open) keeps
        its parts and its key resolved at create; None for an upload made
        before 2026-12-01 (its parts in its own file)."""
        if not h.infofile().exists(WHERE):
            return None
        d = json.loads(h.get(WHERE))
        return str(d["file"]), str(d["record"])

    def _all_parts(self, h, upload_id: str) -> tuple[dict[int, dict[str, Part]], list[str]]:
        """The whole parts of the upload (``h``: its file, open) by number
        and MD5, and the names of every record of it (whole parts or not)."""
        where = self._where(h)
        if where is None:
            parts = _parts(h.infofile().entries_between("part-", "part."))
            return parts, [p.records[0] for by in parts.values() for p in by.values()]
        try:
            with self.client.open(where[0]) as d:
                rows = _hidden_rows(d.infofile(), upload_id)
        except StFileNotFoundError:  # its key's file deleted since: the parts went with it
            return {}, []
        return _hidden_parts(rows, upload_id), [r[0] for r in rows]

    def check(self, bucket: str, key: str, upload_id: str, number: int) -> None:
        """Raise what :meth:`upload_part` would for the upload and number
        (``NoSuchUpload``, ``InvalidArgument``) before its bytes are fetched."""
        if not 1 <= number <= MAX_PART_NUMBER:
            raise S3Error("InvalidArgument", f"part numbers are 1 to {MAX_PART_NUMBER}")
        self._open(bucket, key, upload_id).close()

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
        """Store part ``number`` (1 to 10000; again: replaced); its ETag."""
        if not 1 <= number <= MAX_PART_NUMBER:
            raise S3Error("InvalidArgument", f"part numbers are 1 to {MAX_PART_NUMBER}")
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        h = self._open(bucket, key, upload_id)
        try:
            where = self._where(h)
            if where is None:
                self._upload_part_before(h, number, md5, data)
                return f'"{md5}"'
        finally:
            h.close()
        with self.ops.open_or_create(where[0], len(data)) as d:
            rows = _hidden_rows(d.infofile(), upload_id)
            mine = f"{STRIPE_PREFIX}{_part_name(upload_id, number, md5, len(data))}/"
            if md5 not in _hidden_parts(rows, upload_id).get(number, {}):
                d.put_parts(_part_name(upload_id, number, md5, len(data)), data, PART_RECORD)
            lo, _ = _hidden_range(upload_id)
            older = [r[0] for r in rows if r[0].startswith(f"{lo}{number:05d}-") and not r[0].startswith(mine)]
        if older:  # what was uploaded before under this number
            self.client.commit_staged(where[0], [], delete=older)
        return f'"{md5}"'

    @staticmethod
    def _upload_part_before(h, number: int, md5: str, data: bytes) -> None:
        """Store a part of an upload made before 2026-12-01 as then: a
        record of its own file (``h``), replacing an older one of the number."""
        name = _record(number, md5)
        inf = h.infofile()
        older = [r for r in inf.names_between(name[:11], name[:10] + ".") if r != name]
        if not inf.exists(name):
            h.put(name, data)
            h.flush()
        for r in older:
            try:
                h.delete(r)
            except RecordNotFoundError:
                pass
        h.flush()

    def list_parts(self, bucket: str, key: str, upload_id: str) -> list[tuple[int, int, str, float]]:
        """``(number, size, etag, mtime)`` of the parts stored, in order
        (from the infofile; no part is read)."""
        h = self._open(bucket, key, upload_id)
        try:
            parts, _ = self._all_parts(h, upload_id)
        finally:
            h.close()
        out = []
        for n in sorted(parts):  # the latest upload of each number
            p = max(parts[n].values(), key=lambda p: p.mtime)
            out.append((n, p.size, f'"{p.md5}"', p.mtime))
        return out

    def complete(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        body: bytes,
        only_new: bool = False,
        if_match: str | None = None,
    ) -> ObjectStat:
        """Make the parts the request lists, in order, ``key``'s object and
        end the upload: composed of the parts where they are when they can
        be stripes and the key is still in the file that holds them, else
        copied (module docstring). A Complete of an upload completed
        already answers that one's object (its answer may have been lost);
        one sent while another of the upload runs waits for it, up to
        :data:`CLAIM_WAIT_S`, and answers its object, or goes on if it
        failed; ``only_new`` and ``if_match``
        (``If-None-Match: *``, ``If-Match``) as :meth:`.ops.Ops.put_object`
        judges them (a failed one keeps the upload, as S3 does).

        Raises
        ------
        S3Error
            ``MalformedXML``, ``InvalidPartOrder``, ``InvalidPart`` (a part
            not stored, or of another ETag), ``EntityTooSmall`` (a part but
            the last under 5 MiB), ``NoSuchUpload``, ``PreconditionFailed``,
            ``NoSuchKey`` (``if_match`` and no such key),
            ``ServiceUnavailable`` (another Complete of the upload held it
            past :data:`CLAIM_WAIT_S`: retry).
        """
        wanted = _parse_complete(body)
        h = self._open(bucket, key, upload_id, completed=True)
        try:
            done = _result(h)
            if done is not None:  # sent again (the first answer lost): the first one's result
                return done
            try:  # one Complete of the upload at a time: another one under way is waited for
                h.acquire_lease(ttl=CLAIM_TTL_S, wait=CLAIM_WAIT_S)
            except LeaseHeldError as e:
                raise S3Error(
                    "ServiceUnavailable", f"another Complete of this upload is under way ({e}); retry", upload_id
                ) from None
            done = _result(h)
            if done is not None:  # the one waited for completed it
                return done
            parts, every = self._all_parts(h, upload_id)
            where = self._where(h)
            chosen: list[Part] = []
            for i, (number, etag) in enumerate(wanted):
                got = parts.get(number, {}).get(etag.strip('"'))
                if got is None:
                    st = self._composed(bucket, key, where, upload_id, wanted)
                    if st is not None:  # composed before the endpoint or tracker died, not ended
                        self._done(h, st, where, upload_id)
                        return st
                    raise S3Error("InvalidPart", f"part {number} was not uploaded, or has another ETag", upload_id)
                if i < len(wanted) - 1 and got.size < MIN_PART:
                    raise S3Error("EntityTooSmall", f"part {number} is under 5 MiB and not the last", upload_id)
                chosen.append(got)
            meta = h.infofile().user_meta_of("key")  # CreateMultipartUpload's
            st = self._store(bucket, key, h, where, chosen, every, only_new, meta, if_match)
            self._done(h, st, where, upload_id)  # under the lease: a Complete waiting for it then finds the result
        finally:
            h.close()  # the lease released
        return st

    def _composed(
        self, bucket: str, key: str, where: tuple[str, str] | None, upload_id: str, wanted: list[tuple[int, str]]
    ) -> ObjectStat | None:
        """The stat of ``key``'s object if it is this upload's parts
        composed in the order ``wanted`` lists (a Complete whose compose
        committed, after which its endpoint or the tracker died before the
        upload was ended: sent again, it finds no part left), else None.
        Read from the names its stripes are stored under, which are the
        parts' (``<number>-<md5>-<size>/<i>``): of the key's current
        version, else of its past versions the file's history keeps, newest
        first (another PUT replaced the key meanwhile: the answer is the
        version this upload made, with its version id, as S3 answers)."""
        if where is None:
            return None
        file, record = where
        lo, _ = _hidden_range(upload_id)
        try:
            with self.client.open(file) as d:
                if _stripes_are(d, record, lo, wanted):
                    return self._stat(bucket, key, None)
                past = past_generations(d.infofile(), record)
            for gen in past:
                with self.client.open(file, as_of=gen) as d:
                    if _stripes_are(d, record, lo, wanted):
                        return self._stat(bucket, key, str(gen))
        except StFileNotFoundError:
            return None
        return None

    def _stat(self, bucket: str, key: str, version: str | None) -> ObjectStat | None:
        try:
            return self.ops.head_object(bucket, key, version)
        except S3Error:
            return None

    def _store(
        self,
        bucket: str,
        key: str,
        h,
        where: tuple[str, str] | None,
        chosen: list[Part],
        every: list[str],
        only_new: bool,
        meta: dict[str, str],
        if_match: str | None,
    ) -> ObjectStat:
        """Store the parts ``chosen`` as ``key``'s object (``h``: the
        upload's file, whose claim is renewed while parts are copied;
        ``where``: where the parts are, None in ``h``; ``every``: every part
        record of the upload, those not chosen deleted with a composition)."""
        records = [r for p in chosen for r in p.records]
        sizes = [n for p in chosen for n in p.sizes]
        size = sum(sizes)
        src = h if where is None else self.client.open(where[0])
        try:
            leftover = [r for r in every if r not in set(records)]

            def store(f, record: str, replace: bool) -> None:  # committed when it returns
                if where is not None and f.name == where[0]:
                    try:  # the parts become the object where they are: no byte copied
                        f.compose(record, records, replace=replace, meta=meta, delete=leftover)
                        return
                    except InvalidOptionError as e:  # not stripes (sizes, filters): copied
                        log.info("completing %s by copying its parts: %s", key, e)
                if size <= STRIPE_THRESHOLD:  # one record: its bytes at once
                    f.put(record, b"".join(src.get(n) for n in records), replace=replace, meta=meta)
                    f.flush()
                    return
                with PartsReader(src, records, sizes, claim=h) as stream:
                    f.put_object(
                        record,
                        stream,
                        ops_module.STREAM_STRIPE_SIZE,  # read at the call: tests set it
                        meta=meta,
                        in_flight=ops_module.STREAM_STRIPES_IN_FLIGHT,
                        replace=replace,
                    )

            return self.ops.put_by(bucket, key, size, store, only_new, if_match)
        finally:
            if src is not h:
                src.close()

    def _done(self, h, st: ObjectStat, where: tuple[str, str] | None, upload_id: str) -> None:
        """End a completed upload (``h``: its file, open): its result kept
        (:data:`DONE`), the part records left (all, if the parts were
        copied) deleted in one transaction (their copies left to the peers'
        scrubber). The object is stored whatever happens here: a failure is
        logged, and the upload, left as it was, is reaped later."""
        try:
            with self.client.open(h.name) as d:  # a new record: no lease needed; h only reads
                d.put(DONE, json.dumps(_stat_fields(st)).encode())
            self._delete_parts(h, where, upload_id)
        except Exception:  # noqa: BLE001 - the object is stored: the Complete succeeded
            log.warning("could not end the completed upload %s (it is reaped later)", h.name, exc_info=True)

    def _delete_parts(self, h, where: tuple[str, str] | None, upload_id: str) -> None:
        """Delete every part record of the upload (``h``: its file, open),
        in one transaction (their copies left to the peers' scrubber)."""
        if where is None:
            parts = h.infofile().names_between("part-", "part.")
            if parts:
                self.client.commit_staged(h.name, [], delete=parts)
            return
        try:
            with self.client.open(where[0]) as d:
                rows = _hidden_rows(d.infofile(), upload_id)
        except StFileNotFoundError:
            return
        if rows:
            self.client.commit_staged(where[0], [], delete=[r[0] for r in rows])

    def _upload_files(self, bucket: str) -> list[tuple[str, str]]:
        """``(file, upload id)`` of the bucket's upload files."""
        d = self.ops.need_bucket(bucket)
        out = []
        for e in self.client.tracker.list(d, names_only=True).entries:
            name = e.name[len(d) + 1 :]
            if not e.is_dir and name.startswith(UPLOAD_PREFIX):
                out.append((e.name, name[len(UPLOAD_PREFIX) :]))
        return out

    def list_uploads(self, bucket: str, prefix: str = "") -> list[tuple[str, str, float]]:
        """``(key, upload id, initiated unix s)`` of the bucket's unfinished
        uploads whose keys start with ``prefix``, in key then id order
        (each upload's ``key`` record read: one small GET per upload;
        initiated is that record's commit time)."""
        out = []
        for file, upload_id in self._upload_files(bucket):
            try:
                with self.client.open(file) as h:
                    key = h.get("key").decode("utf-8", "surrogatepass")
                    stat = h.infofile().record_stat("key")
                    if h.infofile().exists(DONE):
                        continue  # completed: kept only to answer a Complete sent again
            except (StFileNotFoundError, RecordNotFoundError):
                continue  # completed or aborted meanwhile
            if key.startswith(prefix) and stat is not None:
                out.append((key, upload_id, float(stat[2])))
        return sorted(out)

    def reap(self, bucket: str, expiry_s: float, now: float | None = None) -> list[str]:
        """Abort the bucket's uploads untouched (no part nor the upload
        itself committed) for over ``expiry_s`` seconds: S3's lifecycle
        rule ``AbortIncompleteMultipartUpload``, counted from the last
        activity rather than initiation, so a slow upload still sending
        parts is kept (``expiry_s`` 0: none is); and delete the files of
        uploads completed over :data:`COMPLETED_KEEP_S` seconds ago (with
        any part record a late UploadPart stored after the Complete).
        Returns the upload ids removed. An upload this caller may not read
        or delete is left for another (no error).

        Raises
        ------
        S3Error
            ``NoSuchBucket``.
        """
        from st_py.errors import PermissionDeniedError

        now = time.time() if now is None else now
        gone = []
        for file, upload_id in self._upload_files(bucket):
            try:
                with self.client.open(file) as h:
                    done = h.infofile().record_stat(DONE)
                    last = h.infofile().last_commit_at()
                    if done is not None:  # completed: kept COMPLETED_KEEP_S for a Complete sent again
                        if now - float(done[2]) <= COMPLETED_KEEP_S:
                            continue
                    elif expiry_s <= 0 or last is None:
                        continue  # 0: never aborted; None: being created (its key record not committed yet)
                    else:
                        parts, _ = self._all_parts(h, upload_id)
                        newest = max((p.mtime for by in parts.values() for p in by.values()), default=0.0)
                        if now - max(last, newest) <= expiry_s:
                            continue
                    self._delete_parts(h, self._where(h), upload_id)
                self.client.delete(file)
                gone.append(upload_id)
            except (StFileNotFoundError, PermissionDeniedError):
                continue  # completed or aborted meanwhile, or another user's
        return gone

    def end_all(self, uploads: list[str], files: list[str]) -> None:
        """End every upload of a bucket being deleted: the upload files
        ``uploads`` (``/B/.s3-upload-<id>``) and, in ``files`` (the
        bucket's other files), every part record of an upload (those of
        ``uploads``, and any an interrupted abort left), each file's in one
        transaction. DeleteBucket (:meth:`.ops.Ops.delete_bucket`)."""
        for name in uploads:
            try:
                self.client.delete(name)
            except StFileNotFoundError:
                pass
        for name in files:
            try:
                with self.client.open(name) as d:
                    rows = d.infofile().records_between(*_hidden_range(None)).fetchall()
            except StFileNotFoundError:
                continue
            if rows:
                self.client.commit_staged(name, [], delete=[r[0] for r in rows])

    def abort(self, bucket: str, key: str, upload_id: str) -> None:
        """End the upload: its parts are deleted, then its file."""
        h = self._open(bucket, key, upload_id)
        try:
            self._delete_parts(h, self._where(h), upload_id)
        finally:
            h.close()
        try:
            self.client.delete(self._file(bucket, upload_id))
        except StFileNotFoundError:
            pass


def _result(h) -> ObjectStat | None:
    """The object a completed upload (``h``: its file, open) stored, from
    its :data:`DONE` record (looked up past a stale local copy of the
    infofile), or None."""
    if h.record_meta(DONE) is None:
        return None
    return _stat_of(h.get(DONE))


def _stat_fields(st: ObjectStat) -> dict:
    """What :data:`DONE` keeps of a completed upload's object."""
    return {
        "size": st.size,
        "crc32c": st.crc32c,
        "mtime": st.mtime,
        "crc_of_bytes": st.crc_of_bytes,
        "version_id": st.version_id,
    }


def _stat_of(done: bytes) -> ObjectStat:
    """The object's stat a :data:`DONE` record keeps (its ETag the same:
    :attr:`.ops.ObjectStat.etag` is of its size, CRC-32C and commit time)."""
    d = json.loads(done)
    return ObjectStat(d["size"], d["crc32c"], d["mtime"], d["crc_of_bytes"], d["version_id"])


def _parse_complete(body: bytes) -> list[tuple[int, str]]:
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise S3Error("MalformedXML", "the XML you provided was not well-formed") from None
    out = []
    for part in root:
        if part.tag.rsplit("}", 1)[-1] != "Part":
            continue
        fields = {c.tag.rsplit("}", 1)[-1]: (c.text or "").strip() for c in part}
        try:
            number = int(fields.get("PartNumber", ""))
        except ValueError:
            raise S3Error("MalformedXML", "a Part without a PartNumber") from None
        etag = fields.get("ETag", "")
        out.append((number, etag if etag.startswith('"') else f'"{etag}"'))
    if not out:
        raise S3Error("MalformedXML", "CompleteMultipartUpload lists no part")
    numbers = [n for n, _ in out]
    if numbers != sorted(set(numbers)):
        raise S3Error("InvalidPartOrder", "the list of parts was not in ascending order")
    return out


def _stripes_are(d, record: str, lo: str, wanted: list[tuple[int, str]]) -> bool:
    """Whether ``record`` of open file ``d`` (at its state: current or as
    of a generation) is an object or record stored under the names of this
    upload's parts (``lo``: the upload's hidden range), exactly the
    ``(number, etag)`` pairs ``wanted`` lists, in order."""
    om = d.object_meta(record)
    names = [record] if om is None else [stripe_name(record, i) for i in range(om.stripes)]
    metas = d.records_meta(names)
    seq: list[tuple[int, str]] = []
    for n in names:
        stored = metas[n].key if n in metas else ""
        if not stored.startswith(lo):
            return False
        num, _, rest = stored[len(lo) :].partition("-")
        got = (int(num) if num.isdigit() else -1, rest.partition("-")[0])
        if not seq or seq[-1] != got:
            seq.append(got)
    return seq == [(n, e.strip('"')) for n, e in wanted]
