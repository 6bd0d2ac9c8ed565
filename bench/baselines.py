"""The physical baselines: what this machine does without StoreTorrent."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pyarrow as pa


def local_write(folder: Path, records: list[tuple[str, bytes]], copies: int = 1) -> float:
    """One process creates, writes and renames each record ``copies`` times
    into ``folder`` (the peer's atomic PUT, minus the network). Returns seconds."""
    dirs = []
    for c in range(copies):
        d = folder / f"copy{c}"
        d.mkdir(parents=True, exist_ok=True)
        dirs.append(d)
    t0 = time.perf_counter()
    for name, data in records:
        for d in dirs:
            tmp = d / (".tmp-" + name)
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.rename(tmp, d / name)
    return time.perf_counter() - t0


def tcp_stream(records: list[bytes]) -> float:
    """One loopback TCP stream carrying the same bytes. Returns seconds."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    total = sum(len(r) for r in records)

    def send():
        c = socket.create_connection(srv.getsockname())
        for r in records:
            c.sendall(r)
        c.close()

    t0 = time.perf_counter()
    th = threading.Thread(target=send)
    th.start()
    conn, _ = srv.accept()
    buf = bytearray(1 << 20)
    got = 0
    while got < total:
        n = conn.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.perf_counter() - t0
    th.join()
    conn.close()
    srv.close()
    return dt


def pyarrow_read(paths: list[str]) -> tuple[float, int]:
    """pyarrow reads the record files (Arrow IPC streams) into one process,
    with real reads (no memory map). Returns (seconds, rows)."""
    t0 = time.perf_counter()
    rows = 0
    for p in paths:
        with open(p, "rb") as fh:
            rows += pa.ipc.open_stream(pa.py_buffer(fh.read())).read_all().num_rows
    return time.perf_counter() - t0, rows
