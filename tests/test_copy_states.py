"""One model of a record's copies (st_py/core/copy_health.py; docs/reliability.md,
"Copy states"): ``status`` (its line, ``/status.json``, metrics), ``repair``
(its report and exit code), ``get``, ``get_local`` and the scans say the
same thing about the same records. Real tracker and peers; peers are
SIGKILLed and a copy's bytes are flipped on disk.

Before this model, ``status`` counted records short of copies while
``repair`` exited 0 with every file complete (a peer failed for less than
``--failed-after`` was left out), and a record whose only copy the verifier
quarantined was "not committed" to ``get``, "run it again" to a scan and
complete to ``repair``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from checks import cli_json
from conftest import poll_for
from helpers import assert_csv_rows, csv_bytes, metric_sample, scrape_metrics, to_parquet, tracker_status

from st_py.core.copy_health import user_name
from st_py.core.infofile import InfofileReader
from st_py.errors import RecordsUnavailableError, RecordUnavailableError


def _part(i: int) -> bytes:
    return to_parquet(pa.table({"i": pa.array(range(i * 100, (i + 1) * 100), pa.int64())}), compression="none")


def _repair_cli(cluster, *args: str) -> tuple[int, list[dict], str]:
    out = subprocess.run(
        [sys.executable, "-m", "st_py.cli", "repair", "--tracker", cluster.tracker_addr, "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = json.loads(out.stdout) if out.stdout.strip() else []
    return out.returncode, rows, out.stderr


def _names_on(cluster, file: str, addr: str) -> set[str]:
    """Names (an object once, for its stripes) with a copy on peer ``addr``,
    read from the infofile with plain SQL."""
    r = InfofileReader(cluster.namespace / file.lstrip("/"))
    try:
        idx = [i for i, _, a in r.peerlist() if a == addr]
        rows = r.conn.execute(f"SELECT DISTINCT name FROM copies WHERE peer_idx IN ({','.join('?' * len(idx))})", idx)
        return {user_name(n) for (n,) in rows}
    finally:
        r.close()


def test_status_and_repair_agree_about_records_waiting_for_a_failed_peer(make_cluster):
    """A peer SIGKILLed, failed for less than the tracker's --failed-after:
    status counts its records as short and waiting, repair reports the same
    records waiting and exits 1 (0 with --wait-ok); an object counts once.
    Past --failed-after (repair's override), repair restores them and
    status counts none."""
    cluster = make_cluster(4)
    c = cluster.client()
    with c.create("/cs/wait", "x2") as f:
        for i in range(40):
            f.queue_put(f"r{i:03d}", b"%d," % i * 300)
        f.put_object("big.bin", bytes(range(256)) * 40, stripe_size=2048)  # 5 stripes
    dead = cluster.kill_peer(1)
    short = _names_on(cluster, "/cs/wait", dead)

    def counted() -> dict | None:
        cp = tracker_status(cluster)["copies"]
        return cp if cp["counted"] and cp["records_short"] == len(short) else None

    cp = poll_for(counted, timeout=30, what=f"status to count the {len(short)} names on the killed peer")
    assert cp["records_waiting"] == len(short) and cp["records_lost"] == 0, cp
    assert cp["failed_after_s"] == 600
    assert metric_sample(scrape_metrics(cluster.tracker.metrics_addr), "st_tracker_records_waiting_for_peers") == len(
        short
    )
    st = cli_json(cluster, "status")
    assert (st["records_short"], st["records_waiting"], st["records_lost"]) == (len(short), len(short), 0)

    rc, rows, err = _repair_cli(cluster, "/cs/wait")
    assert rc == 1, err
    (row,) = rows
    assert row["complete"] is False and row["waiting"] == len(short) and row["lost"] == 0, row
    assert row["lost_peers"] == [] and row["waiting_until"] > 0
    rc, rows, err = _repair_cli(cluster, "--wait-ok", "/cs/wait")
    assert rc == 0, err

    rc, rows, err = _repair_cli(cluster, "--failed-after", "0", "/cs/wait")
    assert rc == 0, (rows, err)
    assert rows[0]["lost_peers"] == [dead] and rows[0]["copies_restored"] > 0 and rows[0]["complete"], rows
    poll_for(
        lambda: tracker_status(cluster)["copies"]["records_short"] == 0, timeout=30, what="status to count 0 short"
    )
    with c.open("/cs/wait") as f:
        assert f.get("r007") == b"7," * 300
        assert f.open("big.bin").read() == bytes(range(256)) * 40


def test_a_record_whose_only_copy_is_quarantined_is_lost_in_every_report(make_cluster, monkeypatch):
    """x1: one flipped byte in the only copy of a Parquet record. Once the
    verifier quarantined it, get, get_local and the Dask scan raise
    RecordUnavailableError naming the record (lost), status counts it lost,
    and repair reports it lost and exits 1, with or without --wait-ok."""
    from st_integrations.dask_reader import read_storetorrent

    cluster = make_cluster(3, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    c = cluster.client()
    with c.create("/cs/x1", replication="x1") as f:
        for i in range(6):
            f.put(f"part-{i}.parquet", _part(i))
    with c.open("/cs/x1") as f:
        (victim,) = [r for r in f.get_local() if r.name == "part-3.parquet"]
    with open(victim.path, "r+b") as fh:
        data = bytearray(fh.read())
        data[len(data) // 3] ^= 0xFF
        fh.seek(0)
        fh.write(data)

    def quarantined() -> int:
        r = InfofileReader(cluster.namespace / "cs" / "x1")
        try:
            return r.count_quarantined()
        finally:
            r.close()

    poll_for(lambda: quarantined() == 1, timeout=40, what="the verifier's quarantine to reach the infofile")

    with c.open("/cs/x1") as f:
        assert "part-3.parquet" in f.names()  # committed: its name stays until it is deleted
        with pytest.raises(RecordUnavailableError) as e:
            f.get("part-3.parquet")
        assert (e.value.record, e.value.file, e.value.lost) == ("part-3.parquet", "/cs/x1", True)
        assert "quarantined" in e.value.reason
        with pytest.raises(RecordsUnavailableError) as e2:
            f.get_local()
        assert e2.value.names == ("part-3.parquet",) and e2.value.lost and e2.value.record == "part-3.parquet"
        assert isinstance(e2.value, RecordUnavailableError)
        assert sorted(r.name for r in f.get_local(allow_unavailable=True)) == [
            f"part-{i}.parquet" for i in range(6) if i != 3
        ]
        assert f.get("part-2.parquet") == _part(2)
    with pytest.raises(RecordUnavailableError) as e3:
        read_storetorrent("/cs/x1").compute()
    assert e3.value.record == "part-3.parquet" and e3.value.lost, e3.value

    cp = poll_for(
        lambda: (cp := tracker_status(cluster)["copies"])["records_lost"] == 1 and cp,
        timeout=30,
        what="status to count the record lost",
    )
    assert cp["records_short"] == 1 and cp["records_quarantined"] == 1 and cp["records_waiting"] == 0, cp
    for args in ((), ("--wait-ok",)):
        rc, rows, err = _repair_cli(cluster, *args, "/cs/x1")
        assert rc == 1, err
        assert rows[0]["lost"] == 1 and rows[0]["complete"] is False and rows[0]["quarantined_found"] == 0, rows


def _flip(path: str) -> None:
    with open(path, "r+b") as fh:
        data = bytearray(fh.read())
        data[len(data) // 2] ^= 0xFF
        fh.seek(0)
        fh.write(data)


def _unstored(cluster, file: str) -> list[tuple]:
    """``retained_unstored`` rows of ``file``: (name, until, copy_rank, state)."""
    r = InfofileReader(cluster.namespace / file.lstrip("/"))
    try:
        return r.conn.execute("SELECT name, until, copy_rank, state FROM retained_unstored").fetchall()
    finally:
        r.close()


def _kept_holders(cluster, file: str, name: str) -> list[str]:
    """Addresses of the peers holding copies of the past versions of ``name``."""
    r = InfofileReader(cluster.namespace / file.lstrip("/"))
    try:
        addr = {i: a for i, _, a in r.peerlist()}
        rows = r.conn.execute("SELECT peer_idx FROM retained_copies WHERE name = ? ORDER BY copy_rank", (name,))
        return [addr[i] for (i,) in rows]
    finally:
        r.close()


def test_a_kept_version_s_quarantined_copy_is_counted_and_restored_by_repair(make_cluster):
    """x2: a snapshot keeps a deleted record; the verifier quarantines one
    copy of that past version. Status counts one version short (no record),
    repair's dry run finds it and exits 1, repair stores it again on
    another peer and exits 0, status then counts none, and the snapshot
    reads the old bytes from the restored copy with the other holder
    SIGKILLed (docs/snapshots.md, "Maintenance")."""
    cluster = make_cluster(4, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    c = cluster.client()
    want = {f"r{i:02d}": b"kept %d " % i * 200 for i in range(10)}
    with c.create("/cs/kept", "x2") as f:
        for n, v in want.items():
            f.queue_put(n, v)
    c.snapshot("/cs/kept", "s")
    with c.open("/cs/kept") as f:
        f.delete("r03")
    with c.open("/cs/kept", as_of="s") as f:
        (victim,) = [r for r in f.get_local() if r.name == "r03"]
    before = _kept_holders(cluster, "/cs/kept", "r03")
    assert len(before) == 2 and victim.peer in before, (before, victim.peer)
    _flip(victim.path)
    poll_for(lambda: len(_unstored(cluster, "/cs/kept")) == 1, timeout=40, what="the verifier's quarantine of r03")
    assert _unstored(cluster, "/cs/kept")[0][3] == "quarantined"

    def counted(n: int):
        def check():
            cp = tracker_status(cluster)["copies"]
            return cp if cp["counted"] and cp["versions_short"] == n else None

        return check

    cp = poll_for(counted(1), timeout=30, what="status to count the version short of a copy")
    assert cp["versions_lost"] == 0 and cp["records_short"] == 0 and cp["files_short"] == 1, cp
    rc, rows, err = _repair_cli(cluster, "--dry-run", "/cs/kept")
    assert rc == 1 and rows[0]["versions_unstored_found"] == 1 and rows[0]["versions_short"] == 1, (rows, err)
    rc, rows, err = _repair_cli(cluster, "/cs/kept")
    assert rc == 0 and rows[0]["versions_stored"] == 1 and rows[0]["complete"] is True, (rows, err)
    assert _unstored(cluster, "/cs/kept") == []
    poll_for(counted(0), timeout=30, what="status to count no version short after repair")

    after = _kept_holders(cluster, "/cs/kept", "r03")
    (good,) = set(before) - {victim.peer}
    assert len(after) == 2 and victim.peer not in after and good in after, (before, after, victim.peer)
    cluster.kill_peer(cluster.peer_addrs.index(good))  # left: the restored copy alone
    with c.open("/cs/kept", as_of="s") as f:
        assert f.get("r03") == want["r03"]
    with c.open("/cs/kept") as f:
        assert "r03" not in f.names()


def test_a_kept_version_whose_only_copy_is_quarantined_is_lost_in_every_report(make_cluster):
    """x1: the only copy of a deleted record a snapshot keeps is quarantined.
    Reading it as of the snapshot raises RecordUnavailableError (lost,
    naming the quarantine), status counts the version lost, repair reports
    it lost and exits 1; the current generation is unaffected."""
    cluster = make_cluster(3, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    c = cluster.client()
    with c.create("/cs/kept1", "x1") as f:
        for i in range(6):
            f.put(f"r{i}", b"only %d " % i * 300)
    c.snapshot("/cs/kept1", "s")
    with c.open("/cs/kept1") as f:
        f.delete("r2")
    with c.open("/cs/kept1", as_of="s") as f:
        (victim,) = [r for r in f.get_local() if r.name == "r2"]
    _flip(victim.path)
    poll_for(lambda: len(_unstored(cluster, "/cs/kept1")) == 1, timeout=40, what="the verifier's quarantine of r2")
    with c.open("/cs/kept1", as_of="s") as f:
        assert "r2" in f.names()
        with pytest.raises(RecordUnavailableError) as e:
            f.get("r2")
        assert (e.value.record, e.value.lost) == ("r2", True) and "quarantined" in e.value.reason, e.value
        with pytest.raises(RecordsUnavailableError) as e2:
            f.get_local()
        assert e2.value.names == ("r2",) and e2.value.lost, e2.value
        assert sorted(r.name for r in f.get_local(allow_unavailable=True)) == ["r0", "r1", "r3", "r4", "r5"]
        assert f.get("r1") == b"only 1 " * 300
    cp = poll_for(
        lambda: (cp := tracker_status(cluster)["copies"])["versions_lost"] == 1 and cp,
        timeout=30,
        what="status to count the version lost",
    )
    assert cp["versions_short"] == 1 and cp["records_short"] == 0, cp
    rc, rows, err = _repair_cli(cluster, "/cs/kept1")
    assert rc == 1 and rows[0]["versions_lost"] == 1 and rows[0]["versions_stored"] == 0, (rows, err)
    with c.open("/cs/kept1") as f:
        assert sorted(f.names()) == ["r0", "r1", "r3", "r4", "r5"]


# -- kept versions of every kind (docs/composition.md: the kinds of the matrix) ----------
# A snapshot keeps a deleted record or object of a filtered file, or a striped
# object's stripes; a copy of that kept version is quarantined by the verifier;
# repair stores it again while threads read the snapshot; every way in reads
# the snapshot from the restored copy with the other holder SIGKILLed.

KEY = bytes(range(32))


def _kept_names(cluster, file: str) -> list[str]:
    r = InfofileReader(cluster.namespace / file.lstrip("/"))
    try:
        return sorted({n for (n,) in r.conn.execute("SELECT name FROM retained_copies")})
    finally:
        r.close()


@pytest.mark.parametrize(
    "kind,filters",
    [("record", ["zstd", "aes-256-gcm"]), ("object", []), ("object", ["zstd", "aes-256-gcm"])],
    ids=["record-zstd-aes", "object", "object-zstd-aes"],
)
def test_a_kept_version_of_every_kind_is_restored_by_repair_and_read_every_way(
    make_cluster, monkeypatch, kind, filters
):
    """x2, the kinds of the composition matrix a snapshot can keep: a record
    of a zstd+aes file, a striped object, a striped object of a zstd+aes
    file. The verifier quarantines one copy of the kept version (a stripe,
    for an object); status counts it short; repair stores it again while 4
    threads read the snapshot through one Client (every read the old
    bytes); with the other holder SIGKILLed, the Client, get_local /
    local_stripes, fsspec, Dask and DuckDB read the snapshot from the
    restored copy."""
    import threading

    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.duckdb_sql import connect_files
    from st_integrations.fsspec_fs import StoreTorrentFileSystem
    from st_py.core.infofile import STRIPE_PREFIX

    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", KEY.hex())  # the CLI and the read tasks find it here too
    cluster = make_cluster(4, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    c = cluster.client()
    file = f"/cs/kept-{kind}-{'-'.join(filters) or 'plain'}"
    if kind == "record":
        want = {f"part-{p}.csv": csv_bytes(p, 60) for p in range(4)}
        gone = "part-2.csv"
    else:
        want = {"big.csv": csv_bytes(9, 300)}  # about 3.4 KB: 5 stripes of 700 bytes
        gone = "big.csv"
    with c.create(file, "x2", filters=filters, blocksize=1) as f:
        for n, v in want.items():
            if kind == "object":
                f.put_object(n, v, stripe_size=700)
            else:
                f.put(n, v)
    c.snapshot(file, "s")
    with c.open(file) as f:
        f.delete(gone)
        assert gone not in f.names()

    with c.open(file, as_of="s") as f:  # the copy to spoil: a record's, or stripe 1 of the object
        if kind == "object":
            (victim,) = [s for s in f.local_stripes() if s.index == 1]
            stripes = [n for n in _kept_names(cluster, file) if n.startswith(STRIPE_PREFIX)]
            (kept_name,) = [n for n in stripes if int(n.rsplit("/", 1)[1]) == 1]
        else:
            (victim,) = [r for r in f.get_local() if r.name == gone]
            kept_name = gone
    before = _kept_holders(cluster, file, kept_name)
    assert len(before) == 2 and victim.peer in before, (before, victim.peer)
    _flip(victim.path)
    poll_for(lambda: len(_unstored(cluster, file)) == 1, timeout=40, what=f"the verifier's quarantine of {kept_name}")
    cp = poll_for(
        lambda: (cp := tracker_status(cluster)["copies"])["counted"] and cp["versions_short"] == 1 and cp,
        timeout=30,
        what="status to count the version short of a copy",
    )
    assert cp["versions_lost"] == 0 and cp["records_short"] == 0, cp

    # repair, while 4 threads read the snapshot through one shared Client
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                with c.open(file, as_of="s") as f:
                    assert f.get(gone) == want[gone]
                reads[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        rc, rows, err = _repair_cli(cluster, file)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert reads[0] > 0
    assert rc == 0 and rows[0]["versions_stored"] == 1 and rows[0]["complete"] is True, (rows, err)
    assert _unstored(cluster, file) == []
    poll_for(
        lambda: tracker_status(cluster)["copies"]["versions_short"] == 0,
        timeout=30,
        what="status to count no version short after repair",
    )
    after = _kept_holders(cluster, file, kept_name)
    (good,) = set(before) - {victim.peer}
    assert len(after) == 2 and victim.peer not in after and good in after, (before, after, victim.peer)

    cluster.kill_peer(cluster.peer_addrs.index(good))  # left: the restored copy alone
    with c.open(file, as_of="s") as f:  # Client
        assert sorted(f.names()) == sorted(want)
        assert {n: f.get(n) for n in want} == want
        if kind == "object":
            stripes = f.local_stripes()
            got = bytearray(len(want[gone]))
            for s in stripes:
                got[s.offset : s.offset + s.size] = f.read_local_stripe(s)
            assert bytes(got) == want[gone]
        else:
            revealed = f.get_local()
            assert sorted(r.name for r in revealed) == sorted(want)
            assert {r.name: f.read_local(r) for r in revealed} == want
    fs = StoreTorrentFileSystem(tracker=cluster.tracker_addr, as_of="s")  # fsspec
    assert fs.cat_file(f"{file}/{gone}") == want[gone]
    assert fs.info(f"{file}/{gone}")["size"] == len(want[gone])
    assert_csv_rows(read_storetorrent(file, tracker=cluster.tracker_addr, as_of="s").compute(), want)  # Dask
    con = connect_files(c, [file], data=True, as_of="s")  # DuckDB
    try:
        assert con.execute("SELECT name, size FROM records ORDER BY name").fetchall() == [
            (n, len(d)) for n, d in sorted(want.items())
        ]
        if kind == "object":  # the kept object's stripes, each once, found by the stripes' name range
            q = "SELECT count(*), count(DISTINCT stripe) FROM stripes WHERE object = ?"
            n = -(-len(want[gone]) // 700)
            assert con.execute(q, [gone]).fetchone() == (n, n)
        assert_csv_rows(con.execute("SELECT i, part, v FROM records_data").fetch_arrow_table(), want)
    finally:
        con.close()
    with c.open(file) as f:  # the current generation: the deletion stands
        assert gone not in f.names()
