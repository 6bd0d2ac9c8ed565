"""The exceptions StoreTorrent raises.

Every error says what went wrong and what to do. Explicit peer errors are tied
to one request (one sequence number); a timeout or socket error is a
:class:`PeerUnavailableError` and affects every request in flight to that peer
(paper 4.3).
"""

from __future__ import annotations

import enum

ERROR_KIND_KEY = "st-error"
"""gRPC trailing metadata key by which the tracker says what kind of
refusal an error is (``not-enough-peers``, ``no-space``, ``not-empty``; ``file-deleted``: a
FetchInfofile by file id of a file the tracker deleted), so that clients
never parse message text."""


class ErrorCode(enum.IntEnum):
    """The error codes of the peer's ERROR frame (docs/wire-protocol.md)."""

    BAD_FRAME = 1
    FRAME_TOO_LARGE = 2
    UNKNOWN_TYPE = 3
    BAD_NAME = 4
    NOT_FOUND = 5
    EXISTS = 6
    CRC_MISMATCH = 7
    IO_ERROR = 8
    NO_SPACE = 9
    PEER_UNREACHABLE = 10
    TIMEOUT = 11
    INVARIANT = 12
    NO_NAMESPACE = 13
    NOT_IN_RING = 14
    DENIED = 15
    INTERNAL = 16
    BUSY = 17  # the peer is at its connection limit (seq 0); the connection is closed
    STALE_INFOFILE = 18  # st-peer --metadata fetch: its copy cannot reach the plan's generation, or SCRUB the tracker


class StoreTorrentError(Exception):
    """Base class of every StoreTorrent error."""


class TrackerError(StoreTorrentError):
    """The tracker refused or failed an operation."""


class TrackerUnavailableError(TrackerError, ConnectionError):
    """The tracker did not answer: unreachable (nothing accepts connections
    at its address: not running, or the network is down) or, as the subclass
    :class:`TrackerBusyError`, running but too busy to answer in time.

    Attributes
    ----------
    address : str
        ``host:port`` of the tracker asked ("" if unknown).
    busy : bool
        True: the tracker's port accepts connections but the call's deadline
        passed without an answer (busy, or its process stopped); False: it
        could not be reached at all.
    """

    def __init__(self, message: str, address: str = "", busy: bool = False):
        super().__init__(message)
        self.address = address
        self.busy = busy


class TrackerBusyError(TrackerUnavailableError):
    """The tracker is running (its port accepts connections) but did not
    answer within the call's deadline: it is busy. Retry later, give the
    client a longer timeout, or lower the load on it.

    Attributes
    ----------
    address : str
        As :class:`TrackerUnavailableError`; ``busy`` is True.
    timeout : float
        The call's deadline in seconds.
    """

    def __init__(self, message: str, address: str = "", timeout: float = 0.0):
        super().__init__(message, address=address, busy=True)
        self.timeout = timeout


class ReplicaBehindError(TrackerError):
    """A standby tracker (issue 40; docs/metadata-log.md, "Copies from
    standbys") refused a FetchInfofile: it has not applied the metadata log
    as far as the copy asked needs. Nothing was sent; ask another replica or
    the leader (the client's infofile copies do so by themselves).

    Attributes
    ----------
    address : str
        ``host:port`` of the standby's infofile port.
    """

    def __init__(self, message: str, address: str = ""):
        super().__init__(message)
        self.address = address


class TrackerMovedError(TrackerError):
    """A per-file tracker no longer takes this file's writes (the master
    restarted with another number of per-file trackers, paper 3.5): open the
    file again through the master, which redirects to the tracker that does
    (StFile does this by itself and retries).

    Attributes
    ----------
    tracker : str
        ``host:port`` of the master to ask ("" if the refusal did not say).
    """

    def __init__(self, message: str, tracker: str = ""):
        super().__init__(message)
        self.tracker = tracker


class FileTrackerGoneError(TrackerUnavailableError, TrackerMovedError):
    """A per-file tracker no longer answers at its address: its master is
    restarting it, or another tracker was elected and runs its per-file
    trackers elsewhere (docs/metadata-log.md, "Per-file trackers"). A call
    that was sent may or may not have been applied (as any
    :class:`TrackerUnavailableError`); as a :class:`TrackerMovedError`, the
    file's writes are found again by opening it through the tracker, and a
    call retried there with its request id is applied once (StFile, the
    group commit and ``Client.commit_staged`` do this by themselves).

    Attributes
    ----------
    address : str
        ``host:port`` of the per-file tracker that did not answer.
    tracker : str
        Always "" (ask any tracker address the client was given).
    """

    def __init__(self, message: str, address: str = ""):
        TrackerUnavailableError.__init__(self, message, address=address)
        self.tracker = ""


class NoTrackerError(TrackerError, LookupError):
    """No tracker address was given, set in ``$STORETORRENT_TRACKER``, or
    found in a local cluster's data folder."""


class StFileNotFoundError(StoreTorrentError, FileNotFoundError):
    """No StoreTorrent file of that name."""


class DirectoryNotFoundError(StFileNotFoundError):
    """A create asked to be made only while a directory exists
    (``Client.create(in_directory=...)``: an S3 PUT into its bucket) found
    it gone: nothing was made.

    Attributes
    ----------
    directory : str
        The directory.
    """

    def __init__(self, message: str, directory: str = ""):
        super().__init__(message)
        self.directory = directory


class StFileExistsError(StoreTorrentError, FileExistsError):
    """A StoreTorrent file of that name already exists."""


class StIsADirectoryError(StoreTorrentError, IsADirectoryError):
    """A StoreTorrent file was asked for (created) at a name that is a
    directory of the namespace: create a file below it instead (never
    delete the directory: that removes every file below it)."""

    def __str__(self) -> str:  # OSError's str of one argument is that argument; keep it so
        return str(self.args[0]) if self.args else "is a directory"


class BadNameError(StoreTorrentError, ValueError):
    """A file or record name that StoreTorrent refuses."""


class RecordNameRuleError(BadNameError):
    """A new record name that is not a relative path (docs/decisions.md,
    "Record names"): a leading or trailing ``/``,
    an empty component (``a//b``), or a ``.`` or ``..`` component. Names
    committed before the rule stay readable; only puts are refused.

    Attributes
    ----------
    name : str
        The name refused.
    reason : str
        What breaks the rule in it.
    """

    def __init__(self, name: str, reason: str, rule: str = ""):
        self.name, self.reason, self.rule = name, reason, rule
        super().__init__(
            f"record name {name[:200]!r} is refused: {reason}; {rule or 'a record name is a relative path'}. "
            "Drop the empty, '.' and '..' components (or name it without '/' meaning a path)"
        )

    def __reduce__(self):
        return (type(self), (self.name, self.reason, self.rule))


class _TreeConflict(StoreTorrentError):
    """A name that would be both a record and a folder."""

    def __init__(self, file: str, name: str, record: str, message: str):
        self.file, self.name, self.record = file, name, record
        self.filename = f"{file}/{name}" if file else name  # as OSError names its path
        StoreTorrentError.__init__(self, message)

    def __str__(self) -> str:  # OSError's str would show errno; keep the sentence
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):  # OSError pickles its args: rebuild from the fields (Dask, Ray workers)
        return (type(self), (self.file, self.name, self.record))


class RecordIsADirectoryError(_TreeConflict, IsADirectoryError):
    """A record put under a name that is a folder of the file: a
    committed record starts with ``name + "/"`` (a name is a record or a
    folder, never both; docs/decisions.md). Deleted records do not count.

    Attributes
    ----------
    file : str
        The StoreTorrent file.
    name : str
        The record name refused.
    record : str
        A committed record below it.
    """

    def __init__(self, file: str, name: str, record: str):
        super().__init__(
            file,
            name,
            record,
            f"{name!r} in {file or 'the file'} is a folder (record {record!r} is below it): a name is either a "
            f"record or a folder, never both; put it as a name below the folder (e.g. {name + '/part-0'!r}) "
            "or under another name",
        )


class RecordNotADirectoryError(_TreeConflict, NotADirectoryError):
    """A record put under a name below a committed record: a
    component-prefix of ``name`` is a record, so it cannot be a folder
    (docs/decisions.md). Deleted records do not count.

    Attributes
    ----------
    file : str
        The StoreTorrent file.
    name : str
        The record name refused.
    record : str
        The committed record that is a prefix of it.
    """

    def __init__(self, file: str, name: str, record: str):
        super().__init__(
            file,
            name,
            record,
            f"{name!r} in {file or 'the file'} is below record {record!r}, which is not a folder: a name is "
            "either a record or a folder, never both; delete that record first or use another name",
        )


class UnknownPeerError(BadNameError):
    """No peer of that id, ``host:port`` or host is known to the tracker,
    or a host names several peers.

    Attributes
    ----------
    peer : str
        What was asked for.
    known : tuple of str
        ``host:port`` of the peers the tracker knows (empty when the tracker
        said so itself).
    """

    def __init__(self, message: str, peer: str = "", known=()):
        super().__init__(message)
        self.peer, self.known = peer, tuple(known)


class PeerNotLiveError(StoreTorrentError):
    """A drain copies a peer's records off it while it serves, so the peer
    must be live; a dead peer's copies are restored from their other copies
    with ``storetorrent rebalance --lost`` instead (docs/operations.md).

    Attributes
    ----------
    peer : str
        ``host:port`` of the peer.
    peer_id : str
        Its stable id.
    """

    def __init__(self, message: str, peer: str = "", peer_id: str = ""):
        super().__init__(message)
        self.peer, self.peer_id = peer, peer_id


class InvalidOptionError(StoreTorrentError, ValueError):
    """An option out of its range. ``option`` names it, ``value`` is what
    was given."""

    def __init__(self, message: str, option: str = "", value=None):
        super().__init__(message)
        self.option, self.value = option, value


class QuotaExceededError(StoreTorrentError):
    """The operation would take the file or its owner over quota.

    Attributes
    ----------
    scope : str
        ``"file"`` (the tracker's per-file ``--quota-bytes``), ``"user"``
        (the owner's quota), or ``""`` when the tracker did not say.
    quota_bytes, used_bytes : int
        The quota and what is used of it (bytes, every copy), when known (0
        otherwise).
    records : tuple of str
        The records refused (a put that crossed the quota: it and the ones
        queued after it); records admitted before them are committed.
    """

    def __init__(self, message: str, scope: str = "", quota_bytes: int = 0, used_bytes: int = 0, records=()):
        super().__init__(message)
        self.scope, self.quota_bytes, self.used_bytes = scope, quota_bytes, used_bytes
        self.records = tuple(records)


class PermissionDeniedError(StoreTorrentError, PermissionError):
    """The user may not do this (file or directory mode, docs/security.md)."""


class NotAuthenticatedError(StoreTorrentError, PermissionError):
    """The tracker needs an API key (STORETORRENT_API_KEY) and got none or an unknown one."""


class NotEnoughPeersError(StoreTorrentError):
    """Fewer live peers than the replication class needs."""


class DirectoryNotEmptyError(StoreTorrentError, OSError):
    """A namespace directory to remove still holds files or directories."""


class FileNotEmptyError(StoreTorrentError, OSError):
    """A delete of a file only while it holds no record
    (``Client.delete(name, if_empty=True)``: S3 DeleteBucket) found one:
    nothing was deleted.

    Attributes
    ----------
    file : str
        The file.
    """

    def __init__(self, message: str, file: str = ""):
        super().__init__(message)
        self.file = file


class NoSpaceError(NotEnoughPeersError):
    """Peers lack the space: no peers can take a new file's ``est_size``, or
    a commit goes beyond the file's reservation into space other files have
    reserved (docs/replication.md, "Space reservation")."""


class RecordNotFoundError(StoreTorrentError, KeyError):
    """No committed record of that name in the file."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence
        return str(self.args[0]) if self.args else "record not found"


class RecordExistsError(StoreTorrentError):
    """The record name is already used in this file (records are write-once).
    ``names`` lists the names when several are to blame."""

    def __init__(self, message: str, names=()):
        super().__init__(message)
        self.names = tuple(names)


class RecordBeingWrittenError(StoreTorrentError):
    """Another writer that is still running holds an uncommitted copy of
    the record on every peer that could take this one (paper 4.4: a live
    writer's copy is never overwritten; a crashed writer's is replaced by
    the retry, docs/replication.md, "A crashed writer's leftovers").

    Not a :class:`RecordExistsError`: nothing of that name is committed.
    Retry once the other writer has finished (its records then exist) or
    died; a copy left before a peer restarted is removed by the peer's
    scrubber after ``--scrub-age``.

    Attributes
    ----------
    record : str
        The record's name.
    file : str
        The StoreTorrent file.
    peers : tuple[str, ...]
        The peers (host:port) holding the other writer's copy.
    """

    def __init__(self, record: str, file: str, peers=()):
        self.record, self.file, self.peers = record, file, tuple(peers)
        super().__init__(
            f"record {record!r} of {file} is being written by another writer: an uncommitted copy "
            f"on {', '.join(self.peers) or 'the peers'} belongs to a writer whose connection is "
            "still open (or to one from before the peer restarted); records are write-once: "
            "retry when that writer has finished or died, or use another name"
        )


class ObjectBeingWrittenError(RecordBeingWrittenError):
    """Stripes of striped object ``object`` are committed, its object is
    not, and the newest of them was committed less than ``retry_after_s``
    seconds ago: another ``put_object`` of the name may still be storing
    them, so they are not cleared yet (docs/striping.md, "Stripes a writer
    left"; as HDFS's lease soft limit, a writer silent for that long is
    taken for dead). Nothing was stored. Retry after ``retry_after_s``
    seconds (the stripes are then cleared), or once the other writer has
    committed its object (the name then exists).

    Attributes
    ----------
    object : str
        The object's name.
    file : str
        The StoreTorrent file.
    stripes : int
        Stripe records committed under the name without an object.
    age_s : float
        Seconds since the newest of them was committed (tracker's clock).
    retry_after_s : float
        Seconds until they count as left by a dead writer.
    """

    def __init__(self, object: str, file: str, stripes: int, age_s: float, retry_after_s: float):
        StoreTorrentError.__init__(
            self,
            f"object {object!r} of {file} is being written by another writer: {stripes} of its stripes "
            f"are committed, the newest {age_s:.0f} s ago, and no object yet; retry in "
            f"{max(1.0, retry_after_s):.0f} s (a writer silent that long is taken for dead and its stripes are "
            "cleared) or use another name",
        )
        self.record, self.peers = object, ()
        self.object, self.file, self.stripes = object, file, stripes
        self.age_s, self.retry_after_s = age_s, retry_after_s


class NameRetainedError(StoreTorrentError):
    """A record put under the name of a deleted or replaced record whose
    older copies are still kept, on every peer that could take the new
    copy: for snapshots that hold them, or for ``--history-age`` so reads
    of older generations find them (docs/snapshots.md). The older copies
    are never overwritten. Put it under another name, or once the history
    is dropped (no snapshot holds it and ``--history-age`` has passed), or
    with more peers in the file.

    Attributes
    ----------
    record, file : str
    peers : tuple[str, ...]
        The peers (host:port) keeping an older version under that name.
    """

    def __init__(self, record: str, file: str, peers=()):
        self.record, self.file, self.peers = record, file, tuple(peers)
        super().__init__(
            f"record {record!r} of {file}: an older version of that name is kept on "
            f"{', '.join(self.peers) or 'every peer'} (for snapshots or for reads of older generations, "
            "docs/snapshots.md) and no other peer can take this copy; use another name, or put it again once "
            "that history is dropped"
        )


class RecordTooLargeError(StoreTorrentError, ValueError):
    """A record over the largest a peer takes in one frame.

    Attributes
    ----------
    name : str
        The record.
    size : int
        Its bytes.
    limit : int
        The most one record may hold (bytes); larger data is stored as a
        striped object by ``put()`` or ``put_object()`` (docs/striping.md).
    """

    def __init__(self, name: str, size: int, limit: int):
        super().__init__(
            f"record {name[:80]!r} has {size:,} bytes, over the record limit of {limit:,}: store it "
            "with put() or put_object(), which stripe it (storetorrent put does), not queue_put()"
        )
        self.name, self.size, self.limit = name, size, limit


class RecordUnavailableError(StoreTorrentError):
    """A committed record cannot be read now: every copy failed (dead
    peers, corrupt copies), or none is left (lost: its copies quarantined or
    on lost peers; docs/reliability.md, "Copy states").

    Attributes
    ----------
    record, file : str
        The record (or striped object) and its StoreTorrent file.
    reason : str
        Why, in the terms of :mod:`st_py.core.copy_health` (``"lost, no good copy
        left: ..."``) or of the failed reads.
    lost : bool
        No good copy is left anywhere: reading again will not help; restore
        it from a backup or write it again.
    """

    def __init__(self, message: str, record: str = "", file: str = "", reason: str = "", lost: bool = False):
        super().__init__(message)
        self.record, self.file, self.reason, self.lost = record, file, reason, lost


class ChecksumError(StoreTorrentError):
    """Bytes that do not match their CRC-32C (or their size).

    Attributes
    ----------
    record, file : str
        The record and StoreTorrent file, when known ("" otherwise).
    path : str
        The local path read (GET_LOCAL reads), or "".
    expected, actual : int or None
        The CRC-32C the record was stored with and the one of the bytes read.
    """

    def __init__(
        self,
        message: str,
        record: str = "",
        file: str = "",
        path: str = "",
        expected: int | None = None,
        actual: int | None = None,
    ):
        super().__init__(message)
        self.record, self.file, self.path = record, file, path
        self.expected, self.actual = expected, actual


class RecordFormatError(StoreTorrentError):
    """A record could not be decoded in the format it claims (by magic bytes
    or by extension). ``record`` names it, ``format`` is the format tried."""

    def __init__(self, message: str, record: str = "", format: str = ""):
        super().__init__(message)
        self.record, self.format = record, format


class PeerError(StoreTorrentError):
    """An explicit error reply from a peer, tied to one request.

    Attributes
    ----------
    code : int
        The protocol error code (``st_py.wire.protocol.ErrorCode``).
    peer : str
        ``host:port`` of the peer.
    seq : int
        Sequence number of the failed request.
    peers : tuple of str
        ``host:port`` of the peers the error concerns (GET_LOCAL ring
        failures: the unreachable successor, the peers whose index is missing,
        the peers breaking an invariant).
    """

    def __init__(self, code: int, message: str, peer: str = "", seq: int = 0, peers=()):
        try:
            cname = ErrorCode(code).name
        except ValueError:
            cname = str(code)
        super().__init__(f"peer {peer} refused request {seq}: {cname}: {message}")
        self.code, self.message, self.peer, self.seq = code, message, peer, seq
        self.peers = tuple(peers)


class PeerUnavailableError(StoreTorrentError, ConnectionError):
    """A peer did not answer: connection refused, reset, or timed out."""

    def __init__(self, peer: str, reason: str):
        super().__init__(f"peer {peer} unavailable: {reason}")
        self.peer, self.reason = peer, reason


class LeaseHeldError(StoreTorrentError):
    """Another writer holds the file's writer lease, so this one may not
    replace records now (MORRIS 3.2; docs/replication.md, "Versioned
    records"). ``holder`` says who (``host:pid`` as that writer gave it),
    ``expires_in`` in how many seconds the lease runs out unless renewed."""

    def __init__(self, message: str, file: str = "", holder: str = "", expires_in: float = 0.0):
        super().__init__(message)
        self.file, self.holder, self.expires_in = file, holder, expires_in


class LeaseLostError(StoreTorrentError):
    """This writer's lease on ``file`` ran out, was released, or was
    forgotten: its new versions were not committed, nor the records
    committed with them (``records``: every name of the failed commit, when
    a commit raised it). Acquire the lease again and put them again.

    Attributes
    ----------
    file : str
    lease_id : str
    records : tuple[str, ...]
    """

    def __init__(self, message: str, file: str = "", lease_id: str = "", records=()):
        super().__init__(message)
        self.file, self.lease_id, self.records = file, lease_id, tuple(records)

    def naming(self, records) -> LeaseLostError:
        """This error naming ``records`` (the commit's names) in its text and :attr:`records`."""
        names = list(records)
        shown = ", ".join(repr(n) for n in names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        self.records = tuple(names)
        self.args = (f"{self.args[0] if self.args else ''}; not committed: {shown}",)
        return self


class QueuedOperationsError(StoreTorrentError):
    """Several queued operations failed (``flush()``). ``failures`` is a
    tuple of ``(record name, exception)``, every one of them."""

    def __init__(self, message: str, failures=()):
        super().__init__(message)
        self.failures = tuple(failures)


class BatchWriteError(StoreTorrentError):
    """Records of a write batch (``StFile.write``, ``StFile.write_table``)
    failed; the others were acknowledged by every holder they need and are
    committed with their group, as if put one by one. A failed record is
    never visible: either refused before anything was sent (a name that
    breaks the rules, a name already written), or its copies were not all
    stored and it is not committed.

    Attributes
    ----------
    file : str
        The file written.
    failures : tuple of (str, Exception)
        Every failed record's name and error, in the batch's order.
    names : tuple of str
        The failed records' names.
    written : int
        Records of the batch acknowledged.
    """

    def __init__(self, file: str, failures, written: int):
        self.failures = tuple(failures)
        self.names = tuple(n for n, _ in self.failures)
        self.file, self.written = file, written
        shown = "; ".join(f"{n!r}: {e}" for n, e in self.failures[:5])
        more = f" (and {len(self.failures) - 5} more)" if len(self.failures) > 5 else ""
        super().__init__(
            f"{len(self.failures)} of {len(self.failures) + written} records of a batch into {file} failed, "
            f"not written: {shown}{more}. The other {written} are acknowledged and committed with their "
            "group; put the failed ones again (e.names) once their cause is fixed"
        )


class OperationTimeoutError(StoreTorrentError, TimeoutError):
    """A wait for queued operations ran past its ``timeout`` (seconds)."""

    def __init__(self, message: str, timeout: float | None = None):
        super().__init__(message)
        self.timeout = timeout


class GetLocalError(StoreTorrentError):
    """GET_LOCAL could not reveal every record (paper 3.7, 4.5)."""


class CopyGoneError(GetLocalError):
    """A revealed copy is no longer at its path: its peer's verifier moved it
    to quarantine, a drain or spread moved it, the record was deleted, or
    the disk lost it, after the peer revealed it (a peer's answer to a
    GET_LOCAL plan is kept ``--get-local-cache`` seconds). Readers of a plan
    read such a record by GET from another copy, as of the plan's
    generation, as they do a copy that fails its CRC-32C check.

    Attributes
    ----------
    record, file, path : str
        The record, its StoreTorrent file ("" if not known) and the path
        that was revealed.
    """

    def __init__(self, message: str, record: str = "", file: str = "", path: str = ""):
        super().__init__(message)
        self.record, self.file, self.path = record, file, path


class StalePeerCopyError(GetLocalError):
    """A peer started with ``--metadata fetch`` (issue 40) refused a
    GET_LOCAL plan: its copy of the file's infofile is older than the
    generation the plan names, and the tracker it brings copies forward from
    did not answer (or not in time). The peer reveals nothing rather than the
    records of an older generation. Retry when the tracker is reachable.

    Attributes
    ----------
    peer : str
        ``host:port`` of the peer that refused.
    generation : int
        The generation the plan asked for.
    have : int
        The generation the peer's copy is at (0: it has none).
    tracker : str
        The tracker address(es) the peer could not bring its copy forward from.
    reason : str
        The peer's whole message.
    """

    def __init__(
        self, message: str, peer: str = "", generation: int = 0, have: int = 0, tracker: str = "", reason: str = ""
    ):
        super().__init__(message)
        self.peer, self.generation, self.have, self.tracker, self.reason = peer, generation, have, tracker, reason


class RecordsUnavailableError(GetLocalError, RecordUnavailableError):
    """A GET_LOCAL plan (``get_local``, the Ray and Dask scans, DuckDB's
    records) found committed records with no live copy: every copy on dead
    peers (more failures than the class tolerates, paper 4.2), or none left
    at all (lost: quarantined, docs/reliability.md "Copy states"). It is a
    :class:`RecordUnavailableError` too, naming the first such record.

    Attributes
    ----------
    unavailable, records : int
        How many records have no live copy, of how many committed.
    dead : tuple of str
        ``host:port`` of the peers that did not answer.
    names : tuple of str
        The records with no live copy (the first 100).
    reasons : dict
        ``{name: why}`` for ``names``, in :mod:`st_py.core.copy_health`'s words.
    record, file, reason, lost :
        As :class:`RecordUnavailableError`, of the first of ``names``;
        ``lost`` when every one of ``names`` has no good copy left.
    """

    def __init__(
        self,
        message: str,
        unavailable: int = 0,
        records: int = 0,
        dead: tuple = (),
        names: tuple = (),
        reasons: dict | None = None,
        file: str = "",
        lost: bool = False,
    ):
        reasons = dict(reasons or {})
        first = names[0] if names else ""
        RecordUnavailableError.__init__(self, message, first, file, reasons.get(first, ""), lost)
        self.unavailable, self.records, self.dead = unavailable, records, tuple(dead)
        self.names, self.reasons = tuple(names), reasons


class RecoveryError(StoreTorrentError):
    """``storetorrent recover --from-peers`` could not rebuild the namespace:
    no live peer answered, or no peer keeps infofile mirrors.

    Attributes
    ----------
    peers_asked : tuple of str
        ``host:port`` of the live peers asked for their mirrors.
    failures : tuple of (str, str)
        ``(host:port, why)`` of each peer whose mirrors could not be listed.
    """

    def __init__(self, message: str, peers_asked=(), failures=()):
        super().__init__(message)
        self.peers_asked = tuple(peers_asked)
        self.failures = tuple(failures)


class SnapshotError(StoreTorrentError):
    """A snapshot operation or a read ``as_of`` a past state failed
    (docs/snapshots.md).

    Attributes
    ----------
    file : str
        The StoreTorrent file.
    snapshot : str
        The snapshot named ("" when none was).
    """

    def __init__(self, message: str, file: str = "", snapshot: str = ""):
        super().__init__(message)
        self.file, self.snapshot = file, snapshot


class SnapshotExistsError(SnapshotError):
    """``snapshot create`` of a name the file has a snapshot of already."""


class SnapshotNotFoundError(SnapshotError, KeyError):
    """No snapshot of that name in the file (``snapshot delete``, or
    ``as_of=`` a name that is neither a snapshot nor a time)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence
        return str(self.args[0]) if self.args else "snapshot not found"


class SnapshotHeldError(SnapshotError):
    """A whole-file delete of a file that snapshots hold: delete the
    snapshots first (docs/snapshots.md, "Deletes").

    Attributes
    ----------
    snapshots : tuple of str
        The snapshots that hold the file.
    """

    def __init__(self, message: str, file: str = "", snapshots=()):
        super().__init__(message, file)
        self.snapshots = tuple(snapshots)


class SnapshotExpiredError(SnapshotError):
    """A read ``as_of`` a generation whose history is no longer kept: it is
    older than the file's ``history_from`` and no snapshot pins it, or
    copies it needs were removed (docs/snapshots.md, "Retention").

    Attributes
    ----------
    as_of : int
        The generation asked for.
    history_from : int
        The oldest generation of the file whose history is whole (snapshots'
        generations are readable too).
    gone : tuple of str
        Records whose copies at ``as_of`` are gone, when that is the cause.
    """

    def __init__(self, message: str, file: str = "", as_of: int = 0, history_from: int = 0, gone=()):
        super().__init__(message, file)
        self.as_of, self.history_from, self.gone = as_of, history_from, tuple(gone)


class ReadOnlyError(StoreTorrentError):
    """A write (put, delete, ...) on a file opened ``as_of`` a past state:
    the past is read-only (docs/snapshots.md).

    Attributes
    ----------
    file : str
    as_of : int
        The generation the handle reads.
    """

    def __init__(self, message: str, file: str = "", as_of: int = 0):
        super().__init__(message)
        self.file, self.as_of = file, as_of


class MetadataTooLargeError(StoreTorrentError, ValueError):
    """A record's user metadata over what a version may keep
    (:mod:`st_py.core.user_meta`; S3's 2 KB of user metadata).

    Attributes
    ----------
    name : str
        The record.
    size : int
        The metadata's bytes, counted as ``what`` says.
    limit : int
        The most allowed (bytes).
    what : str
        What was counted: ``"user pairs"`` (the UTF-8 bytes of the keys and
        values that are not standard headers) or ``"encoded"`` (the whole
        encoded map).
    """

    def __init__(self, name: str, size: int, limit: int, what: str = "user pairs"):
        super().__init__(
            f"record {name[:80]!r}: its metadata has {size:,} bytes of {what}, over the limit of {limit:,}: "
            "keep fewer or shorter pairs (nothing was stored)"
        )
        self.name, self.size, self.limit, self.what = name, size, limit, what


class BadMetadataError(StoreTorrentError, ValueError):
    """User metadata that is not a map of non-empty lower-case names to
    text (:mod:`st_py.core.user_meta`). Attributes: ``name`` (the record),
    ``detail`` (what is wrong)."""

    def __init__(self, name: str, detail: str):
        super().__init__(
            f"record {name[:80]!r}: bad metadata ({detail}): give a dict of lower-case names to str values"
        )
        self.name, self.detail = name, detail


class DaemonStartError(StoreTorrentError, RuntimeError):
    """A daemon of a local cluster (``storetorrent up``, ``LocalCluster``)
    did not start: it exited, or printed no ``listening on`` line in time.
    Also a local Ray that a reader started (``daemon="ray"``,
    ``st_integrations.ray_start``): its processes are stopped first.
    The message is one line (the log's last line); the log says more.

    Attributes
    ----------
    daemon : str
        ``tracker``, ``peer-<i>``, ``s3`` or ``ray``.
    log : str
        The path of its log.
    tail : str
        The last lines of its log ("" if none).
    """

    def __init__(self, daemon: str, log: str, tail: str = "", message: str = ""):
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        super().__init__(message or f"{daemon} did not start (see {log})" + (f": {last}" if last else ""))
        self.daemon, self.log, self.tail = daemon, log, tail


class PortInUseError(DaemonStartError):
    """A daemon of a local cluster could not listen on a port it was given:
    something else listens there.

    Attributes
    ----------
    port : int
    host : str
    role : str
        Which of the daemon's ports: ``port``, ``metrics port``.
    option : str
        The option of ``storetorrent up`` that sets it (``--port``,
        ``--metrics-port``, ``--s3-port``; "" for a peer's).
    """

    def __init__(self, daemon: str, log: str, port: int, host: str = "127.0.0.1", role: str = "port", option: str = ""):
        how = f"give {option} another port or 0 (a free one)" if option else "free it"
        super().__init__(
            daemon,
            log,
            message=f"{daemon} cannot listen on {host}:{port} (its {role}): address already in use; {how}",
        )
        self.port, self.host, self.role, self.option = port, host, role, option


class StaleInfofileError(StoreTorrentError):
    """A node's copy of an infofile (``metadata="fetch"``, issue 40) could
    not be brought to the generation a read needs: the tracker asked did not
    have it, or could not be reached. Nothing was read from the stale copy.

    Attributes
    ----------
    name : str
        The file.
    want : int
        The generation asked for.
    have : int
        The copy's generation (0: no copy).
    tracker : str
        The tracker asked (``host:port``).
    reason : str
        What went wrong.
    """

    def __init__(self, name: str, want: int, have: int, tracker: str, reason: str):
        super().__init__(
            f"the local copy of {name}'s infofile is at generation {have}, a read needs {want}, and the tracker at "
            f"{tracker} did not bring it there ({reason}); retry, or read with the shared namespace mount "
            "(metadata='shared-mount')"
        )
        self.name, self.want, self.have, self.tracker, self.reason = name, want, have, tracker, reason
