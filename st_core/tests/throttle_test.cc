// Impact control (FreeLoader seed 004, 3.2.2): token buckets cap a peer's
// write bandwidth, read bandwidth and request rate; over a limit requests
// wait, none fails. The limits' accuracy is measured in bench/ (throttle);
// here: the bucket's arithmetic, and that a real peer holds requests back
// (lower bounds on time only, which a slow machine cannot break).
#include "token_bucket.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "peer_harness.h"

namespace st {
namespace {

using test::Client;
using test::IsOk;
using test::PutFrame;
using test::Reply;
using test::TestPeer;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(TokenBucket, RateBurstAndDebt) {
  TokenBucket unlimited;
  EXPECT_EQ(0, unlimited.WaitFor(1, 1e12));
  TokenBucket b(10, 2);  // 10 per second, at most 2 banked
  EXPECT_EQ(0, b.WaitFor(100, 1));  // starts full
  b.Take(100, 2);
  EXPECT_NEAR(0.1, b.WaitFor(100, 1), 1e-9);
  EXPECT_NEAR(0, b.WaitFor(100.1, 1), 1e-9);
  b.Take(100.1, 6);  // a large request: admitted, leaves a debt of 5
  EXPECT_NEAR(0.6, b.WaitFor(100.1, 1), 1e-9);
  EXPECT_EQ(0, b.WaitFor(110, 1));
  EXPECT_DOUBLE_EQ(2, b.tokens());  // refills up to the burst, no further
}

class ThrottleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }
};

// 2.5 MB of PUTs at 1 MB/s take at least 2.4 s minus the 0.1 s burst; every
// PUT succeeds, and PING on another connection is not held behind them.
TEST_F(ThrottleTest, WritesWaitAndSucceed) {
  ServerOptions sv;
  sv.max_write_bytes_per_s = 1e6;
  TestPeer peer(sv, StoreOptions());
  Client c(peer.port());
  std::string batch;
  for (int i = 0; i < 25; ++i)
    batch += PutFrame(i + 1, 7, 0, "r" + std::to_string(i), std::string(100000, 'w'));
  auto t0 = std::chrono::steady_clock::now();
  std::thread sender([&] { c.Send(batch); });
  Client other(peer.port());
  ASSERT_TRUE(test::PollFor([&] { return peer.server()->throttled() > 0; }, 10));
  EXPECT_TRUE(IsOk(other.Call(EncodePing(1))));  // answered while the writer is held
  for (int i = 0; i < 25; ++i) {
    Reply r = c.Read(30);
    ASSERT_TRUE(IsOk(r)) << i << " " << test::ErrorMessage(r);
  }
  sender.join();
  EXPECT_GE(Since(t0), 2.2);
}

TEST_F(ThrottleTest, ReadsWaitAndSucceed) {
  ServerOptions sv;
  sv.max_read_bytes_per_s = 1e6;
  TestPeer peer(sv, StoreOptions());
  Client c(peer.port());
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(IsOk(c.Call(PutFrame(i + 1, 7, 0, "r" + std::to_string(i),
                                     std::string(200000, 'r')))));
  std::string batch;
  for (int i = 0; i < 6; ++i) batch += EncodeGet(100 + i, 7, "r" + std::to_string(i));
  auto t0 = std::chrono::steady_clock::now();
  c.Send(batch);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(std::string(200000, 'r'), test::DataOf(c.Read(30))) << i;
  // 1.2 MB at 1 MB/s: the first GET runs on the burst, the rest pay its debt.
  EXPECT_GE(Since(t0), 0.9);
  EXPECT_GT(peer.server()->throttled(), 0u);
}

TEST_F(ThrottleTest, RequestRate) {
  ServerOptions sv;
  sv.max_requests_per_s = 20;
  TestPeer peer(sv, StoreOptions());
  Client c(peer.port());
  std::string batch;
  for (int i = 0; i < 30; ++i) batch += EncodeGet(i + 1, 7, "missing");
  auto t0 = std::chrono::steady_clock::now();
  c.Send(batch);
  for (int i = 0; i < 30; ++i)
    EXPECT_EQ(static_cast<uint16_t>(ErrorCode::kNotFound), test::ErrorOf(c.Read(30)));
  EXPECT_GE(Since(t0), 1.2);  // 30 requests at 20/s with a burst of 2
}

}  // namespace
}  // namespace st
