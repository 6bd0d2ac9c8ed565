"""Reads of copies on this node's disk (st_py/client/local_copies.py): the
Python side of the record store's layout agrees with the peer's for odd,
long and replaced names, and a Client told its peers' data directories
reads their copies from disk, checked, with the GET's answer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from st_py.client.local_copies import copy_path
from st_py.errors import InvalidOptionError

NAMES = ["plain.bin", ".hidden", "a dir/ü%x+y", "x" * 250, "d/" + "é" * 90]


def test_paths_are_where_the_peer_keeps_its_copies(module_cluster):
    """Every copy of records with safe, escaped, leading-dot, hashed (over
    200 bytes encoded) and replaced names is at :func:`copy_path` in its
    holder's data directory."""
    c = module_cluster
    dirs = {
        Path(c.data_dir / "peers" / f"peer-{i}", "PEER_ID").read_text().strip(): str(c.data_dir / "peers" / f"peer-{i}")
        for i in range(c.n_peers)
    }
    with c.client().create("/lc/layout", replication="x2") as f:
        for n in NAMES:
            f.put(n, n.encode() * 3)
        f.flush()
        f.put("plain.bin", b"new version", replace=True)
        f.flush()
        ids = {i: p.peer_id for i, p in f.peers.items()}
        metas = [f.record_meta(n) for n in NAMES]
        fid = f.file_id
    assert metas[0].key != "plain.bin"  # the replaced record's copies are stored under its version's name
    for m in metas:
        for idx, rank in zip(m.peers, m.ranks):
            p = copy_path(dirs[ids[idx]], fid, m.key, rank, m.crc32c)
            assert os.path.isfile(p), (m.name, p)


def test_a_client_reads_copies_on_this_node_from_disk(module_cluster, tmp_path):
    """``Client(local_data_dirs=...)``: a GET of a record a named peer holds
    is read from disk (counted), the others by GET; a directory that is not
    a peer's is refused at once."""
    c = module_cluster
    data = {f"r{i}": os.urandom(1000 + i) for i in range(12)}
    with c.client().create("/lc/reads", replication="x2") as f:
        for k, v in data.items():
            f.put(k, v)
        f.flush()
        holder = f.peers[f.record_meta("r0").peers[0]].peer_id
    d0 = next(str(d) for d in (c.data_dir / "peers").glob("peer-*") if (d / "PEER_ID").read_text().strip() == holder)
    pid0 = holder
    cl = c.client(local_data_dirs=[d0])
    with cl.open("/lc/reads") as f:
        idx0 = next(i for i, p in f.peers.items() if p.peer_id == pid0)
        on0 = sum(idx0 in f.record_meta(k).peers for k in data)
        assert all(f.get(k) == v for k, v in data.items())
    assert on0 > 0
    assert cl.local_copies.stats.reads == on0 and cl.local_copies.stats.fallbacks == 0
    with pytest.raises(InvalidOptionError, match="PEER_ID"):
        c.client(local_data_dirs=[str(tmp_path)])
