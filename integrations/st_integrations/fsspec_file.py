"""The file object of the fsspec filesystem: one record, read whole on
first use or buffered and stored as one record on close. Returned by
:meth:`st_integrations.fsspec_fs.StoreTorrentFileSystem.open`; it reaches
StoreTorrent only through that filesystem (``read_record``, ``record_details``,
``write_record``).
"""

from __future__ import annotations

import io

from fsspec.spec import AbstractBufferedFile


class StoreTorrentRecordFile(AbstractBufferedFile):
    """A file object on one record (from :meth:`StoreTorrentFileSystem.open`).

    Reading: the whole record is fetched by the first read and kept, so
    seeks and ranged reads (Parquet footers, column chunks) cost nothing
    more. Writing: bytes are buffered and stored as one record on close.
    """

    def __init__(
        self,
        fs,
        path,
        mode="rb",
        block_size=None,
        autocommit=True,
        cache_type="none",
        cache_options=None,
        size=None,
        record=None,
        replication=None,
        **kwargs,
    ):
        self._record = record
        self._data = None
        self._replication = replication
        self._pending = None
        super().__init__(
            fs,
            path,
            mode,
            block_size,
            autocommit,
            cache_type=cache_type,
            cache_options=cache_options,
            size=size,
            **kwargs,
        )

    @property
    def details(self):
        """fsspec ``AbstractBufferedFile``: the record's info dict (as
        ``fs.info`` gives it), read from the infofile on first use."""
        if self._details is None:
            fname, rname, meta = self._record
            self._details = self.fs.record_details(fname, rname, f"{fname}/{rname}", meta)
        return self._details

    @details.setter
    def details(self, value):
        self._details = value
        self.size = value["size"]

    def _fetch_range(self, start, end):
        """Bytes ``[start, end)`` of the record (the whole record is fetched once)."""
        if self._data is None:
            fname, rname, meta = self._record
            self._data = self.fs.read_record(fname, rname, meta)
        return self._data[start:end]

    def _upload_chunk(self, final=False):
        if not final:
            return False  # keep buffering: a record is one PUT
        data = self.buffer.getvalue()
        if self.autocommit:
            self.fs.write_record(self.path, data, self._replication, replace=self.mode == "wb")
        else:
            self._pending = data  # stored by commit() when the fsspec transaction ends
        return True

    def close(self):
        """Close; in write mode store and commit the record first.

        Unlike the base class this does not call ``fs.invalidate_cache``:
        record metadata is read from the infofile at every use, so there is
        nothing stale to drop after a write."""
        if self.mode == "rb" or self.closed or getattr(self, "_unclosable", False):
            return super().close()
        try:
            if not self.forced:
                self.flush(force=True)
        finally:
            self.closed = True

    def __exit__(self, exc_type, exc, tb):
        """Leaving a ``with`` block by an exception stores nothing in write
        mode: a record is write-once, so a partial one would have to be
        deleted before its name could be used again."""
        if exc_type is not None and self.mode != "rb" and not self.closed:
            self.discard()
            self.buffer = io.BytesIO()
            self.closed = True
            return
        self.close()

    def commit(self):
        """Store the record (at the end of an fsspec transaction)."""
        if self._pending is not None:
            data, self._pending = self._pending, None
            self.fs.write_record(self.path, data, self._replication, replace=self.mode == "wb")

    def discard(self):
        """Drop the record written but not stored (an fsspec transaction
        that ended with an error): nothing is stored."""
        self._pending = None
