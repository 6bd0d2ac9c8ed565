"""Staged records as columns: what a staged writer's records are until one
commit makes a whole job visible (paper 3.5; docs/analysis.md, "Writing").

A write job's tasks each hand their staged records to the driver, which
commits all of them in one tracker transaction. A job of 10^6 small records
hands 10^6 of them: as one plain dict each, building the dicts, pickling
them to the driver (Dask, Ray) and reading them back into the commit's
columns cost about as much as the tracker's commit itself (issue 41,
"Small records from Dask" in docs/benchmarks.md). :class:`StagedRecords`
keeps them as columns from the group committer to the commit; the dicts
of :meth:`st_py.client.file.StFile.staged_commits` are a view of it.

Thread-safety: a :class:`StagedRecords` is plain data, not shared while
built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

KEYS = ("name", "size", "crc32c", "peer_idx", "schema", "logical_size", "meta", "stored_as")


@dataclass
class StagedRecords:
    """Records stored on every holder and not committed, column by column
    (row ``i`` of every list is record ``i``).

    Attributes
    ----------
    names : list of str
    sizes : list of int
        Bytes of one copy as stored (after the file's filters).
    crc32c : list of int
        CRC-32C of the stored bytes.
    peer_idx : list of list of int
        The holders' indexes in the file's peerlist, by copy rank.
    schemas : list
        ``(format, Arrow IPC schema bytes)`` of the record, or None.
    logical_sizes : list
        The user's bytes (before filters), or None when not known.
    metas : list of bytes
        The encoded user metadata, ``b""``: none.
    stored_as : list of str
        The name of its own the record's copies are stored under when a
        kept version holds its name (docs/snapshots.md), else ``""``.
    """

    names: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    crc32c: list[int] = field(default_factory=list)
    peer_idx: list[list[int]] = field(default_factory=list)
    schemas: list = field(default_factory=list)
    logical_sizes: list = field(default_factory=list)
    metas: list[bytes] = field(default_factory=list)
    stored_as: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.names)

    def extend(self, other: StagedRecords) -> None:
        """Append ``other``'s records (another task's), in order."""
        self.names += other.names
        self.sizes += other.sizes
        self.crc32c += other.crc32c
        self.peer_idx += other.peer_idx
        self.schemas += other.schemas
        self.logical_sizes += other.logical_sizes
        self.metas += other.metas
        self.stored_as += other.stored_as

    def plain(self) -> bool:
        """No record carries user metadata or a name of its own (so the
        commit can travel as plain columns, ``RecordColumns``)."""
        return not any(self.metas) and not any(self.stored_as)

    def as_dicts(self) -> list[dict]:
        """One dict a record, keys :data:`KEYS`
        (:meth:`st_py.client.file.StFile.staged_commits`' form)."""
        return [
            dict(zip(KEYS, row))
            for row in zip(
                self.names,
                self.sizes,
                self.crc32c,
                self.peer_idx,
                self.schemas,
                self.logical_sizes,
                self.metas,
                self.stored_as,
            )
        ]

    @classmethod
    def of_dicts(cls, records: Iterable[dict]) -> StagedRecords:
        """From dicts of :meth:`as_dicts`' form (``schema``, ``logical_size``,
        ``meta``, ``stored_as`` may be left out).

        Raises
        ------
        KeyError
            A dict without ``name``, ``size``, ``crc32c`` or ``peer_idx``.
        """
        out = cls()
        for r in records:
            out.names.append(r["name"])
            out.sizes.append(r["size"])
            out.crc32c.append(r["crc32c"])
            out.peer_idx.append(r["peer_idx"])
            out.schemas.append(r.get("schema"))
            out.logical_sizes.append(r.get("logical_size"))
            out.metas.append(r.get("meta") or b"")
            out.stored_as.append(r.get("stored_as") or "")
        return out

    def record_commits(self, refs: Sequence[int]) -> list:
        """The records as the tracker's ``RecordCommit`` messages, one a
        record (``refs[i]``: record ``i``'s schema, 1 + its index in the
        request's schemas, 0 for none); a record with a name of its own
        on the peers is committed ``new_only``: a new record, write-once."""
        from st_py._proto import tracker_pb2 as pb

        return [
            pb.RecordCommit(
                name=n,
                size=size,
                crc32c=crc,
                peer_idx=peers,
                schema=ref,
                logical_size=logical,
                meta=meta,
                stored_as=stored_as,
                new_only=bool(stored_as),
            )
            for n, size, crc, peers, ref, logical, meta, stored_as in zip(
                self.names, self.sizes, self.crc32c, self.peer_idx, refs, self.logical_sizes, self.metas, self.stored_as
            )
        ]

    @classmethod
    def join(cls, parts: Sequence[StagedRecords | Sequence[dict]]) -> StagedRecords:
        """Every part's records in order (each a :class:`StagedRecords`, or
        a list of dicts as :meth:`of_dicts` takes): a job's tasks' outputs
        as one commit."""
        if len(parts) == 1 and isinstance(parts[0], StagedRecords):
            return parts[0]
        out = cls()
        for p in parts:
            out.extend(p if isinstance(p, StagedRecords) else cls.of_dicts(p))
        return out


__all__ = ["KEYS", "StagedRecords"]
