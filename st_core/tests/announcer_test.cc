// The announcer against an in-process fake tracker (a gRPC server of
// tracker.proto's Tracker service that keeps what it is sent): what an
// announce carries, the failure domain of --domain among it
// (docs/replication.md, "Failure domains"), and the interval from the reply.
// Liveness from the event loop (docs/reliability.md, "A wedged peer"): the
// loop's heartbeat advances while it is idle and stops while a turn blocks,
// and announces stop while the heartbeat is stale, whatever made it so.
#include "announcer.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "event_loop.h"
#include "options.h"
#include "record_store.h"
#include "storetorrent/v1/tracker.grpc.pb.h"
#include "test_util.h"

namespace st {
namespace {

namespace pb = storetorrent::v1;

class FakeTracker final : public pb::Tracker::Service {
 public:
  grpc::Status Announce(grpc::ServerContext*, const pb::AnnounceRequest* req,
                        pb::AnnounceReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back(*req);
    reply->set_interval_s(0.05);  // the tracker's interval: announce again soon
    return grpc::Status::OK;
  }

  std::vector<pb::AnnounceRequest> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<pb::AnnounceRequest> seen_;
};

class AnnouncerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&tracker_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(nullptr, server_);
    ASSERT_GT(port_, 0);
    StoreOptions so;
    so.data_dir = dir_.path() + "/data";
    ASSERT_TRUE(RecordStore::Open(so, &store_).ok());
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  AnnouncerOptions BaseOptions() {
    AnnouncerOptions ao;
    ao.tracker = "127.0.0.1:" + std::to_string(port_);
    ao.peer_id = store_->peer_id();
    ao.addr = "10.1.2.3:7100";
    ao.interval_s = 0.05;
    return ao;
  }

  // Announces with `domain` until the fake tracker has seen `n` of them.
  std::vector<pb::AnnounceRequest> Announces(const std::string& domain, size_t n) {
    AnnouncerOptions ao = BaseOptions();
    ao.domain = domain;
    Announcer a(ao, store_.get());
    a.Start();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (tracker_.Seen().size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    a.Stop();
    return tracker_.Seen();
  }

  // Waits up to 20 s for the fake tracker to have seen more than `n` announces.
  bool SeenMoreThan(size_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (tracker_.Seen().size() <= n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  test::TempDir dir_;
  FakeTracker tracker_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<RecordStore> store_;
};

TEST_F(AnnouncerTest, CarriesTheDeclaredFailureDomain) {
  std::vector<pb::AnnounceRequest> seen = Announces("dc1/rack07/node3", 2);
  ASSERT_GE(seen.size(), 2u);
  for (const pb::AnnounceRequest& r : seen) {
    EXPECT_EQ("dc1/rack07/node3", r.domain());
    EXPECT_EQ(store_->peer_id(), r.peer_id());
    EXPECT_EQ("10.1.2.3:7100", r.addr());
    EXPECT_EQ(store_->data_dir(), r.data_dir());
    EXPECT_GT(r.started_at(), 0);
  }
}

// Without --domain the announce says nothing: the tracker takes the host of
// the address as the domain (one owner of that rule: st_py.core.placement.peer_domain).
TEST_F(AnnouncerTest, NoDomainDeclaredAnnouncesNone) {
  std::vector<pb::AnnounceRequest> seen = Announces("", 1);
  ASSERT_GE(seen.size(), 1u);
  EXPECT_EQ("", seen[0].domain());
  EXPECT_EQ("10.1.2.3:7100", seen[0].addr());
}

// What --domain parses to is what the announcer sends (main.cc copies it).
TEST_F(AnnouncerTest, TheOptionIsWhatIsAnnounced) {
  Options o;
  const char* argv[] = {"st-peer", "--data", "/d", "--domain", "eu-west/r2/h9"};
  ASSERT_TRUE(ParseOptions(5, argv, &o).ok());
  std::vector<pb::AnnounceRequest> seen = Announces(o.domain, 1);
  ASSERT_GE(seen.size(), 1u);
  EXPECT_EQ("eu-west/r2/h9", seen[0].domain());
}

// A loop with nothing to do still wakes every tick, so its heartbeat is
// fresh while it waits: a stale one can only mean it is not turning.
TEST(EventLoopTest, TheHeartbeatAdvancesWhileIdle) {
  std::unique_ptr<EventLoop> loop;
  ASSERT_TRUE(EventLoop::Create(&loop).ok());
  EXPECT_GT(loop->last_turn_ns().load(), 0);  // set from Create on
  std::thread runner([&loop] { loop->Run(); });
  int64_t seen = loop->last_turn_ns().load();
  int advances = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (advances < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int64_t now = loop->last_turn_ns().load();
    if (now > seen) ++advances;
    seen = now;
  }
  loop->StopFromAnyThread();
  runner.join();
  EXPECT_GE(advances, 5);  // no fd, timer or task: only the tick woke it
}

// A turn that blocks stops the heartbeat; it moves on once the turn ends.
TEST(EventLoopTest, TheHeartbeatStopsWhileATurnBlocks) {
  std::unique_ptr<EventLoop> loop;
  ASSERT_TRUE(EventLoop::Create(&loop).ok());
  std::atomic<int64_t> turn_start{0};
  loop->SetTurnClock(&turn_start);
  std::atomic<bool> blocking{false}, release{false};
  std::thread runner([&loop] { loop->Run(); });
  loop->Post([&] {
    blocking = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  while (!blocking) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int64_t frozen = loop->last_turn_ns().load();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(frozen, loop->last_turn_ns().load());
  EXPECT_GT(turn_start.load(), 0);  // the turn in progress, counted as busy
  EXPECT_GE(EventLoop::NowNs() - frozen, 250 * 1000 * 1000);
  release = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (loop->last_turn_ns().load() == frozen && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(loop->last_turn_ns().load(), frozen);
  loop->StopFromAnyThread();
  runner.join();
}

// Announces stop while the heartbeat is older than the stall limit, with no
// turn in progress (the loop thread stopped while it waits), and resume when
// it beats again; until the limit, the silent loop is announced busy.
TEST_F(AnnouncerTest, StopsWhileTheHeartbeatIsStaleAndResumes) {
  std::atomic<int64_t> heartbeat{EventLoop::NowNs()};
  std::atomic<int64_t> turn_start{0};  // no turn in progress: stopped in epoll_wait
  std::atomic<uint64_t> busy{0}, stalls{0};
  std::atomic<bool> beating{true}, done{false};
  std::thread loop([&] {
    while (!done) {
      if (beating) heartbeat = EventLoop::NowNs();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  AnnouncerOptions ao = BaseOptions();
  ao.loop_last_turn_ns = &heartbeat;
  ao.loop_turn_start_ns = &turn_start;
  ao.loop_busy_ns = &busy;
  ao.stalls = &stalls;
  ao.loop_stall_limit_s = 1.5;
  Announcer a(ao, store_.get());
  a.Start();
  ASSERT_TRUE(SeenMoreThan(2));
  EXPECT_LT(tracker_.Seen().back().load(), 0.5);  // beating and idle

  beating = false;  // the heartbeat goes stale: announces stop after the limit
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (stalls.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(stalls.load(), 0u);
  std::vector<pb::AnnounceRequest> seen = tracker_.Seen();
  double max_load = 0;
  for (size_t i = 2; i < seen.size(); ++i) max_load = std::max(max_load, seen[i].load());
  EXPECT_GE(max_load, 0.9);  // overdue by several ticks: announced busy, not idle
  size_t withheld_at = seen.size();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(tracker_.Seen().size(), withheld_at + 1);  // at most one already in flight

  beating = true;  // turns again: announces resume
  EXPECT_TRUE(SeenMoreThan(tracker_.Seen().size() + 2));
  a.Stop();
  done = true;
  loop.join();
}

// Without a heartbeat (no event loop given), the announcer never withholds.
TEST_F(AnnouncerTest, WithoutAHeartbeatAnnouncesAlways) {
  std::atomic<uint64_t> stalls{0};
  AnnouncerOptions ao = BaseOptions();
  ao.stalls = &stalls;
  ao.loop_stall_limit_s = 0.01;
  Announcer a(ao, store_.get());
  a.Start();
  EXPECT_TRUE(SeenMoreThan(3));
  a.Stop();
  EXPECT_EQ(0u, stalls.load());
}

}  // namespace
}  // namespace st
