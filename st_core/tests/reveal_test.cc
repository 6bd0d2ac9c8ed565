#include "reveal.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace st {
namespace {

using Segments = std::vector<std::vector<RingEntry>>;

std::vector<std::string> Names(const std::vector<RingEntry>& es) {
  std::vector<std::string> out;
  for (const auto& e : es) out.push_back(e.name + "@" + std::to_string(e.copy_rank));
  return out;
}

std::vector<std::string> RevealAt(const Segments& segs, size_t me) {
  std::vector<RingEntry> out;
  InvariantViolation v;
  EXPECT_TRUE(Reveal(segs, me, &out, &v)) << v.invariant << " " << v.name;
  return Names(out);
}

// Every record present somewhere is revealed by exactly one peer.
void ExpectExactlyOnce(const Segments& segs) {
  std::set<std::string> present;
  for (const auto& s : segs) {
    for (const auto& e : s) present.insert(e.name);
  }
  std::map<std::string, int> seen;
  for (size_t p = 0; p < segs.size(); ++p) {
    std::vector<RingEntry> out;
    InvariantViolation v;
    ASSERT_TRUE(Reveal(segs, p, &out, &v));
    for (const auto& e : out) ++seen[e.name];
  }
  EXPECT_EQ(present.size(), seen.size());
  for (const auto& kv : seen) EXPECT_EQ(1, kv.second) << kv.first;
}

TEST(Reveal, X1EachPeerRevealsItsOwn) {
  Segments segs = {{{0, "a"}, {0, "c"}}, {{0, "b"}}, {}};
  EXPECT_EQ((std::vector<std::string>{"a@0", "c@0"}), RevealAt(segs, 0));
  EXPECT_EQ((std::vector<std::string>{"b@0"}), RevealAt(segs, 1));
  EXPECT_TRUE(RevealAt(segs, 2).empty());
  ExpectExactlyOnce(segs);
}

TEST(Reveal, X2LowerRankWins) {
  // Placement of x2: record r has rank 0 on peer r%3 and rank 1 on (r+1)%3.
  Segments segs(3);
  for (int r = 0; r < 9; ++r) {
    std::string n = "r" + std::to_string(r);
    segs[r % 3].push_back(RingEntry{0, n});
    segs[(r + 1) % 3].push_back(RingEntry{1, n});
  }
  EXPECT_EQ((std::vector<std::string>{"r0@0", "r3@0", "r6@0"}), RevealAt(segs, 0));
  ExpectExactlyOnce(segs);
  // Peer 1 is missing (failed, or its segment is empty): its rank-0 records
  // are revealed by peer 2 at rank 1.
  segs[1].clear();
  EXPECT_EQ((std::vector<std::string>{"r0@0", "r3@0", "r6@0"}), RevealAt(segs, 0));
  EXPECT_EQ((std::vector<std::string>{"r1@1", "r2@0", "r4@1", "r5@0", "r7@1", "r8@0"}),
            RevealAt(segs, 2));
  ExpectExactlyOnce(segs);
}

TEST(Reveal, X3PrecedenceWithPeersMissing) {
  // Record "k": rank 0 on peer 0, rank 1 on peer 1, rank 2 on peer 2.
  Segments segs = {{{0, "k"}}, {{1, "k"}}, {{2, "k"}}, {}};
  EXPECT_EQ((std::vector<std::string>{"k@0"}), RevealAt(segs, 0));
  EXPECT_TRUE(RevealAt(segs, 1).empty());
  EXPECT_TRUE(RevealAt(segs, 2).empty());
  segs[0].clear();  // rank 0 lost: rank 1 is revealed
  EXPECT_EQ((std::vector<std::string>{"k@1"}), RevealAt(segs, 1));
  EXPECT_TRUE(RevealAt(segs, 2).empty());
  segs[1].clear();  // ranks 0 and 1 lost: rank 2 is revealed
  EXPECT_EQ((std::vector<std::string>{"k@2"}), RevealAt(segs, 2));
  // Only rank 0 and rank 2 present: rank 0 wins.
  segs = {{{0, "k"}}, {}, {{2, "k"}}};
  EXPECT_EQ((std::vector<std::string>{"k@0"}), RevealAt(segs, 0));
  EXPECT_TRUE(RevealAt(segs, 2).empty());
  ExpectExactlyOnce(segs);
}

TEST(Reveal, X3ManyRecordsExactlyOnce) {
  const size_t n = 5;
  Segments segs(n);
  for (int r = 0; r < 200; ++r) {
    for (int rank = 0; rank < 3; ++rank) {
      size_t peer = (static_cast<size_t>(r) + static_cast<size_t>(rank)) % n;
      // Drop some copies, as after failures.
      if ((r * 7 + rank * 3) % 5 == 0 && rank < 2) continue;
      segs[peer].push_back(RingEntry{static_cast<uint8_t>(rank), "rec" + std::to_string(r)});
    }
  }
  ExpectExactlyOnce(segs);
}

TEST(Reveal, Invariant2SameRankOnTwoPeers) {
  Segments segs = {{{0, "a"}, {0, "x"}}, {{1, "a"}}, {{0, "x"}}};
  for (size_t me = 0; me < segs.size(); ++me) {
    std::vector<RingEntry> out;
    InvariantViolation v;
    EXPECT_FALSE(Reveal(segs, me, &out, &v));
    EXPECT_EQ(2, v.invariant);
    EXPECT_EQ("x", v.name);
    EXPECT_EQ((std::vector<size_t>{0, 2}), v.peers);
    EXPECT_EQ((std::vector<uint8_t>{0}), v.ranks);
    std::string msg = DescribeViolation(v, {"h:1", "h:2", "h:3"});
    EXPECT_NE(std::string::npos, msg.find("invariant 2")) << msg;
    EXPECT_NE(std::string::npos, msg.find("'x'")) << msg;
    EXPECT_NE(std::string::npos, msg.find("h:1")) << msg;
    EXPECT_NE(std::string::npos, msg.find("h:3")) << msg;
    EXPECT_EQ(std::string::npos, msg.find("h:2")) << msg;
  }
}

TEST(Reveal, Invariant3TwoCopiesOnOnePeer) {
  Segments segs = {{{0, "a"}}, {{0, "b"}, {1, "b"}}};
  std::vector<RingEntry> out;
  InvariantViolation v;
  EXPECT_FALSE(Reveal(segs, 0, &out, &v));
  EXPECT_EQ(3, v.invariant);
  EXPECT_EQ("b", v.name);
  EXPECT_EQ((std::vector<size_t>{1}), v.peers);
  EXPECT_EQ((std::vector<uint8_t>{0, 1}), v.ranks);
  std::string msg = DescribeViolation(v, {"10.0.0.1:7000", "10.0.0.2:7000"});
  EXPECT_NE(std::string::npos, msg.find("invariant 3")) << msg;
  EXPECT_NE(std::string::npos, msg.find("'b'")) << msg;
  EXPECT_NE(std::string::npos, msg.find("10.0.0.2:7000")) << msg;
  // The same entry twice is a violation too.
  segs = {{{0, "z"}, {0, "z"}}};
  EXPECT_FALSE(Reveal(segs, 0, &out, &v));
  EXPECT_EQ(3, v.invariant);
}

TEST(Reveal, EveryPeerReportsTheSameViolation) {
  Segments segs = {{{0, "m"}, {0, "b"}}, {{0, "m"}}, {{0, "b"}, {1, "q"}}, {{1, "q"}}};
  std::vector<RingEntry> out;
  InvariantViolation first;
  ASSERT_FALSE(Reveal(segs, 0, &out, &first));
  for (size_t me = 1; me < segs.size(); ++me) {
    InvariantViolation v;
    ASSERT_FALSE(Reveal(segs, me, &out, &v));
    EXPECT_EQ(first.name, v.name);
    EXPECT_EQ(first.peers, v.peers);
  }
  EXPECT_EQ("b", first.name);
}

TEST(Reveal, EmptyRingAndSinglePeer) {
  EXPECT_TRUE(RevealAt({{}}, 0).empty());
  EXPECT_EQ((std::vector<std::string>{"a@1", "b@0"}), RevealAt({{{0, "b"}, {1, "a"}}}, 0));
}

}  // namespace
}  // namespace st
