#include "meta_mirror.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "coding.h"
#include "crc32c.h"
#include "infofile.h"
#include "log.h"
#include "namespace_walk.h"
#include "record_store.h"
#include "sqlite_ro.h"

namespace st {
namespace {

constexpr char kMetaDir[] = "/meta";
constexpr char kMirrorSuffix[] = ".infofile";
constexpr char kTmpPrefix[] = ".tmp-";
constexpr char kSqliteHeader[] = "SQLite format 3";  // 16 bytes with its NUL

bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

using sqlite::BusyWait;
using sqlite::Db;
using sqlite::OpenReadOnly;
using sqlite::SqlError;
using sqlite::Stmt;

// meta.<key> as text; NotFound if absent.
Status MetaText(const std::string& path, sqlite3* db, const char* key, std::string* out) {
  Stmt q;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &q.stmt, nullptr) !=
      SQLITE_OK) {
    return SqlError(path, db, "reading meta");
  }
  sqlite3_bind_text(q.stmt, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(q.stmt);
  if (rc == SQLITE_DONE) return Status::NotFound(path + " has no meta." + key);
  if (rc != SQLITE_ROW) return SqlError(path, db, "reading meta");
  const unsigned char* t = sqlite3_column_text(q.stmt, 0);
  int n = sqlite3_column_bytes(q.stmt, 0);
  out->assign(t != nullptr ? reinterpret_cast<const char*>(t) : "", t != nullptr ? n : 0);
  return Status::OK();
}

Status MetaU64(const std::string& path, sqlite3* db, const char* key, uint64_t* v) {
  std::string text;
  Status s = MetaText(path, db, key, &text);
  if (!s.ok()) return s.IsNotFound() ? Status::Corruption(s.message()) : s;
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || errno != 0 || *end != '\0') {
    return Status::Corruption(path + ": meta." + key + " is not a number");
  }
  *v = n;
  return Status::OK();
}

// file_id, generation and name of an open infofile.
Status ReadMeta(const std::string& path, sqlite3* db, MetaListEntry* e) {
  std::string format;
  Status s = MetaText(path, db, "format", &format);
  if (s.IsNotFound() || (s.ok() && format != "storetorrent-infofile")) {
    return Status::Corruption(path + " is not a storetorrent-infofile");
  }
  if (!s.ok()) return s;
  if (!(s = MetaU64(path, db, "file_id", &e->file_id)).ok()) return s;
  if (!(s = MetaU64(path, db, "generation", &e->generation)).ok()) return s;
  s = MetaText(path, db, "name", &e->name);
  if (s.IsNotFound()) return Status::Corruption(s.message());
  return s;
}

// Size and CRC-32C of a whole file, read through the Env.
Status Checksum(Env* env, const std::string& path, uint64_t* size, uint32_t* crc) {
  std::unique_ptr<RandomAccessFile> f;
  Status s = env->NewRandomAccessFile(path, &f);
  if (!s.ok()) return s;
  std::string buf(1 << 20, '\0');
  uint64_t off = 0;
  uint32_t c = 0;
  while (true) {
    size_t got = 0;
    s = f->Read(off, buf.size(), &buf[0], &got);
    if (!s.ok()) return s;
    if (got == 0) break;
    c = crc32c::Extend(c, buf.data(), got);
    off += got;
  }
  *size = off;
  *crc = c;
  return Status::OK();
}

// The identity of a namespace file that tells whether it changed: its stat
// and, for an SQLite database, the header's file change counter (bytes
// 24..27, big-endian), which every write transaction in rollback-journal
// mode bumps, so two commits in one mtime tick are told apart.
// *sqlite is false if the file does not start with the SQLite header.
Status Identify(Env* env, const std::string& path, const FileInfo& st, MirrorState::Seen* id,
                bool* sqlite) {
  id->dev = st.dev;
  id->ino = st.ino;
  id->size = st.size;
  id->mtime_ns = st.mtime_ns;
  id->change_counter = 0;
  *sqlite = false;
  std::unique_ptr<RandomAccessFile> f;
  Status s = env->NewRandomAccessFile(path, &f);
  if (!s.ok()) return s;
  char header[100];
  size_t got = 0;
  s = f->Read(0, sizeof(header), header, &got);
  if (!s.ok()) return s;
  if (got < sizeof(header) || std::memcmp(header, kSqliteHeader, 16) != 0) return Status::OK();
  *sqlite = true;
  const auto* p = reinterpret_cast<const uint8_t*>(header + 24);
  id->change_counter =
      (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  return Status::OK();
}

// Copies the infofile at src (of file_id) to its mirror. *copied is false
// (and nothing changes) if the infofile neither lists peer_id in its
// peerlist nor is of a held file id, or if its generation is below
// *current's (a stale copy). Fills *entry on a copy.
Status CopyInfofile(const MirrorPassOptions& o, Env* env, const std::atomic<bool>* cancel,
                    const std::string& src, uint64_t file_id, const MetaListEntry* current,
                    bool* copied, MetaListEntry* entry) {
  *copied = false;
  BusyWait wait{o.busy_timeout_ms, cancel};
  Db in;
  Status s = OpenReadOnly(src, &wait, &in);
  if (!s.ok()) return s;
  if (o.held_file_ids.count(file_id) == 0) {
    Stmt q;
    if (sqlite3_prepare_v2(in.db, "SELECT 1 FROM peers WHERE peer_id = ?", -1, &q.stmt, nullptr) !=
        SQLITE_OK) {
      return SqlError(src, in.db, "reading peers");
    }
    sqlite3_bind_text(q.stmt, 1, o.peer_id.data(), static_cast<int>(o.peer_id.size()),
                      SQLITE_STATIC);
    int rc = sqlite3_step(q.stmt);
    if (rc == SQLITE_DONE) return Status::OK();  // not this peer's file
    if (rc != SQLITE_ROW) return SqlError(src, in.db, "reading peers");
  }

  const std::string dir = o.data_dir + kMetaDir;
  const std::string tmp = dir + "/" + kTmpPrefix + Hex16(file_id);
  const std::string dst = MirrorPath(o.data_dir, file_id);
  env->RemoveFile(tmp);  // a leftover of a failed copy, if any
  {
    Db out;
    int rc =
        sqlite3_open_v2(tmp.c_str(), &out.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    if (rc != SQLITE_OK) {
      s = SqlError(tmp, out.db, "create");
    } else {
      // No journal for a file nobody else sees until it is whole; FULL: the
      // copy is fsynced when the backup commits.
      sqlite3_exec(out.db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=FULL", nullptr, nullptr,
                   nullptr);
      sqlite3_backup* b = sqlite3_backup_init(out.db, "main", in.db, "main");
      if (b == nullptr) {
        s = SqlError(tmp, out.db, "backup");
      } else {
        rc = sqlite3_backup_step(b, -1);  // the whole file under one read lock: one snapshot
        int frc = sqlite3_backup_finish(b);
        if (rc != SQLITE_DONE) {
          s = Status::IOError(src + ": copy to " + tmp + ": " + sqlite3_errstr(rc));
        } else if (frc != SQLITE_OK) {
          s = SqlError(tmp, out.db, "backup");
        } else {
          s = ReadMeta(tmp, out.db, entry);
          if (s.ok() && entry->file_id != file_id) {
            s = Status::Corruption(src + " changed its file id during the copy");
          }
        }
      }
    }
    if (s.ok() && sqlite3_close(out.db) != SQLITE_OK) s = SqlError(tmp, out.db, "close");
    if (s.ok()) out.db = nullptr;
  }
  if (s.ok()) s = Checksum(env, tmp, &entry->size, &entry->crc32c);
  if (s.ok() && current != nullptr && entry->generation < current->generation) {
    ST_LOG_DEBUG("mirror: %s is at generation %llu, older than the mirror's %llu; not copied",
                 src.c_str(), static_cast<unsigned long long>(entry->generation),
                 static_cast<unsigned long long>(current->generation));
    env->RemoveFile(tmp);
    return Status::OK();
  }
  if (s.ok()) s = env->RenameFile(tmp, dst);
  if (s.ok()) s = env->SyncDir(dir);
  if (!s.ok()) {
    env->RemoveFile(tmp);
    return s;
  }
  *copied = true;
  return Status::OK();
}

// Step 1: the catalog from <data>/meta/.
Status LoadCatalog(const MirrorPassOptions& o, Env* env, MirrorState* state) {
  const std::string dir = o.data_dir + kMetaDir;
  Status s = env->CreateDir(dir);
  if (!s.ok() && !s.IsAlreadyExists()) return Status::IOError("mirror directory: " + s.message());
  std::vector<std::string> names;
  s = env->GetChildren(dir, &names);
  if (!s.ok()) return Status::IOError("mirror directory: " + s.message());
  state->mirrors.clear();
  for (const std::string& n : names) {
    std::string path = dir + "/" + n;
    if (n.compare(0, sizeof(kTmpPrefix) - 1, kTmpPrefix) == 0) {
      env->RemoveFile(path);
      continue;
    }
    uint64_t file_id;
    if (!EndsWith(n, kMirrorSuffix) ||
        !ParseLowerHex(std::string_view(n).substr(0, n.size() - (sizeof(kMirrorSuffix) - 1)), 16,
                       &file_id)) {
      continue;
    }
    MetaListEntry e;
    s = ReadMirrorEntry(env, path, &e);
    if (s.ok() && e.file_id != file_id) {
      s = Status::Corruption(path + " holds file id " + Hex16(e.file_id));
    }
    if (!s.ok()) {
      // Kept for an operator to look at; the next copy of the file replaces it.
      ST_LOG_WARN("mirror: %s is unusable and not listed: %s", path.c_str(), s.ToString().c_str());
      continue;
    }
    state->mirrors[file_id] = std::move(e);
  }
  state->loaded = true;
  return Status::OK();
}

// --metadata fetch, first: the files the tracker named in its announce
// replies (copy_lag.h) whose copy is missing or behind, the largest lag
// first, at most o.catch_up_per_pass of them, each brought to the
// generation named (or later). Their ids go to *done.
void CatchUpNamed(const MirrorPassOptions& o, Env* env, const std::atomic<bool>* cancel,
                  MirrorState* state, MirrorPassStats* stats, std::set<uint64_t>* done) {
  for (const CopyLag::Named& f : o.copies->lag()->Behind(o.catch_up_per_pass)) {
    if (Cancelled(cancel)) return;
    uint64_t have = 0;
    Status s = o.copies->Ensure(f.name, f.file_id, f.generation, o.fetch_deadline_s, &have);
    if (s.IsNotFound()) continue;  // deleted since it was named (InfofileCopies unnamed it)
    done->insert(f.file_id);
    if (!s.ok()) {
      ST_LOG_WARN("copies: cannot bring the copy of %s (file %016llx) to generation %llu, the "
                  "tracker's: %s; retried next pass",
                  Printable(f.name).c_str(), static_cast<unsigned long long>(f.file_id),
                  static_cast<unsigned long long>(f.generation), s.ToString().c_str());
      ++stats->errors;
      stats->complete = false;
      continue;
    }
    MetaListEntry now;
    s = ReadMirrorEntry(env, MirrorPath(o.data_dir, f.file_id), &now);
    if (!s.ok()) {
      ++stats->errors;
      continue;
    }
    state->mirrors[f.file_id] = std::move(now);
    ++stats->copied;
  }
}

// --metadata fetch: the catalog is what <data>/meta/ holds (GET_LOCAL and
// CatchUpNamed make copies between passes), each copy brought to the
// tracker's latest state.
Status RunCopiesPass(const MirrorPassOptions& o, Env* env, const std::atomic<bool>* cancel,
                     MirrorState* state, MirrorPassStats* stats) {
  Status s = LoadCatalog(o, env, state);
  if (!s.ok()) return s;
  stats->complete = true;
  CopyLag* lag = o.copies->lag();
  for (const auto& [file_id, entry] : state->mirrors)
    lag->CopyAt(file_id, entry.generation, env->NowWall());
  std::set<uint64_t> done;  // brought forward by CatchUpNamed
  CatchUpNamed(o, env, cancel, state, stats, &done);
  std::vector<uint64_t> gone;  // the tracker has no such file
  for (auto& [file_id, entry] : state->mirrors) {
    if (Cancelled(cancel)) return Status::Unavailable("mirror pass cancelled");
    if (done.count(file_id) != 0) {
      ++stats->infofiles;
      state->deleted_since.erase(file_id);
      continue;
    }
    uint64_t have = 0;
    s = o.copies->Ensure(entry.name, file_id, 0, o.fetch_deadline_s, &have);
    if (s.IsNotFound()) {
      gone.push_back(file_id);
      continue;
    }
    ++stats->infofiles;
    state->deleted_since.erase(file_id);
    if (!s.ok()) {
      ST_LOG_WARN("copies: cannot bring the copy of %s (file %016llx, generation %llu) forward: "
                  "%s; kept, retried next pass",
                  Printable(entry.name).c_str(), static_cast<unsigned long long>(file_id),
                  static_cast<unsigned long long>(have), s.ToString().c_str());
      ++stats->errors;
      stats->complete = false;
      continue;
    }
    if (have == entry.generation) continue;
    MetaListEntry now;
    s = ReadMirrorEntry(env, MirrorPath(o.data_dir, file_id), &now);
    if (!s.ok()) {
      ++stats->errors;
      continue;
    }
    entry = std::move(now);
    ++stats->copied;
  }
  // A deleted file's copy, as a mirror (step 3 above): removed once the
  // tracker has said for remove_after_s that it has no such file, while it
  // knew at least one other (a tracker whose namespace was lost knows none)
  // and this peer holds none of its records.
  const double now = env->NowWall();
  for (uint64_t file_id : gone) {
    if (stats->infofiles == 0 || o.held_file_ids.count(file_id) != 0) continue;
    double since = state->deleted_since.emplace(file_id, now).first->second;
    if (now - since < o.remove_after_s) continue;
    std::string path = MirrorPath(o.data_dir, file_id);
    s = env->RemoveFile(path);
    if (!s.ok() && !s.IsNotFound()) {
      ++stats->errors;
      continue;
    }
    ST_LOG_INFO("copies: removed the copy of file %016llx (%s): the tracker has no such file "
                "and this peer holds none of its records",
                static_cast<unsigned long long>(file_id),
                Printable(state->mirrors[file_id].name).c_str());
    ++stats->removed;
    state->deleted_since.erase(file_id);
    state->mirrors.erase(file_id);
    lag->CopyRemoved(file_id, now);
  }
  return Status::OK();
}

}  // namespace

std::string MirrorPath(const std::string& data_dir, uint64_t file_id) {
  return data_dir + kMetaDir + "/" + Hex16(file_id) + kMirrorSuffix;
}

Status ReadMirrorEntry(Env* env, const std::string& path, MetaListEntry* entry) {
  BusyWait wait{5000, nullptr};
  {
    Db db;
    Status s = OpenReadOnly(path, &wait, &db);
    if (!s.ok()) return s;
    s = ReadMeta(path, db.db, entry);
    if (!s.ok()) return s;
  }
  return Checksum(env, path, &entry->size, &entry->crc32c);
}

Status RunMirrorPass(const MirrorPassOptions& o, const std::atomic<bool>* cancel,
                     MirrorState* state, MirrorPassStats* stats) {
  Env* env = o.env != nullptr ? o.env : Env::Default();
  *stats = MirrorPassStats();
  Status s;
  if (o.copies != nullptr) return RunCopiesPass(o, env, cancel, state, stats);
  if (!state->loaded && !(s = LoadCatalog(o, env, state)).ok()) return s;

  InfofileReadOptions ro;
  ro.busy_timeout_ms = o.busy_timeout_ms;
  ro.cancel = cancel;
  std::unordered_map<std::string, MirrorState::Seen> seen;  // this walk's
  std::set<uint64_t> present;                               // file ids in the namespace
  bool complete = true;
  NamespaceWalkOptions walk;
  walk.root = o.namespace_dir;
  walk.log_tag = "mirror";
  walk.cancelled = "mirror pass cancelled";
  walk.cancel = cancel;
  s = WalkNamespace(
      env, walk,
      [&](const std::string& path, const FileInfo& st) {
        MirrorState::Seen id;
        bool sqlite = false;
        Status s = Identify(env, path, st, &id, &sqlite);
        if (!s.ok()) {
          if (!s.IsNotFound()) {
            ST_LOG_WARN("mirror: cannot read: %s", s.ToString().c_str());
            complete = false;
            ++stats->errors;
          }
          return Status::OK();
        }
        auto old = state->seen.find(path);
        if (old != state->seen.end() && old->second == id) {  // settled by an earlier pass
          if (old->second.file_id != 0) {
            present.insert(old->second.file_id);
            ++stats->infofiles;
          }
          seen.emplace(path, old->second);
          return Status::OK();
        }
        if (!sqlite) {  // not an infofile
          seen.emplace(path, id);
          return Status::OK();
        }
        uint64_t file_id = 0;
        s = ProbeInfofile(path, ro, &file_id);
        if (Cancelled(cancel)) return Status::Unavailable("mirror pass cancelled");
        if (s.IsInvalidArgument()) {  // an SQLite file, not an infofile
          seen.emplace(path, id);
          return Status::OK();
        }
        if (!s.ok()) {
          if (!s.IsNotFound()) {
            ST_LOG_WARN("mirror: cannot tell whether %s is an infofile: %s", path.c_str(),
                        s.ToString().c_str());
            complete = false;
            ++stats->errors;
          }
          return Status::OK();
        }
        present.insert(file_id);
        ++stats->infofiles;
        auto cur = state->mirrors.find(file_id);
        bool copied = false;
        MetaListEntry entry;
        s = CopyInfofile(o, env, cancel, path, file_id,
                         cur != state->mirrors.end() ? &cur->second : nullptr, &copied, &entry);
        if (!s.ok()) {
          if (Cancelled(cancel)) return Status::Unavailable("mirror pass cancelled");
          ST_LOG_WARN("mirror: cannot copy %s (file %016llx): %s; retried next pass", path.c_str(),
                      static_cast<unsigned long long>(file_id), s.ToString().c_str());
          ++stats->errors;
          return Status::OK();  // not settled: tried again next pass
        }
        if (copied) {
          ST_LOG_DEBUG("mirror: copied %s (file %016llx, generation %llu, %llu bytes)",
                       path.c_str(), static_cast<unsigned long long>(file_id),
                       static_cast<unsigned long long>(entry.generation),
                       static_cast<unsigned long long>(entry.size));
          state->mirrors[file_id] = std::move(entry);
          ++stats->copied;
        }
        id.file_id = file_id;
        seen.emplace(path, id);
        return Status::OK();
      },
      &complete);
  if (!s.ok()) return s;
  state->seen.swap(seen);
  stats->complete = complete;

  // Step 3: mirrors of deleted files, only on the word of complete walks of
  // a namespace that is there, for remove_after_s.
  if (complete && stats->infofiles > 0) {
    const double now = env->NowWall();
    for (auto it = state->mirrors.begin(); it != state->mirrors.end();) {
      uint64_t file_id = it->first;
      if (present.count(file_id) != 0 || o.held_file_ids.count(file_id) != 0) {
        state->deleted_since.erase(file_id);
        ++it;
        continue;
      }
      double since = state->deleted_since.emplace(file_id, now).first->second;
      if (now - since < o.remove_after_s) {
        ++it;
        continue;
      }
      std::string path = MirrorPath(o.data_dir, file_id);
      s = env->RemoveFile(path);
      if (!s.ok() && !s.IsNotFound()) {
        ST_LOG_WARN("mirror: cannot remove %s: %s", path.c_str(), s.ToString().c_str());
        ++stats->errors;
        ++it;
        continue;
      }
      ST_LOG_INFO("mirror: removed the mirror of file %016llx (%s): no infofile has it and this "
                  "peer holds none of its records",
                  static_cast<unsigned long long>(file_id), Printable(it->second.name).c_str());
      ++stats->removed;
      state->deleted_since.erase(file_id);
      it = state->mirrors.erase(it);
    }
  }
  return Status::OK();
}

// ---- MetaMirror ---------------------------------------------------------------

MetaMirror::MetaMirror(EventLoop* loop, RecordStore* store, MetaMirrorOptions options)
    : loop_(loop),
      store_(store),
      options_(std::move(options)),
      state_(std::make_shared<MirrorState>()),
      background_(store->env(), loop) {}

MetaMirror::~MetaMirror() {
  if (timer_ != 0) loop_->CancelTimer(timer_);
  // background_ goes next: it cancels a running pass and waits for it.
}

void MetaMirror::Start() {
  Begin();
  if (options_.interval_s > 0) {
    timer_ = loop_->AddTimer(options_.interval_s, [this] { Tick(); });
  }
}

void MetaMirror::Tick() {
  timer_ = loop_->AddTimer(options_.interval_s, [this] { Tick(); });
  if (!running_) Begin();
}

void MetaMirror::RunNow(std::function<void(const Status&)> done) {
  if (running_) {
    pending_.push_back(std::move(done));
    return;
  }
  current_.push_back(std::move(done));
  Begin();
}

void MetaMirror::AfterFirstPass(std::function<void()> done) {
  if (passed_) {
    done();
    return;
  }
  first_pass_waiters_.push_back(std::move(done));
}

std::string MetaMirror::PathOf(uint64_t file_id) const {
  return MirrorPath(store_->data_dir(), file_id);
}

void MetaMirror::Begin() {
  running_ = true;
  MirrorPassOptions po;
  po.namespace_dir = options_.namespace_dir;
  po.data_dir = store_->data_dir();
  po.peer_id = store_->peer_id();
  for (uint64_t id : store_->FileIds()) po.held_file_ids.insert(id);
  po.busy_timeout_ms = options_.busy_timeout_ms;
  po.remove_after_s = options_.remove_after_s;
  po.env = store_->env();
  po.copies = options_.copies;
  auto state = state_;
  auto status = std::make_shared<Status>();
  auto stats = std::make_shared<MirrorPassStats>();
  auto catalog = std::make_shared<std::map<uint64_t, MetaListEntry>>();
  const std::atomic<bool>* cancel = background_.cancel();
  background_.Schedule(
      [po, cancel, state, status, stats, catalog] {
        *status = RunMirrorPass(po, cancel, state.get(), stats.get());
        *catalog = state->mirrors;
      },
      [this, status, stats, catalog] { OnPass(*status, *stats, std::move(*catalog)); });
}

void MetaMirror::OnPass(const Status& s, const MirrorPassStats& stats,
                        std::map<uint64_t, MetaListEntry> catalog) {
  running_ = false;
  catalog_ = std::move(catalog);
  counters_.passes.fetch_add(1, std::memory_order_relaxed);
  counters_.copies.fetch_add(stats.copied, std::memory_order_relaxed);
  counters_.removals.fetch_add(stats.removed, std::memory_order_relaxed);
  counters_.errors.fetch_add(stats.errors, std::memory_order_relaxed);
  counters_.mirrors.store(catalog_.size(), std::memory_order_relaxed);
  if (s.ok()) {
    counters_.last_pass_ns.store(static_cast<int64_t>(store_->env()->NowWall() * 1e9),
                                 std::memory_order_relaxed);
    if (stats.copied > 0 || stats.removed > 0) {
      ST_LOG_DEBUG("mirror: %llu infofiles, %llu copied, %llu removed, %zu mirrors",
                   static_cast<unsigned long long>(stats.infofiles),
                   static_cast<unsigned long long>(stats.copied),
                   static_cast<unsigned long long>(stats.removed), catalog_.size());
    }
  } else {
    counters_.failed_passes.fetch_add(1, std::memory_order_relaxed);
    ST_LOG_WARN("mirror pass failed, nothing copied or removed: %s", s.ToString().c_str());
  }
  passed_ = true;
  std::vector<std::function<void()>> waiters;
  waiters.swap(first_pass_waiters_);
  std::vector<std::function<void(const Status&)>> done;
  done.swap(current_);
  if (!pending_.empty()) {
    current_.swap(pending_);
    Begin();
  }
  for (auto& w : waiters) w();
  for (auto& d : done) d(s);
}

}  // namespace st
