// The session extension's declarations (sqlite3changeset_apply): the system
// libsqlite3 (Debian's 3.40) exports them; its header declares them only
// with this macro.
#ifndef SQLITE_ENABLE_SESSION
#define SQLITE_ENABLE_SESSION 1
#endif
#include "infofile_copy.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "crc32c.h"
#include "env.h"
#include "log.h"
#include "protocol.h"
#include "sqlite_ro.h"

namespace st {

namespace {

// Python's repr() of a str (the ASCII rules; other bytes kept as they are).
std::string PyRepr(const char* s) {
  if (s == nullptr) return "None";
  std::string_view v(s);
  char q = (v.find('\'') != std::string_view::npos && v.find('"') == std::string_view::npos) ? '"'
                                                                                             : '\'';
  std::string out(1, q);
  for (unsigned char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

Status Errno(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

Status FsyncPath(const std::string& path, bool dir) {
  int fd = ::open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::OK() : Errno("cannot fsync", path);
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Status CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return Errno("cannot read", from);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!out) return Errno("cannot write", to);
  out << in.rdbuf();
  out.flush();
  if (!out) return Errno("cannot write", to);
  return Status::OK();
}

// The conflict handler: any conflict aborts (the copy is not the state the
// changeset follows); the table is kept for the message.
int OnConflict(void* ctx, int /*kind*/, sqlite3_changeset_iter* it) {
  const char* table = nullptr;
  int ncol = 0, op = 0, indirect = 0;
  if (sqlite3changeset_op(it, &table, &ncol, &op, &indirect) == SQLITE_OK && table != nullptr) {
    *static_cast<std::string*>(ctx) = table;
  }
  return SQLITE_CHANGESET_ABORT;
}

Status ApplyChanges(const std::string& path, const std::vector<std::string>& changesets) {
  std::string tmp = path + ".applying";
  ::unlink(tmp.c_str());
  Status s = CopyFile(path, tmp);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  sqlite::Db db;
  int rc = sqlite3_open_v2(tmp.c_str(), &db.db, SQLITE_OPEN_READWRITE, nullptr);
  auto fail = [&](const std::string& what) {
    std::string message = "infofile copy " + path + ": " + what;
    if (db.db != nullptr) message += std::string(": ") + sqlite3_errmsg(db.db);
    sqlite3_close_v2(db.db);
    db.db = nullptr;
    ::unlink(tmp.c_str());
    return Status::IOError(message);
  };
  if (rc != SQLITE_OK) return fail("cannot open a copy to apply changes to");
  if (sqlite3_exec(db.db, "PRAGMA journal_mode=DELETE; BEGIN IMMEDIATE", nullptr, nullptr,
                   nullptr) != SQLITE_OK) {
    return fail("cannot begin");
  }
  for (const std::string& cs : changesets) {
    if (cs.empty()) continue;
    std::string table;
    rc = sqlite3changeset_apply(db.db, static_cast<int>(cs.size()), const_cast<char*>(cs.data()),
                                nullptr, OnConflict, &table);
    if (rc != SQLITE_OK) {
      sqlite3_exec(db.db, "ROLLBACK", nullptr, nullptr, nullptr);
      return fail("changes do not apply (table " + (table.empty() ? "?" : table) +
                  "); it is left as it was, a snapshot is needed");
    }
  }
  if (sqlite3_exec(db.db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return fail("cannot commit the changes");
  }
  sqlite3_close_v2(db.db);
  db.db = nullptr;
  s = FsyncPath(tmp, false);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("cannot rename over", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return FsyncPath(DirOf(path), true);
}

Status WriteSnapshot(const std::string& path, uint64_t file_id, const FetchedInfofile& r) {
  if (r.file_id != file_id) {
    return Status::Corruption("the tracker sent the infofile of file_id " +
                              std::to_string(r.file_id) + " for file_id " +
                              std::to_string(file_id));
  }
  uint64_t size = 0;
  uint32_t crc = 0;
  for (const std::string& piece : r.data) {
    size += piece.size();
    crc = crc32c::Extend(crc, piece.data(), piece.size());
  }
  if (size != r.total_size || crc != r.crc32c) {
    return Status::Corruption("the snapshot of the infofile of file_id " + std::to_string(file_id) +
                              " arrived damaged (" + std::to_string(size) + " of " +
                              std::to_string(r.total_size) + " bytes, or a CRC-32C mismatch)");
  }
  std::string tmp = path + ".fetching";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  for (const std::string& piece : r.data) {
    size_t off = 0;
    while (off < piece.size()) {
      ssize_t n = ::write(fd, piece.data() + off, piece.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Status s = Errno("cannot write", tmp);
        ::close(fd);
        ::unlink(tmp.c_str());
        return s;
      }
      off += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    Status s = Errno("cannot fsync", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Errno("cannot rename over", path);
    ::unlink(tmp.c_str());
    return s;
  }
  return FsyncPath(DirOf(path), true);
}

}  // namespace

Status SchemaFingerprint(sqlite3* db, std::string* out) {
  sqlite::Stmt st;
  if (sqlite3_prepare_v2(db,
                         "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                         "ORDER BY type, name",
                         -1, &st.stmt, nullptr) != SQLITE_OK) {
    return Status::IOError(std::string("cannot read the schema: ") + sqlite3_errmsg(db));
  }
  std::string text = "[";
  bool first = true;
  int rc;
  while ((rc = sqlite3_step(st.stmt)) == SQLITE_ROW) {
    if (!first) text += ", ";
    first = false;
    text += "(";
    for (int i = 0; i < 3; ++i) {
      if (i > 0) text += ", ";
      text += PyRepr(reinterpret_cast<const char*>(sqlite3_column_text(st.stmt, i)));
    }
    text += ")";
  }
  if (rc != SQLITE_DONE) {
    return Status::IOError(std::string("cannot read the schema: ") + sqlite3_errmsg(db));
  }
  text += "]";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    return Status::IOError("SHA-256 failed");
  }
  *out = Hex(digest, len).substr(0, 32);
  return Status::OK();
}

Status ReadCopyState(const std::string& path, CopyState* out) {
  *out = CopyState();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("no copy at " + path);
    return Errno("cannot stat", path);
  }
  sqlite::BusyWait wait;
  sqlite::Db db;
  Status s = sqlite::OpenReadOnly(path, &wait, &db);
  if (!s.ok()) return s;
  sqlite::Stmt q;
  if (sqlite3_prepare_v2(db.db,
                         "SELECT key, value FROM meta WHERE key IN ('generation', 'log_index', "
                         "'log_id')",
                         -1, &q.stmt, nullptr) != SQLITE_OK) {
    return sqlite::SqlError(path, db.db, "cannot read meta");
  }
  int rc;
  while ((rc = sqlite3_step(q.stmt)) == SQLITE_ROW) {
    std::string key = reinterpret_cast<const char*>(sqlite3_column_text(q.stmt, 0));
    const char* v = reinterpret_cast<const char*>(sqlite3_column_text(q.stmt, 1));
    std::string value = v != nullptr ? v : "";
    if (key == "generation") out->generation = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "log_index") out->position = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "log_id") out->log_id = value;
  }
  if (rc != SQLITE_DONE) return sqlite::SqlError(path, db.db, "cannot read meta");
  return SchemaFingerprint(db.db, &out->schema);
}

Status ApplyFetched(const std::string& path, uint64_t file_id, const FetchedInfofile& reply) {
  if (reply.kind == "current") return Status::OK();
  if (reply.kind == "snapshot") return WriteSnapshot(path, file_id, reply);
  if (reply.kind == "changes") return ApplyChanges(path, reply.data);
  return Status::Corruption("the tracker's FetchInfofile reply is of an unknown kind '" +
                            reply.kind + "'");
}

namespace {

double UnixSeconds() { return Env::Default()->NowWall(); }

// "file 0123456789abcdef", for a copy asked for by id alone.
std::string IdLabel(uint64_t file_id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "file %016llx", static_cast<unsigned long long>(file_id));
  return buf;
}

}  // namespace

InfofileCopies::InfofileCopies(std::string meta_dir, InfofileFetcher* fetcher)
    : meta_dir_(std::move(meta_dir)), fetcher_(fetcher), tracker_(fetcher->tracker()) {
  ::mkdir(meta_dir_.c_str(), 0700);
}

std::string InfofileCopies::PathOf(uint64_t file_id) const {
  char name[40];
  std::snprintf(name, sizeof(name), "/%016llx.infofile", static_cast<unsigned long long>(file_id));
  return meta_dir_ + name;
}

std::mutex* InfofileCopies::LockOf(uint64_t file_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& m = locks_[file_id];
  if (!m) m = std::make_unique<std::mutex>();
  return m.get();
}

Status InfofileCopies::Ensure(const std::string& name, uint64_t file_id, uint64_t want_generation,
                              double deadline_s, uint64_t* have) {
  FetchFailure failure;
  return Catch(name, file_id, want_generation, deadline_s, have, &failure);
}

Status InfofileCopies::EnsureLatest(uint64_t file_id, double deadline_s, FetchFailure* failure) {
  uint64_t have = 0;
  Status s = Catch("", file_id, 0, deadline_s, &have, failure);
  // A reply that could not be applied, a copy that cannot be read: not the tracker's word.
  if (!s.ok() && *failure == FetchFailure::kNone) *failure = FetchFailure::kRefused;
  return s;
}

Status InfofileCopies::Catch(const std::string& name, uint64_t file_id, uint64_t want_generation,
                             double deadline_s, uint64_t* have, FetchFailure* failure) {
  *failure = FetchFailure::kNone;
  std::lock_guard<std::mutex> lock(*LockOf(file_id));
  const std::string path = PathOf(file_id);
  CopyState state;
  Status s = ReadCopyState(path, &state);
  if (!s.ok() && !s.IsNotFound()) {
    // An unreadable copy: start again from a snapshot.
    ::unlink(path.c_str());
    state = CopyState();
  }
  *have = state.generation;
  if (want_generation != 0 && s.ok() && state.generation >= want_generation) return Status::OK();
  FetchedInfofile reply;
  s = fetcher_->Fetch(name, file_id, state, want_generation, deadline_s, &reply);
  if (!s.ok()) {
    ++counters_.failures;
    *failure = reply.failure != FetchFailure::kNone ? reply.failure : FetchFailure::kRefused;
    if (s.IsNotFound()) lag_.Unnamed(file_id, UnixSeconds());  // the tracker has no such file
    return s;
  }
  lag_.TrackerAt(file_id, reply.generation, UnixSeconds());
  if (reply.kind == "changes" || reply.kind == "current") {
    if (state.schema.empty()) {
      return Status::Corruption("the tracker sent changes for a copy of file_id " +
                                std::to_string(file_id) + " this peer does not have");
    }
  }
  s = ApplyFetched(path, file_id, reply);
  if (!s.ok() && reply.kind == "changes") {
    // Not the state the changes follow: ask for a snapshot once.
    FetchedInfofile again;
    s = fetcher_->Fetch(name, file_id, CopyState(), want_generation, deadline_s, &again);
    if (!s.ok()) *failure = again.failure;
    if (s.ok()) s = ApplyFetched(path, file_id, again);
  }
  if (!s.ok()) {
    ++counters_.failures;
    if (*failure == FetchFailure::kNone) *failure = FetchFailure::kRefused;
    return s;
  }
  ++counters_.fetches;
  if (!reply.source.empty()) ++counters_.from_standbys;
  for (const std::string& d : reply.data) counters_.bytes += d.size();
  CopyState now;
  s = ReadCopyState(path, &now);
  if (!s.ok()) return s;
  if (now.generation != state.generation || now.position != state.position) {
    size_t bytes = 0;
    for (const std::string& d : reply.data) bytes += d.size();
    ST_LOG_INFO("infofile copy of %s: generation %llu -> %llu by %s (%zu bytes, from %s)",
                name.empty() ? IdLabel(file_id).c_str() : Printable(name).c_str(),
                static_cast<unsigned long long>(state.generation),
                static_cast<unsigned long long>(now.generation), reply.kind.c_str(), bytes,
                reply.source.empty() ? "the tracker" : ("standby " + reply.source).c_str());
  }
  *have = now.generation;
  lag_.CopyAt(file_id, now.generation, UnixSeconds());
  if (want_generation != 0 && now.generation < want_generation) {
    return Status::Unavailable("the tracker brought the copy only to generation " +
                               std::to_string(now.generation));
  }
  return Status::OK();
}

}  // namespace st
