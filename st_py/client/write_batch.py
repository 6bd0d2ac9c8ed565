"""A write batch: many records handed to an open file in one call
(leveldb's ``WriteBatch``; docs/client.md, "Write batches").

:class:`WriteBatch` collects ``(name, data)`` pairs with :meth:`WriteBatch.put`;
``StFile.write(batch)`` stores them. :func:`table_columns` turns an Arrow
table (or record batches) with a name column and a data column into the same
two lists, for ``StFile.write_table``. Nothing here talks to the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

from st_py.errors import InvalidOptionError


class WriteBatch:
    """Records to write together: ``batch.put(name, data)`` ...
    ``f.write(batch)``. The batch keeps references to the data (no copy)
    until it is written or cleared; a batch may be written to several
    files, or again after :meth:`clear` and new puts.

    Thread safety: not safe to share between threads while one of them
    puts into it (a list per batch: build one per thread).
    """

    __slots__ = ("names", "datas", "nbytes")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.datas: list = []
        self.nbytes = 0  # the records' bytes so far

    def put(self, name: str, data: bytes | bytearray | memoryview) -> None:
        """Add record ``name`` with ``data`` (bytes-like). Names are checked
        when the batch is written (``StFile.write``), with the rules of
        ``StFile.put``."""
        self.names.append(name)
        self.datas.append(data)
        self.nbytes += len(data)

    def clear(self) -> None:
        """Forget every record put so far."""
        self.names.clear()
        self.datas.clear()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"<WriteBatch {len(self.names)} records, {self.nbytes} bytes>"


def table_columns(table, name_column: str = "name", data_column: str = "data") -> tuple[list[str], list[bytes]]:
    """The names and the data of an Arrow table's records, one record a row.

    Parameters
    ----------
    table : pyarrow.Table, pyarrow.RecordBatch, or an iterable of RecordBatch
    name_column : str
        A ``string`` or ``large_string`` column: the record names.
    data_column : str
        A ``binary``, ``large_binary`` or ``fixed_size_binary`` column: the records.

    Returns
    -------
    (list of str, list of bytes)

    Raises
    ------
    InvalidOptionError
        A column is missing, of another type, or has nulls (which names no
        record, or no bytes).
    """
    import pyarrow as pa

    if isinstance(table, pa.RecordBatch):
        batches: Iterable = [table]
    elif isinstance(table, pa.Table):
        batches = table.to_batches()
    else:
        batches = table
    names: list[str] = []
    datas: list[bytes] = []
    for rb in batches:
        for col, want in ((name_column, "name"), (data_column, "data")):
            if col not in rb.schema.names:
                raise InvalidOptionError(
                    f"the table has no column {col!r} (its columns: {', '.join(rb.schema.names)}): "
                    f"pass {want}_column= the column holding the record {want}s",
                    f"{want}_column",
                    col,
                )
        n, d = rb.column(name_column), rb.column(data_column)
        if not (pa.types.is_string(n.type) or pa.types.is_large_string(n.type)):
            raise InvalidOptionError(
                f"name column {name_column!r} is {n.type}: record names are a string or large_string column",
                "name_column",
                name_column,
            )
        t = pa.types
        if not (t.is_binary(d.type) or t.is_large_binary(d.type) or t.is_fixed_size_binary(d.type)):
            raise InvalidOptionError(
                f"data column {data_column!r} is {d.type}: records are a binary, large_binary or "
                "fixed_size_binary column",
                "data_column",
                data_column,
            )
        for col, arr in ((name_column, n), (data_column, d)):
            if arr.null_count:
                raise InvalidOptionError(
                    f"column {col!r} has {arr.null_count} null(s): every row is a record with a name and bytes",
                    "name_column" if col == name_column else "data_column",
                    col,
                )
        names += n.to_pylist()
        datas += d.to_pylist()
    return names, datas


__all__ = ["WriteBatch", "table_columns"]
