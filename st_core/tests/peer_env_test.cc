// The peer on a faulty disk (issue 11): a fault-injecting Env under the
// record store gives EIO, ENOSPC, short writes and stuck disks; the peer
// answers each with the right error code, loses nothing, and keeps serving
// other clients while a disk operation or an infofile lock holds one up.
#include <signal.h>
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "fault_env.h"
#include "infofile_util.h"
#include "peer_harness.h"

namespace st {
namespace {

using test::Client;
using test::DataOf;
using test::ErrorMessage;
using test::ErrorOf;
using test::FaultEnv;
using Fault = test::FaultEnv::Fault;
using test::IsOk;
using test::PollFor;
using test::PutFrame;
using test::Reply;
using test::TestPeer;

uint16_t Code(ErrorCode c) { return static_cast<uint16_t>(c); }

class PeerEnvTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }

  StoreOptions Store(bool sync = false) {
    StoreOptions so;
    so.data_dir = data_.path() + "/data";
    so.env = &env_;
    so.sync = sync;
    return so;
  }

  // Regular files under the store's files/ and tmp/ (records, sidecars,
  // leftovers).
  size_t FilesOnDisk() const {
    return test::CountFiles(data_.path() + "/data/files") +
           test::CountFiles(data_.path() + "/data/tmp");
  }

  test::TempDir data_;
  FaultEnv env_{Env::Default()};
};

// A failed write of a record is refused with the errno's code, leaves no
// file behind, and the records stored before stay readable; once the disk
// is healthy the same PUT succeeds.
TEST_F(PeerEnvTest, WriteErrorsAreRefusedAndLoseNothing) {
  TestPeer peer(ServerOptions(), Store());
  Client c(peer.port());
  ASSERT_TRUE(IsOk(c.Call(PutFrame(1, 7, 0, "kept", "old bytes"))));
  const size_t files = FilesOnDisk();
  const uint64_t used = peer.store()->used_bytes();

  struct Case {
    const char* what;
    FaultEnv::Op op;
    FaultEnv::Fault fault;
    ErrorCode code;
  };
  const Case cases[] = {
      {"EIO on write", FaultEnv::kWrite, Fault::Error(EIO), ErrorCode::kIoError},
      {"ENOSPC on write", FaultEnv::kWrite, Fault::Error(ENOSPC), ErrorCode::kNoSpace},
      {"short write, then ENOSPC", FaultEnv::kWrite, Fault::ShortWrite(5, ENOSPC),
       ErrorCode::kNoSpace},
      {"EIO on link", FaultEnv::kLink, Fault::Error(EIO), ErrorCode::kIoError},
      {"EDQUOT on create", FaultEnv::kCreate, Fault::Error(EDQUOT), ErrorCode::kNoSpace},
  };
  uint64_t seq = 10;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    env_.Inject(k.op, k.fault);
    Reply r = c.Call(PutFrame(++seq, 7, 0, "new", std::string(1000, 'n')));
    EXPECT_EQ(Code(k.code), ErrorOf(r)) << ErrorMessage(r);
    if (k.code == ErrorCode::kNoSpace) {
      EXPECT_NE(std::string::npos, ErrorMessage(r).find("put the copy on another peer"))
          << ErrorMessage(r);
    }
    env_.Clear();
    EXPECT_EQ(Code(ErrorCode::kNotFound), ErrorOf(c.Call(EncodeGet(++seq, 7, "new"))));
    EXPECT_EQ("old bytes", DataOf(c.Call(EncodeGet(++seq, 7, "kept"))));
    EXPECT_EQ(files, FilesOnDisk()) << "a partial record or temporary file was left behind";
    EXPECT_EQ(used, peer.store()->used_bytes());
  }
  EXPECT_GE(env_.fired(), 5u);
  ASSERT_TRUE(IsOk(c.Call(PutFrame(++seq, 7, 0, "new", std::string(1000, 'n')))));
  EXPECT_EQ(std::string(1000, 'n'), DataOf(c.Call(EncodeGet(++seq, 7, "new"))));
}

// The same on a filesystem without O_TMPFILE, where a record is written to a
// temporary file and renamed: a short write removes the temporary file.
TEST_F(PeerEnvTest, ShortWriteOnTheRenamePathLeavesNoTemporaryFile) {
  TestPeer peer(ServerOptions(), Store());
  env_.Inject(FaultEnv::kCreate,
              Fault::Error(EOPNOTSUPP).On("/data/files/").Times(1));  // no O_TMPFILE
  Client c(peer.port());
  ASSERT_TRUE(IsOk(c.Call(PutFrame(1, 7, 0, "a", "first"))));
  env_.Inject(FaultEnv::kWrite, Fault::ShortWrite(3, ENOSPC).On("/data/tmp/"));
  Reply r = c.Call(PutFrame(2, 7, 0, "b", "second record"));
  EXPECT_EQ(Code(ErrorCode::kNoSpace), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(0u, test::CountFiles(data_.path() + "/data/tmp"));
  env_.Clear();
  EXPECT_EQ(Code(ErrorCode::kNotFound), ErrorOf(c.Call(EncodeGet(3, 7, "b"))));
  EXPECT_EQ("first", DataOf(c.Call(EncodeGet(4, 7, "a"))));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(5, 7, 0, "b", "second record"))));
}

// Under --sync a failed fsync is an IO_ERROR and the record is not stored.
TEST_F(PeerEnvTest, FsyncErrorUnderSyncIsRefused) {
  TestPeer peer(ServerOptions(), Store(/*sync=*/true));
  Client c(peer.port());
  ASSERT_TRUE(IsOk(c.Call(PutFrame(1, 7, 0, "a", "A"))));
  env_.Inject(FaultEnv::kSyncFile, Fault::Error(EIO));
  Reply r = c.Call(PutFrame(2, 7, 0, "b", "B"));
  EXPECT_EQ(Code(ErrorCode::kIoError), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("fsync")) << ErrorMessage(r);
  env_.Clear();
  EXPECT_EQ(Code(ErrorCode::kNotFound), ErrorOf(c.Call(EncodeGet(3, 7, "b"))));
  EXPECT_EQ("A", DataOf(c.Call(EncodeGet(4, 7, "a"))));
}

// A read error while a GET verifies a record (the first GET after a restart)
// is an IO_ERROR, not corruption and not garbage; the record is still there.
TEST_F(PeerEnvTest, ReadErrorDuringVerificationIsAnIoError) {
  {
    TestPeer first(ServerOptions(), Store());
    Client c(first.port());
    ASSERT_TRUE(IsOk(c.Call(PutFrame(1, 7, 0, "a", std::string(100000, 'a')))));
  }
  TestPeer peer(ServerOptions(), Store());  // restarted: "a" is not verified yet
  env_.Inject(FaultEnv::kRead, Fault::Error(EIO).On("/data/files/").Times(1));
  Client c(peer.port());
  Reply r = c.Call(EncodeGet(2, 7, "a"));
  EXPECT_EQ(Code(ErrorCode::kIoError), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(std::string(100000, 'a'), DataOf(c.Call(EncodeGet(3, 7, "a"))));
}

// A stuck fsync under --sync holds up only its own PUT: other clients are
// served meanwhile, a second PUT of the same record waits for the first
// instead of racing it, and both are answered once the disk moves.
TEST_F(PeerEnvTest, StuckFsyncDoesNotStallThePeer) {
  TestPeer peer(ServerOptions(), Store(/*sync=*/true));
  Client setup(peer.port());
  ASSERT_TRUE(IsOk(setup.Call(PutFrame(1, 7, 0, "other", "O"))));
  env_.Inject(FaultEnv::kSyncFile, Fault::Stuck());
  Client a(peer.port());
  a.Send(PutFrame(2, 7, 0, "slow", "S"));
  ASSERT_TRUE(PollFor([&] { return env_.blocked() == 1; }, 10)) << "the PUT never reached fsync";

  Client b(peer.port());
  Reply ping = b.Call(EncodePing(3), 3);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), ping.h.type) << "PING not served while fsync hangs";
  EXPECT_EQ("O", DataOf(b.Call(EncodeGet(4, 7, "other"), 3)));
  EXPECT_EQ(Code(ErrorCode::kNotFound), ErrorOf(b.Call(EncodeGet(5, 7, "slow"), 3)))
      << "a record was visible before its PUT was answered";
  b.Send(PutFrame(6, 7, 0, "slow", "S"));  // the same record: waits for the first
  EXPECT_TRUE(b.Read(0.3).eof) << "the second PUT did not wait for the first";
  EXPECT_EQ(1, env_.blocked());

  env_.Release();
  EXPECT_TRUE(IsOk(a.Read()));
  EXPECT_TRUE(IsOk(b.Read()));  // an idempotent retry of the stored record
  EXPECT_EQ("S", DataOf(b.Call(EncodeGet(7, 7, "slow"))));
}

// Under --sync, the PUTs that arrive while one group fsync runs are written
// and made durable together by the next one: 40 PUTs cost a few syncfs, not
// 40 fsyncs, and none is answered before its batch is synced.
TEST_F(PeerEnvTest, GroupFsyncBatchesThePutsOfALoopTurn) {
  TestPeer peer(ServerOptions(), Store(/*sync=*/true));
  env_.Inject(FaultEnv::kSyncFile, Fault::Stuck());
  Client c(peer.port());
  std::string batch;
  for (int i = 0; i < 40; ++i) batch += PutFrame(i + 1, 7, 0, "g" + std::to_string(i), "data");
  c.Send(batch);
  ASSERT_TRUE(PollFor([&] { return env_.blocked() == 1; }, 10)) << "no group fsync began";
  EXPECT_TRUE(c.Read(0.2).eof) << "a PUT was answered before its group fsync";
  env_.Release();
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(IsOk(c.Read())) << i;
  EXPECT_LE(env_.calls(FaultEnv::kSyncFile), 3u);  // the first PUT's batch, then the other 39
  EXPECT_GE(env_.calls(FaultEnv::kSyncFile), 1u);
}

// --sync-each: an fdatasync per record (and its directory), no syncfs.
TEST_F(PeerEnvTest, SyncEachFsyncsEveryRecord) {
  StoreOptions so = Store(/*sync=*/true);
  so.sync_each = true;
  TestPeer peer(ServerOptions(), so);
  Client c(peer.port());
  const uint64_t files = env_.calls(FaultEnv::kSyncFile), dirs = env_.calls(FaultEnv::kSyncDir);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(IsOk(c.Call(PutFrame(i + 1, 7, 0, "e" + std::to_string(i), "d"))));
  EXPECT_EQ(files + 5, env_.calls(FaultEnv::kSyncFile));  // PEER_ID was synced before
  EXPECT_GE(env_.calls(FaultEnv::kSyncDir), dirs + 5);
}

// A GET whose verification reads a stuck disk holds up only itself.
TEST_F(PeerEnvTest, StuckVerificationDoesNotStallThePeer) {
  {
    TestPeer first(ServerOptions(), Store());
    Client c(first.port());
    ASSERT_TRUE(IsOk(c.Call(PutFrame(1, 7, 0, "cold", "C"))));
  }
  TestPeer peer(ServerOptions(), Store());
  env_.Inject(FaultEnv::kRead, Fault::Stuck().On("/data/files/"));
  Client a(peer.port());
  a.Send(EncodeGet(2, 7, "cold"));
  ASSERT_TRUE(PollFor([&] { return env_.blocked() == 1; }, 10)) << "the GET never read the file";
  Client b(peer.port());
  EXPECT_TRUE(IsOk(b.Call(PutFrame(3, 7, 0, "hot", "H"), 3)));
  EXPECT_EQ("H", DataOf(b.Call(EncodeGet(4, 7, "hot"), 3)));  // verified at PUT: no read
  env_.Release();
  EXPECT_EQ("C", DataOf(a.Read()));
}

// The stall test of issue 11: GET_LOCAL on an infofile a writer holds
// locked waits for the lock on a background thread; other clients' PUTs
// and GETs are served meanwhile, and the GET_LOCAL completes once the lock
// is released.
TEST_F(PeerEnvTest, LockedInfofileDuringGetLocalDoesNotStallThePeer) {
  test::TempDir ns;
  ServerOptions sv;
  sv.namespace_dir = ns.path();
  TestPeer peer(sv, Store());
  Client setup(peer.port());
  ASSERT_TRUE(IsOk(setup.Call(PutFrame(1, 3, 0, "r", "R"))));
  std::string infofile = ns.path() + "/f";
  test::WriteInfofile(infofile, 3, {{peer.peer_id(), peer.addr()}}, {{"r", 0, 0}});

  sqlite3* writer = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open(infofile.c_str(), &writer));
  sqlite3_busy_timeout(writer, 10000);  // the peer's namespace walk may be reading it
  ASSERT_EQ(SQLITE_OK, sqlite3_exec(writer, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr));

  Client a(peer.port());
  a.Send(EncodeGetLocal(2, RingHeader{3, 1, "/f", {peer.addr()}}));
  ASSERT_TRUE(PollFor([&] { return peer.server()->round_count() == 1; }, 10));

  // Within the infofile's 5 s busy timeout: the old peer waited for the lock
  // on its event loop and answered none of these.
  Client b(peer.port());
  for (int i = 0; i < 20; ++i) {
    std::string name = "during" + std::to_string(i);
    ASSERT_TRUE(IsOk(b.Call(PutFrame(10 + 2 * i, 3, 0, name, name), 2))) << i;
    ASSERT_EQ(name, DataOf(b.Call(EncodeGet(11 + 2 * i, 3, name), 2))) << i;
  }
  EXPECT_TRUE(a.Read(0.05).eof) << "GET_LOCAL answered while its infofile was locked";

  ASSERT_EQ(SQLITE_OK, sqlite3_exec(writer, "COMMIT", nullptr, nullptr, nullptr));
  sqlite3_close(writer);
  uint16_t error;
  std::string message;
  auto list = test::ReadLocalList(&a, 2, &error, &message);
  ASSERT_EQ(0, error) << message;
  ASSERT_EQ(1u, list.size());
  EXPECT_EQ("r", list[0].name);
}

}  // namespace
}  // namespace st
