// The peer's infofile copies (infofile_copy.h; issue 40): the schema
// fingerprint the tracker compares, changesets applied all or none, snapshots
// checked, and a catch-up that fails leaving the copy as it was.
#ifndef SQLITE_ENABLE_SESSION
#define SQLITE_ENABLE_SESSION 1
#endif
#include "infofile_copy.h"

#include <sqlite3.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "crc32c.h"
#include "infofile_util.h"
#include "meta_mirror.h"
#include "test_util.h"

namespace st {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err))
      << (err != nullptr ? err : "");
}

// Every row of every table, as text, in a stable order.
std::string Dump(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(SQLITE_OK, sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr));
  std::vector<std::string> tables;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name", -1, &st,
                     nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  }
  sqlite3_finalize(st);
  std::string out;
  for (const auto& t : tables) {
    out += "[" + t + "]\n";
    std::string q = "SELECT * FROM \"" + t + "\" ORDER BY 1, 2";
    sqlite3_prepare_v2(db, q.c_str(), -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* v = sqlite3_column_text(st, i);
        out += v != nullptr ? reinterpret_cast<const char*>(v) : "NULL";
        out += "|";
      }
      out += "\n";
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

// The changeset of `sql` run on the infofile at `path` (as the tracker's
// writer records one transaction, st_py/tracker/changesets.py).
std::string Record(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(SQLITE_OK, sqlite3_open(path.c_str(), &db));
  sqlite3_session* session = nullptr;
  EXPECT_EQ(SQLITE_OK, sqlite3session_create(db, "main", &session));
  EXPECT_EQ(SQLITE_OK, sqlite3session_attach(session, nullptr));
  Exec(db, sql);
  int n = 0;
  void* p = nullptr;
  EXPECT_EQ(SQLITE_OK, sqlite3session_changeset(session, &n, &p));
  std::string cs(static_cast<const char*>(p), static_cast<size_t>(n));
  sqlite3_free(p);
  sqlite3session_delete(session);
  sqlite3_close(db);
  return cs;
}

class FakeFetcher : public InfofileFetcher {
 public:
  Status Fetch(const std::string&, uint64_t file_id, const CopyState& have, uint64_t want, double,
               FetchedInfofile* out) override {
    ++calls;
    if (missing.count(file_id) != 0) return Status::NotFound("no such file");
    last_have = have;
    last_want = want;
    if (!result.ok()) return result;
    *out = reply;
    return Status::OK();
  }
  std::string tracker() const override { return "127.0.0.1:9"; }

  int calls = 0;
  CopyState last_have;
  uint64_t last_want = 0;
  Status result = Status::Unavailable("connection refused");
  FetchedInfofile reply;
  std::set<uint64_t> missing;  // file ids the tracker has not
};

class InfofileCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    src_ = dir_ + "/src.infofile";
    test::WriteInfofile(src_, 7, {{"p0", "127.0.0.1:1"}, {"p1", "127.0.0.1:2"}},
                        {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 1}}, "storetorrent-infofile",
                        "INSERT INTO meta VALUES('name', '/f');");
  }
  test::TempDir tmp_;
  std::string dir_, src_;
};

TEST(SchemaFingerprintTest, IsWhatTheTrackerComputes) {
  // The value st_py.core.infofile.schema_fingerprint gives this schema
  // (sha256 of Python's repr of the rows: both quote styles, a backslash, a
  // newline).
  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open(":memory:", &db));
  Exec(db, "CREATE TABLE t(a TEXT DEFAULT 'x', \"b\" INT,\n  c BLOB);"
           "CREATE INDEX t_a ON t(a);"
           "CREATE TABLE u(v TEXT DEFAULT 'y\\z');"
           "CREATE TABLE \"q\"\"uote\"(k INTEGER PRIMARY KEY, v TEXT DEFAULT 'it''s');");
  std::string fp;
  ASSERT_TRUE(SchemaFingerprint(db, &fp).ok());
  EXPECT_EQ("7d19f5b380010f59e62db7058d88ed5b", fp);
  sqlite3_close(db);
}

TEST_F(InfofileCopyTest, ChangesetsBringACopyToTheSourcesRows) {
  std::string copy = dir_ + "/copy.infofile";
  ASSERT_TRUE(ApplyFetched(copy, 7,
                           [&] {
                             FetchedInfofile r;
                             r.kind = "snapshot";
                             r.file_id = 7;
                             std::string bytes = ReadAll(src_);
                             r.data = {bytes.substr(0, 100), bytes.substr(100)};
                             r.total_size = bytes.size();
                             r.crc32c = crc32c::Value(bytes);
                             return r;
                           }())
                  .ok());
  EXPECT_EQ(Dump(src_), Dump(copy));
  FetchedInfofile changes;
  changes.kind = "changes";
  changes.data.push_back(Record(src_,
                                "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) "
                                "VALUES('c',1,0,2,0);"
                                "INSERT INTO copies VALUES('c',0,0,2);"
                                "UPDATE meta SET value=2 WHERE key='generation';"));
  changes.data.push_back(Record(src_, "DELETE FROM copies WHERE name='b';"
                                      "DELETE FROM records WHERE name='b';"
                                      "UPDATE meta SET value=3 WHERE key='generation';"));
  ASSERT_TRUE(ApplyFetched(copy, 7, changes).ok());
  EXPECT_EQ(Dump(src_), Dump(copy));
  CopyState state;
  ASSERT_TRUE(ReadCopyState(copy, &state).ok());
  EXPECT_EQ(3u, state.generation);
  // The same changes again conflict: nothing of them is applied.
  std::string before = ReadAll(copy);
  Status s = ApplyFetched(copy, 7, changes);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("do not apply")) << s.ToString();
  EXPECT_EQ(before, ReadAll(copy));
  EXPECT_NE(0, ::access((copy + ".applying").c_str(), F_OK));
}

TEST_F(InfofileCopyTest, ADamagedSnapshotIsRefusedAndWritesNothing) {
  std::string copy = dir_ + "/copy.infofile";
  std::string bytes = ReadAll(src_);
  FetchedInfofile r;
  r.kind = "snapshot";
  r.file_id = 7;
  r.data = {bytes};
  r.total_size = bytes.size();
  r.crc32c = crc32c::Value(bytes) ^ 1;
  EXPECT_TRUE(ApplyFetched(copy, 7, r).IsCorruption());
  EXPECT_NE(0, ::access(copy.c_str(), F_OK));
  r.crc32c ^= 1;
  EXPECT_TRUE(ApplyFetched(copy, 8, r).IsCorruption());  // another file's
  EXPECT_NE(0, ::access(copy.c_str(), F_OK));
}

TEST_F(InfofileCopyTest, EnsureFetchesOnlyWhenBehindAndKeepsTheCopyWhenItCannot) {
  FakeFetcher fetcher;
  InfofileCopies copies(dir_ + "/meta", &fetcher);
  uint64_t have = 99;
  // No copy and no tracker: nothing, have 0.
  EXPECT_FALSE(copies.Ensure("/f", 7, 1, 1.0, &have).ok());
  EXPECT_EQ(0u, have);
  EXPECT_EQ(1, fetcher.calls);
  EXPECT_TRUE(fetcher.last_have.schema.empty());
  // The tracker answers with a snapshot at generation 1.
  std::string bytes = ReadAll(src_);
  fetcher.result = Status::OK();
  fetcher.reply.kind = "snapshot";
  fetcher.reply.file_id = 7;
  fetcher.reply.generation = 1;
  fetcher.reply.data = {bytes};
  fetcher.reply.total_size = bytes.size();
  fetcher.reply.crc32c = crc32c::Value(bytes);
  ASSERT_TRUE(copies.Ensure("/f", 7, 1, 1.0, &have).ok());
  EXPECT_EQ(1u, have);
  EXPECT_EQ(Dump(src_), Dump(copies.PathOf(7)));
  EXPECT_EQ(1u, copies.counters().fetches.load());
  EXPECT_EQ(1u, copies.counters().failures.load());
  EXPECT_EQ(bytes.size(), copies.counters().bytes.load());
  // At the generation asked: no call.
  ASSERT_TRUE(copies.Ensure("/f", 7, 1, 1.0, &have).ok());
  EXPECT_EQ(2, fetcher.calls);
  // Behind, and the tracker is gone: refused, the copy as it was.
  fetcher.result = Status::Unavailable("connection refused");
  std::string before = ReadAll(copies.PathOf(7));
  Status s = copies.Ensure("/f", 7, 5, 1.0, &have);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(1u, have);
  EXPECT_EQ(1u, fetcher.last_have.generation);
  EXPECT_FALSE(fetcher.last_have.schema.empty());
  EXPECT_EQ(5u, fetcher.last_want);
  EXPECT_EQ(before, ReadAll(copies.PathOf(7)));
  // A reply that does not reach the generation asked is not enough.
  fetcher.result = Status::OK();
  fetcher.reply.kind = "current";
  s = copies.Ensure("/f", 7, 5, 1.0, &have);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_EQ(1u, have);
}

TEST_F(InfofileCopyTest, TheCopiesPassListsCopiesAndRemovesOnlyWhatTheTrackerLost) {
  // Two copies (file ids 7 and 8) in <data>/meta/, made as GET_LOCAL makes them.
  FakeFetcher fetcher;
  InfofileCopies copies(dir_ + "/meta", &fetcher);
  std::string other = dir_ + "/other.infofile";
  test::WriteInfofile(other, 8, {{"p0", "127.0.0.1:1"}}, {{"z", 0, 0}}, "storetorrent-infofile",
                      "INSERT INTO meta VALUES('name', '/g');");
  for (const auto& [id, path] : {std::pair<uint64_t, std::string>{7, src_}, {8, other}}) {
    std::string bytes = ReadAll(path);
    FetchedInfofile r;
    r.kind = "snapshot";
    r.file_id = id;
    r.data = {bytes};
    r.total_size = bytes.size();
    r.crc32c = crc32c::Value(bytes);
    ASSERT_TRUE(ApplyFetched(copies.PathOf(id), id, r).ok());
  }
  MirrorPassOptions o;
  o.data_dir = dir_;
  o.copies = &copies;
  o.remove_after_s = 0;
  MirrorState state;
  MirrorPassStats stats;
  fetcher.result = Status::OK();
  fetcher.reply = FetchedInfofile();
  fetcher.reply.kind = "current";
  ASSERT_TRUE(RunMirrorPass(o, nullptr, &state, &stats).ok());
  EXPECT_EQ(2u, state.mirrors.size());
  EXPECT_EQ(2u, stats.infofiles);
  EXPECT_EQ(0u, stats.removed);
  // The tracker lost every file (its namespace): nothing removed.
  fetcher.missing = {7, 8};
  ASSERT_TRUE(RunMirrorPass(o, nullptr, &state, &stats).ok());
  EXPECT_EQ(0u, stats.removed);
  EXPECT_EQ(0, ::access(copies.PathOf(7).c_str(), F_OK));
  // File 8 deleted, 7 still there: 8's copy goes, unless the peer holds its records.
  fetcher.missing = {8};
  o.held_file_ids = {8};
  ASSERT_TRUE(RunMirrorPass(o, nullptr, &state, &stats).ok());
  EXPECT_EQ(0u, stats.removed);
  o.held_file_ids.clear();
  ASSERT_TRUE(RunMirrorPass(o, nullptr, &state, &stats).ok());
  EXPECT_EQ(1u, stats.removed);
  EXPECT_NE(0, ::access(copies.PathOf(8).c_str(), F_OK));
  EXPECT_EQ(0, ::access(copies.PathOf(7).c_str(), F_OK));
  EXPECT_EQ(1u, state.mirrors.count(7));
  EXPECT_EQ(0u, state.mirrors.count(8));
  // A tracker that cannot be reached: the copy kept, an error counted.
  fetcher.result = Status::Unavailable("connection refused");
  ASSERT_TRUE(RunMirrorPass(o, nullptr, &state, &stats).ok());
  EXPECT_EQ(1u, stats.errors);
  EXPECT_EQ(1u, state.mirrors.count(7));
}

}  // namespace
}  // namespace st
