#include "infofile.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace st {
namespace {

std::string UriEscape(const std::string& path) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    bool safe = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '/' || c == '-' || c == '_' || c == '.' || c == '~';
    if (safe) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

class Db {
 public:
  ~Db() {
    if (db_ != nullptr) sqlite3_close_v2(db_);
  }
  sqlite3* db_ = nullptr;
};

class Stmt {
 public:
  ~Stmt() {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
  }
  sqlite3_stmt* stmt_ = nullptr;
};

Status SqlError(const std::string& path, sqlite3* db, const char* what) {
  return Status::IOError("infofile " + path + ": " + what + ": " +
                         (db != nullptr ? sqlite3_errmsg(db) : "out of memory"));
}

}  // namespace

Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           std::vector<CommittedCopy>* out) {
  out->clear();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return PosixError("infofile " + path, errno);
  }
  Db db;
  std::string uri = "file:" + UriEscape(path) + "?mode=ro";
  int rc = sqlite3_open_v2(uri.c_str(), &db.db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db.db_, "open");
  sqlite3_busy_timeout(db.db_, 5000);

  {
    Stmt meta;
    rc = sqlite3_prepare_v2(db.db_, "SELECT value FROM meta WHERE key = 'file_id'", -1,
                            &meta.stmt_, nullptr);
    if (rc != SQLITE_OK) return SqlError(path, db.db_, "reading meta");
    rc = sqlite3_step(meta.stmt_);
    if (rc == SQLITE_DONE) {
      return Status::Corruption("infofile " + path + " has no meta.file_id");
    }
    if (rc != SQLITE_ROW) return SqlError(path, db.db_, "reading meta");
    uint64_t stored;
    if (sqlite3_column_type(meta.stmt_, 0) == SQLITE_INTEGER) {
      stored = static_cast<uint64_t>(sqlite3_column_int64(meta.stmt_, 0));
    } else {
      const unsigned char* txt = sqlite3_column_text(meta.stmt_, 0);
      stored = txt != nullptr ? std::strtoull(reinterpret_cast<const char*>(txt), nullptr, 10) : 0;
    }
    if (stored != file_id) {
      return Status::Corruption("infofile " + path + " belongs to file_id " +
                                std::to_string(stored) + ", not " + std::to_string(file_id) +
                                " (deleted and recreated?)");
    }
  }

  Stmt q;
  rc = sqlite3_prepare_v2(db.db_,
                          "SELECT c.name, c.copy_rank FROM copies c JOIN peers p USING(peer_idx) "
                          "WHERE p.peer_id = ?",
                          -1, &q.stmt_, nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db.db_, "preparing the copies query");
  sqlite3_bind_text(q.stmt_, 1, peer_id.data(), static_cast<int>(peer_id.size()), SQLITE_STATIC);
  while ((rc = sqlite3_step(q.stmt_)) == SQLITE_ROW) {
    CommittedCopy c;
    const void* blob = sqlite3_column_blob(q.stmt_, 0);
    int n = sqlite3_column_bytes(q.stmt_, 0);
    if (blob != nullptr && n > 0) c.name.assign(static_cast<const char*>(blob), static_cast<size_t>(n));
    int64_t rank = sqlite3_column_int64(q.stmt_, 1);
    if (rank < 0 || rank > 255) continue;  // cannot be a copy this peer stores
    c.copy_rank = static_cast<uint8_t>(rank);
    out->push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return SqlError(path, db.db_, "reading copies");
  return Status::OK();
}

}  // namespace st
