// Read-only SQLite access to infofiles, shared by the readers on the peer
// (GET_LOCAL's commit filter and the scrubber: infofile.cc; the infofile
// mirror: meta_mirror.cc). Infofiles are written only by the tracker
// (docs/infofile.md); a peer opens them with mode=ro and waits for the
// tracker's write lock in 10 ms steps, unless it is cancelled (shutdown).
#ifndef ST_CORE_SQLITE_RO_H_
#define ST_CORE_SQLITE_RO_H_

#include <sqlite3.h>

#include <atomic>
#include <string>

#include "status.h"

namespace st {
namespace sqlite {

// An open connection, closed on destruction.
struct Db {
  Db() = default;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
  sqlite3* db = nullptr;
};

// A prepared statement, finalized on destruction.
struct Stmt {
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() {
    if (stmt != nullptr) sqlite3_finalize(stmt);
  }
  sqlite3_stmt* stmt = nullptr;
};

// How long to wait for a lock, and a flag that makes a wait give up at once.
struct BusyWait {
  int timeout_ms = 5000;
  const std::atomic<bool>* cancel = nullptr;
};

// The SQLite URI that opens `path` read-only ("file:<escaped path>?mode=ro").
std::string ReadOnlyUri(const std::string& path);

// Opens `path` read-only; `wait` must outlive the connection.
Status OpenReadOnly(const std::string& path, BusyWait* wait, Db* db);

// IOError "infofile <path>: <what>: <SQLite's message>".
Status SqlError(const std::string& path, sqlite3* db, const char* what);

}  // namespace sqlite
}  // namespace st

#endif  // ST_CORE_SQLITE_RO_H_
