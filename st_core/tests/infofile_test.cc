// ReadCommittedCopies on real SQLite infofiles: the latest state and the
// snapshot at a generation (docs/infofile.md, "Snapshots").
#include "infofile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "infofile_util.h"
#include "test_util.h"

namespace st {
namespace {

std::vector<std::pair<std::string, int>> Read(const std::string& path, uint64_t file_id,
                                              const std::string& peer, uint64_t generation) {
  InfofileReadOptions ro;
  ro.generation = generation;
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(path, file_id, peer, ro, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<std::pair<std::string, int>> v;
  for (auto& c : out) v.emplace_back(c.name, c.copy_rank);
  std::sort(v.begin(), v.end());
  return v;
}

using Copies = std::vector<std::pair<std::string, int>>;

class InfofileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/f";
    // Generation 1: a@0 and a@1 on A and B, b@0 on A. Generation 2: c
    // committed (B rank 0, A rank 1). Generation 3: rebalance moved a@1 from
    // B to C.
    test::WriteInfofile(
        path_, 9, {{"A", "h:1"}, {"B", "h:2"}, {"C", "h:3"}},
        {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 0}}, "storetorrent-infofile",
        "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) VALUES('c',1,0,2,0);"
        "INSERT INTO copies VALUES('c',0,1,2),('c',1,0,2);"
        "UPDATE copies SET peer_idx=2, since=3 WHERE name='a' AND copy_rank=1;"
        "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until) VALUES('a',1,1,1,3);"
        "UPDATE meta SET value=3 WHERE key='generation';");
  }
  test::TempDir dir_;
  std::string path_;
};

TEST_F(InfofileTest, LatestStateHasNoHistory) {
  EXPECT_EQ((Copies{{"a", 0}, {"b", 0}, {"c", 1}}), Read(path_, 9, "A", 0));
  EXPECT_EQ((Copies{{"c", 0}}), Read(path_, 9, "B", 0));
  EXPECT_EQ((Copies{{"a", 1}}), Read(path_, 9, "C", 0));
}

TEST_F(InfofileTest, SnapshotLeavesOutLaterCommits) {
  EXPECT_EQ((Copies{{"a", 0}, {"b", 0}}), Read(path_, 9, "A", 1));
  EXPECT_EQ((Copies{{"a", 1}}), Read(path_, 9, "B", 1));  // before the move
  EXPECT_EQ((Copies{}), Read(path_, 9, "C", 1));
}

TEST_F(InfofileTest, SnapshotSeesAMoveFromItsGeneration) {
  EXPECT_EQ((Copies{{"a", 1}, {"c", 0}}), Read(path_, 9, "B", 2));
  EXPECT_EQ((Copies{}), Read(path_, 9, "C", 2));
  EXPECT_EQ((Copies{{"c", 0}}), Read(path_, 9, "B", 3));
  EXPECT_EQ((Copies{{"a", 1}}), Read(path_, 9, "C", 3));
  // Every record is held exactly once per copy rank at every generation.
  for (uint64_t g = 1; g <= 3; ++g) {
    size_t n = 0;
    for (const char* p : {"A", "B", "C"}) n += Read(path_, 9, p, g).size();
    EXPECT_EQ(g == 1 ? 3u : 5u, n) << "generation " << g;
  }
}

// (name, stored name, rank) of what peer `peer` holds at `generation`.
std::vector<std::tuple<std::string, std::string, int>> ReadKeys(const std::string& path,
                                                                const std::string& peer,
                                                                uint64_t generation,
                                                                double superseded_since = 0) {
  InfofileReadOptions ro;
  ro.generation = generation;
  ro.superseded_since = superseded_since;
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(path, 9, peer, ro, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<std::tuple<std::string, std::string, int>> v;
  for (auto& c : out) v.emplace_back(c.name, c.key(), c.copy_rank);
  std::sort(v.begin(), v.end());
  return v;
}

// Generation 4 replaces record b (version 0 on A at rank 0) by version 1,
// stored as "v1/b" on B, at unix time 1000 (docs/infofile.md, "Versions"),
// keeping version 0's row in record_history as the tracker does
// (docs/snapshots.md; a file without that table has no such row).
void ReplaceB(const std::string& path, bool history = true) {
  test::ExecSql(path,
                std::string(history ? "INSERT INTO record_history(name, version, stored_as, size, "
                                      "crc32c, commit_seq, committed_at, until, until_at) SELECT "
                                      "name, version, stored_as, size, crc32c, commit_seq, "
                                      "committed_at, 4, 1000 FROM records WHERE name='b';"
                                    : "") +
                    "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, "
                    "until_at) VALUES('b',0,0,1,4,'b',1000);"
                    "DELETE FROM copies WHERE name='b';"
                    "INSERT INTO copies VALUES('b',0,1,4);"
                    "UPDATE records SET version=1, stored_as='v1/b', commit_seq=4 WHERE name='b';"
                    "UPDATE meta SET value=4 WHERE key='generation';");
}

using Keys = std::vector<std::tuple<std::string, std::string, int>>;

TEST_F(InfofileTest, AReplacedRecordIsReadUnderItsVersionsName) {
  // A file of the tracker before retained_copies: the old version's copies
  // in copy_history (files with that table: infofile_history_test).
  test::ExecSql(path_, "DROP TABLE retained_copies;");
  ReplaceB(path_);
  // The latest state: the new version on B, nothing of b on A.
  EXPECT_EQ((Keys{{"b", "v1/b", 0}, {"c", "c", 0}}), ReadKeys(path_, "B", 0));
  EXPECT_EQ((Keys{{"a", "a", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 0));
  // A snapshot before the replacement: the old version, under its own name.
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 3));
  EXPECT_EQ((Keys{{"c", "c", 0}}), ReadKeys(path_, "B", 3));
  // The scrubber keeps a version superseded since its cutoff, not before.
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 0, 999));
  EXPECT_EQ((Keys{{"a", "a", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 0, 1001));
}

// The same without the history tables (a format 2 or 3 file the tracker
// has not given them): the query of that format, unchanged.
TEST_F(InfofileTest, AReplacedRecordIsReadUnderItsVersionsNameWithoutHistory) {
  test::ExecSql(path_,
                "DROP TABLE record_history; DROP TABLE object_history; DROP TABLE snapshots;");
  ReplaceB(path_, /*history=*/false);
  EXPECT_EQ((Keys{{"b", "v1/b", 0}, {"c", "c", 0}}), ReadKeys(path_, "B", 0));
  EXPECT_EQ((Keys{{"a", "a", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 0));
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 3));
  EXPECT_EQ((Keys{{"c", "c", 0}}), ReadKeys(path_, "B", 3));
  EXPECT_EQ((Keys{{"a", "a", 0}, {"b", "b", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 0, 999));
  EXPECT_EQ((Keys{{"a", "a", 0}, {"c", "c", 1}}), ReadKeys(path_, "A", 0, 1001));
}

TEST(InfofileBeforeVersions, IsReadWithoutStoredNames) {
  test::TempDir dir;
  std::string path = dir.path() + "/old";
  // The tables of format 2 as they were before versions existed.
  test::ExecSql(path,
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
                "CREATE TABLE peers(peer_idx INTEGER PRIMARY KEY, peer_id TEXT, addr TEXT);"
                "CREATE TABLE records(name TEXT PRIMARY KEY, size INTEGER, crc32c INTEGER,"
                " commit_seq INTEGER, committed_at REAL);"
                "CREATE TABLE copies(name TEXT, copy_rank INTEGER, peer_idx INTEGER, since INTEGER,"
                " PRIMARY KEY(name, copy_rank)) WITHOUT ROWID;"
                "CREATE TABLE copy_history(name TEXT, copy_rank INTEGER, peer_idx INTEGER,"
                " since INTEGER, until INTEGER);"
                "INSERT INTO meta VALUES('format','storetorrent-infofile'),('format_version',2),"
                "('file_id',9),('generation',1);"
                "INSERT INTO peers VALUES(0,'A','h:1');"
                "INSERT INTO records VALUES('a',1,0,1,0);"
                "INSERT INTO copies VALUES('a',0,0,1);");
  EXPECT_EQ((Keys{{"a", "a", 0}}), ReadKeys(path, "A", 0, 1));
}

TEST_F(InfofileTest, AFormatFromTheFutureIsRefused) {
  for (int version : {3, 4}) {  // 4: with snapshots (docs/snapshots.md)
    test::ExecSql(path_, "UPDATE meta SET value=" + std::to_string(version) +
                             " WHERE key='format_version';");
    EXPECT_EQ(4u, ReadKeys(path_, "A", 0).size() + ReadKeys(path_, "B", 0).size()) << version;
  }
  test::ExecSql(path_, "UPDATE meta SET value=5 WHERE key='format_version';");
  std::vector<CommittedCopy> out;
  Status s = ReadCommittedCopies(path_, 9, "A", &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("upgrade st-peer"));
}

TEST_F(InfofileTest, WrongFileIdIsCorruption) {
  std::vector<CommittedCopy> out;
  EXPECT_TRUE(ReadCommittedCopies(path_, 10, "A", &out).IsCorruption());
}

}  // namespace
}  // namespace st
