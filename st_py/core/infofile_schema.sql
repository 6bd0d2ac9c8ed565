-- The SQL schema of a format-2 infofile: the one copy. st_py/infofile.py
-- loads it, CMake compiles it into the C++ tests and fuzz targets, and
-- docs/infofile.md shows it (tests/test_infofile_schema.py keeps them equal).

CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
-- keys: format = 'storetorrent-infofile', format_version = 2, file_id,
--       name, replication ('x2'), copies (2), blocksize, est_size,
--       created_at (unix s), owner, generation (bumped by every commit,
--       delete and rebalance move), protocol ('client-sync'), placement
--       ('random') (both absent in files made before they existed),
--       filters ('zstd,aes-256-gcm'; '' or absent: none; docs/filters.md),
--       key_check (HMAC of the encryption key; never the key);
--       create_request (the Create request id that made the file: a
--       retried create is answered from it, not refused as existing);
--       format_version becomes 3 with the first replaced record (versions)
--       and 4 with the history tables below (docs/snapshots.md);
--       history_from (format 4: the oldest generation whose history is
--       whole; older ones are readable only at a snapshot's generation);
--       log_index (the tracker's metadata log: the index of the last
--       operation applied, written in its transaction; docs/metadata-log.md),
--       pruned_at (unix s: when history was last pruned)

CREATE TABLE peers(
  peer_idx INTEGER PRIMARY KEY,       -- index in the file's peerlist; rows are
                                      -- only appended (rebalance), never renumbered
  peer_id  TEXT NOT NULL UNIQUE,      -- the peer's UUID (<data>/PEER_ID)
  addr     TEXT NOT NULL              -- host:port at scheduling time
);

CREATE TABLE records(
  name         TEXT PRIMARY KEY,      -- record name (UTF-8)
  size         INTEGER NOT NULL,      -- bytes of one copy, as stored (after filters)
  crc32c       INTEGER NOT NULL,      -- CRC-32C of the bytes
  commit_seq   INTEGER NOT NULL,      -- generation of the commit that added it
  committed_at REAL NOT NULL,         -- unix seconds
  version      INTEGER NOT NULL DEFAULT 0,  -- 0, then + 1 by each replacement
  stored_as    TEXT,                  -- the name its copies are stored under on
                                      -- the peers; NULL: `name` (never replaced)
  schema_id    INTEGER,               -- its format and schema (schemas); NULL: not
                                      -- kept (a stripe, a name readers skip, bytes
                                      -- of no decodable format, an older writer)
  logical_size INTEGER                -- the user's bytes, before the file's filters
                                      -- (size is what the peers store); NULL: written
                                      -- before it was kept (docs/infofile.md, "Sizes")
);
CREATE INDEX records_by_schema ON records(schema_id);

CREATE TABLE schemas(                -- the distinct record schemas, kept at write
  schema_id INTEGER PRIMARY KEY,       -- time so scans read no record to learn them
  format    TEXT NOT NULL,             -- parquet, arrow, arrows, csv, json, raw
  schema    BLOB NOT NULL,             -- the Arrow IPC serialization of the schema
  UNIQUE(format, schema)               -- absent in files made before it existed
);

CREATE TABLE copies(                -- the current holder of each copy
  name      TEXT NOT NULL,
  copy_rank INTEGER NOT NULL,         -- 0 .. copies-1
  peer_idx  INTEGER NOT NULL,
  since     INTEGER NOT NULL,         -- generation from which it holds it
  PRIMARY KEY(name, copy_rank)
) WITHOUT ROWID;
CREATE INDEX copies_by_peer ON copies(peer_idx, name);

CREATE TABLE copy_history(           -- holders replaced by a rebalance, and
  hist_id   INTEGER PRIMARY KEY,       -- the copies of versions replaced by a
                                       -- newer one. hist_id: the row's key (the
                                       -- rowid; SQLite sessions track only keyed
                                       -- tables, docs/metadata-log.md); added
                                       -- to older files by the tracker
  name      TEXT NOT NULL,
  copy_rank INTEGER NOT NULL,
  peer_idx  INTEGER NOT NULL,
  since     INTEGER NOT NULL,         -- held from this generation ...
  until     INTEGER NOT NULL,         -- ... to just before this one
  stored_as TEXT,                     -- as records.stored_as then
  until_at  REAL,                     -- a replaced version: unix s it was replaced
  retained_until INTEGER              -- format 4 with retained_copies: a move of a
                                      -- retained copy, the `until` of its version
                                      -- (retained_copies); NULL: a copy of the
                                      -- version current when it moved
);
CREATE INDEX copy_history_by_peer ON copy_history(peer_idx, name);
CREATE INDEX copy_history_by_peer_until ON copy_history(peer_idx, until);  -- format 4: the
                                      -- history a peer reads as of a generation ends after it

CREATE TABLE pending_copies(         -- copies of committed records not stored
  name      TEXT NOT NULL,             -- yet (async protocols): GET and GET_LOCAL
  copy_rank INTEGER NOT NULL,          -- use only `copies`; when a pending copy is
  peer_idx  INTEGER NOT NULL,          -- stored (by its writer or by repair) it
  since     INTEGER NOT NULL,          -- moves to `copies`. Absent in files made
  PRIMARY KEY(name, copy_rank)         -- before it existed (none pending there)
) WITHOUT ROWID;

CREATE TABLE quarantined_copies(     -- copies a peer's verifier found bad and
  name      TEXT NOT NULL,             -- moved aside (docs/reliability.md, "Copy
  copy_rank INTEGER NOT NULL,          -- states"): no reader uses them; repair
  peer_idx  INTEGER NOT NULL,          -- stores a good copy at the rank (from a
  since     INTEGER NOT NULL,          -- live one) and the row moves to `copies`.
  at        REAL NOT NULL,             -- unix s of the verifier's report. Absent in
  PRIMARY KEY(name, copy_rank)         -- older files (their quarantined copies are
) WITHOUT ROWID;                       -- pending_copies rows)

CREATE TABLE commit_requests(        -- the client's id of every Commit request
  request_id TEXT PRIMARY KEY,         -- applied in the last hour: a retried request
  generation INTEGER NOT NULL,         -- (its reply was lost) is answered from here,
  at         REAL NOT NULL             -- never applied again, so it cannot bring back
) WITHOUT ROWID;                       -- a record deleted since. Absent in older files
CREATE INDEX commit_requests_by_time ON commit_requests(at);

CREATE TABLE objects(                -- striped objects (docs/striping.md): the
  name         TEXT PRIMARY KEY,       -- object's stripes are the records named
  size         INTEGER NOT NULL,       -- '.st-stripe/' || name || '/' || index
  stripe_size  INTEGER NOT NULL,       -- (8 digits); the object is visible once
  stripes      INTEGER NOT NULL,       -- this row is, after every stripe record
  crc32c       INTEGER NOT NULL,       -- of the whole object
  commit_seq   INTEGER NOT NULL,
  committed_at REAL NOT NULL,          -- absent in files made before it existed
  schema_id    INTEGER                 -- as records.schema_id
) WITHOUT ROWID;

CREATE TABLE user_meta(              -- a record's or object's version's user
  name       TEXT NOT NULL,            -- metadata (content type, user pairs;
  commit_seq INTEGER NOT NULL,         -- st_py/core/user_meta.py): the version
  meta       BLOB NOT NULL,            -- is the row of records, objects or their
  PRIMARY KEY(name, commit_seq)        -- history with this name and commit_seq;
) WITHOUT ROWID;                       -- pruned with it. No row: none (absent in
                                       -- files made before it existed)

-- Format 4: history and snapshots (docs/snapshots.md). A version that stops
-- being current (replaced or deleted at generation `until`) keeps its row
-- here and its copies' rows in retained_copies (until = the same
-- generation; files made before that table kept them in copy_history), so
-- any generation G reads the records current at G with their bytes then.
CREATE TABLE record_history(         -- versions no longer current
  name         TEXT NOT NULL,
  version      INTEGER NOT NULL,       -- as records.version then
  stored_as    TEXT,                   -- as records.stored_as then (NULL: `name`)
  size         INTEGER NOT NULL,       -- as the records columns then
  crc32c       INTEGER NOT NULL,
  commit_seq   INTEGER NOT NULL,       -- current from this generation ...
  committed_at REAL NOT NULL,
  schema_id    INTEGER,
  logical_size INTEGER,
  until        INTEGER NOT NULL,       -- ... to just before this one
  until_at     REAL NOT NULL,          -- unix s of the change that ended it
  PRIMARY KEY(name, until)
) WITHOUT ROWID;
CREATE INDEX record_history_by_seq ON record_history(commit_seq, until);
CREATE INDEX record_history_by_until_at ON record_history(until_at);

CREATE TABLE object_history(         -- striped objects no longer current (their
  name         TEXT NOT NULL,          -- stripes are records, with history of
  size         INTEGER NOT NULL,       -- their own)
  stripe_size  INTEGER NOT NULL,
  stripes      INTEGER NOT NULL,
  crc32c       INTEGER NOT NULL,
  commit_seq   INTEGER NOT NULL,
  committed_at REAL NOT NULL,
  schema_id    INTEGER,
  until        INTEGER NOT NULL,
  until_at     REAL NOT NULL,
  PRIMARY KEY(name, until)
) WITHOUT ROWID;

CREATE TABLE generations(            -- the generation log: when each generation
  generation INTEGER PRIMARY KEY,      -- was committed (as_of a time)
  at         REAL NOT NULL
);

CREATE TABLE snapshots(              -- named generations, kept readable with
  name       TEXT PRIMARY KEY,         -- every copy they need until deleted
  generation INTEGER NOT NULL,
  created_at REAL NOT NULL,
  owner      TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;

CREATE TABLE retained_copies(        -- the current holders of the copies of versions
  name      TEXT NOT NULL,             -- no longer current (a record_history row:
  until     INTEGER NOT NULL,          -- name, until), kept while the history is
  copy_rank INTEGER NOT NULL,          -- (docs/snapshots.md); moved like copies
  peer_idx  INTEGER NOT NULL,
  since     INTEGER NOT NULL,          -- generation from which it holds it
  stored_as TEXT,                      -- as record_history.stored_as (NULL: name)
  PRIMARY KEY(name, until, copy_rank)
) WITHOUT ROWID;
CREATE INDEX retained_copies_by_peer_until ON retained_copies(peer_idx, until);  -- a
                                      -- peer's read as of G: the versions that end after G

CREATE TABLE retained_unstored(      -- copies of versions no longer current that are
  name      TEXT NOT NULL,             -- not stored (the copy model's quarantined and
  until     INTEGER NOT NULL,          -- pending states, docs/reliability.md): their
  copy_rank INTEGER NOT NULL,          -- holder's verifier quarantined them, or the
  peer_idx  INTEGER NOT NULL,          -- version ended with them quarantined or
  since     INTEGER NOT NULL,          -- pending. Not in retained_copies; repair
  state     TEXT NOT NULL,             -- stores them again ('quarantined' | 'pending')
  PRIMARY KEY(name, until, copy_rank)
) WITHOUT ROWID;
