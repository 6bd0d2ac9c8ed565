from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Peer(_message.Message):
    __slots__ = ("peer_idx", "peer_id", "addr", "alive", "capacity_bytes", "used_bytes", "free_bytes", "records", "last_announce_age_s", "reserved_bytes", "load", "drain_state", "name", "uptime_s", "restarts", "fs_id", "domain", "returns", "copies", "copies_behind", "copies_max_lag", "copies_caught_up_at")
    PEER_IDX_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_ANNOUNCE_AGE_S_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DRAIN_STATE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    FS_ID_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    RETURNS_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    COPIES_BEHIND_FIELD_NUMBER: _ClassVar[int]
    COPIES_MAX_LAG_FIELD_NUMBER: _ClassVar[int]
    COPIES_CAUGHT_UP_AT_FIELD_NUMBER: _ClassVar[int]
    peer_idx: int
    peer_id: str
    addr: str
    alive: bool
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    records: int
    last_announce_age_s: float
    reserved_bytes: int
    load: float
    drain_state: str
    name: str
    uptime_s: float
    restarts: int
    fs_id: str
    domain: str
    returns: int
    copies: int
    copies_behind: int
    copies_max_lag: int
    copies_caught_up_at: float
    def __init__(self, peer_idx: _Optional[int] = ..., peer_id: _Optional[str] = ..., addr: _Optional[str] = ..., alive: _Optional[bool] = ..., capacity_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ..., records: _Optional[int] = ..., last_announce_age_s: _Optional[float] = ..., reserved_bytes: _Optional[int] = ..., load: _Optional[float] = ..., drain_state: _Optional[str] = ..., name: _Optional[str] = ..., uptime_s: _Optional[float] = ..., restarts: _Optional[int] = ..., fs_id: _Optional[str] = ..., domain: _Optional[str] = ..., returns: _Optional[int] = ..., copies: _Optional[int] = ..., copies_behind: _Optional[int] = ..., copies_max_lag: _Optional[int] = ..., copies_caught_up_at: _Optional[float] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ("file_id", "name", "replication", "copies", "infofile_path", "peers", "generation", "blocksize", "records", "capability", "capability_expires", "capability_ops", "owner", "group", "mode", "write_denied", "protocol", "placement", "est_size", "reserved_bytes", "filters", "key_check", "file_tracker", "log_position", "log_id", "commit_columns")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    INFOFILE_PATH_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    BLOCKSIZE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_EXPIRES_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_OPS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    WRITE_DENIED_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    EST_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    KEY_CHECK_FIELD_NUMBER: _ClassVar[int]
    FILE_TRACKER_FIELD_NUMBER: _ClassVar[int]
    LOG_POSITION_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    name: str
    replication: str
    copies: int
    infofile_path: str
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
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
    def __init__(self, file_id: _Optional[int] = ..., name: _Optional[str] = ..., replication: _Optional[str] = ..., copies: _Optional[int] = ..., infofile_path: _Optional[str] = ..., peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ..., generation: _Optional[int] = ..., blocksize: _Optional[int] = ..., records: _Optional[int] = ..., capability: _Optional[bytes] = ..., capability_expires: _Optional[int] = ..., capability_ops: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., mode: _Optional[int] = ..., write_denied: _Optional[str] = ..., protocol: _Optional[str] = ..., placement: _Optional[str] = ..., est_size: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., filters: _Optional[str] = ..., key_check: _Optional[str] = ..., file_tracker: _Optional[str] = ..., log_position: _Optional[int] = ..., log_id: _Optional[str] = ..., commit_columns: _Optional[bool] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("name", "replication", "est_size", "blocksize", "user", "mode", "protocol", "placement", "filters", "key_check", "request_id", "in_directory")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    EST_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCKSIZE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    KEY_CHECK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    IN_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    name: str
    replication: str
    est_size: int
    blocksize: int
    user: str
    mode: int
    protocol: str
    placement: str
    filters: str
    key_check: str
    request_id: str
    in_directory: str
    def __init__(self, name: _Optional[str] = ..., replication: _Optional[str] = ..., est_size: _Optional[int] = ..., blocksize: _Optional[int] = ..., user: _Optional[str] = ..., mode: _Optional[int] = ..., protocol: _Optional[str] = ..., placement: _Optional[str] = ..., filters: _Optional[str] = ..., key_check: _Optional[str] = ..., request_id: _Optional[str] = ..., in_directory: _Optional[str] = ...) -> None: ...

class OpenRequest(_message.Message):
    __slots__ = ("name", "user")
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    name: str
    user: str
    def __init__(self, name: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class RecordCommit(_message.Message):
    __slots__ = ("name", "size", "crc32c", "peer_idx", "pending_ranks", "stored_as", "schema", "logical_size", "new_only", "meta")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    PEER_IDX_FIELD_NUMBER: _ClassVar[int]
    PENDING_RANKS_FIELD_NUMBER: _ClassVar[int]
    STORED_AS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    NEW_ONLY_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    crc32c: int
    peer_idx: _containers.RepeatedScalarFieldContainer[int]
    pending_ranks: _containers.RepeatedScalarFieldContainer[int]
    stored_as: str
    schema: int
    logical_size: int
    new_only: bool
    meta: bytes
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., crc32c: _Optional[int] = ..., peer_idx: _Optional[_Iterable[int]] = ..., pending_ranks: _Optional[_Iterable[int]] = ..., stored_as: _Optional[str] = ..., schema: _Optional[int] = ..., logical_size: _Optional[int] = ..., new_only: _Optional[bool] = ..., meta: _Optional[bytes] = ...) -> None: ...

class RecordColumns(_message.Message):
    __slots__ = ("names", "sizes", "crc32c", "peer_idx", "schema", "logical_sizes")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    PEER_IDX_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_SIZES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    crc32c: _containers.RepeatedScalarFieldContainer[int]
    peer_idx: _containers.RepeatedScalarFieldContainer[int]
    schema: _containers.RepeatedScalarFieldContainer[int]
    logical_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, names: _Optional[_Iterable[str]] = ..., sizes: _Optional[_Iterable[int]] = ..., crc32c: _Optional[_Iterable[int]] = ..., peer_idx: _Optional[_Iterable[int]] = ..., schema: _Optional[_Iterable[int]] = ..., logical_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class RecordSchema(_message.Message):
    __slots__ = ("format", "schema")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    format: str
    schema: bytes
    def __init__(self, format: _Optional[str] = ..., schema: _Optional[bytes] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("name", "file_id", "records", "user", "lease_id", "request_id", "delete", "schemas", "partial_ok", "replace_all", "columns", "objects")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_OK_FIELD_NUMBER: _ClassVar[int]
    REPLACE_ALL_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    records: _containers.RepeatedCompositeFieldContainer[RecordCommit]
    user: str
    lease_id: str
    request_id: str
    delete: _containers.RepeatedScalarFieldContainer[str]
    schemas: _containers.RepeatedCompositeFieldContainer[RecordSchema]
    partial_ok: bool
    replace_all: bool
    columns: RecordColumns
    objects: _containers.RepeatedCompositeFieldContainer[ObjectCommit]
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., records: _Optional[_Iterable[_Union[RecordCommit, _Mapping]]] = ..., user: _Optional[str] = ..., lease_id: _Optional[str] = ..., request_id: _Optional[str] = ..., delete: _Optional[_Iterable[str]] = ..., schemas: _Optional[_Iterable[_Union[RecordSchema, _Mapping]]] = ..., partial_ok: _Optional[bool] = ..., replace_all: _Optional[bool] = ..., columns: _Optional[_Union[RecordColumns, _Mapping]] = ..., objects: _Optional[_Iterable[_Union[ObjectCommit, _Mapping]]] = ...) -> None: ...

class CommitReply(_message.Message):
    __slots__ = ("generation", "committed", "conflicts", "conflict_names", "deleted", "quota_refused", "quota_scope", "quota_bytes", "quota_used_bytes", "conflict_kinds", "conflict_records", "columns_read")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    QUOTA_REFUSED_FIELD_NUMBER: _ClassVar[int]
    QUOTA_SCOPE_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_KINDS_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_READ_FIELD_NUMBER: _ClassVar[int]
    generation: int
    committed: int
    conflicts: _containers.RepeatedScalarFieldContainer[str]
    conflict_names: _containers.RepeatedScalarFieldContainer[str]
    deleted: int
    quota_refused: _containers.RepeatedScalarFieldContainer[str]
    quota_scope: str
    quota_bytes: int
    quota_used_bytes: int
    conflict_kinds: _containers.RepeatedScalarFieldContainer[str]
    conflict_records: _containers.RepeatedScalarFieldContainer[str]
    columns_read: int
    def __init__(self, generation: _Optional[int] = ..., committed: _Optional[int] = ..., conflicts: _Optional[_Iterable[str]] = ..., conflict_names: _Optional[_Iterable[str]] = ..., deleted: _Optional[int] = ..., quota_refused: _Optional[_Iterable[str]] = ..., quota_scope: _Optional[str] = ..., quota_bytes: _Optional[int] = ..., quota_used_bytes: _Optional[int] = ..., conflict_kinds: _Optional[_Iterable[str]] = ..., conflict_records: _Optional[_Iterable[str]] = ..., columns_read: _Optional[int] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("name", "file_id", "records", "whole_file", "user", "request_id", "if_empty")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FILE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    IF_EMPTY_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    records: _containers.RepeatedScalarFieldContainer[str]
    whole_file: bool
    user: str
    request_id: str
    if_empty: bool
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., records: _Optional[_Iterable[str]] = ..., whole_file: _Optional[bool] = ..., user: _Optional[str] = ..., request_id: _Optional[str] = ..., if_empty: _Optional[bool] = ...) -> None: ...

class DeleteReply(_message.Message):
    __slots__ = ("deleted", "generation", "kept")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    generation: int
    kept: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted: _Optional[int] = ..., generation: _Optional[int] = ..., kept: _Optional[_Iterable[str]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("path", "names_only", "user", "counts_only")
    PATH_FIELD_NUMBER: _ClassVar[int]
    NAMES_ONLY_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    COUNTS_ONLY_FIELD_NUMBER: _ClassVar[int]
    path: str
    names_only: bool
    user: str
    counts_only: bool
    def __init__(self, path: _Optional[str] = ..., names_only: _Optional[bool] = ..., user: _Optional[str] = ..., counts_only: _Optional[bool] = ...) -> None: ...

class ListEntry(_message.Message):
    __slots__ = ("name", "is_dir", "file_id", "replication", "records", "bytes", "owner", "group", "mode", "user_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    USER_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    is_dir: bool
    file_id: int
    replication: str
    records: int
    bytes: int
    owner: str
    group: str
    mode: int
    user_bytes: int
    def __init__(self, name: _Optional[str] = ..., is_dir: _Optional[bool] = ..., file_id: _Optional[int] = ..., replication: _Optional[str] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., mode: _Optional[int] = ..., user_bytes: _Optional[int] = ...) -> None: ...

class ListReply(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ListEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[ListEntry, _Mapping]]] = ...) -> None: ...

class AnnounceRequest(_message.Message):
    __slots__ = ("peer_id", "addr", "capacity_bytes", "used_bytes", "free_bytes", "records", "load", "bad_copies", "copies_verified", "copies_bad", "copies_quarantined", "started_at", "data_dir", "fs_id", "fs_size_bytes", "fs_free_bytes", "domain", "keeps_copies", "copies_epoch", "copies_cursor", "copies", "copies_behind", "copies_max_lag", "copies_caught_up_at")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    BAD_COPIES_FIELD_NUMBER: _ClassVar[int]
    COPIES_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    COPIES_BAD_FIELD_NUMBER: _ClassVar[int]
    COPIES_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    FS_ID_FIELD_NUMBER: _ClassVar[int]
    FS_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    KEEPS_COPIES_FIELD_NUMBER: _ClassVar[int]
    COPIES_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COPIES_CURSOR_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    COPIES_BEHIND_FIELD_NUMBER: _ClassVar[int]
    COPIES_MAX_LAG_FIELD_NUMBER: _ClassVar[int]
    COPIES_CAUGHT_UP_AT_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    addr: str
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    records: int
    load: float
    bad_copies: _containers.RepeatedCompositeFieldContainer[BadCopy]
    copies_verified: int
    copies_bad: int
    copies_quarantined: int
    started_at: float
    data_dir: str
    fs_id: str
    fs_size_bytes: int
    fs_free_bytes: int
    domain: str
    keeps_copies: bool
    copies_epoch: str
    copies_cursor: int
    copies: int
    copies_behind: int
    copies_max_lag: int
    copies_caught_up_at: float
    def __init__(self, peer_id: _Optional[str] = ..., addr: _Optional[str] = ..., capacity_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ..., records: _Optional[int] = ..., load: _Optional[float] = ..., bad_copies: _Optional[_Iterable[_Union[BadCopy, _Mapping]]] = ..., copies_verified: _Optional[int] = ..., copies_bad: _Optional[int] = ..., copies_quarantined: _Optional[int] = ..., started_at: _Optional[float] = ..., data_dir: _Optional[str] = ..., fs_id: _Optional[str] = ..., fs_size_bytes: _Optional[int] = ..., fs_free_bytes: _Optional[int] = ..., domain: _Optional[str] = ..., keeps_copies: _Optional[bool] = ..., copies_epoch: _Optional[str] = ..., copies_cursor: _Optional[int] = ..., copies: _Optional[int] = ..., copies_behind: _Optional[int] = ..., copies_max_lag: _Optional[int] = ..., copies_caught_up_at: _Optional[float] = ...) -> None: ...

class BadCopy(_message.Message):
    __slots__ = ("file_id", "name", "copy_rank", "crc32c", "detail")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COPY_RANK_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    name: str
    copy_rank: int
    crc32c: int
    detail: str
    def __init__(self, file_id: _Optional[int] = ..., name: _Optional[str] = ..., copy_rank: _Optional[int] = ..., crc32c: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class AnnounceReply(_message.Message):
    __slots__ = ("interval_s", "peer_files", "copies_epoch", "copies_cursor", "copies_more", "standby_fetch_addrs")
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    PEER_FILES_FIELD_NUMBER: _ClassVar[int]
    COPIES_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COPIES_CURSOR_FIELD_NUMBER: _ClassVar[int]
    COPIES_MORE_FIELD_NUMBER: _ClassVar[int]
    STANDBY_FETCH_ADDRS_FIELD_NUMBER: _ClassVar[int]
    interval_s: float
    peer_files: _containers.RepeatedCompositeFieldContainer[PeerFile]
    copies_epoch: str
    copies_cursor: int
    copies_more: bool
    standby_fetch_addrs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, interval_s: _Optional[float] = ..., peer_files: _Optional[_Iterable[_Union[PeerFile, _Mapping]]] = ..., copies_epoch: _Optional[str] = ..., copies_cursor: _Optional[int] = ..., copies_more: _Optional[bool] = ..., standby_fetch_addrs: _Optional[_Iterable[str]] = ...) -> None: ...

class PeerFile(_message.Message):
    __slots__ = ("file_id", "name", "generation")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    name: str
    generation: int
    def __init__(self, file_id: _Optional[int] = ..., name: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class ReportFailureRequest(_message.Message):
    __slots__ = ("addr", "reason")
    ADDR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    addr: str
    reason: str
    def __init__(self, addr: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReportFailureReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportBadCopyRequest(_message.Message):
    __slots__ = ("file", "record", "addr", "detail")
    FILE_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    file: str
    record: str
    addr: str
    detail: str
    def __init__(self, file: _Optional[str] = ..., record: _Optional[str] = ..., addr: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ReportBadCopyReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("peers", "files", "alive_peers", "failed_peers", "capacity_bytes", "free_bytes", "liveness_window_s", "used_bytes", "filesystems", "records_short", "files_short", "records_pending", "short_age_s", "repair", "file_trackers", "failed_after_s", "records_lost", "records_waiting", "records_quarantined", "retained_bytes", "snapshots", "versions_short", "versions_lost", "metadata_log")
    PEERS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ALIVE_PEERS_FIELD_NUMBER: _ClassVar[int]
    FAILED_PEERS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIVENESS_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILESYSTEMS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_SHORT_FIELD_NUMBER: _ClassVar[int]
    FILES_SHORT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PENDING_FIELD_NUMBER: _ClassVar[int]
    SHORT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    REPAIR_FIELD_NUMBER: _ClassVar[int]
    FILE_TRACKERS_FIELD_NUMBER: _ClassVar[int]
    FAILED_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LOST_FIELD_NUMBER: _ClassVar[int]
    RECORDS_WAITING_FIELD_NUMBER: _ClassVar[int]
    RECORDS_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    RETAINED_BYTES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_SHORT_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_LOST_FIELD_NUMBER: _ClassVar[int]
    METADATA_LOG_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    files: int
    alive_peers: int
    failed_peers: int
    capacity_bytes: int
    free_bytes: int
    liveness_window_s: float
    used_bytes: int
    filesystems: int
    records_short: int
    files_short: int
    records_pending: int
    short_age_s: float
    repair: RepairStatus
    file_trackers: _containers.RepeatedCompositeFieldContainer[FileTracker]
    failed_after_s: float
    records_lost: int
    records_waiting: int
    records_quarantined: int
    retained_bytes: int
    snapshots: int
    versions_short: int
    versions_lost: int
    metadata_log: MetadataLogStatus
    def __init__(self, peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ..., files: _Optional[int] = ..., alive_peers: _Optional[int] = ..., failed_peers: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ..., liveness_window_s: _Optional[float] = ..., used_bytes: _Optional[int] = ..., filesystems: _Optional[int] = ..., records_short: _Optional[int] = ..., files_short: _Optional[int] = ..., records_pending: _Optional[int] = ..., short_age_s: _Optional[float] = ..., repair: _Optional[_Union[RepairStatus, _Mapping]] = ..., file_trackers: _Optional[_Iterable[_Union[FileTracker, _Mapping]]] = ..., failed_after_s: _Optional[float] = ..., records_lost: _Optional[int] = ..., records_waiting: _Optional[int] = ..., records_quarantined: _Optional[int] = ..., retained_bytes: _Optional[int] = ..., snapshots: _Optional[int] = ..., versions_short: _Optional[int] = ..., versions_lost: _Optional[int] = ..., metadata_log: _Optional[_Union[MetadataLogStatus, _Mapping]] = ...) -> None: ...

class MetadataLogStatus(_message.Message):
    __slots__ = ("backend", "term", "last_index", "applied_index", "trackers", "members", "failovers")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    TRACKERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    FAILOVERS_FIELD_NUMBER: _ClassVar[int]
    backend: str
    term: int
    last_index: int
    applied_index: int
    trackers: _containers.RepeatedCompositeFieldContainer[TrackerReplica]
    members: _containers.RepeatedCompositeFieldContainer[ConsensusMember]
    failovers: _containers.RepeatedCompositeFieldContainer[Failover]
    def __init__(self, backend: _Optional[str] = ..., term: _Optional[int] = ..., last_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., trackers: _Optional[_Iterable[_Union[TrackerReplica, _Mapping]]] = ..., members: _Optional[_Iterable[_Union[ConsensusMember, _Mapping]]] = ..., failovers: _Optional[_Iterable[_Union[Failover, _Mapping]]] = ...) -> None: ...

class TrackerReplica(_message.Message):
    __slots__ = ("addr", "role", "term", "host", "pid", "applied_index", "up_s", "fetch_addr")
    ADDR_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    UP_S_FIELD_NUMBER: _ClassVar[int]
    FETCH_ADDR_FIELD_NUMBER: _ClassVar[int]
    addr: str
    role: str
    term: int
    host: str
    pid: int
    applied_index: int
    up_s: float
    fetch_addr: str
    def __init__(self, addr: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., applied_index: _Optional[int] = ..., up_s: _Optional[float] = ..., fetch_addr: _Optional[str] = ...) -> None: ...

class ConsensusMember(_message.Message):
    __slots__ = ("endpoint", "healthy", "detail", "raft_leader", "raft_index", "raft_term", "version")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    RAFT_LEADER_FIELD_NUMBER: _ClassVar[int]
    RAFT_INDEX_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    healthy: bool
    detail: str
    raft_leader: bool
    raft_index: int
    raft_term: int
    version: str
    def __init__(self, endpoint: _Optional[str] = ..., healthy: _Optional[bool] = ..., detail: _Optional[str] = ..., raft_leader: _Optional[bool] = ..., raft_index: _Optional[int] = ..., raft_term: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class Failover(_message.Message):
    __slots__ = ("term", "leader", "at", "previous", "reason")
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    term: int
    leader: str
    at: float
    previous: str
    reason: str
    def __init__(self, term: _Optional[int] = ..., leader: _Optional[str] = ..., at: _Optional[float] = ..., previous: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class FileTracker(_message.Message):
    __slots__ = ("shard", "shards", "addr", "alive", "pid", "restarts", "uptime_s", "commits", "records")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    shards: int
    addr: str
    alive: bool
    pid: int
    restarts: int
    uptime_s: float
    commits: int
    records: int
    def __init__(self, shard: _Optional[int] = ..., shards: _Optional[int] = ..., addr: _Optional[str] = ..., alive: _Optional[bool] = ..., pid: _Optional[int] = ..., restarts: _Optional[int] = ..., uptime_s: _Optional[float] = ..., commits: _Optional[int] = ..., records: _Optional[int] = ...) -> None: ...

class RepairStatus(_message.Message):
    __slots__ = ("repairer", "age_s", "running", "reason", "files_done", "files_total", "copies_stored", "copies_restored", "records_left", "pass_seconds", "passes")
    REPAIRER_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FILES_DONE_FIELD_NUMBER: _ClassVar[int]
    FILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COPIES_STORED_FIELD_NUMBER: _ClassVar[int]
    COPIES_RESTORED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LEFT_FIELD_NUMBER: _ClassVar[int]
    PASS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    repairer: str
    age_s: float
    running: bool
    reason: str
    files_done: int
    files_total: int
    copies_stored: int
    copies_restored: int
    records_left: int
    pass_seconds: float
    passes: int
    def __init__(self, repairer: _Optional[str] = ..., age_s: _Optional[float] = ..., running: _Optional[bool] = ..., reason: _Optional[str] = ..., files_done: _Optional[int] = ..., files_total: _Optional[int] = ..., copies_stored: _Optional[int] = ..., copies_restored: _Optional[int] = ..., records_left: _Optional[int] = ..., pass_seconds: _Optional[float] = ..., passes: _Optional[int] = ...) -> None: ...

class ReportRepairRequest(_message.Message):
    __slots__ = ("status", "user")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    status: RepairStatus
    user: str
    def __init__(self, status: _Optional[_Union[RepairStatus, _Mapping]] = ..., user: _Optional[str] = ...) -> None: ...

class ReportRepairReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExtendPeerlistRequest(_message.Message):
    __slots__ = ("name", "file_id", "user")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    user: str
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., user: _Optional[str] = ...) -> None: ...

class CopyMove(_message.Message):
    __slots__ = ("name", "copy_rank", "from_peer_idx", "to_peer_idx", "stored_as", "until")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COPY_RANK_FIELD_NUMBER: _ClassVar[int]
    FROM_PEER_IDX_FIELD_NUMBER: _ClassVar[int]
    TO_PEER_IDX_FIELD_NUMBER: _ClassVar[int]
    STORED_AS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    copy_rank: int
    from_peer_idx: int
    to_peer_idx: int
    stored_as: str
    until: int
    def __init__(self, name: _Optional[str] = ..., copy_rank: _Optional[int] = ..., from_peer_idx: _Optional[int] = ..., to_peer_idx: _Optional[int] = ..., stored_as: _Optional[str] = ..., until: _Optional[int] = ...) -> None: ...

class MoveCopiesRequest(_message.Message):
    __slots__ = ("name", "file_id", "moves", "user")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    moves: _containers.RepeatedCompositeFieldContainer[CopyMove]
    user: str
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., moves: _Optional[_Iterable[_Union[CopyMove, _Mapping]]] = ..., user: _Optional[str] = ...) -> None: ...

class MoveCopiesReply(_message.Message):
    __slots__ = ("generation", "moved", "conflicts")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    generation: int
    moved: int
    conflicts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, generation: _Optional[int] = ..., moved: _Optional[int] = ..., conflicts: _Optional[_Iterable[str]] = ...) -> None: ...

class SetModeRequest(_message.Message):
    __slots__ = ("name", "mode", "group", "owner", "user")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    name: str
    mode: int
    group: str
    owner: str
    user: str
    def __init__(self, name: _Optional[str] = ..., mode: _Optional[int] = ..., group: _Optional[str] = ..., owner: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class SetModeReply(_message.Message):
    __slots__ = ("owner", "group", "mode")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    owner: str
    group: str
    mode: int
    def __init__(self, owner: _Optional[str] = ..., group: _Optional[str] = ..., mode: _Optional[int] = ...) -> None: ...

class CopyStored(_message.Message):
    __slots__ = ("name", "copy_rank", "peer_idx", "stored_as")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COPY_RANK_FIELD_NUMBER: _ClassVar[int]
    PEER_IDX_FIELD_NUMBER: _ClassVar[int]
    STORED_AS_FIELD_NUMBER: _ClassVar[int]
    name: str
    copy_rank: int
    peer_idx: int
    stored_as: str
    def __init__(self, name: _Optional[str] = ..., copy_rank: _Optional[int] = ..., peer_idx: _Optional[int] = ..., stored_as: _Optional[str] = ...) -> None: ...

class StoreCopiesRequest(_message.Message):
    __slots__ = ("name", "file_id", "copies", "user")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    copies: _containers.RepeatedCompositeFieldContainer[CopyStored]
    user: str
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., copies: _Optional[_Iterable[_Union[CopyStored, _Mapping]]] = ..., user: _Optional[str] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ("name", "file_id", "user")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    user: str
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., user: _Optional[str] = ...) -> None: ...

class CloseReply(_message.Message):
    __slots__ = ("released_bytes",)
    RELEASED_BYTES_FIELD_NUMBER: _ClassVar[int]
    released_bytes: int
    def __init__(self, released_bytes: _Optional[int] = ...) -> None: ...

class RemoveDirRequest(_message.Message):
    __slots__ = ("path", "user", "request_id")
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    user: str
    request_id: str
    def __init__(self, path: _Optional[str] = ..., user: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RemoveDirReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ObjectCommit(_message.Message):
    __slots__ = ("name", "size", "stripe_size", "stripes", "crc32c", "schema", "meta")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIPE_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIPES_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    stripe_size: int
    stripes: int
    crc32c: int
    schema: int
    meta: bytes
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., stripe_size: _Optional[int] = ..., stripes: _Optional[int] = ..., crc32c: _Optional[int] = ..., schema: _Optional[int] = ..., meta: _Optional[bytes] = ...) -> None: ...

class CommitObjectsRequest(_message.Message):
    __slots__ = ("name", "file_id", "objects", "user", "schemas")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    objects: _containers.RepeatedCompositeFieldContainer[ObjectCommit]
    user: str
    schemas: _containers.RepeatedCompositeFieldContainer[RecordSchema]
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., objects: _Optional[_Iterable[_Union[ObjectCommit, _Mapping]]] = ..., user: _Optional[str] = ..., schemas: _Optional[_Iterable[_Union[RecordSchema, _Mapping]]] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("name", "file_id", "user", "lease_id", "ttl_s", "release", "holder", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    user: str
    lease_id: str
    ttl_s: float
    release: bool
    holder: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., user: _Optional[str] = ..., lease_id: _Optional[str] = ..., ttl_s: _Optional[float] = ..., release: _Optional[bool] = ..., holder: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class LeaseReply(_message.Message):
    __slots__ = ("lease_id", "expires_in_s")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_S_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    expires_in_s: float
    def __init__(self, lease_id: _Optional[str] = ..., expires_in_s: _Optional[float] = ...) -> None: ...

class RestoreInfofileChunk(_message.Message):
    __slots__ = ("user", "total_size", "data", "crc32c", "dry_run")
    USER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    user: str
    total_size: int
    data: bytes
    crc32c: int
    dry_run: bool
    def __init__(self, user: _Optional[str] = ..., total_size: _Optional[int] = ..., data: _Optional[bytes] = ..., crc32c: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RestoreInfofileReply(_message.Message):
    __slots__ = ("outcome", "name", "file_id", "generation", "present_file_id", "present_generation", "detail")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FILE_ID_FIELD_NUMBER: _ClassVar[int]
    PRESENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    outcome: str
    name: str
    file_id: int
    generation: int
    present_file_id: int
    present_generation: int
    detail: str
    def __init__(self, outcome: _Optional[str] = ..., name: _Optional[str] = ..., file_id: _Optional[int] = ..., generation: _Optional[int] = ..., present_file_id: _Optional[int] = ..., present_generation: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class SetPeerStateRequest(_message.Message):
    __slots__ = ("peer", "drain_state", "user")
    PEER_FIELD_NUMBER: _ClassVar[int]
    DRAIN_STATE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    peer: str
    drain_state: str
    user: str
    def __init__(self, peer: _Optional[str] = ..., drain_state: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class SetPeerStateReply(_message.Message):
    __slots__ = ("peer",)
    PEER_FIELD_NUMBER: _ClassVar[int]
    peer: Peer
    def __init__(self, peer: _Optional[_Union[Peer, _Mapping]] = ...) -> None: ...

class AdmitItem(_message.Message):
    __slots__ = ("id", "user", "name", "file_id", "owner", "group", "mode", "what", "bytes", "copies", "on_peers", "request_id", "records")
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    WHAT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    ON_PEERS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    user: str
    name: str
    file_id: int
    owner: str
    group: str
    mode: int
    what: str
    bytes: int
    copies: int
    on_peers: _containers.RepeatedCompositeFieldContainer[PeerBytes]
    request_id: str
    records: int
    def __init__(self, id: _Optional[str] = ..., user: _Optional[str] = ..., name: _Optional[str] = ..., file_id: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., mode: _Optional[int] = ..., what: _Optional[str] = ..., bytes: _Optional[int] = ..., copies: _Optional[int] = ..., on_peers: _Optional[_Iterable[_Union[PeerBytes, _Mapping]]] = ..., request_id: _Optional[str] = ..., records: _Optional[int] = ...) -> None: ...

class PeerBytes(_message.Message):
    __slots__ = ("peer_id", "bytes")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    bytes: int
    def __init__(self, peer_id: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class Settlement(_message.Message):
    __slots__ = ("id", "owner", "file_id", "charge", "written", "on_peers")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    CHARGE_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    ON_PEERS_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner: str
    file_id: int
    charge: int
    written: int
    on_peers: _containers.RepeatedCompositeFieldContainer[PeerBytes]
    def __init__(self, id: _Optional[str] = ..., owner: _Optional[str] = ..., file_id: _Optional[int] = ..., charge: _Optional[int] = ..., written: _Optional[int] = ..., on_peers: _Optional[_Iterable[_Union[PeerBytes, _Mapping]]] = ...) -> None: ...

class AdmitRequest(_message.Message):
    __slots__ = ("shard", "items", "settled", "master_epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: int
    items: _containers.RepeatedCompositeFieldContainer[AdmitItem]
    settled: _containers.RepeatedCompositeFieldContainer[Settlement]
    master_epoch: str
    def __init__(self, shard: _Optional[int] = ..., items: _Optional[_Iterable[_Union[AdmitItem, _Mapping]]] = ..., settled: _Optional[_Iterable[_Union[Settlement, _Mapping]]] = ..., master_epoch: _Optional[str] = ...) -> None: ...

class AdmitResult(_message.Message):
    __slots__ = ("id", "ok", "refusal", "message")
    ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    ok: bool
    refusal: str
    message: str
    def __init__(self, id: _Optional[str] = ..., ok: _Optional[bool] = ..., refusal: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class AdmitReply(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AdmitResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AdmitResult, _Mapping]]] = ...) -> None: ...

class FileControlRequest(_message.Message):
    __slots__ = ("name", "file_id", "op", "meta", "peers", "peer_id", "bad_copies")
    class MetaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    BAD_COPIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    op: str
    meta: _containers.ScalarMap[str, str]
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    peer_id: str
    bad_copies: _containers.RepeatedCompositeFieldContainer[BadCopy]
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., op: _Optional[str] = ..., meta: _Optional[_Mapping[str, str]] = ..., peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ..., peer_id: _Optional[str] = ..., bad_copies: _Optional[_Iterable[_Union[BadCopy, _Mapping]]] = ...) -> None: ...

class FileControlReply(_message.Message):
    __slots__ = ("file_id", "generation", "records", "bytes", "copies", "owner", "done", "conflicts", "added")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    generation: int
    records: int
    bytes: int
    copies: int
    owner: str
    done: int
    conflicts: _containers.RepeatedScalarFieldContainer[str]
    added: _containers.RepeatedCompositeFieldContainer[Peer]
    def __init__(self, file_id: _Optional[int] = ..., generation: _Optional[int] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., copies: _Optional[int] = ..., owner: _Optional[str] = ..., done: _Optional[int] = ..., conflicts: _Optional[_Iterable[str]] = ..., added: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("name", "file_id", "op", "snapshot", "user", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    file_id: int
    op: str
    snapshot: str
    user: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., file_id: _Optional[int] = ..., op: _Optional[str] = ..., snapshot: _Optional[str] = ..., user: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("name", "generation", "created_at", "owner")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    generation: int
    created_at: float
    owner: str
    def __init__(self, name: _Optional[str] = ..., generation: _Optional[int] = ..., created_at: _Optional[float] = ..., owner: _Optional[str] = ...) -> None: ...

class SnapshotReply(_message.Message):
    __slots__ = ("file_id", "snapshots", "generation", "history_from")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FROM_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    generation: int
    history_from: int
    def __init__(self, file_id: _Optional[int] = ..., snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ..., generation: _Optional[int] = ..., history_from: _Optional[int] = ...) -> None: ...

class FetchInfofileRequest(_message.Message):
    __slots__ = ("name", "user", "file_id", "have_generation", "have_position", "have_log_id", "have_schema", "want_generation", "want_position", "want_log_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    HAVE_GENERATION_FIELD_NUMBER: _ClassVar[int]
    HAVE_POSITION_FIELD_NUMBER: _ClassVar[int]
    HAVE_LOG_ID_FIELD_NUMBER: _ClassVar[int]
    HAVE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    WANT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    WANT_POSITION_FIELD_NUMBER: _ClassVar[int]
    WANT_LOG_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    user: str
    file_id: int
    have_generation: int
    have_position: int
    have_log_id: str
    have_schema: str
    want_generation: int
    want_position: int
    want_log_id: str
    def __init__(self, name: _Optional[str] = ..., user: _Optional[str] = ..., file_id: _Optional[int] = ..., have_generation: _Optional[int] = ..., have_position: _Optional[int] = ..., have_log_id: _Optional[str] = ..., have_schema: _Optional[str] = ..., want_generation: _Optional[int] = ..., want_position: _Optional[int] = ..., want_log_id: _Optional[str] = ...) -> None: ...

class FetchInfofileChunk(_message.Message):
    __slots__ = ("kind", "file_id", "generation", "position", "log_id", "total_size", "crc32c", "data")
    KIND_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    kind: str
    file_id: int
    generation: int
    position: int
    log_id: str
    total_size: int
    crc32c: int
    data: bytes
    def __init__(self, kind: _Optional[str] = ..., file_id: _Optional[int] = ..., generation: _Optional[int] = ..., position: _Optional[int] = ..., log_id: _Optional[str] = ..., total_size: _Optional[int] = ..., crc32c: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...
