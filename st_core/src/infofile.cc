#include "infofile.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

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

// 2: docs/infofile.md; 3: with replaced records ("Versions").
constexpr uint64_t kMaxFormatVersion = 3;

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
  int rc;

  {
    Stmt meta;
    rc = sqlite3_prepare_v2(db.db, "SELECT value FROM meta WHERE key = 'file_id'", -1, &meta.stmt,
                            nullptr);
    if (rc != SQLITE_OK) return SqlError(path, db.db, "reading meta");
    rc = sqlite3_step(meta.stmt);
    if (rc == SQLITE_DONE) {
      return Status::Corruption("infofile " + path + " has no meta.file_id");
    }
    if (rc != SQLITE_ROW) return SqlError(path, db.db, "reading meta");
    uint64_t stored;
    if (sqlite3_column_type(meta.stmt, 0) == SQLITE_INTEGER) {
      stored = static_cast<uint64_t>(sqlite3_column_int64(meta.stmt, 0));
    } else {
      const unsigned char* txt = sqlite3_column_text(meta.stmt, 0);
      stored = txt != nullptr ? std::strtoull(reinterpret_cast<const char*>(txt), nullptr, 10) : 0;
    }
    if (stored != file_id) {
      return Status::Corruption("infofile " + path + " belongs to file_id " +
                                std::to_string(stored) + ", not " + std::to_string(file_id) +
                                " (deleted and recreated?)");
    }
  }

  // A format this peer does not know may place copies where it would not
  // look: refuse it rather than reveal the wrong bytes.
  uint64_t format_version = 0;
  s = ReadMetaU64(path, db.db, "format_version", &format_version);
  if (s.ok() && format_version > kMaxFormatVersion) {
    return Status::Corruption("infofile " + path + " has format version " +
                              std::to_string(format_version) + "; this peer reads up to " +
                              std::to_string(kMaxFormatVersion) + ": upgrade st-peer");
  }

  // Versions (docs/infofile.md): stored_as names a replaced record's copies;
  // copy_history.until_at is when a version was superseded. Older infofiles
  // lack both columns.
  static const char kQuery[] =
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
  static const char kQueryBeforeVersions[] =
      "SELECT c.name, NULL, c.copy_rank FROM copies c JOIN peers p USING(peer_idx) "
      "JOIN records r ON r.name = c.name "
      "WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?2 "
      "UNION ALL "
      "SELECT h.name, NULL, h.copy_rank FROM copy_history h JOIN peers p "
      "USING(peer_idx) JOIN records r ON r.name = h.name "
      "WHERE p.peer_id = ?1 AND h.since <= ?2 AND h.until > ?2 AND ?3 = ?3";
  Stmt q;
  rc = sqlite3_prepare_v2(db.db, kQuery, -1, &q.stmt, nullptr);
  if (rc == SQLITE_ERROR && std::strstr(sqlite3_errmsg(db.db), "no such column") != nullptr) {
    rc = sqlite3_prepare_v2(db.db, kQueryBeforeVersions, -1, &q.stmt, nullptr);
  }
  if (rc != SQLITE_OK) return SqlError(path, db.db, "preparing the copies query");
  sqlite3_bind_text(q.stmt, 1, peer_id.data(), static_cast<int>(peer_id.size()), SQLITE_STATIC);
  // SQLite integers are signed: "the latest state" is the largest one.
  int64_t generation = options.generation == 0 || options.generation > INT64_MAX
                           ? INT64_MAX
                           : static_cast<int64_t>(options.generation);
  sqlite3_bind_int64(q.stmt, 2, generation);
  sqlite3_bind_double(q.stmt, 3, options.superseded_since);
  auto column_string = [&q](int col, std::string* out) {
    const void* blob = sqlite3_column_blob(q.stmt, col);
    int n = sqlite3_column_bytes(q.stmt, col);
    if (blob != nullptr && n > 0)
      out->assign(static_cast<const char*>(blob), static_cast<size_t>(n));
  };
  while ((rc = sqlite3_step(q.stmt)) == SQLITE_ROW) {
    CommittedCopy c;
    column_string(0, &c.name);
    column_string(1, &c.stored_as);
    int64_t rank = sqlite3_column_int64(q.stmt, 2);
    if (rank < 0 || rank > 255) continue;  // cannot be a copy this peer stores
    c.copy_rank = static_cast<uint8_t>(rank);
    out->push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return SqlError(path, db.db, "reading copies");
  return Status::OK();
}

}  // namespace st
