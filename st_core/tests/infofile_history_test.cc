// ReadCommittedCopies on infofiles with history (format 4's tables,
// docs/snapshots.md): the records of generation G = as_of with their copies
// as held at N = the ring's generation, exactly once across the peers, and
// the same answer however much later it is read. Every case runs on the
// ways a tracker keeps a past version's copies: in retained_copies, moved
// like copies (kRetained); in files made before that table, in
// copy_history with until = the generation that ended the version
// (kCopyHistory); and in a file that had the latter until the tracker
// added the table (kMigrated).
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

const char* const kPeers[] = {"A", "B", "C", "D", "E"};

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

// What the ring of every peer reveals (paper 3.7, every peer holding every
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
    EXPECT_TRUE(Reveal(segments, me, &revealed, &v))
        << DescribeViolation(v, {"A", "B", "C", "D", "E"});
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

// Where a past version's copies are kept (the tracker's choice): in
// retained_copies; in copy_history (files of the tracker before that
// table); or in copy_history until generation 7, when the tracker adds
// retained_copies and moves them there (kMigrate), then in retained_copies.
enum class Style { kCopyHistory, kRetained, kMigrated };

std::string StyleName(const ::testing::TestParamInfo<Style>& info) {
  switch (info.param) {
    case Style::kCopyHistory:
      return "CopyHistory";
    case Style::kRetained:
      return "RetainedCopies";
    case Style::kMigrated:
      return "Migrated";
  }
  return "";
}

// What a tracker must do when it adds retained_copies to a file that kept
// past versions' copies in copy_history, in the same transaction: move each
// past version's last holders (its rows ending at its until) there.
// Leaving them in copy_history would lose them at N >= until; copying them
// would reveal them twice at N < until.
constexpr char kMigrate[] =
    "INSERT INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
    "SELECT h.name, h.until, h.copy_rank, h.peer_idx, h.since, h.stored_as "
    "FROM copy_history h JOIN record_history v ON v.name = h.name AND v.until = h.until "
    "AND coalesce(v.stored_as, v.name) = coalesce(h.stored_as, h.name);"
    "DELETE FROM copy_history WHERE EXISTS (SELECT 1 FROM record_history v "
    "WHERE v.name = copy_history.name AND v.until = copy_history.until "
    "AND coalesce(v.stored_as, v.name) = coalesce(copy_history.stored_as, copy_history.name));";

// The file's history, one change a generation (peers A = 0, B = 1, C = 2,
// D = 3, E = 4; every record x2; until_at = 100 * generation):
//   1  a@0 A, a@1 B; b@0 A, b@1 B; d@0 B, d@1 C (WriteInfofile)
//   2  c appended: c@0 C, c@1 A
//   3  b replaced by version 1 ("v1/b"): @0 B, @1 C
//   4  d deleted
//   5  a@1 moved from B to C
//   6  b's version 1 @0 moved from B to A
//   7  b replaced by version 2 ("v2/b"): @0 C, @1 A
// and with retained_copies (a past version's copies are moved like any):
//   8  b's version 0 @1 (retained) moved from B to C
//   9  ... and again, from C to D
//  10  d put again, stored under its name as its deleted version: @0 A, @1 D
//  11  in one move, the deleted d's @1 from C to E and the new d's @1 from
//      D to C (a peer may keep a copy of each version of a name)
//  12  the deleted d's @1 moved again, from E to D
// Each step is the tracker's transaction (docs/snapshots.md, "The model").
std::string ToHistory(const std::string& name, int gen, Style style) {
  std::string g = std::to_string(gen);
  std::string sql =
      "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
      "committed_at, schema_id, logical_size, until, until_at) SELECT name, version, "
      "stored_as, size, crc32c, commit_seq, committed_at, schema_id, logical_size, " +
      g + ", " + g + "00 FROM records WHERE name = '" + name + "';";
  if (style == Style::kRetained) {
    sql += "INSERT INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
           "SELECT c.name, " +
           g + ", c.copy_rank, c.peer_idx, c.since, r.stored_as FROM copies c JOIN records r " +
           "USING(name) WHERE name = '" + name + "';";
  } else {
    sql += "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
           "SELECT c.name, c.copy_rank, c.peer_idx, c.since, " +
           g + ", r.stored_as, " + g +
           "00 FROM copies c JOIN records r USING(name) WHERE name = '" + name + "';";
  }
  return sql + "DELETE FROM copies WHERE name = '" + name + "';";
}

// A move at `gen` of a current copy (the tracker's MoveCopies).
std::string MoveCurrent(const std::string& name, int rank, int to, int gen) {
  std::string g = std::to_string(gen), r = std::to_string(rank);
  return "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
         "SELECT c.name, c.copy_rank, c.peer_idx, c.since, " +
         g + ", r.stored_as, " + g +
         "00 FROM copies c JOIN records r USING(name) WHERE c.name = '" + name +
         "' AND c.copy_rank = " + r + ";" + "UPDATE copies SET peer_idx = " + std::to_string(to) +
         ", since = " + g + " WHERE name = '" + name + "' AND copy_rank = " + r + ";";
}

// A move at `gen` of a retained copy of the version of `name` that ended at
// `until`: the old holder's row in copy_history, tagged with that until.
std::string MoveRetained(const std::string& name, int until, int rank, int to, int gen) {
  std::string g = std::to_string(gen), r = std::to_string(rank), u = std::to_string(until);
  std::string which =
      " WHERE name = '" + name + "' AND until = " + u + " AND copy_rank = " + r + ";";
  return "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at, "
         "retained_until) SELECT name, copy_rank, peer_idx, since, " +
         g + ", stored_as, " + g + "00, until FROM retained_copies" + which +
         "UPDATE retained_copies SET peer_idx = " + std::to_string(to) + ", since = " + g + which;
}

std::string SetGeneration(int gen) {
  return "UPDATE meta SET value = " + std::to_string(gen) + " WHERE key = 'generation';";
}

std::string Step(int gen, Style style) {
  if (style == Style::kMigrated) style = gen <= 7 ? Style::kCopyHistory : Style::kRetained;
  switch (gen) {
    case 2:
      return "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) "
             "VALUES('c', 1, 0, 2, 0);"
             "INSERT INTO copies VALUES('c', 0, 2, 2), ('c', 1, 0, 2);";
    case 3:
      // One row of version 0 names it by its name, one leaves it NULL.
      return ToHistory("b", 3, style) +
             (style == Style::kRetained
                  ? "UPDATE retained_copies SET stored_as = 'b' WHERE name = 'b' AND copy_rank = 0;"
                  : "UPDATE copy_history SET stored_as = 'b' WHERE name = 'b' AND copy_rank = 0;") +
             "INSERT INTO copies VALUES('b', 0, 1, 3), ('b', 1, 2, 3);"
             "UPDATE records SET version = 1, stored_as = 'v1/b', commit_seq = 3 "
             "WHERE name = 'b';";
    case 4:
      return ToHistory("d", 4, style) + "DELETE FROM records WHERE name = 'd';";
    case 5:
      return MoveCurrent("a", 1, 2, 5);
    case 6:
      return MoveCurrent("b", 0, 0, 6);
    case 7:
      return ToHistory("b", 7, style) +
             "INSERT INTO copies VALUES('b', 0, 2, 7), ('b', 1, 0, 7);"
             "UPDATE records SET version = 2, stored_as = 'v2/b', commit_seq = 7 "
             "WHERE name = 'b';";
    case 8:
      return MoveRetained("b", 3, 1, 2, 8);
    case 9:
      return MoveRetained("b", 3, 1, 3, 9);
    case 10:
      return "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) "
             "VALUES('d', 1, 0, 10, 0);"
             "INSERT INTO copies VALUES('d', 0, 0, 10), ('d', 1, 3, 10);";
    case 11:
      return MoveRetained("d", 4, 1, 4, 11) + MoveCurrent("d", 1, 2, 11);
    case 12:
      return MoveRetained("d", 4, 1, 3, 12);
  }
  return "";
}

// The last generation of the history each style can write (a file without
// retained_copies cannot move a past version's copies).
int LastOf(Style style) { return style == Style::kCopyHistory ? 7 : 12; }

// The file after generations 1 .. last.
void WriteHistory(const std::string& path, int last, Style style,
                  const std::string& more_sql = "") {
  std::string sql = style == Style::kCopyHistory ? "DROP TABLE retained_copies;" : "";
  for (int gen = 2; gen <= last; ++gen) {
    sql += Step(gen, style) + SetGeneration(gen);
    if (style == Style::kMigrated && gen == std::min(last, 7)) sql += kMigrate;
  }
  test::WriteInfofile(
      path, 9, {{"A", "h:1"}, {"B", "h:2"}, {"C", "h:3"}, {"D", "h:4"}, {"E", "h:5"}},
      {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 0}, {"b", 1, 1}, {"d", 0, 1}, {"d", 1, 2}},
      "storetorrent-infofile", sql + more_sql);
}

// The model of that history: each version, the generations it is current
// in, and each copy's holders (peer, from, to) over time.
constexpr int kForever = 1 << 30;
struct Holding {
  std::string peer;
  int since, until;
};
struct Version {
  std::string name, stored;
  int commit, until;
  std::vector<Holding> ranks[2];
};
const std::vector<Version>& Model() {
  static const std::vector<Version> model = {
      {"a", "a", 1, kForever, {{{"A", 1, kForever}}, {{"B", 1, 5}, {"C", 5, kForever}}}},
      {"b", "b", 1, 3, {{{"A", 1, kForever}}, {{"B", 1, 8}, {"C", 8, 9}, {"D", 9, kForever}}}},
      {"b", "v1/b", 3, 7, {{{"B", 3, 6}, {"A", 6, kForever}}, {{"C", 3, kForever}}}},
      {"b", "v2/b", 7, kForever, {{{"C", 7, kForever}}, {{"A", 7, kForever}}}},
      {"c", "c", 2, kForever, {{{"C", 2, kForever}}, {{"A", 2, kForever}}}},
      {"d", "d", 1, 4, {{{"B", 1, kForever}}, {{"C", 1, 11}, {"E", 11, 12}, {"D", 12, kForever}}}},
      {"d", "d", 10, kForever, {{{"A", 10, kForever}}, {{"D", 10, 11}, {"C", 11, kForever}}}},
  };
  return model;
}

// What the model says `peer` holds of generation g's records at n.
Keys Expected(const std::string& peer, int n, int g) {
  Keys v;
  for (const Version& ver : Model()) {
    if (ver.commit > g || ver.until <= g) continue;
    for (int rank = 0; rank < 2; ++rank) {
      for (const Holding& h : ver.ranks[rank]) {
        if (h.peer == peer && h.since <= n && n < h.until)
          v.emplace_back(ver.name, ver.stored, rank);
      }
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

class InfofileHistoryTest : public ::testing::TestWithParam<Style> {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/f";
    WriteHistory(path_, kLast, GetParam());
  }
  static constexpr int kLast = 7;  // the cases below read the file at 7
  test::TempDir dir_;
  std::string path_;
};

INSTANTIATE_TEST_SUITE_P(Styles, InfofileHistoryTest,
                         ::testing::Values(Style::kCopyHistory, Style::kRetained, Style::kMigrated),
                         StyleName);

TEST_P(InfofileHistoryTest, ARecordAppendedAfterAsOfIsNotRevealed) {
  for (const char* p : kPeers) {
    for (const auto& [name, key, rank] : Read(path_, p, kLast, 1)) EXPECT_NE("c", name) << p;
  }
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"c", "c", 1}}), Read(path_, "A", kLast, 2));
  EXPECT_EQ(1u, RingReveal(path_, kLast, 2).count("c"));
  EXPECT_EQ(0u, RingReveal(path_, kLast, 1).count("c"));
}

TEST_P(InfofileHistoryTest, ARecordReplacedAfterAsOfIsRevealedAtItsOldStoredName) {
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

TEST_P(InfofileHistoryTest, ARecordDeletedAfterAsOfIsRevealed) {
  for (int g = 1; g <= 3; ++g) {
    auto ring = RingReveal(path_, kLast, g);
    EXPECT_EQ(std::make_tuple(std::string("B"), std::string("d"), 0), ring["d"]) << g;
  }
  for (int g = 4; g <= kLast; ++g) EXPECT_EQ(0u, RingReveal(path_, kLast, g).count("d")) << g;
}

TEST_P(InfofileHistoryTest, ACurrentVersionMovedIsRevealedByItsHolderAtTheGeneration) {
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
// delete, a move of a current or a retained copy, an append, a name put
// again), on every peer; each peer holds what the model says, so each copy
// of each record of G is revealed by exactly one peer, at the version it
// had at G; and the ring reveals each record once.
TEST_P(InfofileHistoryTest, APlanReadsTheSameSetWhateverChangedSince) {
  const int last = LastOf(GetParam());
  std::vector<std::string> at(last + 1);  // at[k]: the file after generation k
  for (int k = 1; k <= last; ++k) {
    at[k] = dir_.path() + "/at" + std::to_string(k);
    WriteHistory(at[k], k, GetParam());
  }
  for (int n = 1; n <= last; ++n) {
    for (int g = 0; g <= n; ++g) {
      SCOPED_TRACE("as of " + std::to_string(g) + ", planned at " + std::to_string(n));
      std::map<std::pair<std::string, int>, int> holders;  // (name, rank) -> peers
      for (const char* p : kPeers) {
        Keys expected = Expected(p, n, g);
        // read when planned (k = n) and after every later change
        for (int k = n; k <= last; ++k)
          EXPECT_EQ(expected, Read(at[k], p, n, g)) << p << " at " << k;
        for (const auto& [name, key, rank] : expected) ++holders[{name, rank}];
      }
      for (const auto& [copy, count] : holders) {
        EXPECT_EQ(1, count) << copy.first << "@" << copy.second;
      }
      std::map<std::string, std::string> revealed, versions;
      for (const auto& [name, where] : RingReveal(at[last], n, g)) {
        revealed[name] = std::get<1>(where);
      }
      for (const Version& v : Model()) {
        if (v.commit <= g && g < v.until) versions[v.name] = v.stored;
      }
      EXPECT_EQ(versions, revealed);
    }
  }
  // The latest state: the current versions from their current holders.
  for (const char* p : kPeers) EXPECT_EQ(Expected(p, last, last), Read(at[last], p, 0));
}

// Without as_of (G = N) a file with history answers as one without it would
// (the query of docs/infofile.md, "Snapshots"), plus the records deleted
// after N, which that query loses.
TEST_P(InfofileHistoryTest, WithoutAsOfNothingChangesButDeletesAreKept) {
  std::string plain = dir_.path() + "/plain";
  WriteHistory(plain, kLast, Style::kCopyHistory,
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
      if (n < 4 && (std::string(p) == "B" || std::string(p) == "C")) {
        EXPECT_EQ(1u, lost.size()) << p << " at " << n;
      }
    }
  }
  // The latest state (generation 0) has no history either way.
  for (const char* p : kPeers) EXPECT_EQ(Read(plain, p, 0), Read(path_, p, 0)) << p;
}

// The index copy_history_by_peer_until only speeds the read up: a file
// without it (made before it existed) answers every read the same.
TEST_P(InfofileHistoryTest, TheHistoryIndexChangesNoAnswer) {
  const int last = LastOf(GetParam());
  std::string indexed = dir_.path() + "/indexed", unindexed = dir_.path() + "/unindexed";
  WriteHistory(indexed, last, GetParam());
  WriteHistory(unindexed, last, GetParam(), "DROP INDEX copy_history_by_peer_until;");
  for (int n = 0; n <= last; ++n) {
    for (int g = -1; g <= (n == 0 ? last : n); ++g) {
      for (const char* p : kPeers) {
        EXPECT_EQ(Read(indexed, p, n, g), Read(unindexed, p, n, g))
            << p << " as of " << g << " planned at " << n;
      }
    }
  }
}

TEST_P(InfofileHistoryTest, AsOfZeroIsTheFileBeforeItsFirstCommit) {
  for (const char* p : kPeers) EXPECT_EQ(Keys{}, Read(path_, p, kLast, 0)) << p;
  for (const char* p : kPeers) EXPECT_EQ(Keys{}, Read(path_, p, 0, 0)) << p;
}

TEST(InfofileHistory, AFileWithoutHistoryRefusesAnotherGeneration) {
  test::TempDir dir;
  std::string plain = dir.path() + "/plain";
  WriteHistory(plain, 7, Style::kCopyHistory, "DROP TABLE record_history;");
  InfofileReadOptions ro;
  ro.generation = 7;
  ro.as_of = 3;
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(plain, 9, "A", ro, &out);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("keeps no history")) << s.ToString();
  ro.as_of = 7;  // AS_OF = generation: today's read
  EXPECT_TRUE(ReadCommittedCopies(plain, 9, "A", ro, &out).ok());
  EXPECT_EQ(Read(plain, "A", 7), Read(plain, "A", 7, 7));
}

// A retained copy moved twice after its version ended has a copy_history
// row that starts after that end, as a later version's rows do: only the
// tag says whose it is. A file with retained_copies and no tag is refused.
TEST(InfofileHistory, RetainedCopiesWithoutTheirMovesTagAreRefused) {
  test::TempDir dir;
  std::string path = dir.path() + "/f";
  WriteHistory(path, 4, Style::kRetained, "ALTER TABLE copy_history DROP COLUMN retained_until;");
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(path, 9, "A", &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("retained_until")) << s.ToString();
}

// A past version's retained copy moved after the snapshot: revealed by its
// holder at the plan's generation, old or new, exactly once.
TEST(InfofileHistory, ARetainedCopyMovedIsRevealedByItsHolderAtThePlan) {
  test::TempDir dir;
  std::string path = dir.path() + "/f";
  WriteHistory(path, 12, Style::kRetained);
  // b's version 0 (replaced at 3): @1 on B until 8, on C from 8, on D from 9.
  const std::tuple<int, const char*> holders[] = {{7, "B"}, {8, "C"}, {9, "D"}, {12, "D"}};
  for (const auto& [n, holder] : holders) {
    for (int g : {1, 2}) {
      for (const char* p : kPeers) {
        Keys keys = Read(path, p, n, g);
        bool has = std::find(keys.begin(), keys.end(), std::make_tuple("b", "b", 1)) != keys.end();
        EXPECT_EQ(std::string(p) == holder, has) << p << " as of " << g << " planned at " << n;
      }
      // rank 0 stays on A, which the ring reveals
      auto ring = RingReveal(path, n, g);
      EXPECT_EQ(std::make_tuple(std::string("A"), std::string("b"), 0), ring["b"]);
    }
  }
}

// d deleted at 4 and put again at 10 under the same stored name: the rows
// of one version are never read as the other's, whichever moved when.
TEST(InfofileHistory, ANamePutAgainIsNeverReadAsItsDeletedVersion) {
  test::TempDir dir;
  std::string path = dir.path() + "/f";
  WriteHistory(path, 12, Style::kRetained);
  for (int n = 10; n <= 12; ++n) {
    for (int g = 1; g <= n; ++g) {
      std::map<int, std::string> rank_holder;
      for (const char* p : kPeers) {
        for (const auto& [name, key, rank] : Read(path, p, n, g)) {
          if (name != "d") continue;
          EXPECT_EQ(0u, rank_holder.count(rank)) << "d@" << rank << " twice, as of " << g;
          rank_holder[rank] = p;
        }
      }
      std::map<int, std::string> expected;
      if (g < 4) {  // the deleted version: @0 on B, @1 on C, E, D
        expected = {{0, "B"}, {1, n == 10 ? "C" : n == 11 ? "E" : "D"}};
      } else if (g >= 10) {  // the new one: @0 on A, @1 on D then C
        expected = {{0, "A"}, {1, n == 10 ? "D" : "C"}};
      }
      EXPECT_EQ(expected, rank_holder) << "as of " << g << " planned at " << n;
    }
  }
}

// The scrubber's read: every current copy, plus what is kept of past
// versions, plus the copies superseded or moved away since its cutoff.
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

// Without retained_copies the scrubber keeps the copies of past versions a
// snapshot refers to, as held when they stopped being current.
TEST(InfofileHistory, TheScrubberKeepsWhatASnapshotRefersTo) {
  test::TempDir dir;
  std::string path = dir.path() + "/f";
  WriteHistory(path, 7, Style::kCopyHistory);
  // No snapshot, cutoff after every change: current copies only.
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}), ScrubRead(path, "A", 1000));
  EXPECT_EQ(Keys{}, ScrubRead(path, "B", 1000));
  // A snapshot at 2: b's version 0 (A@0, B@1: as held when replaced at 3)
  // and d (B@0, C@1: when deleted at 4). Not a's old holder B: a snapshot
  // reads a current version from its current holders.
  test::ExecSql(path, "INSERT INTO snapshots VALUES('s2', 2, 0, '');");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}),
            ScrubRead(path, "A", 1000));
  EXPECT_EQ((Keys{{"b", "b", 1}, {"d", "d", 0}}), ScrubRead(path, "B", 1000));
  // A snapshot at 3 holds d (current from 1 to 3) and b's version 1 (from
  // 3), not its version 0 (replaced at 3).
  test::ExecSql(path, "DELETE FROM snapshots; INSERT INTO snapshots VALUES('s3', 3, 0, '');");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v1/b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}),
            ScrubRead(path, "A", 1000));
  EXPECT_EQ((Keys{{"d", "d", 0}}), ScrubRead(path, "B", 1000));
  // A snapshot at 5 holds version 1 as held when it was replaced at 7 (A@0,
  // C@1), not B's copy, moved away at 6.
  test::ExecSql(path, "DELETE FROM snapshots; INSERT INTO snapshots VALUES('s5', 5, 0, '');");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v1/b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}),
            ScrubRead(path, "A", 1000));
  EXPECT_EQ(Keys{}, ScrubRead(path, "B", 1000));
  // Within the scrub age the moved copy is kept too (readers planned before 6).
  EXPECT_EQ((Keys{{"b", "v1/b", 0}}), ScrubRead(path, "B", 600));
  // The snapshot gone: only the current copies again.
  test::ExecSql(path, "DELETE FROM snapshots;");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v2/b", 1}, {"c", "c", 1}}), ScrubRead(path, "A", 1000));
}

// With retained_copies the scrubber keeps every retained copy of the peer
// (the tracker drops the rows once no snapshot holds the version and
// --history-age has passed), snapshot or not, and a copy moved away (of a
// current or a retained version) within the scrub age; once the rows are
// gone, so are the copies.
TEST(InfofileHistory, TheScrubberKeepsRetainedCopiesUntilTheirRowsAreGone) {
  test::TempDir dir;
  std::string path = dir.path() + "/f";
  WriteHistory(path, 12, Style::kRetained);
  // A: a@0, b v2@1, c@1, d (new)@0 current; b v0@0 and b v1@0 retained.
  const Keys a_now{{"a", "a", 0}, {"b", "v2/b", 1}, {"c", "c", 1}, {"d", "d", 0}};
  const Keys a_kept{{"a", "a", 0},    {"b", "b", 0}, {"b", "v1/b", 0},
                    {"b", "v2/b", 1}, {"c", "c", 1}, {"d", "d", 0}};
  EXPECT_EQ(a_kept, ScrubRead(path, "A", 2000));
  // B: the deleted d@0 (retained); b v0@1 moved away at 8, v1@0 at 6.
  EXPECT_EQ((Keys{{"d", "d", 0}}), ScrubRead(path, "B", 2000));
  EXPECT_EQ((Keys{{"b", "b", 1}, {"d", "d", 0}}), ScrubRead(path, "B", 800));
  EXPECT_EQ((Keys{{"b", "b", 1}, {"b", "v1/b", 0}, {"d", "d", 0}}), ScrubRead(path, "B", 600));
  // D: b v0@1 and the deleted d@1 (both retained); E: the deleted d@1,
  // moved away at 12, within the scrub age only.
  EXPECT_EQ((Keys{{"b", "b", 1}, {"d", "d", 1}}), ScrubRead(path, "D", 2000));
  EXPECT_EQ(Keys{}, ScrubRead(path, "E", 2000));
  EXPECT_EQ((Keys{{"d", "d", 1}}), ScrubRead(path, "E", 1200));
  // A snapshot changes nothing: the rows say what is kept.
  test::ExecSql(path, "INSERT INTO snapshots VALUES('s5', 5, 0, '');");
  EXPECT_EQ(a_kept, ScrubRead(path, "A", 2000));
  // The tracker prunes b's version 0 (its record_history row and retained
  // rows together), then everything: what is left is the current copies.
  test::ExecSql(path, "DELETE FROM record_history WHERE name = 'b' AND until = 3;"
                      "DELETE FROM retained_copies WHERE name = 'b' AND until = 3;");
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "v1/b", 0}, {"b", "v2/b", 1}, {"c", "c", 1}, {"d", "d", 0}}),
            ScrubRead(path, "A", 2000));
  EXPECT_EQ((Keys{{"d", "d", 1}}), ScrubRead(path, "D", 2000));
  test::ExecSql(path, "DELETE FROM record_history; DELETE FROM retained_copies;");
  EXPECT_EQ(a_now, ScrubRead(path, "A", 2000));
  EXPECT_EQ(Keys{}, ScrubRead(path, "B", 2000));
  EXPECT_EQ(Keys{}, ScrubRead(path, "D", 2000));
}

}  // namespace
}  // namespace st
