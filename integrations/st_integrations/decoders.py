"""Turning one record file into Arrow.

Records may hold an Arrow IPC stream or file, Parquet, or raw bytes. Raw
records become one row ``(record: string, data: binary)``. A user decoder is a
callable ``decoder(name: str, path: str) -> pyarrow.Table``.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa

Decoder = Callable[[str, str], pa.Table]

RAW_SCHEMA = pa.schema([("record", pa.string()), ("data", pa.binary())])


def sniff(head: bytes) -> str:
    """The format of a record from its first bytes: arrow-file, arrow-stream,
    parquet or raw."""
    if head.startswith(b"ARROW1"):
        return "arrow-file"
    if head.startswith(b"\xff\xff\xff\xff") or (len(head) >= 8 and head[4:8] == b"\xff\xff\xff\xff"):
        return "arrow-stream"
    if head.startswith(b"PAR1"):
        return "parquet"
    return "raw"


def decode_bytes(name: str, data: bytes) -> pa.Table:
    """Decode a record held in memory (e.g. fetched with GET)."""
    kind = sniff(data[:8])
    if kind == "arrow-file":
        return pa.ipc.open_file(pa.py_buffer(data)).read_all()
    if kind == "arrow-stream":
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(pa.BufferReader(data))
    return pa.table({"record": [name], "data": [data]}, schema=RAW_SCHEMA)


def decode_file(name: str, path: str) -> pa.Table:
    """Decode a record file read from local disk (GET_LOCAL), memory-mapped
    for Arrow formats."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    kind = sniff(head)
    if kind == "arrow-file":
        with pa.memory_map(path) as src:
            return pa.ipc.open_file(src).read_all()
    if kind == "arrow-stream":
        with pa.memory_map(path) as src:
            return pa.ipc.open_stream(src).read_all()
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    with open(path, "rb") as fh:
        return pa.table({"record": [name], "data": [fh.read()]}, schema=RAW_SCHEMA)
