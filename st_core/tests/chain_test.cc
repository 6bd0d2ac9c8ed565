// PUT_CHAIN (chain replication, docs/wire-protocol.md "Chain replication"):
// peers over real sockets store a copy and forward the next one down the
// chain; failures name the peer where the chain broke.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "capability.h"
#include "peer_harness.h"

namespace st {
namespace {

using test::Client;
using test::DataOf;
using test::ErrorMessage;
using test::ErrorOf;
using test::ErrorPeers;
using test::IsOk;
using test::Reply;
using test::TestPeer;

uint16_t Code(ErrorCode c) { return static_cast<uint16_t>(c); }

std::string ChainFrame(uint64_t seq, uint64_t fid, const std::string& name, const std::string& data,
                       const std::vector<std::string>& hops, uint16_t flags = 0) {
  PutChainRequest p;
  p.file_id = fid;
  p.copy_rank = 0;
  p.crc32c = crc32c::Value(data);
  p.name = name;
  for (const auto& h : hops) p.hops.push_back(h);
  p.data = data;
  return EncodePutChain(seq, flags, p);
}

// The copy rank a peer holds the record at, or -1.
int RankOf(TestPeer* p, uint64_t fid, const std::string& name) {
  Client c(p->port());
  Reply r = c.Call(EncodeGet(1, fid, name));
  DataReply d;
  if (r.h.type != static_cast<uint8_t>(MsgType::kData) || !DecodeData(r.payload, &d).ok())
    return -1;
  return d.copy_rank;
}

class ChainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }
  static ServerOptions Options(double chain_timeout = 5) {
    ServerOptions sv;
    sv.chain_timeout_s = chain_timeout;
    return sv;
  }
};

TEST_F(ChainTest, ThreeCopiesDownTheChain) {
  TestPeer a(Options(), StoreOptions()), b(Options(), StoreOptions()), c(Options(), StoreOptions());
  Client client(a.port());
  std::string data(300000, 'x');
  Reply r = client.Call(ChainFrame(5, 7, "rec", data, {b.addr(), c.addr()}));
  ASSERT_TRUE(IsOk(r)) << ErrorMessage(r);
  EXPECT_EQ(5u, r.h.seq);
  EXPECT_EQ(0, RankOf(&a, 7, "rec"));
  EXPECT_EQ(1, RankOf(&b, 7, "rec"));
  EXPECT_EQ(2, RankOf(&c, 7, "rec"));
  Client cc(c.port());
  EXPECT_EQ(data, DataOf(cc.Call(EncodeGet(2, 7, "rec"))));
  // Pipelined chains share one link per hop; a retry is idempotent.
  std::string batch;
  for (int i = 0; i < 50; ++i)
    batch += ChainFrame(100 + i, 7, "r" + std::to_string(i), "d", {b.addr()});
  batch += ChainFrame(200, 7, "rec", data, {b.addr(), c.addr()});
  client.Send(batch);
  for (int i = 0; i < 51; ++i) EXPECT_TRUE(IsOk(client.Read())) << i;
  EXPECT_EQ(1, RankOf(&b, 7, "r49"));
  EXPECT_EQ(-1, RankOf(&c, 7, "r49"));
}

// With ASYNC the first reply (OK with MORE) comes once the first copy is
// stored, the final one when the chain is done.
TEST_F(ChainTest, AsyncAnswersTwice) {
  TestPeer a(Options(), StoreOptions()), b(Options(), StoreOptions());
  Client client(a.port());
  client.Send(ChainFrame(9, 7, "rec", "data", {b.addr()}, kFlagAsync));
  Reply first = client.Read();
  ASSERT_TRUE(IsOk(first));
  EXPECT_EQ(kFlagMore, first.h.flags & kFlagMore);
  Reply last = client.Read();
  ASSERT_TRUE(IsOk(last));
  EXPECT_EQ(0, last.h.flags & kFlagMore);
  EXPECT_EQ(9u, last.h.seq);
  EXPECT_EQ(1, RankOf(&b, 7, "rec"));
  // Without hops there is nothing to wait for: one final OK.
  Reply only = client.Call(ChainFrame(10, 7, "solo", "d", {}, kFlagAsync));
  EXPECT_TRUE(IsOk(only));
  EXPECT_EQ(0, only.h.flags & kFlagMore);
}

// A dead peer in the chain: the error names it, and the copies before it stay.
TEST_F(ChainTest, DeadHopIsNamed) {
  TestPeer a(Options(), StoreOptions()), b(Options(), StoreOptions());
  std::string dead;
  int fd = test::BindLoopback(false, &dead);
  ASSERT_GE(fd, 0);
  close(fd);
  Client client(a.port());
  Reply r = client.Call(ChainFrame(3, 7, "rec", "data", {b.addr(), dead}));
  EXPECT_EQ(Code(ErrorCode::kPeerUnreachable), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(std::vector<std::string>{dead}, ErrorPeers(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("copies 0..1 are stored")) << ErrorMessage(r);
  EXPECT_EQ(0, RankOf(&a, 7, "rec"));
  EXPECT_EQ(1, RankOf(&b, 7, "rec"));
}

// A holder's own refusal travels back with its code and its address.
TEST_F(ChainTest, DownstreamRefusalKeepsItsCode) {
  TestPeer a(Options(), StoreOptions()), b(Options(), StoreOptions()), c(Options(), StoreOptions());
  Client cc(c.port());
  ASSERT_TRUE(IsOk(cc.Call(test::PutFrame(1, 7, 2, "rec", "other bytes"))));
  Client client(a.port());
  Reply r = client.Call(ChainFrame(3, 7, "rec", "data", {b.addr(), c.addr()}));
  EXPECT_EQ(Code(ErrorCode::kExists), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(std::vector<std::string>{c.addr()}, ErrorPeers(r));
}

// A peer that accepts the link but never answers is reported by the peer
// nearest to it, after --chain-timeout per peer left in the chain.
TEST_F(ChainTest, StuckHopTimesOut) {
  TestPeer a(Options(0.3), StoreOptions());
  std::string stuck;
  int fd = test::BindLoopback(true, &stuck);  // listens, never reads
  ASSERT_GE(fd, 0);
  Client client(a.port());
  auto t0 = std::chrono::steady_clock::now();
  Reply r = client.Call(ChainFrame(3, 7, "rec", "data", {stuck}));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(Code(ErrorCode::kPeerUnreachable), ErrorOf(r)) << ErrorMessage(r);
  EXPECT_EQ(std::vector<std::string>{stuck}, ErrorPeers(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("--chain-timeout")) << ErrorMessage(r);
  EXPECT_LT(took, 5.0);
  close(fd);
}

TEST_F(ChainTest, MalformedChainsAreRefused) {
  TestPeer a(Options(), StoreOptions());
  Client client(a.port());
  Reply r = client.Call(ChainFrame(1, 7, "rec", "d", {a.addr()}));
  EXPECT_EQ(Code(ErrorCode::kBadFrame), ErrorOf(r));
  EXPECT_NE(std::string::npos, ErrorMessage(r).find("distinct")) << ErrorMessage(r);
  r = client.Call(ChainFrame(2, 7, "rec", "d", {"no-port"}));
  EXPECT_EQ(Code(ErrorCode::kBadFrame), ErrorOf(r));
  EXPECT_EQ(-1, RankOf(&a, 7, "rec"));  // refused before anything was stored
  // A client may not pretend to be a forwarding peer without a PEER capability
  // when capabilities are checked: see CapabilitiesGuardTheChain.
}

// With capabilities checked, the client's WRITE token covers the first
// copy; each peer shows its own PEER token on the link for the next.
TEST_F(ChainTest, CapabilitiesGuardTheChain) {
  std::string key(kCapabilityKeySize, 'k');
  ServerOptions sv = Options();
  sv.capability_key = key;
  TestPeer a(sv, StoreOptions()), b(sv, StoreOptions());
  Capability cap;
  cap.ops = kOpWrite | kOpRead;
  cap.file_id = 7;
  cap.expires = UnixNow() + 600;
  cap.user = "alice";
  Client client(a.port());
  ASSERT_TRUE(IsOk(client.Call(EncodeAuth(1, MintToken(key, cap)))));
  Reply r = client.Call(ChainFrame(2, 7, "rec", "data", {b.addr()}));
  ASSERT_TRUE(IsOk(r)) << ErrorMessage(r);
  EXPECT_LE(1u, a.server()->ring_auths_sent());
  // The same request marked as forwarded needs a PEER token, which alice lacks.
  r = client.Call(ChainFrame(3, 7, "rec2", "data", {}, kFlagForwarded));
  EXPECT_EQ(Code(ErrorCode::kDenied), ErrorOf(r)) << ErrorMessage(r);
}

}  // namespace
}  // namespace st
