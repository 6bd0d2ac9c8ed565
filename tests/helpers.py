"""Plain helpers shared by the test modules, each defined once here (the
fixtures are in ``conftest.py``; the analysis tests' data in
``analysis_data.py``; what a user checks after a fault in ``checks.py``).
``test_helpers_once.py`` fails when a test module defines again a function
that another already has.

Ray's workers import the functions given to ``map_batches`` by name, so
those live here, in a module the workers find on ``PYTHONPATH`` (the Ray
clusters of :func:`start_ray_cluster` put this folder there).
"""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TESTS = os.path.join(ROOT, "tests")


# -- frames and record bytes ----------------------------------------------------
def sorted_rows(df, *by: str):
    """``df`` sorted by the columns ``by``, with a fresh index: the canonical
    order in which a scan's rows are compared with the source."""
    return df.sort_values(list(by)).reset_index(drop=True)


def csv_bytes(part: int, rows: int = 40) -> bytes:
    """A CSV record of ``rows`` rows ``i, part, v`` (``v = i * part % 7``):
    the composition tests' records, whose rows say which record they
    came from."""
    return ("i,part,v\n" + "".join(f"{i},{part},{i * part % 7}\n" for i in range(rows))).encode()


def csv_frame(blobs: dict[str, bytes]):
    """The rows of every CSV in ``blobs`` (as :func:`csv_bytes` makes them),
    in the canonical order ``(part, i)``."""
    import pandas as pd

    df = pd.concat([pd.read_csv(io.BytesIO(b)) for b in blobs.values()], ignore_index=True)
    return sorted_rows(df, "part", "i")


def assert_csv_rows(table, want: dict[str, bytes]) -> None:
    """Assert that ``table`` (Arrow or pandas) holds exactly the ``i, part,
    v`` rows of the CSVs ``want``: a dropped, duplicated or old-version row
    fails."""
    import pandas as pd

    df = table.to_pandas() if hasattr(table, "to_pandas") else table
    df = sorted_rows(df[["i", "part", "v"]].astype("int64"), "part", "i")
    pd.testing.assert_frame_equal(df, csv_frame(want).astype("int64"))


def to_parquet(table: pa.Table, **options) -> bytes:
    """The Parquet file of ``table``; ``options`` go to ``pq.write_table``
    (``row_group_size``, ``compression`` ...)."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def to_csv(table: pa.Table) -> bytes:
    """The CSV file of ``table`` (a header line, then the rows)."""
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    return buf.getvalue()


# -- where a partition ran (given to the engines by name) ------------------------
def with_dask_worker(df):
    """``df`` with a ``worker`` column: the name of the Dask worker running
    this partition (``""`` while Dask infers the meta on the client)."""
    from distributed import get_worker

    df = df.copy()
    try:
        df["worker"] = get_worker().name
    except ValueError:  # meta inference on the client
        df["worker"] = ""
    return df


def with_ray_place(batch):
    """``batch`` with ``node`` and ``task`` columns: the Ray node and task
    that made it."""
    import ray

    batch = batch.copy()
    batch["node"] = ray.get_runtime_context().get_node_id()
    batch["task"] = ray.get_runtime_context().get_task_id()
    return batch


# -- engines ---------------------------------------------------------------------
def start_ray_cluster(head_node_args: dict, *node_args: dict):
    """Start a Ray of several nodes on this machine (``ray.cluster_utils``:
    a head with ``head_node_args`` and one node per ``node_args``) and join
    it from this process, with this folder on the workers' ``PYTHONPATH``.

    Returns ``(cluster, nodes)``; the caller ends them with
    ``ray.shutdown()`` and ``cluster.shutdown()``. A raylet can miss Ray's
    start deadline on a loaded 2-core machine: the start is tried 3 times,
    and a failed try's processes are shut down before the next."""
    import ray
    from ray.cluster_utils import Cluster

    for attempt in range(3):
        rc = None
        try:
            rc = Cluster(initialize_head=True, head_node_args=head_node_args)
            nodes = [rc.add_node(**args) for args in node_args]
            break
        except Exception:
            if rc is not None:
                rc.shutdown()
            if attempt == 2:
                raise
            time.sleep(3)
    try:
        ray.init(
            address=rc.address,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": TESTS}},  # workers import map functions by name
        )
    except BaseException:
        rc.shutdown()
        raise
    ray.data.DataContext.get_current().enable_progress_bars = False
    return rc, nodes


# -- processes ---------------------------------------------------------------------
def start_peer(peer_bin: str, tmp_path, *extra: str, name: str = "peer"):
    """A lone ``st-peer`` (no tracker) on an ephemeral loopback port, its
    data in ``tmp_path/NAME`` and its log in ``tmp_path/NAME.log``; ``extra``
    are more command-line options. Returns the started ``Daemon``."""
    from st_py.deploy.cluster import Daemon

    return Daemon(name, [peer_bin, "--data", str(tmp_path / name), "--port", "0", *extra], tmp_path / f"{name}.log")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie is dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (from ``/proc``)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def cmdline(pid: int) -> str:
    """Process ``pid``'s command line, its arguments joined by spaces (``""``
    once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def start_up(data, *extra: str, out=None) -> subprocess.Popen:
    """``storetorrent up`` with 3 peers in folder ``data`` (a child process);
    its stdout into the file ``out`` (a ``Path``), its stderr piped."""
    f = out.open("w") if out else None
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "st_py.cli",
                "up",
                "--data",
                str(data),
                "--peers",
                "3",
                "--announce-interval",
                "0.3",
                *extra,
            ],
            stdout=f or subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        if f:
            f.close()  # the child has its own descriptor


def stop_child(p: subprocess.Popen, sig: int, timeout: float) -> tuple[str, bool]:
    """Send ``sig`` to child ``p`` and wait ``timeout`` s for it to exit, then
    SIGKILL it: ``(its stderr, whether it had to be killed)``."""
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=timeout)
        return err, False
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return err, True


def stop_up(up: subprocess.Popen) -> str:
    """Stop a :func:`start_up` with SIGINT (SIGKILL after 30 s); its stderr."""
    return stop_child(up, signal.SIGINT, 30)[0]


def up_peer_pid(up_pid: int, i: int) -> int | None:
    """The pid of peer ``i`` that ``storetorrent up`` (``up_pid``) runs, if any."""
    for p in children_of(up_pid):
        if f"peers/peer-{i} " in cmdline(p) + " ":
            return p
    return None


# A writer that dies with copies pending on a stopped holder: async records
# are committed once copy rank 0 is stored; their copy on the stopped peer
# stays pending.
PENDING_WRITER = """
import os, sys, time
sys.path.insert(0, {root!r})
from st_py.client.client import Client
from st_py.core.infofile import InfofileReader
c = Client({tracker!r}, tls={tls!r}, group_size=1, timeout=60.0)
f = c.create({name!r}, {replication!r}, protocol={protocol!r}, blocksize=1)
for i in range({n}):
    f.queue_put(f"r{{i:04d}}", (f"{{i}}:".encode() * 3000)[:3000])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    f.poll(0.05)
    r = InfofileReader(f.infofile_path)
    n = r.count_pending()
    r.close()
    if n >= {pending}:
        print(n, flush=True)
        os._exit(0)  # the writer dies with copies pending
print("no pending copies", flush=True)
os._exit(1)
"""


def write_with_pending(
    tracker: str,
    tls,
    name: str,
    replication: str = "x2",
    n: int = 60,
    pending: int = 10,
    protocol: str = "client-async",
) -> None:
    """Run :data:`PENDING_WRITER` in a child process: it writes ``n`` records
    of 3,000 B to file ``name`` and must die leaving ``pending`` copies or
    more pending (a holder is stopped by the caller)."""
    script = PENDING_WRITER.format(
        root=ROOT, tracker=tracker, tls=tls, name=name, replication=replication, n=n, pending=pending, protocol=protocol
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


# -- the command line --------------------------------------------------------------
def run_cli(cluster, *args: str, check: bool = False, env: dict | None = None, timeout: float = 300):
    """``storetorrent ARGS --tracker ADDR`` in a subprocess, as a user runs
    it: the ``CompletedProcess`` (text output). ``env`` is added to this
    process's environment; ``check`` raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "st_py.cli", *args, "--tracker", cluster.tracker_addr],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def st(*args: str, data, check: bool = True, input: str | None = None):
    """``storetorrent ARGS --data DATA`` in a subprocess (the cluster that
    ``storetorrent up`` keeps in ``data``): the ``CompletedProcess``."""
    return subprocess.run(
        [sys.executable, "-m", "st_py.cli", *args, "--data", str(data)],
        capture_output=True,
        text=True,
        check=check,
        input=input,
        timeout=120,
    )


def cli_stdout(cluster, *args: str) -> str:
    """The output of :func:`run_cli`, which must exit 0."""
    r = run_cli(cluster, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


# -- HTTP: metrics and status --------------------------------------------------------
def http_get(addr: str, path: str) -> tuple[str, str]:
    """``(content type, body)`` of ``http://ADDR/PATH``."""
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def status_json(addr: str) -> dict:
    """The tracker's ``/status.json`` at its metrics address ``addr``."""
    ctype, body = http_get(addr, "/status.json")
    assert ctype == "application/json"
    return json.loads(body)


def tracker_status(cluster) -> dict:
    """:func:`status_json` of ``cluster``'s tracker."""
    return status_json(cluster.tracker.metrics_addr)


def scrape_metrics(addr: str) -> dict:
    """``{(name, frozenset(labels)): value}`` of the ``/metrics`` page at
    ``addr`` (a peer's or the tracker's), read with the official Prometheus
    parser."""
    from prometheus_client.parser import text_string_to_metric_families

    ctype, text = http_get(addr, "/metrics")
    assert ctype.startswith("text/plain; version=0.0.4")
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric_value(m: dict, name: str, **labels) -> float:
    """The sample ``name{labels}`` of a :func:`scrape_metrics` page; 0 when
    the page has none (a counter not yet incremented)."""
    return m.get((name, frozenset(labels.items())), 0.0)


def metric_sample(m: dict, name: str, **labels) -> float:
    """The sample ``name{labels}`` of a :func:`scrape_metrics` page, which
    must have it (``KeyError`` naming it otherwise)."""
    key = (name, frozenset(labels.items()))
    if key not in m:
        raise KeyError(f"no sample {name}{labels or ''} on the page")
    return m[key]


# -- static checks ---------------------------------------------------------------------
LIBRARY_ROOTS = ("st_py", "integrations/st_integrations", "st_tools")


def library_files():
    """``(path from the repository root, Path)`` of every Python module of
    the libraries the static checks read (``st_py``, ``st_integrations``,
    ``st_tools``), sorted per root, without the generated ``st_py/_proto``."""
    from pathlib import Path

    root = Path(ROOT)
    for lib in LIBRARY_ROOTS:
        for path in sorted((root / lib).rglob("*.py")):
            rel = path.relative_to(root)
            if "_proto" not in rel.parts:
                yield rel.as_posix(), path


def parse_python(source: str, filename: str = "<unknown>"):
    """``ast.parse(source, filename)`` with the garbage collector paused.
    CPython 3.11's AST constructor keeps one depth counter per interpreter
    (gh-106905, not fixed in 3.11): a collection in the middle of a parse
    runs finalizers, the interpreter may switch threads there, and another
    thread that parses meanwhile (3.11's traceback module parses each line
    it underlines; Ray's and Dask's threads log tracebacks) resets the
    counter under ours, and ours fails with "AST constructor recursion depth
    mismatch" (SystemError; the CI of d834fdd, test_callbacks_lint.py).
    Without a collection no Python code runs inside the parse, so no other
    thread can."""
    import ast
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if was_enabled:
            gc.enable()


# -- infofiles ---------------------------------------------------------------------------
def infofile_copies(path: str) -> tuple[dict, dict]:
    """``({name: {rank: peer_idx}} stored, the same pending)`` of the
    infofile at ``path``, read-only."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        stored: dict = {}
        pending: dict = {}
        for n, r, p in conn.execute("SELECT name, copy_rank, peer_idx FROM copies"):
            stored.setdefault(n, {})[r] = p
        for n, r, p in conn.execute("SELECT name, copy_rank, peer_idx FROM pending_copies"):
            pending.setdefault(n, {})[r] = p
        return stored, pending
    finally:
        conn.close()


# -- snapshots (docs/snapshots.md) --------------------------------------------------
def ranks_apart(conn) -> dict[tuple[str, int], set[int]]:
    """``{(stored name, peer index): copy ranks}`` where one peer holds live
    copies (current ``copies`` and kept ``retained_copies``) of more than one
    rank under one stored name: two versions sharing a stored name placed
    apart, which leaves a lost copy no peer once only as many peers as
    copies are in service (st_py.maintenance.moves.together). Empty when
    every stored name's copies are one file per peer."""
    rows = conn.execute(
        "SELECT coalesce(r.stored_as, r.name), c.peer_idx, c.copy_rank FROM copies c JOIN records r ON r.name = c.name"
    ).fetchall()
    try:
        rows += conn.execute("SELECT coalesce(stored_as, name), peer_idx, copy_rank FROM retained_copies").fetchall()
    except sqlite3.OperationalError:  # a file without kept versions
        pass
    ranks: dict[tuple[str, int], set[int]] = {}
    for key, peer, rank in rows:
        ranks.setdefault((key, peer), set()).add(rank)
    return {k: v for k, v in ranks.items() if len(v) > 1}


def assert_same_records(got, want, what: str = "") -> None:
    """Assert that the maps ``{name: bytes}`` ``got`` and ``want`` are equal
    (the same names, each with the same bytes). On a mismatch the message
    names only the names missing, extra and different, each with its size
    and the first 12 hex digits of its SHA-256, never the bytes: pytest's
    own diff of two dicts of Parquet bytes took 20 minutes and 23 GB once
    (and then an INTERNALERROR). ``what`` says what was read."""
    import hashlib

    got, want = dict(got), dict(want)
    if got == want:
        return

    def desc(b) -> str:
        return f"{len(b)} bytes, sha256 {hashlib.sha256(b).hexdigest()[:12]}"

    lines = [f"{what or 'records'}: {len(got)} read, {len(want)} expected"]
    lines += [f"  missing {n!r} ({desc(want[n])})" for n in sorted(want.keys() - got.keys())]
    lines += [f"  extra {n!r} ({desc(got[n])})" for n in sorted(got.keys() - want.keys())]
    lines += [
        f"  different {n!r}: read {desc(got[n])}, expected {desc(want[n])}"
        for n in sorted(got.keys() & want.keys())
        if got[n] != want[n]
    ]
    raise AssertionError("\n".join(lines))


def revealed_once(f) -> dict[str, bytes]:
    """``{record: bytes}`` of what GET_LOCAL reveals of open file ``f`` (as
    of its ``as_of`` generation, if any) across every peer on this host,
    each record read from its local copy; asserts each is revealed once."""
    seen: dict[str, bytes] = {}
    for r in f.get_local():
        assert r.name not in seen, r.name  # exactly once
        seen[r.name] = f.read_local(r)
    return seen


# -- infofiles written before a rule ---------------------------------------------
def rename_in_infofile(cluster, file: str, renames: dict[str, str]) -> None:
    """Give committed records of ``file`` other names in its infofile, as a
    file written before the rule for record names holds them (``/lead``,
    ``x//y``, ``..``, or a name that is also a folder of other records;
    docs/decisions.md, "Record names"), which no
    put makes any more. With the tracker stopped, each record's row and
    its copies' rows take the new name and ``stored_as`` keeps the name
    its copies have on the peers, so they stay readable; then the tracker
    starts again (on the same ports) and the peers are waited for."""
    cluster.tracker.stop()
    con = sqlite3.connect(cluster.namespace / file.strip("/"))
    try:
        with con:
            for old, new in renames.items():
                n = con.execute(
                    "UPDATE records SET name = ?, stored_as = coalesce(stored_as, ?) WHERE name = ?", (new, old, old)
                ).rowcount
                assert n == 1, f"no record {old!r} in {file}"
                for table in ("copies", "pending_copies"):
                    con.execute(f"UPDATE {table} SET name = ? WHERE name = ?", (new, old))
    finally:
        con.close()
    cluster.start_tracker()
    cluster.wait_for_peers(cluster.n_peers)


def swap_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with the value after ``flag`` replaced by ``value`` (a second
    tracker started with the first one's command line)."""
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def standby_argv(argv: list[str], state_dir, port: int, root=None) -> list[str]:
    """A second tracker's command line from the first one's ``argv``: its own
    ``state_dir`` and ``port``, its status page on a free port, and with
    ``root`` a namespace of its own (``--own-namespace``)."""
    out = swap_flag(swap_flag(argv, "--state-dir", str(state_dir)), "--port", str(port))
    out = swap_flag(out, "--metrics-port", "0")
    return out if root is None else [*swap_flag(out, "--root", str(root)), "--own-namespace"]


# -- a writer and a reader through a tracker failover ---------------------------------
def failover_writer(client, prefix: str, acked: dict, errors: list, stop, gaps: list | None = None) -> None:
    """Until ``stop`` (a threading.Event) is set: create ``<prefix>/fNNNN``
    (x2), queue_put 20 records, close; each file whose close returned goes
    into ``acked`` ({name: {record: bytes}}), each create-to-close time (s)
    into ``gaps``; the first error goes into ``errors`` and ends the loop."""
    n = 0
    while not stop.is_set():
        name = f"{prefix}/f{n:04d}"
        recs = {f"r{i}": f"{name} {i}".encode() for i in range(20)}
        t0 = time.monotonic()
        try:
            with client.create(name, replication="x2") as f:
                for k, v in recs.items():
                    f.queue_put(k, v)
        except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
            errors.append(e)
            return
        if gaps is not None:
            gaps.append(time.monotonic() - t0)
        acked[name] = recs
        n += 1


def failover_reader(client, acked: dict, errors: list, stop, reads: list | None = None) -> None:
    """Until ``stop``: open the last 3 files of ``acked`` and check their
    names and first record; a mismatch or error goes into ``errors`` (an
    error ends the loop); ``reads`` gets (start, end) of each read."""
    while not stop.is_set():
        for name, recs in list(acked.items())[-3:]:
            t0 = time.monotonic()
            try:
                with client.open(name) as f:
                    if sorted(f.names()) != sorted(recs) or f.get("r0") != recs["r0"]:
                        errors.append(AssertionError(f"{name} read back otherwise"))
            except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
                errors.append(e)
                return
            if reads is not None:
                reads.append((t0, time.monotonic()))
        time.sleep(0.05)


# -- a put_object writer killed midway ---------------------------------------------
# A put_object of argv[3] whose source gives 3 stripes of 1 MiB and then
# blocks, in a writer committing each acknowledged stripe at once; it waits
# to be killed.
DEAD_WRITER = """
import io, sys, time
from st_py.client.client import Client

class Source(io.RawIOBase):
    reads = 0
    def readable(self):
        return True
    def read(self, n=-1):
        self.reads += 1
        if self.reads > 1:
            time.sleep(0.2)  # past the group commit's linger: each stripe is committed before the next
        if self.reads > 3:
            print("ready", flush=True)
            time.sleep(600)
        return bytes([self.reads]) * n

f = Client(sys.argv[1], group_size=1).open(sys.argv[2])
f.put_object(sys.argv[3], Source(), stripe_size=1 << 20, in_flight=1)
"""


def stripe_names(f, obj: str) -> list[str]:
    """The stripe records committed under object ``obj`` in ``f`` (an open StFile), in order."""
    return [r[0] for r in f.infofile().records_between(f".st-stripe/{obj}/", f".st-stripe/{obj}0")]


def kill_a_writer_midway(client, tracker_addr: str, file: str, obj: str, tmp_path) -> list[str]:
    """Run a real writer process storing object ``obj`` in the existing
    ``file``, SIGKILL it once at least 2 of its stripes are committed (and
    before its object is), and return the stripes it left
    (docs/striping.md, "Stripes a writer left")."""
    script = tmp_path / "dead_writer.py"
    script.write_text(DEAD_WRITER)
    with subprocess.Popen([sys.executable, str(script), tracker_addr, file, obj], stdout=subprocess.PIPE) as w:
        assert w.stdout is not None and w.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        with client.open(file) as f:
            while len(stripe_names(f, obj)) < 2:  # committed by the writer's group commits
                assert time.monotonic() < deadline, "the writer's stripes were not committed"
                time.sleep(0.05)
        w.kill()
    with client.open(file) as f:
        left = stripe_names(f, obj)
        assert len(left) >= 2 and f.object_meta(obj) is None  # committed stripes, no object
    return left
