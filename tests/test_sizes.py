"""One definition of size (docs/infofile.md, "Sizes"): a record's and an
object's ``size`` is the user's bytes everywhere (the CLI's ``ls`` table
and json, fsspec ``info``/``ls``/``find``/``du``, DuckDB ``records`` and
``files``); the bytes as stored after the file's filters are a separate
``stored_size`` (``stored_bytes`` for a file). Before, in a zstd file,
``ls -r --format json`` gave a record's stored size but an object's user
size, fsspec read every record to learn its size, and ``ls`` totalled
37.1 MiB where ``fs.du`` gave 158.5 MB. Real tracker and peers; each case
writes a file of its own under /sz (and lists /sz only for its entry) and
kills, restarts and fills nothing, so the module shares one cluster
(``module_cluster``)."""

from __future__ import annotations

import json

import pytest
from helpers import cli_stdout

KEY = bytes(range(32))


def _data(i: int, n: int) -> bytes:
    return (f"{i},the same words again and again,{i * 7}\n" * (n // 40 + 1)).encode()[:n]


@pytest.mark.parametrize("filters", [["zstd"], ["zstd", "aes-256-gcm"], []])
def test_a_size_is_the_users_bytes_in_every_view(module_cluster, monkeypatch, filters):
    import fsspec

    from st_integrations.duckdb_sql import connect_files

    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", KEY.hex())  # the CLI and fsspec find the key here
    path = "/sz/" + ("-".join(filters) or "plain")
    want = {f"r{i:02d}.csv": _data(i, 5_000 + 300 * i) for i in range(12)}
    want["big.csv"] = _data(99, 200_000)
    with module_cluster.client(encryption_key=KEY) as c, c.create(path, "x2", filters=filters) as f:
        for n, d in want.items():
            if n == "big.csv":
                f.put_object(n, d, stripe_size=64 << 10)
            else:
                f.put(n, d)
    total = sum(len(d) for d in want.values())

    def stored_ok(stored: int, size: int) -> bool:
        return stored < size if "zstd" in filters else stored == size

    rows = {r["name"]: r for r in json.loads(cli_stdout(module_cluster, "ls", "-r", path, "--format", "json"))}
    assert {n: r["size"] for n, r in rows.items()} == {n: len(d) for n, d in want.items()}
    assert all(stored_ok(r["stored_size"], r["size"]) for r in rows.values()), rows
    assert rows["big.csv"]["kind"] == "object"
    (entry,) = [e for e in json.loads(cli_stdout(module_cluster, "ls", "/sz", "--format", "json")) if e["name"] == path]
    assert entry["bytes"] == total and stored_ok(entry["stored_bytes"], total), entry

    fs = fsspec.filesystem("storetorrent", tracker=module_cluster.tracker_addr, skip_instance_cache=True)
    for n, d in want.items():
        info = fs.info(f"{path}/{n}")
        assert info["size"] == len(d), (n, info)
    assert stored_ok(fs.info(f"{path}/r03.csv")["stored_size"], len(want["r03.csv"]))
    assert {e["name"]: e["size"] for e in fs.ls(path, detail=True)} == {f"{path}/{n}": len(d) for n, d in want.items()}
    assert {p: i["size"] for p, i in fs.find(path, detail=True).items()} == {
        f"{path}/{n}": len(d) for n, d in want.items()
    }
    assert fs.du(path) == total
    assert fs.info(path)["bytes"] == total
    assert fs.stats["get_reads"] == 0, fs.stats  # no record was read to learn its size

    con = connect_files(module_cluster.client(), [path])
    try:
        assert dict(con.execute("SELECT name, size FROM records").fetchall()) == {n: len(d) for n, d in want.items()}
        # the stored bytes agree with the CLI's, an object's too (the sum of its stripes' stored bytes)
        stored_by_name = dict(con.execute("SELECT name, stored_size FROM records").fetchall())
        assert stored_by_name == {n: r["stored_size"] for n, r in rows.items()}, stored_by_name
        assert con.execute("SELECT records, bytes FROM files").fetchall() == [(len(want), total)]
        stored = con.execute("SELECT stored_bytes FROM files").fetchone()[0]
        assert stored_ok(stored, total)
    finally:
        con.close()
    with fs.open(f"{path}/r05.csv") as fh:  # and the bytes read are the user's
        assert fh.read() == want["r05.csv"]
