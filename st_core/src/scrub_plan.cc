#include "scrub_plan.h"

#include "coding.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "log.h"
#include "name_codec.h"
#include "protocol.h"

namespace st {
namespace {

bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

double WallNow() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double MtimeOf(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

// The names in a directory but "." and "..".
Status ListDir(const std::string& dir, std::vector<std::string>* out) {
  out->clear();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return PosixError("opendir " + dir, errno);
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out->emplace_back(e->d_name);
    }
    errno = 0;
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return PosixError("readdir " + dir, err);
  return Status::OK();
}

bool ReadSidecar(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  bool ok = true;
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ok = r == 0;
      break;
    }
    out->append(buf, static_cast<size_t>(r));
    if (out->size() > kMaxRecordName) {
      ok = false;
      break;
    }
  }
  ::close(fd);
  return ok;
}

// What the namespace walk learned.
struct NamespaceIndex {
  std::unordered_map<uint64_t, std::vector<std::string>> paths;  // file_id -> infofiles
  uint64_t infofiles = 0;
  bool complete = true;
};

Status WalkNamespace(const ScrubPlanOptions& o, const std::atomic<bool>* cancel,
                     NamespaceIndex* ns) {
  InfofileReadOptions ro;
  ro.busy_timeout_ms = o.busy_timeout_ms;
  ro.cancel = cancel;
  struct stat root_st;
  if (::stat(o.namespace_dir.c_str(), &root_st) != 0) {
    return Status::Unavailable("namespace root " + o.namespace_dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(root_st.st_mode)) {
    return Status::Unavailable("namespace root " + o.namespace_dir + " is not a directory");
  }
  std::set<std::pair<dev_t, ino_t>> visited{{root_st.st_dev, root_st.st_ino}};
  std::vector<std::string> todo{o.namespace_dir};
  std::vector<std::string> names;
  bool root = true;
  while (!todo.empty()) {
    if (Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
    std::string dir = std::move(todo.back());
    todo.pop_back();
    Status s = ListDir(dir, &names);
    if (!s.ok()) {
      if (root) return Status::Unavailable("namespace root: " + s.message());
      if (!s.IsNotFound()) {
        ST_LOG_WARN("scrub: cannot read namespace directory: %s", s.ToString().c_str());
        ns->complete = false;
      }
      continue;
    }
    root = false;
    for (const std::string& name : names) {
      if (name.compare(0, 4, ".st-") == 0) continue;
      std::string path = dir + "/" + name;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) {
        if (errno != ENOENT) {  // ENOENT: removed meanwhile, or a dangling link
          ST_LOG_WARN("scrub: cannot stat %s: %s", path.c_str(), std::strerror(errno));
          ns->complete = false;
        }
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (visited.emplace(st.st_dev, st.st_ino).second) todo.push_back(std::move(path));
        continue;
      }
      if (!S_ISREG(st.st_mode)) continue;
      if (Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
      uint64_t file_id = 0;
      s = ProbeInfofile(path, ro, &file_id);
      if (s.ok()) {
        ns->paths[file_id].push_back(std::move(path));
        ++ns->infofiles;
      } else if (Cancelled(cancel)) {
        return Status::Unavailable("scrub cancelled");
      } else if (!s.IsInvalidArgument() && !s.IsNotFound()) {
        // Maybe an infofile, maybe not: no file id may be taken as deleted.
        ST_LOG_WARN("scrub: cannot tell whether %s is an infofile: %s", path.c_str(),
                    s.ToString().c_str());
        ns->complete = false;
      }
    }
  }
  return Status::OK();
}

// The records of one file id on disk. *dir_ok is false if a directory of
// it could not be listed.
void ListLocalRecords(const std::string& fdir, std::vector<LocalRecord>* out, bool* dir_ok) {
  out->clear();
  *dir_ok = true;
  std::vector<std::string> buckets, entries;
  Status s = ListDir(fdir, &buckets);
  if (!s.ok()) {
    ST_LOG_WARN("scrub: %s", s.ToString().c_str());
    *dir_ok = false;
    return;
  }
  for (const std::string& b : buckets) {
    uint64_t bucket;
    if (!ParseLowerHex(b, 2, &bucket)) continue;
    std::string bdir = fdir + "/" + b;
    s = ListDir(bdir, &entries);
    if (!s.ok()) {
      if (!s.IsNotFound()) {
        ST_LOG_WARN("scrub: %s", s.ToString().c_str());
        *dir_ok = false;
      }
      continue;
    }
    for (const std::string& fname : entries) {
      if (EndsWith(fname, kSidecarSuffix)) continue;
      std::string_view enc;
      LocalRecord r;
      if (!ParseRecordFileName(fname, &enc, &r.copy_rank, &r.crc)) continue;
      std::string path = bdir + "/" + fname;
      if (IsHashedEncoding(enc)) {
        if (!ReadSidecar(path + kSidecarSuffix, &r.name) || EncodeName(r.name) != enc) continue;
      } else if (!DecodeEncodedName(enc, &r.name)) {
        continue;
      }
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      r.mtime = MtimeOf(st);
      out->push_back(std::move(r));
    }
  }
}

}  // namespace

Status MakeScrubPlan(const ScrubPlanOptions& o, const std::atomic<bool>* cancel,
                     ScrubPlan* plan) {
  *plan = ScrubPlan();
  plan->now = WallNow();
  plan->cutoff = plan->now - o.age_s;

  NamespaceIndex ns;
  Status s = WalkNamespace(o, cancel, &ns);
  if (!s.ok()) return s;
  plan->infofiles = ns.infofiles;
  plan->namespace_complete = ns.complete;
  const bool may_miss = ns.complete && ns.infofiles > 0;
  if (!ns.complete) {
    ST_LOG_WARN("scrub: the namespace walk of %s was incomplete; records of files without an "
                "infofile are kept this time",
                o.namespace_dir.c_str());
  } else if (ns.infofiles == 0) {
    ST_LOG_WARN("scrub: no infofile under %s (not mounted?); records of files without an "
                "infofile are kept this time",
                o.namespace_dir.c_str());
  }

  InfofileReadOptions ro;
  ro.busy_timeout_ms = o.busy_timeout_ms;
  ro.cancel = cancel;
  const std::string files_dir = o.data_dir + "/files";
  std::vector<std::string> file_dirs;
  s = ListDir(files_dir, &file_dirs);
  if (!s.ok()) return Status::IOError(s.message());
  std::vector<LocalRecord> local;
  std::vector<CommittedCopy> committed, part;
  for (const std::string& d : file_dirs) {
    if (Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
    uint64_t file_id;
    if (!ParseLowerHex(d, 16, &file_id)) continue;
    bool dir_ok;
    ListLocalRecords(files_dir + "/" + d, &local, &dir_ok);
    if (local.empty()) {
      if (dir_ok) plan->file_dirs.push_back(file_id);
      continue;
    }
    ++plan->files;
    plan->records += local.size();

    InfofileState state = InfofileState::kUnknown;
    committed.clear();
    auto it = ns.paths.find(file_id);
    if (it != ns.paths.end()) {
      state = InfofileState::kRead;
      for (const std::string& path : it->second) {
        s = ReadCommittedCopies(path, file_id, o.peer_id, ro, &part);
        if (!s.ok() && Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
        if (!s.ok()) {
          ST_LOG_WARN("scrub: skipping file %016llx (%zu local records): %s",
                      static_cast<unsigned long long>(file_id), local.size(),
                      s.ToString().c_str());
          state = InfofileState::kUnknown;
          break;
        }
        committed.insert(committed.end(), std::make_move_iterator(part.begin()),
                         std::make_move_iterator(part.end()));
      }
    } else if (may_miss) {
      state = InfofileState::kMissing;
    }
    if (state == InfofileState::kUnknown) {
      ++plan->skipped;
      continue;
    }
    std::vector<ScrubAction> actions = DecideScrub(local, state, committed, plan->now, o.age_s);
    bool any = false;
    for (size_t i = 0; i < local.size(); ++i) {
      if (!IsRemoval(actions[i])) continue;
      any = true;
      PlannedRemoval r;
      r.file_id = file_id;
      r.name = std::move(local[i].name);
      r.copy_rank = local[i].copy_rank;
      r.crc = local[i].crc;
      r.action = actions[i];
      plan->removals.push_back(std::move(r));
    }
    if (any) plan->file_dirs.push_back(file_id);
  }

  const std::string tmp_dir = o.data_dir + "/tmp";
  std::vector<std::string> tmps;
  s = ListDir(tmp_dir, &tmps);
  if (!s.ok()) {
    ST_LOG_WARN("scrub: %s", s.ToString().c_str());
  } else {
    for (std::string& t : tmps) {
      struct stat st;
      std::string path = tmp_dir + "/" + t;
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (MtimeOf(st) <= plan->cutoff) plan->tmp_files.push_back(std::move(t));
    }
  }
  return Status::OK();
}

}  // namespace st
