#include "copy_lag.h"

#include <algorithm>

namespace st {

void CopyLag::Recheck(uint64_t file_id, double now) {
  auto n = named_.find(file_id);
  auto c = copies_.find(file_id);
  bool behind = n != named_.end() && (c == copies_.end() || c->second < n->second.generation);
  if (behind) {
    behind_.insert(file_id);
  } else {
    behind_.erase(file_id);
    MaybeCaughtUp(now);
  }
}

void CopyLag::MaybeCaughtUp(double now) {
  if (behind_.empty() && heard_) caught_up_at_ = now;
}

void CopyLag::TrackerNamed(const std::vector<Named>& files, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  heard_ = true;
  for (const Named& f : files) {
    Named& n = named_[f.file_id];
    n.file_id = f.file_id;
    if (!f.name.empty()) n.name = f.name;
    n.generation = std::max(n.generation, f.generation);
    Recheck(f.file_id, now);
  }
  MaybeCaughtUp(now);
}

void CopyLag::TrackerAt(uint64_t file_id, uint64_t generation, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto n = named_.find(file_id);
  if (n == named_.end() || n->second.generation >= generation) return;
  n->second.generation = generation;
  Recheck(file_id, now);
}

void CopyLag::CopyAt(uint64_t file_id, uint64_t generation, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  copies_[file_id] = generation;
  Recheck(file_id, now);
}

void CopyLag::Unnamed(uint64_t file_id, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  named_.erase(file_id);
  behind_.erase(file_id);
  MaybeCaughtUp(now);
}

void CopyLag::CopyRemoved(uint64_t file_id, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  copies_.erase(file_id);
  Recheck(file_id, now);
}

std::vector<CopyLag::Named> CopyLag::Behind(size_t limit) const {
  std::vector<std::pair<uint64_t, Named>> all;  // (lag, file)
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t id : behind_) {
      const Named& n = named_.at(id);
      auto c = copies_.find(id);
      all.emplace_back(c == copies_.end() ? n.generation : n.generation - c->second, n);
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Named> out;
  for (size_t i = 0; i < all.size() && i < limit; ++i) out.push_back(std::move(all[i].second));
  return out;
}

CopyLag::Stats CopyLag::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.copies = copies_.size();
  s.behind = behind_.size();
  for (uint64_t id : behind_) {
    uint64_t want = named_.at(id).generation;
    auto c = copies_.find(id);
    s.max_lag = std::max(s.max_lag, c == copies_.end() ? want : want - c->second);
  }
  s.caught_up_at = caught_up_at_;
  return s;
}

}  // namespace st
