#include "record_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "crc32c.h"
#include "fault_env.h"
#include "name_codec.h"
#include "test_util.h"

namespace st {
namespace {

class RecordStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen(uint64_t capacity = 0) {
    store_.reset();
    StoreOptions o;
    o.data_dir = dir_.path() + "/data";
    o.capacity = capacity;
    ASSERT_TRUE(RecordStore::Open(o, &store_).ok());
  }

  Status Put(uint64_t fid, uint8_t rank, const std::string& name, const std::string& data,
             bool replace = false) {
    return store_->Put(fid, rank, crc32c::Value(data), name, data, replace);
  }

  std::string Read(uint64_t fid, const std::string& name, uint8_t* rank = nullptr) {
    RecordStore::OpenRecord rec;
    Status s = store_->Get(fid, name, &rec);
    if (!s.ok()) return "<" + s.ToString() + ">";
    std::string out(rec.size, '\0');
    EXPECT_EQ(static_cast<ssize_t>(rec.size), pread(rec.fd, &out[0], rec.size, 0));
    close(rec.fd);
    EXPECT_EQ(crc32c::Value(out), rec.crc);
    if (rank != nullptr) *rank = rec.copy_rank;
    return out;
  }

  test::TempDir dir_;
  std::unique_ptr<RecordStore> store_;
};

TEST_F(RecordStoreTest, PutGetDelete) {
  ASSERT_TRUE(Put(1, 0, "a", "hello").ok());
  ASSERT_TRUE(Put(1, 1, "b", "").ok());  // a record may be empty
  uint8_t rank = 9;
  EXPECT_EQ("hello", Read(1, "a", &rank));
  EXPECT_EQ(0, rank);
  EXPECT_EQ("", Read(1, "b", &rank));
  EXPECT_EQ(1, rank);
  EXPECT_EQ(2u, store_->record_count());
  EXPECT_EQ(5u, store_->used_bytes());
  RecordStore::OpenRecord rec;
  EXPECT_TRUE(store_->Get(1, "c", &rec).IsNotFound());
  EXPECT_TRUE(store_->Get(2, "a", &rec).IsNotFound());
  EXPECT_TRUE(store_->Delete(1, "a").ok());
  EXPECT_TRUE(store_->Delete(1, "a").IsNotFound());
  EXPECT_TRUE(store_->Get(1, "a", &rec).IsNotFound());
  EXPECT_EQ(1u, store_->record_count());
  EXPECT_EQ(0u, store_->used_bytes());
}

TEST_F(RecordStoreTest, LayoutOnDisk) {
  ASSERT_TRUE(Put(0x42, 1, "JFK/x", "data").ok());
  const RecordMeta* m = store_->Lookup(0x42, "JFK/x");
  ASSERT_NE(nullptr, m);
  char bucket[8];
  snprintf(bucket, sizeof(bucket), "%02x", NameBucket("JFK/x"));
  char crc[16];
  snprintf(crc, sizeof(crc), "%08x", crc32c::Value("data"));
  std::string expected =
      store_->data_dir() + "/files/0000000000000042/" + bucket + "/JFK%2Fx@1@" + crc;
  EXPECT_EQ(expected, store_->RecordPath(0x42, "JFK/x", *m));
  struct stat st;
  EXPECT_EQ(0, stat(expected.c_str(), &st));
  EXPECT_EQ(0u, test::CountFiles(store_->data_dir() + "/tmp"));
  // PEER_ID is a UUID, kept across restarts.
  std::string id = store_->peer_id();
  EXPECT_EQ(36u, id.size());
  Reopen();
  EXPECT_EQ(id, store_->peer_id());
}

TEST_F(RecordStoreTest, CrcMismatchAndBadName) {
  EXPECT_TRUE(store_->Put(1, 0, 123, "a", "data", false).IsCorruption());
  EXPECT_TRUE(Put(1, 0, "", "x").IsInvalidArgument());
  EXPECT_TRUE(Put(1, 0, std::string("a\0b", 3), "x").IsInvalidArgument());
  EXPECT_TRUE(Put(1, 0, std::string(4097, 'n'), "x").IsInvalidArgument());
  EXPECT_EQ(0u, store_->record_count());
  EXPECT_EQ(0u, test::CountFiles(store_->data_dir() + "/files"));
  EXPECT_EQ(0u, test::CountFiles(store_->data_dir() + "/tmp"));
}

TEST_F(RecordStoreTest, IdempotentPutExistsAndReplace) {
  ASSERT_TRUE(Put(1, 0, "a", "one").ok());
  EXPECT_TRUE(Put(1, 0, "a", "one").ok());  // retry
  EXPECT_EQ(1u, store_->record_count());
  EXPECT_TRUE(Put(1, 0, "a", "two").IsAlreadyExists());
  EXPECT_TRUE(Put(1, 1, "a", "one").IsAlreadyExists());
  EXPECT_EQ("one", Read(1, "a"));
  ASSERT_TRUE(Put(1, 1, "a", "two!", true).ok());
  uint8_t rank;
  EXPECT_EQ("two!", Read(1, "a", &rank));
  EXPECT_EQ(1, rank);
  EXPECT_EQ(1u, store_->record_count());
  EXPECT_EQ(4u, store_->used_bytes());
  // The old file is gone: one record file on disk.
  EXPECT_EQ(1u, test::CountFiles(store_->data_dir() + "/files"));
  Reopen();
  EXPECT_EQ("two!", Read(1, "a"));
}

// A crashed writer's leftover (paper 4.4): a LEFTOVER PUT replaces an
// uncommitted copy only once the connection that stored it has closed.
TEST_F(RecordStoreTest, LeftoverReplacesOnlyACopyWhoseWriterIsGone) {
  std::set<uint64_t> open{7, 8};
  store_->SetWriterOpen([&open](uint64_t id) { return open.count(id) != 0; });
  auto put = [&](const std::string& data, uint64_t writer, bool leftover, uint8_t rank = 0) {
    PutMode m;
    m.writer = writer;
    m.leftover = leftover;
    return store_->Put(1, rank, crc32c::Value(data), "r", data, m);
  };
  ASSERT_TRUE(put("from 7", 7, false).ok());
  EXPECT_TRUE(put("from 8", 8, false).IsAlreadyExists());  // never without LEFTOVER
  EXPECT_TRUE(put("from 8", 8, true).IsAlreadyExists());   // 7 is still connected
  EXPECT_EQ("from 7", Read(1, "r"));
  open.erase(7);  // writer 7 crashed
  EXPECT_TRUE(put("from 8", 8, false).IsAlreadyExists());  // still never without LEFTOVER
  ASSERT_TRUE(put("from 8", 8, true, 1).ok());             // replaced, at the retry's rank
  uint8_t rank = 9;
  EXPECT_EQ("from 8", Read(1, "r", &rank));
  EXPECT_EQ(1, rank);
  EXPECT_EQ(1u, store_->record_count());
  // An idempotent retry by a live writer makes the copy its own: a LEFTOVER
  // PUT by a third writer must not take it once the first writer is gone.
  open.insert(9);
  ASSERT_TRUE(put("from 8", 9, false, 1).ok());
  open.erase(8);
  EXPECT_TRUE(put("from 10", 10, true).IsAlreadyExists());
  // A copy whose writer is unknown (found on disk at start) is never a leftover.
  Reopen();
  store_->SetWriterOpen([](uint64_t) { return false; });
  EXPECT_TRUE(put("from 11", 11, true).IsAlreadyExists());
  EXPECT_EQ("from 8", Read(1, "r"));
}

TEST_F(RecordStoreTest, AStrayFileUnderTheRecordsNameIsReplacedWhole) {
  // A file the index does not know sits where the record goes (linkat
  // refuses with EEXIST): the PUT falls back to a temp file renamed over it.
  ASSERT_TRUE(Put(7, 0, "seed", "x").ok());  // makes the file's directory
  char bucket[8];
  snprintf(bucket, sizeof(bucket), "%02x", NameBucket("r"));
  char crc[16];
  snprintf(crc, sizeof(crc), "%08x", crc32c::Value("new data"));
  std::string bdir = store_->data_dir() + "/files/0000000000000007/" + bucket;
  mkdir(bdir.c_str(), 0755);
  std::string path = bdir + "/r@0@" + crc;
  {
    std::ofstream(path) << "stale, and longer than the record";
  }
  ASSERT_TRUE(Put(7, 0, "r", "new data").ok());
  EXPECT_EQ("new data", Read(7, "r"));
  EXPECT_EQ(0u, test::CountFiles(store_->data_dir() + "/tmp"));
}

TEST_F(RecordStoreTest, IndexRebuiltAfterReopen) {
  std::string long_name(300, 'L');
  std::string weird = std::string("../..//\xff\x01 .x%");
  ASSERT_TRUE(Put(7, 0, "a", "1").ok());
  ASSERT_TRUE(Put(7, 2, long_name, "22").ok());
  ASSERT_TRUE(Put(8, 1, weird, "333").ok());
  ASSERT_TRUE(Put(8, 0, ".hidden", "4444").ok());
  Reopen();
  EXPECT_EQ(4u, store_->record_count());
  EXPECT_EQ(10u, store_->used_bytes());
  uint8_t rank;
  EXPECT_EQ("1", Read(7, "a"));
  EXPECT_EQ("22", Read(7, long_name, &rank));
  EXPECT_EQ(2, rank);
  EXPECT_EQ("333", Read(8, weird, &rank));
  EXPECT_EQ(1, rank);
  EXPECT_EQ("4444", Read(8, ".hidden"));
  ASSERT_NE(nullptr, store_->Find(7));
  EXPECT_EQ(2u, store_->Find(7)->size());
  // Long names keep a sidecar; delete removes both.
  EXPECT_TRUE(store_->Delete(7, long_name).ok());
  EXPECT_EQ(1u, test::CountFiles(store_->data_dir() + "/files/0000000000000007"));
}

TEST_F(RecordStoreTest, TmpCleanedAtStart) {
  std::string junk = store_->data_dir() + "/tmp/123-1.tmp";
  {
    std::ofstream(junk) << "partial";
  }
  Reopen();
  EXPECT_EQ(0u, test::CountFiles(store_->data_dir() + "/tmp"));
}

TEST_F(RecordStoreTest, NamesStayInsideTheDataDir) {
  for (const char* n : {"../escape", "../../escape", "/abs", "..", ".", "a/../../../b"}) {
    ASSERT_TRUE(Put(3, 0, n, "x").ok()) << n;
    const RecordMeta* m = store_->Lookup(3, n);
    ASSERT_NE(nullptr, m);
    std::string path = store_->RecordPath(3, n, *m);
    std::string prefix = store_->data_dir() + "/files/0000000000000003/";
    ASSERT_EQ(prefix, path.substr(0, prefix.size()));
    EXPECT_EQ(std::string::npos, path.substr(prefix.size()).find("/", 3)) << path;
  }
  EXPECT_EQ(6u, test::CountFiles(store_->data_dir() + "/files/0000000000000003"));
  EXPECT_EQ(2u, test::CountFiles(dir_.path()) - test::CountFiles(store_->data_dir() + "/files") -
                    0);  // PEER_ID, LOCK
}

TEST_F(RecordStoreTest, DeleteFile) {
  ASSERT_TRUE(Put(5, 0, "a", "1").ok());
  ASSERT_TRUE(Put(5, 1, "b", "2").ok());
  ASSERT_TRUE(Put(6, 0, "a", "3").ok());
  uint64_t removed = 0;
  ASSERT_TRUE(store_->DeleteFile(5, &removed).ok());
  EXPECT_EQ(2u, removed);
  EXPECT_EQ(nullptr, store_->Find(5));
  EXPECT_EQ("3", Read(6, "a"));
  ASSERT_TRUE(store_->DeleteFile(5, &removed).ok());
  EXPECT_EQ(0u, removed);
  Reopen();
  EXPECT_EQ(1u, store_->record_count());
}

TEST_F(RecordStoreTest, Capacity) {
  Reopen(10);
  EXPECT_TRUE(Put(1, 0, "a", "12345678").ok());
  EXPECT_TRUE(Put(1, 0, "b", "123").IsNoSpace());
  EXPECT_TRUE(Put(1, 0, "b", "12").ok());
  EXPECT_TRUE(Put(1, 0, "a", "1234", true).ok());  // a replace frees its old bytes
}

TEST_F(RecordStoreTest, SecondOpenOfTheSameDirFails) {
  std::unique_ptr<RecordStore> other;
  StoreOptions o;
  o.data_dir = dir_.path() + "/data";
  Status s = RecordStore::Open(o, &other);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.message().find("in use"));
}

// The PUT path's directory work (issue 41, item 3): the store knows which
// bucket folders exist, so a PUT makes no mkdir and no probe in a known one,
// and reads the new file's ctime from the open file, not by its path.
class RecordStoreDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.data_dir = dir_.path() + "/data";
    o.env = &env_;
    ASSERT_TRUE(RecordStore::Open(o, &store_).ok());
  }
  Status Put(uint64_t fid, const std::string& name, const std::string& data) {
    return store_->Put(fid, 0, crc32c::Value(data), name, data, false);
  }
  // Names: two of one bucket, one of another.
  void Names(std::string* a, std::string* b, std::string* other) {
    *a = "n0";
    for (int i = 1; b->empty() || other->empty(); ++i) {
      std::string n = "n" + std::to_string(i);
      if (NameBucket(n) == NameBucket(*a)) {
        if (b->empty()) *b = n;
      } else if (other->empty()) {
        *other = n;
      }
    }
  }
  std::string BucketDir(uint64_t fid, const std::string& name) {
    char buf[64];
    snprintf(buf, sizeof(buf), "/files/%016llx/%02x", static_cast<unsigned long long>(fid),
             NameBucket(name));
    return store_->data_dir() + buf;
  }
  std::string FileDir(uint64_t fid) {
    std::string b = BucketDir(fid, "x");
    return b.substr(0, b.rfind('/'));
  }
  std::string ReadBack(uint64_t fid, const std::string& name) {
    RecordStore::OpenRecord rec;
    Status s = store_->Get(fid, name, &rec, /*verify=*/true);
    if (!s.ok()) return "<" + s.ToString() + ">";
    std::string out(rec.size, '\0');
    EXPECT_EQ(static_cast<ssize_t>(rec.size), pread(rec.fd, &out[0], rec.size, 0));
    close(rec.fd);
    return out;
  }

  test::TempDir dir_;
  test::FaultEnv env_{Env::Default()};
  std::unique_ptr<RecordStore> store_;
};

TEST_F(RecordStoreDirsTest, BucketFoldersAreMadeOnceAndNothingIsProbed) {
  std::string a, b, other;
  Names(&a, &b, &other);
  using E = test::FaultEnv;
  auto calls = [&](E::Op op) { return env_.calls(op); };
  uint64_t mk = calls(E::kMkdir), st = calls(E::kStat), cr = calls(E::kCreate);
  // A new file: its folder and the bucket's, then one create; no failed
  // create first, no stat.
  ASSERT_TRUE(Put(3, a, "first").ok());
  EXPECT_EQ(2u, calls(E::kMkdir) - mk);
  EXPECT_EQ(1u, calls(E::kCreate) - cr);
  EXPECT_EQ(0u, calls(E::kStat) - st);
  // A known bucket: no directory work at all.
  mk = calls(E::kMkdir), st = calls(E::kStat), cr = calls(E::kCreate);
  ASSERT_TRUE(Put(3, b, "second").ok());
  EXPECT_EQ(0u, calls(E::kMkdir) - mk);
  EXPECT_EQ(1u, calls(E::kCreate) - cr);
  EXPECT_EQ(0u, calls(E::kStat) - st);
  // A new bucket of a known file: that bucket's mkdir only.
  mk = calls(E::kMkdir), st = calls(E::kStat), cr = calls(E::kCreate);
  ASSERT_TRUE(Put(3, other, "third").ok());
  EXPECT_EQ(1u, calls(E::kMkdir) - mk);
  EXPECT_EQ(1u, calls(E::kCreate) - cr);
  EXPECT_EQ(0u, calls(E::kStat) - st);
  // The ctime read from the open file is the one a GET sees: the copies
  // count as checked, so a verifying GET reads none of their bytes.
  uint64_t reads = calls(E::kRead);
  EXPECT_EQ("first", ReadBack(3, a));
  EXPECT_EQ("second", ReadBack(3, b));
  EXPECT_EQ("third", ReadBack(3, other));
  EXPECT_EQ(0u, calls(E::kRead) - reads);
  // After a restart the buckets found on disk are known too.
  store_.reset();
  SetUp();
  std::string same;
  for (int i = 0; same.empty(); ++i) {
    std::string n = "r" + std::to_string(i);
    if (NameBucket(n) == NameBucket(a)) same = n;
  }
  mk = calls(E::kMkdir);
  ASSERT_TRUE(Put(3, same, "fourth").ok());
  EXPECT_EQ(0u, calls(E::kMkdir) - mk);
}

TEST_F(RecordStoreDirsTest, AFolderRemovedBehindTheStoreIsMadeAgain) {
  std::string a, b, other;
  Names(&a, &b, &other);
  ASSERT_TRUE(Put(3, a, "first").ok());
  // The bucket folder goes behind the store's back (an operator, a cleanup).
  ASSERT_TRUE(store_->Delete(3, a).ok());
  ASSERT_EQ(0, rmdir(BucketDir(3, a).c_str())) << BucketDir(3, a);
  ASSERT_TRUE(Put(3, b, "second").ok());
  EXPECT_EQ("second", ReadBack(3, b));
  // The whole file folder goes.
  ASSERT_TRUE(store_->Delete(3, b).ok());
  ASSERT_EQ(0, rmdir(BucketDir(3, b).c_str()));
  ASSERT_EQ(0, rmdir(FileDir(3).c_str())) << FileDir(3);
  ASSERT_TRUE(Put(3, a, "third").ok());
  EXPECT_EQ("third", ReadBack(3, a));
  // The store's own pruning: the next PUT makes the folders again.
  ASSERT_TRUE(store_->Delete(3, a).ok());
  store_->PruneFileDirs(3);
  struct stat st;
  ASSERT_NE(0, stat(FileDir(3).c_str(), &st));
  ASSERT_TRUE(Put(3, other, "fourth").ok());
  EXPECT_EQ("fourth", ReadBack(3, other));
  // Whole-file deletes too.
  uint64_t removed = 0;
  ASSERT_TRUE(store_->DeleteFile(3, &removed).ok());
  EXPECT_EQ(1u, removed);
  ASSERT_TRUE(Put(3, other, "fifth").ok());
  EXPECT_EQ("fifth", ReadBack(3, other));
  // The rename path (no O_TMPFILE) also makes a removed bucket again.
  env_.Inject(test::FaultEnv::kCreate,
              test::FaultEnv::Fault::Error(EOPNOTSUPP).On("/files/").Times(1));
  ASSERT_TRUE(Put(3, a, "sixth").ok());  // falls back to temp file + rename for good
  ASSERT_TRUE(store_->Delete(3, a).ok());
  ASSERT_EQ(0, rmdir(BucketDir(3, a).c_str()));
  ASSERT_TRUE(Put(3, b, "seventh").ok());
  EXPECT_EQ("seventh", ReadBack(3, b));
  EXPECT_EQ(0u, test::CountFiles(store_->data_dir() + "/tmp"));
}

}  // namespace
}  // namespace st
