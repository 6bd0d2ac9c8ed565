// A peer's own copies of infofiles, kept from the tracker (issue 40;
// docs/metadata-log.md, "Metadata on every node"; st-peer --metadata fetch).
//
// Without the tracker's namespace mounted, a peer keeps a copy of the
// infofile of each file it is asked about in
//   <data>/meta/<file_id:016x>.infofile
// (where its mirrors are kept in the namespace mode, meta_mirror.h) and
// brings it forward from the tracker's FetchInfofile replies:
//   - "snapshot": the whole file (size and CRC-32C checked), written to
//     <data>/meta/.fetch-<file_id:016x>, fsynced and renamed over the copy;
//   - "changes": SQLite changesets (the tracker's own transactions,
//     st_py/tracker/changesets.py) applied in order with
//     sqlite3changeset_apply, all or none, to a copy of the copy that is then
//     renamed over it (as the client does, st_py/client/changeset_apply.py):
//     readers with the old file open keep their state, new ones see the new
//     one whole, and a conflict leaves the copy as it was;
//   - "current": nothing to change.
// The copy's state (meta.generation, meta.log_index, meta.log_id, and the
// fingerprint of its schema, computed as st_py.core.infofile.schema_fingerprint
// does) is what the request says the peer has.
//
// The RPC itself is the fetcher's (st-peer's infofile_fetch_client.cc: gRPC
// lives in st-peer, not in st_core); this module owns the files.
//
// Thread-safety: InfofileCopies::Ensure may be called from any thread; calls
// for one file are serialized (a mutex per file id), others run in parallel.
#ifndef ST_CORE_INFOFILE_COPY_H_
#define ST_CORE_INFOFILE_COPY_H_

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "copy_lag.h"
#include "status.h"

namespace st {

// What a copy is at (empty/zero: no copy).
struct CopyState {
  uint64_t generation = 0;
  uint64_t position = 0;  // meta.log_index
  std::string log_id;
  std::string schema;  // SchemaFingerprint
};

// Why a FetchInfofile failed, as far as the tracker said.
enum class FetchFailure : uint8_t {
  kNone,         // it did not fail
  kUnreachable,  // no answer: the tracker is down or unreachable, or the deadline passed
  kRefused,      // an answer that is no reply: no such name or id, not in the peerlist, ...
  kDeleted,      // NOT_FOUND saying explicitly that the file of that id was deleted
             // (gRPC trailer st-error: file-deleted): the only answer that a file is gone
};

// A FetchInfofile reply, whole.
struct FetchedInfofile {
  std::string kind;  // "snapshot", "changes" or "current"
  uint64_t file_id = 0;
  uint64_t generation = 0;
  uint64_t position = 0;
  std::string log_id;
  uint64_t total_size = 0;  // snapshot
  uint32_t crc32c = 0;  // snapshot
  std::vector<std::string> data;  // snapshot bytes in pieces, or one changeset each
  FetchFailure failure = FetchFailure::kNone;  // with a Fetch that failed: why
  std::string source;  // the standby ("host:port") that answered; empty: the tracker
};

// The hex digest the tracker compares (first 32 hex digits of the SHA-256 of
// Python's repr() of [(type, name, sql), ...] over sqlite_master rows whose
// name does not start with "sqlite_", ordered by type, name).
Status SchemaFingerprint(sqlite3* db, std::string* out);

// Reads the state of the copy at `path`. NotFound if there is none.
Status ReadCopyState(const std::string& path, CopyState* out);

// Applies `reply` to the copy at `path` (of file `file_id`), as described
// above. Corruption if a snapshot's size or CRC-32C is wrong or it is of
// another file; Aborted-like IOError naming the table if a changeset
// conflicts (the copy is left as it was).
Status ApplyFetched(const std::string& path, uint64_t file_id, const FetchedInfofile& reply);

// Asks a tracker for what brings a copy forward.
class InfofileFetcher {
 public:
  virtual ~InfofileFetcher() = default;
  // One FetchInfofile call for file `name` (its namespace path; empty: the
  // tracker finds the file by `file_id` alone) of id `file_id`, the copy
  // being at `have` (no copy: all empty), to reach at least
  // `want_generation`. NotFound if the tracker has no such file (of that
  // id); any other failure (unreachable, refused) is another !ok; on a
  // failure out->failure says why. The call gives up after deadline_s
  // seconds. A fetcher may ask a standby first when want_generation > 0
  // (never older than that, nor than `have`: out->source names it).
  virtual Status Fetch(const std::string& name, uint64_t file_id, const CopyState& have,
                       uint64_t want_generation, double deadline_s, FetchedInfofile* out) = 0;
  // The tracker(s) asked, for messages ("host:port" or a comma list).
  virtual std::string tracker() const = 0;
  // Where the standbys that follow the log serve FetchInfofile, as the
  // tracker's last announce reply said (empty: none). Any thread.
  virtual void SetStandbys(const std::vector<std::string>& /*addrs*/) {}
};

// The copies of one peer.
class InfofileCopies {
 public:
  // `meta_dir` is <data>/meta (made if missing); `fetcher` outlives this.
  InfofileCopies(std::string meta_dir, InfofileFetcher* fetcher);

  // <meta_dir>/<file_id:016x>.infofile
  std::string PathOf(uint64_t file_id) const;

  // Brings the copy of `file_id` to at least `want_generation` (0: to the
  // tracker's latest), fetching from the tracker unless it is there already;
  // each call to the tracker gives up after deadline_s seconds.
  // *have is the copy's generation afterwards (0: no copy). On failure
  // (tracker unreachable or refusing, a reply that does not bring the copy
  // to want_generation, a bad reply) the copy is left as it was and the
  // status says why; *have still tells where it is.
  Status Ensure(const std::string& name, uint64_t file_id, uint64_t want_generation,
                double deadline_s, uint64_t* have);

  // The scrubber's question (scrub_plan.h): brings the copy of `file_id` to
  // the tracker's latest, naming the file by its id alone (the tracker finds
  // its name; a peer may hold records of a file it has no copy of yet). On
  // failure the copy is left as it was and *failure says why: kDeleted only
  // if the tracker said explicitly that the file was deleted.
  Status EnsureLatest(uint64_t file_id, double deadline_s, FetchFailure* failure);

  const std::string& tracker() const { return tracker_; }

  // The standbys' infofile ports from an announce reply (InfofileFetcher::
  // SetStandbys). Any thread.
  void SetStandbys(const std::vector<std::string>& addrs) { fetcher_->SetStandbys(addrs); }

  // For the metrics (any thread): calls to the tracker that brought a copy
  // forward or found it current (from_standbys of them answered by a
  // standby), calls that failed (the copy kept as it was), and the bytes of
  // snapshots and changesets received.
  struct Counters {
    std::atomic<uint64_t> fetches{0};
    std::atomic<uint64_t> from_standbys{0};
    std::atomic<uint64_t> failures{0};
    std::atomic<uint64_t> bytes{0};
  };
  const Counters& counters() const { return counters_; }

  // How far the copies are behind the tracker (copy_lag.h): every catch-up
  // here tells it where the copy and the tracker are; the announcer tells it
  // which files the tracker names, the mirror pass what <data>/meta/ holds.
  CopyLag* lag() { return &lag_; }
  const CopyLag* lag() const { return &lag_; }

 private:
  std::mutex* LockOf(uint64_t file_id);
  Status Catch(const std::string& name, uint64_t file_id, uint64_t want_generation,
               double deadline_s, uint64_t* have, FetchFailure* failure);

  std::string meta_dir_;
  InfofileFetcher* fetcher_;
  std::string tracker_;
  std::mutex mu_;  // guards locks_
  std::map<uint64_t, std::unique_ptr<std::mutex>> locks_;
  Counters counters_;
  CopyLag lag_;
};

}  // namespace st

#endif  // ST_CORE_INFOFILE_COPY_H_
