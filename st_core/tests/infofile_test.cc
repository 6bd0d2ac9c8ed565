// ReadCommittedCopies on real SQLite infofiles: the latest state and the
// snapshot at a generation (docs/infofile.md, "Snapshots").
#include "infofile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
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
    test::WriteInfofile(path_, 9, {{"A", "h:1"}, {"B", "h:2"}, {"C", "h:3"}},
                        {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 0}}, "storetorrent-infofile",
                        "INSERT INTO records VALUES('c',1,0,2,0);"
                        "INSERT INTO copies VALUES('c',0,1,2),('c',1,0,2);"
                        "UPDATE copies SET peer_idx=2, since=3 WHERE name='a' AND copy_rank=1;"
                        "INSERT INTO copy_history VALUES('a',1,1,1,3);"
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

TEST_F(InfofileTest, WrongFileIdIsCorruption) {
  std::vector<CommittedCopy> out;
  EXPECT_TRUE(ReadCommittedCopies(path_, 10, "A", &out).IsCorruption());
}

}  // namespace
}  // namespace st
