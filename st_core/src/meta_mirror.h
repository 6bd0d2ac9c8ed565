// The peer's infofile mirror (issue 13, "Recovery without the namespace";
// paper 3.5: the infofiles are the only metadata). Each peer keeps, per file
// it holds records of or whose peerlist names it, a copy of the file's
// infofile in <data>/meta/, so the namespace can be rebuilt from the live
// peers if it is lost (`storetorrent recover --from-peers`, served by
// LIST_META and GET_META, docs/wire-protocol.md).
//
//   <data>/meta/<file_id:016x>.infofile   a page-for-page SQLite copy made
//                                          with the online backup API from a
//                                          read-only connection: one
//                                          consistent snapshot of the file
//   <data>/meta/.tmp-<file_id:016x>        a copy being made (removed on
//                                          failure and at start)
//
// A pass (RunMirrorPass, on a background thread, one at a time):
//   1. the first pass reads <data>/meta/ into the catalog (file_id ->
//      generation, size, CRC-32C, name) and removes leftover temp files;
//   2. walks the namespace root like the scrubber (entries named ".st-*"
//      skipped, symbolic links followed, each directory once) and, for every
//      regular file whose identity (device, inode, size, mtime and the SQLite
//      header's file change counter) changed since the pass that last looked
//      at it, probes it (ProbeInfofile); an infofile whose file id this peer
//      holds records of, or whose `peers` table lists this peer_id, is copied
//      (temp file, fsync by SQLite, rename, directory fsync), unless its
//      generation is below the mirror's (a stale copy elsewhere in the
//      namespace never replaces a newer mirror);
//   3. removes the mirror of a file id only if passes have found it deleted
//      for remove_after_s (the peer's --scrub-age): each time the walk was
//      complete, found at least one infofile (an empty namespace looks like
//      an unmounted or lost one: scrub_plan.h), found no infofile with that
//      file id, and this peer held no record of it (the file was deleted and
//      DELETE_FILE or the scrubber removed its records). A lost namespace
//      therefore never costs a mirror, nor does one that is rebuilt within
//      remove_after_s.
//
// MetaMirror runs passes on the loop's schedule (every interval_s, the first
// at once) and keeps the catalog on the loop thread for LIST_META.
#ifndef ST_CORE_META_MIRROR_H_
#define ST_CORE_META_MIRROR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "background.h"
#include "env.h"
#include "event_loop.h"
#include "infofile_copy.h"
#include "protocol.h"
#include "status.h"

namespace st {

class RecordStore;

struct MirrorPassOptions {
  std::string namespace_dir;  // the namespace root
  std::string data_dir;       // the record store; mirrors go to <data_dir>/meta/
  std::string peer_id;
  std::set<uint64_t> held_file_ids;  // file ids this peer holds records of (a snapshot)
  int busy_timeout_ms = 5000;        // per infofile open
  double remove_after_s = 3600;      // a deleted file's mirror stays this long
  Env* env = nullptr;                // nullptr: Env::Default()
  // --metadata fetch (infofile_copy.h): no namespace walk; the pass reads
  // <data>/meta/ (the copies GET_LOCAL, the scrubber and earlier passes
  // made) into the catalog, makes or brings forward the copies of the files
  // the tracker named (catch_up_per_pass below), and brings each other copy
  // to the tracker's latest state (a copy the tracker cannot bring forward
  // is kept as it is and counted in errors).
  InfofileCopies* copies = nullptr;
  double fetch_deadline_s = 5;  // per copy's catch-up
  // Before that, the files the tracker names that this peer has no current
  // copy of (copy_lag.h: announce replies) are brought to the generation
  // named, the largest lag first, at most this many per pass.
  size_t catch_up_per_pass = 256;
};

// What one pass leaves for the next (the caller owns it; one pass at a time).
struct MirrorState {
  bool loaded = false;                         // <data>/meta/ was read
  std::map<uint64_t, MetaListEntry> mirrors;   // the catalog, by file id
  // Namespace path -> the identity of the file when a pass last settled it,
  // and its file id (0: not an infofile).
  struct Seen {
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0;
    uint32_t change_counter = 0;
    uint64_t file_id = 0;
    bool operator==(const Seen& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns &&
             change_counter == o.change_counter;
    }
  };
  std::unordered_map<std::string, Seen> seen;
  // File id -> wall-clock time since which passes have found it deleted.
  std::map<uint64_t, double> deleted_since;
};

struct MirrorPassStats {
  uint64_t infofiles = 0;  // infofiles found in the namespace
  uint64_t copied = 0;     // mirrors written
  uint64_t removed = 0;    // mirrors removed (file deleted, no records left)
  uint64_t errors = 0;     // files that could not be probed or copied (retried next pass)
  bool complete = false;   // the walk saw every directory and identified every file
};

// <data_dir>/meta/<file_id:016x>.infofile
std::string MirrorPath(const std::string& data_dir, uint64_t file_id);

// One pass (with options.copies: the copies' pass described there). Unavailable if the namespace
// root cannot be read (nothing is copied or removed then; the catalog is still loaded) or if
// *cancel is set; IOError if <data>/meta/ cannot be made or read.
Status RunMirrorPass(const MirrorPassOptions& options, const std::atomic<bool>* cancel,
                     MirrorState* state, MirrorPassStats* stats);

// The catalog entry of the mirror (or any infofile) at path: meta.file_id,
// meta.generation, meta.name, its size and CRC-32C. Corruption if it is not a
// storetorrent-infofile.
Status ReadMirrorEntry(Env* env, const std::string& path, MetaListEntry* entry);

struct MetaMirrorOptions {
  std::string namespace_dir;  // required unless copies
  InfofileCopies* copies = nullptr;  // --metadata fetch: see MirrorPassOptions::copies
  double interval_s = 5;      // between passes; the first runs at once
  double remove_after_s = 3600;  // a deleted file's mirror stays this long (--scrub-age)
  int busy_timeout_ms = 5000;
};

// Counters for the metrics (any thread may read them).
struct MetaMirrorCounters {
  std::atomic<uint64_t> passes{0};
  std::atomic<uint64_t> failed_passes{0};
  std::atomic<uint64_t> copies{0};
  std::atomic<uint64_t> removals{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> mirrors{0};
  std::atomic<int64_t> last_pass_ns{0};  // wall clock of the last complete pass; 0: none yet
};

class MetaMirror {
 public:
  MetaMirror(EventLoop* loop, RecordStore* store, MetaMirrorOptions options);
  ~MetaMirror();  // cancels a running pass and waits for it

  MetaMirror(const MetaMirror&) = delete;
  MetaMirror& operator=(const MetaMirror&) = delete;

  // Runs the first pass now and then every interval_s.
  void Start();
  // Runs a pass as soon as none is running; done (loop thread) when it ends.
  void RunNow(std::function<void(const Status&)> done);
  // Runs done (loop thread) once a pass has ended, so the catalog has been
  // read from <data>/meta/: now, or when the first pass ends.
  void AfterFirstPass(std::function<void()> done);

  // Loop thread: the mirrors as of the last pass, by file id.
  const std::map<uint64_t, MetaListEntry>& catalog() const { return catalog_; }
  std::string PathOf(uint64_t file_id) const;
  const MetaMirrorCounters& counters() const { return counters_; }
  bool running() const { return running_; }

 private:
  void Tick();
  void Begin();
  void OnPass(const Status& s, const MirrorPassStats& stats,
              std::map<uint64_t, MetaListEntry> catalog);

  EventLoop* loop_;
  RecordStore* store_;
  MetaMirrorOptions options_;
  EventLoop::TimerId timer_ = 0;
  bool running_ = false;
  std::vector<std::function<void(const Status&)>> current_, pending_;
  std::vector<std::function<void()>> first_pass_waiters_;
  bool passed_ = false;  // a pass has ended
  std::shared_ptr<MirrorState> state_;  // touched only by the pass
  std::map<uint64_t, MetaListEntry> catalog_;
  MetaMirrorCounters counters_;
  // Last, so destroyed first: cancels a running pass and waits for it.
  BackgroundWork background_;
};

}  // namespace st

#endif  // ST_CORE_META_MIRROR_H_
