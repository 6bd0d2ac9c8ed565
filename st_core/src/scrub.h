// The scrubber's decision (paper 3.1 and 4.3): which local records of one
// file to remove. A pure function: no I/O, no clock.
//
// For each local record, in this order:
//   infofile state kUnknown (unreadable, locked, corrupt)  -> keep (kKeepUnknown)
//   committed to this peer at the record's own copy rank   -> keep (kKeepCommitted), at any age
//   younger than the scrub age (now - mtime < age)          -> keep (kKeepYoung): a write in
//                                                              flight may still commit it
//   infofile state kMissing (no infofile has the file id)  -> remove (kRemoveDeletedFile)
//   name committed to this peer at another rank            -> remove (kRemoveWrongRank)
//   otherwise                                              -> remove (kRemoveUncommitted)
#ifndef ST_CORE_SCRUB_H_
#define ST_CORE_SCRUB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "infofile.h"
#include "infofile_copy.h"
#include "status.h"

namespace st {

// What the scrubber knows of a file id's infofile.
enum class InfofileState : uint8_t {
  kRead,     // read: the committed copies are known
  kMissing,  // no infofile in the namespace has this file id, or (--metadata fetch) the
             // tracker said explicitly that the file was deleted
  kUnknown,  // an infofile could not be read, or the namespace walk was incomplete
};

enum class ScrubAction : uint8_t {
  kKeepCommitted,
  kKeepYoung,
  kKeepUnknown,
  kRemoveUncommitted,
  kRemoveWrongRank,
  kRemoveDeletedFile,
};

// "keep-committed", "remove-uncommitted", ...
const char* ScrubActionName(ScrubAction a);

inline bool IsRemoval(ScrubAction a) {
  return a == ScrubAction::kRemoveUncommitted || a == ScrubAction::kRemoveWrongRank ||
         a == ScrubAction::kRemoveDeletedFile;
}

// --metadata fetch: the state of a file id whose copy the scrubber asked the
// tracker to bring to its latest (InfofileCopies::EnsureLatest returned
// `s`, and `failure` if !ok): kRead if it did; kMissing only if the tracker
// said explicitly that the file was deleted (FetchFailure::kDeleted with
// NotFound); kUnknown on anything else: a tracker that cannot be reached, a
// NOT_FOUND that does not say so (an id the tracker does not know), a
// refusal (this peer no longer in the file's peerlist), a bad reply.
InfofileState StateFromTracker(const Status& s, FetchFailure failure);

// One record file of the local store, as the inventory found it.
struct LocalRecord {
  std::string name;
  uint8_t copy_rank = 0;
  uint32_t crc = 0;
  double mtime = 0;  // wall-clock seconds
};

// One action per element of `local`, in order. `committed` is what the
// infofile commits to this peer (ignored unless state is kRead); it may name
// records this peer does not hold. now and mtimes are wall-clock seconds.
std::vector<ScrubAction> DecideScrub(const std::vector<LocalRecord>& local, InfofileState state,
                                     const std::vector<CommittedCopy>& committed, double now,
                                     double age_s);

}  // namespace st

#endif  // ST_CORE_SCRUB_H_
