#include "scrub.h"

#include <string_view>
#include <unordered_map>

namespace st {

const char* ScrubActionName(ScrubAction a) {
  switch (a) {
    case ScrubAction::kKeepCommitted:
      return "keep-committed";
    case ScrubAction::kKeepYoung:
      return "keep-young";
    case ScrubAction::kKeepUnknown:
      return "keep-unknown";
    case ScrubAction::kRemoveUncommitted:
      return "remove-uncommitted";
    case ScrubAction::kRemoveWrongRank:
      return "remove-wrong-rank";
    case ScrubAction::kRemoveDeletedFile:
      return "remove-deleted-file";
  }
  return "?";
}

InfofileState StateFromTracker(const Status& s, FetchFailure failure) {
  if (s.ok()) return InfofileState::kRead;
  if (s.IsNotFound() && failure == FetchFailure::kDeleted) return InfofileState::kMissing;
  return InfofileState::kUnknown;
}

std::vector<ScrubAction> DecideScrub(const std::vector<LocalRecord>& local, InfofileState state,
                                     const std::vector<CommittedCopy>& committed, double now,
                                     double age_s) {
  std::vector<ScrubAction> out(local.size(), ScrubAction::kKeepUnknown);
  if (state == InfofileState::kUnknown) return out;

  // stored name -> the ranks committed to this peer (normally one; more only if the
  // infofile breaks invariant 3, and then every committed rank is kept).
  std::unordered_map<std::string_view, std::vector<uint8_t>> ranks;
  if (state == InfofileState::kRead) {
    ranks.reserve(committed.size());
    for (const CommittedCopy& c : committed) ranks[c.key()].push_back(c.copy_rank);
  }
  for (size_t i = 0; i < local.size(); ++i) {
    const LocalRecord& r = local[i];
    auto it = ranks.find(r.name);
    bool named = it != ranks.end();
    bool at_own_rank = false;
    if (named) {
      for (uint8_t rank : it->second) at_own_rank = at_own_rank || rank == r.copy_rank;
    }
    if (at_own_rank) {
      out[i] = ScrubAction::kKeepCommitted;
    } else if (now - r.mtime < age_s) {  // also keeps mtimes in the future
      out[i] = ScrubAction::kKeepYoung;
    } else if (state == InfofileState::kMissing) {
      out[i] = ScrubAction::kRemoveDeletedFile;
    } else if (named) {
      out[i] = ScrubAction::kRemoveWrongRank;
    } else {
      out[i] = ScrubAction::kRemoveUncommitted;
    }
  }
  return out;
}

}  // namespace st
