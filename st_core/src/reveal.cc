#include "reveal.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace st {
namespace {

struct Holder {
  uint8_t rank;
  size_t peer;
};

// (invariant, name) ordering; the smallest violation is reported.
bool Better(const InvariantViolation& a, const InvariantViolation& b) {
  if (b.invariant == 0) return true;
  if (a.invariant != b.invariant) return a.invariant < b.invariant;
  return a.name < b.name;
}

}  // namespace

bool Reveal(const std::vector<std::vector<RingEntry>>& segments, size_t me,
            std::vector<RingEntry>* revealed, InvariantViolation* violation) {
  revealed->clear();
  *violation = InvariantViolation();
  size_t total = 0;
  for (const auto& seg : segments) total += seg.size();
  std::unordered_map<std::string_view, std::vector<Holder>> holders;
  holders.reserve(total);
  for (size_t p = 0; p < segments.size(); ++p) {
    for (const RingEntry& e : segments[p]) holders[e.name].push_back(Holder{e.copy_rank, p});
  }

  InvariantViolation best;
  for (auto& [name, hs] : holders) {
    if (hs.size() < 2) continue;
    std::sort(hs.begin(), hs.end(), [](const Holder& a, const Holder& b) {
      return a.peer != b.peer ? a.peer < b.peer : a.rank < b.rank;
    });
    // Invariant 3: the same peer twice.
    for (size_t i = 1; i < hs.size(); ++i) {
      if (hs[i].peer != hs[i - 1].peer) continue;
      InvariantViolation v;
      v.invariant = 3;
      v.name.assign(name);
      v.peers.push_back(hs[i].peer);
      for (const Holder& h : hs) {
        if (h.peer == hs[i].peer) v.ranks.push_back(h.rank);
      }
      if (Better(v, best)) best = std::move(v);
      break;
    }
    if (best.invariant == 3 && best.name == name) continue;
    // Invariant 2: the same rank at two peers.
    std::vector<Holder> by_rank = hs;
    std::sort(by_rank.begin(), by_rank.end(), [](const Holder& a, const Holder& b) {
      return a.rank != b.rank ? a.rank < b.rank : a.peer < b.peer;
    });
    for (size_t i = 1; i < by_rank.size(); ++i) {
      if (by_rank[i].rank != by_rank[i - 1].rank) continue;
      InvariantViolation v;
      v.invariant = 2;
      v.name.assign(name);
      v.ranks.push_back(by_rank[i].rank);
      for (const Holder& h : by_rank) {
        if (h.rank == by_rank[i].rank) v.peers.push_back(h.peer);
      }
      if (Better(v, best)) best = std::move(v);
      break;
    }
  }
  if (best.invariant != 0) {
    *violation = std::move(best);
    return false;
  }

  if (me < segments.size()) {
    for (const RingEntry& e : segments[me]) {
      const auto& hs = holders[e.name];
      bool lowest = true;
      for (const Holder& h : hs) {
        if (h.rank < e.copy_rank) {
          lowest = false;
          break;
        }
      }
      if (lowest) revealed->push_back(e);
    }
  }
  std::sort(revealed->begin(), revealed->end(),
            [](const RingEntry& a, const RingEntry& b) { return a.name < b.name; });
  return true;
}

std::string DescribeViolation(const InvariantViolation& v, const std::vector<std::string>& peers) {
  auto addr = [&](size_t i) { return i < peers.size() ? peers[i] : "peer #" + std::to_string(i); };
  std::string msg;
  if (v.invariant == 3) {
    msg = "invariant 3 (one copy per peer) broken: peer " + addr(v.peers.empty() ? 0 : v.peers[0]) +
          " holds record '" + Printable(v.name) + "' at copy ranks";
    for (size_t i = 0; i < v.ranks.size(); ++i) {
      msg += (i == 0 ? " " : ", ") + std::to_string(v.ranks[i]);
    }
  } else {
    msg = "invariant 2 (one holder per copy rank) broken: record '" + Printable(v.name) +
          "' copy rank " + std::to_string(v.ranks.empty() ? 0 : v.ranks[0]) + " is held by peers";
    for (size_t i = 0; i < v.peers.size(); ++i) {
      msg += (i == 0 ? " " : ", ") + addr(v.peers[i]);
    }
  }
  msg += "; repair the file (delete the extra copies) before GET_LOCAL";
  return msg;
}

}  // namespace st
