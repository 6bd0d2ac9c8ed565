"""Listing a large file through fsspec (issue 31, item 4): ``find`` of one
StoreTorrent file of N records against ``os.walk`` over the same records'
files on the peers.

The file is class x1 on 4 real peers, so each record is exactly one file
in a peer's store (``<data>/files/<file_id:016x>/<bucket>/<name>@<rank>@<crc>``,
docs/peer.md); the baseline walks those four directories, which hold the
N files and nothing else (the count is checked). Both sides run warm (the
infofile's pages and the directories in the page cache), alternated over
``rounds`` rounds; the medians are reported. ``find`` answers from one
range query of the infofile's name index (docs/fsspec.md, "Listing");
``os.walk`` reads the bucket directories.

Rows: ``listing_find`` (target: within 3x of ``os.walk``), and without a
target ``find`` with details, ``ls`` of the file (names, then details) and
``du``.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from .cases import fresh_cluster, row

GROUP = "listing"


def _walk(dirs: list[str]) -> int:
    n = 0
    for d in dirs:
        for _, _, files in os.walk(d):
            n += len(files)
    return n


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def case_listing(tmp: Path, n: int, rounds: int = 5) -> list[dict]:
    """fsspec ``find`` (and ``ls``, ``du``) of a file of ``n`` records,
    against ``os.walk`` of the peers' directories holding those records."""
    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    cluster = fresh_cluster(tmp, "listing-").start()
    try:
        client = cluster.client()
        name = "/listing/f"
        body = b"x" * 64
        with client.create(name, replication="x1") as f:
            for i in range(n):
                f.queue_put(f"r{i:09d}", body)
        fs = StoreTorrentFileSystem(tracker=cluster.tracker_addr, skip_instance_cache=True)
        fid = fs.info(name)["file_id"]
        dirs = [str(cluster.data_dir / "peers" / f"peer-{i}" / "files" / f"{fid:016x}") for i in range(4)]
        dirs = [d for d in dirs if os.path.isdir(d)]
        assert _walk(dirs) == n, (_walk(dirs), n)  # the same n records, one file each
        assert len(fs.find(name)) == n  # warm both sides
        finds, walks = [], []
        for _ in range(rounds):
            dt, found = _timed(fs.find, name)
            assert len(found) == n
            finds.append(dt)
            dt, walked = _timed(_walk, dirs)
            assert walked == n
            walks.append(dt)
        detail_s, d = _timed(fs.find, name, detail=True)
        assert len(d) == n
        ls_s, names = _timed(fs.ls, name, detail=False)
        ls_detail_s, entries = _timed(fs.ls, name)
        assert len(names) == len(entries) == n
        du_s, total = _timed(fs.du, name)
        assert total == n * len(body)
        fs.close()
        client.close()
    finally:
        cluster.stop()
    med = statistics.median
    note = f"one file of {n:,} records (x1, 4 peers), warm"
    return [
        row(
            "listing_find",
            med(finds),
            "s",
            "os.walk of the peers' directories holding the same record files",
            med(walks),
            note=note + f", median of {rounds} alternated rounds",
        ),
        row("listing_find_detail", detail_s, "s", note=note + ": find(detail=True), a dict per record"),
        row("listing_ls_names", ls_s, "s", note=note + ": ls(detail=False) of the file"),
        row("listing_ls_detail", ls_detail_s, "s", note=note + ": ls(detail=True) of the file"),
        row("listing_du", du_s, "s", note=note + ": du (a find with details)"),
    ]
