// The infofile mirror (meta_mirror.h) on real directories and SQLite
// infofiles: which infofiles are copied, change detection, a lost namespace,
// deleted files, stale copies, the catalog read back at start; and
// LIST_META / GET_META through a real server.
#include "meta_mirror.h"

#include <sqlite3.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "crc32c.h"
#include "infofile_schema.h"
#include "infofile_util.h"
#include "peer_harness.h"
#include "record_store.h"
#include "test_util.h"

namespace st {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// An infofile (docs/infofile.md) of file_id named name at generation 1 with
// peerlist (peer_id, addr) and `records` records whose copy rank 0 is on
// peer_idx `holder`. Columns are named, so later columns with defaults do not
// matter.
void WriteInfofile(const std::string& path, uint64_t file_id, const std::string& name,
                   const std::vector<std::pair<std::string, std::string>>& peers, int records,
                   int holder = 0) {
  std::string sql = std::string(test::kInfofileSchemaSql) +
                    "BEGIN; INSERT INTO meta(key, value) VALUES('format','storetorrent-infofile'),"
                    "('format_version',2),('file_id'," +
                    std::to_string(file_id) + "),('generation',1),('name','" + name + "');";
  for (size_t i = 0; i < peers.size(); ++i) {
    sql += "INSERT INTO peers(peer_idx, peer_id, addr) VALUES(" + std::to_string(i) + ",'" +
           peers[i].first + "','" + peers[i].second + "');";
  }
  for (int i = 0; i < records; ++i) {
    std::string r = "record-" + std::to_string(i);
    sql += "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) VALUES('" + r +
           "',1,0,1,0);INSERT INTO copies(name, copy_rank, peer_idx, since) VALUES('" + r + "',0," +
           std::to_string(holder) + ",1);";
  }
  // made beside `path` and renamed onto it, as the tracker makes infofiles:
  // the peer's mirror pass never sees a half-made one
  const std::string tmp = path + ".writing";
  std::remove(tmp.c_str());
  test::ExecSql(tmp, sql + "COMMIT;");
  ASSERT_EQ(0, std::rename(tmp.c_str(), path.c_str()));
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// How many records the SQLite file at path holds.
int Records(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(SQLITE_OK, sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr));
  sqlite3_stmt* q = nullptr;
  EXPECT_EQ(SQLITE_OK, sqlite3_prepare_v2(db, "SELECT count(*) FROM records", -1, &q, nullptr));
  EXPECT_EQ(SQLITE_ROW, sqlite3_step(q));
  int n = sqlite3_column_int(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return n;
}

class MirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = dir_.path() + "/ns";
    data_ = dir_.path() + "/data";
    ASSERT_EQ(0, mkdir(ns_.c_str(), 0755));
    ASSERT_EQ(0, mkdir((ns_ + "/d").c_str(), 0755));
    ASSERT_EQ(0, mkdir(data_.c_str(), 0755));
    o_.namespace_dir = ns_;
    o_.data_dir = data_;
    o_.peer_id = "me";
    o_.remove_after_s = 0;
  }

  // An infofile of file_id named name; lists this peer unless !mine.
  void Write(const std::string& rel, uint64_t file_id, bool mine, int records = 3) {
    WriteInfofile(ns_ + rel, file_id, rel, {{mine ? "me" : "a", "h:1"}, {"b", "h:2"}}, records);
  }

  // A commit: one more record and a bumped generation.
  void Commit(const std::string& rel, const std::string& record) {
    test::ExecSql(ns_ + rel,
                  "BEGIN; UPDATE meta SET value = value + 1 WHERE key = 'generation';"
                  "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) VALUES('" +
                      record +
                      "',1,0,2,0);"
                      "INSERT INTO copies(name, copy_rank, peer_idx, since) VALUES('" +
                      record + "',0,0,2); COMMIT;");
  }

  MirrorPassStats Pass(Status* status = nullptr) {
    MirrorPassStats stats;
    Status s = RunMirrorPass(o_, nullptr, &state_, &stats);
    if (status != nullptr) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return stats;
  }

  test::TempDir dir_;
  std::string ns_, data_;
  MirrorPassOptions o_;
  MirrorState state_;
};

TEST_F(MirrorTest, CopiesTheInfofilesOfThisPeerOnly) {
  Write("/d/listed", 11, true);
  Write("/d/held", 12, false);
  Write("/d/other", 13, false);
  Write("/.st-being-created", 14, true);
  {
    std::ofstream(ns_ + "/d/notes.txt") << "not an infofile, not even SQLite";
  }
  test::ExecSql(ns_ + "/d/other.db", "CREATE TABLE t(x)");  // SQLite, not an infofile
  o_.held_file_ids = {12};

  MirrorPassStats st = Pass();
  EXPECT_TRUE(st.complete);
  EXPECT_EQ(3u, st.infofiles);
  EXPECT_EQ(2u, st.copied);
  EXPECT_EQ(0u, st.errors);
  ASSERT_EQ(2u, state_.mirrors.size());
  for (uint64_t id : {11, 12}) {
    std::string path = MirrorPath(data_, id);
    ASSERT_TRUE(Exists(path)) << path;
    const MetaListEntry& e = state_.mirrors[id];
    EXPECT_EQ(id, e.file_id);
    EXPECT_EQ(1u, e.generation);
    EXPECT_EQ(id == 11 ? "/d/listed" : "/d/held", e.name);
    std::string bytes = ReadAll(path);
    EXPECT_EQ(bytes.size(), e.size);
    EXPECT_EQ(crc32c::Value(bytes), e.crc32c);
    EXPECT_EQ(3, Records(path));
    // The same pages: same size, and the rows read the same.
    EXPECT_EQ(ReadAll(ns_ + e.name).size(), bytes.size());
  }
  EXPECT_FALSE(Exists(MirrorPath(data_, 13)));
  EXPECT_FALSE(Exists(MirrorPath(data_, 14)));
  EXPECT_EQ(MirrorPath(data_, 11), data_ + "/meta/000000000000000b.infofile");
}

TEST_F(MirrorTest, CopiesAgainOnlyWhatChanged) {
  Write("/d/a", 21, true);
  Write("/d/b", 22, true);
  EXPECT_EQ(2u, Pass().copied);
  EXPECT_EQ(0u, Pass().copied);  // nothing changed
  // Two commits in quick succession, each seen (the change counter tells
  // commits apart within one mtime tick).
  Commit("/d/a", "x1");
  MirrorPassStats st = Pass();
  EXPECT_EQ(1u, st.copied);
  EXPECT_EQ(2u, state_.mirrors[21].generation);
  Commit("/d/a", "x2");
  EXPECT_EQ(1u, Pass().copied);
  EXPECT_EQ(3u, state_.mirrors[21].generation);
  EXPECT_EQ(5, Records(MirrorPath(data_, 21)));
  EXPECT_EQ(1u, state_.mirrors[22].generation);
}

TEST_F(MirrorTest, ALostNamespaceKeepsEveryMirror) {
  Write("/d/a", 31, true);
  Write("/d/b", 32, true);
  Pass();
  ASSERT_EQ(2u, state_.mirrors.size());
  // Every infofile gone (an empty namespace looks like an unmounted one).
  ASSERT_EQ(0, unlink((ns_ + "/d/a").c_str()));
  ASSERT_EQ(0, unlink((ns_ + "/d/b").c_str()));
  MirrorPassStats st = Pass();
  EXPECT_EQ(0u, st.removed);
  EXPECT_EQ(2u, state_.mirrors.size());
  EXPECT_TRUE(Exists(MirrorPath(data_, 31)));
  // The root itself gone: the pass fails and removes nothing.
  test::RemoveTree(ns_);
  Status s;
  Pass(&s);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_EQ(2u, state_.mirrors.size());
  EXPECT_TRUE(Exists(MirrorPath(data_, 32)));
}

TEST_F(MirrorTest, ADeletedFilesMirrorGoesWithItsLastRecord) {
  Write("/d/a", 41, true);
  Write("/d/b", 42, true);
  o_.held_file_ids = {41, 42};
  Pass();
  ASSERT_EQ(0, unlink((ns_ + "/d/a").c_str()));  // deleted; the records are still here
  EXPECT_EQ(0u, Pass().removed);
  EXPECT_TRUE(Exists(MirrorPath(data_, 41)));
  o_.held_file_ids = {42};  // DELETE_FILE (or the scrubber) removed them
  MirrorPassStats st = Pass();
  EXPECT_EQ(1u, st.removed);
  EXPECT_FALSE(Exists(MirrorPath(data_, 41)));
  EXPECT_EQ(1u, state_.mirrors.count(42));
  EXPECT_EQ(0u, state_.mirrors.count(41));
}

TEST_F(MirrorTest, ADeletedFilesMirrorStaysForTheGracePeriod) {
  o_.remove_after_s = 3600;  // a namespace rebuilt within it loses no mirror
  Write("/d/a", 45, true);
  Write("/d/b", 46, true);
  Pass();
  ASSERT_EQ(0, unlink((ns_ + "/d/a").c_str()));
  EXPECT_EQ(0u, Pass().removed);
  EXPECT_EQ(0u, Pass().removed);
  EXPECT_TRUE(Exists(MirrorPath(data_, 45)));
  o_.remove_after_s = 0;
  EXPECT_EQ(1u, Pass().removed);
  EXPECT_FALSE(Exists(MirrorPath(data_, 45)));
}

TEST_F(MirrorTest, AStaleCopyNeverReplacesANewerMirror) {
  Write("/d/a", 51, true);
  Commit("/d/a", "x");
  Pass();
  ASSERT_EQ(2u, state_.mirrors[51].generation);
  Write("/d/old-backup-of-a", 51, true);  // generation 1, same file id
  MirrorPassStats st = Pass();
  EXPECT_EQ(0u, st.copied);
  EXPECT_EQ(2u, state_.mirrors[51].generation);
  EXPECT_EQ(4, Records(MirrorPath(data_, 51)));
}

TEST_F(MirrorTest, TheCatalogIsReadBackAtStart) {
  Write("/d/a", 61, true);
  Write("/d/b", 62, true);
  Pass();
  {
    std::ofstream(data_ + "/meta/.tmp-000000000000003d") << "half a copy";
  }
  {
    std::ofstream(data_ + "/meta/000000000000003f.infofile") << "garbage";
  }
  MirrorState fresh;
  MirrorPassStats st;
  test::RemoveTree(ns_);  // no namespace: the catalog is read all the same
  EXPECT_TRUE(RunMirrorPass(o_, nullptr, &fresh, &st).IsUnavailable());
  ASSERT_EQ(2u, fresh.mirrors.size());
  EXPECT_EQ(state_.mirrors[61], fresh.mirrors[61]);
  EXPECT_EQ(state_.mirrors[62], fresh.mirrors[62]);
  EXPECT_FALSE(Exists(data_ + "/meta/.tmp-000000000000003d"));
  MetaListEntry e;
  EXPECT_TRUE(ReadMirrorEntry(Env::Default(), MirrorPath(data_, 62), &e).ok());
  EXPECT_EQ("/d/b", e.name);
}

// LIST_META and GET_META through a real server.
TEST(MirrorServer, ListAndGetMeta) {
  test::TempDir dir;
  std::string ns = dir.path() + "/ns";
  ASSERT_EQ(0, mkdir(ns.c_str(), 0755));
  ServerOptions sv;
  sv.namespace_dir = ns;
  sv.mirror_interval_s = 0.05;
  sv.max_frame = 4096;  // a mirror takes several GET_META
  StoreOptions so;
  test::TestPeer peer(sv, so);
  WriteInfofile(ns + "/f", 77, "/f", {{peer.peer_id(), peer.addr()}}, 200);
  std::string want = ReadAll(ns + "/f");
  ASSERT_GT(want.size(), 8192u);

  test::Client c(peer.port());
  std::vector<MetaListEntry> list;
  for (int tries = 0; tries < 200 && list.empty(); ++tries) {
    test::Reply r = c.Call(EncodeListMeta(3));
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kMetaList), r.h.type);
    EXPECT_EQ(3u, r.h.seq);
    ASSERT_TRUE(DecodeMetaList(r.payload, &list).ok());
    if (list.empty()) usleep(20000);
  }
  ASSERT_EQ(1u, list.size());
  EXPECT_EQ(77u, list[0].file_id);
  EXPECT_EQ(1u, list[0].generation);
  EXPECT_EQ("/f", list[0].name);

  std::string got;
  while (got.size() < list[0].size) {
    test::Reply r = c.Call(EncodeGetMeta(4, {77, got.size(), 1 << 20}));
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kData), r.h.type) << test::ErrorMessage(r);
    DataReply d;
    ASSERT_TRUE(DecodeData(r.payload, &d).ok());
    ASSERT_GT(d.data.size(), 0u);
    EXPECT_LE(d.data.size(), 4096u);
    EXPECT_EQ(crc32c::Value(d.data), d.crc32c);
    got.append(d.data);
  }
  EXPECT_EQ(list[0].size, got.size());
  EXPECT_EQ(list[0].crc32c, crc32c::Value(got));
  // Past the end: no bytes.
  test::Reply end = c.Call(EncodeGetMeta(5, {77, got.size(), 100}));
  EXPECT_EQ("", test::DataOf(end));
  // An unknown mirror.
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound),
            test::ErrorOf(c.Call(EncodeGetMeta(6, {78, 0, 100}))));
  // The mirror is the infofile's content.
  std::string path = dir.path() + "/copy";
  {
    std::ofstream(path, std::ios::binary) << got;
  }
  EXPECT_EQ(200, Records(path));
  EXPECT_GE(peer.server()->mirror()->counters().passes.load(), 1u);
  // Losing the namespace loses no mirror.
  ASSERT_EQ(0, unlink((ns + "/f").c_str()));
  usleep(200000);
  std::vector<MetaListEntry> after;
  ASSERT_TRUE(DecodeMetaList(c.Call(EncodeListMeta(7)).payload, &after).ok());
  EXPECT_EQ(list, after);
}

TEST(MirrorServer, NeedsANamespaceAndCapabilities) {
  ServerOptions sv;  // no namespace: no mirrors
  test::TestPeer bare(sv, StoreOptions());
  test::Client c(bare.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace),
            test::ErrorOf(c.Call(EncodeListMeta(1))));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace),
            test::ErrorOf(c.Call(EncodeGetMeta(2, {1, 0, 10}))));

  test::TempDir dir;
  ServerOptions keyed;
  keyed.namespace_dir = dir.path();
  keyed.capability_key = std::string(32, 'k');
  test::TestPeer peer(keyed, StoreOptions());
  test::Client k(peer.port());
  uint64_t exp = UnixNow() + 3600;
  auto token = [&](uint8_t ops, uint64_t file_id) {
    Capability cap;
    cap.ops = ops;
    cap.file_id = file_id;
    cap.expires = exp;
    cap.user = "t";
    return MintToken(keyed.capability_key, cap);
  };
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kDenied), test::ErrorOf(k.Call(EncodeListMeta(1))));
  EXPECT_TRUE(test::IsOk(k.Call(EncodeAuth(2, token(kOpRead, 9)))));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kDenied), test::ErrorOf(k.Call(EncodeListMeta(3))));
  // READ on file 9 lets GET_META of file 9 through (it has no mirror), not of file 8.
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound),
            test::ErrorOf(k.Call(EncodeGetMeta(4, {9, 0, 10}))));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kDenied),
            test::ErrorOf(k.Call(EncodeGetMeta(5, {8, 0, 10}))));
  EXPECT_TRUE(test::IsOk(k.Call(EncodeAuth(6, token(kOpAdmin, 0)))));
  test::Reply r = k.Call(EncodeListMeta(7));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kMetaList), r.h.type);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound),
            test::ErrorOf(k.Call(EncodeGetMeta(8, {8, 0, 10}))));
}

}  // namespace
}  // namespace st
