#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "capability.h"
#include "config_file.h"
#include "log.h"

namespace st {
namespace {

bool ParseDouble(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(d)) return false;
  *v = d;
  return true;
}

// An unsigned integer with an optional binary suffix K, M, G, T (KiB...).
bool ParseBytes(const std::string& s, uint64_t* v) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str()) return false;
  std::string suffix(end);
  uint64_t mult = 1;
  if (suffix == "" || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KiB" || suffix == "k") {
    mult = 1ull << 10;
  } else if (suffix == "M" || suffix == "MiB") {
    mult = 1ull << 20;
  } else if (suffix == "G" || suffix == "GiB") {
    mult = 1ull << 30;
  } else if (suffix == "T" || suffix == "TiB") {
    mult = 1ull << 40;
  } else {
    return false;
  }
  if (n > UINT64_MAX / mult) return false;
  *v = n * mult;
  return true;
}

// The arguments to parse: the keys of --config FILE as flags, then argv[1..]
// (later flags win, so the command line overrides the file). `where` says,
// for each, which line of the file it came from ("" for the command line).
Status ConfigThenArgv(int argc, const char* const* argv, std::vector<std::string>* args,
                      std::vector<std::string>* where, Options* out) {
  bool help = false;  // --help works even with a broken file: it is not read
  for (int i = 1; i < argc; ++i) {
    help = help || std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
  }
  for (int i = 1; i < argc && !help; ++i) {
    std::string arg = argv[i];
    std::string path;
    if (arg == "--config") {
      if (i + 1 >= argc) return Status::InvalidArgument("--config needs a value");
      path = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      path = arg.substr(9);
    } else {
      continue;
    }
    if (!out->config_file.empty()) return Status::InvalidArgument("--config given twice");
    if (path.empty()) return Status::InvalidArgument("--config needs a file name");
    out->config_file = path;
    std::vector<ConfigFlag> flags;
    Status s = ReadConfigFile(path, &flags);
    if (!s.ok()) return Status::InvalidArgument(s.message());
    for (const ConfigFlag& f : flags) {
      args->push_back(f.has_value ? f.flag + "=" + f.value : f.flag);
      where->push_back(f.where);
    }
  }
  for (int i = 1; i < argc; ++i) {
    args->push_back(argv[i]);
    where->push_back("");
  }
  return Status::OK();
}

}  // namespace

std::string Usage() {
  return R"(usage: st-peer --data DIR [options]
       st-peer --mint-token --key-file PATH --ops OPS [--file-id ID] [--ttl SECONDS]
               [--user NAME]

StoreTorrent storage peer: stores records under DIR and serves the binary
protocol of docs/wire-protocol.md.

  --data DIR                  record store directory (created if missing)
  --host HOST                 address to listen on (default 127.0.0.1)
  --port PORT                 port to listen on; 0 picks a free one (default 0)
  --metrics-port PORT         serve Prometheus metrics at http://HOST:PORT/metrics
                              (0 picks a free one; default: no metrics endpoint)
  --advertise HOST:PORT       address announced and matched in GET_LOCAL
                              peerlists (default: HOST:PORT as listened)
  --namespace DIR             namespace root holding the infofiles (needed for
                              GET_LOCAL)
  --tracker HOST:PORT         tracker gRPC address; without it, no announces
  --tracker-ca PATH           announce over TLS, trusting this CA certificate (PEM)
  --tracker-cert PATH         with --tracker-key: a client certificate (PEM) for a
  --tracker-key PATH          tracker that requires mutual TLS
  --announce-interval SECONDS seconds between announces (default 2)
  --loop-stall-limit SECONDS  announces stop while one event-loop turn has
                              lasted longer than this, so the tracker fails a
                              wedged peer (default: 2 announce intervals, at
                              least 2)
  --max-frame BYTES           largest frame accepted (default 67112960)
  --get-local-cache SECONDS   how long a GET_LOCAL result is kept for late
                              clients (default 60)
  --ring-timeout-base SECONDS GET_LOCAL ring timeout: base ... (default 2)
  --ring-timeout-per-peer SECONDS ... plus this per ring peer (default 0.5)
  --chain-timeout SECONDS     PUT_CHAIN: how long a forwarded copy may take,
                              per peer left in the chain (default 5)
  --max-write-mbps MB/S       impact control: at most this many MB (10^6
                              bytes) per second of PUT data (default 0: none)
  --max-read-mbps MB/S        ... of GET data sent (default 0: none)
  --max-request-rate N        ... requests per second (default 0: none);
                              over a limit, clients wait, they do not fail
  --scrub-interval SECONDS    seconds between scrubs, which remove records
                              the namespace does not commit to this peer
                              (needs --namespace; default 86400; 0: only on
                              a SCRUB request)
  --scrub-age SECONDS         the scrubber never removes a record or
                              temporary file modified less than this long
                              ago: its write may not be committed yet
                              (default 3600)
  --mirror-interval SECONDS   seconds between passes that copy the infofiles
                              of this peer's files to <data>/meta/, for
                              `storetorrent recover --from-peers` after the
                              namespace is lost (needs --namespace; default
                              5; 0: no mirrors)
  --verify-interval SECONDS   seconds between passes of the verifying
                              scrubber, which re-reads every stored copy and
                              quarantines one whose CRC-32C is wrong (to
                              <data>/quarantine/, reported to the tracker;
                              repair restores it). The first pass runs
                              SECONDS after start (default 604800, a week;
                              0: never)
  --verify-mbps MB/S          the verifier reads at most this many MB (10^6
                              bytes) per second (default 20; 0: no cap)
  --sync                      reply to a PUT or DELETE only once it is on
                              stable storage: the records of a batch are
                              written, then one syncfs (group fsync) makes
                              them durable (default off: a peer crash loses
                              nothing, a power loss may lose recent PUTs)
  --sync-each                 --sync with an fdatasync and a directory fsync
                              per record (slower; for comparison)
  --capacity BYTES            refuse PUTs beyond this many stored bytes
  --reserve BYTES             refuse PUTs that would leave less free space on
                              the filesystem (default 0)
  --idle-timeout SECONDS      close a connection whose frame has begun but
                              gets no further byte for this long (slow or
                              stalled senders), with ERROR TIMEOUT
                              (default 30; 0: never)
  --keepalive-timeout SECONDS close a client connection with nothing in
                              flight for this long (default 0: never; clients
                              keep persistent connections)
  --max-connections N         client connections served at once; more are
                              answered ERROR BUSY and closed (default 1024;
                              0: no limit). Ring links from other peers do
                              not count, and have a limit of N of their own
  --key-file PATH             the capability key shared with the tracker (64
                              hex digits, mode 0600): every request must then
                              be allowed by a token sent with AUTH
                              (docs/capabilities.md). Without it nothing is
                              checked (development mode, logged as a warning)
  --config FILE               read these options from a TOML file: each key is
                              a flag without -- (port = 7100, key-file =
                              "/etc/storetorrent/secret.key", sync = true);
                              flags on the command line override it
                              (docs/deployment.md)
  --verbose                   debug logging
  --log-format FORMAT         text (default) or json: one JSON object per
                              line (docs/operations.md, "Logs")
  --help                      this text

Minting a token (operators, scripts): --mint-token prints a token signed
with --key-file, as hex, on stdout and exits; no --data is needed.
  --ops OPS                   what it allows: a number, the sum of 1 READ,
                              2 WRITE, 4 DELETE, 8 PEER, 16 ADMIN, or names
                              joined by '+' (read+write)
  --file-id ID                the file (decimal or 0x hex); 0, the default:
                              every file
  --ttl SECONDS               how long it is valid (default 3600)
  --user NAME                 who it is for, shown in the peers' logs

Fault injection (tests, docs/reliability.md):
  --fault-loop-stall-file PATH  while PATH exists, a handler blocks the event
                              loop (checked every 100 ms): a wedged peer

BYTES accept a K, M, G or T suffix (powers of 1024). On start the peer prints
"listening on HOST:PORT" on stdout; logs go to stderr. SIGINT or SIGTERM stop
it cleanly.
)";
}

Status ParseOptions(int argc, const char* const* argv, Options* out) {
  *out = Options();
  bool have_data = false;
  bool have_ops = false;
  std::vector<std::string> mint_flags;  // flags that only --mint-token takes
  std::vector<std::string> args, where;
  Status cs = ConfigThenArgv(argc, argv, &args, &where, out);
  if (!cs.ok()) return cs;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out->help = true;
      return Status::OK();
    }
    if (arg.rfind("--", 0) != 0) {
      return Status::InvalidArgument("unexpected argument '" + arg + "'");
    }
    std::string flag = arg, value;
    bool has_value = false;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    if (flag == "--sync" || flag == "--sync-each" || flag == "--verbose" ||
        flag == "--mint-token") {
      if (has_value) return Status::InvalidArgument(flag + " takes no value");
      if (flag == "--sync-each") out->sync_each = true;
      (flag == "--sync" || flag == "--sync-each" ? out->sync
       : flag == "--verbose"                     ? out->verbose
                                                 : out->mint_token) = true;
      continue;
    }
    if (flag == "--config") {  // read by ConfigThenArgv
      if (!has_value) ++i;
      continue;
    }
    static const char* const kValued[] = {"--data",
                                          "--host",
                                          "--port",
                                          "--metrics-port",
                                          "--advertise",
                                          "--namespace",
                                          "--tracker",
                                          "--announce-interval",
                                          "--loop-stall-limit",
                                          "--fault-loop-stall-file",
                                          "--max-frame",
                                          "--get-local-cache",
                                          "--ring-timeout-base",
                                          "--ring-timeout-per-peer",
                                          "--chain-timeout",
                                          "--max-write-mbps",
                                          "--max-read-mbps",
                                          "--max-request-rate",
                                          "--scrub-interval",
                                          "--scrub-age",
                                          "--mirror-interval",
                                          "--verify-interval",
                                          "--verify-mbps",
                                          "--capacity",
                                          "--reserve",
                                          "--idle-timeout",
                                          "--keepalive-timeout",
                                          "--max-connections",
                                          "--key-file",
                                          "--log-format",
                                          "--ops",
                                          "--tracker-ca",
                                          "--tracker-cert",
                                          "--tracker-key",
                                          "--file-id",
                                          "--ttl",
                                          "--user"};
    bool known = false;
    for (const char* k : kValued) known = known || flag == k;
    if (!known) return Status::InvalidArgument("unknown flag " + flag);
    if (!has_value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(flag + " needs a value");
      value = args[++i];
    }
    auto bad = [&](const char* what) {  // a key of --config FILE is named with its line
      return Status::InvalidArgument((where[i].empty() ? flag + " " + value : where[i]) +
                                     ": expected " + what);
    };
    if (flag == "--data") {
      if (value.empty()) return bad("a directory");
      out->data_dir = value;
      have_data = true;
    } else if (flag == "--host") {
      if (value.empty()) return bad("a host name or address");
      out->host = value;
    } else if (flag == "--port" || flag == "--metrics-port") {
      uint64_t p;
      if (!ParseBytes(value, &p) || p > 65535 ||
          value.find_first_not_of("0123456789") != std::string::npos) {
        return bad("a port number 0..65535");
      }
      (flag == "--port" ? out->port : out->metrics_port) = static_cast<int>(p);
    } else if (flag == "--advertise" || flag == "--tracker") {
      size_t colon = value.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
        return bad("HOST:PORT");
      }
      (flag == "--advertise" ? out->advertise : out->tracker) = value;
    } else if (flag == "--namespace") {
      if (value.empty()) return bad("a directory");
      out->namespace_dir = value;
      while (out->namespace_dir.size() > 1 && out->namespace_dir.back() == '/') {
        out->namespace_dir.pop_back();
      }
    } else if (flag == "--max-frame") {
      uint64_t v;
      if (!ParseBytes(value, &v) || v < 64 || v > 0xFFFFFFFFull) {
        return bad("a byte count between 64 and 4294967295");
      }
      out->max_frame = static_cast<uint32_t>(v);
    } else if (flag == "--max-connections") {
      uint64_t v;
      if (value.find_first_not_of("0123456789") != std::string::npos || !ParseBytes(value, &v) ||
          v > 1000000) {
        return bad("a number of connections 0..1000000 (0: no limit)");
      }
      out->max_connections = v;
    } else if (flag == "--key-file") {
      if (value.empty()) return bad("a file name");
      out->key_file = value;
    } else if (flag == "--fault-loop-stall-file") {
      if (value.empty()) return bad("a file name");
      out->fault_loop_stall_file = value;
    } else if (flag == "--tracker-ca" || flag == "--tracker-cert" || flag == "--tracker-key") {
      if (value.empty()) return bad("a file name");
      (flag == "--tracker-ca"     ? out->tracker_ca
       : flag == "--tracker-cert" ? out->tracker_cert
                                  : out->tracker_key) = value;
    } else if (flag == "--log-format") {
      LogFormat format;
      if (!ParseLogFormat(value, &format)) return bad("text or json");
      out->log_format = value;
    } else if (flag == "--ops") {
      if (!ParseOps(value, &out->mint_ops)) {
        return bad("1..31, the sum of 1 READ, 2 WRITE, 4 DELETE, 8 PEER, 16 ADMIN, or names "
                   "joined by '+'");
      }
      have_ops = true;
      mint_flags.push_back(flag);
    } else if (flag == "--file-id") {
      bool hex = value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
      std::string digits = hex ? value.substr(2) : value;
      const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
      char* end = nullptr;
      errno = 0;
      unsigned long long v =
          digits.empty() ? 0 : std::strtoull(digits.c_str(), &end, hex ? 16 : 10);
      if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos || errno != 0) {
        return bad("a file id, decimal or 0x hex (0: every file)");
      }
      out->mint_file_id = v;
      mint_flags.push_back(flag);
    } else if (flag == "--user") {
      if (value.size() > kCapabilityMaxUser) return bad("a user name of at most 256 bytes");
      out->mint_user = value;
      mint_flags.push_back(flag);
    } else if (flag == "--ttl") {
      double d;
      if (!ParseDouble(value, &d) || d <= 0 || d > 1e10) {
        return bad("a positive number of seconds");
      }
      out->mint_ttl_s = d;
      mint_flags.push_back(flag);
    } else if (flag == "--capacity" || flag == "--reserve") {
      uint64_t v;
      if (!ParseBytes(value, &v)) return bad("a byte count");
      if (flag == "--capacity") {
        if (v == 0) return bad("a positive byte count");
        out->capacity = v;
      } else {
        out->reserve = v;
      }
    } else {
      double d;
      if (!ParseDouble(value, &d) || d < 0) {
        return bad(flag.compare(0, 6, "--max-") == 0 ? "a non-negative number"
                                                     : "a non-negative number of seconds");
      }
      if (flag == "--announce-interval") {
        if (d <= 0) return bad("a positive number of seconds");
        out->announce_interval_s = d;
      } else if (flag == "--loop-stall-limit") {
        if (d <= 0) return bad("a positive number of seconds");
        out->loop_stall_limit_s = d;
      } else if (flag == "--get-local-cache") {
        out->get_local_cache_s = d;
      } else if (flag == "--ring-timeout-base") {
        out->ring_timeout_base_s = d;
      } else if (flag == "--scrub-interval") {
        out->scrub_interval_s = d;
      } else if (flag == "--scrub-age") {
        out->scrub_age_s = d;
      } else if (flag == "--mirror-interval") {
        out->mirror_interval_s = d;
      } else if (flag == "--verify-interval") {
        out->verify_interval_s = d;
      } else if (flag == "--idle-timeout") {
        out->idle_timeout_s = d;
      } else if (flag == "--keepalive-timeout") {
        out->keepalive_timeout_s = d;
      } else if (flag == "--max-write-mbps") {
        out->max_write_mbps = d;
      } else if (flag == "--max-read-mbps") {
        out->max_read_mbps = d;
      } else if (flag == "--max-request-rate") {
        out->max_request_rate = d;
      } else if (flag == "--verify-mbps") {
        out->verify_mbps = d;
      } else if (flag == "--chain-timeout") {
        if (d <= 0) return bad("a positive number of seconds");
        out->chain_timeout_s = d;
      } else {
        out->ring_timeout_per_peer_s = d;
      }
    }
  }
  if (out->mint_token) {
    if (out->key_file.empty()) return Status::InvalidArgument("--mint-token needs --key-file PATH");
    if (!have_ops)
      return Status::InvalidArgument("--mint-token needs --ops (what the token allows)");
    return Status::OK();
  }
  if (!mint_flags.empty()) {
    return Status::InvalidArgument(mint_flags.front() + " is only for --mint-token");
  }
  if (!have_data) {
    return Status::InvalidArgument(out->config_file.empty()
                                       ? "--data DIR is required"
                                       : "--data DIR is required (or data = \"DIR\" in " +
                                             out->config_file + ")");
  }
  if (out->tracker_cert.empty() != out->tracker_key.empty()) {
    return Status::InvalidArgument("--tracker-cert and --tracker-key go together");
  }
  if (!out->tracker_cert.empty() && out->tracker_ca.empty()) {
    return Status::InvalidArgument("--tracker-cert needs --tracker-ca (mutual TLS is TLS)");
  }
  return Status::OK();
}

}  // namespace st
