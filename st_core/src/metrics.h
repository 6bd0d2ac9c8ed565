// The peer's metrics, exported in the Prometheus text format
// (docs/operations.md, "Metrics"): requests and replies by type, errors by
// code, request latency histograms by type, bytes through the sockets,
// connections, records, disk space, requests held by impact control (and
// the factor on its limits), and the event loop's busy time.
//
// Counters are atomics written on the loop thread; Render may run anywhere.
// Request latency is measured by the connections (connection.h): from the
// dispatch of a request to the queueing of its reply (the last frame of it,
// for replies in several frames), so deferred replies (GET_LOCAL, a GET
// verified off the loop, PUT under --sync, PUT_CHAIN) count their whole wait.
#ifndef ST_CORE_METRICS_H_
#define ST_CORE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace st {

struct PeerMetrics {
  static constexpr int kTypes = 256;  // by message type byte
  static constexpr int kCodes = 32;   // by error code (larger codes count as 0)
  // Upper bounds (seconds) of the latency buckets; +Inf is implied.
  static constexpr std::array<double, 12> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.5,    2.5};

  std::atomic<uint64_t> requests[kTypes] = {};
  std::atomic<uint64_t> errors[kCodes] = {};
  std::atomic<uint64_t> latency_count[kTypes] = {};
  std::atomic<uint64_t> latency_sum_ns[kTypes] = {};
  std::atomic<uint64_t> latency_bucket[kTypes][kBuckets.size()] = {};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> loop_busy_ns{0};
  std::atomic<int64_t> loop_turn_start_ns{0};  // EventLoop::SetTurnClock
  std::atomic<uint64_t> loop_stalls{0};        // announces withheld (announcer.h)

  void ObserveLatency(uint8_t type, double seconds);
};

// What Render needs besides the counters, sampled by the caller.
struct PeerGauges {
  uint64_t connections = 0;
  uint64_t records = 0;
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;  // 0: no --capacity
  uint64_t fs_total_bytes = 0;
  uint64_t fs_free_bytes = 0;
  uint64_t throttled = 0;
  // --yield-to-host-load (host_load.h): the factor on the limits, and the
  // share of the host's CPU other processes used; the latter only with it.
  double impact_scale = 1;
  bool yield_enabled = false;
  double host_other_cpu = 0;
  uint64_t getlocal_rounds = 0;
  std::string peer_id;
  // The infofile mirror (meta_mirror.h); left out when it is off.
  bool mirror_enabled = false;
  uint64_t meta_mirrors = 0;
  uint64_t mirror_passes = 0;
  uint64_t mirror_failed_passes = 0;
  uint64_t mirror_copies = 0;
  uint64_t mirror_removals = 0;
  uint64_t mirror_errors = 0;
  // --metadata fetch (infofile_copy.h); left out without it.
  bool copies_enabled = false;
  uint64_t copy_fetches = 0;
  uint64_t copy_fetches_from_standbys = 0;  // of copy_fetches: answered by a standby
  uint64_t copy_fetch_failures = 0;
  uint64_t copy_bytes = 0;
  uint64_t infofile_copies = 0;  // how far behind the tracker they are (copy_lag.h)
  uint64_t copies_behind = 0;
  uint64_t copies_max_lag = 0;
  double copies_caught_up_s = 0;  // unix time; 0: never
  // The verifying scrubber (verifier.h).
  uint64_t verify_passes = 0;
  uint64_t copies_verified = 0;
  uint64_t bytes_verified = 0;
  uint64_t copies_bad = 0;
  uint64_t copies_quarantined = 0;
  uint64_t verify_errors = 0;
  double verify_last_pass_s = 0;
  double mirror_last_pass_s = 0;  // unix time of the last complete pass; 0: none yet
};

// The exposition text (version 0.0.4): # HELP / # TYPE lines, then samples.
std::string RenderPrometheus(const PeerMetrics& m, const PeerGauges& g);

}  // namespace st

#endif  // ST_CORE_METRICS_H_
