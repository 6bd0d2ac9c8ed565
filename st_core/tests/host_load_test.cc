// Impact control that follows the host's load (host_load.h; FreeLoader seed
// 004, 4.2): parsing /proc, the controller fed with made-up samples (no
// clock, no sleeps), the buckets' new rates, and a real peer whose samples
// are injected. The effect of a real CPU burner is measured in
// bench/host_load.py (docs/benchmarks.md).
#include "host_load.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "metrics.h"
#include "peer_harness.h"
#include "token_bucket.h"

namespace st {
namespace {

using test::Client;
using test::IsOk;
using test::PutFrame;
using test::Reply;
using test::TestPeer;

TEST(ProcStat, TheCpuLine) {
  CpuTimes t;
  ASSERT_TRUE(ParseProcStat("cpu  100 20 30 400 50 6 7 8 3 0\ncpu0 50 10 15 200 25 3 3 4 0 0\n",
                            &t));
  EXPECT_EQ(163u, t.host_busy);  // user nice system irq softirq (guest is in user; steal left out)
  EXPECT_EQ(613u, t.host_total);  // + idle + iowait
  ASSERT_TRUE(ParseProcStat("cpu 1 2 3 4\n", &t));  // a kernel without iowait and later fields
  EXPECT_EQ(6u, t.host_busy);
  EXPECT_EQ(10u, t.host_total);
  EXPECT_FALSE(ParseProcStat("cpu0 1 2 3 4 5 6 7\n", &t));  // one CPU's line is not the sum
  EXPECT_FALSE(ParseProcStat("intr 1 2 3 4\n", &t));
  EXPECT_FALSE(ParseProcStat("cpu  1 2 x 4\n", &t));
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3\n", &t));
  EXPECT_FALSE(ParseProcStat("", &t));
}

TEST(ProcStat, TheProcessLine) {
  uint64_t ticks = 0;
  // tpgid (field 8) is -1 without a terminal; utime 250 and stime 75 are fields 14 and 15
  ASSERT_TRUE(ParseProcSelfStat(
      "1234 (st-peer) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 5 0 100 2000 300\n",
      &ticks));
  EXPECT_EQ(325u, ticks);
  // a command name with spaces and parentheses: fields count from the last ')'
  ASSERT_TRUE(ParseProcSelfStat("7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 9 1 0 0 20 0 1 0 5", &ticks));
  EXPECT_EQ(10u, ticks);
  EXPECT_FALSE(ParseProcSelfStat("7 (peer) S 1 7 7 0 -1 0 0 0 0 0 9", &ticks));  // cut short
  EXPECT_FALSE(ParseProcSelfStat("7 peer S 1", &ticks));
  EXPECT_FALSE(ParseProcSelfStat("7 (p) S 1 7 7 0 -1 0 0 0 0 0 x 1 0", &ticks));
}

TEST(ProcStat, ThisMachine) {
  CpuTimes a;
  Status s = ReadCpuTimes(&a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(a.host_total, 0u);
  EXPECT_LE(a.host_busy, a.host_total);
  EXPECT_LE(a.self, a.host_busy + 100);  // this process's CPU is part of the host's
}

// A host whose CPUs give `ticks` per sample; each Step says which shares of
// it other processes and this one used.
struct FakeHost {
  CpuTimes t;
  CpuTimes Step(double other, double own, uint64_t ticks = 200) {
    t.host_total += ticks;
    t.host_busy += static_cast<uint64_t>((other + own) * static_cast<double>(ticks) + 0.5);
    t.self += static_cast<uint64_t>(own * static_cast<double>(ticks) + 0.5);
    return t;
  }
};

TEST(HostLoadController, YieldsAtOnceAndComesBackGradually) {
  HostLoadController c(0.1);
  FakeHost host;
  EXPECT_EQ(1, c.Update(host.Step(0.9, 0)));  // the first sample is a base only
  EXPECT_EQ(0, c.other_load());
  EXPECT_EQ(1, c.Update(host.Step(0.05, 0.3)));  // other work within the noise band
  EXPECT_NEAR(0.05, c.other_load(), 1e-9);
  EXPECT_NEAR(0.3, c.own_load(), 1e-9);
  // half the host's CPU (one core of two) busy with other work: 1 - 0.4 / 0.9
  EXPECT_NEAR(0.5556, c.Update(host.Step(0.5, 0.1)), 1e-3);
  // all of it: the floor, at once
  EXPECT_NEAR(0.1, c.Update(host.Step(1.0, 0)), 1e-9);
  EXPECT_NEAR(0.1, c.Update(host.Step(0.97, 0.03)), 1e-9);
  // the other work stops: back by kRisePerSample a sample, to 1
  EXPECT_NEAR(0.35, c.Update(host.Step(0, 0.02)), 1e-9);
  EXPECT_NEAR(0.6, c.Update(host.Step(0, 0.02)), 1e-9);
  EXPECT_NEAR(0.85, c.Update(host.Step(0.02, 0.02)), 1e-9);
  EXPECT_NEAR(1.0, c.Update(host.Step(0, 0)), 1e-9);
  // a short burst of other work pulls it down again at once
  EXPECT_NEAR(0.5556, c.Update(host.Step(0.5, 0)), 1e-3);
  // rising, it stops at the target
  EXPECT_NEAR(0.7778, c.Update(host.Step(0.3, 0)), 1e-3);
}

TEST(HostLoadController, OwnWorkIsNotOtherWork) {
  HostLoadController c(0.1);
  FakeHost host;
  c.Update(host.Step(0, 0));
  EXPECT_EQ(1, c.Update(host.Step(0.02, 0.95)));  // the peer itself busy: no yielding
  EXPECT_NEAR(0.95, c.own_load(), 1e-9);
  // the process's ticks are exact and the host's per tick: own above busy is not negative work
  CpuTimes t = host.Step(0, 0.5);
  t.self += 2;
  EXPECT_EQ(1, c.Update(t));
  EXPECT_EQ(0, c.other_load());
}

TEST(HostLoadController, SamplesThatDoNotMoveChangeNothing) {
  HostLoadController c(0.2);
  FakeHost host;
  c.Update(host.Step(0, 0));
  EXPECT_NEAR(0.2, c.Update(host.Step(1, 0)), 1e-9);
  EXPECT_NEAR(0.2, c.Update(host.t), 1e-9);  // the same sample again (no tick passed)
  CpuTimes back = host.t;
  back.host_total -= 10;  // counters going back (not from /proc): a new base
  EXPECT_NEAR(0.2, c.Update(back), 1e-9);
  EXPECT_NEAR(0.45, c.Update(host.Step(0, 0)), 1e-9);
  EXPECT_EQ(0.2, c.floor());
  EXPECT_EQ(1, HostLoadController::Target(0.1, 0.1));
  EXPECT_EQ(0.1, HostLoadController::Target(1, 0.1));
  EXPECT_EQ(0.5, HostLoadController::Target(1, 0.5));
}

TEST(TokenBucket, SetRateKeepsCreditAndDebt) {
  TokenBucket b(10, 1);
  b.Take(100, 5);  // a debt of 4
  b.SetRate(100, 2, 1.5);
  EXPECT_NEAR(2.5, b.WaitFor(100, 1), 1e-9);  // 5 tokens short, paid at 2 a second
  EXPECT_EQ(0, b.WaitFor(103, 1));
  EXPECT_NEAR(1.5, b.tokens(), 1e-9);  // up to the new burst
  b.SetRate(103, 100, 10);
  EXPECT_NEAR(1.5, b.tokens(), 1e-9);  // credit kept, not raised to the new burst
  b.SetRate(103, 1, 1);
  EXPECT_NEAR(1, b.tokens(), 1e-9);  // nor above a smaller one
  TokenBucket unlimited;
  unlimited.SetRate(1, 5, 1);
  EXPECT_FALSE(unlimited.limited());
}

TEST(Metrics, TheScaleIsAGauge) {
  PeerMetrics m;
  PeerGauges g;
  std::string text = RenderPrometheus(m, g);
  EXPECT_NE(std::string::npos, text.find("\nst_peer_impact_scale 1\n")) << text;
  EXPECT_EQ(std::string::npos, text.find("st_peer_host_other_cpu_ratio"));
  g.impact_scale = 0.25;
  g.yield_enabled = true;
  g.host_other_cpu = 0.75;
  text = RenderPrometheus(m, g);
  EXPECT_NE(std::string::npos, text.find("\nst_peer_impact_scale 0.25\n")) << text;
  EXPECT_NE(std::string::npos, text.find("\nst_peer_host_other_cpu_ratio 0.75\n")) << text;
}

class HostLoadPeerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }
};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A peer whose samples say other work takes the host's CPU scales its write
// limit down to the floor (writes take that much longer, none fails), and
// back to the whole limit once the samples say it stopped. (A lower bound on
// time only, which a slow machine cannot break.)
TEST_F(HostLoadPeerTest, LimitsFollowTheInjectedLoad) {
  std::atomic<double> other{1.0};
  auto host = std::make_shared<FakeHost>();
  ServerOptions sv;
  sv.max_write_bytes_per_s = 1e6;
  sv.yield_to_host_load = true;
  sv.yield_floor = 0.25;
  sv.host_load_period_s = 0.02;
  sv.cpu_sampler = [&other, host](CpuTimes* t) {  // on the loop thread
    *t = host->Step(other.load(), 0.01);
    return Status::OK();
  };
  TestPeer peer(sv, StoreOptions());
  ASSERT_TRUE(test::PollFor([&] { return peer.server()->impact_scale() == 0.25; }, 10));
  EXPECT_EQ(1.0, peer.server()->host_other_cpu());
  // 500 kB at 0.25 MB/s: the first PUT runs on credit, the rest pay its debt
  Client c(peer.port());
  std::string batch;
  for (int i = 0; i < 5; ++i)
    batch += PutFrame(i + 1, 7, 0, "r" + std::to_string(i), std::string(100000, 'w'));
  auto t0 = std::chrono::steady_clock::now();
  c.Send(batch);
  for (int i = 0; i < 5; ++i) {
    Reply r = c.Read(30);
    ASSERT_TRUE(IsOk(r)) << i << " " << test::ErrorMessage(r);
  }
  EXPECT_GE(Since(t0), 1.4);  // at the whole 1 MB/s it would be 0.4 s
  EXPECT_GT(peer.server()->throttled(), 0u);
  other = 0.0;  // the other work stops
  ASSERT_TRUE(test::PollFor([&] { return peer.server()->impact_scale() == 1.0; }, 10));
  EXPECT_EQ(0.0, peer.server()->host_other_cpu());
}

TEST_F(HostLoadPeerTest, WithoutTheOptionOrALimitNothingIsSampled) {
  ServerOptions sv;
  sv.max_write_bytes_per_s = 1e6;
  std::atomic<int> samples{0};
  sv.cpu_sampler = [&samples](CpuTimes*) {
    ++samples;
    return Status::OK();
  };
  sv.host_load_period_s = 0.01;
  {
    TestPeer peer(sv, StoreOptions());
    Client c(peer.port());
    EXPECT_TRUE(IsOk(c.Call(EncodePing(1))));
    EXPECT_EQ(1.0, peer.server()->impact_scale());
  }
  sv.yield_to_host_load = true;  // with no limit to scale: a warning, no sampling
  sv.max_write_bytes_per_s = 0;
  {
    TestPeer peer(sv, StoreOptions());
    Client c(peer.port());
    EXPECT_TRUE(IsOk(c.Call(EncodePing(1))));
  }
  EXPECT_EQ(0, samples.load());
}

}  // namespace
}  // namespace st
