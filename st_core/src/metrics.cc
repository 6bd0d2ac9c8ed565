#include "metrics.h"

#include <cinttypes>
#include <cstdio>

#include "protocol.h"

namespace st {

void PeerMetrics::ObserveLatency(uint8_t type, double seconds) {
  latency_count[type].fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns[type].fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      latency_bucket[type][i].fetch_add(1, std::memory_order_relaxed);
      break;  // cumulated at render time
    }
  }
}

namespace {

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void Sample(std::string* out, const char* name, const std::string& labels, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += ' ';
  *out += buf;
  *out += '\n';
}

void Sample(std::string* out, const char* name, const std::string& labels, uint64_t v) {
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += ' ' + std::to_string(v) + '\n';
}

std::string TypeLabel(int t) {
  const char* n = MsgTypeName(static_cast<uint8_t>(t));
  return std::string("type=\"") + (n != nullptr ? n : "UNKNOWN") + "\"";
}

}  // namespace

std::string RenderPrometheus(const PeerMetrics& m, const PeerGauges& g) {
  std::string out;
  out.reserve(8192);
  Header(&out, "st_peer_info", "gauge", "Constant 1, labelled with the peer's identity.");
  Sample(&out, "st_peer_info", "peer_id=\"" + g.peer_id + "\"", uint64_t{1});

  Header(&out, "st_peer_requests_total", "counter", "Requests received, by message type.");
  for (int t = 0; t < PeerMetrics::kTypes; ++t) {
    uint64_t v = m.requests[t].load(std::memory_order_relaxed);
    if (v > 0) Sample(&out, "st_peer_requests_total", TypeLabel(t), v);
  }
  Header(&out, "st_peer_errors_total", "counter", "ERROR replies sent, by error code.");
  for (int c = 1; c < PeerMetrics::kCodes; ++c) {
    uint64_t v = m.errors[c].load(std::memory_order_relaxed);
    if (v > 0) {
      Sample(&out, "st_peer_errors_total",
             std::string("code=\"") + ErrorCodeName(static_cast<uint16_t>(c)) + "\"", v);
    }
  }
  Header(&out, "st_peer_request_seconds", "histogram",
         "Time from a request's dispatch to its reply being queued, by message type.");
  for (int t = 0; t < PeerMetrics::kTypes; ++t) {
    uint64_t count = m.latency_count[t].load(std::memory_order_relaxed);
    if (count == 0) continue;
    std::string type = TypeLabel(t);
    uint64_t cum = 0;
    for (size_t i = 0; i < PeerMetrics::kBuckets.size(); ++i) {
      cum += m.latency_bucket[t][i].load(std::memory_order_relaxed);
      char le[32];
      std::snprintf(le, sizeof(le), "%g", PeerMetrics::kBuckets[i]);
      Sample(&out, "st_peer_request_seconds_bucket", type + ",le=\"" + le + "\"", cum);
    }
    Sample(&out, "st_peer_request_seconds_bucket", type + ",le=\"+Inf\"", count);
    Sample(&out, "st_peer_request_seconds_sum", type,
           static_cast<double>(m.latency_sum_ns[t].load(std::memory_order_relaxed)) * 1e-9);
    Sample(&out, "st_peer_request_seconds_count", type, count);
  }
  Header(&out, "st_peer_received_bytes_total", "counter",
         "Bytes read from client and peer sockets.");
  Sample(&out, "st_peer_received_bytes_total", "", m.bytes_received.load());
  Header(&out, "st_peer_sent_bytes_total", "counter", "Bytes written to client and peer sockets.");
  Sample(&out, "st_peer_sent_bytes_total", "", m.bytes_sent.load());
  Header(&out, "st_peer_connections_accepted_total", "counter", "Connections accepted.");
  Sample(&out, "st_peer_connections_accepted_total", "", m.connections_accepted.load());
  Header(&out, "st_peer_connections", "gauge", "Open connections (clients and ring links).");
  Sample(&out, "st_peer_connections", "", g.connections);
  Header(&out, "st_peer_records", "gauge", "Records held.");
  Sample(&out, "st_peer_records", "", g.records);
  Header(&out, "st_peer_used_bytes", "gauge", "Bytes of the records held.");
  Sample(&out, "st_peer_used_bytes", "", g.used_bytes);
  Header(&out, "st_peer_capacity_bytes", "gauge", "The --capacity limit (0: none).");
  Sample(&out, "st_peer_capacity_bytes", "", g.capacity_bytes);
  Header(&out, "st_peer_filesystem_size_bytes", "gauge",
         "Size of the data directory's filesystem.");
  Sample(&out, "st_peer_filesystem_size_bytes", "", g.fs_total_bytes);
  Header(&out, "st_peer_filesystem_free_bytes", "gauge",
         "Bytes free to the peer on the data directory's filesystem.");
  Sample(&out, "st_peer_filesystem_free_bytes", "", g.fs_free_bytes);
  Header(&out, "st_peer_throttled_total", "counter", "Requests held back by impact control.");
  Sample(&out, "st_peer_throttled_total", "", g.throttled);
  Header(&out, "st_peer_getlocal_rounds", "gauge", "GET_LOCAL rounds in progress or cached.");
  Sample(&out, "st_peer_getlocal_rounds", "", g.getlocal_rounds);
  if (g.mirror_enabled) {
    Header(&out, "st_peer_meta_mirrors", "gauge",
           "Infofile mirrors kept in <data>/meta/ for recovery without the namespace.");
    Sample(&out, "st_peer_meta_mirrors", "", g.meta_mirrors);
    Header(&out, "st_peer_meta_mirror_passes_total", "counter",
           "Mirror passes over the namespace, by result.");
    Sample(&out, "st_peer_meta_mirror_passes_total", "result=\"ok\"",
           g.mirror_passes - g.mirror_failed_passes);
    Sample(&out, "st_peer_meta_mirror_passes_total", "result=\"failed\"", g.mirror_failed_passes);
    Header(&out, "st_peer_meta_mirror_copies_total", "counter", "Infofiles copied to mirrors.");
    Sample(&out, "st_peer_meta_mirror_copies_total", "", g.mirror_copies);
    Header(&out, "st_peer_meta_mirror_removals_total", "counter",
           "Mirrors removed (file deleted and none of its records left on this peer).");
    Sample(&out, "st_peer_meta_mirror_removals_total", "", g.mirror_removals);
    Header(&out, "st_peer_meta_mirror_errors_total", "counter",
           "Infofiles that could not be probed or copied (retried on the next pass).");
    Sample(&out, "st_peer_meta_mirror_errors_total", "", g.mirror_errors);
    Header(&out, "st_peer_meta_mirror_last_pass_timestamp_seconds", "gauge",
           "Unix time of the last complete mirror pass (0: none yet).");
    Sample(&out, "st_peer_meta_mirror_last_pass_timestamp_seconds", "", g.mirror_last_pass_s);
  }
  Header(&out, "st_peer_verify_passes_total", "counter",
         "Complete passes of the verifying scrubber over every stored copy (--verify-interval).");
  Sample(&out, "st_peer_verify_passes_total", "", g.verify_passes);
  Header(&out, "st_peer_copies_verified_total", "counter",
         "Stored copies re-read and found to match the CRC-32C they were stored with.");
  Sample(&out, "st_peer_copies_verified_total", "", g.copies_verified);
  Header(&out, "st_peer_verified_bytes_total", "counter", "Bytes of the copies verified.");
  Sample(&out, "st_peer_verified_bytes_total", "", g.bytes_verified);
  Header(&out, "st_peer_copies_bad_total", "counter",
         "Stored copies whose bytes did not match their CRC-32C (bit rot, a damaged file).");
  Sample(&out, "st_peer_copies_bad_total", "", g.copies_bad);
  Header(&out, "st_peer_copies_quarantined_total", "counter",
         "Bad copies moved to <data>/quarantine/ and reported to the tracker (repair restores "
         "them).");
  Sample(&out, "st_peer_copies_quarantined_total", "", g.copies_quarantined);
  Header(&out, "st_peer_verify_errors_total", "counter",
         "Copies the verifier could not read (not a CRC mismatch; retried next pass).");
  Sample(&out, "st_peer_verify_errors_total", "", g.verify_errors);
  Header(&out, "st_peer_verify_last_pass_timestamp_seconds", "gauge",
         "Unix time of the last complete verify pass (0: none yet).");
  Sample(&out, "st_peer_verify_last_pass_timestamp_seconds", "", g.verify_last_pass_s);
  Header(&out, "st_peer_loop_stalled_announces_total", "counter",
         "Announces withheld because the event loop was stuck in one turn longer than "
         "--loop-stall-limit (the tracker fails the peer).");
  Sample(&out, "st_peer_loop_stalled_announces_total", "",
         m.loop_stalls.load(std::memory_order_relaxed));
  Header(&out, "st_peer_loop_busy_seconds_total", "counter",
         "Time the event loop spent handling events, timers and tasks (not waiting).");
  Sample(&out, "st_peer_loop_busy_seconds_total", "",
         static_cast<double>(m.loop_busy_ns.load(std::memory_order_relaxed)) * 1e-9);
  return out;
}

}  // namespace st
