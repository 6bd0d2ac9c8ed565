// ReadCommittedCopies on infofiles with history (format 4's tables,
// docs/snapshots.md): the records of generation G = as_of with their copies
// as held at N = the ring's generation, exactly once across the peers, and
// the same answer however much later it is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "infofile.h"
#include "infofile_util.h"
#include "reveal.h"
#include "test_util.h"

namespace st {
namespace {

// (name, stored name, rank) of a copy, sorted.
using Keys = std::vector<std::tuple<std::string, std::string, int>>;

const char* const kPeers[] = {"A", "B", "C"};

// What `peer` is committed at (as_of, generation); as_of < 0: no as_of.
Keys Read(const std::string& path, const std::string& peer, uint64_t generation,
          int64_t as_of = -1) {
  InfofileReadOptions ro;
  ro.generation = generation;
  if (as_of >= 0) ro.as_of = static_cast<uint64_t>(as_of);
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(path, 9, peer, ro, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Keys v;
  for (auto& c : out) v.emplace_back(c.name, c.key(), c.copy_rank);
  std::sort(v.begin(), v.end());
  return v;
}

// What the ring of A, B and C reveals (paper 3.7, every peer holding every
// copy committed to it): record name -> (peer, stored name, rank). Fails the
// test if a record is revealed twice or the invariants break.
std::map<std::string, std::tuple<std::string, std::string, int>> RingReveal(const std::string& path,
                                                                            uint64_t generation,
                                                                            int64_t as_of) {
  std::vector<Keys> committed;
  std::vector<std::vector<RingEntry>> segments;
  for (const char* p : kPeers) {
    committed.push_back(Read(path, p, generation, as_of));
    std::vector<RingEntry> seg;
    for (const auto& [name, key, rank] : committed.back()) {
      seg.push_back(RingEntry{static_cast<uint8_t>(rank), name});
    }
    segments.push_back(std::move(seg));
  }
  std::map<std::string, std::tuple<std::string, std::string, int>> out;
  for (size_t me = 0; me < segments.size(); ++me) {
    std::vector<RingEntry> revealed;
    InvariantViolation v;
    EXPECT_TRUE(Reveal(segments, me, &revealed, &v)) << DescribeViolation(v, {"A", "B", "C"});
    for (const RingEntry& e : revealed) {
      std::string key;
      for (const auto& [name, k, rank] : committed[me]) {
        if (name == e.name && rank == e.copy_rank) key = k;
      }
      EXPECT_EQ(0u, out.count(e.name)) << e.name << " revealed twice";
      out[e.name] = {kPeers[me], key, e.copy_rank};
    }
  }
  return out;
}

// The file's history, one change a generation (peers A = 0, B = 1, C = 2;
// every record x2; until_at = 100 * generation):
//   1  a@0 A, a@1 B; b@0 A, b@1 B; d@0 B, d@1 C (WriteInfofile)
//   2  c appended: c@0 C, c@1 A
//   3  b replaced by version 1 ("v1/b"): @0 B, @1 C
//   4  d deleted
//   5  a@1 moved from B to C
//   6  b's version 1 @0 moved from B to A
//   7  b replaced by version 2 ("v2/b"): @0 C, @1 A
// Each step is the tracker's transaction (docs/snapshots.md, "The model").
std::string ToHistory(const std::string& name, int gen) {
  std::string g = std::to_string(gen);
  return "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
         "committed_at, schema_id, logical_size, until, until_at) SELECT name, version, "
         "stored_as, size, crc32c, commit_seq, committed_at, schema_id, logical_size, " +
         g + ", " + g + "00 FROM records WHERE name = '" + name + "';" +
         "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
         "SELECT c.name, c.copy_rank, c.peer_idx, c.since, " +
         g + ", r.stored_as, " + g + "00 FROM copies c JOIN records r USING(name) WHERE name = '" +
         name + "';" + "DELETE FROM copies WHERE name = '" + name + "';";
}

std::string SetGeneration(int gen) {
  return "UPDATE meta SET value = " + std::to_string(gen) + " WHERE key = 'generation';";
}

std::string Step(int gen) {
  switch (gen) {
    case 2:
      return "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) "
             "VALUES('c', 1, 0, 2, 0);"
             "INSERT INTO copies VALUES('c', 0, 2, 2), ('c', 1, 0, 2);" +
             SetGeneration(2);
    case 3:
      // One copy_history row names version 0 by its name, one leaves it NULL.
      return ToHistory("b", 3) +
             "UPDATE copy_history SET stored_as = 'b' WHERE name = 'b' AND copy_rank = 0;"
             "INSERT INTO copies VALUES('b', 0, 1, 3), ('b', 1, 2, 3);"
             "UPDATE records SET version = 1, stored_as = 'v1/b', commit_seq = 3 "
             "WHERE name = 'b';" +
             SetGeneration(3);
    case 4:
      return ToHistory("d", 4) + "DELETE FROM records WHERE name = 'd';" + SetGeneration(4);
    case 5:
      return "INSERT INTO copy_history VALUES('a', 1, 1, 1, 5, NULL, 500);"
             "UPDATE copies SET peer_idx = 2, since = 5 WHERE name = 'a' AND copy_rank = 1;" +
             SetGeneration(5);
    case 6:
      return "INSERT INTO copy_history VALUES('b', 0, 1, 3, 6, 'v1/b', 600);"
             "UPDATE copies SET peer_idx = 0, since = 6 WHERE name = 'b' AND copy_rank = 0;" +
             SetGeneration(6);
    case 7:
      return ToHistory("b", 7) +
             "INSERT INTO copies VALUES('b', 0, 2, 7), ('b', 1, 0, 7);"
             "UPDATE records SET version = 2, stored_as = 'v2/b', commit_seq = 7 "
             "WHERE name = 'b';" +
             SetGeneration(7);
  }
  return "";
}

constexpr int kLast = 7;

// The file after generations 1 .. last.
void WriteHistory(const std::string& path, int last, const std::string& more_sql = "") {
  std::string sql;
  for (int gen = 2; gen <= last; ++gen) sql += Step(gen);
  test::WriteInfofile(
      path, 9, {{"A", "h:1"}, {"B", "h:2"}, {"C", "h:3"}},
      {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 0}, {"b", 1, 1}, {"d", 0, 1}, {"d", 1, 2}},
      "storetorrent-infofile", sql + more_sql);
}

class InfofileHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/f";
    WriteHistory(path_, kLast);
  }
  test::TempDir dir_;
  std::string path_;
};

TEST_F(InfofileHistoryTest, ARecordAppendedAfterAsOfIsNotRevealed) {
  for (const char* p : kPeers) {
    for (const auto& [name, key, rank] : Read(path_, p, kLast, 1)) EXPECT_NE("c", name) << p;
  }
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"c", "c", 1}}), Read(path_, "A", kLast, 2));
  EXPECT_EQ(1u, RingReveal(path_, kLast, 2).count("c"));
  EXPECT_EQ(0u, RingReveal(path_, kLast, 1).count("c"));
}

TEST_F(InfofileHistoryTest, ARecordReplacedAfterAsOfIsRevealedAtItsOldStoredName) {
  // As of 1: version 0, from the holders it had when it was replaced (A, B).
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}}), Read(path_, "A", kLast, 1));
  EXPECT_EQ((Keys{{"b", "b", 1}, {"d", "d", 0}}), Read(path_, "B", kLast, 1));
  EXPECT_EQ((Keys{{"a", "a", 1}, {"d", "d", 1}}), Read(path_, "C", kLast, 1));
  // As of 3, planned at 5: version 1, held at 5 by B and C (moved at 6,
  // replaced at 7: neither changes the plan's answer).
  EXPECT_EQ((Keys{{"a", "a", 0}, {"c", "c", 1}}), Read(path_, "A", 5, 3));
  EXPECT_EQ((Keys{{"b", "v1/b", 0}, {"d", "d", 0}}), Read(path_, "B", 5, 3));
  EXPECT_EQ((Keys{{"a", "a", 1}, {"b", "v1/b", 1}, {"c", "c", 0}, {"d", "d", 1}}),
            Read(path_, "C", 5, 3));
  // Planned at 6: version 1's rank 0 is on A by then.
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v1/b", 0}, {"c", "c", 1}}), Read(path_, "A", 6, 3));
  auto ring = RingReveal(path_, kLast, 3);
  EXPECT_EQ(std::make_tuple(std::string("A"), std::string("v1/b"), 0), ring["b"]);
}

TEST_F(InfofileHistoryTest, ARecordDeletedAfterAsOfIsRevealed) {
  for (int g = 1; g <= 3; ++g) {
    auto ring = RingReveal(path_, kLast, g);
    EXPECT_EQ(std::make_tuple(std::string("B"), std::string("d"), 0), ring["d"]) << g;
  }
  for (int g = 4; g <= kLast; ++g) EXPECT_EQ(0u, RingReveal(path_, kLast, g).count("d")) << g;
}

TEST_F(InfofileHistoryTest, ACurrentVersionMovedIsRevealedByItsHolderAtTheGeneration) {
  // a@1 moved from B to C at 5. Planned at 7: C reveals it, B does not.
  EXPECT_EQ((Keys{{"a", "a", 1}, {"d", "d", 1}}), Read(path_, "C", kLast, 1));
  for (const auto& [name, key, rank] : Read(path_, "B", kLast, 1)) EXPECT_NE("a", name);
  // Planned at 4 (before the move), read after it: the old holder B reveals
  // it, C does not: exactly once.
  EXPECT_EQ((Keys{{"a", "a", 1}, {"b", "b", 1}, {"d", "d", 0}}), Read(path_, "B", 4, 1));
  EXPECT_EQ((Keys{{"d", "d", 1}}), Read(path_, "C", 4, 1));
}

// Every bound is a generation: what a plan at N reads as of G is the same
// whenever it is read, before or after any later change (a replacement, a
// delete, a move, an append), on every peer; and the ring reveals each
// record of G exactly once, at the version it had at G.
TEST_F(InfofileHistoryTest, APlanReadsTheSameSetWhateverChangedSince) {
  // The stored name of each record's version at G.
  std::map<int, std::map<std::string, std::string>> versions = {
      {1, {{"a", "a"}, {"b", "b"}, {"d", "d"}}},
      {2, {{"a", "a"}, {"b", "b"}, {"c", "c"}, {"d", "d"}}},
      {3, {{"a", "a"}, {"b", "v1/b"}, {"c", "c"}, {"d", "d"}}},
      {4, {{"a", "a"}, {"b", "v1/b"}, {"c", "c"}}},
      {5, {{"a", "a"}, {"b", "v1/b"}, {"c", "c"}}},
      {6, {{"a", "a"}, {"b", "v1/b"}, {"c", "c"}}},
      {7, {{"a", "a"}, {"b", "v2/b"}, {"c", "c"}}},
  };
  for (int n = 1; n <= kLast; ++n) {
    std::string then = dir_.path() + "/at" + std::to_string(n);
    WriteHistory(then, n);  // the file when the plan at n was made
    for (int g = 1; g <= n; ++g) {
      SCOPED_TRACE("as of " + std::to_string(g) + ", planned at " + std::to_string(n));
      for (const char* p : kPeers) {
        EXPECT_EQ(Read(then, p, n, g), Read(path_, p, n, g)) << p;
      }
      std::map<std::string, std::string> revealed;
      for (const auto& [name, where] : RingReveal(path_, n, g)) revealed[name] = std::get<1>(where);
      EXPECT_EQ(versions[g], revealed);
    }
  }
}

// Without as_of (G = N) a file with history answers as one without it would
// (the query of docs/infofile.md, "Snapshots"), plus the records deleted
// after N, which that query loses.
TEST_F(InfofileHistoryTest, WithoutAsOfNothingChangesButDeletesAreKept) {
  std::string plain = dir_.path() + "/plain";
  WriteHistory(plain, kLast,
               "DROP TABLE record_history; DROP TABLE object_history; DROP TABLE snapshots;");
  for (int n = 1; n <= kLast; ++n) {
    for (const char* p : kPeers) {
      Keys with = Read(path_, p, n), without = Read(plain, p, n);
      EXPECT_EQ(with, Read(path_, p, n, n)) << p << " at " << n;  // AS_OF = generation: the same
      Keys lost;
      std::set_difference(with.begin(), with.end(), without.begin(), without.end(),
                          std::back_inserter(lost));
      Keys extra;
      std::set_difference(without.begin(), without.end(), with.begin(), with.end(),
                          std::back_inserter(extra));
      EXPECT_EQ(Keys{}, extra) << p << " at " << n;
      for (const auto& [name, key, rank] : lost) EXPECT_EQ("d", name) << p << " at " << n;
      if (n < 4 && std::string(p) != "A") {
        EXPECT_EQ(1u, lost.size()) << p << " at " << n;
      }
    }
  }
  // The latest state (generation 0) has no history either way.
  for (const char* p : kPeers) EXPECT_EQ(Read(plain, p, 0), Read(path_, p, 0)) << p;
}

// The index copy_history_by_peer_until only speeds the read up: a file
// without it (made before it existed) answers every read the same.
TEST_F(InfofileHistoryTest, TheHistoryIndexChangesNoAnswer) {
  std::string unindexed = dir_.path() + "/unindexed";
  WriteHistory(unindexed, kLast, "DROP INDEX copy_history_by_peer_until;");
  for (int n = 0; n <= kLast; ++n) {
    for (int g = -1; g <= (n == 0 ? kLast : n); ++g) {
      for (const char* p : kPeers) {
        EXPECT_EQ(Read(path_, p, n, g), Read(unindexed, p, n, g))
            << p << " as of " << g << " planned at " << n;
      }
    }
  }
}

TEST_F(InfofileHistoryTest, AFileWithoutHistoryRefusesAnotherGeneration) {
  std::string plain = dir_.path() + "/plain";
  WriteHistory(plain, kLast, "DROP TABLE record_history;");
  InfofileReadOptions ro;
  ro.generation = kLast;
  ro.as_of = 3;
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(plain, 9, "A", ro, &out);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("keeps no history")) << s.ToString();
  ro.as_of = kLast;  // AS_OF = generation: today's read
  EXPECT_TRUE(ReadCommittedCopies(plain, 9, "A", ro, &out).ok());
  EXPECT_EQ(Read(plain, "A", kLast), Read(plain, "A", kLast, kLast));
}

TEST_F(InfofileHistoryTest, AsOfZeroIsTheFileBeforeItsFirstCommit) {
  for (const char* p : kPeers) EXPECT_EQ(Keys{}, Read(path_, p, kLast, 0)) << p;
  for (const char* p : kPeers) EXPECT_EQ(Keys{}, Read(path_, p, 0, 0)) << p;
}

// The scrubber's read: every current copy, plus the copies of past versions
// that a snapshot refers to (as held when they stopped being current), plus
// those superseded since its cutoff.
Keys ScrubRead(const std::string& path, const std::string& peer, double superseded_since) {
  InfofileReadOptions ro;
  ro.superseded_since = superseded_since;
  ro.snapshot_retained = true;
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(path, 9, peer, ro, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::set<std::tuple<std::string, std::string, int>> unique;
  for (auto& c : out) unique.emplace(c.name, c.key(), c.copy_rank);
  return Keys(unique.begin(), unique.end());
}

TEST_F(InfofileHistoryTest, TheScrubberKeepsWhatASnapshotRefersTo) {
  // No snapshot, cutoff after every change: current copies only.
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}), ScrubRead(path_, "A", 1000));
  EXPECT_EQ(Keys{}, ScrubRead(path_, "B", 1000));
  // A snapshot at 2: b's version 0 (A@0, B@1: as held when replaced at 3)
  // and d (B@0, C@1: when deleted at 4). Not a's old holder B: a snapshot
  // reads a current version from its current holders.
  test::ExecSql(path_, "INSERT INTO snapshots VALUES('s2', 2, 0, '');");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}),
            ScrubRead(path_, "A", 1000));
  EXPECT_EQ((Keys{{"b", "b", 1}, {"d", "d", 0}}), ScrubRead(path_, "B", 1000));
  // A snapshot at 3 holds d (current from 1 to 3) and b's version 1 (from
  // 3), not its version 0 (replaced at 3).
  test::ExecSql(path_, "DELETE FROM snapshots; INSERT INTO snapshots VALUES('s3', 3, 0, '');");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v1/b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}),
            ScrubRead(path_, "A", 1000));
  EXPECT_EQ((Keys{{"d", "d", 0}}), ScrubRead(path_, "B", 1000));
  // A snapshot at 5 holds version 1 as held when it was replaced at 7 (A@0,
  // C@1), not B's copy, moved away at 6.
  test::ExecSql(path_, "DELETE FROM snapshots; INSERT INTO snapshots VALUES('s5', 5, 0, '');");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v1/b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}),
            ScrubRead(path_, "A", 1000));
  EXPECT_EQ(Keys{}, ScrubRead(path_, "B", 1000));
  // Within the scrub age the moved copy is kept too (readers planned before 6).
  EXPECT_EQ((Keys{{"b", "v1/b", 0}}), ScrubRead(path_, "B", 600));
  // The snapshot gone: only the current copies again.
  test::ExecSql(path_, "DELETE FROM snapshots;");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}), ScrubRead(path_, "A", 1000));
}

}  // namespace
}  // namespace st
