"""Recovery without the namespace (issue 13; paper 3.5: the infofiles are the
only metadata): ``storetorrent recover --from-peers``.

Every peer keeps a copy of the infofile of each file it holds records of or
whose peerlist names it (its *mirror*, ``<data>/meta/``, refreshed every
``--mirror-interval`` seconds; st_core/src/meta_mirror.h). When the namespace
is lost, :func:`recover_from_peers` rebuilds it from the live peers:

1. asks the tracker which peers are alive (``Status``);
2. lists each live peer's mirrors (``LIST_META``);
3. per file id, takes the mirror of the highest generation, fetches it in
   chunks (``GET_META``), checks its size and CRC-32C against the listing and
   that it is a sound storetorrent-infofile of that file id and generation;
4. gives it to the tracker (``RestoreInfofile``), which puts it at the path
   of its ``meta.name`` if nothing is there (``restored``), or says the file
   is ``present`` already, or reports a ``conflict`` (nothing overwritten);
5. reports, per file, the records whose copies are on peers that are not
   alive (``missing_copies``) and those with no copy on a live peer at all
   (``unreadable``), from the restored infofile's ``copies`` and ``peers``.

A restored file is as its mirror was at the last mirror pass before the
namespace went: records committed after it (at most ``--mirror-interval``
seconds of commits) are not in it, and uncommitted records never are (the
scrubber later removes their copies).

Peers are asked with a capability minted with the cluster's key when one is
given (READ and ADMIN on every file): the mirrors name every record.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

from st_py.core.copy_health import Liveness, file_health
from st_py.core.infofile import InfofileReader
from st_py.errors import ChecksumError, ErrorCode, PeerError, RecoveryError, StoreTorrentError
from st_py.wire import protocol as P
from st_py.wire.tracker_client import TrackerClient
from st_py.wire.transport import Transport

GET_META_CHUNK = 8 << 20  # bytes asked per GET_META (a peer sends at most what its --max-frame allows)
MAX_NAMES = 1000  # record names listed per file and kind in a report (the counts are always exact)


@dataclass(frozen=True)
class MirrorCopy:
    """One peer's mirror of one file, as LIST_META lists it."""

    peer: str  # host:port
    file_id: int
    generation: int
    size: int
    crc32c: int
    name: str


@dataclass
class FileRecovery:
    """What recovery did for one file.

    ``outcome``: ``restored`` (its infofile is back in the namespace),
    ``present`` (the namespace has it at this or a newer generation),
    ``conflict`` (something else holds its name; nothing overwritten),
    ``failed`` (no mirror of it could be fetched and checked; ``detail``
    says why); with ``dry_run`` nothing is restored, ``missing`` (not in
    the namespace: a real run restores it) stands for ``restored`` and
    ``undecided`` for ``failed``: the dry run cannot tell what a run would
    do (``detail`` says why: every mirror's fetch failed or timed out), which
    says nothing against the file itself.
    """

    name: str
    file_id: int
    generation: int
    outcome: str
    records: int = 0
    missing_copies: int = 0  # records with a copy on a peer that is not alive (or not stored)
    unreadable: int = 0  # records with no copy on a live peer
    records_missing_copies: list[str] = field(default_factory=list)  # at most MAX_NAMES
    records_unreadable: list[str] = field(default_factory=list)  # at most MAX_NAMES
    mirrors: int = 0  # live peers with a mirror of the file (any generation)
    source: str = ""  # the peer whose mirror was used
    detail: str = ""

    def as_dict(self) -> dict:
        """The fields as a JSON-ready dict, ``file_id`` as 16 hex digits."""
        d = asdict(self)
        d["file_id"] = f"{self.file_id:016x}"
        return d


@dataclass
class RecoveryReport:
    """The result of :func:`recover_from_peers`: one :class:`FileRecovery` per
    file found in the mirrors, sorted by name."""

    files: list[FileRecovery]
    peers_alive: list[str]
    peers_failed: list[tuple[str, str]]  # (host:port, why) of live peers whose mirrors could not be listed
    dry_run: bool = False
    # records the live peers announced holding when none of them listed a mirror and the
    # namespace holds no file: nothing could be rebuilt although there is data
    unmirrored_records: int = 0

    @property
    def complete(self) -> bool:
        """Every file restored or present, every record readable, and no
        peer holding records without any mirror to rebuild them from."""
        return (
            all(f.outcome in ("restored", "present", "missing") and f.unreadable == 0 for f in self.files)
            and not self.peers_failed
            and not self.unmirrored_records
        )

    def as_dict(self) -> dict:
        """The report as a JSON-ready dict."""
        return {
            "dry_run": self.dry_run,
            "peers_alive": self.peers_alive,
            "peers_failed": [{"peer": p, "error": e} for p, e in self.peers_failed],
            "files": [f.as_dict() for f in self.files],
            "unmirrored_records": self.unmirrored_records,
        }


class _PeerSession:
    """LIST_META and GET_META to one peer as blocking calls, over the
    client's pipelined :class:`~st_py.wire.transport.Transport`."""

    def __init__(self, addr: str, token: bytes = b"", timeout: float = 30.0):
        self.addr = addr
        self.t = Transport(timeout=timeout, connect_timeout=timeout)
        if token:
            self.t.set_capability(0, token)  # an ADMIN capability: AUTH on the connection

    def call(self, build) -> P.Frame:
        """Send one request and wait for its reply (chunked lists merged).
        Raises PeerError for an ERROR reply, PeerUnavailableError if the
        connection fails."""
        reply: dict = {}
        self.t.send(self.addr, lambda seq: [build(seq)], lambda fr, exc: reply.update(fr=fr, exc=exc))
        self.t.wait(lambda: bool(reply))
        if reply["exc"] is not None:
            raise reply["exc"]
        return reply["fr"]

    def list_meta(self) -> list[MirrorCopy]:
        out = []
        for file_id, gen, size, crc, name in self.call(P.encode_list_meta).fields["entries"]:
            out.append(MirrorCopy(self.addr, file_id, gen, size, crc, name.decode("utf-8", "replace")))
        return out

    def fetch(self, m: MirrorCopy) -> bytes:
        """The whole mirror, in GET_META chunks; ChecksumError if its bytes
        do not match the listing (it was replaced meanwhile, or damaged)."""
        buf = bytearray()
        while len(buf) < m.size:
            off, want = len(buf), min(GET_META_CHUNK, m.size - len(buf))
            fr = self.call(lambda seq, off=off, want=want: P.encode_get_meta(seq, m.file_id, off, want))
            data = fr.fields["data"]
            if P.crc32c(data) != fr.fields["crc32c"]:
                raise ChecksumError(f"GET_META from {self.addr}: a chunk does not match its CRC-32C")
            if not data:
                break
            buf += data
        if len(buf) != m.size or P.crc32c(bytes(buf)) != m.crc32c:
            raise ChecksumError(
                f"the mirror of file {m.file_id:016x} on {self.addr} is {len(buf):,} bytes with "
                f"CRC-32C {P.crc32c(bytes(buf)):08x}, listed as {m.size:,} bytes with "
                f"{m.crc32c:08x} (replaced during the transfer?)"
            )
        return bytes(buf)

    def close(self) -> None:
        self.t.close()


def _inspect(data: bytes, m: MirrorCopy, alive_ids: set[str], max_names: int) -> FileRecovery:
    """Check the fetched infofile and count its records without a live copy.

    Raises
    ------
    ValueError
        If it is not a sound storetorrent-infofile of ``m``'s file id and
        generation.
    """
    fd, tmp = tempfile.mkstemp(prefix="st-recover-", suffix=".infofile")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        conn = sqlite3.connect(f"file:{quote(str(tmp))}?mode=ro", uri=True, isolation_level=None)
        try:
            if [r[0] for r in conn.execute("PRAGMA quick_check")] != ["ok"]:
                raise ValueError("SQLite quick_check failed")
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            if meta.get("format") != "storetorrent-infofile":
                raise ValueError(f"meta.format is {meta.get('format')!r}")
            if int(meta.get("file_id", 0)) != m.file_id or int(meta.get("generation", -1)) != m.generation:
                raise ValueError(
                    f"it is file {int(meta.get('file_id', 0)):016x} at generation "
                    f"{meta.get('generation')}, listed as {m.file_id:016x} at {m.generation}"
                )
        except sqlite3.Error as e:
            raise ValueError(f"not a readable infofile: {e}") from None
        finally:
            conn.close()
        # the copies, in the one copy model (st_py/core/copy_health.py): names, not stripes
        reader = InfofileReader(tmp)
        try:
            names, _ = reader.stats()
            health = file_health(reader, Liveness({pid: None for pid in alive_ids}), str(meta.get("name", "")))
        except sqlite3.Error as e:
            raise ValueError(f"not a readable infofile: {e}") from None
        finally:
            reader.close()
    finally:
        os.unlink(tmp)
    rec = FileRecovery(
        name=str(meta.get("name", "")),
        file_id=m.file_id,
        generation=m.generation,
        outcome="",
        records=names,
        source=m.peer,
    )
    for name, h in sorted(health.records.items()):  # fewer than F live copies (a holder not alive, pending, ...)
        rec.missing_copies += 1
        if len(rec.records_missing_copies) < max_names:
            rec.records_missing_copies.append(name)
        if h.live == 0:
            rec.unreadable += 1
            if len(rec.records_unreadable) < max_names:
                rec.records_unreadable.append(name)
    return rec


def recover_from_peers(
    tracker: TrackerClient,
    key: bytes | None = None,
    dry_run: bool = False,
    max_names: int = MAX_NAMES,
    timeout: float = 30.0,
) -> RecoveryReport:
    """Rebuild the namespace from the live peers' infofile mirrors.

    Parameters
    ----------
    tracker : TrackerClient
        The tracker (restarted on the empty namespace); restores need an
        admin user when it has a users file.
    key : bytes, optional
        The cluster's capability key (32 bytes): peers that check
        capabilities are asked with a READ+ADMIN token for every file.
    dry_run : bool
        Fetch and check the mirrors and report, restore nothing.
    max_names : int
        Record names listed per file and kind (the counts are exact).

    Returns
    -------
    RecoveryReport

    Raises
    ------
    RecoveryError
        No peer is alive, or no live peer's mirrors could be listed (with
        no ``key`` and every peer refusing for want of a capability, the
        message says to give the key).
    """
    status = tracker.status()
    alive = sorted(p.addr for p in status.peers if p.alive)
    alive_ids = {p.peer_id for p in status.peers if p.alive}
    if not alive:
        raise RecoveryError(
            "no live peer: start the peers (and give them a minute to announce) before recovering", peers_asked=()
        )
    token = b""
    if key is not None:
        from st_py.core.capability import ADMIN, READ, mint

        token = mint(key, READ | ADMIN, 0, 3600, "recover")
    sessions: dict[str, _PeerSession] = {}
    failed: list[tuple[str, str]] = []
    denied = 0  # peers that refused the request for want of a capability
    by_file: dict[int, list[MirrorCopy]] = {}
    try:
        for addr in alive:
            try:
                s = _PeerSession(addr, token, timeout)
                sessions[addr] = s
                for m in s.list_meta():
                    by_file.setdefault(m.file_id, []).append(m)
            except StoreTorrentError as e:
                failed.append((addr, str(e)))
                denied += isinstance(e, PeerError) and e.code == ErrorCode.DENIED
        if len(failed) == len(alive):
            hint = ""
            if key is None and denied == len(alive):  # a node without the cluster's folder has no DATA/secret.key
                hint = (
                    "; the peers check capabilities and no key was given: give the cluster's capability key "
                    "(storetorrent recover --key-file FILE, the secret.key of the cluster's folder)"
                )
            raise RecoveryError(f"no live peer listed its infofile mirrors: {failed[0][1]}{hint}", alive, failed)
        files = []
        for copies in by_file.values():
            copies.sort(key=lambda m: (-m.generation, m.peer))
            files.append(_recover_file(tracker, sessions, copies, alive_ids, dry_run, max_names))
    finally:
        for s in sessions.values():
            s.close()
    files.sort(key=lambda f: (f.name, f.file_id))
    held = sum(p.records for p in status.peers if p.alive)
    # data, an empty namespace, and nothing to rebuild it from: say so (with files in the
    # namespace, the records may well be theirs: a namespace that came back from the log)
    unmirrored = held if held and not by_file and _namespace_empty(tracker) else 0
    return RecoveryReport(
        files=files, peers_alive=alive, peers_failed=failed, dry_run=dry_run, unmirrored_records=unmirrored
    )


def _namespace_empty(tracker: TrackerClient) -> bool:
    """Whether the namespace's root lists nothing (True too if it cannot be
    listed: nothing then says the peers' records are accounted for)."""
    try:
        return not tracker.list("/", names_only=True).entries
    except StoreTorrentError:
        return True


def _recover_file(
    tracker: TrackerClient,
    sessions: dict[str, _PeerSession],
    copies: list[MirrorCopy],
    alive_ids: set[str],
    dry_run: bool,
    max_names: int,
) -> FileRecovery:
    """Fetch the newest sound mirror of one file (trying the others in
    order of generation) and restore it."""
    errors = []
    for m in copies:
        try:
            data = sessions[m.peer].fetch(m)
            rec = _inspect(data, m, alive_ids, max_names)
        except (StoreTorrentError, ValueError) as e:
            errors.append(f"{m.peer}: {e}")
            continue
        rec.mirrors = len({c.peer for c in copies})
        reply = tracker.restore_infofile(data, dry_run=dry_run)
        rec.outcome, rec.detail = reply.outcome, reply.detail
        if reply.outcome == "missing":
            rec.detail += f" from {m.peer}"
        return rec
    best = copies[0]
    return FileRecovery(
        name=best.name,
        file_id=best.file_id,
        generation=best.generation,
        outcome="undecided" if dry_run else "failed",
        mirrors=len({c.peer for c in copies}),
        detail="; ".join(errors),
    )


def key_from(path: str | os.PathLike | None) -> bytes | None:
    """The capability key of the key file at ``path``, if it exists."""
    if path is None or not Path(path).is_file():
        return None
    from st_py.core.capability import load_key

    return load_key(path)
