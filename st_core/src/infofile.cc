#include "infofile.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "sqlite_ro.h"

namespace st {
namespace {

using sqlite::BusyWait;
using sqlite::Db;
using sqlite::OpenReadOnly;
using sqlite::SqlError;
using sqlite::Stmt;

// meta.<key> as an unsigned integer (stored as INTEGER or decimal TEXT).
// NotFound if the key is absent; Corruption if the value is not a number.
Status ReadMetaU64(const std::string& path, sqlite3* db, const char* key, uint64_t* v) {
  Stmt meta;
  int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &meta.stmt, nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db, "reading meta");
  sqlite3_bind_text(meta.stmt, 1, key, -1, SQLITE_STATIC);
  rc = sqlite3_step(meta.stmt);
  if (rc == SQLITE_DONE) return Status::NotFound("infofile " + path + " has no meta." + key);
  if (rc != SQLITE_ROW) return SqlError(path, db, "reading meta");
  if (sqlite3_column_type(meta.stmt, 0) == SQLITE_INTEGER) {
    *v = static_cast<uint64_t>(sqlite3_column_int64(meta.stmt, 0));
    return Status::OK();
  }
  const unsigned char* txt = sqlite3_column_text(meta.stmt, 0);
  if (txt == nullptr || *txt < '0' || *txt > '9') {
    return Status::Corruption("infofile " + path + ": meta." + key + " is not a number");
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(reinterpret_cast<const char*>(txt), &end, 10);
  if (errno != 0 || *end != '\0') {
    return Status::Corruption("infofile " + path + ": meta." + key + " is not a number");
  }
  *v = n;
  return Status::OK();
}

constexpr char kSqliteHeader[] = "SQLite format 3";  // 16 bytes with its NUL

// 2: docs/infofile.md; 3: with replaced records ("Versions"); 4: with the
// first snapshot (docs/snapshots.md).
constexpr uint64_t kMaxFormatVersion = 4;

}  // namespace

Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           std::vector<CommittedCopy>* out) {
  return ReadCommittedCopies(path, file_id, peer_id, InfofileReadOptions(), out);
}

Status ProbeInfofile(const std::string& path, const InfofileReadOptions& options,
                     uint64_t* file_id) {
  // Only SQLite databases can be infofiles; SQLite would take an empty or
  // foreign file for an empty database or fail with NOTADB, so look first.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return PosixError("open " + path, errno);
  char header[16];
  ssize_t n;
  do {
    n = ::pread(fd, header, sizeof(header), 0);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0) return PosixError("read " + path, err);
  if (n < static_cast<ssize_t>(sizeof(header)) ||
      std::memcmp(header, kSqliteHeader, sizeof(header)) != 0) {
    return Status::InvalidArgument(path + " is not an SQLite database");
  }

  BusyWait wait{options.busy_timeout_ms, options.cancel};
  Db db;
  Status s = OpenReadOnly(path, &wait, &db);
  if (!s.ok()) return s;
  Stmt q;
  int rc = sqlite3_prepare_v2(db.db, "SELECT value FROM meta WHERE key = 'format'", -1, &q.stmt,
                              nullptr);
  if (rc != SQLITE_OK) {
    // A database without a meta table is something else. Locks and damage
    // also surface here: those mean "cannot tell".
    if (rc == SQLITE_ERROR && std::strstr(sqlite3_errmsg(db.db), "no such table") != nullptr) {
      return Status::InvalidArgument(path + " has no meta table");
    }
    return SqlError(path, db.db, "reading meta.format");
  }
  rc = sqlite3_step(q.stmt);
  if (rc == SQLITE_DONE) return Status::InvalidArgument(path + " has no meta.format");
  if (rc != SQLITE_ROW) return SqlError(path, db.db, "reading meta.format");
  const unsigned char* format = sqlite3_column_text(q.stmt, 0);
  if (format == nullptr ||
      std::strcmp(reinterpret_cast<const char*>(format), "storetorrent-infofile") != 0) {
    return Status::InvalidArgument(path + " is not a storetorrent-infofile");
  }
  s = ReadMetaU64(path, db.db, "file_id", file_id);
  if (s.IsNotFound() || s.IsCorruption()) return Status::InvalidArgument(s.message());
  return s;
}

namespace {

// Corruption unless meta.file_id is file_id (a file deleted and recreated
// under the same name has another).
Status CheckFileId(const std::string& path, sqlite3* db, uint64_t file_id) {
  Stmt meta;
  int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'file_id'", -1, &meta.stmt,
                              nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db, "reading meta");
  rc = sqlite3_step(meta.stmt);
  if (rc == SQLITE_DONE) {
    return Status::Corruption("infofile " + path + " has no meta.file_id");
  }
  if (rc != SQLITE_ROW) return SqlError(path, db, "reading meta");
  uint64_t stored;
  if (sqlite3_column_type(meta.stmt, 0) == SQLITE_INTEGER) {
    stored = static_cast<uint64_t>(sqlite3_column_int64(meta.stmt, 0));
  } else {
    const unsigned char* txt = sqlite3_column_text(meta.stmt, 0);
    stored = txt != nullptr ? std::strtoull(reinterpret_cast<const char*>(txt), nullptr, 10) : 0;
  }
  if (stored != file_id) {
    return Status::Corruption("infofile " + path + " belongs to file_id " + std::to_string(stored) +
                              ", not " + std::to_string(file_id) + " (deleted and recreated?)");
  }
  return Status::OK();
}

// *has is whether the infofile has a `type` ('table', 'index') named `name`.
Status HasInSchema(const std::string& path, sqlite3* db, const char* type, const char* name,
                   bool* has) {
  Stmt q;
  int rc = sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?", -1,
                              &q.stmt, nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db, "reading the schema");
  sqlite3_bind_text(q.stmt, 1, type, -1, SQLITE_STATIC);
  sqlite3_bind_text(q.stmt, 2, name, -1, SQLITE_STATIC);
  rc = sqlite3_step(q.stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqlError(path, db, "reading the schema");
  *has = rc == SQLITE_ROW;
  return Status::OK();
}

// The copies query of an infofile without history (record_history absent):
// the snapshot at ?2, plus (?3 > 0) the versions superseded since ?3.
// Versions (docs/infofile.md): stored_as names a replaced record's copies;
// copy_history.until_at is when a version was superseded. Older infofiles
// lack both columns (kQueryBeforeVersions).
constexpr char kQueryWithoutHistory[] =
    "SELECT c.name, r.stored_as, c.copy_rank FROM copies c JOIN peers p USING(peer_idx) "
    "JOIN records r ON r.name = c.name "
    "WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?2 "
    "UNION ALL "
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p "
    "USING(peer_idx) JOIN records r ON r.name = h.name "
    "WHERE p.peer_id = ?1 AND h.since <= ?2 AND h.until > ?2 "
    "UNION ALL "
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p "
    "USING(peer_idx) WHERE p.peer_id = ?1 AND ?3 > 0 AND h.until_at >= ?3";
constexpr char kQueryBeforeVersions[] =
    "SELECT c.name, NULL, c.copy_rank FROM copies c JOIN peers p USING(peer_idx) "
    "JOIN records r ON r.name = c.name "
    "WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?2 "
    "UNION ALL "
    "SELECT h.name, NULL, h.copy_rank FROM copy_history h JOIN peers p "
    "USING(peer_idx) JOIN records r ON r.name = h.name "
    "WHERE p.peer_id = ?1 AND h.since <= ?2 AND h.until > ?2 AND ?3 = ?3";

// With history (docs/snapshots.md): the records of generation ?2 (as_of, G)
// with their copies as held at ?3 (the plan's generation, N). Every bound is
// a generation, so every peer reading it at any later time gets the same set.
// Current versions visible at G, held at N:
constexpr char kCurrentHeld[] =
    "SELECT c.name, r.stored_as, c.copy_rank FROM copies c JOIN peers p USING(peer_idx) "
    "JOIN records r ON r.name = c.name "
    "WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?3";
// Current versions' copies moved away after N (exactly once during moves):
constexpr char kCurrentMovedAway[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "JOIN records r ON r.name = h.name "
    "WHERE p.peer_id = ?1 AND coalesce(h.stored_as, h.name) = coalesce(r.stored_as, r.name) "
    "AND r.commit_seq <= ?2 AND h.since <= ?3 AND h.until > ?3";
// Without retained_copies (files of the tracker before it): versions no
// longer current (replaced or deleted) that were current at G, from the
// holders they had at min(N, until - 1) (their copies stay pinned there).
constexpr char kPastVersions[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "JOIN record_history v ON v.name = h.name "
    "AND coalesce(v.stored_as, v.name) = coalesce(h.stored_as, h.name) "
    "WHERE p.peer_id = ?1 AND v.commit_seq <= ?2 AND v.until > ?2 "
    "AND h.since <= min(?3, v.until - 1) AND h.until > min(?3, v.until - 1)";
// The same for an infofile with the index copy_history_by_peer_until: those
// holders' rows end after min(G, N) (v.until > G, N >= G), which the index
// finds without reading the older history (none at G = N). Without the index
// that bound would read every history row of the peer: 3x the time of the
// query above, which settles most rows from copy_history_by_peer alone.
constexpr char kPastVersionsByUntil[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "JOIN record_history v ON v.name = h.name "
    "AND coalesce(v.stored_as, v.name) = coalesce(h.stored_as, h.name) "
    "WHERE p.peer_id = ?1 AND h.until > min(?2, ?3) AND v.commit_seq <= ?2 AND v.until > ?2 "
    "AND h.since <= min(?3, v.until - 1) AND h.until > min(?3, v.until - 1)";
// The scrubber's: copies of versions superseded (and copies moved away)
// since the unix time ?4, for readers still at an older generation.
constexpr char kSuperseded[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "WHERE p.peer_id = ?1 AND h.until_at >= ?4";
// The scrubber's, without retained_copies: copies of past versions a
// snapshot refers to, as held when the version stopped being current.
constexpr char kSnapshotRetained[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "JOIN record_history v ON v.name = h.name "
    "AND coalesce(v.stored_as, v.name) = coalesce(h.stored_as, h.name) "
    "WHERE p.peer_id = ?1 AND h.since <= v.until - 1 AND h.until > v.until - 1 "
    "AND EXISTS (SELECT 1 FROM snapshots s "
    "WHERE s.generation >= v.commit_seq AND s.generation < v.until)";

// With retained_copies (docs/snapshots.md, "The model"): a version that
// stops being current at R keeps its copies' rows there (until = R), moved
// like copies; a move of one at m adds a copy_history row of the old holder
// tagged retained_until = R. Rows of a version's own copies are told apart
// from a later version's of the same stored name (a name deleted and put
// again) by that tag, not by generations: a retained copy moved twice after
// R has a row with since >= R, as a later version's rows have.
//
// The current versions (visible at G, held at N) are read by kCurrentHeld
// above, and their copies moved away after N by moves made while current (a
// retained copy's moves belong to its past version, whatever its name):
constexpr char kCurrentMovedAwayUntagged[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "JOIN records r ON r.name = h.name "
    "WHERE p.peer_id = ?1 AND h.retained_until IS NULL "
    "AND coalesce(h.stored_as, h.name) = coalesce(r.stored_as, r.name) "
    "AND r.commit_seq <= ?2 AND h.since <= ?3 AND h.until > ?3";
// Past versions current at G, held at N by their retained holders (with
// the index retained_copies_by_peer_until, none read at G = N unless a
// version ended after N):
constexpr char kRetainedHeld[] =
    "SELECT k.name, k.stored_as, k.copy_rank FROM retained_copies k JOIN peers p "
    "USING(peer_idx) JOIN record_history v ON v.name = k.name AND v.until = k.until "
    "WHERE p.peer_id = ?1 AND k.until > ?2 AND k.since <= ?3 AND v.commit_seq <= ?2";
// ... and by holders that moved them away after N: while the version was
// current (untagged rows of its stored name that started before it ended)
// or after (rows tagged with its until).
constexpr char kPastMovedAway[] =
    "SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx) "
    "JOIN record_history v ON v.name = h.name "
    "AND coalesce(v.stored_as, v.name) = coalesce(h.stored_as, h.name) "
    "WHERE p.peer_id = ?1 AND h.until > ?3 AND h.since <= ?3 "
    "AND v.commit_seq <= ?2 AND v.until > ?2 "
    "AND (h.retained_until = v.until OR (h.retained_until IS NULL AND h.since < v.until))";
// The scrubber's: every retained copy of this peer (the tracker drops the
// rows once no snapshot holds the version and --history-age has passed).
constexpr char kRetainedAll[] =
    "SELECT k.name, k.stored_as, k.copy_rank FROM retained_copies k JOIN peers p "
    "USING(peer_idx) WHERE p.peer_id = ?1";

// What an infofile with history has of format 4's tables and indexes.
struct HistorySchema {
  bool snapshots = false;  // the snapshots table
  bool by_until = false;   // the index copy_history_by_peer_until
  bool retained = false;   // the retained_copies table (and copy_history.retained_until)
};

// The copies query of an infofile with history, for these options.
std::string HistoryQuery(const InfofileReadOptions& options, const HistorySchema& schema) {
  std::string q;
  if (schema.retained) {
    q = std::string(kCurrentHeld) + " UNION ALL " + kCurrentMovedAwayUntagged + " UNION ALL " +
        kRetainedHeld + " UNION ALL " + kPastMovedAway;
  } else {
    q = std::string(kCurrentHeld) + " UNION ALL " + kCurrentMovedAway + " UNION ALL " +
        (schema.by_until ? kPastVersionsByUntil : kPastVersions);
  }
  if (options.superseded_since > 0) q += std::string(" UNION ALL ") + kSuperseded;
  if (options.snapshot_retained && schema.retained) {
    q += std::string(" UNION ALL ") + kRetainedAll;
  } else if (options.snapshot_retained && schema.snapshots) {
    q += std::string(" UNION ALL ") + kSnapshotRetained;
  }
  return q;
}

// *has is whether `table` has a column `column`.
Status HasColumn(const std::string& path, sqlite3* db, const char* table, const char* column,
                 bool* has) {
  Stmt q;
  int rc = sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?) WHERE name = ?", -1, &q.stmt,
                              nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db, "reading the schema");
  sqlite3_bind_text(q.stmt, 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_text(q.stmt, 2, column, -1, SQLITE_STATIC);
  rc = sqlite3_step(q.stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqlError(path, db, "reading the schema");
  *has = rc == SQLITE_ROW;
  return Status::OK();
}

// SQLite integers are signed: "the latest state" (0) is the largest one.
int64_t BoundOf(uint64_t generation) {
  return generation == 0 || generation > INT64_MAX ? INT64_MAX : static_cast<int64_t>(generation);
}

// Steps q (columns name, stored_as, copy_rank) into *out.
Status CollectCopies(const std::string& path, sqlite3* db, sqlite3_stmt* q,
                     std::vector<CommittedCopy>* out) {
  auto column_string = [q](int col, std::string* s) {
    const void* blob = sqlite3_column_blob(q, col);
    int n = sqlite3_column_bytes(q, col);
    if (blob != nullptr && n > 0) s->assign(static_cast<const char*>(blob), static_cast<size_t>(n));
  };
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    CommittedCopy c;
    column_string(0, &c.name);
    column_string(1, &c.stored_as);
    int64_t rank = sqlite3_column_int64(q, 2);
    if (rank < 0 || rank > 255) continue;  // cannot be a copy this peer stores
    c.copy_rank = static_cast<uint8_t>(rank);
    out->push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return SqlError(path, db, "reading copies");
  return Status::OK();
}

}  // namespace

Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           const InfofileReadOptions& options, std::vector<CommittedCopy>* out) {
  out->clear();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return PosixError("infofile " + path, errno);
  }
  BusyWait wait{options.busy_timeout_ms, options.cancel};
  Db db;
  Status s = OpenReadOnly(path, &wait, &db);
  if (!s.ok()) return s;
  s = CheckFileId(path, db.db, file_id);
  if (!s.ok()) return s;

  // A format this peer does not know may place copies where it would not
  // look: refuse it rather than reveal the wrong bytes.
  uint64_t format_version = 0;
  s = ReadMetaU64(path, db.db, "format_version", &format_version);
  if (s.ok() && format_version > kMaxFormatVersion) {
    return Status::Corruption("infofile " + path + " has format version " +
                              std::to_string(format_version) + "; this peer reads up to " +
                              std::to_string(kMaxFormatVersion) + ": upgrade st-peer");
  }

  // History (format 4's tables) is decided by the tables, not the version:
  // the tracker may add them to a file of format 2 or 3.
  bool history = false;
  HistorySchema schema;
  s = HasInSchema(path, db.db, "table", "record_history", &history);
  if (s.ok() && history) s = HasInSchema(path, db.db, "table", "snapshots", &schema.snapshots);
  if (s.ok() && history) {
    s = HasInSchema(path, db.db, "index", "copy_history_by_peer_until", &schema.by_until);
  }
  if (s.ok() && history) s = HasInSchema(path, db.db, "table", "retained_copies", &schema.retained);
  if (!s.ok()) return s;
  if (schema.retained) {
    // Without the tag a retained copy's moves cannot be told from a later
    // version's: refuse rather than reveal a record twice or not at all.
    bool tagged = false;
    s = HasColumn(path, db.db, "copy_history", "retained_until", &tagged);
    if (!s.ok()) return s;
    if (!tagged) {
      return Status::Corruption("infofile " + path +
                                " has retained_copies but no copy_history.retained_until");
    }
  }
  const int64_t n = BoundOf(options.generation);
  // as_of 0 is the file before its first commit, not the latest state.
  const int64_t g =
      options.as_of ? static_cast<int64_t>(std::min<uint64_t>(*options.as_of, INT64_MAX)) : n;
  if (!history && options.as_of && *options.as_of != options.generation) {
    return Status::InvalidArgument("infofile " + path +
                                   " keeps no history (no record_history table): it cannot be "
                                   "read as of generation " +
                                   std::to_string(*options.as_of) + ", only at its generation");
  }

  Stmt q;
  int rc;
  if (history) {
    std::string sql = HistoryQuery(options, schema);
    rc = sqlite3_prepare_v2(db.db, sql.c_str(), -1, &q.stmt, nullptr);
  } else {
    rc = sqlite3_prepare_v2(db.db, kQueryWithoutHistory, -1, &q.stmt, nullptr);
    if (rc == SQLITE_ERROR && std::strstr(sqlite3_errmsg(db.db), "no such column") != nullptr) {
      rc = sqlite3_prepare_v2(db.db, kQueryBeforeVersions, -1, &q.stmt, nullptr);
    }
  }
  if (rc != SQLITE_OK) return SqlError(path, db.db, "preparing the copies query");
  sqlite3_bind_text(q.stmt, 1, peer_id.data(), static_cast<int>(peer_id.size()), SQLITE_STATIC);
  if (history) {
    sqlite3_bind_int64(q.stmt, 2, g);
    sqlite3_bind_int64(q.stmt, 3, n);
    sqlite3_bind_double(q.stmt, 4, options.superseded_since);
  } else {
    sqlite3_bind_int64(q.stmt, 2, n);
    sqlite3_bind_double(q.stmt, 3, options.superseded_since);
  }
  return CollectCopies(path, db.db, q.stmt, out);
}

}  // namespace st
