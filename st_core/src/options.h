// st-peer's options: one table declares each of them once (after redis's
// src/config.c, `standardConfig static_configs[]`). Each row gives the
// option's name (the flag without "--", and the key of a --config file), an
// older name still accepted, its type and bounds, its default, its help, and
// the field of Options it sets. From the table come the command-line parser
// (ParseOptions), the --help text (Usage) and the keys of a --config file
// (config_file.h); nothing else lists the options.
//
// The fields are those of the parts that use them, so main.cc hands
// Options::store to the record store and Options::server to the server
// without copying them field by field.
#ifndef ST_CORE_OPTIONS_H_
#define ST_CORE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "record_store.h"
#include "server.h"
#include "status.h"

namespace st {

struct Options {
  StoreOptions store;    // --data, --sync, --sync-each, --capacity, --reserve
  ServerOptions server;  // the network side, GET_LOCAL, chains, impact control,
                         // scrubber, mirrors, verifier, connection limits
  int metrics_port = -1;       // -1: no metrics endpoint
  std::string tracker;         // empty: no announces
  std::string metadata = "auto";  // --metadata: "auto", "namespace" or "fetch" (issue 40)
  std::string domain;          // --domain SITE/RACK/HOST; empty: its host
  std::string tracker_ca;      // PEM CA certificate: announce over TLS (docs/security.md)
  std::string tracker_cert;    // PEM client certificate and key, for a mutual-TLS tracker
  std::string tracker_key;
  double announce_interval_s = 2;
  double loop_stall_limit_s = 0;      // 0: max(2 s, 2 announce intervals)
  std::string fault_loop_stall_file;  // testing: block the loop while it exists
  std::string key_file;               // empty: capabilities are not checked
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

// ---- The option table --------------------------------------------------------

enum class OptionType : uint8_t {
  kBool,      // a flag without a value; in a config file, true or false
  kString,    // text: non-empty unless the row has its own check
  kHostPort,  // HOST:PORT
  kPort,      // an integer 0..65535
  kCount,     // an integer in [min, max]
  kSeconds,   // a finite number of seconds in [min, max]
  kRate,      // a finite number (per second, or a plain fraction) in [min, max], times `scale`
  kBytes,     // an integer with an optional K, M, G or T suffix, in [min, max]
  kOps,       // capability operations: a number or names joined by '+' (capability.h)
  kFileId,    // a file id, decimal or 0x hex
};

// Row flags.
constexpr unsigned kOptCommandLineOnly = 1u << 0;  // not a key of a config file
constexpr unsigned kOptMintOnly = 1u << 1;         // only with --mint-token
constexpr unsigned kOptPositive = 1u << 2;         // kSeconds: above min (0), not at it
constexpr unsigned kOptTrimSlashes = 1u << 3;      // kString: trailing '/' dropped

// Where --help lists an option.
enum class OptionGroup : uint8_t { kPeer, kMintToken, kFault };

// The field an option sets, as a function from the Options to it.
using OptionField = std::variant<std::string* (*)(Options*), bool* (*)(Options*),
                                 double* (*)(Options*), int* (*)(Options*), uint8_t* (*)(Options*),
                                 uint32_t* (*)(Options*), uint64_t* (*)(Options*)>;

struct OptionSpec {
  const char* name = nullptr;   // "max-write-mb-per-s": the flag without "--", the config key
  const char* alias = nullptr;  // an older name, as flag and key ("max-write-mbps"); or nullptr
  OptionType type = OptionType::kString;
  OptionGroup group = OptionGroup::kPeer;
  unsigned flags = 0;            // kOpt*
  const char* arg = nullptr;     // the value in --help ("SECONDS"); nullptr for kBool
  const char* what = nullptr;    // in errors: kString "a directory"; kCount, kRate the unit
  double min = 0;                // bounds of the numeric types
  double max = 0;
  double scale = 1;              // kRate: the field holds value * scale (MB/s -> bytes/s)
  const char* def = nullptr;     // the default, as given on a command line; nullptr: none
  const char* help = nullptr;    // one sentence or so for --help, without the default
  bool (*check)(const std::string& value) = nullptr;  // kString: the value's test
  OptionField field;

  // Builders for the table's rows.
  OptionSpec& Alias(const char* a) { return alias = a, *this; }
  OptionSpec& Bounds(double lo, double hi) { return min = lo, max = hi, *this; }
  OptionSpec& Flags(unsigned f) { return flags |= f, *this; }
  OptionSpec& Group(OptionGroup g) { return group = g, *this; }
  OptionSpec& What(const char* w) { return what = w, *this; }
  OptionSpec& Check(bool (*c)(const std::string&)) { return check = c, *this; }
  OptionSpec& Scale(double s) { return scale = s, *this; }
};

// Every option of st-peer, in --help order.
const std::vector<OptionSpec>& OptionTable();

// The row of a name or alias (without "--"); nullptr if there is none.
const OptionSpec* FindOption(std::string_view name);

// Sets the option's field from `value` as given on a command line. False if
// the value is not one the option takes (see OptionExpects).
bool SetOption(const OptionSpec& spec, const std::string& value, Options* out);

// What a value of the option must be, for error messages: "a port number
// 0..65535", "a positive number of seconds", ...
std::string OptionExpects(const OptionSpec& spec);

// The option's current value in `o`, as a command line would give it
// ("true"/"false" for kBool): for tests and messages.
std::string OptionValue(const OptionSpec& spec, const Options& o);

// Whether `v` is a failure domain --domain takes: 1 to 8 path components
// (site/rack/host, coarsest first) of letters, digits and . _ - :, joined by
// '/', at most 255 bytes (docs/replication.md, "Failure domains").
bool IsFailureDomain(const std::string& v);

// ---- Parsing -------------------------------------------------------------------

// Parses argv (and the --config file it names). InvalidArgument with a
// message for a person on any error: a bad value names the flag (or the
// file, line and key), the value and what was expected.
Status ParseOptions(int argc, const char* const* argv, Options* out);

// The --help text.
std::string Usage();

}  // namespace st

#endif  // ST_CORE_OPTIONS_H_
