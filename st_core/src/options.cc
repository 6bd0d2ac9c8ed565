#include "options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "capability.h"
#include "config_file.h"
#include "log.h"

namespace st {
namespace {

// ---- The table -----------------------------------------------------------------

// The field `member` of Options, for OptionSpec::field.
#define ST_FIELD(member) +[](Options* o) { return &o->member; }

constexpr double kNoMax = std::numeric_limits<double>::infinity();

OptionSpec Opt(const char* name, OptionType type, const char* arg, OptionField field,
               const char* def, const char* help) {
  OptionSpec s;
  s.name = name;
  s.type = type;
  s.arg = arg;
  s.field = field;
  s.def = def;
  s.help = help;
  s.max = kNoMax;
  if (type == OptionType::kPort) s.max = 65535;
  if (type == OptionType::kBytes || type == OptionType::kCount) s.max = 18446744073709551615.0;
  return s;
}

OptionSpec Flag(const char* name, OptionField field, const char* help) {
  return Opt(name, OptionType::kBool, nullptr, field, nullptr, help);
}

bool IsLogFormat(const std::string& v) {
  LogFormat f;
  return ParseLogFormat(v, &f);
}

bool IsMetadataMode(const std::string& v) {
  return v == "auto" || v == "namespace" || v == "fetch";
}

bool IsUserName(const std::string& v) { return v.size() <= kCapabilityMaxUser; }

constexpr size_t kMaxDomain =
    255;  // bytes, as the tracker keeps it (st_py.core.placement.MAX_DOMAIN)
constexpr size_t kMaxDomainLevels = 8;  // site/rack/host and a few more

std::vector<OptionSpec> MakeTable() {
  using T = OptionType;
  using G = OptionGroup;
  return {
      Opt("data", T::kString, "DIR", ST_FIELD(store.data_dir), nullptr,
          "record store directory (created if missing); required")
          .What("a directory"),
      Opt("host", T::kString, "HOST", ST_FIELD(server.host), "127.0.0.1", "address to listen on")
          .What("a host name or address"),
      Opt("port", T::kPort, "PORT", ST_FIELD(server.port), "0",
          "port to listen on; 0 picks a free one"),
      Opt("metrics-port", T::kPort, "PORT", ST_FIELD(metrics_port), nullptr,
          "serve Prometheus metrics at http://HOST:PORT/metrics (0 picks a free "
          "one); without it, no metrics endpoint"),
      Opt("advertise", T::kHostPort, "HOST:PORT", ST_FIELD(server.advertise), nullptr,
          "address announced and matched in GET_LOCAL peerlists; without it, "
          "HOST:PORT as listened"),
      Opt("namespace", T::kString, "DIR", ST_FIELD(server.namespace_dir), nullptr,
          "namespace root holding the infofiles (read by GET_LOCAL, the scrubber "
          "and the infofile mirrors; without it they read copies from --tracker)")
          .What("a directory")
          .Flags(kOptTrimSlashes),
      Opt("metadata", T::kString, "MODE", ST_FIELD(metadata), "auto",
          "where GET_LOCAL reads infofiles: 'namespace' (the tracker's namespace, "
          "--namespace), 'fetch' (copies in DATA/meta/ kept current from --tracker "
          "by FetchInfofile; no mount needed) or 'auto': namespace with --namespace, "
          "else fetch with --tracker")
          .What("auto, namespace or fetch")
          .Check(IsMetadataMode),
      Opt("tracker", T::kHostPort, "HOST:PORT", ST_FIELD(tracker), nullptr,
          "tracker gRPC address; several, comma-separated IP:PORT (a leader and its "
          "standbys): announces go to whichever answers; without it, no announces"),
      Opt("tracker-ca", T::kString, "PATH", ST_FIELD(tracker_ca), nullptr,
          "announce over TLS, trusting this CA certificate (PEM)")
          .What("a file name"),
      Opt("tracker-cert", T::kString, "PATH", ST_FIELD(tracker_cert), nullptr,
          "with --tracker-key: a client certificate (PEM) for a tracker that "
          "requires mutual TLS")
          .What("a file name"),
      Opt("tracker-key", T::kString, "PATH", ST_FIELD(tracker_key), nullptr,
          "the private key (PEM) of --tracker-cert")
          .What("a file name"),
      Opt("domain", T::kString, "SITE/RACK/HOST", ST_FIELD(domain), nullptr,
          "this peer's failure domain, announced to the tracker: the copies of "
          "a record go to peers of distinct domains (distinct sites if there "
          "are enough, else racks, else hosts). 1 to 8 names of letters, "
          "digits and . _ - : joined by '/', coarsest first; without it, the "
          "host of its address, so peers of one machine share a domain")
          .What("1 to 8 names of letters, digits and . _ - : joined by '/' (at most 255 bytes)")
          .Check(IsFailureDomain),
      Opt("announce-interval", T::kSeconds, "SECONDS", ST_FIELD(announce_interval_s), "2",
          "seconds between announces")
          .Flags(kOptPositive),
      Opt("loop-stall-limit", T::kSeconds, "SECONDS", ST_FIELD(loop_stall_limit_s), nullptr,
          "announces stop while one event-loop turn has lasted longer than "
          "this, so the tracker fails a wedged peer; without it, 2 announce "
          "intervals, at least 2")
          .Flags(kOptPositive),
      Opt("max-frame", T::kBytes, "BYTES", ST_FIELD(server.max_frame), "67112960",
          "largest frame accepted")
          .Bounds(64, 4294967295.0),
      Opt("get-local-cache", T::kSeconds, "SECONDS", ST_FIELD(server.get_local_cache_s), "60",
          "how long a GET_LOCAL result is kept for late clients"),
      Opt("ring-timeout-base", T::kSeconds, "SECONDS", ST_FIELD(server.ring_timeout_base_s), "2",
          "GET_LOCAL ring timeout: base ..."),
      Opt("ring-timeout-per-peer", T::kSeconds, "SECONDS", ST_FIELD(server.ring_timeout_per_peer_s),
          "0.5", "... plus this per ring peer"),
      Opt("ring-timeout-per-million", T::kSeconds, "SECONDS",
          ST_FIELD(server.ring_timeout_per_million_s), "10",
          "... plus this per million entries in the ring (records of the file here x peers)"),
      Opt("chain-timeout", T::kSeconds, "SECONDS", ST_FIELD(server.chain_timeout_s), "5",
          "PUT_CHAIN: how long a forwarded copy may take, per peer left in the "
          "chain")
          .Flags(kOptPositive),
      Opt("max-write-mb-per-s", T::kRate, "MB/S", ST_FIELD(server.max_write_bytes_per_s), "0",
          "impact control: at most this many MB (10^6 bytes) per second of PUT "
          "data; 0: no limit")
          .What("MB per second")
          .Scale(1e6)
          .Alias("max-write-mbps"),
      Opt("max-read-mb-per-s", T::kRate, "MB/S", ST_FIELD(server.max_read_bytes_per_s), "0",
          "... of GET data sent; 0: no limit")
          .What("MB per second")
          .Scale(1e6)
          .Alias("max-read-mbps"),
      Opt("max-request-rate", T::kRate, "N", ST_FIELD(server.max_requests_per_s), "0",
          "... requests per second; 0: no limit. Over a limit, clients wait, "
          "they do not fail")
          .What("requests per second"),
      Flag("yield-to-host-load", ST_FIELD(server.yield_to_host_load),
           "impact control that follows the host's load: every second the "
           "three limits above are scaled by a factor, 1 while no other work "
           "uses the host's CPU (/proc/stat less the peer's own), down to "
           "--yield-floor while it takes all of it, back up when it stops; "
           "needs at least one of the limits"),
      Opt("yield-floor", T::kRate, "FRACTION", ST_FIELD(server.yield_floor), "0.1",
          "the least factor --yield-to-host-load scales the limits by")
          .Bounds(0.01, 1),
      Opt("scrub-interval", T::kSeconds, "SECONDS", ST_FIELD(server.scrub_interval_s), "86400",
          "seconds between scrubs, which remove records the infofiles do not "
          "commit to this peer (needs --namespace, or --tracker for copies); 0: only "
          "on a SCRUB request"),
      Opt("scrub-age", T::kSeconds, "SECONDS", ST_FIELD(server.scrub_age_s), "3600",
          "the scrubber never removes a record or temporary file modified less "
          "than this long ago: its write may not be committed yet"),
      Opt("mirror-interval", T::kSeconds, "SECONDS", ST_FIELD(server.mirror_interval_s), "5",
          "seconds between passes that copy the infofiles of this peer's files "
          "to <data>/meta/, for `storetorrent recover --from-peers` after the "
          "namespace is lost (needs --namespace); 0: no mirrors"),
      Opt("verify-interval", T::kSeconds, "SECONDS", ST_FIELD(server.verify_interval_s), "604800",
          "seconds between passes of the verifying scrubber, which re-reads "
          "every stored copy and quarantines one whose CRC-32C is wrong (to "
          "<data>/quarantine/, reported to the tracker; repair restores it). "
          "The first pass runs SECONDS after start; 0: never"),
      Opt("verify-mbps", T::kRate, "MB/S", ST_FIELD(server.verify_bytes_per_s), "20",
          "the verifier reads at most this many MB (10^6 bytes) per second; 0: "
          "no cap")
          .What("MB per second")
          .Scale(1e6),
      Flag("sync", ST_FIELD(store.sync),
           "reply to a PUT or DELETE only once it is on stable storage: the "
           "records of a batch are written, then one syncfs (group fsync) makes "
           "them durable (without it, a peer crash loses nothing, a power loss "
           "may lose recent PUTs)"),
      Flag("sync-each", ST_FIELD(store.sync_each),
           "--sync with an fdatasync and a directory fsync per record (slower; "
           "for comparison)"),
      Opt("capacity", T::kBytes, "BYTES", ST_FIELD(store.capacity), nullptr,
          "refuse PUTs beyond this many stored bytes")
          .Bounds(1, 18446744073709551615.0),
      Opt("reserve", T::kBytes, "BYTES", ST_FIELD(store.reserve), "0",
          "refuse PUTs that would leave less free space on the filesystem"),
      Opt("idle-timeout", T::kSeconds, "SECONDS", ST_FIELD(server.idle_timeout_s), "30",
          "close a connection whose frame has begun but gets no further byte "
          "for this long (slow or stalled senders), with ERROR TIMEOUT; 0: "
          "never"),
      Opt("keepalive-timeout", T::kSeconds, "SECONDS", ST_FIELD(server.keepalive_timeout_s), "0",
          "close a client connection with nothing in flight for this long "
          "(clients keep persistent connections); 0: never"),
      Opt("max-connections", T::kCount, "N", ST_FIELD(server.max_connections), "1024",
          "client connections served at once; more are answered ERROR BUSY and "
          "closed; 0: no limit. Ring links from other peers do not count, and "
          "have a limit of N of their own")
          .What("connections")
          .Bounds(0, 1000000),
      Opt("key-file", T::kString, "PATH", ST_FIELD(key_file), nullptr,
          "the capability key shared with the tracker (64 hex digits, mode "
          "0600): every request must then be allowed by a token sent with AUTH "
          "(docs/capabilities.md). Without it nothing is checked (development "
          "mode, logged as a warning)")
          .What("a file name"),
      Opt("config", T::kString, "FILE", ST_FIELD(config_file), nullptr,
          "read these options from a TOML file: each key is a flag without -- "
          "(port = 7100, key-file = \"/etc/storetorrent/secret.key\", sync = "
          "true); flags on the command line override it (docs/deployment.md)")
          .What("a file name")
          .Flags(kOptCommandLineOnly),
      Flag("verbose", ST_FIELD(verbose), "debug logging"),
      Opt("log-format", T::kString, "FORMAT", ST_FIELD(log_format), "text",
          "text or json: one JSON object per line (docs/operations.md, \"Logs\")")
          .What("text or json")
          .Check(IsLogFormat),
      Flag("help", ST_FIELD(help), "this text").Flags(kOptCommandLineOnly),

      Flag("mint-token", ST_FIELD(mint_token),
           "print a token signed with --key-file, as hex, on stdout and exit; "
           "no --data is needed")
          .Group(G::kMintToken)
          .Flags(kOptCommandLineOnly),
      Opt("ops", T::kOps, "OPS", ST_FIELD(mint_ops), nullptr,
          "what it allows: a number, the sum of 1 READ, 2 WRITE, 4 DELETE, 8 "
          "PEER, 16 ADMIN, or names joined by '+' (read+write)")
          .Group(G::kMintToken)
          .Flags(kOptCommandLineOnly | kOptMintOnly),
      Opt("file-id", T::kFileId, "ID", ST_FIELD(mint_file_id), "0",
          "the file (decimal or 0x hex); 0: every file")
          .Group(G::kMintToken)
          .Flags(kOptCommandLineOnly | kOptMintOnly),
      Opt("ttl", T::kSeconds, "SECONDS", ST_FIELD(mint_ttl_s), "3600", "how long it is valid")
          .Bounds(0, 1e10)
          .Group(G::kMintToken)
          .Flags(kOptCommandLineOnly | kOptMintOnly | kOptPositive),
      Opt("user", T::kString, "NAME", ST_FIELD(mint_user), nullptr,
          "who it is for, shown in the peers' logs")
          .What("a user name of at most 256 bytes")
          .Check(IsUserName)
          .Group(G::kMintToken)
          .Flags(kOptCommandLineOnly | kOptMintOnly),

      Opt("fault-loop-stall-file", T::kString, "PATH", ST_FIELD(fault_loop_stall_file), nullptr,
          "while PATH exists, a handler blocks the event loop (checked every "
          "100 ms): a wedged peer")
          .What("a file name")
          .Group(G::kFault)
          .Flags(kOptCommandLineOnly),
  };
}

#undef ST_FIELD

// ---- Values --------------------------------------------------------------------

bool ParseDouble(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(d)) return false;
  *v = d;
  return true;
}

// Decimal digits only, no sign, no overflow.
bool ParseUnsigned(const std::string& s, uint64_t* v) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  unsigned long long n = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0) return false;
  *v = n;
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

// Decimal or 0x hex.
bool ParseFileId(const std::string& value, uint64_t* v) {
  bool hex = value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
  std::string digits = hex ? value.substr(2) : value;
  const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos) return false;
  errno = 0;
  unsigned long long n = std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10);
  if (errno != 0) return false;
  *v = n;
  return true;
}

bool InBounds(const OptionSpec& s, double v) {
  bool above = (s.flags & kOptPositive) ? v > s.min : v >= s.min;
  return above && v <= s.max;
}

// An integer within the row's bounds (the comparison in double is exact for
// every bound the table uses).
bool IntegerInBounds(const OptionSpec& s, uint64_t v) {
  return static_cast<double>(v) >= s.min && static_cast<double>(v) <= s.max;
}

template <typename Field>
Field* FieldOf(const OptionSpec& s, Options* o) {
  auto* get = std::get_if<Field* (*)(Options*)>(&s.field);
  return get != nullptr ? (*get)(o) : nullptr;
}

// Stores an integer in a field of any integer type (the bounds keep it in range).
bool StoreInteger(const OptionSpec& s, uint64_t v, Options* o) {
  return std::visit(
      [&](auto get) {
        auto* p = get(o);
        using F = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_integral_v<F> && !std::is_same_v<F, bool>) {
          *p = static_cast<F>(v);
          return true;
        } else {
          return false;  // a row whose field is not an integer
        }
      },
      s.field);
}

std::string FormatDouble(double d) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.15g", d);
  if (std::strtod(buf, nullptr) != d) std::snprintf(buf, sizeof(buf), "%.17g", d);
  return buf;
}

std::string FormatBound(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return std::floor(v) == v ? buf : FormatDouble(v);
}

}  // namespace

bool IsFailureDomain(const std::string& v) {
  if (v.empty() || v.size() > kMaxDomain) return false;
  size_t levels = 1, len = 0;
  for (char c : v) {
    if (c == '/') {
      if (len == 0) return false;  // empty component: leading, trailing or doubled '/'
      ++levels;
      len = 0;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
               c == ':') {
      ++len;
    } else {
      return false;
    }
  }
  return len > 0 && levels <= kMaxDomainLevels;
}

const std::vector<OptionSpec>& OptionTable() {
  static const std::vector<OptionSpec>* table = new std::vector<OptionSpec>(MakeTable());
  return *table;
}

const OptionSpec* FindOption(std::string_view name) {
  for (const OptionSpec& s : OptionTable()) {
    if (name == s.name || (s.alias != nullptr && name == s.alias)) return &s;
  }
  return nullptr;
}

bool SetOption(const OptionSpec& s, const std::string& value, Options* o) {
  switch (s.type) {
    case OptionType::kBool: {
      bool* f = FieldOf<bool>(s, o);
      if (f == nullptr || (value != "true" && value != "false")) return false;
      *f = value == "true";
      return true;
    }
    case OptionType::kString:
    case OptionType::kHostPort: {
      std::string* f = FieldOf<std::string>(s, o);
      if (f == nullptr) return false;
      if (s.type == OptionType::kHostPort) {
        size_t colon = value.rfind(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) return false;
      } else if (s.check != nullptr ? !s.check(value) : value.empty()) {
        return false;
      }
      *f = value;
      if (s.flags & kOptTrimSlashes) {
        while (f->size() > 1 && f->back() == '/') f->pop_back();
      }
      return true;
    }
    case OptionType::kPort:
    case OptionType::kCount: {
      uint64_t v;
      return ParseUnsigned(value, &v) && IntegerInBounds(s, v) && StoreInteger(s, v, o);
    }
    case OptionType::kBytes: {
      uint64_t v;
      return ParseBytes(value, &v) && IntegerInBounds(s, v) && StoreInteger(s, v, o);
    }
    case OptionType::kFileId: {
      uint64_t v;
      return ParseFileId(value, &v) && StoreInteger(s, v, o);
    }
    case OptionType::kOps: {
      uint8_t ops;
      return ParseOps(value, &ops) && StoreInteger(s, ops, o);
    }
    case OptionType::kSeconds:
    case OptionType::kRate: {
      double* f = FieldOf<double>(s, o);
      double v;
      if (f == nullptr || !ParseDouble(value, &v) || !InBounds(s, v)) return false;
      *f = v * s.scale;
      return true;
    }
  }
  return false;
}

std::string OptionExpects(const OptionSpec& s) {
  const std::string what = s.what != nullptr ? s.what : "";
  const bool has_max = s.max != kNoMax;
  switch (s.type) {
    case OptionType::kBool:
      return "no value";
    case OptionType::kString:
      return what.empty() ? "a value" : what;
    case OptionType::kHostPort:
      return "HOST:PORT";
    case OptionType::kPort:
      return "a port number " + FormatBound(s.min) + ".." + FormatBound(s.max);
    case OptionType::kCount:
      return "a number of " + what + " " + FormatBound(s.min) + ".." + FormatBound(s.max);
    case OptionType::kBytes:
      if (s.max < 18446744073709551615.0) {
        return "a byte count between " + FormatBound(s.min) + " and " + FormatBound(s.max);
      }
      if (s.min == 0) return "a byte count";
      if (s.min == 1) return "a positive byte count";
      return "a byte count of at least " + FormatBound(s.min);
    case OptionType::kOps:
      return "1..31, the sum of 1 READ, 2 WRITE, 4 DELETE, 8 PEER, 16 ADMIN, or names joined by "
             "'+'";
    case OptionType::kFileId:
      return "a file id, decimal or 0x hex (0: every file)";
    case OptionType::kSeconds:
    case OptionType::kRate: {
      std::string unit = s.type == OptionType::kSeconds ? "seconds" : what;
      std::string e = (s.flags & kOptPositive) && s.min == 0 ? "a positive number"
                      : s.min == 0 ? "a non-negative number"
                                   : "a number of at least " + FormatBound(s.min);
      if (!unit.empty()) e += " of " + unit;
      if (has_max) e += ", at most " + FormatBound(s.max);
      return e;
    }
  }
  return "a value";
}

std::string OptionValue(const OptionSpec& s, const Options& o) {
  Options* mo = const_cast<Options*>(&o);  // the fields are only read
  return std::visit(
      [&](auto get) -> std::string {
        auto* p = get(mo);
        using F = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<F, std::string>) {
          return *p;
        } else if constexpr (std::is_same_v<F, bool>) {
          return *p ? "true" : "false";
        } else if constexpr (std::is_same_v<F, double>) {
          return FormatDouble(*p / s.scale);
        } else if constexpr (std::is_signed_v<F>) {
          return std::to_string(static_cast<long long>(*p));
        } else {
          return std::to_string(static_cast<unsigned long long>(*p));
        }
      },
      s.field);
}

// ---- The command line -----------------------------------------------------------

namespace {

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

// Appends `text` to *out, words wrapped at kUsageWidth columns, continuation
// lines indented by `indent`; the first line goes on from column `col`.
constexpr size_t kUsageWidth = 79;
constexpr size_t kUsageIndent = 30;

void Wrap(const std::string& text, size_t col, size_t indent, std::string* out) {
  size_t at = 0;
  bool first = true;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(at, end - at);
    at = end + 1;
    if (word.empty()) continue;
    if (!first && col + 1 + word.size() > kUsageWidth) {
      *out += "\n" + std::string(indent, ' ');
      col = indent;
      first = true;
    }
    if (!first) {
      *out += ' ';
      ++col;
    }
    *out += word;
    col += word.size();
    first = false;
  }
  *out += '\n';
}

void AppendOptionHelp(const OptionSpec& s, std::string* out) {
  std::string head = std::string("  --") + s.name;
  if (s.arg != nullptr) head += std::string(" ") + s.arg;
  std::string notes;
  if (s.def != nullptr) notes = std::string("default ") + s.def;
  if (s.alias != nullptr) {
    notes += std::string(notes.empty() ? "" : "; ") + "formerly --" + s.alias + ", still accepted";
  }
  std::string text = s.help;
  if (!notes.empty()) text += " (" + notes + ")";
  *out += head;
  size_t col = head.size();
  if (col + 1 < kUsageIndent) {
    *out += std::string(kUsageIndent - col, ' ');
    col = kUsageIndent;
  } else {
    *out += ' ';
    ++col;
  }
  // The first line starts at col; Wrap's first word always goes on it.
  Wrap(text, col, kUsageIndent, out);
}

}  // namespace

std::string Usage() {
  std::string out = R"(usage: st-peer --data DIR [options]
       st-peer --mint-token --key-file PATH --ops OPS [--file-id ID] [--ttl SECONDS]
               [--user NAME]

StoreTorrent storage peer: stores records under DIR and serves the binary
protocol of docs/wire-protocol.md.

)";
  const struct {
    OptionGroup group;
    const char* title;
  } kSections[] = {
      {OptionGroup::kPeer, ""},
      {OptionGroup::kMintToken, "\nMinting a token (operators, scripts):\n"},
      {OptionGroup::kFault, "\nFault injection (tests, docs/reliability.md):\n"},
  };
  for (const auto& section : kSections) {
    out += section.title;
    for (const OptionSpec& s : OptionTable()) {
      if (s.group == section.group) AppendOptionHelp(s, &out);
    }
  }
  out += R"(
BYTES accept a K, M, G or T suffix (powers of 1024). On start the peer prints
"listening on HOST:PORT" on stdout; logs go to stderr. SIGINT or SIGTERM stop
it cleanly.
)";
  return out;
}

Status ParseOptions(int argc, const char* const* argv, Options* out) {
  *out = Options();
  const std::vector<OptionSpec>& table = OptionTable();
  for (const OptionSpec& s : table) {
    if (s.def != nullptr && !SetOption(s, s.def, out)) {
      return Status::InvalidArgument(std::string("the default of --") + s.name +
                                     " does not parse (options.cc)");
    }
  }
  std::vector<bool> given(table.size(), false);
  std::vector<std::string> mint_flags;  // flags that only --mint-token takes
  std::vector<std::string> args, where;
  Status cs = ConfigThenArgv(argc, argv, &args, &where, out);
  if (!cs.ok()) return cs;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
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
    const OptionSpec* spec = FindOption(std::string_view(flag).substr(2));
    if (spec == nullptr) return Status::InvalidArgument("unknown flag " + flag);
    if (std::strcmp(spec->name, "config") == 0) {  // read by ConfigThenArgv
      if (!has_value) ++i;
      continue;
    }
    if (spec->type == OptionType::kBool) {
      if (has_value) return Status::InvalidArgument(flag + " takes no value");
      value = "true";
    } else if (!has_value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(flag + " needs a value");
      value = args[++i];
    }
    if (!SetOption(*spec, value, out)) {
      // A key of --config FILE is named with its file and line.
      return Status::InvalidArgument((where[i].empty() ? flag + " " + value : where[i]) +
                                     ": expected " + OptionExpects(*spec));
    }
    given[static_cast<size_t>(spec - table.data())] = true;
    if (spec->flags & kOptMintOnly) mint_flags.push_back(flag);
  }
  auto was_given = [&](const char* name) {
    return given[static_cast<size_t>(FindOption(name) - table.data())];
  };
  out->store.sync = out->store.sync || out->store.sync_each;  // --sync-each is a --sync
  if (out->mint_token) {
    if (out->key_file.empty()) return Status::InvalidArgument("--mint-token needs --key-file PATH");
    if (!was_given("ops")) {
      return Status::InvalidArgument("--mint-token needs --ops (what the token allows)");
    }
    return Status::OK();
  }
  if (!mint_flags.empty()) {
    return Status::InvalidArgument(mint_flags.front() + " is only for --mint-token");
  }
  if (!was_given("data")) {
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
