// st-peer --config FILE: the peer's options from a TOML file (docs/deployment.md).
//
// Each key is one of st-peer's options without its leading "--" (the name
// or the old name of a row of the option table, options.h: "max-write-mb-per-s",
// or with underscores, "max_write_mb_per_s"), at the top level of the file;
// its value has the option's type: a string, an integer, a number (integer or
// float), a byte count (an integer, or a string with a K, M, G or T suffix)
// or a boolean (true is the flag given, false the flag left out). The keys
// become flags that the command line overrides (ParseOptions). Options marked
// kOptCommandLineOnly in the table (--config, --help, --mint-token and its
// --ops, --file-id, --ttl, --user, --fault-loop-stall-file) are not keys.
#ifndef ST_CORE_CONFIG_FILE_H_
#define ST_CORE_CONFIG_FILE_H_

#include <string>
#include <vector>

#include "status.h"

namespace st {

// One key of a config file as the flag it stands for.
struct ConfigFlag {
  std::string flag;   // "--port"
  std::string value;  // "7100"; empty for a boolean flag
  bool has_value = true;
  std::string where;  // "/etc/storetorrent/peer.toml:3: port = 70000", for errors
};

// Parses TOML `text` read from `source` (the file name, used in messages).
// InvalidArgument naming the file, the line and the key for a syntax error,
// an unknown key, a key given twice (dashes and underscores alike) or a value
// of the wrong type.
Status ParseConfigText(const std::string& text, const std::string& source,
                       std::vector<ConfigFlag>* out);

// Reads and parses the file `path`; IOError if it cannot be read.
Status ReadConfigFile(const std::string& path, std::vector<ConfigFlag>* out);

// The keys (option names without "--") a config file may set, in --help
// order; each option's old name (OptionSpec::alias) is accepted too.
std::vector<std::string> ConfigKeys();

}  // namespace st

#endif  // ST_CORE_CONFIG_FILE_H_
