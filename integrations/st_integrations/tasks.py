"""The per-peer read task shared by the Ray and Dask readers.

A task gets only plain picklable arguments (the peer address and the
GetLocalPlan); it asks that peer for the records revealed to its node and
reads them from local disk into one Arrow table (paper 3.7: "receives a list
of local UNIX file pathnames. It then processes each in turn").
"""

from __future__ import annotations

import pyarrow as pa

from st_py.getlocal import GetLocalPlan, reveal_ring

from .decoders import Decoder, decode_file


def read_peer(peer: str, plan: GetLocalPlan, schema: pa.Schema, decoder: Decoder | None = None,
              record_column: str | None = None) -> tuple[pa.Table, tuple[int, tuple[str, ...]]]:
    """Read every record ``peer`` reveals as one table with ``schema``.

    Returns
    -------
    (table, (records revealed, ring that answered))
        the second item goes to :func:`check_complete`.
    """
    decode = decoder or decode_file
    tables = []
    records, ring = reveal_ring(peer, plan)
    for r in records:
        t = decode(r.name, r.path)
        if record_column:
            t = t.append_column(record_column, pa.array([r.name] * t.num_rows, pa.string()))
        tables.append(t)
    if not tables:
        return schema.empty_table(), (0, ring)
    table = pa.concat_tables(tables, promote_options="permissive")
    if table.schema != schema:
        table = table.select(schema.names).cast(schema)
    return table, (len(records), ring)


def sample_schema(f, decoder: Decoder | None, record_column: str | None) -> pa.Schema:
    """The schema of the file's records, from one record fetched with GET."""
    import os
    import tempfile

    from .decoders import decode_bytes

    names = f.names()
    if not names:
        return pa.schema([("record", pa.string()), ("data", pa.binary())])
    data = f.get(names[0])
    if decoder is None:
        t = decode_bytes(names[0], data)
    else:
        fd, path = tempfile.mkstemp(prefix="st-sample-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            t = decoder(names[0], path)
        finally:
            os.unlink(path)
    if record_column:
        t = t.append_column(record_column, pa.array([names[0]] * t.num_rows, pa.string()))
    return t.schema


def plan_read(name: str, tracker: str | None, decoder: Decoder | None, record_column: str | None):
    """On the driver: the GET_LOCAL plan and the records' schema of file
    ``name``, shared by the Ray and Dask readers."""
    from st_py.client import Client

    client = Client(tracker)
    try:
        with client.open(name) as f:
            return f.get_local_plan(), sample_schema(f, decoder, record_column)
    finally:
        client.close()


def check_complete(plan: GetLocalPlan, parts: list[tuple[int, tuple[str, ...]]]) -> None:
    """Every committed record must be revealed exactly once (paper 3.7):
    every task answered from the same ring, and the counts add up to the
    plan's ``expected``.

    Parameters
    ----------
    parts : list of (records revealed, ring) from :func:`read_peer`

    Raises
    ------
    st_py.GetLocalError
        Saying how many records are missing and which peers are down, or that
        a peer failed during the scan so that tasks used different rings.
    """
    from st_py.errors import GetLocalError

    rings = {ring for _, ring in parts}
    if len(rings) > 1:
        raise GetLocalError(
            f"a peer failed during the GET_LOCAL scan of {plan.file_name}: its tasks were answered by "
            f"{len(rings)} different rings ({' / '.join(','.join(r) for r in sorted(rings))}), so records "
            "could be revealed twice or not at all; run the scan again")
    total = sum(n for n, _ in parts)
    if total != plan.expected:
        raise GetLocalError(
            f"GET_LOCAL revealed {total} of the {plan.expected} records of {plan.file_name} it should "
            f"({plan.records} committed at generation {plan.generation}, {plan.unavailable} without a live "
            f"copy; peers down: {', '.join(plan.dead) or 'none'}; class x{plan.copies} tolerates "
            f"{plan.copies - 1}). A peer failed or the file changed during the scan: run it again, "
            "or restart the peers / rebalance")
