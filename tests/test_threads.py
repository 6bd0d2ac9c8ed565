"""Objects shared between threads (docs/composition.md, "Threads"): a filter
chain, a Client and its StFile handles, the fsspec filesystem, and Dask's
threaded scheduler reading through the scans' per-process caches. Every
byte read from several threads at once is compared with what was written,
over plain, zstd, aes-256-gcm and zstd+aes files with striped objects.

Before the chain kept one zstd decompressor per thread, Dask's default
scheduler over a zstd file reported ``FilterError ... Data corruption
detected`` for good bytes (a ``zstandard.ZstdDecompressor`` is not safe for
concurrent use).
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from st_py.core.filters import FilterChain, key_check

KEY = bytes(range(32))
FILTERS = {"plain": [], "zstd": ["zstd"], "aes": ["aes-256-gcm"], "zstd-aes": ["zstd", "aes-256-gcm"]}
THREADS = 8


def payload(seed: int, size: int) -> bytes:
    """Compressible but distinct bytes (a zstd frame of real work per record)."""
    rnd = random.Random(seed)
    words = [rnd.randbytes(rnd.randint(3, 12)).hex() for _ in range(64)]
    out = bytearray()
    while len(out) < size:
        out += (rnd.choice(words) + ",").encode()
    return bytes(out[:size])


@pytest.mark.parametrize("names", [["zstd"], ["zstd", "aes-256-gcm"], ["aes-256-gcm"]])
def test_one_filter_chain_shared_by_threads_gives_every_byte(names):
    chain = FilterChain(names, KEY, "/t/f", key_check(KEY))
    records = {f"r{i}": payload(i, 20_000 + 997 * i) for i in range(48)}
    stored = {n: chain.encode(3, n, d) for n, d in records.items()}

    def work(t: int) -> int:
        order = list(records)
        random.Random(t).shuffle(order)
        for _ in range(6):
            for n in order:
                assert chain.decode(3, n, stored[n]) == records[n], n
                assert chain.decode(3, n, chain.encode(3, n, records[n])) == records[n], n
        return t

    with ThreadPoolExecutor(THREADS) as ex:
        assert sorted(ex.map(work, range(THREADS))) == list(range(THREADS))


@pytest.fixture(scope="module")
def files(tmp_path_factory, peer_bin):
    """One file of each kind (x2): 40 records of 8-40 KB and one striped object."""
    from st_py.deploy.cluster import LocalCluster

    os.environ["STORETORRENT_ENCRYPTION_KEY"] = KEY.hex()  # readers in every thread find it
    c = LocalCluster(tmp_path_factory.mktemp("threads") / "cluster", n_peers=4, announce_interval=0.3)
    c.start()
    want: dict[str, dict[str, bytes]] = {}
    try:
        with c.client(encryption_key=KEY) as client:
            for kind, filters in FILTERS.items():
                path = f"/thr/{kind}"
                w = want[path] = {f"p{i:03d}.bin": payload(1000 * len(path) + i, 8_000 + 811 * i) for i in range(40)}
                w["big.bin"] = payload(7, 300_000)
                with client.create(path, "x2", filters=filters) as f:
                    for n, d in w.items():
                        if n == "big.bin":
                            f.put_object(n, d, stripe_size=64 << 10)
                        else:
                            f.queue_put(n, d)
        yield c, want
    finally:
        os.environ.pop("STORETORRENT_ENCRYPTION_KEY", None)
        c.stop()


def test_a_client_and_its_file_handles_shared_by_threads(files):
    cluster, want = files
    with cluster.client(encryption_key=KEY) as client:
        handles = {path: client.open(path) for path in want}
        try:

            def work(t: int) -> int:
                rnd = random.Random(t)
                n_read = 0
                for path in rnd.sample(list(want), len(want)):
                    f = handles[path]
                    names = list(want[path])
                    rnd.shuffle(names)
                    for n in names:
                        if n == "big.bin":
                            with f.open(n) as fh:
                                fh.seek(1234)
                                assert fh.read() == want[path][n][1234:], (path, n)
                        else:
                            assert f.get(n) == want[path][n], (path, n)
                        n_read += 1
                    assert f.names() == sorted(want[path])
                return n_read

            with ThreadPoolExecutor(THREADS) as ex:
                assert sum(ex.map(work, range(THREADS))) == THREADS * sum(len(w) for w in want.values())
        finally:
            for f in handles.values():
                f.close()


def test_one_fsspec_filesystem_shared_by_threads(files):
    import fsspec

    cluster, want = files
    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, skip_instance_cache=True)

    def work(t: int) -> int:
        rnd = random.Random(t)
        n_read = 0
        for path, w in rnd.sample(list(want.items()), len(want)):
            for n in rnd.sample(list(w), len(w)):
                assert fs.cat_file(f"{path}/{n}") == w[n], (path, n)
                assert fs.info(f"{path}/{n}")["size"] == len(w[n]), (path, n)
                n_read += 1
        return n_read

    with ThreadPoolExecutor(THREADS) as ex:
        assert sum(ex.map(work, range(THREADS))) == THREADS * sum(len(w) for w in want.values())


@pytest.mark.parametrize("blocksize", ["64KiB", "1MiB"])
def test_dask_threaded_scheduler_reads_every_byte(files, blocksize):
    """Dask's default scheduler (threads) with no distributed Client, every
    peer local: small partitions put many read tasks of one file in flight
    at once, sharing the scans' per-process filter chains."""
    import dask

    from st_integrations.dask_reader import read_storetorrent

    cluster, want = files
    for _ in range(3):
        ddf = read_storetorrent(
            sorted(want), tracker=cluster.tracker_addr, format="raw", blocksize=blocksize, include_paths=True
        )
        with dask.config.set(scheduler="threads", num_workers=THREADS):
            df = ddf.compute()
        assert len(df) == sum(len(w) for w in want.values())
        got = {p: bytes(d) for p, d in zip(df["path"], df["data"])}
        assert got == {f"{p}/{n}": d for p, w in want.items() for n, d in w.items()}
