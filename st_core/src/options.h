// st-peer's command line.
#ifndef ST_CORE_OPTIONS_H_
#define ST_CORE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "protocol.h"
#include "status.h"

namespace st {

struct Options {
  std::string data_dir;
  std::string host = "127.0.0.1";
  int port = 0;
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string advertise;       // empty: "<host>:<port>" as listened
  std::string namespace_dir;   // empty: no GET_LOCAL
  std::string tracker;         // empty: no announces
  std::string tracker_ca;      // PEM CA certificate: announce over TLS (docs/security.md)
  std::string tracker_cert;    // PEM client certificate and key, for a mutual-TLS tracker
  std::string tracker_key;
  double announce_interval_s = 2;
  double loop_stall_limit_s = 0;  // 0: max(2 s, 2 announce intervals)
  std::string fault_loop_stall_file;  // testing: block the loop while it exists
  uint32_t max_frame = kDefaultMaxFrame;
  double get_local_cache_s = 60;
  double ring_timeout_base_s = 2;
  double ring_timeout_per_peer_s = 0.5;
  double chain_timeout_s = 5;
  double max_write_mbps = 0;    // impact control; 0: no limit
  double max_read_mbps = 0;
  double max_request_rate = 0;  // requests per second
  double scrub_interval_s = 86400;  // 0: no periodic scrub
  double scrub_age_s = 3600;
  double mirror_interval_s = 5;  // infofile mirrors (meta_mirror.h); 0: none
  double verify_interval_s = 7 * 86400;  // the verifying scrubber (verifier.h); 0: none
  double verify_mbps = 20;               // its read rate cap, MB (10^6 B) per second; 0: none
  bool sync = false;       // durable replies (group fsync)
  bool sync_each = false;  // ... by an fsync per record instead
  uint64_t capacity = 0;       // 0: not given
  uint64_t reserve = 0;
  double idle_timeout_s = 30;       // a begun frame stalled this long: closed; 0: never
  double keepalive_timeout_s = 0;   // a client connection idle this long: closed; 0: never
  uint64_t max_connections = 1024;  // client connections; 0: no limit
  std::string key_file;        // empty: capabilities are not checked
  // --mint-token: print a token signed with --key-file and exit (no --data).
  bool mint_token = false;
  uint8_t mint_ops = 0;
  uint64_t mint_file_id = 0;
  double mint_ttl_s = 3600;
  std::string mint_user;
  bool verbose = false;
  std::string log_format = "text";  // --log-format: text or json (log.h)
  bool help = false;
  std::string config_file;  // --config FILE: options read from it
};

// Parses argv. InvalidArgument with a message for a person on any error.
Status ParseOptions(int argc, const char* const* argv, Options* out);

// The --help text.
std::string Usage();

}  // namespace st

#endif  // ST_CORE_OPTIONS_H_
