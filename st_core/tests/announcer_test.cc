// The announcer against an in-process fake tracker (a gRPC server of
// tracker.proto's Tracker service that keeps what it is sent): what an
// announce carries, the failure domain of --domain among it
// (docs/replication.md, "Failure domains"), and the interval from the reply.
#include "announcer.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

  // Announces with `domain` until the fake tracker has seen `n` of them.
  std::vector<pb::AnnounceRequest> Announces(const std::string& domain, size_t n) {
    AnnouncerOptions ao;
    ao.tracker = "127.0.0.1:" + std::to_string(port_);
    ao.peer_id = store_->peer_id();
    ao.addr = "10.1.2.3:7100";
    ao.domain = domain;
    ao.interval_s = 0.05;
    Announcer a(ao, store_.get());
    a.Start();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (tracker_.Seen().size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    a.Stop();
    return tracker_.Seen();
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
// the address as the domain (one owner of that rule: st_py.placement.peer_domain).
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

}  // namespace
}  // namespace st
