"""A history of client operations and its check, in the style of Jepsen's
(issue 39, "No single machine matters"; docs/reliability.md, "Tracker
failover").

Several client threads record each operation they invoke (:class:`History`):
what it was (``create`` a file, ``put`` a record, ``commit`` the records put
since the last commit -- a ``flush`` or ``close`` --, ``delete`` a record,
``get`` one, ``list`` a file's names, take a ``snapshot``), when it was
invoked and when it completed (``time.monotonic()``: one process, one clock),
and its outcome:

- ``ok``: it returned;
- ``fail``: it raised an error that says nothing was changed (a refusal
  decided before any change: :func:`definite`);
- ``unknown``: it raised anything else (a timeout, a lost tracker, a failed
  commit whose append may have been committed), or never completed. It may
  or may not have taken effect.

:func:`check` then holds the history against the final state read back
(:class:`Final`) and against what every read saw while the history ran:

- every acknowledged record (a commit covering it returned) reads back with
  its bytes, unless a delete of it was invoked (*lost* otherwise);
- nothing is visible that was never attempted, and no record whose put or
  commit failed definitely (an ``unknown`` one may or may not be);
- a record whose delete returned stays deleted;
- a read (``get``, ``list``) sees every record acknowledged before it was
  invoked and not deleted meanwhile, and nothing deleted before it began;
- a snapshot holds every record acknowledged before it was invoked, nothing
  put after it returned, and reads at the end exactly as it read right after
  it was acknowledged;
- a create refused as "exists" for a name no one had created before is a
  retried create applied twice.

:func:`check_terms` checks "no two leaders accepted writes in one term" from
what can be observed: which tracker says it was elected in which term (its
log), and the term each log entry was appended under (the etcd log);
:func:`check_creates_once` that no file was made twice in the log.

Pure: no processes, no clients; tests/test_history.py checks it on made-up
histories, tests/failover.py records real ones.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from st_py import errors as st_errors

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"

# Refusals decided before anything changed: the operation definitely did not
# take effect. Any other error leaves its effect unknown.
DEFINITE = tuple(
    getattr(st_errors, n)
    for n in (
        "BadNameError",
        "InvalidOptionError",
        "LeaseHeldError",
        "NotAuthenticatedError",
        "NotEnoughPeersError",
        "PermissionDeniedError",
        "QuotaExceededError",
        "ReadOnlyError",
        "RecordExistsError",
        "RecordNotFoundError",
        "SnapshotExistsError",
        "SnapshotNotFoundError",
        "StFileExistsError",
        "StFileNotFoundError",
    )
)


def definite(e: BaseException) -> bool:
    """Whether error ``e`` says its operation changed nothing."""
    return isinstance(e, DEFINITE)


@dataclass
class Op:
    """One operation of the history.

    ``f`` is ``create``, ``put``, ``commit``, ``delete``, ``get``, ``list``
    or ``snapshot``; ``file`` the file; ``key`` the record (put, delete,
    get) or the snapshot's name. ``value``: a put's bytes; a commit's tuple
    of the record names it commits. ``result``: a get's bytes (None: not
    found); a list's frozenset of names; a snapshot's frozenset of names as
    read right after it returned (None: that read failed). ``outcome`` is
    None while in flight (it counts as ``unknown``).
    """

    process: str
    f: str
    file: str
    key: str = ""
    value: Any = None
    invoked: float = 0.0
    completed: float | None = None
    outcome: str | None = None
    result: Any = None
    error: str = ""

    def ok(self, result: Any = None) -> None:
        """It returned (with ``result``)."""
        self.result, self.outcome, self.completed = result, OK, time.monotonic()

    def failed(self, e: BaseException) -> None:
        """It raised ``e``: ``fail`` if ``e`` is definite, else ``unknown``."""
        self.outcome = FAIL if definite(e) else UNKNOWN
        self.error = f"{type(e).__name__}: {e}"[:300]
        self.completed = time.monotonic()

    @property
    def done_ok(self) -> bool:
        """Whether it returned."""
        return self.outcome == OK


class History:
    """The operations of every client thread, in invocation order.
    Thread-safe: each thread records its own operations."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def invoke(self, process: str, f: str, file: str, key: str = "", value: Any = None) -> Op:
        """Record the invocation of an operation now; complete it with
        :meth:`Op.ok` or :meth:`Op.failed`."""
        op = Op(process, f, file, key, value, invoked=time.monotonic())
        with self._lock:
            self.ops.append(op)
        return op

    @contextmanager
    def run(self, process: str, f: str, file: str, key: str = "", value: Any = None) -> Iterator[Op]:
        """``with history.run(...) as op:`` the block is the operation: it
        completes ``ok`` when the block ends (with ``op.result`` as the block
        set it), or as :meth:`Op.failed` when it raises (the error goes on)."""
        op = self.invoke(process, f, file, key, value)
        try:
            yield op
        except BaseException as e:
            op.failed(e)
            raise
        op.ok(op.result)

    def snapshot(self) -> list[Op]:
        """A copy of the operations recorded so far."""
        with self._lock:
            return list(self.ops)

    def acked(self) -> list[tuple[str, str]]:
        """(file, record) of every record a returned commit covers, so far."""
        return [(o.file, k) for o in self.snapshot() if o.f == "commit" and o.outcome == OK for k in o.value]


@dataclass
class Final:
    """The state read back at the end: ``files`` maps each file found to its
    records' bytes; ``snapshots`` maps (file, snapshot) to its records'
    bytes as read at the end (None: it could not be read)."""

    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    snapshots: dict[tuple[str, str], dict[str, bytes] | None] = field(default_factory=dict)


@dataclass
class Verdict:
    """What :func:`check` found: ``problems`` (must be empty) and counts."""

    problems: list[str] = field(default_factory=list)
    acked: int = 0  # records acknowledged (a commit covering them returned)
    lost: int = 0  # acknowledged, not deleted, missing at the end
    unknown: int = 0  # records whose fate the history leaves open
    reads: int = 0  # get/list/snapshot results checked
    outcomes: Counter = field(default_factory=Counter)  # (f, outcome) -> n
    errors: Counter = field(default_factory=Counter)  # error class -> n

    @property
    def valid(self) -> bool:
        """No problem found."""
        return not self.problems

    def problem(self, msg: str) -> None:
        """Note a violation (the first 200 are kept word for word)."""
        if len(self.problems) < 200:
            self.problems.append(msg)


@dataclass
class _Record:
    put: Op | None = None
    commits: list[Op] = field(default_factory=list)
    deletes: list[Op] = field(default_factory=list)

    def acked_at(self) -> float | None:
        """When the first returned commit covering it returned."""
        ts = [c.completed for c in self.commits if c.outcome == OK and c.completed is not None]
        return min(ts) if ts else None

    def failed(self) -> bool:
        """Its put was refused, or every commit of it was."""
        if self.put is not None and self.put.outcome == FAIL:
            return True
        return bool(self.commits) and all(c.outcome == FAIL for c in self.commits)

    def deleted_at(self) -> float | None:
        """When the first returned delete of it returned."""
        ts = [d.completed for d in self.deletes if d.outcome == OK and d.completed is not None]
        return min(ts) if ts else None

    def delete_invoked(self) -> float | None:
        """When a delete of it was first invoked (whatever its outcome)."""
        return min((d.invoked for d in self.deletes), default=None)

    def deleted_for_sure(self) -> bool:
        """A delete of it returned."""
        return self.deleted_at() is not None


def _index(ops: Iterable[Op]) -> dict[tuple[str, str], _Record]:
    recs: dict[tuple[str, str], _Record] = defaultdict(_Record)
    for o in ops:
        if o.f == "put":
            recs[(o.file, o.key)].put = o
        elif o.f == "commit":
            for k in o.value:
                recs[(o.file, k)].commits.append(o)
        elif o.f == "delete":
            recs[(o.file, o.key)].deletes.append(o)
    return recs


def _visible_problem(rec: _Record | None, file: str, name: str, seen_by: str, started: float, ended: float) -> str:
    """Why ``name`` may not be visible to a read invoked at ``started`` that
    returned at ``ended`` ('' if it may)."""
    if rec is None or rec.put is None or rec.put.invoked > ended:
        return f"{seen_by} saw {file}:{name}, which no one had put"
    if rec.failed():
        return f"{seen_by} saw {file}:{name}, whose write failed definitely ({_why(rec)})"
    deleted = rec.deleted_at()
    if deleted is not None and deleted < started:
        return f"{seen_by} saw {file}:{name}, deleted {started - deleted:.3f} s before the read began"
    return ""


def _why(rec: _Record) -> str:
    errs = [o.error for o in ([rec.put] if rec.put else []) + rec.commits if o.outcome == FAIL]
    return "; ".join(errs)[:200]


def _must_see(rec: _Record, started: float, ended: float) -> bool:
    """Whether a read invoked at ``started`` (returning at ``ended``) must
    see the record: acknowledged before it began, no delete invoked before
    it ended."""
    acked = rec.acked_at()
    if acked is None or acked >= started:
        return False
    d = rec.delete_invoked()
    return d is None or d > ended


def check(ops: Iterable[Op], final: Final) -> Verdict:
    """Check the history ``ops`` against ``final`` (module docstring).

    Returns
    -------
    Verdict
        ``problems`` names each violation: a lost acknowledged record, a
        visible failed or never-attempted write, a deleted record visible,
        wrong bytes, a stale read, a snapshot that changed, a create applied
        twice.
    """
    ops = list(ops)
    v = Verdict()
    recs = _index(ops)
    for o in ops:
        v.outcomes[(o.f, o.outcome or UNKNOWN)] += 1
        if o.error:
            v.errors[o.error.split(":", 1)[0]] += 1
    _check_files(ops, final, v)
    _check_records(recs, final, v)
    by_file: dict[str, list[tuple[str, _Record]]] = defaultdict(list)
    for (file, name), rec in recs.items():
        by_file[file].append((name, rec))
    for o in ops:
        if o.outcome == OK and o.f in ("get", "list", "snapshot"):
            _check_read(o, recs, by_file, v)
    _check_snapshots(ops, recs, final, v)
    return v


def _check_files(ops: list[Op], final: Final, v: Verdict) -> None:
    creates: dict[str, list[Op]] = defaultdict(list)
    for o in ops:
        if o.f == "create":
            creates[o.file].append(o)
    for file, cs in creates.items():
        first = cs[0]
        if first.outcome == FAIL and first.error.startswith("StFileExistsError"):
            v.problem(f"create {file} by {first.process} was refused as existing, though no create of it came before: "
                      f"a create applied twice ({first.error})")  # fmt: skip
        if any(c.outcome == OK for c in cs) and file not in final.files:
            v.problem(f"{file}: its create returned, the file is gone")
        if all(c.outcome == FAIL for c in cs) and file in final.files:
            v.problem(f"{file}: every create of it failed definitely, the file exists")
    for file in final.files:
        if file not in creates:
            v.problem(f"{file}: the file exists, no one created it")


def _check_records(recs: dict[tuple[str, str], _Record], final: Final, v: Verdict) -> None:
    for (file, name), rec in sorted(recs.items()):
        got = final.files.get(file, {}).get(name)
        acked = rec.acked_at() is not None
        v.acked += acked
        if got is None:
            if acked and all(d.outcome == FAIL for d in rec.deletes):
                v.lost += 1
                v.problem(f"LOST {file}:{name}: acknowledged, never deleted, not there at the end")
            elif not acked and not rec.failed() and not rec.deleted_for_sure():
                v.unknown += 1
            continue
        if rec.put is None:
            continue  # found below, with the files' names
        if got != rec.put.value:
            v.problem(f"{file}:{name} reads back {len(got)} bytes other than the {len(rec.put.value)} put")
        if rec.failed():
            v.problem(f"{file}:{name} is visible at the end, though its write failed definitely ({_why(rec)})")
        elif rec.deleted_for_sure():
            v.problem(f"{file}:{name} is visible at the end, though a delete of it returned")
        elif not acked:
            v.unknown += 1
    for file, names in final.files.items():
        for name in names:
            if (file, name) not in recs or recs[(file, name)].put is None:
                v.problem(f"{file}:{name} is visible at the end, no one put it")


def _check_read(
    o: Op, recs: dict[tuple[str, str], _Record], by_file: dict[str, list[tuple[str, _Record]]], v: Verdict
) -> None:
    assert o.completed is not None
    v.reads += 1
    who = f"{o.f} by {o.process} at +{o.invoked:.3f}"
    if o.f == "get":
        rec = recs.get((o.file, o.key))
        if o.result is None:
            if rec is not None and _must_see(rec, o.invoked, o.completed):
                v.problem(f"stale read: {who} did not find {o.file}:{o.key}, acknowledged before it began")
            return
        why = _visible_problem(rec, o.file, o.key, who, o.invoked, o.completed)
        if why:
            v.problem(why)
        elif rec is not None and rec.put is not None and o.result != rec.put.value:
            v.problem(f"{who} read wrong bytes of {o.file}:{o.key}")
        return
    if o.f == "snapshot" and o.result is None:
        return  # taken, not read: the final read is checked against nothing
    seen = o.result
    # a snapshot pins what was committed while it ran: same bounds as a list
    for name, rec in by_file.get(o.file, []):
        if name not in seen and _must_see(rec, o.invoked, o.completed):
            v.problem(f"stale read: {who} of {o.file} misses {name}, acknowledged before it began")
    for name in seen:
        why = _visible_problem(recs.get((o.file, name)), o.file, name, who, o.invoked, o.completed)
        if why:
            v.problem(why)


def _check_snapshots(ops: list[Op], recs: dict[tuple[str, str], _Record], final: Final, v: Verdict) -> None:
    for o in ops:
        if o.f != "snapshot" or o.outcome != OK:
            continue
        at_end = final.snapshots.get((o.file, o.key))
        if at_end is None:
            v.problem(f"snapshot {o.file}@{o.key}: acknowledged, cannot be read at the end")
            continue
        if o.result is not None and set(at_end) != set(o.result):
            gone, new = sorted(set(o.result) - set(at_end)), sorted(set(at_end) - set(o.result))
            v.problem(f"snapshot {o.file}@{o.key} changed: {len(gone)} records gone {gone[:3]}, "
                      f"{len(new)} new {new[:3]}")  # fmt: skip
        for name, data in at_end.items():
            rec = recs.get((o.file, name))
            if rec is None or rec.put is None:
                v.problem(f"snapshot {o.file}@{o.key} holds {name}, which no one put")
            elif data != rec.put.value:
                v.problem(f"snapshot {o.file}@{o.key}: {name} reads wrong bytes")


def check_terms(
    claims: Iterable[tuple[str, int]], entries: Iterable[tuple[int, int]], holders: dict[int, str] | None = None
) -> list[str]:
    """ "No two leaders accepted writes in one term", from what is observed.

    Parameters
    ----------
    claims : iterable of (tracker, term)
        Each tracker's word that it was elected in a term (its log's
        "elected leader in term T as ADDR").
    entries : iterable of (index, term)
        The log's entries as read from the consensus service: each carries
        the term of the leader that appended it.
    holders : dict term -> tracker, optional
        What the consensus service itself says: the tracker whose election
        key was created at that revision ('' if none was). Each claim and
        each entry's term must agree with it.

    Returns
    -------
    list of str
        The violations: a term claimed by two trackers; an entry of an older
        term after one of a newer (a deposed leader appended); entries of a
        term no tracker claimed (an appender no one knows of); with
        ``holders``, a claim or an entry of a term the consensus service
        gave no one, or gave another tracker.
    """
    problems = []
    claims, entries = list(claims), list(entries)
    if holders is not None:
        for who, term in sorted(set(claims), key=lambda c: c[1]):
            if holders.get(term, "") != who:
                problems.append(f"{who} says it was elected in term {term}; etcd gave that term to "
                                f"{holders.get(term) or 'no one'}")  # fmt: skip
        for term in sorted({t for _, t in entries} - {t for t, h in holders.items() if h}):
            problems.append(f"log entries of term {term}, a term etcd gave no one")
    by_term: dict[int, set[str]] = defaultdict(set)
    for who, term in claims:
        by_term[term].add(who)
    for term, trackers in sorted(by_term.items()):
        if len(trackers) > 1:
            problems.append(f"two leaders in term {term}: {sorted(trackers)}")
    last_index, last_term = 0, 0
    unclaimed: Counter = Counter()
    for index, term in sorted(entries):
        if term < last_term:
            problems.append(f"log entry {index} of term {term} after entry {last_index} of term {last_term}: "
                            "a deposed leader appended")  # fmt: skip
        if term not in by_term:
            unclaimed[term] += 1
        if term >= last_term:
            last_index, last_term = index, term
    for term, n in sorted(unclaimed.items()):
        problems.append(f"{n} log entries of term {term}, which no tracker says it was elected in")
    return problems


def check_creates_once(file_ops: Iterable[tuple[int, str, str]], failed: Iterable[int] = ()) -> list[str]:
    """ "A retried create happens once", from the log: ``file_ops`` are
    (index, ``create_file`` or ``delete_file``, file name) of the log's
    whole-file entries, ``failed`` the indexes marked failed (never applied).

    Returns
    -------
    list of str
        One line per file made twice without a delete between.
    """
    skip = set(failed)
    made: dict[str, int] = {}
    problems = []
    for index, kind, name in sorted(file_ops):
        if index in skip:
            continue
        if kind == "delete_file":
            made.pop(name, None)
        elif kind == "create_file":
            if name in made:
                problems.append(f"{name} created twice in the log: entries {made[name]} and {index}, no delete between")
            made[name] = index
    return problems


def median(xs: list[float]) -> float:
    """The median of ``xs`` (nan if empty)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def resume_times(ops: Iterable[Op], kills: list[float], is_write: Callable[[Op], bool] | None = None) -> list[float]:
    """For each kill time in ``kills`` (``time.monotonic()``): seconds until
    the first write invoked after it returned (nan if none did). A write is
    a returned ``commit`` unless ``is_write`` says otherwise."""
    is_write = is_write or (lambda o: o.f == "commit")
    oks = [(o.invoked, o.completed) for o in ops if o.outcome == OK and is_write(o) and o.completed is not None]
    out = []
    for k in kills:
        after = [c for i, c in oks if i >= k]
        out.append(min(after) - k if after else float("nan"))
    return out
