#include "scrub_plan.h"

#include <string_view>
#include <unordered_map>
#include <utility>

#include "coding.h"
#include "env.h"
#include "log.h"
#include "name_codec.h"
#include "namespace_walk.h"
#include "protocol.h"

namespace st {
namespace {

bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

double MtimeOf(const FileInfo& st) { return static_cast<double>(st.mtime_ns) * 1e-9; }

// What the namespace walk learned.
struct NamespaceIndex {
  std::unordered_map<uint64_t, std::vector<std::string>> paths;  // file_id -> infofiles
  uint64_t infofiles = 0;
  bool complete = true;  // every directory listed, every file identified
};

Status IndexNamespace(Env* env, const ScrubPlanOptions& o, const std::atomic<bool>* cancel,
                      NamespaceIndex* ns) {
  InfofileReadOptions ro;
  ro.busy_timeout_ms = o.busy_timeout_ms;
  ro.cancel = cancel;
  NamespaceWalkOptions walk;
  walk.root = o.namespace_dir;
  walk.log_tag = "scrub";
  walk.cancelled = "scrub cancelled";
  walk.cancel = cancel;
  return WalkNamespace(
      env, walk,
      [&](const std::string& path, const FileInfo&) {
        if (Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
        uint64_t file_id = 0;
        Status s = ProbeInfofile(path, ro, &file_id);
        if (s.ok()) {
          ns->paths[file_id].push_back(path);
          ++ns->infofiles;
        } else if (Cancelled(cancel)) {
          return Status::Unavailable("scrub cancelled");
        } else if (!s.IsInvalidArgument() && !s.IsNotFound()) {
          // Maybe an infofile, maybe not: no file id may be taken as deleted.
          ST_LOG_WARN("scrub: cannot tell whether %s is an infofile: %s", path.c_str(),
                      s.ToString().c_str());
          ns->complete = false;
        }
        return Status::OK();
      },
      &ns->complete);
}

// The records of one file id on disk. *dir_ok is false if a directory of
// it could not be listed.
void ListLocalRecords(Env* env, const std::string& fdir, std::vector<LocalRecord>* out,
                      bool* dir_ok) {
  out->clear();
  *dir_ok = true;
  std::vector<std::string> buckets, entries;
  Status s = env->GetChildren(fdir, &buckets);
  if (!s.ok()) {
    ST_LOG_WARN("scrub: %s", s.ToString().c_str());
    *dir_ok = false;
    return;
  }
  for (const std::string& b : buckets) {
    uint64_t bucket;
    if (!ParseLowerHex(b, 2, &bucket)) continue;
    std::string bdir = fdir + "/" + b;
    s = env->GetChildren(bdir, &entries);
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
        if (!env->ReadSmallFile(path + kSidecarSuffix, kMaxRecordName, &r.name).ok() ||
            EncodeName(r.name) != enc) {
          continue;
        }
      } else if (!DecodeEncodedName(enc, &r.name)) {
        continue;
      }
      FileInfo st;
      if (!env->GetFileInfo(path, &st).ok() || !st.is_regular) continue;
      r.mtime = MtimeOf(st);
      out->push_back(std::move(r));
    }
  }
}

// --metadata fetch: the state and committed copies of file_id from its copy
// brought to the tracker's latest. Unavailable if the tracker cannot be
// reached (the whole inventory ends: nothing is removed).
Status FromTracker(const ScrubPlanOptions& o, uint64_t file_id, size_t records,
                   const InfofileReadOptions& ro, InfofileState* state,
                   std::vector<CommittedCopy>* committed) {
  FetchFailure failure = FetchFailure::kNone;
  Status s = o.copies->EnsureLatest(file_id, o.fetch_deadline_s, &failure);
  if (!s.ok() && failure == FetchFailure::kUnreachable) {
    return Status::Unavailable("the tracker " + o.copies->tracker() +
                               " cannot be reached, so no copy can be brought to its latest (" +
                               s.message() + ")");
  }
  *state = StateFromTracker(s, failure);
  if (*state == InfofileState::kRead) {
    s = ReadCommittedCopies(o.copies->PathOf(file_id), file_id, o.peer_id, ro, committed);
    if (!s.ok()) *state = InfofileState::kUnknown;
  }
  if (*state == InfofileState::kUnknown) {
    ST_LOG_WARN("scrub: skipping file %016llx (%zu local records): %s",
                static_cast<unsigned long long>(file_id), records, s.ToString().c_str());
  }
  return Status::OK();
}

}  // namespace

Status MakeScrubPlan(const ScrubPlanOptions& o, const std::atomic<bool>* cancel, ScrubPlan* plan) {
  Env* env = o.env != nullptr ? o.env : Env::Default();
  *plan = ScrubPlan();
  plan->now = env->NowWall();
  plan->cutoff = plan->now - o.age_s;

  NamespaceIndex ns;
  Status s;
  if (o.copies == nullptr) s = IndexNamespace(env, o, cancel, &ns);
  if (!s.ok()) return s;
  plan->infofiles = ns.infofiles;
  plan->namespace_complete = ns.complete;
  const bool may_miss = ns.complete && ns.infofiles > 0;
  if (o.copies != nullptr) {
    // no walk: each file id's copy is asked of the tracker below
  } else if (!ns.complete) {
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
  // A replaced version stays for readers at an older generation as long as an
  // uncommitted record would (docs/infofile.md, "Versions").
  ro.superseded_since = plan->cutoff;
  // And past versions as long as a snapshot refers to them (docs/snapshots.md,
  // "Retention").
  ro.snapshot_retained = true;
  const std::string files_dir = o.data_dir + "/files";
  std::vector<std::string> file_dirs;
  s = env->GetChildren(files_dir, &file_dirs);
  if (!s.ok()) return Status::IOError(s.message());
  std::vector<LocalRecord> local;
  std::vector<CommittedCopy> committed, part;
  for (const std::string& d : file_dirs) {
    if (Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
    uint64_t file_id;
    if (!ParseLowerHex(d, 16, &file_id)) continue;
    bool dir_ok;
    ListLocalRecords(env, files_dir + "/" + d, &local, &dir_ok);
    if (local.empty()) {
      if (dir_ok) plan->file_dirs.push_back(file_id);
      continue;
    }
    ++plan->files;
    plan->records += local.size();

    InfofileState state = InfofileState::kUnknown;
    committed.clear();
    auto it = ns.paths.find(file_id);
    if (o.copies != nullptr) {
      s = FromTracker(o, file_id, local.size(), ro, &state, &committed);
      if (!s.ok()) return s;
      if (state == InfofileState::kRead) ++plan->infofiles;
    } else if (it != ns.paths.end()) {
      state = InfofileState::kRead;
      for (const std::string& path : it->second) {
        s = ReadCommittedCopies(path, file_id, o.peer_id, ro, &part);
        if (!s.ok() && Cancelled(cancel)) return Status::Unavailable("scrub cancelled");
        if (!s.ok()) {
          ST_LOG_WARN("scrub: skipping file %016llx (%zu local records): %s",
                      static_cast<unsigned long long>(file_id), local.size(), s.ToString().c_str());
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
  s = env->GetChildren(tmp_dir, &tmps);
  if (!s.ok()) {
    ST_LOG_WARN("scrub: %s", s.ToString().c_str());
  } else {
    for (std::string& t : tmps) {
      FileInfo st;
      std::string path = tmp_dir + "/" + t;
      if (!env->GetFileInfo(path, &st, /*follow_symlinks=*/false).ok() || !st.is_regular) continue;
      if (MtimeOf(st) <= plan->cutoff) plan->tmp_files.push_back(std::move(t));
    }
  }
  return Status::OK();
}

}  // namespace st
