"""Tracker failover under load, checked as a history (issue 39, "No single
machine matters"; docs/reliability.md, "Tracker failover").

Three real etcd members, two trackers of one cluster (a leader and a
standby, the log in etcd), three peers. Writer threads loop (create a file;
per batch: open it, delete a record acknowledged before, put records with
``queue_put`` and ``put``, ``flush``, put more, ``close``); reader threads
loop (``get`` acknowledged records, list a file's names, take a snapshot and
read it). Meanwhile the leader is SIGKILLed again and again: each time the
standby must be elected and writes resume; the killed tracker is started
again as the new standby. Every ``--kill-etcd-every``-th kill also SIGKILLs
one etcd member (a majority stays), started again once writes resumed.

Every operation goes into a :class:`history.History`; at the end the final
state is read back and :func:`history.check` holds the history against it,
and :func:`history.check_terms` the trackers' elections against the terms
of the etcd log's entries. Printed: kills done, acknowledged records, lost
(must be 0), the seconds from each kill until a write invoked after it
returned (median and worst).

    python tests/failover.py --kills 20        # or ./dev soak --tracker-failover --kills 20
    python tests/failover.py --kills 100 --json out.json

The CI version is tests/test_tracker_failover.py (one kill).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from helpers import swap_flag  # noqa: E402
from history import Final, History, Verdict, check, check_creates_once, check_terms, median, resume_times  # noqa: E402

from st_py.client.client import Client  # noqa: E402
from st_py.deploy.cluster import Daemon, LocalCluster  # noqa: E402
from st_py.deploy.etcd import EtcdCluster  # noqa: E402
from st_py.errors import RecordNotFoundError, StFileNotFoundError, StoreTorrentError  # noqa: E402
from st_py.tracker.log.etcd_log import cluster_prefix  # noqa: E402

CLUSTER_ID = "failover"
ELECTED = re.compile(rb"elected leader in term (\d+) as (\S+)")
STANDBY = b"a standby until elected"


def payload(file: str, name: str) -> bytes:
    """Record ``name`` of ``file``'s bytes: 64 B to 2 KiB derived from both,
    so a read can tell right bytes from wrong ones."""
    h = hashlib.sha256(f"{file}\0{name}".encode()).digest()
    size = 64 + int.from_bytes(h[:2], "little") % 2000
    return (h * (size // 32 + 1))[:size]


def _poll(cond, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


class TrackerProc:
    """One tracker of the cluster: its command line (its own state folder and
    port), its log, its process while it runs."""

    def __init__(self, name: str, argv: list[str], log_path: Path, port: int):
        self.name, self.argv, self.log_path, self.port = name, argv, log_path, port
        self.proc: subprocess.Popen | None = None
        self.daemon: Daemon | None = None  # the LocalCluster's Daemon, for the first tracker's first run
        self.offset = 0  # where this run's lines begin in the log

    @property
    def addr(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    def _log(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""

    def start(self) -> None:
        """Start it (again); it campaigns as a standby until elected."""
        self.offset = len(self._log())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.daemon is not None:
            self.daemon.kill()
            self.daemon = None
        elif self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def this_run(self) -> bytes:
        """This run's log lines."""
        return self._log()[self.offset :]

    def last_time(self, pattern: bytes) -> float | None:
        """Unix time of the last line of this run's log that contains
        ``pattern`` (its timestamp; None if there is none)."""
        found = None
        for line in self.this_run().splitlines():
            if pattern in line:
                found = line
        if found is None:
            return None
        try:
            return datetime.strptime(found[:23].decode(), "%Y-%m-%d %H:%M:%S.%f").timestamp()
        except ValueError:
            return None

    def claims(self) -> list[tuple[str, int]]:
        """(address, term) of each "elected leader in term T as ADDR" in its log (every run)."""
        return [(m.group(2).decode(), int(m.group(1))) for m in ELECTED.finditer(self._log())]


@dataclass
class FailoverReport:
    """One failover run: kills done, time to resume per kill, the checks."""

    kills: int = 0
    etcd_kills: int = 0
    resume_s: list[float] = field(default_factory=list)
    elected_s: list[float] = field(default_factory=list)  # kill -> the standby's "elected leader" line
    serving_s: list[float] = field(default_factory=list)  # kill -> its "serving" line (after the replay)
    verdict: Verdict | None = None
    term_problems: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # of the run itself (a leader never elected, ...)
    files: int = 0
    entries: int = 0
    file_ops: int = 0  # create_file/delete_file entries read from the log
    seconds: float = 0.0
    ops: list = field(default_factory=list, repr=False)  # the history checked
    final: Final | None = field(default=None, repr=False)  # the state read back

    @property
    def ok(self) -> bool:
        """The history checks passed and the run did what it meant to."""
        return self.verdict is not None and self.verdict.valid and not self.term_problems and not self.problems

    def examples(self) -> dict[str, str]:
        """One message per operation and error class ("delete TrackerUnavailableError": ...)."""
        out: dict[str, str] = {}
        for o in self.ops:
            if o.error:
                out.setdefault(f"{o.f} {o.error.split(':', 1)[0]}", o.error)
        return out

    def as_dict(self) -> dict:
        """The figures, as printed and written with ``--json``."""
        v = self.verdict or Verdict()
        finite = [x for x in self.resume_s if x == x]
        return {
            "kills": self.kills,
            "etcd_member_kills": self.etcd_kills,
            "resume_s": [round(x, 2) for x in self.resume_s],
            "resume_median_s": round(median(finite), 2) if finite else None,
            "resume_worst_s": round(max(self.resume_s), 2) if self.resume_s else None,
            "elected_median_s": round(median(self.elected_s), 2) if self.elected_s else None,
            "serving_median_s": round(median(self.serving_s), 2) if self.serving_s else None,
            "acked_records": v.acked,
            "lost": v.lost,
            "unknown_records": v.unknown,
            "reads_checked": v.reads,
            "files": self.files,
            "log_entries_checked": self.entries,
            "log_file_ops": self.file_ops,
            "outcomes": {f"{f}:{o}": n for (f, o), n in sorted(v.outcomes.items())},
            "errors": dict(v.errors),
            "error_examples": self.examples(),
            "problems": (self.problems + self.term_problems + v.problems)[:50],
            "seconds": round(self.seconds, 1),
        }


class Failover:
    """The rig: etcd, two trackers, peers, the client threads, the kills."""

    def __init__(self, workdir: Path, seed: int = 0, writers: int = 1, readers: int = 2, log=print):
        self.workdir = Path(workdir)
        self.rng = random.Random(seed)
        self.n_writers, self.n_readers = writers, readers
        self.log = log
        self.history = History()
        self.report = FailoverReport()
        self.stop_flag = threading.Event()
        self.threads: list[threading.Thread] = []
        self.acked: list[tuple[str, str]] = []  # (file, record) whose commit returned; readers pick from it
        self.files: list[str] = []
        self.kill_times: list[float] = []
        self.entries: dict[int, int] = {}  # log index -> term, read from etcd as the run goes
        self.file_ops: list[tuple[int, str, str]] = []  # (index, create_file/delete_file, name) of those
        self.failed: set[int] = set()  # entries marked failed (never applied)
        self.etcd: EtcdCluster | None = None
        self.cluster: LocalCluster | None = None
        self.trackers: list[TrackerProc] = []

    # -- setup and teardown -----------------------------------------------------
    def start(self) -> None:
        """etcd (3 members), the leader tracker and 3 peers, the standby."""
        from st_py.deploy.ports import choose_ports

        self.etcd = EtcdCluster(self.workdir / "etcd", 3).start()
        # each tracker is started again on its port after every kill: ports below the
        # ephemeral range, which no port-0 bind or outgoing connection takes meanwhile
        port_a, port_b = choose_ports([1, 1])
        args = ["--etcd", ",".join(self.etcd.endpoints), "--cluster-id", CLUSTER_ID, "--init-cluster"]
        self.cluster = LocalCluster(
            self.workdir / "cluster", n_peers=3, announce_interval=0.3, tracker_port=port_a, tracker_args=args,
            standby_addrs=[f"127.0.0.1:{port_b}"],
        )  # fmt: skip
        self.cluster.start()
        assert self.cluster.tracker is not None
        argv = swap_flag(self.cluster.tracker.argv, "--metrics-port", "0")
        a = TrackerProc("A", argv, self.cluster.tracker.log_path, port_a)
        a.daemon, a.proc = self.cluster.tracker, self.cluster.tracker.proc
        argv_b = swap_flag(argv, "--state-dir", str(self.cluster.data_dir / "tracker-b"))
        argv_b = swap_flag(argv_b, "--port", str(port_b))
        b = TrackerProc("B", argv_b, self.cluster.data_dir / "logs" / "tracker-b.log", port_b)
        b.start()
        if not _poll(lambda: STANDBY in b.this_run(), 60):
            raise RuntimeError(f"the standby did not start:\n{b.this_run().decode(errors='replace')[-2000:]}")
        self.trackers = [a, b]
        self.leader, self.standby = a, b
        self.addrs = f"{a.addr},{b.addr}"

    def stop(self) -> None:
        """Stop the threads, every process (all of them even when stopping
        one fails; the first error is raised after)."""
        self.stop_flag.set()
        for th in self.threads:
            th.join(60)
        steps = [tr.kill for tr in self.trackers]
        steps += [self.cluster.stop] if self.cluster is not None else []
        steps += [self.etcd.stop] if self.etcd is not None else []
        failed: list[BaseException] = []
        for step in steps:  # every one, whatever an earlier one raised: no process left behind
            try:
                step()
            except Exception as e:  # noqa: BLE001 - raised below, after the rest stopped
                failed.append(e)
        if failed:
            raise failed[0]

    # -- the clients --------------------------------------------------------------
    def _client(self) -> Client:
        return Client(self.addrs, timeout=10)

    def start_clients(self) -> None:
        """The writer and reader threads."""
        for i in range(self.n_writers):
            self.threads.append(threading.Thread(target=self._writer, args=(f"w{i}",), daemon=True))
        for i in range(self.n_readers):
            self.threads.append(threading.Thread(target=self._reader, args=(f"r{i}",), daemon=True))
        for t in self.threads:
            t.start()

    def _writer(self, p: str) -> None:
        h, c = self.history, self._client()
        rng = random.Random(f"{p}{self.rng.random()}")
        n = 0
        try:
            while not self.stop_flag.is_set():
                file = f"/failover/{p}-{n:05d}"
                n += 1
                self.files.append(file)
                try:
                    with h.run(p, "create", file):
                        f = c.create(file, replication="x2")
                except StoreTorrentError:
                    time.sleep(0.1)
                    continue
                mine: list[str] = []
                for batch in range(4):
                    if batch:
                        if self.stop_flag.is_set():
                            break
                        try:
                            f = c.open(file)
                        except StoreTorrentError:
                            time.sleep(0.1)
                            continue
                    if not self._batch(p, f, file, batch, mine, rng):
                        break
        finally:
            c.close()

    def _batch(self, p: str, f, file: str, batch: int, mine: list[str], rng: random.Random) -> bool:
        """One handle's work: a delete, puts, a flush, puts, the close.
        False once an operation failed (the file is left)."""
        h = self.history
        pending: list[str] = []
        try:
            if mine and rng.random() < 0.5:
                victim = mine.pop(rng.randrange(len(mine)))
                with h.run(p, "delete", file, victim):
                    f.delete(victim)
            for half in (0, 1):
                for i in range(6):
                    name = f"b{batch}-{half}-{i}"
                    data = payload(file, name)
                    with h.run(p, "put", file, name, data):
                        if i == 0:
                            f.put(name, data)
                        else:
                            f.queue_put(name, data)
                    pending.append(name)
                with h.run(p, "commit", file, "flush" if half == 0 else "close", tuple(pending)):
                    if half == 0:
                        f.flush()
                    else:
                        f.close()
                self.acked += [(file, n) for n in pending]
                mine += pending
                pending = []
            return True
        except StoreTorrentError:
            if pending:
                try:
                    with h.run(p, "commit", file, "close", tuple(pending)):
                        f.close()
                except StoreTorrentError:
                    pass
            else:
                try:
                    f.close()
                except StoreTorrentError:
                    pass
            time.sleep(0.1)
            return False

    def _reader(self, p: str) -> None:
        h, c = self.history, self._client()
        rng = random.Random(f"{p}{self.rng.random()}")
        k = 0
        try:
            while not self.stop_flag.is_set():
                if not self.acked:
                    time.sleep(0.05)
                    continue
                pool = self.acked[-60:] if rng.random() < 0.7 else self.acked
                file, name = rng.choice(pool)
                what = rng.random()
                try:
                    if what < 0.6:
                        with h.run(p, "get", file, name) as op:
                            op.result = self._get(c, file, name)
                    elif what < 0.93:
                        with h.run(p, "list", file) as op:
                            op.result = self._names(c, file)
                    else:
                        k += 1
                        snap = f"{p}-s{k}"
                        with h.run(p, "snapshot", file, snap) as op:
                            c.snapshot(file, snap)
                            try:
                                with c.open(file, as_of=snap) as f:
                                    op.result = frozenset(f.names())
                            except StoreTorrentError:
                                op.result = None  # taken; its content is checked at the end only
                except StoreTorrentError:
                    time.sleep(0.1)
        finally:
            c.close()

    @staticmethod
    def _get(c: Client, file: str, name: str) -> bytes | None:
        try:
            with c.open(file) as f:
                return f.get(name)
        except (RecordNotFoundError, StFileNotFoundError):
            return None

    @staticmethod
    def _names(c: Client, file: str) -> frozenset:
        try:
            with c.open(file) as f:
                return frozenset(f.names())
        except StFileNotFoundError:
            return frozenset()

    # -- the kills ----------------------------------------------------------------
    def writes_since(self, t: float) -> bool:
        """Whether a write invoked after ``t`` has returned."""
        s = resume_times(self.history.snapshot(), [t])[0]
        return s == s  # not nan

    def kill_leader(self, kill_etcd: bool = False, timeout: float = 60.0) -> float:
        """SIGKILL the leader (and an etcd member with ``kill_etcd``); wait
        for the standby to be elected and for a write invoked after the kill
        to return; start the killed tracker again as the standby. Returns
        the seconds from the kill to that write (nan if none within
        ``timeout``: a problem of the run)."""
        assert self.etcd is not None
        flowing = len(self.acked)
        if not _poll(lambda: len(self.acked) >= flowing + 6, timeout):
            self.report.problems.append(f"kill {self.report.kills + 1}: writes did not flow before it")
        victim, heir = self.leader, self.standby
        claimed = len(heir.claims())
        member = self.rng.randrange(3) if kill_etcd else None
        t, wall = time.monotonic(), time.time()
        victim.kill()
        if member is not None:
            self.etcd.kill(member)
            self.report.etcd_kills += 1
        self.kill_times.append(t)
        self.report.kills += 1
        if not _poll(lambda: len(heir.claims()) > claimed, timeout):
            self.report.problems.append(f"kill {self.report.kills}: {heir.name} not elected within {timeout:g} s")
        _poll(lambda: heir.last_time(b" serving ") is not None, timeout)
        for out, pattern in ((self.report.elected_s, b"elected leader in term"), (self.report.serving_s, b" serving ")):
            at = heir.last_time(pattern)
            out.append(at - wall if at is not None else float("nan"))
        self.leader, self.standby = heir, victim
        victim.start()
        if not _poll(lambda: STANDBY in victim.this_run(), timeout):
            self.report.problems.append(f"kill {self.report.kills}: {victim.name} did not start again as a standby")
        _poll(lambda: self.writes_since(t), timeout)
        resumed = resume_times(self.history.snapshot(), [t])[0]
        if resumed != resumed:
            self.report.problems.append(f"kill {self.report.kills}: no write returned within {timeout:g} s")
        if member is not None:
            self.etcd.start_member(member)
            self.etcd.wait_healthy(60)
        self.report.resume_s.append(resumed)
        self.read_entries()
        return resumed

    def read_entries(self) -> None:
        """The etcd log's entries not read yet (index -> term, and the
        whole-file operations), and the failed marks: read as the run goes,
        since the leader compacts entries older than it keeps."""
        from st_py.tracker.apply.ops import FILE_OPS, decode
        from st_py.tracker.log.etcd_log import EtcdLog
        from st_py.tracker.log.etcd_session import EtcdSession

        assert self.etcd is not None
        start = max(self.entries, default=0) + 1
        endpoints = self.etcd.endpoints

        async def go() -> None:
            session = EtcdSession(endpoints)
            try:
                log = await EtcdLog.open(session, CLUSTER_ID)
                head = await log.last_index()
                i = start
                while i <= head:
                    for e in await log.read(i, 256):
                        self.entries[e.index] = e.term
                        op = decode(e.payload, e.index)
                        if op.kind in FILE_OPS:
                            self.file_ops.append((e.index, op.kind, op.name))
                    i += 256
                failed = cluster_prefix(CLUSTER_ID) + b"failed/"
                for kv in await session.call(lambda c: c.get_prefix(failed)):
                    self.failed.add(int(kv.key[len(failed) :]))
            finally:
                await session.close()

        asyncio.run(go())

    def counts(self) -> tuple[int, int, int]:
        """(records acknowledged, reads returned, snapshots taken) so far."""
        ops = self.history.snapshot()
        reads = sum(1 for o in ops if o.f in ("get", "list") and o.outcome == "ok")
        snaps = sum(1 for o in ops if o.f == "snapshot" and o.outcome == "ok")
        return (len(self.acked), reads, snaps)

    # -- the end ------------------------------------------------------------------
    def finish(self) -> FailoverReport:
        """Stop the clients, read everything back, check the history."""
        self.stop_flag.set()
        for t in self.threads:
            t.join(120)
            if t.is_alive():
                self.report.problems.append(f"client thread {t.name} did not stop within 120 s")
        self.read_entries()
        c = self._client()
        final = Final()
        try:
            for file in sorted(set(self.files)):
                got = self._read_file(c, file)
                if got is not None:
                    final.files[file] = got
            for o in self.history.snapshot():
                if o.f == "snapshot" and o.outcome == "ok":
                    final.snapshots[(o.file, o.key)] = self._read_file(c, o.file, as_of=o.key)
        finally:
            c.close()
        ops = self.history.snapshot()
        self.report.verdict = check(ops, final)
        self.report.ops, self.report.final = ops, final
        claims = [cl for t in self.trackers for cl in t.claims()]
        holders = self.term_holders({t for _, t in claims} | set(self.entries.values()))
        self.report.term_problems = check_terms(claims, self.entries.items(), holders)
        self.report.term_problems += check_creates_once(self.file_ops, self.failed)
        self.report.files = len(final.files)
        self.report.entries = len(self.entries)
        self.report.file_ops = len(self.file_ops)
        return self.report

    def term_holders(self, terms: set[int]) -> dict[int, str]:
        """For each term, the tracker etcd gave it: the value of the election
        key as of that revision, if the key was created at it ('' if not).
        Read through etcd's JSON gateway (``/v3/kv/range`` with a revision;
        aetcd's ``get`` takes none), from the first member that answers."""
        assert self.etcd is not None
        key = base64.b64encode(cluster_prefix(CLUSTER_ID) + b"leader").decode()
        out = {}
        for term in sorted(terms):
            for m in self.etcd.members:
                body = json.dumps({"key": key, "revision": term}).encode()
                req = urllib.request.Request(f"{m.client_url}/v3/kv/range", data=body, method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=5) as r:
                        kvs = json.loads(r.read()).get("kvs", [])
                except OSError:
                    continue
                made_then = kvs and int(kvs[0].get("create_revision", 0)) == term
                out[term] = base64.b64decode(kvs[0]["value"]).decode() if made_then else ""
                break
        return out

    def _read_file(self, c: Client, file: str, as_of: str | None = None) -> dict[str, bytes] | None:
        for attempt in range(5):
            try:
                with c.open(file, as_of=as_of) as f:
                    return {n: f.get(n) for n in f.names()}
            except StFileNotFoundError:
                return None
            except StoreTorrentError as e:
                if attempt == 4:
                    self.report.problems.append(f"cannot read {file}{'@' + as_of if as_of else ''} back: {e}")
                time.sleep(1.0)
        return None


def run(
    workdir: Path,
    kills: int,
    kill_etcd_every: int = 5,
    seed: int = 0,
    warmup: float = 2.0,
    log=print,
    at_least: tuple[int, int, int] = (0, 0, 0),
):
    """One failover run of ``kills`` leader kills; returns the
    :class:`FailoverReport` (``report.ok`` when every check passed).
    ``warmup`` seconds of load before the first kill and after the last;
    after the last, also until ``at_least`` (records acknowledged, reads
    returned, snapshots taken) are in the history (at most 120 s more), so
    a slow machine still gives the checker something to check."""
    fo = Failover(workdir, seed, log=log)
    t0 = time.monotonic()
    try:
        fo.start()
        fo.start_clients()
        time.sleep(warmup)
        for k in range(1, kills + 1):
            with_etcd = bool(kill_etcd_every) and k % kill_etcd_every == 0
            was = fo.leader.name
            s = fo.kill_leader(kill_etcd=with_etcd)
            since = fo.kill_times[-2] if len(fo.kill_times) > 1 else 0.0
            ops = [o for o in fo.history.snapshot() if o.error and o.invoked >= since]
            errs = Counter(f"{o.f} {o.error.split(':', 1)[0]}" for o in ops)
            log(f"kill {k}/{kills}: leader {was} SIGKILLed{' with an etcd member' if with_etcd else ''}; "
                f"{fo.leader.name} elected after {fo.report.elected_s[-1]:.2f} s, serving after "
                f"{fo.report.serving_s[-1]:.2f} s; writes resumed after {s:.2f} s; "
                f"errors since the kill before: {dict(errs) or 'none'}")  # fmt: skip
        time.sleep(warmup)
        _poll(lambda: all(n >= m for n, m in zip(fo.counts(), at_least)), 120, step=0.2)
        fo.finish()
    finally:
        fo.stop()
        fo.report.seconds = time.monotonic() - t0
    return fo.report


def main(argv: list[str] | None = None) -> int:
    """``./dev soak --tracker-failover``: the leader tracker killed in a loop."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="leader SIGKILLs (default 20)")
    ap.add_argument("--kill-etcd-every", type=int, default=5, help="every Nth kill kills an etcd member too (0: never)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep the cluster folders")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="st-failover-"))
    print(f"tracker failover soak: {args.kills} leader kills in {workdir}", flush=True)
    rep = run(workdir, args.kills, args.kill_etcd_every, args.seed, log=lambda m: print(m, flush=True))
    d = rep.as_dict()
    print(json.dumps(d))
    print(
        f"kills done {d['kills']} (etcd members killed {d['etcd_member_kills']}); acknowledged records "
        f"{d['acked_records']}; lost {d['lost']}; writes resumed after a median {d['resume_median_s']} s, "
        f"worst {d['resume_worst_s']} s; problems {len(d['problems'])}"
    )
    if args.json:
        args.json.write_text(json.dumps(d, indent=1))
    if rep.ok and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
