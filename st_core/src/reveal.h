// The decision step of GET_LOCAL (paper 3.7), as a pure function.
//
// Given the N segments of a ring (segment i: the (copy_rank, name) pairs
// peer i holds and the infofile commits to it), peer `me` reveals its copy
// of a record at rank r if and only if no segment holds that record at a
// rank below r. Lower copy ranks take precedence, so with the invariants
// below every record present in some segment is revealed by exactly one peer.
//
// Invariants checked (paper 3.7):
//   2. one holder per copy rank: no (name, rank) in two segments;
//   3. one copy per peer: no name twice in one segment.
// Every peer sees the same segments, so every peer reports the same
// violation: the one with the smallest (invariant, name).
#ifndef ST_CORE_REVEAL_H_
#define ST_CORE_REVEAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol.h"

namespace st {

struct InvariantViolation {
  int invariant = 0;          // 2 or 3
  std::string name;           // the record
  std::vector<uint8_t> ranks;  // invariant 2: the rank; 3: the ranks the peer holds
  std::vector<size_t> peers;  // indexes into the ring, ascending
};

// Returns true and fills *revealed (sorted by name) when the invariants
// hold; otherwise returns false and fills *violation.
bool Reveal(const std::vector<std::vector<RingEntry>>& segments, size_t me,
            std::vector<RingEntry>* revealed, InvariantViolation* violation);

// A message for a person, naming the record and the peers by address.
std::string DescribeViolation(const InvariantViolation& v, const std::vector<std::string>& peers);

}  // namespace st

#endif  // ST_CORE_REVEAL_H_
