"""A read task's copies read many at a time (st_integrations.batch_read,
st_core/src/copy_reader.h; issue 31 item 3): one native call reads and
checks a batch into one Arrow buffer, the next batch is read ahead in a
background thread. What must not change: every copy's CRC-32C is checked
(a flipped byte in one 4 KiB record of a batch is found and that record
read from its good copy, or the scan raises naming it), a record removed
under the scan is an error naming it, and threads scanning at once each
get every byte. Real tracker and peers; the native path and its Python
fallback give the same batches."""

from __future__ import annotations

import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from st_integrations import batch_read, scan
from st_integrations.batch_read import MISMATCH, MISSING, Batch, read_ahead, read_batch
from st_integrations.formats import RAW_SCHEMA
from st_integrations.readplan import plan_scan
from st_integrations.scan import ScanOptions, read_unit
from st_py.errors import RecordUnavailableError, StoreTorrentError
from st_py.wire.protocol import crc32c

N = 600  # records of 4 KiB: several raw batches of 100 (batch_size below)
RECORD = 4096


def body(i: int) -> bytes:
    return (i.to_bytes(4, "little") + bytes(range(256)) * 16)[:RECORD]


@pytest.fixture
def small(cluster, monkeypatch):
    """/small/raw (x2): N raw records of 4 KiB. Returns the cluster."""
    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    with cluster.client() as c, c.create("/small/raw", replication="x2") as f:
        for i in range(N):
            f.queue_put(f"r{i:05d}", body(i))
    return cluster


def _flip(path: str, at: int = RECORD // 2) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 0x01]))


def _scan(cluster, batch_size: int = 100) -> dict[str, bytes]:
    """Every row of a raw scan of /small/raw, unit by unit, as {record: data}."""
    opts = ScanOptions(format="raw", tracker=cluster.tracker_addr, batch_size=batch_size)
    out: dict[str, bytes] = {}
    with cluster.client() as c:
        units = plan_scan(c, ["/small/raw"]).units
    for u in units:
        for b in read_unit(u, RAW_SCHEMA, None, None, opts):
            assert b.num_rows <= batch_size
            for r, d in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                assert r not in out, f"{r} twice"
                out[r] = d
    return out


def _others(cluster, path: str) -> list[str]:
    """The other copies of the record whose copy is at ``path``."""
    import glob

    name = os.path.basename(path).split("@")[0]
    pattern = str(cluster.data_dir / "peers" / "*" / "files" / "*" / "*" / f"{name}@*")
    return [p for p in glob.glob(pattern) if p != path]


def test_a_flipped_byte_in_one_4kib_record_of_a_batch_is_found_and_read_from_its_good_copy(small):
    with small.client() as c, c.open("/small/raw") as f:
        local = {r.name: r for r in f.get_local()}
    victim = local["r00333"]
    _flip(victim.path)
    # the native batch path reports it, among good copies on both sides
    names = ["r00332", "r00333", "r00334"]
    got = read_batch([local[n].path for n in names], [RECORD] * 3)
    assert got.bad == [(1, MISMATCH)]
    assert got.slice(0, RECORD).to_pybytes() == body(332) and got.slice(2, RECORD).to_pybytes() == body(334)
    before = dict(scan.SCAN_STATS)
    rows = _scan(small)
    assert rows == {f"r{i:05d}": body(i) for i in range(N)}  # the good copy's bytes, every other row as written
    assert scan.SCAN_STATS["checksum_fallbacks"] == before["checksum_fallbacks"] + 1
    assert scan.SCAN_STATS["records_verified"] == before["records_verified"] + N - 1


def test_no_good_copy_of_a_4kib_record_is_an_error_naming_it(small):
    with small.client() as c, c.open("/small/raw") as f:
        (victim,) = [r for r in f.get_local() if r.name == "r00100"]
    (other,) = _others(small, victim.path)
    _flip(victim.path)
    _flip(other, at=7)
    with pytest.raises(RecordUnavailableError, match="r00100"):
        _scan(small)


def test_a_record_removed_under_the_scan_is_read_from_its_other_copy(small):
    """Removed while the scan runs, after the first batches were read (and the
    next read ahead): the batch that holds it reads it by GET from its other
    copy (x2) and counts it, never a row of garbage or a silent gap; with no
    copy left, the error names it."""
    opts = ScanOptions(format="raw", tracker=small.tracker_addr, batch_size=20)
    with small.client() as c:
        plan = plan_scan(c, ["/small/raw"])
    unit = max(plan.units, key=len)
    assert len(unit) >= 100
    late = unit.ref(len(unit) - 1)  # in the unit's last batch, far past the one read ahead
    before = scan.SCAN_STATS["gone_fallbacks"]
    batches = read_unit(unit, RAW_SCHEMA, None, None, opts)
    rows = next(batches).to_pylist()
    assert len(rows) == 20
    os.unlink(late.path)
    for b in batches:
        rows += b.to_pylist()
    assert len(rows) == len(unit) and all(r["data"] == body(int(r["record"][1:])) for r in rows)
    assert scan.SCAN_STATS["gone_fallbacks"] == before + 1
    # the other copy gone too: an error naming the record
    for p in glob.glob(str(small.data_dir / "peers" / "*" / "files" / "*" / "*" / f"{late.name}@*")):
        os.unlink(p)
    with pytest.raises(StoreTorrentError, match=late.name):
        for _ in read_unit(unit, RAW_SCHEMA, None, None, opts):
            pass


def test_threads_scanning_at_once_each_get_every_byte(small):
    """8 threads scan the same records at once, each with its read-ahead in
    the process's shared threads: every row of every scan is what was
    written (and read-ahead jobs of one scan never land in another)."""
    want = {f"r{i:05d}": body(i) for i in range(N)}
    start = threading.Barrier(8)

    def work(k: int) -> bool:
        start.wait()
        for _ in range(2):
            assert _scan(small, batch_size=37 + k) == want
        return True

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(work, range(8)))


def test_a_dask_raw_scan_counts_every_byte(small):
    """The reader over the batch path, end to end (Dask's default scheduler, this process)."""
    from st_integrations.dask_reader import read_storetorrent

    df = read_storetorrent("/small/raw", format="raw").compute()
    data = pa.array(df["data"])
    assert len(df) == N and pc.sum(pc.binary_length(data)).as_py() == N * RECORD
    assert sorted(bytes(d) for d in df["data"]) == sorted(body(i) for i in range(N))


def _bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _copies(tmp_path, sizes, crcs=None) -> list[str]:
    paths = []
    for i, n in enumerate(sizes):
        data = os.urandom(n)
        crc = crc32c(data) if crcs is None or crcs[i] is None else crcs[i]
        p = tmp_path / f"c{i}@0@{crc:08x}"
        p.write_bytes(data)
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("align", [1, 8, 64])
def test_the_native_call_and_its_python_fallback_give_the_same_batch(tmp_path, align):
    if not batch_read.NATIVE:
        pytest.skip("no native module: only the fallback runs")
    sizes = [0, 1, 63, 64, 65, RECORD, 300_000, 17]
    paths = _copies(tmp_path, sizes)
    paths[2] = paths[2] + "-gone"  # missing
    with open(paths[4], "ab") as fh:  # longer than revealed
        fh.write(b"x")
    _flip(paths[6], at=123_456)  # rotted, same size
    for check in (True, False):
        native = read_batch(paths, sizes, align, check)
        python = batch_read._read_batch_python(paths, sizes, align, check)
        want_bad = [(2, MISSING), (4, MISMATCH)] + ([(6, MISMATCH)] if check else [])
        assert native.bad == python.bad == want_bad
        assert native.offsets.tolist() == python.offsets.tolist()
        starts = native.offsets[:-1]
        assert all(int(s) % align == 0 for s in starts)
        for i, n in enumerate(sizes):
            if i not in (2, 4):
                assert native.slice(i, n).to_pybytes() == python.slice(i, n).to_pybytes()
                assert native.slice(i, n).to_pybytes() == _bytes(paths[i])
        if align == 1:  # the data and offsets of an Arrow binary array
            arr = pa.Array.from_buffers(pa.binary(), len(sizes), [None, native.binary_offsets(), native.data])
            assert arr.to_pylist()[0:2] == [_bytes(p) for p in paths[0:2]]


def test_a_batch_starts_on_64_bytes_in_an_arrow_buffer_and_refuses_bad_arguments(tmp_path):
    paths = _copies(tmp_path, [10, 70, 5])
    got = read_batch(paths, [10, 70, 5], align=64)
    assert isinstance(got, Batch) and got.bad == []
    assert got.offsets.tolist() == [0, 64, 192, 197]
    if batch_read.NATIVE:
        assert got.data.address % 64 == 0  # a pyarrow memory-pool buffer
    with pytest.raises(ValueError, match="power of two"):
        read_batch(paths, [10, 70, 5], align=3)
    with pytest.raises(ValueError, match="sizes"):
        read_batch(paths, [10, 70])
    if batch_read.NATIVE:
        from st_py import _native

        with pytest.raises(ValueError, match="smaller"):
            _native.read_into(paths, [10, 70, 5], bytearray(10), 1, True)
        with pytest.raises(BufferError):
            _native.read_into(paths, [10, 70, 5], bytes(100), 1, True)  # read-only


def test_read_ahead_keeps_order_raises_in_order_and_stops_when_closed():
    running = threading.Event()
    release = threading.Event()
    started: list[int] = []

    def job(k: int) -> int:
        started.append(k)
        if k == 2:
            running.set()
            assert release.wait(10)
        if k == 4:
            raise OSError("job 4 failed")
        return k * k

    it = read_ahead(job, range(10))
    assert next(it) == 0 and next(it) == 1
    assert running.wait(10)  # job 2 runs ahead while the caller holds 1
    release.set()
    assert next(it) == 4 and next(it) == 9
    with pytest.raises(OSError, match="job 4"):
        next(it)
    # closed early: no job past the one in flight is started
    started.clear()
    it = read_ahead(job, range(5, 100))
    assert next(it) == 25
    it.close()
    assert max(started) <= 6
    assert list(read_ahead(job, range(2), depth=0)) == [0, 1]


def test_arrow_records_are_parsed_from_the_batch_buffer_without_a_copy(cluster):
    """Records of a known format (Arrow IPC here) read in a run: each
    parsed where it lies in the run's buffer, 64-byte aligned, and every
    value as written."""
    import io

    tables = [pa.table({"x": np.arange(i * 1000, (i + 1) * 1000, dtype=np.int64)}) for i in range(12)]
    with cluster.client() as c, c.create("/small/ipc", replication="x2") as f:
        for i, t in enumerate(tables):
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, t.schema) as w:
                w.write_table(t)
            f.put(f"part-{i:02d}.arrows", sink.getvalue())
    with cluster.client() as c:
        plan = plan_scan(c, ["/small/ipc"])
    opts = ScanOptions(tracker=cluster.tracker_addr)
    total = 0
    for u in plan.units:
        refs = u.records
        for _ref, src in scan._sources(refs, opts):
            assert isinstance(src, pa.Buffer) and src.address % 64 == 0
        for b in read_unit(u, pa.schema([("x", pa.int64())]), None, None, opts):
            total += pc.sum(b.column(0)).as_py()
    assert total == sum(range(12_000))
