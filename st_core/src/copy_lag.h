// How far a peer's infofile copies are behind the tracker (issue 40; docs/peer.md,
// "Infofile copies"): the one owner of that number, read by the metrics, the
// announces (the tracker's status) and the mirror pass (which copies to bring
// forward first).
//
// Two facts per file, kept as they arrive:
//   - the generation the tracker last named for it: each announce reply names
//     the files whose peerlist names this peer that changed since the last one
//     (st_py/tracker/peer_files.py), and each FetchInfofile reply says the
//     tracker's generation too;
//   - the generation of this peer's copy (InfofileCopies after each catch-up,
//     the mirror pass's catalog of <data>/meta/).
// A file is behind when the tracker named it and its copy is missing or below
// the generation named; its lag is the generation named less the copy's (the
// generation named when there is no copy). A file the tracker never named (a
// copy kept from before, not yet named since this process started) is not
// behind as far as the peer knows.
//
// Thread-safety: every method may be called from any thread (one mutex).
#ifndef ST_CORE_COPY_LAG_H_
#define ST_CORE_COPY_LAG_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace st {

class CopyLag {
 public:
  // A file the tracker named.
  struct Named {
    uint64_t file_id = 0;
    std::string name;  // its namespace path ("": unknown, keep the one known)
    uint64_t generation = 0;
  };
  struct Stats {
    uint64_t copies = 0;      // copies held
    uint64_t behind = 0;      // files named whose copy is missing or below the generation named
    uint64_t max_lag = 0;     // the largest lag, in generations
    double caught_up_at = 0;  // Unix time nothing was last seen behind, after an announce
                              // reply or a catch-up (0: never)
  };

  // An announce reply: the tracker named these files (an empty list too:
  // nothing changed since the last one); `now` is the Unix time. A
  // generation below the one known does not lower it.
  void TrackerNamed(const std::vector<Named>& files, double now);
  // A FetchInfofile reply: the tracker is at `generation` for file_id.
  void TrackerAt(uint64_t file_id, uint64_t generation, double now);
  // The copy of file_id is at `generation` (after a catch-up, or as found on disk).
  void CopyAt(uint64_t file_id, uint64_t generation, double now);
  // The tracker has no such file: it is no longer named (its copy, if any, stays counted).
  void Unnamed(uint64_t file_id, double now);
  // The copy of file_id was removed.
  void CopyRemoved(uint64_t file_id, double now);

  // Files behind, largest lag first, at most `limit`.
  std::vector<Named> Behind(size_t limit) const;
  Stats Get() const;

 private:
  void Recheck(uint64_t file_id, double now);  // mu_ held
  void MaybeCaughtUp(double now);              // mu_ held

  mutable std::mutex mu_;
  std::map<uint64_t, Named> named_;        // by file id
  std::map<uint64_t, uint64_t> copies_;    // file id -> its copy's generation
  std::set<uint64_t> behind_;
  double caught_up_at_ = 0;
  bool heard_ = false;  // an announce reply was taken: "nothing behind" means something
};

}  // namespace st

#endif  // ST_CORE_COPY_LAG_H_
