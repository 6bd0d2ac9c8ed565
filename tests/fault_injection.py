"""Randomized fault injection against a real local cluster (paper 4, 5).

A seeded loop of steps against a tracker and 5 peers holding an x2 and an x3
file. Each step is one of: start a writer process (sometimes SIGKILLed at a
random moment), SIGKILL a peer, restart a peer, SIGKILL and restart the
tracker, GET a sample of committed records, a GET_LOCAL scan, or DELETE some
records; GET, GET_LOCAL and DELETE sometimes have a peer SIGKILLed while they
run. Besides the SIGKILLs (issue "Integrity and liveness"): flip a byte in a
stored copy (bit rot: same size; the peers' verifiers run every second), block
a peer's event loop for 1-3 s while its process lives (a wedged peer,
``--fault-loop-stall-file``), and SIGSTOP the tracker for 1-3 s. At most one
peer is down or wedged at a time (x2 tolerates one failure).

It checks, as it goes and at the end (after every peer is back and every peer
scrubbed with age 0):
- no record ever seen committed disappears unless the loop deleted it;
- every committed record reads back with the right bytes (CRC-checked), and
  at the end every copy on every holder does;
- a GET_LOCAL scan either fails with a clear error or reveals each record of
  its snapshot exactly once, with the right bytes (read as analysis reads
  them: checked against the copy's CRC-32C, a bad copy read by GET instead);
- every flipped copy is quarantined by its peer's verifier and restored by
  ``repair`` before the final checks;
- after the scrub no temporary file is left and every peer holds exactly the
  copies the infofiles commit to it.

Operations may fail with clear StoreTorrent errors while a fault is active
(they are counted); they must never return wrong data.

    python tests/fault_injection.py --seconds 600            # the soak
    python tests/fault_injection.py --seed 1234 --steps 40   # replay a seed
    python tests/fault_injection.py --tracker-failover --kills 100   # tests/failover.py
    python tests/fault_injection.py --ray-hosts   # Ray on hosts that share no folder (root)

The CI version is tests/test_fault_injection.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "integrations"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from st_py.client.client import Client  # noqa: E402
from st_py.client.getlocal import check_complete, reveal_ring  # noqa: E402
from st_py.core.capability import READ  # noqa: E402
from st_py.core.infofile import InfofileReader  # noqa: E402
from st_py.deploy.cluster import LocalCluster  # noqa: E402
from st_py.errors import ChecksumError, RecordNotFoundError, StoreTorrentError  # noqa: E402
from st_py.wire.protocol import crc32c, encode_get  # noqa: E402
from st_py.wire.transport import Transport  # noqa: E402

FILES = {"/soak/x2": "x2", "/soak/x3": "x3"}
N_PEERS = 5
MAX_WRITERS = 2
ACTIONS = {
    "write": 5,
    "kill_peer": 2,
    "restart_peer": 2,
    "kill_tracker": 1,
    "get": 3,
    "get_local": 2,
    "delete": 2,
    "flip_byte": 1,
    "block_loop": 1,
    "pause_tracker": 1,
}


def payload(name: str) -> bytes:
    """The bytes of record ``name``: 64 B to 16 KiB derived from the name,
    so any reader can tell a right record from a wrong one."""
    h = hashlib.sha256(name.encode()).digest()
    size = 64 + int.from_bytes(h[:2], "little") % 16384
    return (h * (size // 32 + 1))[:size]


WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.fault_injection import payload
from st_py.client.client import Client
tracker, file, prefix, count, depth = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
with Client(tracker, depth=depth, group_size=20, timeout=10).open(file) as f:
    for i in range(count):
        f.queue_put(f"{prefix}/{i}", payload(f"{prefix}/{i}"))
"""


@dataclass
class Report:
    seed: int
    steps: int = 0
    seconds: float = 0.0
    faults: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)
    clear_errors: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # one message per kind of clear error
    records_checked: int = 0
    copies_checked: int = 0
    lost: int = 0
    problems: list[str] = field(default_factory=list)  # must stay empty

    def as_dict(self) -> dict:
        return {
            "seed": self.seed,
            "steps": self.steps,
            "seconds": round(self.seconds, 1),
            "faults": dict(self.faults),
            "faults_total": sum(self.faults.values()),
            "ops": dict(self.ops),
            "ops_total": sum(self.ops.values()),
            "clear_errors": dict(self.clear_errors),
            "examples": self.examples,
            "records_checked": self.records_checked,
            "copies_checked": self.copies_checked,
            "records_lost": self.lost,
            "problems": self.problems,
        }


class FaultInjection:
    def __init__(self, workdir: Path, seed: int, log=print, verify_interval: float = 1.0):
        self.workdir = Path(workdir)
        self.rng = random.Random(seed)
        self.report = Report(seed)
        self.log = log
        self.cluster: LocalCluster | None = None
        self.dead: set[int] = set()
        self.writers: list[subprocess.Popen] = []
        self.seen: dict[str, set[str]] = {f: set() for f in FILES}
        self.deleted: dict[str, set[str]] = {f: set() for f in FILES}
        self.step_no = 0
        self._lock = threading.Lock()
        self.verify_interval = verify_interval  # the peers' --verify-interval (0: no verifier)
        self.stalled: set[int] = set()  # peers whose loop is blocked now
        self.flipped: dict[tuple[str, str], Path] = {}  # (file, record) -> the rotted copy's path

    # -- setup and teardown ---------------------------------------------------
    def start(self) -> None:
        self.cluster = LocalCluster(
            self.workdir / "cluster",
            n_peers=N_PEERS,
            announce_interval=0.3,
            peer_args=[
                "--scrub-age",
                "0",
                "--ring-timeout-base",
                "1",
                "--ring-timeout-per-peer",
                "0.2",
                "--verify-interval",
                str(self.verify_interval),
            ],
        )
        self.cluster.start()
        self.ports = [int(a.rsplit(":", 1)[1]) for a in self.cluster.peer_addrs]
        for i in range(N_PEERS):  # each peer with its own loop-stall switch (block_loop)
            self.cluster.peers[i].stop()
            self.cluster.start_peer(i, port=self.ports[i], extra_args=self._peer_extra(i))
        self.cluster.wait_for_peers(N_PEERS)
        self.c = Client(self.cluster.tracker_addr, timeout=10)
        for name, cls in FILES.items():
            self.c.create(name, replication=cls, blocksize=4).close()
        # Records from before the faults, so every run has some to read, delete and check
        # through them: on a loaded machine (CI beside a benchmark) every faulted writer of a
        # seed failed at the tracker's restarts once, and the run checked nothing
        for name in FILES:
            with self.c.open(name) as f:
                for i in range(40):
                    f.queue_put(f"base/{i}", payload(f"base/{i}"))
            self.seen[name] |= self._committed(name)
        self.script = self.workdir / "writer.py"
        self.script.write_text(WRITER)

    def stop(self) -> None:
        for w in self.writers:
            if w.poll() is None:
                w.kill()
            w.wait()
        if getattr(self, "c", None) is not None:
            self.c.close()
        if self.cluster is not None:
            self.cluster.stop()

    def _peer_extra(self, i: int) -> list[str]:
        return ["--fault-loop-stall-file", str(self.workdir / f"stall-peer-{i}")]

    # -- faults ---------------------------------------------------------------
    def _live_peers(self) -> list[int]:
        return [i for i in range(N_PEERS) if i not in self.dead and i not in self.stalled]

    def kill_peer(self, why: str = "kill_peer") -> bool:
        with self._lock:
            if self.dead or self.stalled:
                return False  # at most one peer down: the x2 file tolerates one
            i = self.rng.choice(self._live_peers())
            self.dead.add(i)
        self.cluster.kill_peer(i)
        self.report.faults[why] += 1
        return True

    def restart_peer(self) -> None:
        if not self.dead:
            return
        i = self.rng.choice(sorted(self.dead))
        self.cluster.start_peer(i, port=self.ports[i], extra_args=self._peer_extra(i))
        self.dead.discard(i)
        self.report.ops["restart_peer"] += 1

    def flip_byte(self) -> None:
        """Bit rot: one byte of one stored copy of a committed record flipped
        (same size). Its peer's verifier must quarantine it; reads must never
        return it."""
        file = self.rng.choice(list(FILES))
        r = InfofileReader(self.cluster.namespace / file.lstrip("/"))
        try:
            file_id = int(r.meta()["file_id"])
            names = [n for n in r.names() if n not in self.deleted[file] and (file, n) not in self.flipped]
        finally:
            r.close()
        if not names:
            return
        name = self.rng.choice(names)
        live = self._live_peers()
        enc = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else f"%{ord(ch):02X}" for ch in name)
        paths = [
            p
            for i in live
            for p in (self.cluster.data_dir / "peers" / f"peer-{i}" / "files" / f"{file_id:016x}").glob(f"*/{enc}@*")
            if not p.name.endswith(".name")
        ]
        if not paths:
            return
        path = self.rng.choice(paths)
        try:
            data = bytearray(path.read_bytes())
            data[self.rng.randrange(len(data))] ^= 0x20
            with open(path, "r+b") as fh:  # in place: the same inode, as bit rot
                fh.write(data)
        except OSError:
            return  # deleted or moved meanwhile
        self.flipped[(file, name)] = path
        self.report.faults["flip_byte"] += 1

    def block_loop(self) -> None:
        """A wedged peer: its event loop blocked for 1-3 s, the process alive."""
        with self._lock:
            if self.dead or self.stalled:
                return
            i = self.rng.choice(self._live_peers())
            self.stalled.add(i)
        stall = self.workdir / f"stall-peer-{i}"
        stall.touch()
        self.report.faults["block_loop"] += 1

        def unblock() -> None:
            stall.unlink(missing_ok=True)
            with self._lock:
                self.stalled.discard(i)

        threading.Timer(self.rng.uniform(1.0, 3.0), unblock).start()

    def pause_tracker(self) -> None:
        """The tracker SIGSTOPped for 1-3 s (a VM pause, a long GC)."""
        import os
        import signal

        os.kill(self.cluster.tracker.pid, signal.SIGSTOP)
        self.report.faults["pause_tracker"] += 1
        time.sleep(self.rng.uniform(1.0, 3.0))
        os.kill(self.cluster.tracker.pid, signal.SIGCONT)

    def kill_tracker(self) -> None:
        self.cluster.tracker.kill()
        self.report.faults["kill_tracker"] += 1
        time.sleep(self.rng.uniform(0, 1.5))
        self.cluster.start_tracker()

    def _maybe_kill_during(self, op: str) -> threading.Timer | None:
        """Sometimes SIGKILL a peer while ``op`` runs."""
        if self.dead or self.rng.random() > 0.35:
            return None
        t = threading.Timer(self.rng.uniform(0.0, 0.4), self.kill_peer, args=(f"kill_peer_during_{op}",))
        t.start()
        return t

    # -- operations -----------------------------------------------------------
    def write(self) -> None:
        self.writers = [w for w in self.writers if w.poll() is None]
        if len(self.writers) >= MAX_WRITERS:
            return
        file = self.rng.choice(list(FILES))
        prefix = f"s{self.report.seed}-{self.step_no}"
        count = self.rng.randint(20, 300)
        depth = self.rng.choice([1, 8, 64])
        err = (self.workdir / f"writer-{prefix}.err").open("wb")
        w = subprocess.Popen(
            [
                sys.executable,
                str(self.script),
                str(ROOT),
                self.cluster.tracker_addr,
                file,
                prefix,
                str(count),
                str(depth),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        w.err_path = err.name
        err.close()
        self.writers.append(w)
        self.report.ops["write"] += 1
        if self.rng.random() < 0.3:
            threading.Timer(self.rng.uniform(0.2, 2.0), self._kill_writer, args=(w,)).start()

    def _kill_writer(self, w: subprocess.Popen) -> None:
        if w.poll() is None:
            w.kill()
            self.report.faults["kill_writer"] += 1

    def _committed(self, file: str, generation: int | None = None) -> set[str]:
        r = InfofileReader(self.cluster.namespace / file.lstrip("/"))
        try:
            if generation is None:
                return set(r.names())
            return {n for (n,) in r.conn.execute("SELECT name FROM records WHERE commit_seq <= ?", (generation,))}
        finally:
            r.close()

    def check_seen(self) -> None:
        """No record seen committed may vanish unless we deleted it."""
        for file in FILES:
            now = self._committed(file)
            vanished = self.seen[file] - now - self.deleted[file]
            for n in sorted(vanished)[:10]:
                self.problem(f"{file}: committed record {n} disappeared")
            self.seen[file] |= now

    def get(self) -> None:
        file = self.rng.choice(list(FILES))
        names = sorted(self._committed(file) - self.deleted[file])
        if not names:
            return
        sample = self.rng.sample(names, min(40, len(names)))
        fault = self._maybe_kill_during("get")
        with self.c.open(file) as f:
            for n in sample:
                try:
                    data = f.get(n)
                except StoreTorrentError as e:
                    if n in self.deleted[file]:
                        continue
                    if (file, n) in self.flipped:  # one copy rotted, the other's holder down or wedged
                        self.clear_error(f"get of a rotted record: {type(e).__name__}", e)
                        continue
                    self.problem(f"GET {file} {n} failed with at most one peer down: {e}")
                    continue
                self.report.ops["get"] += 1
                self.report.records_checked += 1
                if data != payload(n):
                    self.problem(f"GET {file} {n} returned wrong bytes")
        if fault:
            fault.join()

    def get_local(self) -> None:
        file = self.rng.choice(list(FILES))
        try:
            with self.c.open(file) as f:
                plan = f.get_local_plan()
        except StoreTorrentError as e:
            self.clear_error(f"get_local_plan: {type(e).__name__}", e)
            return
        fault = self._maybe_kill_during("get_local")
        parts, records = [], []
        try:
            for a in plan.ring:
                recs, ring = reveal_ring(a, plan)
                parts.append((len(recs), ring))
                records += recs
            check_complete(plan, parts)
        except StoreTorrentError as e:
            self.clear_error(f"get_local: {type(e).__name__}", e)
            return
        finally:
            if fault:
                fault.join()
        self.report.ops["get_local"] += 1
        counts = Counter(r.name for r in records)
        expected = self._committed(file, plan.generation) - self.deleted[file]
        twice = [n for n, k in counts.items() if k > 1]
        if twice:
            self.problem(f"GET_LOCAL {file} revealed {len(twice)} records twice, e.g. {twice[:3]}")
        if set(counts) != expected:
            self.problem(
                f"GET_LOCAL {file} at generation {plan.generation}: "
                f"{len(expected - set(counts))} missing, {len(set(counts) - expected)} extra"
            )
        for r in records:  # read as the analysis scans do: checked, a bad copy by GET instead
            try:
                data = r.read(file)
            except ChecksumError as e:
                if (file, r.name) not in self.flipped:
                    self.problem(f"GET_LOCAL {file} {r.name}: {r.path} is corrupt but was never flipped: {e}")
                    continue
                self.report.ops["checksum_fallback"] += 1
                try:
                    with self.c.open(file) as f:
                        data = f.get(r.name)
                except StoreTorrentError as e2:
                    self.clear_error(f"get after a checksum fallback: {type(e2).__name__}", e2)
                    continue
            except (OSError, StoreTorrentError) as e:  # deleted or quarantined since the plan
                self.clear_error(f"get_local read: {type(e).__name__}", e)
                continue
            if data != payload(r.name):
                self.problem(f"GET_LOCAL {file} {r.name}: {r.path} gave wrong bytes")
            self.report.records_checked += 1

    def delete(self) -> None:
        file = self.rng.choice(list(FILES))
        names = sorted(self._committed(file) - self.deleted[file])
        if not names:
            return
        victims = self.rng.sample(names, min(self.rng.randint(1, 5), len(names)))
        fault = self._maybe_kill_during("delete")
        try:
            with self.c.open(file) as f:
                for n in victims:
                    try:
                        f.delete(n)
                        self.deleted[file].add(n)
                        self.report.ops["delete"] += 1
                    except RecordNotFoundError:
                        self.problem(f"DELETE {file} {n}: committed record not found")
                    except StoreTorrentError as e:
                        self.clear_error(f"delete: {type(e).__name__}", e)
                        if n not in self._committed(file):
                            self.deleted[file].add(n)  # the tracker got it before the error
        finally:
            if fault:
                fault.join()
        remaining = self._committed(file) & set(victims) & self.deleted[file]
        if remaining:
            self.problem(f"DELETE {file}: {sorted(remaining)[:3]} still committed after delete returned")

    # -- the loop ---------------------------------------------------------------
    def step(self) -> None:
        self.step_no += 1
        action = self.rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
        getattr(self, action)()
        self.check_seen()
        self.report.steps += 1
        time.sleep(self.rng.uniform(0.0, 0.4))  # let the writers get on between faults

    def clear_error(self, kind: str, e: Exception) -> None:
        self.report.clear_errors[kind] += 1
        self.report.examples.setdefault(kind, str(e)[:400])

    def problem(self, msg: str) -> None:
        self.report.problems.append(msg)
        self.log(f"PROBLEM: {msg}")

    def finish(self) -> None:
        """Let writers end, bring every peer back, scrub, check everything."""
        deadline = time.monotonic() + 120
        for w in self.writers:
            try:
                w.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
                self.problem("a writer did not finish within 120 s")
            err = Path(w.err_path).read_text(errors="replace")
            if w.returncode not in (0, -9):
                # writers fail only with clear StoreTorrent errors (e.g. a peer down at a bad moment)
                last = err.strip().splitlines()[-1] if err.strip() else f"exit {w.returncode}"
                if "st_py.errors" not in err and "StoreTorrentError" not in err:
                    self.problem(f"writer failed without a clear error: {last}")
                else:
                    self.clear_error("writer: " + last.split(":")[0].split(".")[-1], RuntimeError(last))
        for i in range(N_PEERS):
            (self.workdir / f"stall-peer-{i}").unlink(missing_ok=True)
        for i in sorted(self.dead):
            self.cluster.start_peer(i, port=self.ports[i], extra_args=self._peer_extra(i))
        self.dead.clear()
        self.cluster.wait_for_peers(N_PEERS)
        self.check_seen()
        self.heal_flips()
        self.final_checks()

    def heal_flips(self) -> None:
        """Every flipped copy still committed is quarantined by its peer's
        verifier (within 60 s), and ``repair`` writes a good copy back."""
        if not self.flipped or not self.verify_interval:
            return
        from st_py.maintenance import repair as rp  # noqa: PLC0415

        deadline = time.monotonic() + 60
        waiting = dict(self.flipped)
        while waiting and time.monotonic() < deadline:
            waiting = {k: p for k, p in waiting.items() if p.exists()}
            time.sleep(0.5)
        for (file, name), p in waiting.items():
            if name not in self.deleted[file]:
                self.problem(f"{file} {name}: the rotted copy {p} was not quarantined within 60 s")
        quarantined = sum(1 for _ in (self.cluster.data_dir / "peers").glob("peer-*/quarantine/*/*@*"))
        self.report.ops["quarantined"] += quarantined
        time.sleep(1.0)  # the next announces carry the bad copies to the tracker
        for rep in rp.repair(self.c, list(FILES), failed_after=600):
            self.report.ops["copies_restored"] += rep.pending_stored
            if rep.pending_left:
                self.problem(f"repair left pending copies of {rep.file}: {rep.pending_left[:3]}")

    def final_checks(self) -> None:
        from checks import admin_scrub  # noqa: PLC0415 (tests/ is on sys.path when run by pytest or as a script)

        for a in self.cluster.peer_addrs:
            admin_scrub(self.cluster, a)
        for i in range(N_PEERS):
            tmp = self.cluster.data_dir / "peers" / f"peer-{i}" / "tmp"
            left = [p.name for p in tmp.iterdir()] if tmp.exists() else []
            if left:
                self.problem(f"peer-{i}: {len(left)} temporary files survived the scrub")
        t = Transport(timeout=10)
        try:
            expected_per_peer: Counter = Counter()
            for file in FILES:
                r = InfofileReader(self.cluster.namespace / file.lstrip("/"))
                addr = dict(r.conn.execute("SELECT peer_idx, addr FROM peers"))
                metas = r.lookup_many(r.names())
                file_id = int(r.meta()["file_id"])
                # Deleted records keep their copies while their history does
                # (docs/snapshots.md, "Retention"): the scrubber leaves them.
                for a, n in retained_per_peer(r.conn, addr).items():
                    expected_per_peer[a] += n
                r.close()
                if self.cluster.auth:
                    t.set_capability(file_id, self.cluster.mint(READ, file_id))
                lost = self.seen[file] - self.deleted[file] - set(metas)
                self.report.lost += len(lost)
                for n in sorted(lost)[:10]:
                    self.problem(f"{file}: record {n} lost")
                results = {}
                for n, m in metas.items():
                    for rank, idx in enumerate(m.peers):
                        expected_per_peer[addr[idx]] += 1
                        t.send(
                            addr[idx],
                            lambda seq, n=n: [encode_get(seq, file_id, n)],
                            lambda fr, exc, key=(n, rank, addr[idx]): results.__setitem__(key, (fr, exc)),
                        )
                t.wait(lambda: len(results) == sum(len(m.peers) for m in metas.values()), timeout=120)
                for (n, rank, a), (fr, exc) in results.items():
                    self.report.copies_checked += 1
                    if exc is not None:
                        self.problem(f"{file} {n} copy {rank} on {a}: {exc}")
                    elif crc32c(fr.fields["data"]) != metas[n].crc32c or fr.fields["data"] != payload(n):
                        self.problem(f"{file} {n} copy {rank} on {a}: wrong bytes")
                self.report.records_checked += len(metas)
        finally:
            t.close()
        stored = self._stored_per_peer()
        for a in self.cluster.peer_addrs:
            if stored.get(a, 0) != expected_per_peer.get(a, 0):
                self.problem(
                    f"{a} stores {stored.get(a, 0)} records after the scrub, the infofiles "
                    f"commit {expected_per_peer.get(a, 0)} to it"
                )

    def _stored_per_peer(self) -> dict[str, int]:
        out = {}
        for i, a in enumerate(self.cluster.peer_addrs):
            root = self.cluster.data_dir / "peers" / f"peer-{i}" / "files"
            out[a] = (
                sum(1 for p in root.rglob("*@*") if p.is_file() and not p.name.endswith(".name"))
                if root.exists()
                else 0
            )
        return out


def retained_per_peer(conn, addr: dict[int, str]) -> Counter:
    """Copies of past versions each peer keeps (``retained_copies``, one file
    per stored name), by peer address; none in a file without the table."""
    try:
        rows = conn.execute(
            "SELECT peer_idx, count(DISTINCT coalesce(stored_as, name)) FROM retained_copies GROUP BY peer_idx"
        ).fetchall()
    except sqlite3.OperationalError:
        return Counter()
    return Counter({addr[i]: n for i, n in rows})


def run(seed: int, workdir: Path, steps: int | None = None, seconds: float | None = None, log=print) -> Report:
    """One fault-injection run; prints its seed first so it can be replayed."""
    log(
        f"fault injection: seed {seed} (replay: python tests/fault_injection.py --seed {seed}"
        + (f" --steps {steps}" if steps else "")
        + ")"
    )
    fi = FaultInjection(workdir, seed, log)
    t0 = time.monotonic()
    try:
        fi.start()
        while (steps is None or fi.report.steps < steps) and (seconds is None or time.monotonic() - t0 < seconds):
            fi.step()
        fi.finish()
    finally:
        fi.stop()
        fi.report.seconds = time.monotonic() - t0
    return fi.report


def main() -> None:
    if "--tracker-failover" in sys.argv[1:]:  # the leader tracker killed in a loop (tests/failover.py)
        sys.path.insert(0, str(ROOT / "tests"))
        from failover import main as failover_main  # noqa: PLC0415

        sys.exit(failover_main([a for a in sys.argv[1:] if a != "--tracker-failover"]))
    if "--ray-hosts" in sys.argv[1:]:  # Ray readers and writers on hosts that share no folder (too slow for the suite)
        import os  # noqa: PLC0415

        test = str(ROOT / "tests" / "test_hosts_no_shared_folder.py")
        env = dict(os.environ, ST_RAY_HOSTS="1")
        extra = [a for a in sys.argv[1:] if a != "--ray-hosts"]  # pytest's own options (--basetemp DIR)
        sys.exit(subprocess.run([sys.executable, "-m", "pytest", "-q", test, "-k", "ray", *extra], env=env).returncode)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tracker-failover",
        action="store_true",
        help="instead: SIGKILL the leader tracker --kills times under load (tests/failover.py --help)",
    )
    ap.add_argument(
        "--ray-hosts",
        action="store_true",
        help="instead: Ray's reader and writer on hosts that share no folder (test_hosts_no_shared_folder.py; "
        "the options after it go to pytest)",
    )
    ap.add_argument("--seed", type=int, help="replay one run with this seed")
    ap.add_argument("--steps", type=int, help="steps per run (default: 60 with --seed)")
    ap.add_argument("--seconds", type=float, default=600, help="soak: total seconds of runs")
    ap.add_argument("--run-seconds", type=float, default=120, help="soak: seconds per run")
    ap.add_argument("--json", type=Path, help="write the summary here")
    ap.add_argument("--keep", action="store_true", help="keep the cluster folders")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    reports = []
    t0 = time.monotonic()
    while True:
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        workdir = Path(tempfile.mkdtemp(prefix=f"st-fault-{seed}-"))
        if args.seed is not None:
            rep = run(seed, workdir, steps=args.steps or 60)
        else:
            rep = run(seed, workdir, seconds=min(args.run_seconds, max(10.0, args.seconds - (time.monotonic() - t0))))
        reports.append(rep.as_dict())
        print(json.dumps(rep.as_dict()))
        if not args.keep and not rep.problems:
            shutil.rmtree(workdir, ignore_errors=True)
        if args.seed is not None or time.monotonic() - t0 >= args.seconds or rep.problems:
            break
    total = {
        "runs": len(reports),
        "seconds": round(time.monotonic() - t0),
        "seeds": [r["seed"] for r in reports],
        "steps": sum(r["steps"] for r in reports),
        "faults": sum(r["faults_total"] for r in reports),
        "ops": sum(r["ops_total"] for r in reports),
        "records_checked": sum(r["records_checked"] for r in reports),
        "copies_checked": sum(r["copies_checked"] for r in reports),
        "records_lost": sum(r["records_lost"] for r in reports),
        "problems": sum(len(r["problems"]) for r in reports),
    }
    print("TOTAL " + json.dumps(total))
    if args.json:
        args.json.write_text(json.dumps({"total": total, "runs": reports}, indent=1))
    sys.exit(1 if total["problems"] else 0)


if __name__ == "__main__":
    main()
