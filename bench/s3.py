"""PUT and GET of 4 KiB and 1 MiB objects through the S3 endpoint with 16
concurrent clients, against the same operations through the StoreTorrent
Python client directly (issue 42, item 4; docs/benchmarks.md, "S3
endpoint").

A LocalCluster of 4 peers and the endpoint (``storetorrent s3``, its own
process as ``storetorrent up`` runs it, development mode: no access keys)
are started. For each size, ``CONCURRENCY`` threads each with its own boto3
client PUT ``n`` objects ``bench/obj-<i>`` (new keys, so each one is one
record of the file ``/B/bench``: docs/s3.md, "The mapping"), then GET them
all back in a shuffled order. The baseline does the same with the
StoreTorrent client: ``CONCURRENCY`` threads each with its own handle of
one file, each PUT a ``put`` then a ``flush`` (committed before the next,
as an S3 200 is), each GET a ``get``. Every GET's bytes are checked
against what was PUT.

SeaweedFS's ``weed s3`` is measured the same way right after, when a
``weed`` binary is found (:func:`case_s3_seaweedfs`, :mod:`bench.seaweedfs`).

Then :func:`case_s3_striped`: GETs of one large multipart object (stored
striped) through endpoints reading its stripes one after another, several
at once, and from the peers' disks (docs/benchmarks.md, "GET of a large
multipart object").
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .cases import row
from .procstat import Sampler

GROUP = "s3"
CONCURRENCY = 16
BUCKET = "bench"
SIZES = (("4kib", 4096), ("1mib", 1 << 20))
STRIPED_SIZE = 96 << 20  # bytes of the striped GET's object: over 64 MiB, so stored striped (3 stripes)


def _body(base: bytes, i: int, size: int) -> bytes:
    """Object ``i``: its number, then ``base`` up to ``size`` bytes."""
    return i.to_bytes(8, "little") + base[: size - 8]


def _run(n: int, make: Callable[[], Any], op: Callable[[Any, int], None]) -> tuple[float, list[float]]:
    """``op(state, i)`` for every ``i < n`` from ``CONCURRENCY`` threads,
    each with its own ``make()`` state; ``(seconds, latencies)``."""
    lat: list[float] = []
    lock = threading.Lock()
    order = list(range(n))
    states = [make() for _ in range(CONCURRENCY)]

    def worker(k: int) -> None:
        mine = []
        for i in order[k::CONCURRENCY]:
            t = time.perf_counter()
            op(states[k], i)
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    t = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        for f in [pool.submit(worker, k) for k in range(CONCURRENCY)]:
            f.result()
    dt = time.perf_counter() - t
    for s in states:
        close = getattr(s, "close", None)
        if close is not None:
            close()
    return dt, lat


def _p(lat: list[float]) -> str:
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
    return f"p50 {q[49] * 1e3:.1f} ms, p99 {q[98] * 1e3:.1f} ms"


def _boto3_factory(url: str, access_key: str = "bench", secret: str = "bench") -> Callable[[], Any]:
    """A maker of boto3 clients of the endpoint at ``url`` (path style,
    one attempt: a failure is seen, not retried)."""
    import boto3
    from botocore.config import Config

    def make():
        return boto3.client(
            "s3",
            endpoint_url=url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    return make


def _s3_side(s3: Callable[[], Any], label: str, size: int, n: int, base: bytes, cluster=None):
    """PUT ``n`` new objects ``<label>/obj-<i>`` of ``size`` bytes into
    bucket ``bench`` (which must exist) from ``CONCURRENCY`` threads with a
    client each, then GET them back in a shuffled order, every body
    checked: ``({"s3_put": s, "s3_get": s}, {same: latencies}, order,
    {same: CPU ms per object by role})`` (the roles of
    :class:`.procstat.Sampler` with ``cluster``; none without)."""
    keys = [f"{label}/obj-{i:06d}" for i in range(n)]  # new keys, one file: /bench/<label>
    shuffled = random.Random(1).sample(range(n), n)

    def s3_put(c, i):
        c.put_object(Bucket=BUCKET, Key=keys[i], Body=_body(base, i, size))

    def s3_get(c, i):
        j = shuffled[i]
        got = c.get_object(Bucket=BUCKET, Key=keys[j])["Body"].read()
        assert got == _body(base, j, size), (keys[j], len(got))

    times, lats, cpu = {}, {}, {}
    for op, fn in (("s3_put", s3_put), ("s3_get", s3_get)):
        sampler = Sampler(cluster, Path(cluster.data_dir)) if cluster is not None else None
        times[op], lats[op] = _run(n, s3, fn)
        if sampler is not None:
            cpu[op] = {role: v * 1e3 / n for role, v in sampler.stop().cpu.items()}
    return times, lats, shuffled, cpu


def case_s3(tmp: Path, sizes: Sequence[int]) -> list[dict]:
    """The rows described in the module docstring. ``sizes``: ``(n4k,
    n1m[, striped bytes])``, the objects of each size, and the size of the
    striped object of :func:`case_s3_striped` (default 96 MiB; 0: none).
    Rows ``s3_put_4kib``, ``s3_get_4kib``, ``s3_put_1mib``, ``s3_get_1mib``
    in objects/s, and the same in B/s (``_bytes``), each with the client's
    rate as its baseline; then :func:`case_s3_striped`'s."""
    from st_py.deploy.cluster import LocalCluster

    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="s3-", dir=tmp)), n_peers=4, announce_interval=1.0, s3=True)
    cluster.start()
    rows: list[dict] = []
    try:
        url = cluster.s3_url
        assert url is not None
        s3 = _boto3_factory(url)
        s3().create_bucket(Bucket=BUCKET)
        client = cluster.client(depth=CONCURRENCY)
        base = os.urandom(1 << 20)
        ours: dict[str, float] = {}
        for (label, size), n in zip(SIZES, sizes):
            times, lats, shuffled, cpu = _s3_side(s3, label, size, n, base, cluster)
            ours.update({f"{op}_{label}": n / times[f"s3_{op}"] for op in ("put", "get")})
            name = f"/client-{label}"
            client.create(name, replication="x2").close()

            def st_put(f, i, size=size):
                f.put(f"obj-{i:06d}", _body(base, i, size))
                f.flush()

            def st_get(f, i, size=size, shuffled=shuffled):
                j = shuffled[i]
                got = f.get(f"obj-{j:06d}")
                assert got == _body(base, j, size), (j, len(got))

            def handle(name: str = name) -> Any:
                return client.open(name)

            times["st_put"], lats["st_put"] = _run(n, handle, st_put)
            times["st_get"], lats["st_get"] = _run(n, handle, st_get)
            for op in ("put", "get"):
                s, b = times[f"s3_{op}"], times[f"st_{op}"]
                ms = ", ".join(f"{role} {v:.2f}" for role, v in cpu[f"s3_{op}"].items())
                note = (
                    f"{n} objects of {size:,} B, {CONCURRENCY} threads; S3 {_p(lats[f's3_{op}'])}; "
                    f"client {_p(lats[f'st_{op}'])}; S3 CPU ms/object: {ms} (client: the boto3 threads)"
                )
                base_text = f"StoreTorrent client, {CONCURRENCY} threads with a handle each" + (
                    ", put+flush" if op == "put" else ""
                )
                rows.append(row(f"s3_{op}_{label}", n / s, "objects/s", base_text, n / b, note))
                rows.append(row(f"s3_{op}_{label}_bytes", n * size / s, "B/s", base_text, n * size / b))
        striped = sizes[2] if len(sizes) > 2 else STRIPED_SIZE
        if striped:
            rows += case_s3_striped(cluster, striped)
    finally:
        cluster.stop()
    return rows + case_s3_seaweedfs(tmp, sizes, base, ours)


def case_s3_seaweedfs(tmp: Path, sizes: Sequence[int], base: bytes, ours: dict[str, float]) -> list[dict]:
    """The same PUTs and GETs (:func:`_s3_side`) against SeaweedFS's S3
    gateway (``weed s3`` over a filer, a master and 2 volume servers with
    replication ``001``: two copies, as the endpoint's x2), started here
    right after StoreTorrent's endpoint was measured
    (:mod:`bench.seaweedfs`): rows ``s3_{put,get}_{4kib,1mib}_vs_seaweedfs``
    (StoreTorrent's objects/s, SeaweedFS's as the baseline). None without a
    ``weed`` binary."""
    from .seaweedfs import Seaweed, weed_bin

    if weed_bin() is None:
        return []
    rows = []
    with Seaweed(tmp, volumes=2, s3=True, replication="001") as sw:
        s3 = _boto3_factory(sw.s3_url)
        s3().create_bucket(Bucket=BUCKET)
        for (label, size), n in zip(SIZES, sizes):
            times, lats, _, _ = _s3_side(s3, label, size, n, base)
            for op in ("put", "get"):
                rows.append(
                    row(
                        f"s3_{op}_{label}_vs_seaweedfs",
                        ours[f"{op}_{label}"],
                        "objects/s",
                        "SeaweedFS weed s3 (filer, 2 volume servers, replication 001), the same load",
                        n / times[f"s3_{op}"],
                        f"{n} objects of {size:,} B, {CONCURRENCY} boto3 threads; SeaweedFS {_p(lats[f's3_{op}'])}",
                    )
                )
    return rows


STRIPED_PART = 8 << 20  # bytes: the multipart upload's part size (striped objects: docs/striping.md)
STRIPED_ROUNDS = 7  # GETs of the object per endpoint; the median is the row


def _get_once(c: Any, key: str, want: bytes) -> float:
    """Seconds of one whole GET of ``key`` by boto3 client ``c``, its body checked."""
    t = time.perf_counter()
    got = c.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    dt = time.perf_counter() - t
    assert got == want, (key, len(got))
    return dt


def _complete_seconds(c: Any, key: str, data: bytes, first: int) -> float:
    """Seconds of the CompleteMultipartUpload of ``data`` uploaded by boto3
    client ``c`` as ``key``: a first part of ``first`` bytes, then parts of
    :data:`STRIPED_PART` (the last shorter); the object read back checked."""
    up = c.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    cuts = [0, *range(first, len(data), STRIPED_PART), len(data)]
    parts = []
    for n, (a, b) in enumerate(zip(cuts, cuts[1:]), 1):
        r = c.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=n, Body=data[a:b])
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    t = time.perf_counter()
    c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
    dt = time.perf_counter() - t
    assert c.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == len(data)
    return dt


def case_s3_striped(cluster, size: int, rounds: int = STRIPED_ROUNDS) -> list[dict]:
    """CompleteMultipartUpload of ``size`` bytes composed of its parts
    against copied (row ``s3_complete_multipart``), then GET of one large
    multipart object (``size`` bytes uploaded by boto3 in 8 MiB parts,
    composed: 8 MiB stripes)
    through three endpoints of the cluster, each its own process: stripes
    read one after another (``--read-ahead 1``, the setting of the old
    sequential reads) as the baseline of the parallel one
    (``--read-ahead 4``), both by network GETs, and the parallel one
    reading the copies of this host's peers from their disks
    (``--peer-data``, as ``storetorrent up`` runs it). Rows
    ``s3_get_striped`` (parallel vs sequential) and
    ``s3_get_striped_local`` (local reads vs network), in B/s; the bucket
    is made if missing."""
    key = "striped/obj.bin"
    data = os.urandom(size)
    c = _boto3_factory(cluster.s3_url)()
    if BUCKET not in [b["Name"] for b in c.list_buckets().get("Buckets", [])]:
        c.create_bucket(Bucket=BUCKET)
    # The Complete: the parts composed where they are (8 MiB parts), against the same bytes
    # in parts that cannot be stripes (the first one byte longer: copied into 32 MiB stripes)
    copied = _complete_seconds(c, "striped/copied.bin", data, STRIPED_PART + 1)
    composed = _complete_seconds(c, key, data, STRIPED_PART)
    parts = -(-size // STRIPED_PART)
    c.close()
    with cluster.client().open(f"/{BUCKET}/striped") as f:
        obj = f.object_meta("obj.bin")
    stripes = obj.stripes if obj is not None else 0
    settings = (
        ("sequential", ("--read-ahead", "1")),
        ("parallel", ("--read-ahead", "4")),
        ("local", ("--read-ahead", "4", "--peer-data", "auto")),
    )
    eps = {}
    try:
        for label, args in settings:
            eps[label] = cluster.s3_endpoint(0, args, name=f"s3-bench-{label}")
        clients = {label: _boto3_factory(f"http://{ep.addr}")() for label, ep in eps.items()}
        times: dict[str, list[float]] = {label: [] for label in eps}
        for _ in range(rounds):  # the endpoints in turn each round: a machine's load drifts alike over all
            for label, c in clients.items():
                times[label].append(_get_once(c, key, data))
        for c in clients.values():
            c.close()
    finally:
        for ep in eps.values():
            ep.stop()
    secs = {label: statistics.median(ts) for label, ts in times.items()}
    note = (
        f"one object of {size >> 20} MiB ({parts} parts of 8 MiB, {stripes} stripes), "
        f"median of {rounds} GETs by one boto3 client each, the three endpoints in turn; seconds: "
        + ", ".join(f"{k} {v:.2f}" for k, v in secs.items())
    )
    return [
        row(
            "s3_complete_multipart",
            size / composed,
            "B/s",
            "parts copied (the first part 1 byte longer: not stripes)",
            size / copied,
            f"CompleteMultipartUpload of {size >> 20} MiB in 8 MiB parts, one boto3 client: "
            f"{composed:.3f} s composed where the parts are, {copied:.3f} s copied (docs/s3.md, 'Multipart uploads')",
        ),
        row(
            "s3_get_striped",
            size / secs["parallel"],
            "B/s",
            "read-ahead 1 (one stripe after another)",
            size / secs["sequential"],
            note,
        ),
        row(
            "s3_get_striped_local",
            size / secs["local"],
            "B/s",
            "read-ahead 4, network GETs",
            size / secs["parallel"],
            note,
        ),
    ]


HTTP_ROUNDS = 5  # alternated rounds of --http-compare


def case_s3_http(tmp: Path, sizes: Sequence[int], rounds: int = HTTP_ROUNDS) -> dict[str, dict[str, list[float]]]:
    """The endpoint's two HTTP protocols side by side (docs/benchmarks.md,
    "HTTP protocols of the endpoint"): one LocalCluster of 4 peers, two
    endpoint processes over it (``--http httptools`` and ``--http h11``,
    both ``--peer-data auto`` as ``up`` runs one), and ``rounds`` rounds
    alternating between them (the first to run swaps every round), each
    a PUT then a GET of ``sizes[0]`` new 4 KiB and ``sizes[1]`` new 1 MiB
    objects from ``CONCURRENCY`` boto3 clients, every body checked.
    Returns ``{protocol: {"<op>_<size> obj/s" | "<op>_<size> cpu ms": [per
    round]}}``, the CPU being the endpoint process's per object."""
    from st_py.deploy.cluster import LocalCluster

    from .procstat import cpu_seconds

    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="s3http-", dir=tmp)), n_peers=4, announce_interval=1.0)
    cluster.start()
    eps: dict[str, Any] = {}
    out: dict[str, dict[str, list[float]]] = {}
    try:
        for http in ("httptools", "h11"):
            eps[http] = cluster.s3_endpoint(0, ("--peer-data", "auto", "--http", http), name=f"s3-{http}")
            out[http] = {}
        _boto3_factory(f"http://{eps['h11'].addr}")().create_bucket(Bucket=BUCKET)
        base = os.urandom(1 << 20)
        for r in range(rounds):
            order = list(eps) if r % 2 == 0 else list(reversed(eps))
            for http in order:
                s3 = _boto3_factory(f"http://{eps[http].addr}")
                for (label, size), n in zip(SIZES, sizes):
                    keys = [f"r{r}-{http}-{label}/obj-{i:06d}" for i in range(n)]

                    def put(c, i, keys=keys, size=size):
                        c.put_object(Bucket=BUCKET, Key=keys[i], Body=_body(base, i, size))

                    def get(c, i, keys=keys, size=size):
                        got = c.get_object(Bucket=BUCKET, Key=keys[i])["Body"].read()
                        assert got == _body(base, i, size), (keys[i], len(got))

                    for op, fn in (("put", put), ("get", get)):
                        cpu0 = cpu_seconds(eps[http].pid)
                        secs, _ = _run(n, s3, fn)
                        cpu = cpu_seconds(eps[http].pid) - cpu0
                        out[http].setdefault(f"{op}_{label} obj/s", []).append(n / secs)
                        out[http].setdefault(f"{op}_{label} cpu ms", []).append(cpu * 1e3 / n)
    finally:
        for d in eps.values():
            d.stop()
        cluster.stop()
    return out


def main() -> None:
    """``python -m bench.s3 [N4K N1M [STRIPED_BYTES]]``: the rows, printed; with
    ``--endpoint URL [--key K --secret S]`` the S3 side alone against any
    S3 endpoint (SeaweedFS's ``weed s3``: docs/benchmarks.md, "S3
    endpoint"), its bucket ``bench`` made first if missing."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.s3")
    ap.add_argument(
        "n",
        nargs="*",
        type=int,
        help="objects of 4 KiB and of 1 MiB, bytes of the striped object (default 200 32 96 MiB)",
    )
    ap.add_argument("--endpoint", help="measure this S3 endpoint alone (e.g. weed s3's http://127.0.0.1:8333)")
    ap.add_argument("--key", default="bench")
    ap.add_argument("--secret", default="bench")
    ap.add_argument(
        "--http-compare",
        type=int,
        metavar="ROUNDS",
        help="the endpoint with httptools and with h11, ROUNDS alternated rounds of N4K and N1M objects",
    )
    a = ap.parse_args()
    ns = (a.n + [200, 32, STRIPED_SIZE][len(a.n) :])[:3]
    if a.http_compare:
        _print_http_compare(ns[:2], a.http_compare)
        return
    if a.endpoint:
        s3 = _boto3_factory(a.endpoint, a.key, a.secret)
        c = s3()
        if BUCKET not in [b["Name"] for b in c.list_buckets().get("Buckets", [])]:
            c.create_bucket(Bucket=BUCKET)
        base = os.urandom(1 << 20)
        for (label, size), n in zip(SIZES, ns[:2]):
            times, lats, _, _ = _s3_side(s3, label, size, n, base)
            for op in ("put", "get"):
                t = times[f"s3_{op}"]
                print(
                    f"s3_{op}_{label:5} {n / t:10,.1f} objects/s {n * size / t / 1e6:8,.1f} MB/s  "
                    f"{_p(lats[f's3_{op}'])}"
                )
        return
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-s3-"))
    try:
        rows = case_s3(tmp, ns)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the cluster: about 1 GB at full sizes
    for r in rows:
        v = r["value"] / 1e6 if r["unit"] == "B/s" else r["value"]
        bv = r["baseline_value"] / 1e6 if r["unit"] == "B/s" else r["baseline_value"]
        unit = "MB/s" if r["unit"] == "B/s" else r["unit"]
        print(f"{r['name']:22} {v:10,.1f} {unit:10} client {bv:10,.1f}  ratio {r['ratio']:.2f}  {r['note']}")


def _print_http_compare(sizes: Sequence[int], rounds: int) -> None:
    """:func:`case_s3_http`'s figures: each measure's median and range
    over the rounds, per protocol, and the machine's load around the run."""
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-s3http-"))
    try:
        out = case_s3_http(tmp, sizes, rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    print(f"{rounds} rounds of {sizes[0]} x 4 KiB and {sizes[1]} x 1 MiB, {CONCURRENCY} boto3 clients")
    print(
        f"load average (1, 5, 15 min) before {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}, after {load1[0]:.1f} "
        f"{load1[1]:.1f} {load1[2]:.1f}; {os.cpu_count()} CPUs"
    )
    for measure in out["httptools"]:
        cells = []
        for http, got in out.items():
            v = got[measure]
            cells.append(f"{http} {statistics.median(v):8.2f} ({min(v):.2f}-{max(v):.2f})")
        print(f"{measure:18} " + "   ".join(cells))


if __name__ == "__main__":
    main()
