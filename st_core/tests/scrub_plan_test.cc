// The scrubber's inventory (MakeScrubPlan) on real directories and SQLite
// infofiles, and applying a plan through the record store.
#include "scrub_plan.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "crc32c.h"
#include "infofile_copy.h"
#include "infofile_util.h"
#include "record_store.h"
#include "test_util.h"

namespace st {
namespace {

constexpr double kAge = 3600;

void Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err)) << (err ? err : "");
}

// An infofile per docs/infofile.md committing (name, rank) to peer_idx 0
// (peer_id) or 1 (another peer).
void WriteInfofile(const std::string& path, uint64_t file_id, const std::string& peer_id,
                   const std::vector<std::tuple<std::string, int, int>>& copies,
                   const std::string& format = "storetorrent-infofile") {
  test::WriteInfofile(path, file_id, {{peer_id, "h:1"}, {"someone-else", "h:2"}}, copies, format);
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

void Backdate(const std::string& path, double seconds) {
  struct timeval tv[2];
  gettimeofday(&tv[0], nullptr);
  tv[0].tv_sec -= static_cast<time_t>(seconds);
  tv[1] = tv[0];
  ASSERT_EQ(0, utimes(path.c_str(), tv)) << path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The tracker's answers to FetchInfofile by file id (st_py/tracker/rpc/fetch_rpc.py): a
// snapshot of the infofile it holds, NOT_FOUND with or without "file-deleted", a refusal, or no
// answer at all.
class TrackerFetcher : public InfofileFetcher {
 public:
  Status Fetch(const std::string& name, uint64_t file_id, const CopyState&, uint64_t, double,
               FetchedInfofile* out) override {
    *out = FetchedInfofile();
    names.push_back(name);
    if (unreachable) {
      out->failure = FetchFailure::kUnreachable;
      return Status::Unavailable("connection refused (gRPC code 14)");
    }
    if (deleted.count(file_id) != 0) {
      out->failure = FetchFailure::kDeleted;
      return Status::NotFound("file id was deleted");
    }
    if (refused.count(file_id) != 0) {
      out->failure = FetchFailure::kRefused;
      return Status::Unavailable("not in the peerlist (gRPC code 7)");
    }
    auto it = infofiles.find(file_id);
    if (it == infofiles.end()) {
      out->failure = FetchFailure::kRefused;
      return Status::NotFound("this tracker knows no file of that id");
    }
    std::string bytes = ReadAll(it->second);
    out->kind = "snapshot";
    out->file_id = file_id;
    out->generation = 1;
    out->total_size = bytes.size();
    out->crc32c = crc32c::Value(bytes);
    out->data.push_back(std::move(bytes));
    return Status::OK();
  }
  std::string tracker() const override { return "127.0.0.1:9"; }

  bool unreachable = false;
  std::map<uint64_t, std::string> infofiles;  // file id -> the tracker's infofile
  std::set<uint64_t> deleted;                 // ids it deleted
  std::set<uint64_t> refused;                 // ids whose peerlist does not name the peer
  std::vector<std::string> names;             // the names asked for
};

class ScrubPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.data_dir = dir_.path() + "/data";
    ASSERT_TRUE(RecordStore::Open(so, &store_).ok());
    ns_ = dir_.path() + "/ns";
    ASSERT_EQ(0, mkdir(ns_.c_str(), 0755));
  }

  // PUTs a record and sets its mtime `age` seconds in the past.
  void Put(uint64_t file_id, const std::string& name, uint8_t rank, double age) {
    std::string data = "data of " + name;
    ASSERT_TRUE(store_->Put(file_id, rank, crc32c::Value(data), name, data, false).ok());
    if (age > 0) Backdate(Path(file_id, name), age);
  }

  std::string Path(uint64_t file_id, const std::string& name) {
    const RecordMeta* m = store_->Lookup(file_id, name);
    EXPECT_NE(nullptr, m) << name;
    return m == nullptr ? "" : store_->RecordPath(file_id, name, *m);
  }

  ScrubPlanOptions Options() {
    ScrubPlanOptions o;
    o.namespace_dir = ns_;
    o.data_dir = store_->data_dir();
    o.peer_id = store_->peer_id();
    o.age_s = kAge;
    o.busy_timeout_ms = 50;
    return o;
  }

  Status Plan(ScrubPlan* plan) { return MakeScrubPlan(Options(), nullptr, plan); }

  // "file_id/name" -> action of every planned removal.
  static std::map<std::string, ScrubAction> Removals(const ScrubPlan& plan) {
    std::map<std::string, ScrubAction> out;
    for (const auto& r : plan.removals) out[std::to_string(r.file_id) + "/" + r.name] = r.action;
    return out;
  }

  test::TempDir dir_;
  std::unique_ptr<RecordStore> store_;
  std::string ns_;
};

TEST_F(ScrubPlanTest, PlansUncommittedWrongRankAndDeletedFiles) {
  const double kOld = 2 * kAge;
  // File 1: an infofile under a subdirectory.
  Put(1, "committed-old", 0, kOld);
  Put(1, "committed-young", 1, 0);
  Put(1, "uncommitted-old", 0, kOld);
  Put(1, "uncommitted-young", 0, 0);
  Put(1, "wrong-rank-old", 0, kOld);
  Put(1, "other-peers-copy", 1, kOld);  // committed at rank 1, but to another peer
  std::string long_name(300, 'L');       // hashed encoding with a .name sidecar
  Put(1, long_name, 0, kOld);
  ASSERT_EQ(0, mkdir((ns_ + "/d").c_str(), 0755));
  WriteInfofile(ns_ + "/d/f1", 1, store_->peer_id(),
                {{"committed-old", 0, 0},
                 {"committed-young", 1, 0},
                 {"wrong-rank-old", 1, 0},
                 {"other-peers-copy", 1, 1},
                 {"never-written", 0, 0}});
  // File 2: no infofile (deleted); only a reserved .st- copy and a file of
  // another format claim its id.
  Put(2, "gone-old", 0, kOld);
  Put(2, "gone-young", 0, 0);
  WriteInfofile(ns_ + "/.st-creating-f2", 2, store_->peer_id(), {{"gone-old", 0, 0}});
  WriteInfofile(ns_ + "/d/other-format", 2, store_->peer_id(), {{"gone-old", 0, 0}},
                "something-else");
  // Things that are not infofiles are ignored.
  WriteText(ns_ + "/README", "not a database");
  WriteText(ns_ + "/empty", "");
  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open((ns_ + "/d/plain.db").c_str(), &db));
  Exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);");
  sqlite3_close(db);
  // Temporary files.
  WriteText(store_->data_dir() + "/tmp/1-1.tmp", "old");
  Backdate(store_->data_dir() + "/tmp/1-1.tmp", kOld);
  WriteText(store_->data_dir() + "/tmp/1-2.tmp", "young");

  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_EQ(2u, plan.files);
  EXPECT_EQ(9u, plan.records);
  EXPECT_EQ(1u, plan.infofiles);
  EXPECT_EQ(0u, plan.skipped);
  EXPECT_TRUE(plan.namespace_complete);
  std::map<std::string, ScrubAction> want{
      {"1/uncommitted-old", ScrubAction::kRemoveUncommitted},
      {"1/wrong-rank-old", ScrubAction::kRemoveWrongRank},
      {"1/other-peers-copy", ScrubAction::kRemoveUncommitted},
      {"1/" + long_name, ScrubAction::kRemoveUncommitted},
      {"2/gone-old", ScrubAction::kRemoveDeletedFile},
  };
  EXPECT_EQ(want, Removals(plan));
  EXPECT_EQ(std::vector<std::string>{"1-1.tmp"}, plan.tmp_files);
  EXPECT_GT(plan.cutoff, 0);
  EXPECT_DOUBLE_EQ(plan.now - kAge, plan.cutoff);
}

TEST_F(ScrubPlanTest, CopiesOfAnInfofileAreUnited) {
  // A backup copy with the same file id: a record committed in either stays.
  Put(5, "a", 0, 2 * kAge);
  Put(5, "b", 0, 2 * kAge);
  Put(5, "c", 0, 2 * kAge);
  WriteInfofile(ns_ + "/f", 5, store_->peer_id(), {{"a", 0, 0}});
  WriteInfofile(ns_ + "/f.bak", 5, store_->peer_id(), {{"b", 0, 0}});
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_EQ(2u, plan.infofiles);
  EXPECT_EQ((std::map<std::string, ScrubAction>{{"5/c", ScrubAction::kRemoveUncommitted}}),
            Removals(plan));
}

TEST_F(ScrubPlanTest, LockedInfofileRemovesNothing) {
  Put(1, "uncommitted", 0, 2 * kAge);
  Put(2, "deleted", 0, 2 * kAge);
  WriteInfofile(ns_ + "/f1", 1, store_->peer_id(), {});
  WriteInfofile(ns_ + "/f3", 3, store_->peer_id(), {});
  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open((ns_ + "/f1").c_str(), &db));
  Exec(db, "PRAGMA journal_mode=DELETE; BEGIN EXCLUSIVE; INSERT INTO meta VALUES('x', 1);");
  // f1 cannot even be identified: its file id is unknown, and no file id may
  // be taken for deleted (file 2's infofile might be the locked one).
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_FALSE(plan.namespace_complete);
  EXPECT_EQ(2u, plan.files);
  EXPECT_EQ(2u, plan.skipped);
  EXPECT_TRUE(plan.removals.empty());
  Exec(db, "ROLLBACK;");
  sqlite3_close(db);

  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_TRUE(plan.namespace_complete);
  EXPECT_EQ((std::map<std::string, ScrubAction>{{"1/uncommitted", ScrubAction::kRemoveUncommitted},
                                                {"2/deleted", ScrubAction::kRemoveDeletedFile}}),
            Removals(plan));
}

TEST_F(ScrubPlanTest, CorruptInfofileRemovesNothing) {
  Put(1, "r", 0, 2 * kAge);
  WriteInfofile(ns_ + "/ok", 7, store_->peer_id(), {});
  // An SQLite header followed by garbage: maybe a damaged infofile of file 1.
  std::string junk = std::string("SQLite format 3", 16) + std::string(4080, '\x5a');
  WriteText(ns_ + "/damaged", junk);
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_FALSE(plan.namespace_complete);
  EXPECT_EQ(1u, plan.skipped);
  EXPECT_TRUE(plan.removals.empty());
}

TEST_F(ScrubPlanTest, InfofileCommittingOnlyToOthers) {
  // This peer is not in the peers table at all: nothing is committed to it.
  Put(4, "r", 0, 2 * kAge);
  WriteInfofile(ns_ + "/f", 4, "another-peer", {{"r", 0, 0}});
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_EQ((std::map<std::string, ScrubAction>{{"4/r", ScrubAction::kRemoveUncommitted}}),
            Removals(plan));
}

TEST_F(ScrubPlanTest, EmptyNamespaceDeletesNothing) {
  // An empty namespace looks like an unmounted one: no file is taken for deleted.
  Put(1, "r", 0, 2 * kAge);
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_EQ(0u, plan.infofiles);
  EXPECT_EQ(1u, plan.skipped);
  EXPECT_TRUE(plan.removals.empty());
}

TEST_F(ScrubPlanTest, MissingNamespaceRootFails) {
  Put(1, "r", 0, 2 * kAge);
  ScrubPlanOptions o = Options();
  o.namespace_dir = dir_.path() + "/nope";
  ScrubPlan plan;
  Status s = MakeScrubPlan(o, nullptr, &plan);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_TRUE(plan.removals.empty());
}

TEST_F(ScrubPlanTest, Cancelled) {
  Put(1, "r", 0, 2 * kAge);
  WriteInfofile(ns_ + "/f", 1, store_->peer_id(), {});
  std::atomic<bool> cancel{true};
  ScrubPlan plan;
  EXPECT_TRUE(MakeScrubPlan(Options(), &cancel, &plan).IsUnavailable());
  EXPECT_TRUE(plan.removals.empty());
}

TEST_F(ScrubPlanTest, SymlinkLoopsAreWalkedOnce) {
  Put(1, "r", 0, 2 * kAge);
  ASSERT_EQ(0, mkdir((ns_ + "/a").c_str(), 0755));
  WriteInfofile(ns_ + "/a/f", 1, store_->peer_id(), {{"r", 0, 0}});
  ASSERT_EQ(0, symlink("..", (ns_ + "/a/up").c_str()));
  ASSERT_EQ(0, symlink("/nonexistent/x", (ns_ + "/dangling").c_str()));
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  EXPECT_TRUE(plan.namespace_complete);
  EXPECT_EQ(1u, plan.infofiles);
  EXPECT_TRUE(plan.removals.empty());
}

// --metadata fetch: no namespace; each held file id's copy is brought to the tracker's latest,
// by id, and only the tracker's word makes a file deleted.
TEST_F(ScrubPlanTest, FromCopiesDeletedOnlyOnTheTrackersWord) {
  const double kOld = 2 * kAge;
  Put(1, "committed", 0, kOld);
  Put(1, "uncommitted-old", 0, kOld);
  Put(1, "uncommitted-young", 0, 0);
  Put(2, "gone-old", 0, kOld);
  Put(2, "gone-young", 0, 0);
  Put(3, "unknown-id", 0, kOld);    // NOT_FOUND without the word: kept
  Put(4, "not-named-now", 0, kOld);  // refused (no longer in the peerlist): kept
  TrackerFetcher tracker;
  tracker.infofiles[1] = dir_.path() + "/tracker-f1";
  WriteInfofile(tracker.infofiles[1], 1, store_->peer_id(), {{"committed", 0, 0}});
  tracker.deleted.insert(2);
  tracker.refused.insert(4);
  InfofileCopies copies(store_->data_dir() + "/meta", &tracker);
  ScrubPlanOptions o = Options();
  o.namespace_dir = dir_.path() + "/no-namespace";  // not read
  o.copies = &copies;
  ScrubPlan plan;
  ASSERT_TRUE(MakeScrubPlan(o, nullptr, &plan).ok());
  EXPECT_EQ(4u, plan.files);
  EXPECT_EQ(7u, plan.records);
  EXPECT_EQ(1u, plan.infofiles);
  EXPECT_EQ(2u, plan.skipped);
  EXPECT_EQ((std::map<std::string, ScrubAction>{{"1/uncommitted-old",
                                                 ScrubAction::kRemoveUncommitted},
                                                {"2/gone-old", ScrubAction::kRemoveDeletedFile}}),
            Removals(plan));
  // asked by id alone (the tracker finds the name); the copy is kept in <data>/meta/
  EXPECT_EQ(std::vector<std::string>(4, ""), tracker.names);
  struct stat st;
  EXPECT_EQ(0, stat(copies.PathOf(1).c_str(), &st));
}

TEST_F(ScrubPlanTest, FromCopiesUnreachableTrackerPlansNothing) {
  Put(1, "uncommitted-old", 0, 2 * kAge);
  Put(2, "gone-old", 0, 2 * kAge);
  WriteText(store_->data_dir() + "/tmp/x.tmp", "old");
  Backdate(store_->data_dir() + "/tmp/x.tmp", 2 * kAge);
  TrackerFetcher tracker;
  tracker.unreachable = true;
  InfofileCopies copies(store_->data_dir() + "/meta", &tracker);
  ScrubPlanOptions o = Options();
  o.copies = &copies;
  ScrubPlan plan;
  Status s = MakeScrubPlan(o, nullptr, &plan);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("127.0.0.1:9 cannot be reached")) << s.ToString();
  EXPECT_TRUE(plan.removals.empty());
  EXPECT_TRUE(plan.tmp_files.empty());
  EXPECT_EQ(1u, tracker.names.size());  // the first file's failure ends it: no wait per file
}

TEST_F(ScrubPlanTest, ApplyThroughTheStoreRechecks) {
  const double kOld = 2 * kAge;
  Put(1, "stale", 0, kOld);
  Put(1, "replaced", 0, kOld);
  Put(1, "touched", 0, kOld);
  Put(1, "keep", 0, kOld);
  Put(2, "gone", 0, kOld);
  WriteInfofile(ns_ + "/f", 1, store_->peer_id(), {{"keep", 0, 0}});
  WriteText(store_->data_dir() + "/tmp/x.tmp", "old");
  Backdate(store_->data_dir() + "/tmp/x.tmp", kOld);
  ScrubPlan plan;
  ASSERT_TRUE(Plan(&plan).ok());
  ASSERT_EQ(4u, plan.removals.size());
  uint64_t used = store_->used_bytes();

  // Between planning and applying: one record is replaced at another rank,
  // one is rewritten (fresh mtime).
  std::string data = "new data";
  ASSERT_TRUE(store_->Put(1, 1, crc32c::Value(data), "replaced", data, true).ok());
  used = store_->used_bytes();
  Backdate(Path(1, "touched"), 0);

  std::map<std::string, bool> removed;
  for (const auto& r : plan.removals) {
    bool gone = false;
    ASSERT_TRUE(
        store_->RemoveIfStale(r.file_id, r.name, r.copy_rank, r.crc, plan.cutoff, &gone).ok());
    removed[r.name] = gone;
  }
  EXPECT_EQ((std::map<std::string, bool>{
                {"stale", true}, {"replaced", false}, {"touched", false}, {"gone", true}}),
            removed);
  EXPECT_EQ(nullptr, store_->Lookup(1, "stale"));
  EXPECT_NE(nullptr, store_->Lookup(1, "replaced"));
  EXPECT_NE(nullptr, store_->Lookup(1, "touched"));
  EXPECT_EQ(nullptr, store_->Find(2));
  EXPECT_EQ(used - 2 * (sizeof("data of ") - 1) - std::string("stalegone").size(),
            store_->used_bytes());
  EXPECT_EQ(3u, store_->record_count());

  for (uint64_t id : plan.file_dirs) store_->PruneFileDirs(id);
  struct stat st;
  EXPECT_NE(0, stat((store_->data_dir() + "/files/0000000000000002").c_str(), &st));
  EXPECT_EQ(0, stat((store_->data_dir() + "/files/0000000000000001").c_str(), &st));

  ASSERT_EQ(std::vector<std::string>{"x.tmp"}, plan.tmp_files);
  bool gone = false;
  ASSERT_TRUE(store_->RemoveTmpIfStale("x.tmp", plan.cutoff, &gone).ok());
  EXPECT_TRUE(gone);
  EXPECT_FALSE(store_->RemoveTmpIfStale("../LOCK", plan.cutoff, &gone).ok());

  // The index matches a fresh scan of the directory.
  store_.reset();
  StoreOptions so;
  so.data_dir = dir_.path() + "/data";
  ASSERT_TRUE(RecordStore::Open(so, &store_).ok());
  EXPECT_EQ(3u, store_->record_count());
  EXPECT_EQ(used - 2 * (sizeof("data of ") - 1) - std::string("stalegone").size(),
            store_->used_bytes());
}

}  // namespace
}  // namespace st
