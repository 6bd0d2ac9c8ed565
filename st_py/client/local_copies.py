"""Reading a record's copy from the disk of a peer on this host instead of
by GET (docs/striping.md, "Reading"; docs/s3.md, "The fast path").

A client told the data directories of the peers that run on its node
(``Client(local_data_dirs=[...])``, ``storetorrent s3 --peer-data DIR``)
knows each one's peer id (``<data>/PEER_ID``). A GET of a record one of
those peers holds (its peer id in the file's peerlist, the copy in the
infofile) then reads the copy's file, whose path follows from the record
store's layout (docs/wire-protocol.md, "Record store": this module is its
reader on the Python side, ``tests/test_local_copies.py`` pins it to the
peer's), and checks its size and CRC-32C against the infofile's as every
GET does (the native batch read, :func:`st_py.client.getlocal.read_copies`).
A copy that is missing, moved or bad is counted and the GET goes to the
network as before (:mod:`st_py.client.reader`).

Which peer is local is decided by identity, not address: a peer id read
from a data directory on this host is a peer of this host, whatever
address it announces.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from st_py.core.infofile import RecordMeta
from st_py.errors import InvalidOptionError
from st_py.wire.protocol import crc32c

MAX_ENCODED_NAME = 200  # st_core/src/name_codec.h kMaxEncodedName: longer encodings are hashed
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def encode_name(name: bytes) -> str:
    """A record name as the peer writes it in a file name
    (docs/wire-protocol.md, "Record store"; ``EncodeName`` in
    st_core/src/name_codec.cc): safe bytes kept, others ``%XX``, a leading
    ``.`` escaped, over 200 bytes ``~`` and the SHA-256 of the name."""
    out = []
    for i, c in enumerate(name):
        out.append(chr(c) if c in _SAFE and not (i == 0 and c == 0x2E) else f"%{c:02X}")
    enc = "".join(out)
    return "~" + hashlib.sha256(name).hexdigest() if len(enc) > MAX_ENCODED_NAME else enc


def copy_path(data_dir: str, file_id: int, key: str, rank: int, crc: int) -> str:
    """Where a peer whose data directory is ``data_dir`` keeps copy ``rank``
    of the record stored under ``key`` (:attr:`RecordMeta.key`) of file
    ``file_id`` with CRC-32C ``crc``: ``<data>/files/<file_id:016x>/
    <bucket:02x>/<enc(name)>@<rank>@<crc:08x>``, bucket the low byte of
    the name's CRC-32C."""
    raw = key.encode("utf-8", "surrogateescape")
    return os.path.join(
        data_dir, "files", f"{file_id:016x}", f"{crc32c(raw) & 0xFF:02x}", f"{encode_name(raw)}@{rank}@{crc:08x}"
    )


@dataclass
class LocalCopyStats:
    """Counters of a :class:`LocalCopies`: ``reads`` and ``bytes`` of
    copies read from disk, ``fallbacks`` copies a GET wanted from disk that
    were missing or bad (read by GET instead)."""

    reads: int = 0
    bytes: int = 0
    fallbacks: int = 0


class LocalCopies:
    """The peers of this host by their data directories.

    Parameters
    ----------
    data_dirs : iterable of str
        Data directories (``st-peer --data``) of peers on this host, each
        holding its ``PEER_ID``.

    Raises
    ------
    InvalidOptionError
        A directory has no readable ``PEER_ID`` (not a peer's data directory).

    Thread safety: safe to share between threads and files (the counters
    are updated under a lock; the rest is read-only).
    """

    def __init__(self, data_dirs: Iterable[str]):
        self.dirs: dict[str, str] = {}
        for d in data_dirs:
            try:
                with open(os.path.join(d, "PEER_ID")) as fh:
                    pid = fh.read().strip()
            except OSError as e:
                raise InvalidOptionError(
                    f"{d} is not a peer's data directory (no readable PEER_ID: {e}); give the --data "
                    "directory of a peer running on this host"
                ) from None
            self.dirs[pid] = str(d)
        self.stats = LocalCopyStats()
        self._lock = threading.Lock()

    def paths(self, file_id: int, peer_ids: Mapping[int, str], meta: RecordMeta) -> list[tuple[int, str]]:
        """``(peer index, path)`` of the copies of ``meta`` held by peers of
        this host, in copy-rank order (empty: none is local)."""
        ranks = meta.ranks or tuple(range(len(meta.peers)))
        out = []
        for idx, rank in zip(meta.peers, ranks):
            d = self.dirs.get(peer_ids.get(idx, ""))
            if d is not None:
                out.append((idx, copy_path(d, file_id, meta.key, rank, meta.crc32c)))
        return out

    def read(self, file_id: int, peer_ids: Mapping[int, str], meta: RecordMeta) -> bytes | None:
        """The stored bytes of ``meta`` from a copy on this host, its size
        and CRC-32C checked (the CRC in the copy's file name is the
        infofile's, and the bytes must have it); None when no peer of this
        host holds one or every such copy is missing or bad (counted in
        ``stats.fallbacks``): read it by GET."""
        from st_py.client.getlocal import read_copies

        for _, path in self.paths(file_id, peer_ids, meta):
            data, bad = read_copies([path], [meta.size])
            if not bad and len(data) == meta.size:
                with self._lock:
                    self.stats.reads += 1
                    self.stats.bytes += len(data)
                return data
            with self._lock:
                self.stats.fallbacks += 1
        return None


__all__ = ["LocalCopies", "LocalCopyStats", "copy_path", "encode_name"]
