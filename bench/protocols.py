"""Duplication protocols against each other (issue 12; docs/replication.md).

PUT throughput of 1 MiB and 4 KiB records, classes x2 and x3, for every
protocol, in one run on one 4-peer cluster: until every copy is stored and
committed (the file closed), and for the async protocols also until every PUT
is acknowledged (what a writer waits for). The baseline of each row is
``client-sync`` (the paper's protocol) on the same records and class, so the
ratio says what the protocol buys. Runs are alternated across protocols for
``rounds`` rounds after a sync, and the medians are reported.

CEFT (seed 001, section 5.4, one client) ranks its protocols: server-async
(our ``chain-async``) >= server-sync (``chain``) and client-async >=
client-sync, the asynchronous ones ahead by 28% and 15% at peak.
"""

from __future__ import annotations

import os
import statistics
import time

from st_py.core.replication import PROTOCOLS

from .cases import MiB, row

GROUP = "protocols"


def _put(cluster, name: str, records, replication: str, protocol: str, depth: int) -> tuple[float, float]:
    """Seconds until every PUT of ``records`` is acknowledged, and until the
    file is closed (every copy stored and committed, whatever the protocol)."""
    c = cluster.client(depth=depth)
    try:
        f = c.create(name, replication=replication, protocol=protocol, est_size=sum(len(d) for _, d in records))
        t0 = time.perf_counter()
        futs = [f.queue_put(n, d) for n, d in records]
        while not all(p.done() for p in futs):
            f.poll(0.001)
        acked = time.perf_counter() - t0
        f.close()
        return acked, time.perf_counter() - t0
    finally:
        c.close()


def case_protocols(cluster, n_1mib: int, n_4kib: int, rounds: int = 3) -> list[dict]:
    out = []
    seq = 0
    for label, size, n, depth in (("1mib", MiB, n_1mib, 16), ("4kib", 4096, n_4kib, 64)):
        data = os.urandom(size)
        records = [(f"p{i:07d}", data) for i in range(n)]
        for replication in ("x2", "x3"):
            rates: dict[str, list[float]] = {p: [] for p in PROTOCOLS}
            acks: dict[str, list[float]] = {p: [] for p in PROTOCOLS}
            os.sync()
            for _ in range(rounds):
                for protocol in PROTOCOLS:
                    seq += 1
                    t_ack, t_all = _put(cluster, f"/bench/proto/{seq}", records, replication, protocol, depth)
                    per = n * size if size == MiB else n
                    rates[protocol].append(per / t_all)
                    acks[protocol].append(per / t_ack)
            unit = "B/s" if size == MiB else "records/s"
            base, base_ack = statistics.median(rates["client-sync"]), statistics.median(acks["client-sync"])
            note = f"median of {rounds} alternated rounds of {n} records"
            for protocol in PROTOCOLS:
                out.append(
                    row(
                        f"protocol_{protocol}_{label}_{replication}",
                        statistics.median(rates[protocol]),
                        unit,
                        f"client-sync, {label} {replication}",
                        base,
                        note=note + "; until every copy is stored and committed",
                    )
                )
                if "async" in protocol:
                    out.append(
                        row(
                            f"protocol_{protocol}_{label}_{replication}_ack",
                            statistics.median(acks[protocol]),
                            unit,
                            f"client-sync, {label} {replication}",
                            base_ack,
                            note=note + "; until every PUT is acknowledged",
                        )
                    )
    return out
