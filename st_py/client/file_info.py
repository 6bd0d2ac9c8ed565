"""A file's metadata as the tracker gave it, as plain data
(:attr:`st_py.client.file.StFile.info`, :meth:`st_py.client.client.Client.chmod`):
frozen dataclasses with the fields of the tracker's ``FileInfo`` and
``SetModeReply``, by the same names, made by the one conversion of
:mod:`st_py.client.plain_reply`.

Thread safety: immutable values; share them freely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from st_py.client.cluster_status import PeerStatus
from st_py.client.plain_reply import plain


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One StoreTorrent file as the tracker answered its Create or Open
    (paper 3.3; docs/infofile.md).

    Attributes
    ----------
    file_id : int
        The id the peers keep its records under.
    name : str
        Its namespace path (``/flights/2013``).
    replication : str
        Its class (``x2``); ``copies`` is its F.
    copies : int
    infofile_path : str
        The tracker's path of its SQLite infofile, or of this node's copy
        once the handle reads one (``StFile.infofile_path`` says which is read).
    peers : tuple[PeerStatus, ...]
        The peerlist, in ``peer_idx`` order.
    generation : int
        Bumped by every commit and delete.
    blocksize : int
        Consecutive records per peer before the next (``hash`` placement).
    records : int
        Committed records and objects (not their stripes).
    capability : bytes
        The signed token for the peers (docs/capabilities.md); empty: none needed.
    capability_expires : int
        Unix seconds.
    capability_ops : int
        1 read, 2 write, 4 delete (bits).
    owner, group : str
    mode : int
        UNIX permission bits (docs/security.md).
    write_denied : str
        Why WRITE was not granted (permission, quota); empty if it was.
    protocol, placement : str
        The duplication protocol and placement policy (docs/replication.md).
    est_size, reserved_bytes : int
        Estimated user bytes given at create, and of it still reserved (0: none).
    filters : str
        The client-side filter chain (``zstd,aes-256-gcm``; docs/filters.md).
    key_check : str
        HMAC of the encryption key (tells a wrong key); empty: not encrypted.
    file_tracker : str
        The per-file tracker taking its metadata writes (empty: the one that answered).
    log_position : int
    log_id : str
        The metadata log's position of this answer (docs/metadata-log.md).
    commit_columns : bool
        The tracker reads commits sent as columns.
    """

    file_id: int
    name: str
    replication: str
    copies: int
    infofile_path: str
    peers: tuple[PeerStatus, ...]
    generation: int
    blocksize: int
    records: int
    capability: bytes
    capability_expires: int
    capability_ops: int
    owner: str
    group: str
    mode: int
    write_denied: str
    protocol: str
    placement: str
    est_size: int
    reserved_bytes: int
    filters: str
    key_check: str
    file_tracker: str
    log_position: int
    log_id: str
    commit_columns: bool

    NESTED: ClassVar[dict[str, type]] = {"peers": PeerStatus}

    @classmethod
    def of(cls, reply: Any) -> "FileInfo":
        """From the tracker's ``FileInfo``."""
        return plain(cls, reply)


@dataclass(frozen=True, slots=True)
class FileMode:
    """Owner, group and mode bits of a file or directory after a chmod,
    chgrp or chown (docs/security.md)."""

    owner: str
    group: str
    mode: int

    @classmethod
    def of(cls, reply: Any) -> "FileMode":
        """From the tracker's ``SetModeReply``."""
        return plain(cls, reply)


MESSAGES = {FileInfo: "FileInfo", FileMode: "SetModeReply"}

__all__ = ["FileInfo", "FileMode", "MESSAGES"]
