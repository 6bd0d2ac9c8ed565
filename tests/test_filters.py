"""Client-side filters (docs/filters.md): zstd and AES-256-GCM, chosen per
file at create. The peers store (and CRC-check) only filtered bytes; every
reader (GET, GET_LOCAL scans, fsspec, rebalance) gets the record back; a
wrong or missing key is a clear error, never garbage."""

import os
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import to_parquet

from st_py.core.filters import FilterChain, FilterError, MissingKeyError, WrongKeyError, key_check
from st_py.errors import BadNameError
from st_py.maintenance.rebalance import rebalance_file

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


def parquet(i: int) -> bytes:
    return to_parquet(
        pa.table({"i": pa.array(range(i * 1000, (i + 1) * 1000)), "s": ["the same text, compressible"] * 1000})
    )


@pytest.mark.parametrize("names", [["zstd"], ["aes-256-gcm"], ["zstd", "aes-256-gcm"]])
def test_chain_round_trip_and_errors(names):
    data = parquet(1)
    chain = FilterChain(names, KEY, "/f", key_check(KEY))
    stored = chain.encode(7, "r", data)
    assert stored != data
    assert chain.decode(7, "r", stored) == data
    if "zstd" in names and len(names) == 1:
        assert len(stored) < len(data) // 2
        with pytest.raises(FilterError):
            chain.decode(7, "r", b"not zstd")
    if "aes-256-gcm" in names:
        assert b"the same text" not in stored
        with pytest.raises(WrongKeyError):  # bound to its name: a copy moved to another one does not decrypt
            chain.decode(7, "other", stored)
        with pytest.raises(WrongKeyError):
            FilterChain(names, OTHER, "/f", key_check(KEY))  # told at once by the key check
        with pytest.raises(WrongKeyError):
            FilterChain(names, OTHER, "/f").decode(7, "r", stored)  # and by the tag
        with pytest.raises(MissingKeyError):
            FilterChain(names, None, "/f")
        tampered = bytearray(stored)
        tampered[20] ^= 1
        with pytest.raises(WrongKeyError):
            chain.decode(7, "r", bytes(tampered))


def test_unknown_filter_is_refused(cluster):
    with pytest.raises(BadNameError, match="unknown filter"):
        cluster.client().create("/flt/bad", filters=["rot13"])
    with pytest.raises(MissingKeyError):
        cluster.client().create("/flt/nokey", filters=["aes-256-gcm"])


def test_encrypted_compressed_file_every_reader(cluster, monkeypatch):
    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", KEY.hex())
    c = cluster.client()
    blobs = {f"part-{i}.parquet": parquet(i) for i in range(12)}
    with c.create("/flt/data", "x2", filters=["zstd", "aes-256-gcm"]) as f:
        for n, v in blobs.items():
            f.put(n, v)
    with c.open("/flt/data") as f:
        assert f.info.filters == "zstd,aes-256-gcm"
        assert {n: f.get(n) for n in blobs} == blobs
        local = f.get_local()
        assert len(local) == len(blobs)
        for r in local:  # what the peers hold: no plaintext, and smaller
            on_disk = Path(r.path).read_bytes()
            assert b"the same text" not in on_disk and b"PAR1" not in on_disk
            assert len(on_disk) < len(blobs[r.name])
    # GET_LOCAL scans (pyarrow Dataset over local paths) and fsspec decode too
    from st_integrations.arrow_dataset import dataset

    t = dataset("/flt/data", tracker=cluster.tracker_addr).to_table()
    assert t.num_rows == 12 * 1000 and sorted(t.column("i").to_pylist()) == list(range(12000))
    import pandas as pd

    df = pd.read_parquet(f"storetorrent://{cluster.tracker_addr}/flt/data/part-3.parquet")
    assert df["i"].tolist() == list(range(3000, 4000))
    # Another key: refused at once, nothing decoded.
    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", OTHER.hex())
    with cluster.client() as other, other.open("/flt/data") as f, pytest.raises(WrongKeyError):
        f.get("part-0.parquet")
    monkeypatch.delenv("STORETORRENT_ENCRYPTION_KEY")
    with cluster.client() as nokey, nokey.open("/flt/data") as f, pytest.raises(MissingKeyError):
        f.get("part-0.parquet")


def test_rebalance_copies_stored_bytes(make_cluster):
    cluster = make_cluster(4)
    c = cluster.client(encryption_key=KEY)
    blobs = {f"r{i}": os.urandom(3000) + b"x" * 3000 for i in range(40)}
    # blocksize 1: every peer holds copies (with blocks of 16, peer 1 held none in 1 run of 8)
    with c.create("/flt/rb", "x2", filters=["zstd", "aes-256-gcm"], blocksize=1) as f:
        for n, v in blobs.items():
            f.queue_put(n, v)
    lost = cluster.kill_peer(1)
    report = rebalance_file(c, "/flt/rb", [lost])
    assert report.complete and report.copies_moved > 0, report
    with c.open("/flt/rb") as f:
        assert {n: f.get(n) for n in blobs} == blobs
