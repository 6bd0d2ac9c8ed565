// Impact control (FreeLoader, seed 004 sections 3.2.2 and 4.2; docs/peer.md,
// "Yielding to the host's load"): the peer's three token buckets (bytes of
// PUT data received, bytes of GET data sent, requests), the sampling of the
// host's load that scales them, and the count of requests held back.
//
// The server asks Admit before it reads a request's payload (Connection's
// Handler::Admit); a positive answer is how long that connection waits
// before the request is admitted (the peer stops reading its socket), so
// clients slow down instead of failing. A GET's bytes are known once its
// record is found: TakeRead charges them then, a debt the next GETs wait for.
//
// Not thread-safe: the event loop's, except the accessors that say so.
// Admit and TakeRead take the time from the caller (EventLoop::Now() in the
// server), so tests drive the buckets without a loop turning.
#ifndef ST_CORE_ADMISSION_H_
#define ST_CORE_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "event_loop.h"
#include "host_load.h"
#include "status.h"
#include "token_bucket.h"

namespace st {

struct AdmissionOptions {
  // 0 = no limit (ServerOptions holds their meaning).
  double max_write_bytes_per_s = 0;
  double max_read_bytes_per_s = 0;
  double max_requests_per_s = 0;
  bool yield_to_host_load = false;
  double yield_floor = 0.1;
  double host_load_period_s = 1;
  // Where the samples come from; empty: /proc (ReadCpuTimes).
  std::function<Status(CpuTimes*)> cpu_sampler;
};

class Admission {
 public:
  // What a request costs: every request one token of the request bucket; a
  // write waits for the write budget and takes its payload's bytes; a read
  // waits for the read budget (its bytes are taken later, TakeRead).
  struct Cost {
    bool writes = false;
    uint64_t write_bytes = 0;
    bool reads = false;
  };

  Admission(EventLoop* loop, AdmissionOptions options);
  ~Admission();

  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // With --yield-to-host-load and a limit to scale: takes the first sample
  // and then one every host_load_period_s on the loop. (Logs what it does.)
  void Start();

  // Seconds the request must wait (at least 1 ms; 0: admitted now, and its
  // cost is taken). A held request counts in throttled().
  double Admit(double now, const Cost& cost);
  // A GET's bytes, charged once the record is found.
  void TakeRead(double now, double bytes);

  // A bucket for `rate` units per second holds a tenth of a second's worth
  // (at least `least`, so one request of that cost always fits).
  static double BurstFor(double rate, double least);

  // Requests held back so far (any thread may read it).
  uint64_t throttled() const { return throttled_.load(); }
  // The factor --yield-to-host-load applies to the limits now (1 without
  // it), and the share of the host's CPU other processes used over the last
  // period (any thread may read them).
  double impact_scale() const { return impact_scale_.load(); }
  double host_other_cpu() const { return host_other_cpu_.load(); }
  // True if the limits follow the host's load.
  bool yields() const { return host_load_ != nullptr; }

 private:
  // --yield-to-host-load: a sample every host_load_period_s, which scales
  // the three buckets' rates.
  void SampleHostLoad();
  void ScaleLimits(double scale);

  EventLoop* loop_;
  AdmissionOptions options_;
  TokenBucket write_bucket_;
  TokenBucket read_bucket_;
  TokenBucket request_bucket_;
  std::atomic<uint64_t> throttled_{0};
  std::unique_ptr<HostLoadController> host_load_;
  EventLoop::TimerId host_load_timer_ = 0;
  std::atomic<double> impact_scale_{1};
  std::atomic<double> host_other_cpu_{0};
  bool yielding_ = false;          // the factor is below 1
  double yield_logged_at_ = -1e9;  // the last INFO line about it (at most one a minute)
  bool sampler_failed_ = false;    // logged once
};

}  // namespace st

#endif  // ST_CORE_ADMISSION_H_
