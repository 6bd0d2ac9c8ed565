"""A random history of an infofile's changes through the tracker's real
apply path (a Committer over the metadata log), and table-for-table dumps:
used by tests/test_oplog.py (replays) and tests/test_infofile_copies.py
(copies brought forward by changesets)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable

from st_py.core import user_meta
from st_py.tracker.committer import Committer
from st_py.tracker.infofile_writer import create_infofile


def dump(path) -> dict[str, list]:
    """Every row of every table of an infofile, sorted."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in sorted(tables)}
    finally:
        conn.close()


def copy(src, dst) -> None:
    """A consistent copy of an SQLite file (the online backup)."""
    a, b = sqlite3.connect(str(src)), sqlite3.connect(str(dst))
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()


async def random_history(
    c: Committer,
    rng: random.Random,
    steps: int,
    copies_at: dict[int, object],
    before_step: Callable[[int], None] | None = None,
) -> None:
    """Commits (some with pending copy ranks, some with user metadata), new
    versions, history pruned, deletes, snapshots, moves,
    peerlist growth and meta changes, as the tracker's handlers make them;
    ``copies_at[step]`` is a path to copy the infofile to before that step,
    ``before_step(step)`` is called before each step (after its copy)."""
    names: list[str] = []
    npeers = 3
    for step in range(steps):
        if step in copies_at:
            copy(c.writer.path, copies_at[step])
        if before_step is not None:
            before_step(step)
        roll = rng.random()
        if roll < 0.45 or not names:
            batch = []
            for _ in range(rng.randint(1, 20)):
                n = f"d{rng.randint(0, 3)}/r{len(names) + len(batch):05d}"
                peers = rng.sample(range(npeers), 2)
                pending = {1} if rng.random() < 0.2 else set()
                rec = (n, rng.randint(1, 10_000), rng.getrandbits(32), peers, pending)
                if rng.random() < 0.3:  # with user metadata (element 9 of a commit's record)
                    rec += ("", None, None, False, user_meta_blob(rng))
                batch.append(rec)
            await c.commit(batch, request_id=f"req-{step}")
            names += [r[0] for r in batch]
        elif roll < 0.52:  # a new version of a record, with other user metadata (or none)
            n = rng.choice(names)
            peers = rng.sample(range(npeers), 2)
            meta = user_meta_blob(rng) if rng.random() < 0.7 else None
            rec = (n, rng.randint(1, 10_000), rng.getrandbits(32), peers, set(), f".st-version/{step}", None, None)
            await c.commit([(*rec, False, meta)], request_id=f"req-{step}")
        elif roll < 0.55:  # history dropped (and its user metadata with it)
            await c.write("prune", 2_000_000_000.0)
        elif roll < 0.6:
            gone = rng.sample(names, min(len(names), rng.randint(1, 5)))
            await c.write("delete_records", gone)
            names = [n for n in names if n not in gone]
        elif roll < 0.7:
            await c.write("create_snapshot", f"s{step}", "alice")
        elif roll < 0.85:
            n = rng.choice(names)
            row = c.writer.conn.execute("SELECT copy_rank, peer_idx FROM copies WHERE name = ?", (n,)).fetchall()
            held = {p for _, p in row}
            free = [p for p in range(npeers) if p not in held]
            if row and free:
                rank, old = row[0]
                await c.write("move_copies", [(n, rank, old, rng.choice(free))])
        elif roll < 0.9:
            await c.add_peers([(f"peer-{npeers}", f"127.0.0.1:{9000 + npeers}")])
            npeers += 1
        else:
            await c.set_meta({"mode": str(rng.choice([0o640, 0o600, 0o644]))})


def user_meta_blob(rng: random.Random) -> bytes:
    """An encoded user metadata map (st_py/core/user_meta.py)."""
    return user_meta.encode("r", {"content-type": rng.choice(["text/plain", "image/png"]), "k": str(rng.random())})


def new_file(tmp_path):
    path = tmp_path / "ns" / "f"
    create_infofile(path, {"file_id": 7, "copies": 2, "name": "/f"}, [(i, f"p{i}", f"h:{i}") for i in range(3)])
    return path
