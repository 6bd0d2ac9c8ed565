// The scrubber's inventory (paper 4.3: "a periodic scrubber process run
// locally on peers inventories all records, deleting those not listed in
// their corresponding info file"). Runs on a worker thread, never on the
// event loop: it walks directories and reads SQLite files, and deletes
// nothing. The plan it returns is applied on the loop thread (scrubber.h).
//
//   1. Walk the namespace root recursively (entries named ".st-*" skipped,
//      symbolic links followed, each directory once) and probe each regular
//      file (ProbeInfofile): file_id -> infofile paths.
//   2. Walk <data>/files/: for each file id, the records with their mtimes.
//      Per file id, the infofile state is
//        kRead     if every infofile with that id could be read; committed
//                  = the union of what they commit to this peer_id (and
//                  what they keep for older readers: versions superseded
//                  within the age, past versions a snapshot refers to);
//        kUnknown  if one of them could not be read (logged);
//        kMissing  if none has the id, the walk saw every directory and
//                  every candidate file, and it found at least one infofile
//                  (an empty namespace looks like an unmounted one);
//        kUnknown  otherwise (logged once).
//      DecideScrub() then names the records to remove.
//   3. List <data>/tmp/: regular files whose mtime is at least age old.
//
// With copies (st-peer --metadata fetch, no namespace; infofile_copy.h) there
// is no walk: in step 2, for each file id with records, the copy in
// <data>/meta/ is brought to the tracker's latest, the tracker finding the
// file by its id (InfofileCopies::EnsureLatest), and the state is
// StateFromTracker(): kRead (committed = what the copy commits, as above),
// kMissing only if the tracker said explicitly that the file was deleted,
// kUnknown otherwise (logged). A tracker that cannot be reached ends the
// inventory with Unavailable: nothing is planned, nothing removed.
#ifndef ST_CORE_SCRUB_PLAN_H_
#define ST_CORE_SCRUB_PLAN_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "env.h"
#include "infofile_copy.h"
#include "scrub.h"
#include "status.h"

namespace st {

struct ScrubPlanOptions {
  std::string namespace_dir;  // the namespace root (unused with copies)
  InfofileCopies* copies = nullptr;  // --metadata fetch: the copies, from the tracker
  double fetch_deadline_s = 10;      // per copy's catch-up (with copies)
  std::string data_dir;       // the record store (absolute)
  std::string peer_id;
  double age_s = 3600;
  int busy_timeout_ms = 5000;  // per infofile open
  Env* env = nullptr;          // nullptr: Env::Default()
};

struct PlannedRemoval {
  uint64_t file_id = 0;
  std::string name;
  uint8_t copy_rank = 0;
  uint32_t crc = 0;
  ScrubAction action = ScrubAction::kRemoveUncommitted;
};

struct ScrubPlan {
  double now = 0;            // wall clock when the inventory started
  double cutoff = 0;         // now - age: nothing modified after this is removed
  uint64_t files = 0;        // file ids with records in the store
  uint64_t skipped = 0;      // of those, file ids whose infofile state was kUnknown
  uint64_t records = 0;      // records examined
  uint64_t infofiles = 0;    // infofiles found in the namespace (copies: read)
  bool namespace_complete = false;  // walk saw every directory and identified every file
  std::vector<PlannedRemoval> removals;
  std::vector<std::string> tmp_files;  // names in <data>/tmp/
  std::vector<uint64_t> file_dirs;     // file ids whose empty directories may be pruned
};

// Builds the plan. Stops early with Unavailable if *cancel becomes true.
// Unavailable also if the namespace root cannot be read, or (with copies)
// the tracker cannot be reached (nothing is planned then); IOError if
// <data>/files/ cannot be read.
Status MakeScrubPlan(const ScrubPlanOptions& options, const std::atomic<bool>* cancel,
                     ScrubPlan* plan);

}  // namespace st

#endif  // ST_CORE_SCRUB_PLAN_H_
