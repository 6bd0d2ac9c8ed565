// Admission (admission.h): the buckets refuse and allow as configured, with
// the time given by the test (no socket, no loop turning), and the host's
// load scales them.
#include "admission.h"

#include <gtest/gtest.h>

#include <memory>

#include "event_loop.h"

namespace st {
namespace {

class AdmissionTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(EventLoop::Create(&loop_).ok()); }

  std::unique_ptr<Admission> Make(const AdmissionOptions& o) {
    return std::make_unique<Admission>(loop_.get(), o);
  }

  static Admission::Cost Write(uint64_t bytes) {
    Admission::Cost c;
    c.writes = true;
    c.write_bytes = bytes;
    return c;
  }
  static Admission::Cost Read() {
    Admission::Cost c;
    c.reads = true;
    return c;
  }

  std::unique_ptr<EventLoop> loop_;
};

TEST_F(AdmissionTest, UnlimitedAdmitsEverything) {
  auto a = Make(AdmissionOptions());
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(0, a->Admit(1, Admission::Cost()));
    EXPECT_EQ(0, a->Admit(1, Write(1 << 30)));
    EXPECT_EQ(0, a->Admit(1, Read()));
    a->TakeRead(1, 1 << 30);
  }
  EXPECT_EQ(0u, a->throttled());
  EXPECT_EQ(1.0, a->impact_scale());
  EXPECT_FALSE(a->yields());
}

TEST_F(AdmissionTest, RequestRateHoldsTheRequestOverTheBurst) {
  AdmissionOptions o;
  o.max_requests_per_s = 100;  // a burst of 10 (a tenth of a second)
  auto a = Make(o);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(0, a->Admit(10, Admission::Cost())) << i;
  double wait = a->Admit(10, Admission::Cost());
  EXPECT_NEAR(0.01, wait, 1e-9);  // one token at 100 per second
  EXPECT_EQ(1u, a->throttled());
  // A held request takes nothing: once its wait is over it is admitted.
  EXPECT_EQ(0, a->Admit(10.015, Admission::Cost()));
  EXPECT_GT(a->Admit(10.015, Admission::Cost()), 0);
  EXPECT_EQ(2u, a->throttled());
}

TEST_F(AdmissionTest, WriteBytesAreADebtTheNextWritesWaitFor) {
  AdmissionOptions o;
  o.max_write_bytes_per_s = 1000;  // a burst of 100 bytes
  auto a = Make(o);
  // A write larger than the burst is admitted at once and leaves a debt.
  EXPECT_EQ(0, a->Admit(5, Write(1100)));
  // 1000 bytes owed, one needed: 1.001 s at 1000 bytes per second.
  EXPECT_NEAR(1.001, a->Admit(5, Write(1)), 1e-9);
  // Reads and other requests do not wait for the write budget.
  EXPECT_EQ(0, a->Admit(5, Read()));
  EXPECT_EQ(0, a->Admit(5, Admission::Cost()));
  EXPECT_EQ(0, a->Admit(6.01, Write(1)));
  EXPECT_EQ(1u, a->throttled());
}

TEST_F(AdmissionTest, ReadBytesAreTakenWhenKnown) {
  AdmissionOptions o;
  o.max_read_bytes_per_s = 1000;
  auto a = Make(o);
  EXPECT_EQ(0, a->Admit(5, Read()));
  a->TakeRead(5, 600);  // the record's size, once found
  double wait = a->Admit(5, Read());
  EXPECT_NEAR(0.501, wait, 1e-9);  // 500 owed, one needed
  EXPECT_EQ(0, a->Admit(5, Write(1 << 20)));  // writes are not limited here
  EXPECT_EQ(0, a->Admit(5.6, Read()));
  EXPECT_EQ(1u, a->throttled());
}

TEST_F(AdmissionTest, AWaitIsAtLeastAMillisecond) {
  AdmissionOptions o;
  o.max_write_bytes_per_s = 1e9;  // a burst of 1e8 bytes
  auto a = Make(o);
  EXPECT_EQ(0, a->Admit(1, Write(100000001)));
  EXPECT_EQ(0.001, a->Admit(1, Write(1)));  // 2 bytes to wait for: 2 ns, held 1 ms
  EXPECT_EQ(1u, a->throttled());
}

TEST_F(AdmissionTest, HostLoadScalesTheLimits) {
  AdmissionOptions o;
  o.max_requests_per_s = 100;
  o.yield_to_host_load = true;
  o.yield_floor = 0.25;
  o.host_load_period_s = 0.01;
  // Each sample: the host busy for every tick of the interval, none of it
  // this process's: other work takes the whole CPU.
  uint64_t ticks = 0;
  o.cpu_sampler = [&ticks](CpuTimes* t) {
    ticks += 100;
    t->host_busy = ticks;
    t->host_total = ticks;
    t->self = 0;
    return Status::OK();
  };
  auto a = Make(o);
  a->Start();
  EXPECT_TRUE(a->yields());
  EXPECT_EQ(1.0, a->impact_scale());  // the first sample is only a base
  loop_->AddTimer(0.05, [this] { loop_->Stop(); });
  loop_->Run();
  EXPECT_EQ(0.25, a->impact_scale());
  EXPECT_EQ(1.0, a->host_other_cpu());
  // 25 requests per second now, a burst of 2.5.
  const double now = EventLoop::Now() + 10;
  EXPECT_EQ(0, a->Admit(now, Admission::Cost()));
  EXPECT_EQ(0, a->Admit(now, Admission::Cost()));
  EXPECT_NEAR(0.5 / 25, a->Admit(now, Admission::Cost()), 1e-9);
}

TEST_F(AdmissionTest, YieldWithoutALimitDoesNotSample) {
  AdmissionOptions o;
  o.yield_to_host_load = true;
  int samples = 0;
  o.cpu_sampler = [&samples](CpuTimes*) {
    ++samples;
    return Status::OK();
  };
  auto a = Make(o);
  a->Start();
  EXPECT_FALSE(a->yields());
  EXPECT_EQ(0, samples);
}

}  // namespace
}  // namespace st
