// The server over real sockets: each TestPeer runs an event loop in a thread.
#include "server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "coding.h"
#include "crc32c.h"
#include "infofile_util.h"
#include "name_codec.h"
#include "peer_harness.h"
#include "test_util.h"

namespace st {
namespace {

using test::Client;
using test::ErrorMessage;
using test::ErrorOf;
using test::ErrorPeers;
using test::PutFrame;
using test::ReadLocalList;
using test::Reply;

class TestPeer {
 public:
  explicit TestPeer(const std::string& namespace_dir = "", double timeout_base = 2,
                    double timeout_per_peer = 0.5, uint32_t max_frame = kDefaultMaxFrame,
                    double scrub_interval = 86400) {
    ServerOptions sv;
    sv.namespace_dir = namespace_dir;
    sv.ring_timeout_base_s = timeout_base;
    sv.ring_timeout_per_peer_s = timeout_per_peer;
    sv.max_frame = max_frame;
    sv.scrub_interval_s = scrub_interval;
    Init(sv, "");
  }
  // Any server options; data_dir empty: a fresh temporary directory.
  TestPeer(const ServerOptions& sv, const std::string& data_dir) { Init(sv, data_dir); }
  ~TestPeer() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    loop_->StopFromAnyThread();
    thread_.join();
    server_.reset();
  }

  void Init(const ServerOptions& sv, const std::string& data_dir) {
    StoreOptions so;
    so.data_dir = data_dir.empty() ? dir_.path() + "/data" : data_dir;
    EXPECT_TRUE(RecordStore::Open(so, &store_).ok());
    EXPECT_TRUE(EventLoop::Create(&loop_).ok());
    server_ = std::make_unique<Server>(loop_.get(), store_.get(), sv);
    EXPECT_TRUE(server_->Start().ok());
    thread_ = std::thread([this] { loop_->Run(); });
  }

  int port() const { return server_->port(); }
  std::string addr() const { return server_->advertise(); }
  const std::string& peer_id() const { return store_->peer_id(); }
  const std::string& data_dir() const { return store_->data_dir(); }
  Server* server() { return server_.get(); }

  // Runs fn on the peer's loop thread and returns its result: the server's
  // state belongs to that thread. fn runs after the batch of events the loop
  // is handling, so this is also a barrier: whatever the peer was doing when
  // it was called is done when it returns.
  template <typename F>
  auto OnLoop(F fn) -> decltype(fn()) {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto result = task->get_future();
    loop_->Post([task] { (*task)(); });
    return result.get();
  }
  // What tests wait for, read on the loop thread.
  size_t ConnectionCount() {
    return OnLoop([this] { return server_->connection_count(); });
  }
  size_t ClientCount() {
    return OnLoop([this] { return server_->client_count(); });
  }
  // Scrubs begun so far, and whether one is running (needs a namespace root).
  std::pair<uint64_t, bool> ScrubRuns() {
    return OnLoop([this] {
      return std::make_pair(server_->scrubber()->runs(), server_->scrubber()->running());
    });
  }

 private:
  test::TempDir dir_;
  std::unique_ptr<RecordStore> store_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }
};

// The request table (server.h): every request type of the protocol has one
// row, and nothing else has one; each row needs the operation of
// docs/capabilities.md.
TEST(RequestTable, EveryRequestTypeHasOneRow) {
  std::map<uint8_t, int> rows;
  for (const Server::RequestType& row : Server::RequestTable()) {
    uint8_t type = static_cast<uint8_t>(row.type);
    ++rows[type];
    EXPECT_NE(nullptr, row.decode) << MsgTypeName(type);
    EXPECT_NE(nullptr, row.handle) << MsgTypeName(type);
    EXPECT_EQ(&row, Server::FindRequestType(type));
  }
  for (int t = 0; t < 256; ++t) {
    const uint8_t type = static_cast<uint8_t>(t);
    const char* name = MsgTypeName(type);
    // Types below 0x80 are requests; the others (OK, DATA, ERROR...) are replies.
    bool request = name != nullptr && type < 0x80;
    EXPECT_EQ(request ? 1 : 0, rows.count(type) ? rows[type] : 0)
        << "type 0x" << std::hex << t << " " << (name != nullptr ? name : "(none)");
    if (!request) {
      EXPECT_EQ(nullptr, Server::FindRequestType(type));
    }
  }
  EXPECT_EQ(12u, Server::RequestTable().size());

  const std::map<MsgType, uint8_t> ops = {
      {MsgType::kPut, kOpWrite},
      {MsgType::kPutChain, kOpWrite},
      {MsgType::kGet, kOpRead},
      {MsgType::kGetLocal, kOpRead},
      {MsgType::kDelete, kOpDelete},
      {MsgType::kDeleteFile, kOpDelete},
      {MsgType::kRingSegment, kOpPeer},
      {MsgType::kScrub, kOpAdmin},
      {MsgType::kListMeta, kOpAdmin},
      {MsgType::kGetMeta, kOpRead},
      {MsgType::kPing, 0},
      {MsgType::kAuth, 0},
  };
  for (const auto& [type, op] : ops) {
    const Server::RequestType* row = Server::FindRequestType(static_cast<uint8_t>(type));
    ASSERT_NE(nullptr, row);
    EXPECT_EQ(op, row->op) << MsgTypeName(static_cast<uint8_t>(type));
  }
  auto flags = [](MsgType t) { return Server::FindRequestType(static_cast<uint8_t>(t))->flags; };
  EXPECT_TRUE(flags(MsgType::kPutChain) & Server::kPeerIfForwarded);
  EXPECT_TRUE(flags(MsgType::kGetMeta) & Server::kOrAdmin);
  EXPECT_TRUE(flags(MsgType::kGet) & Server::kCheckName);
  EXPECT_TRUE(flags(MsgType::kDelete) & Server::kCheckName);
  for (MsgType t : {MsgType::kRingSegment, MsgType::kAuth, MsgType::kPing}) {
    EXPECT_TRUE(flags(t) & Server::kNeverHeld) << MsgTypeName(static_cast<uint8_t>(t));
  }
}

TEST_F(ServerTest, PingAndPipelinedPuts) {
  TestPeer peer;
  Client c(peer.port());
  Reply r = c.Call(EncodePing(77));
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), r.h.type);
  EXPECT_EQ(77u, r.h.seq);
  std::string expected_ping;
  PutStr16(&expected_ping, peer.peer_id());
  PutStr16(&expected_ping, peer.addr());
  EXPECT_EQ(expected_ping, r.payload);

  // 200 PUTs in one write; every reply carries its seq.
  std::string batch;
  for (int i = 0; i < 200; ++i) {
    batch += PutFrame(1000 + i, 5, 0, "rec" + std::to_string(i), std::string(i, 'a' + i % 26));
  }
  c.Send(batch);
  std::set<uint64_t> seqs;
  for (int i = 0; i < 200; ++i) {
    Reply p = c.Read();
    ASSERT_FALSE(p.eof);
    EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), p.h.type) << ErrorMessage(p);
    seqs.insert(p.h.seq);
  }
  EXPECT_EQ(200u, seqs.size());
  EXPECT_EQ(1000u, *seqs.begin());
  // Pipelined GETs.
  batch.clear();
  for (int i = 0; i < 200; ++i) batch += EncodeGet(i, 5, "rec" + std::to_string(i));
  c.Send(batch);
  for (int i = 0; i < 200; ++i) {
    Reply g = c.Read();
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kData), g.h.type);
    DataReply d;
    ASSERT_TRUE(DecodeData(g.payload, &d).ok());
    std::string want(g.h.seq, static_cast<char>('a' + g.h.seq % 26));
    EXPECT_EQ(want, d.data);
    EXPECT_EQ(crc32c::Value(want), d.crc32c);
    EXPECT_EQ(0, d.copy_rank);
  }
}

TEST_F(ServerTest, RequestErrors) {
  TestPeer peer;
  Client c(peer.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound), ErrorOf(c.Call(EncodeGet(1, 9, "nope"))));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound),
            ErrorOf(c.Call(EncodeDelete(2, 9, "nope"))));
  PutRequest bad;
  bad.file_id = 9;
  bad.name = "x";
  bad.data = "data";
  bad.crc32c = 1;
  Reply r = c.Call(EncodePut(3, 0, bad));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kCrcMismatch), ErrorOf(r));
  EXPECT_EQ(3u, r.h.seq);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBadName),
            ErrorOf(c.Call(PutFrame(4, 9, 0, "", "d"))));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBadName),
            ErrorOf(c.Call(PutFrame(4, 9, 0, std::string("a\0b", 3), "d"))));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBadName), ErrorOf(c.Call(EncodeGet(4, 9, ""))));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(5, 9, 0, "x", "one")).h.type);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(6, 9, 0, "x", "one")).h.type);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kExists),
            ErrorOf(c.Call(PutFrame(7, 9, 0, "x", "two"))));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk),
            c.Call(PutFrame(8, 9, 1, "x", "two", kFlagReplace)).h.type);
  Reply g = c.Call(EncodeGet(9, 9, "x"));
  DataReply d;
  ASSERT_TRUE(DecodeData(g.payload, &d).ok());
  EXPECT_EQ("two", d.data);
  EXPECT_EQ(1, d.copy_rank);
  // Unknown type: error, connection stays open.
  r = c.Call(EncodeFrame(static_cast<MsgType>(0x33), 0, 10, "abc"));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kUnknownType), ErrorOf(r));
  EXPECT_EQ(10u, r.h.seq);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(EncodePing(11)).h.type);
  // DELETE_FILE reports how many records it removed.
  c.Call(PutFrame(12, 9, 0, "y", "1"));
  r = c.Call(EncodeDeleteFile(13, 9));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), r.h.type);
  std::string removed;
  PutFixed64(&removed, 2);
  EXPECT_EQ(removed, r.payload);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(14, 9, 0, "e", "")).h.type);
  g = c.Call(EncodeGet(15, 9, "e"));
  ASSERT_TRUE(DecodeData(g.payload, &d).ok());
  EXPECT_EQ("", d.data);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(EncodeDelete(16, 9, "e")).h.type);
}

TEST_F(ServerTest, BadFrameVectorsCloseTheConnection) {
  TestPeer peer;
  auto vectors = nlohmann::json::parse(test::ReadSourceFile("tests/vectors/wire.json"));
  for (const auto& v : vectors["bad_frames"]) {
    SCOPED_TRACE(v["name"].get<std::string>());
    if (v.value("reply", false)) continue;  // a malformed reply: a client's concern, not the peer's
    std::string bytes = test::FromHex(v["hex"].get<std::string>());
    Client c(peer.port());
    Reply r = c.Call(bytes);
    ASSERT_FALSE(r.eof);
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kError), r.h.type);
    ErrorReply e;
    ASSERT_TRUE(DecodeError(r.payload, &e).ok());
    EXPECT_EQ(v["error"].get<std::string>(), ErrorCodeName(e.code));
    EXPECT_FALSE(e.message.empty());
    FrameHeader h;
    ParsePrefix(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0xFFFFFFFFu, &h);
    if (e.code == static_cast<uint16_t>(ErrorCode::kUnknownType)) {
      EXPECT_EQ(h.seq, r.h.seq);
      EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(EncodePing(1)).h.type);
    } else {
      uint64_t want_seq = (h.length < kHeaderSize || e.code == 2) ? 0 : h.seq;
      EXPECT_EQ(want_seq, r.h.seq);
      EXPECT_TRUE(c.ClosedByPeer());
    }
  }
}

TEST_F(ServerTest, OversizedFrameRefusedWithoutReadingTheBody) {
  TestPeer peer("", 2, 0.5, 1024);
  Client c(peer.port());
  std::string big = PutFrame(3, 1, 0, "big", std::string(2000, 'x'));
  c.Send(big.substr(0, 100));
  Reply r = c.Read();
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kFrameTooLarge), ErrorOf(r));
  EXPECT_TRUE(c.ClosedByPeer());
  Client c2(peer.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound), ErrorOf(c2.Call(EncodeGet(1, 1, "big"))));
}

TEST_F(ServerTest, TruncatedPutLeavesNothing) {
  TestPeer peer;
  {
    Client c(peer.port());
    // Accepted first, so that the wait below for no connections at all
    // means this one has been closed (not that it is yet to be accepted).
    ASSERT_TRUE(test::PollFor([&] { return peer.ConnectionCount() == 1; }, 10))
        << "the peer never accepted the connection";
    std::string f = PutFrame(1, 4, 0, "partial", std::string(100000, 'p'));
    c.Send(f.substr(0, f.size() / 2));
  }  // closed mid-frame; one TCP stream: the peer reads the half frame, then the EOF
  ASSERT_TRUE(test::PollFor([&] { return peer.ConnectionCount() == 0; }, 10))
      << "the peer never saw the connection closed mid-frame";
  Client c(peer.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound),
            ErrorOf(c.Call(EncodeGet(2, 4, "partial"))));
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/files"));
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/tmp"));
}

TEST_F(ServerTest, LargeRecordRoundTrip) {
  TestPeer peer;
  Client c(peer.port());
  std::string data(20 * 1024 * 1024, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 12));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(1, 2, 0, "big", data)).h.type);
  // Several GETs pipelined behind one another.
  c.Send(EncodeGet(2, 2, "big") + EncodeGet(3, 2, "big") + EncodePing(4));
  for (uint64_t seq = 2; seq <= 3; ++seq) {
    Reply g = c.Read(30);
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kData), g.h.type);
    EXPECT_EQ(seq, g.h.seq);
    DataReply d;
    ASSERT_TRUE(DecodeData(g.payload, &d).ok());
    EXPECT_TRUE(d.data == data);
  }
  EXPECT_EQ(4u, c.Read().h.seq);
}

// ---- GET_LOCAL ----------------------------------------------------------------

using test::WriteInfofile;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(ServerTest, GetLocalRingOfThree) {
  test::TempDir ns;
  const uint64_t kFile = 42;
  std::vector<std::unique_ptr<TestPeer>> peers;
  for (int i = 0; i < 3; ++i) peers.push_back(std::make_unique<TestPeer>(ns.path()));
  RingHeader ring{kFile, 1, "/d/f", {}};
  std::vector<std::pair<std::string, std::string>> peer_rows;
  for (auto& p : peers) {
    ring.peers.push_back(p->addr());
    peer_rows.emplace_back(p->peer_id(), p->addr());
  }
  // x2: record r has rank 0 on peer r%3 and rank 1 on peer (r+1)%3.
  std::vector<std::tuple<std::string, int, int>> copies;
  const int kRecords = 60;
  for (int r = 0; r < kRecords; ++r) {
    std::string name = "rec" + std::to_string(r);
    for (int rank = 0; rank < 2; ++rank) {
      int idx = (r + rank) % 3;
      Client c(peers[idx]->port());
      ASSERT_EQ(
          static_cast<uint8_t>(MsgType::kOk),
          c.Call(PutFrame(1, kFile, static_cast<uint8_t>(rank), name, "data of " + name)).h.type);
      if (r != 7 || rank != 0) copies.emplace_back(name, rank, idx);  // rec7@0 uncommitted
    }
  }
  // An uncommitted record is never revealed.
  {
    Client c(peers[0]->port());
    c.Call(PutFrame(1, kFile, 0, "uncommitted", "x"));
  }
  ASSERT_EQ(0, mkdir((ns.path() + "/d").c_str(), 0755));
  WriteInfofile(ns.path() + "/d/f", kFile, peer_rows, copies);

  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>(peers[i]->port()));
    clients[i]->Send(EncodeGetLocal(100 + i, ring));
  }
  std::map<std::string, int> seen;
  for (int i = 0; i < 3; ++i) {
    uint16_t error;
    std::string message;
    auto list = ReadLocalList(clients[i].get(), 100 + i, &error, &message);
    ASSERT_EQ(0, error) << message;
    for (const auto& e : list) {
      ++seen[e.name];
      EXPECT_EQ("data of " + e.name, ReadFile(e.path)) << e.path;
      EXPECT_EQ(e.size, ("data of " + e.name).size());
      EXPECT_EQ(0u, e.path.find(peers[i]->data_dir())) << e.path;
      // rec7's rank-0 copy is uncommitted: its rank-1 copy on peer 8%3 is revealed.
      if (e.name == "rec7") {
        EXPECT_EQ(1, e.copy_rank);
        EXPECT_EQ(8 % 3, i);
      } else {
        EXPECT_EQ(0, e.copy_rank) << e.name;
      }
    }
  }
  EXPECT_EQ(static_cast<size_t>(kRecords), seen.size());
  for (const auto& kv : seen) EXPECT_EQ(1, kv.second) << kv.first;
  EXPECT_EQ(0u, seen.count("uncommitted"));

  // A late client gets the cached result.
  Client late(peers[1]->port());
  late.Send(EncodeGetLocal(7, ring));
  uint16_t error;
  std::string message;
  auto list = ReadLocalList(&late, 7, &error, &message);
  EXPECT_EQ(0, error) << message;
  EXPECT_EQ(19u, list.size());  // 20 rank-0 records, rec7@0 uncommitted
}

TEST_F(ServerTest, GetLocalSinglePeerAndErrors) {
  test::TempDir ns;
  TestPeer peer(ns.path());
  TestPeer no_ns;
  Client c(peer.port());
  c.Call(PutFrame(1, 3, 0, "a", "A"));
  WriteInfofile(ns.path() + "/f", 3, {{peer.peer_id(), peer.addr()}}, {{"a", 0, 0}});
  RingHeader ring{3, 1, "/f", {peer.addr()}};
  c.Send(EncodeGetLocal(5, ring));
  uint16_t error;
  std::string message;
  auto list = ReadLocalList(&c, 5, &error, &message);
  ASSERT_EQ(0, error) << message;
  ASSERT_EQ(1u, list.size());
  EXPECT_EQ("a", list[0].name);

  RingHeader other{3, 1, "/f", {"127.0.0.1:1"}};
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotInRing),
            ErrorOf(c.Call(EncodeGetLocal(6, other))));
  RingHeader bad_name{3, 1, "/../f", {peer.addr()}};
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBadName),
            ErrorOf(c.Call(EncodeGetLocal(7, bad_name))));
  RingHeader missing{3, 2, "/nope", {peer.addr()}};
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace),
            ErrorOf(c.Call(EncodeGetLocal(8, missing))));
  RingHeader wrong_id{4, 1, "/f", {peer.addr()}};  // meta.file_id is 3
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace),
            ErrorOf(c.Call(EncodeGetLocal(9, wrong_id))));
  Client c2(no_ns.port());
  RingHeader r2{3, 1, "/f", {no_ns.addr()}};
  Reply r = c2.Call(EncodeGetLocal(10, r2));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("--namespace"));
}

TEST_F(ServerTest, GetLocalPeerUnreachable) {
  test::TempDir ns;
  TestPeer peer(ns.path());
  WriteInfofile(ns.path() + "/f", 3, {{peer.peer_id(), peer.addr()}}, {});
  // A port nobody listens on.
  std::string dead;
  int s = test::BindLoopback(false, &dead);
  ASSERT_GE(s, 0);
  close(s);
  Client c(peer.port());
  RingHeader ring{3, 1, "/f", {peer.addr(), dead}};
  Reply r = c.Call(EncodeGetLocal(5, ring));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kPeerUnreachable), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find(dead)) << ErrorMessage(r);
  EXPECT_EQ(std::vector<std::string>{dead}, ErrorPeers(r));  // as a field, not only in the text
  // The round was dropped: a retry tries again.
  r = c.Call(EncodeGetLocal(6, ring));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kPeerUnreachable), ErrorOf(r));
}

TEST_F(ServerTest, GetLocalTimeoutNamesMissingPeers) {
  test::TempDir ns;
  TestPeer peer(ns.path(), 0.3, 0.1);
  WriteInfofile(ns.path() + "/f", 3, {{peer.peer_id(), peer.addr()}}, {});
  // A "peer" that accepts connections (in the kernel backlog) but never answers.
  std::string mute;
  int s = test::BindLoopback(true, &mute);
  ASSERT_GE(s, 0);
  Client c(peer.port());
  RingHeader ring{3, 1, "/f", {peer.addr(), mute}};
  Reply r = c.Call(EncodeGetLocal(5, ring));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kTimeout), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find(mute)) << ErrorMessage(r);
  EXPECT_EQ(std::string::npos, ErrorMessage(r).find(peer.addr() + ",")) << ErrorMessage(r);
  EXPECT_EQ(std::vector<std::string>{mute}, ErrorPeers(r));
  close(s);
}

TEST_F(ServerTest, GetLocalInvariantViolation) {
  // Two peers with their own (inconsistent) namespaces both hold "x" at rank 0.
  test::TempDir ns0, ns1;
  TestPeer p0(ns0.path()), p1(ns1.path());
  for (TestPeer* p : {&p0, &p1}) {
    Client c(p->port());
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(1, 8, 0, "x", "X")).h.type);
  }
  WriteInfofile(ns0.path() + "/f", 8, {{p0.peer_id(), p0.addr()}}, {{"x", 0, 0}});
  WriteInfofile(ns1.path() + "/f", 8, {{p1.peer_id(), p1.addr()}}, {{"x", 0, 0}});
  RingHeader ring{8, 1, "/f", {p0.addr(), p1.addr()}};
  Client c0(p0.port()), c1(p1.port());
  c0.Send(EncodeGetLocal(1, ring));
  c1.Send(EncodeGetLocal(2, ring));
  for (Client* c : {&c0, &c1}) {
    Reply r = c->Read();
    EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kInvariant), ErrorOf(r));
    std::string m = ErrorMessage(r);
    EXPECT_NE(std::string::npos, m.find("'x'")) << m;
    EXPECT_NE(std::string::npos, m.find(p0.addr())) << m;
    EXPECT_NE(std::string::npos, m.find(p1.addr())) << m;
  }
}

TEST_F(ServerTest, GetLocalLargeSegmentsAreChunked) {
  test::TempDir ns;
  TestPeer p0(ns.path()), p1(ns.path());
  const int kRecords = 30000;  // ~1.2 MiB of names per segment: several RING_SEGMENT frames
  std::vector<std::tuple<std::string, int, int>> copies;
  std::string batch0, batch1;
  for (int r = 0; r < kRecords; ++r) {
    std::string name = "a-fairly-long-record-name-" + std::to_string(r);
    int idx = r % 2;
    (idx == 0 ? batch0 : batch1) += PutFrame(r, 11, 0, name, "");
    copies.emplace_back(name, 0, idx);
  }
  Client c0(p0.port()), c1(p1.port());
  c0.Send(batch0);
  c1.Send(batch1);
  for (int i = 0; i < kRecords / 2; ++i) {
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c0.Read().h.type);
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c1.Read().h.type);
  }
  WriteInfofile(ns.path() + "/f", 11, {{p0.peer_id(), p0.addr()}, {p1.peer_id(), p1.addr()}},
                copies);
  RingHeader ring{11, 1, "/f", {p0.addr(), p1.addr()}};
  c0.Send(EncodeGetLocal(1, ring));
  uint16_t error;
  std::string message;
  auto list = ReadLocalList(&c0, 1, &error, &message);
  ASSERT_EQ(0, error) << message;
  EXPECT_EQ(static_cast<size_t>(kRecords / 2), list.size());
  c1.Send(EncodeGetLocal(2, ring));
  list = ReadLocalList(&c1, 2, &error, &message);
  ASSERT_EQ(0, error) << message;
  EXPECT_EQ(static_cast<size_t>(kRecords / 2), list.size());
}

// GET_LOCAL as of a past generation (AS_OF, docs/snapshots.md) on a ring of
// two peers holding copies and a third holding none (which forwards their
// segments, AS_OF with them): the records of that generation with the bytes
// they had then, each revealed once; a ring of another as_of at the same
// time does not mix.
TEST_F(ServerTest, GetLocalAsOfAPastGeneration) {
  test::TempDir ns;
  TestPeer p0(ns.path()), p1(ns.path()), p2(ns.path());
  const uint64_t kFile = 21;
  struct Copy {
    TestPeer* peer;
    const char* name;
    uint8_t rank;
    const char* data;
  };
  // a's version 1 is stored as "v1/a" (docs/infofile.md, "Versions").
  const Copy copies[] = {{&p0, "a", 0, "a version 0"}, {&p1, "a", 1, "a version 0"},
                         {&p1, "v1/a", 0, "a v1"},     {&p0, "v1/a", 1, "a v1"},
                         {&p1, "b", 0, "bee"},         {&p0, "b", 1, "bee"},
                         {&p0, "c", 0, "sea"},         {&p1, "c", 1, "sea"}};
  for (const Copy& cp : copies) {
    Client c(cp.peer->port());
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk),
              c.Call(PutFrame(1, kFile, cp.rank, cp.name, cp.data)).h.type);
  }
  // 1: a and b (WriteInfofile); 2: a replaced by "v1/a"; 3: c appended;
  // 4: b deleted. A snapshot pins 1 (format 4).
  // A file of the tracker before retained_copies (snapshot_peer_test: with it).
  const std::string history =
      "DROP TABLE retained_copies; ALTER TABLE copy_history DROP COLUMN retained_until;"
      "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
      "committed_at, until, until_at) VALUES('a', 0, NULL, 11, 0, 1, 0, 2, 0);"
      "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
      "VALUES('a', 0, 0, 1, 2, NULL, 0), ('a', 1, 1, 1, 2, NULL, 0);"
      "DELETE FROM copies WHERE name = 'a';"
      "INSERT INTO copies VALUES('a', 0, 1, 2), ('a', 1, 0, 2);"
      "UPDATE records SET version = 1, stored_as = 'v1/a', commit_seq = 2 WHERE name = 'a';"
      "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) VALUES('c', 3, 0, 3, 0);"
      "INSERT INTO copies VALUES('c', 0, 0, 3), ('c', 1, 1, 3);"
      "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
      "committed_at, until, until_at) VALUES('b', 0, NULL, 3, 0, 1, 0, 4, 0);"
      "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
      "VALUES('b', 0, 1, 1, 4, NULL, 0), ('b', 1, 0, 1, 4, NULL, 0);"
      "DELETE FROM copies WHERE name = 'b'; DELETE FROM records WHERE name = 'b';"
      "INSERT INTO snapshots VALUES('s1', 1, 0, '');"
      "UPDATE meta SET value = 4 WHERE key IN ('generation', 'format_version');";
  WriteInfofile(ns.path() + "/f", kFile,
                {{p0.peer_id(), p0.addr()}, {p1.peer_id(), p1.addr()}, {p2.peer_id(), p2.addr()}},
                {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 1}, {"b", 1, 0}}, "storetorrent-infofile",
                history);

  // What each peer reveals of ring `ring`, asked of both at once: name ->
  // (peer index, rank, bytes). Fails on a record revealed twice.
  using Revealed = std::map<std::string, std::tuple<int, int, std::string>>;
  auto ask = [&](const RingHeader& ring, uint64_t seq) {
    Client c0(p0.port()), c1(p1.port()), c2(p2.port());
    for (Client* c : {&c0, &c1, &c2}) c->Send(EncodeGetLocal(seq, ring));
    Revealed out;
    int i = 0;
    for (Client* c : {&c0, &c1, &c2}) {
      uint16_t error;
      std::string message;
      auto list = ReadLocalList(c, seq, &error, &message);
      EXPECT_EQ(0, error) << message;
      for (const auto& e : list) {
        std::string bytes = ReadFile(e.path);
        EXPECT_EQ(e.size, bytes.size()) << e.path;
        EXPECT_EQ(0u, out.count(e.name)) << e.name << " revealed twice";
        out[e.name] = {i, e.copy_rank, bytes};
      }
      ++i;
    }
    return out;
  };
  RingHeader now{kFile, 4, "/f", {p0.addr(), p1.addr(), p2.addr()}};
  RingHeader then = now, three = now;
  then.as_of = 1;
  three.as_of = 3;
  // Both rings at once, on the same peers: segments of one never reach the other.
  std::future<Revealed> past = std::async(std::launch::async, [&] { return ask(then, 1); });
  Revealed current = ask(now, 2);
  EXPECT_EQ((Revealed{{"a", {1, 0, "a v1"}}, {"c", {0, 0, "sea"}}}), current);
  // As of 1: a at version 0 (replaced since), b (deleted since), no c.
  EXPECT_EQ((Revealed{{"a", {0, 0, "a version 0"}}, {"b", {1, 0, "bee"}}}), past.get());
  EXPECT_EQ((Revealed{{"a", {1, 0, "a v1"}}, {"b", {1, 0, "bee"}}, {"c", {0, 0, "sea"}}}),
            ask(three, 3));
  // AS_OF = generation is today's ring.
  RingHeader same = now;
  same.as_of = 4;
  EXPECT_EQ(current, ask(same, 4));

  // A file without history refuses an older generation on every peer.
  WriteInfofile(ns.path() + "/g", kFile + 1, {{p0.peer_id(), p0.addr()}}, {{"a", 0, 0}},
                "storetorrent-infofile", "DROP TABLE record_history;");
  Client c(p0.port());
  Reply r = c.Call(EncodeGetLocal(5, RingHeader{kFile + 1, 1, "/g", {p0.addr()}, 0}));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("keeps no history")) << ErrorMessage(r);
}

// ---- SCRUB ---------------------------------------------------------------------

// Sets a file's mtime `seconds` in the past.
void Backdate(const std::string& path, double seconds) {
  struct timeval tv[2];
  gettimeofday(&tv[0], nullptr);
  tv[0].tv_sec -= static_cast<time_t>(seconds);
  tv[1] = tv[0];
  ASSERT_EQ(0, utimes(path.c_str(), tv)) << path << ": " << strerror(errno);
}

std::string RecordFile(const TestPeer& peer, uint64_t fid, const std::string& name, uint8_t rank,
                       const std::string& data) {
  char dir[64];
  snprintf(dir, sizeof(dir), "/files/%016llx/%02x/", static_cast<unsigned long long>(fid),
           static_cast<unsigned>(NameBucket(name)));
  return peer.data_dir() + dir + RecordFileName(EncodeName(name), rank, crc32c::Value(data));
}

ScrubReply ScrubOk(const Reply& r, uint64_t seq) {
  ScrubReply out;
  EXPECT_EQ(seq, r.h.seq);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), r.h.type) << ErrorMessage(r);
  EXPECT_TRUE(DecodeScrubReply(r.payload, &out).ok());
  return out;
}

TEST_F(ServerTest, ScrubRemovesWhatTheInfofileDoesNotCommit) {
  test::TempDir ns;
  TestPeer peer(ns.path());
  Client c(peer.port());
  const double kOld = 2 * 3600;  // the default --scrub-age is 3600 s
  struct Rec {
    uint64_t fid;
    std::string name;
    uint8_t rank;
    bool old;
    bool survives;
  };
  const std::vector<Rec> recs{
      {21, "committed-0", 0, true, true},
      {21, "committed-1", 1, true, true},
      {21, "wrong-rank", 0, true, false},  // committed here at rank 1
      {21, "uncommitted", 0, true, false},  // a crashed writer's leftover
      {21, "others-copy", 0, true, false},  // committed at rank 0 to another peer
      {21, "in-flight", 0, false, true},  // not committed yet, but young
      {22, "deleted-a", 0, true, false},  // file 22 has no infofile
      {22, "deleted-b", 1, true, false},
      {23, "deleted-young", 0, false, true},  // file 23 neither, but the record is young
  };
  uint64_t seq = 0;
  for (const Rec& r : recs) {
    std::string data = "payload of " + r.name;
    Reply rep = c.Call(PutFrame(++seq, r.fid, r.rank, r.name, data));
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), rep.h.type) << ErrorMessage(rep);
    if (r.old) Backdate(RecordFile(peer, r.fid, r.name, r.rank, data), kOld);
  }
  ASSERT_EQ(0, mkdir((ns.path() + "/d").c_str(), 0755));
  WriteInfofile(ns.path() + "/d/f", 21, {{peer.peer_id(), peer.addr()}, {"peer-b", "h:2"}},
                {{"committed-0", 0, 0},
                 {"committed-1", 1, 0},
                 {"wrong-rank", 1, 0},
                 {"others-copy", 0, 1},
                 {"never-arrived", 0, 0}});
  std::string tmp = peer.data_dir() + "/tmp/";
  std::ofstream(tmp + "999-1.tmp") << "left by a crash";
  Backdate(tmp + "999-1.tmp", kOld);
  std::ofstream(tmp + "999-2.tmp") << "a write in flight";

  ScrubReply got = ScrubOk(c.Call(EncodeScrub(100)), 100);
  EXPECT_EQ(3u, got.files);
  EXPECT_EQ(3u, got.removed_uncommitted);
  EXPECT_EQ(2u, got.removed_deleted_files);
  EXPECT_EQ(1u, got.removed_tmp);
  EXPECT_EQ(4u, got.kept);

  for (const Rec& r : recs) {
    SCOPED_TRACE(r.name);
    Reply rep = c.Call(EncodeGet(++seq, r.fid, r.name));
    if (r.survives) {
      ASSERT_EQ(static_cast<uint8_t>(MsgType::kData), rep.h.type) << ErrorMessage(rep);
      DataReply d;
      ASSERT_TRUE(DecodeData(rep.payload, &d).ok());
      EXPECT_EQ("payload of " + r.name, d.data);
      EXPECT_EQ(r.rank, d.copy_rank);
    } else {
      EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound), ErrorOf(rep));
    }
  }
  struct stat st;
  EXPECT_NE(0, stat((peer.data_dir() + "/files/0000000000000016").c_str(), &st))
      << "the deleted file's directories are removed";
  EXPECT_EQ(4u, test::CountFiles(peer.data_dir() + "/files"));
  EXPECT_NE(0, stat((tmp + "999-1.tmp").c_str(), &st));
  EXPECT_EQ(0, stat((tmp + "999-2.tmp").c_str(), &st));

  // Pipelined SCRUBs: each gets its reply; nothing is left to remove.
  c.Send(EncodeScrub(101) + EncodeScrub(102));
  std::set<uint64_t> seqs;
  for (int i = 0; i < 2; ++i) {
    Reply rep = c.Read(30);
    ASSERT_FALSE(rep.eof);
    seqs.insert(rep.h.seq);
    ScrubReply again = ScrubOk(rep, rep.h.seq);
    EXPECT_EQ((ScrubReply{2, 0, 0, 0, 4}), again);  // file 22 is gone
  }
  EXPECT_EQ((std::set<uint64_t>{101, 102}), seqs);

  // A removed record can be written again (its directories come back).
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk),
            c.Call(PutFrame(++seq, 22, 0, "deleted-a", "again")).h.type);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(++seq, 22, "deleted-a")).h.type);
}

// Snapshots (docs/snapshots.md, "Retention"): a past version's copies stay
// while a snapshot refers to them, then go like any uncommitted copy.
TEST_F(ServerTest, ScrubKeepsWhatASnapshotHoldsUntilItIsDeleted) {
  test::TempDir ns;
  ServerOptions sv;
  sv.namespace_dir = ns.path();
  sv.scrub_interval_s = 86400;
  sv.scrub_age_s = 60;  // a short scrub age: what is older than a minute may go
  TestPeer peer(sv, "");
  Client c(peer.port());
  const double kOld = 120;
  // r's version 0 (replaced at 3), its version 1, d (deleted at 4), and m,
  // whose copy here moved to another peer at 2.
  const std::vector<std::string> names{"r", "v1/r", "d", "m"};
  uint64_t seq = 0;
  for (const std::string& name : names) {
    std::string data = "payload of " + name;
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk),
              c.Call(PutFrame(++seq, 31, 0, name, data)).h.type);
    Backdate(RecordFile(peer, 31, name, 0, data), kOld);
  }
  std::string old_at = std::to_string(static_cast<long long>(time(nullptr) - kOld));
  WriteInfofile(
      ns.path() + "/f", 31, {{peer.peer_id(), peer.addr()}, {"peer-b", "h:2"}},
      {{"r", 0, 0}, {"d", 0, 0}, {"m", 0, 0}}, "storetorrent-infofile",
      // a file of the tracker before retained_copies (snapshot_peer_test: with it)
      "DROP TABLE retained_copies; ALTER TABLE copy_history DROP COLUMN retained_until;"
      "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
      "VALUES('m', 0, 0, 1, 2, NULL, " +
          old_at +
          ");"
          "UPDATE copies SET peer_idx = 1, since = 2 WHERE name = 'm';"
          "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
          "committed_at, until, until_at) VALUES('r', 0, NULL, 12, 0, 1, 0, 3, " +
          old_at + "), ('d', 0, NULL, 12, 0, 1, 0, 4, " + old_at +
          ");"
          "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, "
          "until_at) VALUES('r', 0, 0, 1, 3, 'r', " +
          old_at +
          "), "
          "('d', 0, 0, 1, 4, NULL, " +
          old_at +
          ");"
          "UPDATE copies SET since = 3 WHERE name = 'r';"
          "UPDATE records SET version = 1, stored_as = 'v1/r', commit_seq = 3 "
          "WHERE name = 'r';"
          "DELETE FROM copies WHERE name = 'd'; DELETE FROM records WHERE name = 'd';"
          "INSERT INTO snapshots VALUES('s1', 1, 0, '');"
          "UPDATE meta SET value = 4 WHERE key IN ('generation', 'format_version');");
  auto held = [&] {
    std::set<std::string> out;
    for (const std::string& name : names) {
      Reply rep = c.Call(EncodeGet(++seq, 31, name));
      if (rep.h.type == static_cast<uint8_t>(MsgType::kData)) out.insert(name);
    }
    return out;
  };
  // The snapshot at 1 holds r's version 0 and d; not m, which it reads from
  // its current holder.
  ScrubReply got = ScrubOk(c.Call(EncodeScrub(100)), 100);
  EXPECT_EQ(1u, got.removed_uncommitted);
  EXPECT_EQ(3u, got.kept);
  EXPECT_EQ((std::set<std::string>{"r", "v1/r", "d"}), held());
  // The snapshot deleted (the tracker drops its row): they go.
  test::ExecSql(ns.path() + "/f", "DELETE FROM snapshots;");
  got = ScrubOk(c.Call(EncodeScrub(101)), 101);
  EXPECT_EQ(2u, got.removed_uncommitted);
  EXPECT_EQ((std::set<std::string>{"v1/r"}), held());
}

TEST_F(ServerTest, ScrubErrors) {
  TestPeer no_ns;
  Client c(no_ns.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace), ErrorOf(c.Call(EncodeScrub(1))));
  // The connection stays usable; a SCRUB with a payload is a bad frame.
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(EncodePing(2)).h.type);
  c.Send(EncodeFrame(MsgType::kScrub, 0, 3, "x"));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBadFrame), ErrorOf(c.Read()));
  EXPECT_TRUE(c.ClosedByPeer());

  // A namespace root that does not exist: NO_NAMESPACE, nothing removed.
  test::TempDir base;
  TestPeer gone(base.path() + "/missing");
  Client g(gone.port());
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), g.Call(PutFrame(1, 5, 0, "r", "d")).h.type);
  Reply r = g.Call(EncodeScrub(2));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNoNamespace), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), g.Call(EncodeGet(3, 5, "r")).h.type);
}

TEST_F(ServerTest, PeriodicScrub) {
  test::TempDir ns;
  TestPeer peer(ns.path(), 2, 0.5, kDefaultMaxFrame, /*scrub_interval=*/0.2);
  Client c(peer.port());
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(1, 9, 0, "stale", "s")).h.type);
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(2, 9, 0, "kept", "k")).h.type);
  Backdate(RecordFile(peer, 9, "stale", 0, "s"), 7200);
  Backdate(RecordFile(peer, 9, "kept", 0, "k"), 7200);
  WriteInfofile(ns.path() + "/f", 9, {{peer.peer_id(), peer.addr()}}, {{"kept", 0, 0}});
  // A scrub that begins from now on (any earlier one may have missed the
  // backdating or the infofile) and has ended.
  const uint64_t begun = peer.ScrubRuns().first;
  ASSERT_TRUE(test::PollFor(
      [&] {
        auto [runs, running] = peer.ScrubRuns();
        return runs > begun && !running;
      },
      10))
      << "no periodic scrub ran (scrubs begun before: " << begun << ")";
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound), ErrorOf(c.Call(EncodeGet(3, 9, "stale"))))
      << "a periodic scrub ran and kept the stale record";
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(4, 9, "kept")).h.type);
}

TEST_F(ServerTest, StopDuringAScrubWaitingForALock) {
  test::TempDir ns;
  auto peer = std::make_unique<TestPeer>(ns.path());
  WriteInfofile(ns.path() + "/f", 9, {{peer->peer_id(), peer->addr()}}, {});
  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open((ns.path() + "/f").c_str(), &db));
  sqlite3_busy_timeout(db, 10000);  // the peer's namespace walk may be reading it
  ASSERT_EQ(SQLITE_OK, sqlite3_exec(db, "BEGIN EXCLUSIVE; INSERT INTO meta VALUES('x', 1);",
                                    nullptr, nullptr, nullptr));
  int opens = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(opens, 0) << strerror(errno);
  ASSERT_GE(inotify_add_watch(opens, (ns.path() + "/f").c_str(), IN_OPEN), 0) << strerror(errno);
  Client c(peer->port());
  c.Send(EncodeScrub(1));  // the inventory waits up to 5 s for the lock
  // Once the inventory has opened the infofile it goes on to the locked read
  // without looking at cancellation again: stopping now has to cut short
  // the wait for the lock itself.
  ASSERT_TRUE(test::PollFor(
      [&] {
        char events[4096];
        return read(opens, events, sizeof(events)) > 0;
      },
      10))
      << "the SCRUB's inventory never opened the infofile";
  close(opens);
  auto t0 = std::chrono::steady_clock::now();
  peer.reset();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0) << "stopping waited for the infofile lock";
  sqlite3_exec(db, "ROLLBACK;", nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

// ---- Hostile and broken input (docs/peer.md, "Hostile input") --------------

ServerOptions Limits(double idle, double keepalive, size_t max_conns) {
  ServerOptions sv;
  sv.idle_timeout_s = idle;
  sv.keepalive_timeout_s = keepalive;
  sv.max_connections = max_conns;
  return sv;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(ServerTest, StalledFrameClosedAfterIdleTimeout) {
  TestPeer peer(Limits(0.4, 0, 1024), "");
  Client slow(peer.port());
  std::string f = PutFrame(1, 4, 0, "stalled", std::string(5000, 's'));
  auto t0 = std::chrono::steady_clock::now();
  slow.Send(f.substr(0, 1000));
  // Meanwhile other clients are served.
  Client other(peer.port());
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), other.Call(PutFrame(2, 4, 0, "ok", "fine")).h.type);
  Reply r = slow.Read(5);
  double waited = Since(t0);
  ASSERT_FALSE(r.eof);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kTimeout), ErrorOf(r));
  EXPECT_EQ(0u, r.h.seq);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("--idle-timeout")) << ErrorMessage(r);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("1000 of its")) << ErrorMessage(r);
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 2.0);
  EXPECT_TRUE(slow.ClosedByPeer());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound),
            ErrorOf(other.Call(EncodeGet(3, 4, "stalled"))));
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/tmp"));
  EXPECT_EQ(1u, test::CountFiles(peer.data_dir() + "/files"));  // "ok" only
}

TEST_F(ServerTest, StalledHeaderClosedAfterIdleTimeout) {
  TestPeer peer(Limits(0.3, 0, 1024), "");
  Client c(peer.port());
  c.Send(EncodePing(7).substr(0, 5));  // part of the 16-byte prefix
  Reply r = c.Read(5);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kTimeout), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("prefix")) << ErrorMessage(r);
  EXPECT_TRUE(c.ClosedByPeer());
}

TEST_F(ServerTest, IdleTimeoutCountsFromTheLastByte) {
  // A sender that keeps making progress is not cut off, however long the
  // frame takes; an idle connection between frames is not closed either
  // (no --keepalive-timeout).
  TestPeer peer(Limits(0.4, 0, 1024), "");
  Client c(peer.port());
  std::string f = PutFrame(1, 4, 0, "trickled", std::string(200, 't'));
  for (size_t i = 0; i < 8; ++i) {  // 8 x 0.15 s = 1.2 s > the timeout
    c.Send(f.substr(i * 20, 20));
    // Pacing, not a wait for the peer: the slow sender is what is tested.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  c.Send(f.substr(160));
  Reply r = c.Read(5);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), r.h.type) << ErrorMessage(r);
  // Idle with nothing buffered: kept. The witness stalls mid-frame after c's
  // last byte, so by the time the peer closes it for --idle-timeout, c has
  // been idle longer than that, and a timer of c's would have fired first.
  Client witness(peer.port());
  witness.Send(EncodePing(9).substr(0, 5));
  Reply w = witness.Read(5);
  ASSERT_EQ(static_cast<uint16_t>(ErrorCode::kTimeout), ErrorOf(w)) << ErrorMessage(w);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(2, 4, "trickled")).h.type);
}

TEST_F(ServerTest, IdleTimeoutZeroNeverCloses) {
  TestPeer peer(Limits(0, 0, 1024), "");
  Client c(peer.port());
  std::string ping = EncodePing(3);
  c.Send(ping.substr(0, 10));
  EXPECT_FALSE(c.ClosedByPeer(0.5));
  c.Send(ping.substr(10));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Read().h.type);
}

TEST_F(ServerTest, KeepaliveTimeoutClosesIdleConnectionsButNotWaitingOnes) {
  test::TempDir ns;
  ServerOptions sv = Limits(30, 0.3, 1024);
  sv.namespace_dir = ns.path();
  sv.ring_timeout_base_s = 1.0;
  sv.ring_timeout_per_peer_s = 0;
  TestPeer peer(sv, "");
  WriteInfofile(ns.path() + "/f", 3, {{peer.peer_id(), peer.addr()}}, {});
  std::string mute;
  int s = test::BindLoopback(true, &mute);  // a ring peer that never answers
  ASSERT_GE(s, 0);

  Client idle(peer.port());
  Client waiting(peer.port());
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), idle.Call(EncodePing(1)).h.type);
  auto t0 = std::chrono::steady_clock::now();
  waiting.Send(EncodeGetLocal(5, RingHeader{3, 1, "/f", {peer.addr(), mute}}));
  EXPECT_TRUE(idle.ClosedByPeer(3));  // quietly: EOF, no frame
  EXPECT_LT(Since(t0), 1.0);
  // The GET_LOCAL waits 1 s for its ring: owed a reply, that connection stays.
  Reply r = waiting.Read(5);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kTimeout), ErrorOf(r));
  EXPECT_GE(Since(t0), 0.9);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), waiting.Call(EncodePing(6)).h.type);
  EXPECT_TRUE(waiting.ClosedByPeer(3));  // and then idle too long
  close(s);
}

TEST_F(ServerTest, ConnectionLimit) {
  TestPeer peer(Limits(30, 0, 2), "");
  auto a = std::make_unique<Client>(peer.port());
  Client b(peer.port());
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), a->Call(EncodePing(1)).h.type);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), b.Call(EncodePing(2)).h.type);

  // A third client that speaks first is refused at its first frame.
  Client c(peer.port());
  Reply r = c.Call(EncodePing(3));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBusy), ErrorOf(r));
  EXPECT_EQ(0u, r.h.seq);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("--max-connections")) << ErrorMessage(r);
  EXPECT_TRUE(c.ClosedByPeer());

  // A silent one when its probation ends.
  Client silent(peer.port());
  auto t0 = std::chrono::steady_clock::now();
  r = silent.Read(5);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBusy), ErrorOf(r));
  EXPECT_GE(Since(t0), Server::kProbationSeconds * 0.8);
  EXPECT_TRUE(silent.ClosedByPeer());

  // A ring predecessor's link is not a client: served above the limit (the
  // segment itself is refused, this peer not being in that ring).
  Client ring(peer.port());
  RingSegment seg;
  seg.ring = RingHeader{3, 1, "/f", {"127.0.0.1:1", "127.0.0.1:2"}};
  seg.origin = 0;
  r = ring.Call(EncodeRingSegment(4, 0, seg));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotInRing), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(4u, r.h.seq);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), ring.Call(EncodePing(5)).h.type);

  // The first two are still served; closing one frees a slot.
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), a->Call(EncodePing(6)).h.type);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), b.Call(EncodePing(7)).h.type);
  a.reset();
  ASSERT_TRUE(test::PollFor([&] { return peer.ClientCount() == 1; }, 10))
      << "the peer never freed the closed client's slot";
  Client d(peer.port());
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), d.Call(EncodePing(8)).h.type);
  Client e(peer.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBusy), ErrorOf(e.Call(EncodePing(9))));
}

TEST_F(ServerTest, RingLinksAreNotStarvedByTheConnectionLimit) {
  // Both peers' only client slot is taken by the client asking GET_LOCAL;
  // their ring links to each other still get through.
  test::TempDir ns;
  ServerOptions sv = Limits(30, 0, 1);
  sv.namespace_dir = ns.path();
  TestPeer p0(sv, ""), p1(sv, "");
  {
    Client c0(p0.port()), c1(p1.port());
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c0.Call(PutFrame(1, 9, 0, "a", "A")).h.type);
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c1.Call(PutFrame(1, 9, 1, "a", "A")).h.type);
  }
  ASSERT_TRUE(test::PollFor([&] { return p0.ClientCount() == 0 && p1.ClientCount() == 0; }, 10))
      << "the peers never freed the closed clients' slots";
  WriteInfofile(ns.path() + "/f", 9, {{p0.peer_id(), p0.addr()}, {p1.peer_id(), p1.addr()}},
                {{"a", 0, 0}, {"a", 1, 1}});
  RingHeader ring{9, 1, "/f", {p0.addr(), p1.addr()}};
  Client c0(p0.port()), c1(p1.port());
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c0.Call(EncodePing(1)).h.type);
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c1.Call(EncodePing(1)).h.type);
  Client third(p0.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBusy), ErrorOf(third.Call(EncodePing(2))));
  c0.Send(EncodeGetLocal(5, ring));
  c1.Send(EncodeGetLocal(6, ring));
  uint16_t error;
  std::string message;
  auto l0 = ReadLocalList(&c0, 5, &error, &message);
  ASSERT_EQ(0, error) << message;
  auto l1 = ReadLocalList(&c1, 6, &error, &message);
  ASSERT_EQ(0, error) << message;
  ASSERT_EQ(1u, l0.size());
  EXPECT_EQ(0, l0[0].copy_rank);
  EXPECT_EQ(0u, l1.size());  // rank 1 is not revealed: peer 0 holds rank 0
}

TEST_F(ServerTest, ConnectionLimitZeroMeansNone) {
  TestPeer peer(Limits(30, 0, 0), "");
  std::vector<std::unique_ptr<Client>> cs;
  for (int i = 0; i < 50; ++i) cs.push_back(std::make_unique<Client>(peer.port()));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), cs[i]->Call(EncodePing(i)).h.type);
  }
}

TEST_F(ServerTest, GetReportsACorruptedRecordFile) {
  TestPeer peer;
  Client c(peer.port());
  std::string data(10000, 'd');
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(1, 6, 0, "r", data)).h.type);
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(2, 6, 0, "t", data)).h.type);
  {
    std::fstream f(RecordFile(peer, 6, "r", 0, data),
                   std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(4321);
    f.put('X');  // one flipped byte, same size
  }
  ASSERT_EQ(0, truncate(RecordFile(peer, 6, "t", 0, data).c_str(), 9999));
  Reply r = c.Call(EncodeGet(3, 6, "r"));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kCrcMismatch), ErrorOf(r));
  EXPECT_EQ(3u, r.h.seq);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("corrupt")) << ErrorMessage(r);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find(RecordFile(peer, 6, "r", 0, data)));
  r = c.Call(EncodeGet(4, 6, "t"));
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kCrcMismatch), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("9999 bytes")) << ErrorMessage(r);
  // The connection and the peer go on.
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(EncodePing(5)).h.type);
}

TEST_F(ServerTest, UnreadGetRepliesDoNotPinUnboundedFiles) {
  // A client pipelines many GETs and reads nothing: the peer stops reading
  // its requests instead of opening a file for each.
  TestPeer peer;
  Client c(peer.port());
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk),
            c.Call(PutFrame(1, 2, 0, "r", std::string(4096, 'r'))).h.type);
  auto open_fds = [] {
    size_t n = 0;
    DIR* d = opendir("/proc/self/fd");
    while (d != nullptr && readdir(d) != nullptr) ++n;
    if (d != nullptr) closedir(d);
    return n;
  };
  size_t before = open_fds();
  constexpr int kGets = 6000;
  std::string batch;
  for (int i = 0; i < kGets; ++i) batch += EncodeGet(100 + i, 2, "r");
  std::thread sender([&] { c.Send(batch); });
  // Each GET reply queued holds its record file open. Wait until the peer
  // holds many (it is pinning files for this client) and a whole turn of its
  // loop opens no more: it has stopped taking this client's GETs. Without a
  // limit it would go on with every GET it has read, and more arrive.
  size_t during = 0;
  EXPECT_TRUE(test::PollFor(
      [&] {
        size_t was = open_fds();
        if (was < before + Connection::kMaxQueuedFiles / 2) return false;
        peer.OnLoop([] {});
        size_t now = open_fds();
        during = std::max({during, was, now});
        return now == was;
      },
      10))
      << "the peer never settled with the GET replies queued (open files: " << open_fds()
      << ", before " << before << ")";
  // Without a limit on queued files the peer would hold some 5000 here.
  static_assert(Connection::kMaxQueuedFiles <= 1024, "the test assumes a limit of 1024");
  EXPECT_LT(during, before + 1024 + 64) << "before " << before;
  int got = 0;
  Reply r;
  while (got < kGets) {
    r = c.Read(10);
    if (r.eof || r.h.type != static_cast<uint8_t>(MsgType::kData)) break;
    ++got;
  }
  sender.join();
  EXPECT_EQ(kGets, got) << "the last reply: eof " << r.eof << ", type " << int(r.h.type);
}

// A filesystem that fills up: needs root (mount); skipped otherwise.
class TinyFs {
 public:
  explicit TinyFs(const std::string& size) {
    dir_ = tmp_.path() + "/mnt";
    mkdir(dir_.c_str(), 0755);
    std::string cmd = "mount -t tmpfs -o size=" + size + " tmpfs " + dir_ + " 2>/dev/null";
    mounted_ = system(cmd.c_str()) == 0;
  }
  ~TinyFs() {
    if (mounted_) {
      std::string cmd = "umount " + dir_ + " 2>/dev/null || umount -l " + dir_;
      if (system(cmd.c_str()) != 0) ADD_FAILURE() << "cannot unmount " << dir_;
    }
  }
  bool mounted() const { return mounted_; }
  const std::string& dir() const { return dir_; }

 private:
  test::TempDir tmp_;
  std::string dir_;
  bool mounted_ = false;
};

TEST_F(ServerTest, FullDiskAnswersNoSpaceAndKeepsServing) {
  TinyFs fs("1m");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (not root?)";
  {
    TestPeer peer(ServerOptions(), fs.dir() + "/data");
    Client c(peer.port());
    std::string chunk(100 * 1024, 'z');
    int stored = 0;
    Reply r;
    for (int i = 0; i < 20; ++i) {
      r = c.Call(PutFrame(i + 1, 5, 0, "r" + std::to_string(i), chunk));
      if (r.h.type != static_cast<uint8_t>(MsgType::kOk)) break;
      ++stored;
    }
    ASSERT_EQ(static_cast<uint16_t>(ErrorCode::kNoSpace), ErrorOf(r)) << ErrorMessage(r);
    EXPECT_GT(stored, 3);
    EXPECT_NE(std::string::npos, ErrorMessage(r).find("is full")) << ErrorMessage(r);
    EXPECT_NE(std::string::npos, ErrorMessage(r).find("No space left")) << ErrorMessage(r);
    EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/tmp"));  // the partial temp file is gone
    EXPECT_EQ(static_cast<size_t>(stored), test::CountFiles(peer.data_dir() + "/files"));
    // Still serving on the same connection: PING, GET, a PUT that fits.
    EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(EncodePing(100)).h.type);
    Reply d = c.Call(EncodeGet(101, 5, "r0"));
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kData), d.h.type);
    DataReply dr;
    ASSERT_TRUE(DecodeData(d.payload, &dr).ok());
    EXPECT_EQ(chunk, dr.data);
    EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), c.Call(PutFrame(102, 5, 0, "tiny", "t")).h.type);
  }
}

// ---- Capabilities (docs/capabilities.md) ------------------------------------------

const std::string kCapKey(32, '\x42');

// Peers sharing one clock for capability expiry, which a test may move.
struct CapClock {
  std::shared_ptr<std::atomic<int64_t>> offset = std::make_shared<std::atomic<int64_t>>(0);
  uint64_t Now() const { return static_cast<uint64_t>(static_cast<int64_t>(UnixNow()) + *offset); }
  void Advance(int64_t s) { *offset += s; }
  std::function<uint64_t()> Fn() const {
    auto o = offset;
    return [o] { return static_cast<uint64_t>(static_cast<int64_t>(UnixNow()) + o->load()); };
  }
};

ServerOptions Keyed(const CapClock& clock, const std::string& ns = "",
                    const std::string& key = kCapKey) {
  ServerOptions sv;
  sv.capability_key = key;
  sv.clock = clock.Fn();
  sv.namespace_dir = ns;
  sv.get_local_cache_s = 0;  // every GET_LOCAL runs its ring
  return sv;
}

std::string Token(uint8_t ops, uint64_t file_id, uint64_t expires, const std::string& key = kCapKey,
                  const std::string& user = "test") {
  Capability c;
  c.ops = ops;
  c.file_id = file_id;
  c.expires = expires;
  c.user = user;
  return MintToken(key, c);
}

constexpr uint16_t kDenied = static_cast<uint16_t>(ErrorCode::kDenied);

TEST_F(ServerTest, CapsWithoutAuthNothingButPingIsServed) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  Reply r = c.Call(PutFrame(1, 10, 0, "a", "data"));
  ASSERT_EQ(kDenied, ErrorOf(r));
  EXPECT_EQ(1u, r.h.seq);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("PUT denied")) << ErrorMessage(r);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("file 000000000000000a")) << ErrorMessage(r);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("WRITE")) << ErrorMessage(r);
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("AUTH")) << ErrorMessage(r);
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/files"));
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/tmp"));
  r = c.Call(EncodeGet(2, 10, "a"));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("READ")) << ErrorMessage(r);
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeDelete(3, 10, "a"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeDeleteFile(4, 10))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeScrub(5))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeGetLocal(6, RingHeader{10, 1, "/f", {peer.addr()}}))));
  // PING needs nothing, and the connection stays open after a denial.
  r = c.Call(EncodePing(7));
  EXPECT_TRUE(IsOk(r));
  EXPECT_EQ(7u, r.h.seq);
  // A record stored by an authorised client is not revealed or removed either.
  Client w(peer.port());
  ASSERT_TRUE(IsOk(w.Call(EncodeAuth(1, Token(kOpWrite, 10, clock.Now() + 3600)))));
  ASSERT_TRUE(IsOk(w.Call(PutFrame(2, 10, 0, "a", "data"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeGet(8, 10, "a"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeDeleteFile(9, 10))));
  EXPECT_EQ(1u, test::CountFiles(peer.data_dir() + "/files"));
}

TEST_F(ServerTest, CapsValidAuthAllowsItsOperations) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  Reply r = c.Call(EncodeAuth(1, Token(kOpRead | kOpWrite | kOpDelete, 10, clock.Now() + 3600)));
  ASSERT_TRUE(IsOk(r)) << ErrorMessage(r);
  EXPECT_EQ(1u, r.h.seq);
  EXPECT_TRUE(r.payload.empty());
  r = c.Call(PutFrame(2, 10, 0, "a", "data"));
  ASSERT_TRUE(IsOk(r)) << ErrorMessage(r);
  EXPECT_EQ(1u, test::CountFiles(peer.data_dir() + "/files"));
  r = c.Call(EncodeGet(3, 10, "a"));
  ASSERT_EQ(static_cast<uint8_t>(MsgType::kData), r.h.type) << ErrorMessage(r);
  EXPECT_TRUE(IsOk(c.Call(EncodeDelete(4, 10, "a"))));
  EXPECT_TRUE(IsOk(c.Call(EncodeDeleteFile(5, 10))));
  // The token belongs to the connection: another one has none.
  Client other(peer.port());
  EXPECT_EQ(kDenied, ErrorOf(other.Call(PutFrame(1, 10, 0, "b", "data"))));
}

TEST_F(ServerTest, CapsTokenIsBoundToItsFile) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(1, Token(kOpRead | kOpWrite, 10, clock.Now() + 3600)))));
  Reply r = c.Call(PutFrame(2, 11, 0, "a", "data"));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("file 000000000000000b")) << ErrorMessage(r);
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/files"));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(3, 10, 0, "a", "data"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeGet(4, 11, "a"))));
  // Tokens for several files live side by side on one connection.
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(5, Token(kOpWrite, 11, clock.Now() + 3600)))));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(6, 11, 0, "a", "data"))));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(7, 10, 0, "b", "data"))));
  EXPECT_EQ(3u, test::CountFiles(peer.data_dir() + "/files"));
}

TEST_F(ServerTest, CapsReadOnlyTokenCannotWriteOrDelete) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client w(peer.port());
  ASSERT_TRUE(IsOk(w.Call(EncodeAuth(1, Token(kOpWrite, 10, clock.Now() + 3600)))));
  ASSERT_TRUE(IsOk(w.Call(PutFrame(2, 10, 0, "a", "data"))));
  // WRITE does not include READ.
  EXPECT_EQ(kDenied, ErrorOf(w.Call(EncodeGet(3, 10, "a"))));
  Client c(peer.port());
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(1, Token(kOpRead, 10, clock.Now() + 3600)))));
  Reply r = c.Call(PutFrame(2, 10, 0, "b", "data"));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("allows READ")) << ErrorMessage(r);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(3, 10, "a")).h.type);
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeDelete(4, 10, "a"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeDeleteFile(5, 10))));
  EXPECT_EQ(1u, test::CountFiles(peer.data_dir() + "/files"));
}

TEST_F(ServerTest, CapsExpiredTokens) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  // Expired beyond the 30 s of skew: refused at AUTH.
  Reply r = c.Call(EncodeAuth(1, Token(kOpWrite, 10, clock.Now() - 31)));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("expired")) << ErrorMessage(r);
  EXPECT_EQ(kDenied, ErrorOf(c.Call(PutFrame(2, 10, 0, "a", "data"))));
  // Within the skew: accepted.
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(3, Token(kOpWrite, 10, clock.Now() - 20)))));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(4, 10, 0, "a", "data"))));
  // A token that expires while the connection lives: checked on every request.
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(5, Token(kOpWrite, 10, clock.Now() + 100)))));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(6, 10, 0, "b", "data"))));
  clock.Advance(100 + 30);
  EXPECT_TRUE(IsOk(c.Call(PutFrame(7, 10, 0, "c", "data"))));
  clock.Advance(5);
  r = c.Call(PutFrame(8, 10, 0, "d", "data"));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("expired at")) << ErrorMessage(r);
  EXPECT_EQ(3u, test::CountFiles(peer.data_dir() + "/files"));
}

TEST_F(ServerTest, CapsForgedAndMalformedTokensAreRefused) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  std::string good = Token(kOpWrite, 10, clock.Now() + 3600);
  std::string forged = good;
  forged[1] = static_cast<char>(kOpWrite | kOpDelete);  // more rights, same MAC
  Reply r = c.Call(EncodeAuth(1, forged));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("signature")) << ErrorMessage(r);
  std::string flipped = good;
  flipped.back() = static_cast<char>(flipped.back() ^ 0x80);
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeAuth(2, flipped))));
  r = c.Call(EncodeAuth(3, Token(kOpWrite, 10, clock.Now() + 3600, std::string(32, 'k'))));
  EXPECT_EQ(kDenied, ErrorOf(r));  // another key
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("signature")) << ErrorMessage(r);
  r = c.Call(EncodeAuth(4, good.substr(0, good.size() - 1)));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("malformed")) << ErrorMessage(r);
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeAuth(5, ""))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeAuth(6, std::string(5000, '\x01')))));
  // None of them gave anything; the connection is still open.
  EXPECT_EQ(kDenied, ErrorOf(c.Call(PutFrame(7, 10, 0, "a", "data"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeDeleteFile(8, 10))));
  EXPECT_EQ(0u, test::CountFiles(peer.data_dir() + "/files"));
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(9, good))));
  EXPECT_TRUE(IsOk(c.Call(PutFrame(10, 10, 0, "a", "data"))));
}

TEST_F(ServerTest, CapsANewerTokenReplacesTheOlder) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(1, Token(kOpWrite, 10, clock.Now() + 3600)))));
  ASSERT_TRUE(IsOk(c.Call(PutFrame(2, 10, 0, "a", "data"))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeGet(3, 10, "a"))));
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(4, Token(kOpRead, 10, clock.Now() + 3600)))));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(5, 10, "a")).h.type);
  EXPECT_EQ(kDenied, ErrorOf(c.Call(PutFrame(6, 10, 0, "b", "data"))));
  // A refused AUTH leaves the held token alone.
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeAuth(7, Token(kOpWrite, 10, clock.Now() - 100)))));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(8, 10, "a")).h.type);
  EXPECT_EQ(1u, test::CountFiles(peer.data_dir() + "/files"));
}

TEST_F(ServerTest, CapsAuthIsProcessedInOrderWithPipelinedFrames) {
  CapClock clock;
  TestPeer peer(Keyed(clock), "");
  Client c(peer.port());
  // One write: a PUT before the AUTH is denied, the ones after it are not.
  c.Send(PutFrame(1, 10, 0, "early", "data") +
         EncodeAuth(2, Token(kOpWrite, 10, clock.Now() + 3600)) +
         PutFrame(3, 10, 0, "late", "data") + PutFrame(4, 12, 0, "other", "data") +
         EncodeAuth(5, Token(kOpRead, 10, clock.Now() + 3600)) + PutFrame(6, 10, 0, "last", "x"));
  std::map<uint64_t, Reply> got;
  for (int i = 0; i < 6; ++i) {
    Reply r = c.Read();
    ASSERT_FALSE(r.eof);
    got[r.h.seq] = r;
  }
  EXPECT_EQ(kDenied, ErrorOf(got[1]));
  EXPECT_TRUE(IsOk(got[2]));
  EXPECT_TRUE(IsOk(got[3])) << ErrorMessage(got[3]);
  EXPECT_EQ(kDenied, ErrorOf(got[4]));
  EXPECT_TRUE(IsOk(got[5]));
  EXPECT_EQ(kDenied, ErrorOf(got[6]));
  EXPECT_EQ(1u, test::CountFiles(peer.data_dir() + "/files"));
}

TEST_F(ServerTest, CapsUnkeyedPeerAnswersAuthAndChecksNothing) {
  TestPeer peer;
  Client c(peer.port());
  EXPECT_TRUE(IsOk(c.Call(PutFrame(1, 10, 0, "a", "data"))));
  Reply r = c.Call(EncodeAuth(2, "not a token"));
  EXPECT_TRUE(IsOk(r));
  EXPECT_EQ(2u, r.h.seq);
  EXPECT_TRUE(IsOk(c.Call(EncodeAuth(3, Token(kOpRead, 10, 1)))));  // expired: ignored too
  EXPECT_TRUE(IsOk(c.Call(PutFrame(4, 11, 0, "b", "data"))));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kData), c.Call(EncodeGet(5, 10, "a")).h.type);
}

TEST_F(ServerTest, CapsRingSegmentNeedsPeer) {
  CapClock clock;
  test::TempDir ns;
  TestPeer peer(Keyed(clock, ns.path()), "");
  WriteInfofile(ns.path() + "/f", 9, {{peer.peer_id(), peer.addr()}, {"other", "127.0.0.1:1"}}, {});
  RingSegment seg;
  seg.ring = RingHeader{9, 1, "/f", {peer.addr(), "127.0.0.1:1"}};
  seg.origin = 1;
  Client c(peer.port());
  Reply r = c.Call(EncodeRingSegment(1, 0, seg));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("PEER")) << ErrorMessage(r);
  // Every op but PEER, for this very file: still denied.
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(2, Token(kOpAll & ~kOpPeer, 9, clock.Now() + 3600)))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeRingSegment(3, 0, seg))));
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(4,
                                     Token(kOpPeer, 0, clock.Now() + 3600, kCapKey, "peer:x")))));
  r = c.Call(EncodeRingSegment(5, 0, seg));
  EXPECT_TRUE(IsOk(r)) << ErrorMessage(r);
}

TEST_F(ServerTest, CapsScrubNeedsAdminForEveryFile) {
  CapClock clock;
  test::TempDir ns;
  TestPeer peer(Keyed(clock, ns.path()), "");
  Client c(peer.port());
  Reply r = c.Call(EncodeScrub(1));
  EXPECT_EQ(kDenied, ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("ADMIN")) << ErrorMessage(r);
  // ADMIN for one file is not ADMIN for the peer; nor is every other op.
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(2, Token(kOpAll, 5, clock.Now() + 3600)))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeScrub(3))));
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(4, Token(kOpAll & ~kOpAdmin, 0, clock.Now() + 3600)))));
  EXPECT_EQ(kDenied, ErrorOf(c.Call(EncodeScrub(5))));
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(6,
                                     Token(kOpAdmin, 0, clock.Now() + 3600, kCapKey, "admin")))));
  r = c.Call(EncodeScrub(7));
  EXPECT_TRUE(IsOk(r)) << ErrorMessage(r);
  EXPECT_EQ(kScrubReplySize, r.payload.size());
}

// Each peer's client sends AUTH with `token` (if not empty) and GET_LOCAL;
// returns the error code each got (0: a LOCAL_LIST) and the records listed.
std::vector<uint16_t> KeyedGetLocal(std::vector<std::unique_ptr<TestPeer>>& peers,
                                    const RingHeader& ring, const std::string& token,
                                    size_t* listed, std::string* messages) {
  std::vector<std::unique_ptr<Client>> clients;
  for (size_t i = 0; i < peers.size(); ++i) {
    clients.push_back(std::make_unique<Client>(peers[i]->port()));
    if (!token.empty()) clients[i]->Send(EncodeAuth(50, token));
    clients[i]->Send(EncodeGetLocal(100 + i, ring));
  }
  std::vector<uint16_t> errors;
  *listed = 0;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (!token.empty()) {
      Reply a = clients[i]->Read();
      EXPECT_TRUE(IsOk(a)) << ErrorMessage(a);
    }
    uint16_t error;
    std::string message;
    *listed += ReadLocalList(clients[i].get(), 100 + i, &error, &message).size();
    errors.push_back(error);
    if (error != 0) *messages += message + "\n";
  }
  return errors;
}

TEST_F(ServerTest, CapsGetLocalAcrossKeyedPeers) {
  CapClock clock;
  test::TempDir ns;
  const uint64_t kFile = 77;
  std::vector<std::unique_ptr<TestPeer>> peers;
  for (int i = 0; i < 3; ++i)
    peers.push_back(std::make_unique<TestPeer>(Keyed(clock, ns.path()), ""));
  RingHeader ring{kFile, 1, "/f", {}};
  std::vector<std::pair<std::string, std::string>> rows;
  std::vector<std::tuple<std::string, int, int>> copies;
  for (int i = 0; i < 3; ++i) {
    ring.peers.push_back(peers[i]->addr());
    rows.emplace_back(peers[i]->peer_id(), peers[i]->addr());
    Client w(peers[i]->port());
    ASSERT_TRUE(IsOk(w.Call(EncodeAuth(1, Token(kOpWrite, kFile, clock.Now() + 3600)))));
    std::string name = "rec" + std::to_string(i);
    ASSERT_TRUE(IsOk(w.Call(PutFrame(2, kFile, 0, name, "data"))));
    copies.emplace_back(name, 0, i);
  }
  WriteInfofile(ns.path() + "/f", kFile, rows, copies);
  const std::string read = Token(kOpRead, kFile, clock.Now() + 3600);

  // Without a READ token, every client is denied and no ring starts.
  size_t listed = 0;
  std::string messages;
  std::vector<uint16_t> errors = KeyedGetLocal(peers, ring, "", &listed, &messages);
  for (uint16_t e : errors) EXPECT_EQ(kDenied, e) << messages;
  for (auto& p : peers) EXPECT_EQ(0u, p->server()->ring_auths_sent());

  // With one, the ring completes: each ring link sent AUTH with its own
  // PEER token first.
  messages.clear();
  errors = KeyedGetLocal(peers, ring, read, &listed, &messages);
  for (uint16_t e : errors) EXPECT_EQ(0, e) << messages;
  EXPECT_EQ(3u, listed);
  for (auto& p : peers) EXPECT_EQ(1u, p->server()->ring_auths_sent());

  // The links stay open and keep their token until it is within 10 min of
  // its expiry (1 h after it was minted).
  clock.Advance(2000);
  messages.clear();
  errors =
      KeyedGetLocal(peers, ring, Token(kOpRead, kFile, clock.Now() + 3600), &listed, &messages);
  for (uint16_t e : errors) EXPECT_EQ(0, e) << messages;
  for (auto& p : peers) EXPECT_EQ(1u, p->server()->ring_auths_sent());
  clock.Advance(1001);  // 599 s left: a fresh token goes first
  messages.clear();
  errors =
      KeyedGetLocal(peers, ring, Token(kOpRead, kFile, clock.Now() + 3600), &listed, &messages);
  for (uint16_t e : errors) EXPECT_EQ(0, e) << messages;
  for (auto& p : peers) EXPECT_EQ(2u, p->server()->ring_auths_sent());
  // Long after the first token's expiry the ring still completes.
  clock.Advance(3500);
  messages.clear();
  errors =
      KeyedGetLocal(peers, ring, Token(kOpRead, kFile, clock.Now() + 3600), &listed, &messages);
  for (uint16_t e : errors) EXPECT_EQ(0, e) << messages;
  EXPECT_EQ(3u, listed);
}

TEST_F(ServerTest, CapsRingPeerWithAnotherKeyIsReported) {
  CapClock clock;
  test::TempDir ns;
  const uint64_t kFile = 78;
  std::vector<std::unique_ptr<TestPeer>> peers;
  peers.push_back(std::make_unique<TestPeer>(Keyed(clock, ns.path()), ""));
  peers.push_back(std::make_unique<TestPeer>(Keyed(clock, ns.path(), std::string(32, 'o')), ""));
  RingHeader ring{kFile, 1, "/f", {peers[0]->addr(), peers[1]->addr()}};
  WriteInfofile(ns.path() + "/f", kFile,
                {{peers[0]->peer_id(), peers[0]->addr()}, {peers[1]->peer_id(), peers[1]->addr()}},
                {});
  // Peer 0's client can use its key; peer 1 refuses peer 0's ring token.
  Client c(peers[0]->port());
  ASSERT_TRUE(IsOk(c.Call(EncodeAuth(1, Token(kOpRead, kFile, clock.Now() + 3600)))));
  c.Send(EncodeGetLocal(2, ring));
  uint16_t error;
  std::string message;
  ReadLocalList(&c, 2, &error, &message);
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kPeerUnreachable), error) << message;
  EXPECT_NE(std::string::npos, message.find(peers[1]->addr())) << message;
  EXPECT_NE(std::string::npos, message.find("DENIED")) << message;
}

TEST_F(ServerTest, CapsRingLinksThatAuthenticateAreNotStarvedByTheConnectionLimit) {
  // As RingLinksAreNotStarvedByTheConnectionLimit, with keys: the ring links'
  // first frame is AUTH, and they are still told from clients.
  CapClock clock;
  test::TempDir ns;
  ServerOptions sv = Keyed(clock, ns.path());
  sv.max_connections = 1;
  TestPeer p0(sv, ""), p1(sv, "");
  const std::string write = Token(kOpWrite | kOpRead, 9, clock.Now() + 3600);
  {
    Client c0(p0.port()), c1(p1.port());
    ASSERT_TRUE(IsOk(c0.Call(EncodeAuth(1, write))));
    ASSERT_TRUE(IsOk(c1.Call(EncodeAuth(1, write))));
    ASSERT_TRUE(IsOk(c0.Call(PutFrame(2, 9, 0, "a", "A"))));
    ASSERT_TRUE(IsOk(c1.Call(PutFrame(2, 9, 1, "a", "A"))));
  }
  ASSERT_TRUE(test::PollFor([&] { return p0.ClientCount() == 0 && p1.ClientCount() == 0; }, 10))
      << "the peers never freed the closed clients' slots";
  WriteInfofile(ns.path() + "/f", 9, {{p0.peer_id(), p0.addr()}, {p1.peer_id(), p1.addr()}},
                {{"a", 0, 0}, {"a", 1, 1}});
  RingHeader ring{9, 1, "/f", {p0.addr(), p1.addr()}};
  Client c0(p0.port()), c1(p1.port());
  ASSERT_TRUE(IsOk(c0.Call(EncodeAuth(1, write))));
  ASSERT_TRUE(IsOk(c1.Call(EncodeAuth(1, write))));
  Client third(p0.port());
  EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kBusy), ErrorOf(third.Call(EncodePing(2))));
  c0.Send(EncodeGetLocal(5, ring));
  c1.Send(EncodeGetLocal(6, ring));
  uint16_t error;
  std::string message;
  auto l0 = ReadLocalList(&c0, 5, &error, &message);
  ASSERT_EQ(0, error) << message;
  auto l1 = ReadLocalList(&c1, 6, &error, &message);
  ASSERT_EQ(0, error) << message;
  ASSERT_EQ(1u, l0.size());
  EXPECT_EQ(0u, l1.size());
}

}  // namespace
}  // namespace st
