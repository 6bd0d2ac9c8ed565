"""Many small records written by an engine (issue 41, target "a Ray or Dask
write of 10^6 small records at >= 0.5 of the same engine writing the same
records as local files"; docs/benchmarks.md, "Small records from Dask").

A Dask DataFrame of ``n`` rows (a name and ``RECORD`` bytes each, in
``PARTS`` partitions) on a local Dask cluster of 2 worker processes is
written by ``to_storetorrent(ddf, name, "x1", format="records")`` (each row
one record, through the write batch path, one atomic job) and, as the
baseline, by the same Dask cluster writing each row as a file of its own
into a folder of the peers' disk (``map_partitions``: open, write, close per
row; no sync, as the peers do not sync). Alternated over ``rounds``
rounds, medians; the committed count and the files written are checked,
and a sample of records is read back and compared.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import time
from pathlib import Path

from .cases import fresh_cluster, row

GROUP = "engine_records"
RECORD = 256
PARTS = 16


def _frame(n: int):
    import pandas as pd
    import pyarrow as pa

    body = os.urandom(RECORD)
    names = [f"r{i:08d}" for i in range(n)]
    datas = [i.to_bytes(8, "little") + body[8:] for i in range(n)]
    return pd.DataFrame({"name": names, "data": pd.Series(datas, dtype=pd.ArrowDtype(pa.binary()))})


def _write_files(df, folder: str):
    import pandas as pd

    for name, data in zip(df["name"], df["data"]):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return pd.DataFrame({"n": [len(df)]})


def case_engine_records(tmp: Path, n: int, rounds: int = 3) -> list[dict]:
    """Rows ``dask_write_records`` (records/s, the local-file write as the
    baseline; target >= 0.5) with both sides' times in the note."""
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    from st_integrations.dask_writer import to_storetorrent

    cluster = fresh_cluster(tmp, "engine-records-").start()
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    times: dict[str, list[float]] = {"st": [], "files": []}
    try:
        frame = _frame(n)
        scratch = Path(cluster.data_dir) / "baseline-engine-records"
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dc,
            Client(dc) as dclient,
        ):
            ddf = dd.from_pandas(frame, npartitions=PARTS).persist()
            for k in range(rounds):
                t = time.perf_counter()
                name = f"/bench/engine-records-{k}"
                got = to_storetorrent(ddf, name, "x1", format="records", tracker=cluster.tracker_addr, client=dclient)
                times["st"].append(time.perf_counter() - t)
                assert got == n, (got, n)
                folder = scratch / str(k)
                folder.mkdir(parents=True)
                meta = pd.DataFrame({"n": pd.Series([], dtype="int64")})
                t = time.perf_counter()
                wrote = ddf.map_partitions(_write_files, str(folder), meta=meta).compute()
                times["files"].append(time.perf_counter() - t)
                assert int(wrote["n"].sum()) == n and len(os.listdir(folder)) == n
        with cluster.client() as c, c.open("/bench/engine-records-0") as f:
            assert len(f) == n
            for i in range(0, n, max(1, n // 100)):
                assert f.get(f"r{i:08d}") == frame["data"].iloc[i], i
        shutil.rmtree(scratch, ignore_errors=True)
    finally:
        quiet.setLevel(level)
        cluster.stop()
    med = statistics.median
    spread = "; ".join(f"{k} " + "/".join(f"{x:.2f}" for x in v) for k, v in times.items())
    return [
        row(
            "dask_write_records",
            n / med(times["st"]),
            "records/s",
            "the same Dask cluster writing each row as a local file (open, write, close)",
            n / med(times["files"]),
            note=f"{n:,} records of {RECORD} B in {PARTS} partitions, 2 Dask workers, x1 on 4 peers, "
            f'to_storetorrent(format="records"); medians of {rounds} alternated rounds (s: {spread})',
        )
    ]
