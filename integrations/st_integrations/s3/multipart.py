"""Multipart uploads (docs/s3.md, "Multipart uploads"): each upload is a
StoreTorrent file of the bucket, ``/B/.s3-upload-<id>``, holding the key
(record ``key``) and the parts (records ``part-00001-<MD5 hex>`` ...) as
they arrive,
so any endpoint of the cluster can take the next part. Completing reads the
parts in order, stores the whole as the key's object (a record, or a
striped object over 64 MiB), deletes the parts and keeps the result in the
upload's file (record ``completed``) for :data:`COMPLETED_KEEP_S`, so a
Complete sent again gets it, as from AWS; the reaper then deletes the file.
A Complete holds the upload file's writer lease while it stores (its claim,
:data:`CLAIM_TTL_S`), so one sent while another runs waits and answers the
same object: the key is stored once.
Aborting deletes it. An object over 64 MiB is streamed from the parts into its stripes
(:class:`PartsReader`): the endpoint holds a part being read and two
stripes being stored, whatever the object's size.

A part's ETag is the MD5 of its bytes, as S3's is (clients such as rclone
check it), computed when it arrives and kept in its record's name, so
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

from st_py.client.record_writer import STRIPE_THRESHOLD
from st_py.core.infofile import user_size
from st_py.errors import LeaseHeldError, RecordNotFoundError, StFileNotFoundError

from ..keymap import UPLOAD_PREFIX, check_key
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
# A Complete holds the upload file's writer lease while it stores the object
# (renewed as it reads the parts), so a second Complete of the same upload
# (an SDK's retry while the first still runs) waits for the first one's
# result instead of storing the key again; a Complete whose endpoint died
# stops renewing, and the next one goes on within CLAIM_TTL_S.
CLAIM_TTL_S = 30.0
CLAIM_WAIT_S = 900.0  # how long a Complete waits for another of the same upload (then a 503 to retry)

log = logging.getLogger("storetorrent.s3")


def _record(n: int, md5: str) -> str:
    return f"part-{n:05d}-{md5}"


def _parts(rows) -> dict[int, dict[str, tuple[str, int, float]]]:
    """``{number: {md5: (record, size, mtime)}}`` of an upload's part rows
    (``entries_between``); a part uploaded twice has two until the first is
    deleted."""
    out: dict[int, dict[str, tuple[str, int, float]]] = {}
    for name, stored, logical, _crc, t, _k, _s in rows:
        num, _, md5 = name[5:].partition("-")
        if num.isdigit() and len(md5) == 32:
            out.setdefault(int(num), {})[md5] = (name, user_size(stored, logical), float(t))
    return out


class PartsReader(PieceReader):
    """The bytes of an upload's parts ``names``, in order, as one read-only
    binary file (:class:`.pieces.PieceReader`): each part read through
    ``handle.open`` :data:`PART_PIECE` bytes at a time (a record read once,
    a striped part a stripe at a time), so at most one part is held, and
    ``read(n)`` gives up to ``n`` bytes of the current piece (fewer at its
    end, as a raw file may; -1: the rest of the parts).

    A read raises ``S3Error`` (``InternalError``) when a part's bytes are
    not its ``sizes`` entry (the object is not committed), and
    ``RecordNotFoundError`` or ``RecordUnavailableError`` when a part is
    gone or unreadable (``StFile.open``).

    Not thread-safe: one reader, one thread (the Complete's)."""

    def __init__(self, handle, names: list[str], sizes: list[int]):
        super().__init__(self._next_part_piece)
        self._h, self._names, self._sizes = handle, names, sizes
        self._i = 0
        self._renewed = time.monotonic()
        self._cur: io.RawIOBase | None = None
        self._got = 0  # bytes of the current part given

    def _next_part_piece(self) -> bytes:
        """The next piece of the parts, b"" after the last; a part's size
        checked at its end."""
        if self._h.lease and time.monotonic() - self._renewed > CLAIM_TTL_S / 3:
            self._h.acquire_lease()  # held: renewed (the Complete's claim on the upload)
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
        the object at :meth:`complete`); its upload id (32 hex)."""
        self.ops.need_bucket(bucket)
        check_key(key)
        self.ops.keys.resolve(bucket, key)  # refuse a key that names a file or directory now, not at Complete
        upload_id = secrets.token_hex(16)
        with self.client.create(self._file(bucket, upload_id), self.ops.replication) as h:
            h.put("key", key.encode("utf-8", "surrogatepass"), meta=meta)
        return upload_id

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
        name = _record(number, md5)
        h = self._open(bucket, key, upload_id)
        try:
            inf = h.infofile()
            older = [r for r in inf.names_between(name[:11], name[:10] + ".") if r != name]
            if not inf.exists(name):
                h.put(name, data)
                h.flush()
            for r in older:  # what was uploaded before under this number
                try:
                    h.delete(r)
                except RecordNotFoundError:
                    pass
            h.flush()
        finally:
            h.close()
        return f'"{md5}"'

    def list_parts(self, bucket: str, key: str, upload_id: str) -> list[tuple[int, int, str, float]]:
        """``(number, size, etag, mtime)`` of the parts stored, in order
        (from the infofile; no part is read)."""
        h = self._open(bucket, key, upload_id)
        try:
            parts = _parts(h.infofile().entries_between("part-", "part."))
        finally:
            h.close()
        out = []
        for n in sorted(parts):  # the latest upload of each number
            md5, (_, size, t) = max(parts[n].items(), key=lambda kv: kv[1][2])
            out.append((n, size, f'"{md5}"', t))
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
        """Store the parts the request lists, in order, as ``key``'s
        object and end the upload (a Complete of an upload completed
        already answers that one's object: its answer may have been lost;
        one sent while another of the upload runs waits for it, up to
        :data:`CLAIM_WAIT_S`, and answers its object, or goes on if it
        failed); ``only_new`` and ``if_match``
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
            parts = _parts(h.infofile().entries_between("part-", "part."))
            names, sizes = [], []
            for i, (number, etag) in enumerate(wanted):
                got = parts.get(number, {}).get(etag.strip('"'))
                if got is None:
                    raise S3Error("InvalidPart", f"part {number} was not uploaded, or has another ETag", upload_id)
                if i < len(wanted) - 1 and got[1] < MIN_PART:
                    raise S3Error("EntityTooSmall", f"part {number} is under 5 MiB and not the last", upload_id)
                names.append(got[0])
                sizes.append(got[1])
            meta = h.infofile().user_meta_of("key")  # CreateMultipartUpload's
            if sum(sizes) <= STRIPE_THRESHOLD:  # one record: its bytes at once
                st = self.ops.put_object(bucket, key, b"".join(h.get(name) for name in names), only_new, meta, if_match)
            else:  # a striped object, streamed from the parts
                with PartsReader(h, names, sizes) as src:
                    st = self.ops.put_object_stream(bucket, key, src, sum(sizes), only_new, meta, if_match)
            self._done(h, st)  # under the lease: a Complete waiting for it then finds the result
        finally:
            h.close()  # the lease released
        return st

    def _done(self, h, st: ObjectStat) -> None:
        """End a completed upload (``h``: its file, open): its result kept
        (:data:`DONE`), its parts' commits deleted in one transaction (their
        copies left to the peers' scrubber). The object is stored whatever
        happens here: a failure is logged, and the upload, left as it was,
        is reaped later."""
        try:
            with self.client.open(h.name) as d:  # a new record: no lease needed; h only reads
                parts = d.infofile().names_between("part-", "part.")
                d.put(DONE, json.dumps(_stat_fields(st)).encode())
            if parts:
                self.client.commit_staged(h.name, [], delete=parts)
        except Exception:  # noqa: BLE001 - the object is stored: the Complete succeeded
            log.warning("could not end the completed upload %s (it is reaped later)", h.name, exc_info=True)

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
        uploads completed over :data:`COMPLETED_KEEP_S` seconds ago.
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
                elif expiry_s <= 0 or last is None or now - last <= expiry_s:
                    continue  # 0: never aborted; None: being created (its key record not committed yet)
                self.client.delete(file)
                gone.append(upload_id)
            except (StFileNotFoundError, PermissionDeniedError):
                continue  # completed or aborted meanwhile, or another user's
        return gone

    def abort(self, bucket: str, key: str, upload_id: str) -> None:
        """End the upload: its parts are deleted."""
        self._open(bucket, key, upload_id).close()
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
