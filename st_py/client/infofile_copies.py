"""Where this client reads a file's infofile (issue 40; docs/metadata-log.md,
"Metadata on every node"): the one module that decides it.

- ``auto`` (the default): per file, at each ``Open``, the tracker's infofile
  when the path ``Open`` returns is readable on this node and holds that
  very file (its ``meta``: file id, name, metadata log id, and a generation
  and log position at least the reply's: a stale folder of another cluster
  at the same path is not read), as ``shared-mount``; else a local copy, as
  ``fetch``. A file read directly whose infofile falls behind what this
  client was told (a follower's namespace at the leader's path) is read
  from a copy from then on.
- ``shared-mount``: the tracker's infofile, at the path
  ``Open`` returns, on the namespace mount (NFS) every node shares.
- ``fetch``: a copy per file in a cache folder
  (``~/.cache/storetorrent/<cluster>/<file_id>.infofile``, folder 0700, copies
  0600; ``<cluster>`` is ``$STORETORRENT_CLUSTER_ID``, else the tracker
  address), brought to at least the generation ``Open`` returned, and the
  generation each commit of this client returned (read your writes), and
  for a read of the current state to every change acknowledged before the
  read began less ``max_age_s`` (close-to-open with a bounded age, NFS's
  model: a copy checked within the age is read as it is;
  ``ensure(since=...)``; docs/decisions.md, "Freshness of a local copy"),
  by the changesets the tracker's writer kept (FetchInfofile), or a
  snapshot when there is no copy or they no longer reach back. The mount
  is never read. A copy is replaced whole (a new file renamed over it) and
  never synced; ``<file_id>.seal`` beside it says whether it can be read
  after a crash of the machine (st_py/client/copy_seal.py).

Copies are made from any tracker replica, not only the leader
(docs/metadata-log.md, "Copies from standbys"): the standbys that follow the
log serve FetchInfofile on a port of their own, which the leader's Status
lists (``fetch_addr``, looked up at most every :data:`REPLICAS_TTL_S`). A
question with a state to reach (an open, a read of this client's writes, a
first copy) goes to the standbys in turn, a different one first each time,
then to the tracker; a standby that has not applied the log that far refuses
(``ReplicaBehindError``) and the next one is asked, so a copy is never
brought to a state older than wanted. A question that must see every change
the tracker acknowledged (a read older than the age below) goes to the
tracker alone: only it knows what it acknowledged. The INFO line of a
catch-up and ``<file_id>.checked`` name the replica it came from.

Choose with ``Client(metadata=...)`` or ``$STORETORRENT_METADATA``; the
cache folder with ``Client(metadata_cache=...)`` or
``$STORETORRENT_METADATA_CACHE``; the age with
``Client(metadata_max_age_s=...)`` or ``$STORETORRENT_METADATA_MAX_AGE``
(default 1.0 s; 0: every read asks the tracker).

Thread-safety: :class:`InfofileCopies` may be used from several threads; one
catch-up per file at a time (a lock per file, and an ``flock`` on
``<file_id>.lock`` between processes sharing the folder).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import google_crc32c

from st_py.client import copy_seal
from st_py.client.changeset_apply import ChangesetApplyError, apply_changesets, copy_state
from st_py.errors import (
    InvalidOptionError,
    ReplicaBehindError,
    StaleInfofileError,
    StoreTorrentError,
    TrackerUnavailableError,
)

log = logging.getLogger("st.client.copies")
wait_log = logging.getLogger("st.client")  # a read that waited for its copy: one line (issue 40 item 4)
CHECKED = ".checked"  # beside each copy: its last check with the tracker (copies_status reads it)

AUTO = "auto"
SHARED = "shared-mount"
FETCH = "fetch"
MODES = (AUTO, SHARED, FETCH)
DEFAULT_MAX_AGE_S = 1.0  # a copy is checked with the tracker before a read once this old (docs/decisions.md)
STANDBY_TIMEOUT_S = 10.0  # seconds a standby's whole answer may take (then the tracker is asked)
REPLICAS_TTL_S = 10.0  # seconds the standbys' infofile ports, from the leader's Status, are used before asked again
TRIES = 5  # asks per catch-up before StaleInfofileError (a commit's reply can precede its changeset by a moment)


def metadata_mode(mode: str | None = None) -> str:
    """The metadata mode: ``mode`` if given, else ``$STORETORRENT_METADATA``,
    else ``auto``.

    Raises InvalidOptionError for another value."""
    m = mode or os.environ.get("STORETORRENT_METADATA") or AUTO
    if m not in MODES:
        raise InvalidOptionError(f"metadata={m!r}: use one of {', '.join(MODES)}", "metadata", m)
    return m


def cache_folder(tracker_address: str, folder: str | os.PathLike | None = None) -> Path:
    """The folder of this cluster's copies: ``folder`` if given, else
    ``$STORETORRENT_METADATA_CACHE``, else
    ``~/.cache/storetorrent/<cluster>`` (``$STORETORRENT_CLUSTER_ID`` or the
    tracker address, made safe as a folder name)."""
    given = folder or os.environ.get("STORETORRENT_METADATA_CACHE")
    if given:
        return Path(given)
    cluster = os.environ.get("STORETORRENT_CLUSTER_ID") or re.sub(r"[^A-Za-z0-9._-]", "_", tracker_address)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "storetorrent" / cluster


@dataclass(frozen=True)
class Want:
    """The state a copy must reach: ``generation`` at least and, when
    ``log_id`` is known, ``position`` of that metadata log at least."""

    generation: int = 0
    position: int = 0
    log_id: str = ""

    def reached_by(self, state: tuple) -> bool:
        """Whether a copy at ``state`` ((generation, log position, log id, ...))
        has it. Positions of two logs do not compare (a file created by the
        master and written by its per-file tracker changes log): then the
        generation alone decides."""
        if state[0] < self.generation:
            return False
        return not self.log_id or state[2] != self.log_id or state[1] >= self.position


@dataclass
class Fetched:
    """One catch-up of a copy: ``kind`` (snapshot, changes, current),
    ``bytes`` received, generations before and after, seconds taken,
    ``source`` the replica that answered (``host:port``) and whether it is
    a ``standby`` (False: the tracker the client talks to)."""

    name: str
    kind: str
    bytes: int
    from_generation: int
    to_generation: int
    seconds: float
    source: str = ""
    standby: bool = False


class InfofileCopies:
    """This client's copies of infofiles in ``folder`` (``metadata="fetch"``,
    or ``"auto"`` with ``auto=True``: files whose infofile this node sees
    are read there, :meth:`reads_directly`). Set as a TrackerClient's
    ``locator``: ``Open`` and ``Create`` replies then name where the file's
    infofile is read, a copy brought to the state they show. The folder is
    made on the first copy."""

    def __init__(self, folder: str | os.PathLike, auto: bool = False, max_age_s: float = DEFAULT_MAX_AGE_S):
        self.folder = Path(folder)
        if max_age_s < 0:
            raise InvalidOptionError(
                f"metadata_max_age_s={max_age_s}: use 0 (check every read) or more", "metadata_max_age_s", max_age_s
            )
        self.max_age_s = float(max_age_s)
        self.auto = auto
        self.mode = AUTO if auto else FETCH
        self._direct: set[int] = set()  # file ids read at the tracker's path (auto)
        self._demoted: set[int] = set()  # file ids found behind at the tracker's path: copies from then on
        self._verified: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> the file id its meta showed
        # file_id -> the state (generation, log position, log id) reads must see at least:
        # the newest this client was told of (Open, Create, its commits)
        self._wanted: dict[int, Want] = {}
        self._known: dict[int, tuple[int, int, str]] = {}  # file_id -> the copy's state as last brought
        # file_id -> monotonic time the last question to the tracker started (the copy holds every
        # change acknowledged before it): reads that began before it need not ask again (live reads)
        self._asked: dict[int, float] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._states: dict[Path, tuple[tuple, tuple[int, int, str, str]]] = {}  # path -> (stat key, copy_state)
        self._names: dict[str, int] = {}  # file name -> the file id of the copy this client located for it
        self._lock = threading.Lock()
        self.last: Fetched | None = None  # the last catch-up that asked the tracker
        self.bytes_received = 0
        self.questions = 0  # FetchInfofile calls made (what a read within the age saves)
        self.waits = 0  # reads that waited for their copy to catch up
        self.from_standbys = 0  # catch-ups a standby answered (the rest: the tracker)
        self._replicas: tuple[float, list[str]] = (-REPLICAS_TTL_S, [])  # (when looked up, standbys' fetch ports)
        self._turn = 0  # which standby is asked first next (spread)
        self._benched: dict[str, float] = {}  # standby -> when it last failed to answer (not asked for a while)

    def path(self, file_id: int) -> Path:
        """Where the copy of file ``file_id``'s infofile is (or will be)."""
        return self.folder / f"{file_id}.infofile"

    def saw(self, file_id: int, generation: int, position: int = 0, log_id: str = "") -> None:
        """This client learned file ``file_id`` is at ``generation`` at least
        (an Open, a commit reply), and, if ``log_id`` is given, at
        ``position`` of that metadata log (Open: changes that bump no
        generation, a snapshot made say, count too): later reads bring the
        copy there."""
        with self._lock:
            w = self._wanted.get(file_id, Want())
            gen = max(w.generation, generation)
            if log_id and (log_id != w.log_id or position > w.position):
                w = Want(gen, position, log_id)
            else:
                w = Want(gen, w.position, w.log_id)
            self._wanted[file_id] = w

    def wanted(self, file_id: int) -> Want:
        """The state reads of file ``file_id`` must see at least."""
        with self._lock:
            return self._wanted.get(file_id, Want())

    def behind(self, file_id: int, state: tuple[int, int, str]) -> bool:
        """Whether a copy at ``state`` (generation, log position, log id) is
        older than reads of file ``file_id`` must see."""
        return not self.wanted(file_id).reached_by(state)

    def current(self, file_id: int) -> bool:
        """Whether the copy is known to be at :meth:`wanted` already (no file
        or tracker is touched)."""
        with self._lock:
            known = self._known.get(file_id)
        return known is not None and not self.behind(file_id, known)

    def locate(self, tracker, info, asked: float | None = None):
        """The FileInfo ``info`` (an Open or Create reply of ``tracker``) with
        ``infofile_path`` where the file's infofile is read: under ``auto``
        the tracker's path when it holds this file on this node
        (:meth:`reads_directly` then says so), else the local copy, brought
        to the state the reply shows (``generation``, ``log_position`` of
        ``log_id``). ``asked``: when the request began
        (``time.monotonic()``): the copy then holds every change acknowledged
        before it, and counts as checked at that time (close-to-open).

        Raises StaleInfofileError, and the tracker's errors."""
        with self._lock:
            old = self._names.get(info.name)
            self._names[info.name] = info.file_id
        if old is not None and old != info.file_id:  # the name was deleted and made again: the old copy goes
            self._drop(old)
        self.saw(info.file_id, info.generation, info.log_position, info.log_id)
        if self.auto and info.file_id not in self._demoted and self._same_file(info):
            with self._lock:
                self._direct.add(info.file_id)
            return info
        with self._lock:
            self._direct.discard(info.file_id)
        info.infofile_path = str(self.ensure(self.source(tracker, info), info.name, info.file_id, reason="open"))
        if asked is not None:
            with self._lock:
                self._asked[info.file_id] = max(self._asked.get(info.file_id, -1.0), asked)
        return info

    def reads_directly(self, file_id: int) -> bool:
        """Whether file ``file_id`` is read at the tracker's path (``auto``,
        the path holds the file on this node) rather than from a copy."""
        with self._lock:
            return file_id in self._direct

    def demote(self, file_id: int) -> None:
        """Read file ``file_id`` from a copy from now on, for the life of
        this locator (its infofile at the tracker's path is behind what this
        client was told: not the tracker's own file). Logged."""
        with self._lock:
            self._direct.discard(file_id)
            self._demoted.add(file_id)
            self._verified = {k: v for k, v in self._verified.items() if v != file_id}
        log.warning(
            "infofile of file id %d at the tracker's path is behind the tracker on this node: "
            "reading a local copy of it instead (metadata=auto)",
            file_id,
        )

    def _same_file(self, info) -> bool:
        """Whether the infofile at ``info.infofile_path`` is readable here and
        is the tracker's file of ``info``: same file id, name and metadata
        log, at least at the reply's generation and log position. Checked
        once per inode (the meta is read again when the path's inode changes)."""
        path = info.infofile_path
        try:
            st = os.stat(path)
        except OSError:
            return False
        key = (st.st_dev, st.st_ino)
        with self._lock:
            if self._verified.get(key) == info.file_id:
                return True
        try:
            db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=5.0)
            try:
                meta = dict(db.execute("SELECT key, value FROM meta"))
            finally:
                db.close()
        except (OSError, sqlite3.Error):  # unreadable by this user, or no SQLite file
            return False
        same = (
            int(meta.get("file_id") or 0) == info.file_id
            and str(meta.get("name") or "") == info.name
            and str(meta.get("log_id") or "") == info.log_id
            and int(meta.get("generation") or 0) >= info.generation
            and int(meta.get("log_index") or 0) >= info.log_position
        )
        if same:
            with self._lock:
                self._verified[key] = info.file_id
        else:
            log.info(
                "infofile of %s at %s is not the tracker's file on this node (another cluster's, or behind): "
                "reading a local copy (metadata=auto)",
                info.name,
                path,
            )
        return same

    @staticmethod
    def source(tracker, info):
        """The tracker that serves the file's changes: its per-file tracker
        if it has one (its writer keeps them), else ``tracker``."""
        return tracker.at(info.file_tracker) if info.file_tracker else tracker

    def _file_lock(self, file_id: int) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(file_id, threading.Lock())

    def ensure(
        self,
        tracker,
        name: str,
        file_id: int,
        newer: bool = False,
        since: float | None = None,
        reason: str = "read",
    ) -> Path:
        """Bring the copy of file ``file_id`` (named ``name``) to at least
        :meth:`wanted` (``newer``: ask the tracker for whatever it has beyond
        the copy, once) and return its path.

        ``reason`` (``"open"`` or ``"read"``) names the caller in the one
        log line (INFO, logger ``st.client``) of a catch-up that moved the
        copy: file, generations from and to, the wait in ms, kind and bytes.

        ``since`` (a ``time.monotonic()`` value: when a read began, less
        the age a copy may have) makes it a live read: the copy then holds
        every change acknowledged before ``since``, asking the tracker only if no question to it started at
        or after ``since`` yet. Readers that wait on the same file share one
        question (they queue on the file's lock; the one that asks covers
        every one that began before it asked).

        Raises
        ------
        StaleInfofileError
            The tracker did not bring it to the generation wanted.
        StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError
        """
        path = self.path(file_id)
        if since is not None and self._asked.get(file_id, -1.0) >= since and self.current(file_id) and path.is_file():
            return path
        if since is None and not newer and self.current(file_id) and path.is_file():
            return path
        t_start, bytes0 = time.monotonic(), self.bytes_received
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._file_lock(file_id), open(self.folder / f"{file_id}.lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            if since is not None:  # another reader asked after this read began: its answer covers it
                newer = self._asked.get(file_id, -1.0) < since
            want = self.wanted(file_id)
            have = self._state(path)  # a copy not known whole is removed: (0, 0, "", "")
            before = have[0]
            had_copy = path.is_file()
            t_ask = time.monotonic()
            asked = False
            got: list[Fetched] = []  # this catch-up's answers
            for attempt in range(TRIES):
                if path.is_file() and want.reached_by(have[:3]) and (asked or not newer):
                    break
                if not asked:
                    t_ask = time.monotonic()
                # a question that must see all the tracker acknowledged goes to it alone
                got.append(self._catch_up(tracker, name, file_id, path, have, want, leader_only=newer))
                asked = True
                have = self._state(path)
                if path.is_file() and want.reached_by(have[:3]):
                    break
                time.sleep(0.02 * (attempt + 1))
            if not want.reached_by(have[:3]) or not path.is_file():
                raise StaleInfofileError(
                    name, want.generation, have[0], tracker.address, f"the tracker has not got that far ({want})"
                )
            # a standby's answer holds what was wanted, not all the tracker acknowledged by t_ask
            by_tracker = asked and not any(f.standby for f in got)
            with self._lock:
                self._known[file_id] = (have[0], have[1], have[2])
                if by_tracker:
                    self._asked[file_id] = max(self._asked.get(file_id, -1.0), t_ask)
            if asked:  # -1: there was no copy to be behind
                self._write_check(file_id, before if had_copy else -1, have[0], got[-1] if got else None)
            if asked and have[0] != before:
                self.waits += 1
                kind = got[-1].kind if got else "?"
                wait_log.info(
                    "infofile copy of %s: %s waited %.1f ms to catch up from generation %d to %d (%s, %d bytes, "
                    "from %s)",
                    name,
                    "an open" if reason == "open" else "a read",
                    (time.monotonic() - t_start) * 1000,
                    before,
                    have[0],
                    kind,
                    self.bytes_received - bytes0,
                    _from(got[-1] if got else None),
                )
        return path

    def _write_check(self, file_id: int, generation: int, tracker_generation: int, last: Fetched | None) -> None:
        """Leave beside the copy what its last check with the tracker found
        (``<file_id>.checked``, JSON: ``at`` wall time, the copy's
        ``generation`` before (-1: none yet), the ``tracker_generation`` it
        was brought to, and the ``source`` replica of the last answer and
        whether it is a ``standby``), for ``status`` in any process
        (st_py/client/copies_status.py). Replaced whole (a rename), never
        read half-written."""
        tmp = self.folder / f".{file_id}.checked-{os.getpid()}-{threading.get_ident()}"
        data = json.dumps(
            {
                "at": time.time(),
                "generation": generation,
                "tracker_generation": tracker_generation,
                "source": last.source if last is not None else "",
                "standby": bool(last is not None and last.standby),
            }
        )
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(data)
            os.replace(tmp, self.folder / f"{file_id}{CHECKED}")
        except OSError as e:  # only status reads it: a full disk must not fail the read
            log.warning("infofile copy of file id %d: could not note its check (%s)", file_id, e)

    def forget(self, name: str) -> None:
        """File ``name`` is gone (an Open said NOT_FOUND, or this client
        deleted it): remove the copy this client located for it, if any.
        A copy of a file deleted by another client that this process never
        opens again stays until its folder is cleared (docs/metadata-log.md)."""
        with self._lock:
            file_id = self._names.pop(name, None)
        if file_id is not None:
            self._drop(file_id)

    def _drop(self, file_id: int) -> None:
        # readers holding the copy open keep reading it (the inode stays until they close it)
        with self._lock:
            self._direct.discard(file_id)
        if not self.path(file_id).is_file():  # none kept (auto read it at the tracker's path): nothing to remove
            return
        with self._file_lock(file_id), open(self.folder / f"{file_id}.lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            self.path(file_id).unlink(missing_ok=True)
            (self.folder / f"{file_id}{CHECKED}").unlink(missing_ok=True)
            copy_seal.seal_path(self.path(file_id)).unlink(missing_ok=True)
            with self._lock:
                self._states.pop(self.path(file_id), None)
                self._known.pop(file_id, None)
                self._asked.pop(file_id, None)
        log.info("infofile copy of file id %d removed: the file was deleted", file_id)

    def copies(self) -> dict[int, tuple[int, int, str]]:
        """``{file_id: (generation, log position, log id)}`` of the copies
        this client brought forward (what ``status`` and metrics show)."""
        with self._lock:
            return dict(self._known)

    def state(self, file_id: int) -> tuple[int, int, str] | None:
        """(generation, log position, log id) the copy of file ``file_id``
        was last brought to (None: not yet)."""
        with self._lock:
            return self._known.get(file_id)

    def _state(self, path: Path) -> tuple[int, int, str, str]:
        """(generation, log position, log id, schema fingerprint) of the copy
        at ``path``; (0, 0, "", "") and the copy removed if there is none, it
        is not known whole (st_py/client/copy_seal.py: a machine crash may
        have torn it) or it is unreadable. Called under the copy's locks."""
        # A copy is only ever replaced whole (a rename over it), never written in place, so its
        # (inode, mtime, size) names its state: read once per version, not at every live read.
        try:
            st = path.stat()
        except FileNotFoundError:
            return (0, 0, "", "")
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._states.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        if not copy_seal.whole(path):
            path.unlink(missing_ok=True)
            return (0, 0, "", "")
        try:
            state = copy_state(path)
        except Exception:  # a damaged copy is fetched again whole
            log.warning("infofile copy %s is unreadable: fetching it again", path)
            path.unlink(missing_ok=True)
            return (0, 0, "", "")
        with self._lock:
            self._states[path] = (key, state)
        return state

    def _remember(self, path: Path, state: tuple[int, int, str, str]) -> None:
        """Note ``state`` as the copy's just written at ``path`` (under the
        copy's locks): :meth:`_state` then reads nothing back. A state whose
        schema fingerprint is "" has it read when the tracker is next asked."""
        st = path.stat()
        with self._lock:
            self._states[path] = ((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size), state)

    def standbys(self, tracker) -> list[str]:
        """The infofile ports of ``tracker``'s standbys that serve
        FetchInfofile (its Status's ``fetch_addr``; [] for a per-file
        tracker, whose writes no standby follows), looked up at most every
        :data:`REPLICAS_TTL_S`; [] when the Status cannot be had (the
        tracker alone is asked then)."""
        if getattr(tracker, "per_file", False):
            return []
        at, found = self._replicas
        if time.monotonic() - at < REPLICAS_TTL_S:
            return found
        now = time.monotonic()
        try:
            mlog = tracker.status(timeout=5.0).metadata_log
            found = sorted(t.fetch_addr for t in mlog.trackers if t.fetch_addr and t.role != "leader")
            if not mlog.backend.startswith("etcd"):  # no standbys without the log in etcd: never asked again
                now = float("inf")
        except StoreTorrentError as e:
            log.debug("no standbys' infofile ports from the tracker's status (%s): asking the tracker alone", e)
            found = []
        self._replicas = (now, found)
        return found

    def _bench(self, address: str, e: Exception) -> None:
        """Ask standby ``address`` nothing for :data:`REPLICAS_TTL_S`: it did
        not answer (down, stopped, cut off), so questions do not wait on it
        each time."""
        with self._lock:
            self._benched[address] = time.monotonic()
        log.info("standby %s did not answer a FetchInfofile (%s): not asked for %g s", address, e, REPLICAS_TTL_S)

    def _sources(self, tracker, leader_only: bool) -> list:
        """Whom to ask, in order: the standbys (a different one first at
        each question, spreading the copies over them) and ``tracker`` last."""
        if leader_only:
            return [tracker]
        listed = self.standbys(tracker)  # may ask the tracker: not under the lock
        now = time.monotonic()
        with self._lock:
            found = [a for a in listed if now - self._benched.get(a, -REPLICAS_TTL_S) >= REPLICAS_TTL_S]
        if not found:
            return [tracker]
        with self._lock:
            k = self._turn % len(found)
            self._turn += 1
        return [tracker.at(a) for a in found[k:] + found[:k]] + [tracker]

    def _ask(self, tracker, name: str, file_id: int, have: tuple, want: Want, leader_only: bool):
        """(the replica that answered, its messages, their first) for the
        copy at ``have`` to reach ``want``: each of :meth:`_sources` in turn
        until one has it; a standby behind, unreachable or busy is passed
        over (logged at DEBUG), the tracker's errors are raised."""
        sources = self._sources(tracker, leader_only)
        for src in sources:
            msgs = src.fetch_infofile_stream(
                name,
                file_id,
                have,
                want.generation,
                timeout=None if src is tracker else min(src.timeout, STANDBY_TIMEOUT_S),
                want_position=want.position,
                want_log_id=want.log_id,
            )
            if src is tracker:
                return src, msgs, next(msgs)
            try:
                head = next(msgs)
            except ReplicaBehindError as e:
                log.debug("infofile copy of %s: standby %s passed over (%s)", name, src.address, e)
                continue
            except TrackerUnavailableError as e:
                self._bench(src.address, e)
                continue
            if not want.reached_by((head.generation, head.position, head.log_id)):  # one that does not check
                msgs.close()
                log.debug("infofile copy of %s: standby %s answered an older state, passed over", name, src.address)
                continue
            return src, msgs, head
        raise AssertionError("unreachable: the tracker is the last source")

    def _catch_up(
        self, tracker, name: str, file_id: int, path: Path, have: tuple, want: Want, leader_only: bool = False
    ) -> Fetched:
        """Ask once (:meth:`_ask`) and apply the answer to the copy at
        ``path``; returns what was fetched (also kept as :attr:`last`)."""
        t0 = time.monotonic()
        self.questions += 1
        if have[2] and not have[3]:  # as a snapshot's first message said: its schema read now, first needed
            try:
                have = copy_state(path)
            except Exception:  # a damaged copy is fetched again whole
                log.warning("infofile copy %s is unreadable: fetching it again", path)
                have = (0, 0, "", "")
        src, msgs, head = self._ask(tracker, name, file_id, have, want, leader_only)
        size = 0
        try:  # the copy changes only once an answer is whole (changesets listed first, a snapshot renamed over it)
            if head.kind == "changes":
                body = [m.data for m in msgs]
                size = sum(len(d) for d in body)
                try:
                    apply_changesets(path, body)
                    copy_seal.seal(path, None, None)  # no CRC names the bytes now: after a reboot, fetched again
                except ChangesetApplyError as e:
                    log.warning("%s; fetching a snapshot", e)
                    src, msgs, head = self._ask(tracker, name, file_id, (0, 0, "", ""), want, leader_only)
            if head.kind == "snapshot":
                size += self._write_snapshot(path, head, msgs)
                self._remember(path, (head.generation, head.position, head.log_id, ""))
            for _ in msgs:  # "current" is one message: the call ends here
                pass
        except TrackerUnavailableError as e:
            if src is tracker:
                raise
            self._bench(src.address, e)  # a standby lost mid-answer: the tracker answers instead
            return self._catch_up(tracker, name, file_id, path, self._state(path), want, leader_only=True)
        self.bytes_received += size
        standby = src is not tracker
        self.from_standbys += standby
        got = self.last = Fetched(
            name, head.kind, size, have[0], head.generation, time.monotonic() - t0, src.address, standby
        )
        if head.kind != "current":  # the caller's one INFO line (ensure) tells the wait
            log.debug(
                "infofile copy of %s: %s, %d bytes, generation %d -> %d in %.3f s, from %s",
                name,
                head.kind,
                size,
                have[0],
                head.generation,
                got.seconds,
                _from(got),
            )
        return got

    def _write_snapshot(self, path: Path, head, pieces) -> int:
        """Write the snapshot ``head`` announces from the messages ``pieces``
        (written as they arrive) to a temporary file, check its size and
        CRC-32C, rename it over the copy and seal it (copy_seal: no fsync; a
        copy a machine crash tore is found at the next read and fetched
        again). The bytes received."""
        tmp = path.with_name(f".{path.name}.fetch-{os.getpid()}")
        crc, size = 0, 0
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                for m in pieces:
                    crc = google_crc32c.extend(crc, m.data)
                    size += len(m.data)
                    f.write(m.data)
            if size != head.total_size or crc != head.crc32c:
                raise StoreTorrentError(
                    f"the snapshot of infofile {path.name} arrived damaged ({size} of {head.total_size} bytes, "
                    "CRC-32C differs or size short); retry"
                )
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        copy_seal.seal(path, size, crc)
        return size


def _from(f: Fetched | None) -> str:
    """Which replica answered ``f``, for a log line."""
    if f is None:
        return "?"
    return f"standby {f.source}" if f.standby else f"the tracker at {f.source}"


def max_age(seconds: float | None = None) -> float:
    """How old a copy may be before a read checks it with the tracker:
    ``seconds`` if given, else ``$STORETORRENT_METADATA_MAX_AGE``, else
    :data:`DEFAULT_MAX_AGE_S` (1.0 s); 0 checks at every read.

    Raises InvalidOptionError for a negative or non-numeric value."""
    if seconds is not None:
        return seconds
    env = os.environ.get("STORETORRENT_METADATA_MAX_AGE")
    if not env:
        return DEFAULT_MAX_AGE_S
    try:
        return float(env)
    except ValueError:
        raise InvalidOptionError(
            f"STORETORRENT_METADATA_MAX_AGE={env!r}: give seconds (0: check every read)", "metadata_max_age_s", env
        ) from None


def make_locator(
    mode: str | None,
    tracker_address: str,
    folder: str | os.PathLike | None = None,
    max_age_s: float | None = None,
):
    """The locator for a TrackerClient: None on the shared mount, else the
    :class:`InfofileCopies` of this cluster's cache folder (``auto``: reading
    directly the files this node sees), its copies checked with the tracker
    before a read once :func:`max_age` old.

    Raises InvalidOptionError for an unknown mode or a bad age."""
    m = metadata_mode(mode)
    if m == SHARED:
        return None
    return InfofileCopies(cache_folder(tracker_address, folder), auto=m == AUTO, max_age_s=max_age(max_age_s))
