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

// One metric of one sample, in one call: its HELP and TYPE lines, then the
// sample (labels: "" for none).
template <typename V>
void Metric(std::string* out, const char* name, const char* type, const char* help,
            const std::string& labels, V v) {
  Header(out, name, type, help);
  Sample(out, name, labels, v);
}

template <typename V>
void Counter(std::string* out, const char* name, const char* help, V v) {
  Metric(out, name, "counter", help, "", v);
}

template <typename V>
void Gauge(std::string* out, const char* name, const char* help, V v) {
  Metric(out, name, "gauge", help, "", v);
}

}  // namespace

std::string RenderPrometheus(const PeerMetrics& m, const PeerGauges& g) {
  std::string out;
  out.reserve(8192);
  Metric(&out, "st_peer_info", "gauge", "Constant 1, labelled with the peer's identity.",
         "peer_id=\"" + g.peer_id + "\"", uint64_t{1});

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
  Counter(&out, "st_peer_received_bytes_total", "Bytes read from client and peer sockets.",
          m.bytes_received.load());
  Counter(&out, "st_peer_sent_bytes_total", "Bytes written to client and peer sockets.",
          m.bytes_sent.load());
  Counter(&out, "st_peer_connections_accepted_total", "Connections accepted.",
          m.connections_accepted.load());
  Gauge(&out, "st_peer_connections", "Open connections (clients and ring links).", g.connections);
  Gauge(&out, "st_peer_records", "Records held.", g.records);
  Gauge(&out, "st_peer_used_bytes", "Bytes of the records held.", g.used_bytes);
  Gauge(&out, "st_peer_capacity_bytes", "The --capacity limit (0: none).", g.capacity_bytes);
  Gauge(&out, "st_peer_filesystem_size_bytes", "Size of the data directory's filesystem.",
        g.fs_total_bytes);
  Gauge(&out, "st_peer_filesystem_free_bytes",
        "Bytes free to the peer on the data directory's filesystem.", g.fs_free_bytes);
  Counter(&out, "st_peer_throttled_total", "Requests held back by impact control.", g.throttled);
  Gauge(&out, "st_peer_impact_scale",
        "Factor applied to the impact-control limits by --yield-to-host-load (1: whole limits, "
        "always 1 without it).",
        g.impact_scale);
  if (g.yield_enabled) {
    Gauge(&out, "st_peer_host_other_cpu_ratio",
          "Share of the host's CPU used by other processes over the last second "
          "(--yield-to-host-load).",
          g.host_other_cpu);
  }
  Gauge(&out, "st_peer_getlocal_rounds", "GET_LOCAL rounds in progress or cached.",
        g.getlocal_rounds);
  if (g.copies_enabled) {
    Header(&out, "st_peer_infofile_copy_fetches_total", "counter",
           "FetchInfofile calls to the tracker for this peer's infofile copies (--metadata "
           "fetch), by result; a failed one left the copy as it was.");
    Sample(&out, "st_peer_infofile_copy_fetches_total", "result=\"ok\"", g.copy_fetches);
    Sample(&out, "st_peer_infofile_copy_fetches_total", "result=\"failed\"", g.copy_fetch_failures);
    Counter(&out, "st_peer_infofile_copy_fetches_from_standbys_total",
            "Of the ok FetchInfofile calls, those a standby tracker answered (docs/peer.md, "
            "\"Copies from standbys\"); the rest the tracker did.",
            g.copy_fetches_from_standbys);
    Counter(&out, "st_peer_infofile_copy_received_bytes_total",
            "Bytes of snapshots and changesets received for the infofile copies.", g.copy_bytes);
    Gauge(&out, "st_peer_infofile_copies", "Infofile copies held in <data>/meta/.",
          g.infofile_copies);
    Gauge(&out, "st_peer_infofile_copies_behind",
          "Files whose peerlist names this peer (as the tracker's announce replies say) with no "
          "copy or a copy below the tracker's latest generation known.",
          g.copies_behind);
    Gauge(&out, "st_peer_infofile_copy_max_lag_generations",
          "The largest number of generations a copy is behind the tracker's latest known (a "
          "missing copy: the tracker's generation).",
          g.copies_max_lag);
    Gauge(&out, "st_peer_infofile_copies_caught_up_timestamp_seconds",
          "Unix time the copies were last all at the tracker's latest known generations (0: "
          "never).",
          g.copies_caught_up_s);
  }
  if (g.mirror_enabled) {
    Gauge(&out, "st_peer_meta_mirrors",
          "Infofile mirrors kept in <data>/meta/ for recovery without the namespace.",
          g.meta_mirrors);
    Header(&out, "st_peer_meta_mirror_passes_total", "counter",
           "Mirror passes over the namespace, by result.");
    Sample(&out, "st_peer_meta_mirror_passes_total", "result=\"ok\"",
           g.mirror_passes - g.mirror_failed_passes);
    Sample(&out, "st_peer_meta_mirror_passes_total", "result=\"failed\"", g.mirror_failed_passes);
    Counter(&out, "st_peer_meta_mirror_copies_total", "Infofiles copied to mirrors.",
            g.mirror_copies);
    Counter(&out, "st_peer_meta_mirror_removals_total",
            "Mirrors removed (file deleted and none of its records left on this peer).",
            g.mirror_removals);
    Counter(&out, "st_peer_meta_mirror_errors_total",
            "Infofiles that could not be probed or copied (retried on the next pass).",
            g.mirror_errors);
    Gauge(&out, "st_peer_meta_mirror_last_pass_timestamp_seconds",
          "Unix time of the last complete mirror pass (0: none yet).", g.mirror_last_pass_s);
  }
  Counter(&out, "st_peer_verify_passes_total",
          "Complete passes of the verifying scrubber over every stored copy (--verify-interval).",
          g.verify_passes);
  Counter(&out, "st_peer_copies_verified_total",
          "Stored copies re-read and found to match the CRC-32C they were stored with.",
          g.copies_verified);
  Counter(&out, "st_peer_verified_bytes_total", "Bytes of the copies verified.", g.bytes_verified);
  Counter(&out, "st_peer_copies_bad_total",
          "Stored copies whose bytes did not match their CRC-32C (bit rot, a damaged file).",
          g.copies_bad);
  Counter(&out, "st_peer_copies_quarantined_total",
          "Bad copies moved to <data>/quarantine/ and reported to the tracker (repair restores "
          "them).",
          g.copies_quarantined);
  Counter(&out, "st_peer_verify_errors_total",
          "Copies the verifier could not read (not a CRC mismatch; retried next pass).",
          g.verify_errors);
  Gauge(&out, "st_peer_verify_last_pass_timestamp_seconds",
        "Unix time of the last complete verify pass (0: none yet).", g.verify_last_pass_s);
  Counter(&out, "st_peer_loop_stalled_announces_total",
          "Announces withheld because the event loop was stuck in one turn longer than "
          "--loop-stall-limit (the tracker fails the peer).",
          m.loop_stalls.load(std::memory_order_relaxed));
  Counter(&out, "st_peer_loop_busy_seconds_total",
          "Time the event loop spent handling events, timers and tasks (not waiting).",
          static_cast<double>(m.loop_busy_ns.load(std::memory_order_relaxed)) * 1e-9);
  return out;
}

}  // namespace st
