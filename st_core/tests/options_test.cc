#include "options.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "config_file.h"
#include "test_util.h"

namespace st {
namespace {

Status Parse(std::vector<const char*> args, Options* o) {
  args.insert(args.begin(), "st-peer");
  return ParseOptions(static_cast<int>(args.size()), args.data(), o);
}

Status ParseArgs(const std::vector<std::string>& args, Options* o) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return Parse(argv, o);
}

// --help with its lines joined: a phrase may be wrapped anywhere.
std::string FlatUsage() {
  std::string out;
  bool space = false;
  for (char c : Usage()) {
    if (c == ' ' || c == '\n') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

TEST(Options, Defaults) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d"}, &o).ok());
  EXPECT_EQ("/d", o.store.data_dir);
  EXPECT_EQ("127.0.0.1", o.server.host);
  EXPECT_EQ(0, o.server.port);
  EXPECT_EQ(2.0, o.announce_interval_s);
  EXPECT_EQ(67112960u, o.server.max_frame);
  EXPECT_EQ(60.0, o.server.get_local_cache_s);
  EXPECT_EQ(2.0, o.server.ring_timeout_base_s);
  EXPECT_EQ(0.5, o.server.ring_timeout_per_peer_s);
  EXPECT_FALSE(o.store.sync);
  EXPECT_EQ(0u, o.store.capacity);
  EXPECT_EQ(0u, o.store.reserve);
  EXPECT_EQ(86400.0, o.server.scrub_interval_s);
  EXPECT_EQ(3600.0, o.server.scrub_age_s);
  EXPECT_EQ(5.0, o.server.mirror_interval_s);
  EXPECT_EQ(30.0, o.server.idle_timeout_s);
  EXPECT_EQ(0.0, o.server.keepalive_timeout_s);
  EXPECT_EQ(1024u, o.server.max_connections);
}

TEST(Options, ImpactControlAndChains) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d"}, &o).ok());
  EXPECT_EQ(0.0, o.server.max_write_bytes_per_s);
  EXPECT_EQ(0.0, o.server.max_read_bytes_per_s);
  EXPECT_EQ(0.0, o.server.max_requests_per_s);
  EXPECT_EQ(5.0, o.server.chain_timeout_s);
  ASSERT_TRUE(Parse({"--data", "/d", "--max-write-mb-per-s", "40", "--max-read-mb-per-s=80.5",
                     "--max-request-rate", "400", "--chain-timeout", "2"},
                    &o)
                  .ok());
  EXPECT_EQ(40e6, o.server.max_write_bytes_per_s);  // MB (10^6 bytes) per second
  EXPECT_EQ(80.5e6, o.server.max_read_bytes_per_s);
  EXPECT_EQ(400.0, o.server.max_requests_per_s);
  EXPECT_EQ(2.0, o.server.chain_timeout_s);
  Status s = Parse({"--data", "/d", "--max-write-mb-per-s", "-1"}, &o);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(std::string::npos, s.message().find("--max-write-mb-per-s -1: expected a non-negative "
                                                "number of MB per second"))
      << s.message();
  EXPECT_TRUE(Parse({"--data", "/d", "--chain-timeout", "0"}, &o).IsInvalidArgument());
}

// The names the rates had before they said what they are (MB/s) still work,
// on the command line and in a config file.
TEST(Options, OldRateNamesAreAliases) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d", "--max-write-mbps", "40", "--max-read-mbps=80.5"}, &o).ok());
  EXPECT_EQ(40e6, o.server.max_write_bytes_per_s);
  EXPECT_EQ(80.5e6, o.server.max_read_bytes_per_s);
  // the later one wins, whichever name it uses
  ASSERT_TRUE(
      Parse({"--data", "/d", "--max-write-mb-per-s", "1", "--max-write-mbps", "2"}, &o).ok());
  EXPECT_EQ(2e6, o.server.max_write_bytes_per_s);
  Status s = Parse({"--data", "/d", "--max-read-mbps", "fast"}, &o);
  EXPECT_NE(std::string::npos, s.message().find("--max-read-mbps fast: expected")) << s.message();
  EXPECT_EQ(FindOption("max-write-mb-per-s"), FindOption("max-write-mbps"));
  EXPECT_EQ(FindOption("max-read-mb-per-s"), FindOption("max-read-mbps"));
  EXPECT_NE(std::string::npos, FlatUsage().find("formerly --max-write-mbps"));
}

TEST(Options, HostileInputLimits) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d", "--idle-timeout", "1.5", "--keepalive-timeout=300",
                     "--max-connections", "4"},
                    &o)
                  .ok());
  EXPECT_EQ(1.5, o.server.idle_timeout_s);
  EXPECT_EQ(300.0, o.server.keepalive_timeout_s);
  EXPECT_EQ(4u, o.server.max_connections);
  ASSERT_TRUE(Parse({"--data", "/d", "--idle-timeout", "0", "--max-connections", "0"}, &o).ok());
  EXPECT_EQ(0.0, o.server.idle_timeout_s);  // 0: off
  EXPECT_EQ(0u, o.server.max_connections);  // 0: no limit
  EXPECT_FALSE(Parse({"--data", "/d", "--idle-timeout", "-1"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--idle-timeout", "soon"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--keepalive-timeout", "-0.5"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--max-connections", "-4"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--max-connections", "4.5"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--max-connections", "1K"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--max-connections", "2000000"}, &o).ok());
  Status s = Parse({"--data", "/d", "--max-connections"}, &o);
  EXPECT_NE(std::string::npos, s.message().find("--max-connections")) << s.message();
  EXPECT_NE(std::string::npos, Usage().find("--idle-timeout"));
  EXPECT_NE(std::string::npos, Usage().find("--keepalive-timeout"));
  EXPECT_NE(std::string::npos, Usage().find("--max-connections"));
}

TEST(Options, Scrub) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d", "--scrub-interval", "0", "--scrub-age=60.5"}, &o).ok());
  EXPECT_EQ(0.0, o.server.scrub_interval_s);
  EXPECT_EQ(60.5, o.server.scrub_age_s);
  EXPECT_FALSE(Parse({"--data", "/d", "--scrub-interval", "-1"}, &o).ok());
  ASSERT_TRUE(Parse({"--data", "/d", "--mirror-interval", "0"}, &o).ok());
  EXPECT_EQ(0.0, o.server.mirror_interval_s);
  EXPECT_FALSE(Parse({"--data", "/d", "--mirror-interval", "-2"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--scrub-age", "x"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--scrub-age"}, &o).ok());
}

TEST(Options, All) {
  Options o;
  ASSERT_TRUE(Parse({"--data=/d",  "--host",
                     "0.0.0.0",    "--port",
                     "7000",       "--advertise",
                     "h:7000",     "--namespace",
                     "/ns/",       "--tracker",
                     "t:50051",    "--announce-interval",
                     "0.5",        "--max-frame",
                     "1M",         "--get-local-cache",
                     "0",          "--ring-timeout-base",
                     "1",          "--ring-timeout-per-peer",
                     "0.25",       "--sync",
                     "--capacity", "10G",
                     "--reserve",  "4096"},
                    &o)
                  .ok());
  EXPECT_EQ(7000, o.server.port);
  EXPECT_EQ("h:7000", o.server.advertise);
  EXPECT_EQ("/ns", o.server.namespace_dir);
  EXPECT_EQ("t:50051", o.tracker);
  EXPECT_EQ(0.5, o.announce_interval_s);
  EXPECT_EQ(1u << 20, o.server.max_frame);
  EXPECT_EQ(0.0, o.server.get_local_cache_s);
  EXPECT_TRUE(o.store.sync);
  EXPECT_EQ(10ull << 30, o.store.capacity);
  EXPECT_EQ(4096u, o.store.reserve);
}

TEST(Options, Errors) {
  Options o;
  EXPECT_FALSE(Parse({}, &o).ok());
  EXPECT_FALSE(Parse({"--data"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--bogus"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--port", "70000"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--port", "x"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--announce-interval", "0"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--tracker", "nohost"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--capacity", "-5"}, &o).ok());
  EXPECT_FALSE(Parse({"--data", "/d", "--sync=1"}, &o).ok());
  Status s = Parse({"--data", "/d", "--max-frame", "lots"}, &o);
  EXPECT_NE(std::string::npos, s.message().find("--max-frame")) << s.message();
  EXPECT_TRUE(Parse({"--help"}, &o).ok());
  EXPECT_TRUE(o.help);
  EXPECT_NE(std::string::npos, Usage().find("--get-local-cache"));
}

TEST(Options, KeyFileAndMintToken) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d", "--key-file", "/etc/st/secret.key"}, &o).ok());
  EXPECT_EQ("/etc/st/secret.key", o.key_file);
  EXPECT_FALSE(o.mint_token);
  ASSERT_TRUE(Parse({"--data", "/d"}, &o).ok());
  EXPECT_EQ("", o.key_file);
  EXPECT_FALSE(Parse({"--data", "/d", "--key-file", ""}, &o).ok());

  // --mint-token needs no --data.
  ASSERT_TRUE(Parse({"--mint-token", "--key-file", "k", "--ops", "16", "--file-id", "0", "--ttl",
                     "3600", "--user", "admin"},
                    &o)
                  .ok());
  EXPECT_TRUE(o.mint_token);
  EXPECT_EQ("k", o.key_file);
  EXPECT_EQ(16, o.mint_ops);
  EXPECT_EQ(0u, o.mint_file_id);
  EXPECT_EQ(3600.0, o.mint_ttl_s);
  EXPECT_EQ("admin", o.mint_user);
  ASSERT_TRUE(
      Parse({"--mint-token", "--key-file=k", "--ops=read+write", "--file-id=0x2a"}, &o).ok());
  EXPECT_EQ(3, o.mint_ops);
  EXPECT_EQ(42u, o.mint_file_id);
  EXPECT_EQ(3600.0, o.mint_ttl_s);  // the default
  EXPECT_EQ("", o.mint_user);
  ASSERT_TRUE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--file-id=18446744073709551615"},
                    &o)
                  .ok());
  EXPECT_EQ(18446744073709551615ull, o.mint_file_id);

  Status s = Parse({"--mint-token", "--ops", "16"}, &o);
  EXPECT_NE(std::string::npos, s.message().find("--key-file")) << s.message();
  s = Parse({"--mint-token", "--key-file", "k"}, &o);
  EXPECT_NE(std::string::npos, s.message().find("--ops")) << s.message();
  s = Parse({"--data", "/d", "--ops", "16"}, &o);
  EXPECT_NE(std::string::npos, s.message().find("only for --mint-token")) << s.message();
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=0"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=32"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=write+sing"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--file-id=-1"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--file-id=0x"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--file-id=12a"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--file-id=18446744073709551616"},
                     &o)
                   .ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--ttl=0"}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token", "--key-file=k", "--ops=1", "--ttl=-5"}, &o).ok());
  std::string long_user(257, 'u');
  EXPECT_FALSE(
      Parse({"--mint-token", "--key-file=k", "--ops=1", "--user", long_user.c_str()}, &o).ok());
  EXPECT_FALSE(Parse({"--mint-token=1", "--key-file=k", "--ops=1"}, &o).ok());
  EXPECT_NE(std::string::npos, Usage().find("--key-file"));
  EXPECT_NE(std::string::npos, Usage().find("--mint-token"));
}

// --config FILE (docs/deployment.md): st-peer's options from a TOML file.

std::string WriteFile(const test::TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Every option of the peer, as text, to compare two parses.
std::string Dump(const Options& o) {
  std::string out;
  for (const OptionSpec& spec : OptionTable()) {
    if (std::string(spec.name) == "config") continue;  // which file, not what it set
    out += std::string(spec.name) + "=" + OptionValue(spec, o) + "\n";
  }
  return out;
}

const char kEveryKey[] = R"(# every key st-peer takes
data = "/srv/st/data"
host = "0.0.0.0"
port = 7100
metrics-port = 9100
advertise = "10.0.0.5:7100"
namespace = "/mnt/st/ns/"
tracker = "tracker:7000"
tracker-ca = "/etc/st/ca.pem"
tracker-cert = "/etc/st/peer.pem"
tracker-key = "/etc/st/peer.key"
announce-interval = 0.5
max-frame = "1M"
get-local-cache = 30
ring-timeout-base = 1.5
ring-timeout-per-peer = 0.25
chain-timeout = 7
max-write-mb-per-s = 40
max-read-mb-per-s = 80.5
max-request-rate = 400
scrub-interval = 0
scrub-age = 7200
mirror-interval = 2.5
sync = true
capacity = "10G"
reserve = 4096
idle-timeout = 12.5
keepalive-timeout = 300
max-connections = 64
key-file = "/etc/st/secret.key"
verbose = true
)";

TEST(ConfigFile, EveryKeyAsItsFlag) {
  test::TempDir dir;
  std::string path = WriteFile(dir, "peer.toml", kEveryKey);
  Options from_file, from_flags;
  ASSERT_TRUE(Parse({"--config", path.c_str()}, &from_file).ok());
  ASSERT_TRUE(Parse({"--data",
                     "/srv/st/data",
                     "--host",
                     "0.0.0.0",
                     "--port",
                     "7100",
                     "--metrics-port",
                     "9100",
                     "--advertise",
                     "10.0.0.5:7100",
                     "--namespace",
                     "/mnt/st/ns/",
                     "--tracker",
                     "tracker:7000",
                     "--tracker-ca",
                     "/etc/st/ca.pem",
                     "--tracker-cert",
                     "/etc/st/peer.pem",
                     "--tracker-key",
                     "/etc/st/peer.key",
                     "--announce-interval",
                     "0.5",
                     "--max-frame",
                     "1M",
                     "--get-local-cache",
                     "30",
                     "--ring-timeout-base",
                     "1.5",
                     "--ring-timeout-per-peer",
                     "0.25",
                     "--chain-timeout",
                     "7",
                     "--max-write-mb-per-s",
                     "40",
                     "--max-read-mb-per-s",
                     "80.5",
                     "--max-request-rate",
                     "400",
                     "--scrub-interval",
                     "0",
                     "--scrub-age",
                     "7200",
                     "--mirror-interval",
                     "2.5",
                     "--sync",
                     "--capacity",
                     "10G",
                     "--reserve",
                     "4096",
                     "--idle-timeout",
                     "12.5",
                     "--keepalive-timeout",
                     "300",
                     "--max-connections",
                     "64",
                     "--key-file",
                     "/etc/st/secret.key",
                     "--verbose"},
                    &from_flags)
                  .ok());
  EXPECT_EQ(Dump(from_flags), Dump(from_file));
  EXPECT_EQ(path, from_file.config_file);
  EXPECT_EQ(7100, from_file.server.port);
  EXPECT_EQ(1u << 20, from_file.server.max_frame);
  EXPECT_EQ(10ull << 30, from_file.store.capacity);
  EXPECT_EQ(80.5e6, from_file.server.max_read_bytes_per_s);
  EXPECT_EQ("/mnt/st/ns", from_file.server.namespace_dir);
  EXPECT_TRUE(from_file.store.sync);
  EXPECT_NE(Dump(Options()), Dump(from_file));
}

TEST(ConfigFile, CommandLineOverridesTheFile) {
  test::TempDir dir;
  std::string path = WriteFile(dir, "peer.toml",
                               "data = \"/from/file\"\nport = 7100\nhost = \"0.0.0.0\"\n"
                               "max_write_mbps = 40\nsync = true\nverbose = false\n");
  Options o;
  // before or after --config, = or a separate value: the command line wins
  ASSERT_TRUE(Parse({"--port", "7200", "--config", path.c_str(), "--max-write-mbps=10"}, &o).ok());
  EXPECT_EQ("/from/file", o.store.data_dir);
  EXPECT_EQ(7200, o.server.port);
  EXPECT_EQ("0.0.0.0", o.server.host);
  EXPECT_EQ(10e6, o.server.max_write_bytes_per_s);  // max_write_mbps: an alias, underscores
  EXPECT_TRUE(o.store.sync);
  EXPECT_FALSE(o.verbose);  // false: the flag left out
  std::string config_eq = "--config=" + path;
  ASSERT_TRUE(Parse({config_eq.c_str(), "--data", "/cli", "--verbose"}, &o).ok());
  EXPECT_EQ("/cli", o.store.data_dir);
  EXPECT_EQ(7100, o.server.port);
  EXPECT_TRUE(o.verbose);
  // an empty file is fine; --data is still required
  std::string empty = WriteFile(dir, "empty.toml", "# nothing\n");
  ASSERT_TRUE(Parse({"--config", empty.c_str(), "--data", "/d"}, &o).ok());
  Options defaults;
  defaults.store.data_dir = "/d";
  EXPECT_EQ(Dump(defaults), Dump(o));
  Status s = Parse({"--config", empty.c_str()}, &o);
  EXPECT_NE(std::string::npos, s.message().find("--data DIR is required")) << s.message();
  EXPECT_NE(std::string::npos, s.message().find(empty)) << s.message();
}

// The message of parsing `text` as --config FILE; empty if it parses.
std::string ConfigError(const std::string& text, std::string* path = nullptr) {
  static test::TempDir dir;
  std::string p = WriteFile(dir, "peer.toml", text);
  if (path != nullptr) *path = p;
  Options o;
  Status s = Parse({"--config", p.c_str(), "--data", "/d"}, &o);
  EXPECT_TRUE(s.ok() || s.IsInvalidArgument()) << s.ToString();
  return s.ok() ? "" : s.message();
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string::npos, std::string(haystack).find(needle)) << (haystack)

TEST(ConfigFile, ErrorsNameTheKeyAndTheFile) {
  std::string path;
  std::string m = ConfigError("port = 7100\nprot = 7200\n", &path);
  EXPECT_HAS(m, path + ":2: unknown key 'prot'");
  EXPECT_HAS(m, "max-write-mb-per-s");  // the list of keys

  m = ConfigError("\nport = \"7100\"\n");
  EXPECT_HAS(m, path + ":2: key 'port' must be an integer, not a string");
  m = ConfigError("port = 7100.0\n");
  EXPECT_HAS(m, "key 'port' must be an integer, not a float");
  m = ConfigError("data = 5\n");
  EXPECT_HAS(m, "key 'data' must be a string, not an integer");
  m = ConfigError("sync = \"yes\"\n");
  EXPECT_HAS(m, "key 'sync' must be true or false, not a string");
  m = ConfigError("sync = 1\n");
  EXPECT_HAS(m, "key 'sync' must be true or false, not an integer");
  m = ConfigError("scrub-age = \"1h\"\n");
  EXPECT_HAS(m, "key 'scrub-age' must be a number, not a string");
  m = ConfigError("capacity = 1.5\n");
  EXPECT_HAS(m, "key 'capacity' must be a byte count");
  m = ConfigError("tracker = [\"a:1\", \"b:2\"]\n");
  EXPECT_HAS(m, "key 'tracker' must be a string, not an array");
  m = ConfigError("[peer]\nport = 7100\n");
  EXPECT_HAS(m, "unknown key 'peer'");

  // values the flag refuses: the file, line, key and value
  m = ConfigError("host = \"h\"\nport = 70000\n");
  EXPECT_HAS(m, path + ":2: port = 70000: expected a port number 0..65535");
  m = ConfigError("max-frame = \"lots\"\n");
  EXPECT_HAS(m, path + ":1: max-frame = lots: expected a byte count");
  m = ConfigError("announce-interval = -1\n");
  EXPECT_HAS(m, "announce-interval = -1: expected");
  m = ConfigError("scrub-age = inf\n");
  EXPECT_HAS(m, "scrub-age = inf: expected");
  m = ConfigError("tracker = \"nohost\"\n");
  EXPECT_HAS(m, "tracker = nohost: expected HOST:PORT");

  // the same option twice, and command-line-only flags
  m = ConfigError("key_file = \"/a\"\nkey-file = \"/b\"\n");
  EXPECT_HAS(m, "sets --key-file, which");
  m = ConfigError("mint-token = true\n");
  EXPECT_HAS(m, "key 'mint-token' is not allowed in a config file");
  m = ConfigError("config = \"/etc/other.toml\"\n");
  EXPECT_HAS(m, "key 'config' is not allowed");
  m = ConfigError("user = \"admin\"\n");
  EXPECT_HAS(m, "key 'user' is not allowed");

  // not TOML: file, line and column
  m = ConfigError("port = 7100\nhost = \n");
  EXPECT_HAS(m, path + ":2:");
  EXPECT_HAS(m, "not valid TOML");
  m = ConfigError("port = 7100\nport = 7200\n");
  EXPECT_HAS(m, path + ":2:");
}

TEST(ConfigFile, FileAndFlagErrors) {
  test::TempDir dir;
  Options o;
  std::string missing = dir.path() + "/missing.toml";
  Status s = Parse({"--config", missing.c_str(), "--data", "/d"}, &o);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_HAS(s.message(), "cannot read config file " + missing + ": No such file or directory");
  s = Parse({"--config", dir.path().c_str(), "--data", "/d"}, &o);
  EXPECT_HAS(s.message(), "Is a directory");
  std::string ok = WriteFile(dir, "ok.toml", "port = 1\n");
  s = Parse({"--config", ok.c_str(), "--config", ok.c_str(), "--data", "/d"}, &o);
  EXPECT_HAS(s.message(), "--config given twice");
  s = Parse({"--data", "/d", "--config"}, &o);
  EXPECT_HAS(s.message(), "--config needs a value");
  s = Parse({"--data", "/d", "--config="}, &o);
  EXPECT_HAS(s.message(), "--config needs a file name");
  // --help even when the file is broken
  ASSERT_TRUE(Parse({"--config", missing.c_str(), "--help"}, &o).ok());
  EXPECT_TRUE(o.help);
  EXPECT_HAS(Usage(), "--config FILE");
}

TEST(ConfigFile, MintTokenTakesTheKeyFileFromTheFile) {
  test::TempDir dir;
  std::string path = WriteFile(dir, "peer.toml", "data = \"/d\"\nkey-file = \"/etc/st/k\"\n");
  Options o;
  ASSERT_TRUE(Parse({"--config", path.c_str(), "--mint-token", "--ops", "16"}, &o).ok());
  EXPECT_TRUE(o.mint_token);
  EXPECT_EQ("/etc/st/k", o.key_file);
}

// Each flag of --help is a key of the config file, or one of the few that
// only make sense on a command line; and every key is a flag.
TEST(ConfigFile, EveryFlagIsAKey) {
  std::set<std::string> flags;
  std::istringstream usage(Usage());
  for (std::string line; std::getline(usage, line);) {
    size_t at = line.find_first_not_of(' ');
    if (at != 2 || line.compare(at, 2, "--") != 0) continue;  // a flag's first line
    size_t end = line.find_first_of(" =", at);
    flags.insert(line.substr(at + 2, end == std::string::npos ? end : end - at - 2));
  }
  ASSERT_GT(flags.size(), 30u);
  std::set<std::string> keys;
  for (const std::string& k : ConfigKeys()) keys.insert(k);
  const std::set<std::string> command_line_only = {"config",     "help",
                                                   "mint-token", "ops",
                                                   "file-id",    "ttl",
                                                   "user",       "fault-loop-stall-file"};
  for (const std::string& f : flags) {
    EXPECT_TRUE(keys.count(f) + command_line_only.count(f) == 1) << "--" << f;
  }
  for (const std::string& k : keys) EXPECT_TRUE(flags.count(k)) << k << " is not in --help";
}

TEST(ConfigFile, TheSampleInDeployParses) {
  std::string text = test::ReadSourceFile("deploy/peer.toml");
  ASSERT_FALSE(text.empty());
  std::vector<ConfigFlag> flags;
  Status s = ParseConfigText(text, "deploy/peer.toml", &flags);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Options o;
  std::string path = std::string(ST_SOURCE_DIR) + "/deploy/peer.toml";
  s = Parse({"--config", path.c_str()}, &o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("/data1/storetorrent", o.store.data_dir);
  EXPECT_EQ(7100, o.server.port);
  EXPECT_EQ("/etc/storetorrent/secret.key", o.key_file);
  EXPECT_EQ("dc1/rack07/peer1", o.domain);
}

// --domain: a failure domain path, announced to the tracker (docs/replication.md,
// "Failure domains"); without it, empty (the tracker takes the address's host).
TEST(Options, Domain) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d"}, &o).ok());
  EXPECT_EQ("", o.domain);
  for (const char* good :
       {"rack1", "site-a/rack.2/host_3", "dc1/room:2/row/rack/pdu/host/disk/x", "10.0.0.5"}) {
    SCOPED_TRACE(good);
    ASSERT_TRUE(Parse({"--data", "/d", "--domain", good}, &o).ok());
    EXPECT_EQ(good, o.domain);
    EXPECT_TRUE(IsFailureDomain(good));
  }
  test::TempDir dir;
  std::string path = WriteFile(dir, "peer.toml", "data = \"/d\"\ndomain = \"eu/r1/h7\"\n");
  ASSERT_TRUE(Parse({"--config", path.c_str()}, &o).ok());
  EXPECT_EQ("eu/r1/h7", o.domain);
  ASSERT_TRUE(Parse({"--config", path.c_str(), "--domain", "us/r2"}, &o).ok());  // the flag wins
  EXPECT_EQ("us/r2", o.domain);
  const std::string too_long(256, 'a');
  for (const std::string& bad :
       {std::string(""), std::string("/rack1"), std::string("rack1/"), std::string("a//b"),
        std::string("a b"), std::string("a/b\n"), std::string("a/b/c/d/e/f/g/h/i"),
        std::string("caf\xc3\xa9"), too_long}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(IsFailureDomain(bad));
    Status s = ParseArgs({"--data", "/d", "--domain", bad}, &o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(std::string::npos, s.message().find("--domain")) << s.message();
    EXPECT_NE(std::string::npos, s.message().find("joined by '/'")) << s.message();
  }
  EXPECT_TRUE(IsFailureDomain(std::string(255, 'a')));
  EXPECT_NE(std::string::npos, FlatUsage().find("--domain SITE/RACK/HOST"));
}

// ---- The option table (options.h) ------------------------------------------------

// A value each row takes that is not its default, as on a command line; and
// the same as a TOML value.
std::string SampleValue(const OptionSpec& spec) {
  if (std::string(spec.name) == "log-format") return "json";
  if (std::string(spec.name) == "domain") return "site-a/rack1/h1";
  if (std::string(spec.name) == "metadata") return "fetch";
  switch (spec.type) {
    case OptionType::kBool:
      return "true";
    case OptionType::kString:
      return "/x/y";
    case OptionType::kHostPort:
      return "h:1";
    case OptionType::kPort:
      return "7";
    case OptionType::kCount:
      return "3";
    case OptionType::kSeconds:
    case OptionType::kRate:
      return "0.75";
    case OptionType::kBytes:
      return "2K";
    case OptionType::kOps:
      return "read+write";
    case OptionType::kFileId:
      return "0x2a";
  }
  return "";
}

std::string SampleToml(const OptionSpec& spec) {
  std::string v = SampleValue(spec);
  switch (spec.type) {
    case OptionType::kPort:
    case OptionType::kCount:
    case OptionType::kSeconds:
    case OptionType::kRate:
    case OptionType::kBool:
      return v;
    default:
      return "\"" + v + "\"";
  }
}

// What OptionValue shows after SampleValue.
std::string SampleShown(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kBytes:
      return "2048";
    case OptionType::kOps:
      return "3";
    case OptionType::kFileId:
      return "42";
    default:
      return SampleValue(spec);
  }
}

// The arguments that make a parse of `spec` valid on its own: --data (and
// the TLS trio, which goes together), or --mint-token's.
std::vector<std::string> BaseArgs(const OptionSpec& spec) {
  if (spec.group == OptionGroup::kMintToken)
    return {"--mint-token", "--key-file", "k", "--ops", "1"};
  return {"--data", "/d", "--tracker-ca", "/ca", "--tracker-cert", "/c", "--tracker-key", "/k"};
}

TEST(OptionTable, RowsAreWellFormed) {
  std::set<std::string> names;
  for (const OptionSpec& spec : OptionTable()) {
    SCOPED_TRACE(spec.name);
    ASSERT_NE(nullptr, spec.name);
    EXPECT_TRUE(names.insert(spec.name).second) << "two rows named " << spec.name;
    if (spec.alias != nullptr) {
      EXPECT_TRUE(names.insert(spec.alias).second) << "alias " << spec.alias << " taken";
    }
    EXPECT_EQ(&spec, FindOption(spec.name));
    ASSERT_NE(nullptr, spec.help);
    EXPECT_GT(std::string(spec.help).size(), 5u);
    EXPECT_EQ(spec.type == OptionType::kBool, spec.arg == nullptr);
    EXPECT_LE(spec.min, spec.max);
    EXPECT_FALSE(OptionExpects(spec).empty());
    if (spec.group == OptionGroup::kMintToken || spec.group == OptionGroup::kFault) {
      EXPECT_TRUE(spec.flags & kOptCommandLineOnly) << "not a key of a config file";
    }
  }
  EXPECT_EQ(nullptr, FindOption("bogus"));
  EXPECT_EQ(nullptr, FindOption(""));
}

// The defaults of the table are those of the structs the fields belong to
// (ServerOptions and StoreOptions keep theirs for code that builds them).
TEST(OptionTable, DefaultsAreTheStructDefaults) {
  Options parsed, plain;
  ASSERT_TRUE(Parse({"--data", "/d"}, &parsed).ok());
  plain.store.data_dir = "/d";
  for (const OptionSpec& spec : OptionTable()) {
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(OptionValue(spec, plain), OptionValue(spec, parsed));
    if (spec.def != nullptr && spec.type != OptionType::kBytes &&
        spec.type != OptionType::kFileId) {
      EXPECT_EQ(spec.def, OptionValue(spec, parsed));
    }
  }
  EXPECT_EQ(Dump(plain), Dump(parsed));
  EXPECT_EQ(ServerOptions().max_frame, parsed.server.max_frame);
  EXPECT_EQ(20e6, parsed.server.verify_bytes_per_s);
}

// Every flag of the table parses, on its own, into its field; by its old
// name too; and each key of a config file is the flag's name and sets the
// same field the same way.
TEST(OptionTable, EveryFlagParsesAndEveryKeyIsItsFlag) {
  test::TempDir dir;
  size_t tested = 0;
  for (const OptionSpec& spec : OptionTable()) {
    const std::string name = spec.name;
    SCOPED_TRACE(name);
    if (name == "help" || name == "config") continue;  // below and in ConfigFile tests
    std::vector<std::string> args = BaseArgs(spec);
    Options base;
    ASSERT_TRUE(ParseArgs(args, &base).ok());
    args.push_back("--" + name);
    if (spec.type != OptionType::kBool) args.push_back(SampleValue(spec));
    Options o;
    Status s = ParseArgs(args, &o);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(SampleShown(spec), OptionValue(spec, o));
    if (name != "mint-token") {
      EXPECT_NE(OptionValue(spec, base), OptionValue(spec, o));
    }
    ++tested;

    if (spec.alias != nullptr) {
      args[args.size() - (spec.type == OptionType::kBool ? 1 : 2)] = std::string("--") + spec.alias;
      Options a;
      ASSERT_TRUE(ParseArgs(args, &a).ok());
      EXPECT_EQ(Dump(o), Dump(a));
    }
    if (spec.flags & kOptCommandLineOnly) continue;
    std::vector<std::string> keys = {name};
    if (spec.alias != nullptr) keys.push_back(spec.alias);
    for (const std::string& key : keys) {
      std::string path = WriteFile(dir, "one.toml", key + " = " + SampleToml(spec) + "\n");
      // the base arguments but the one under test, which would override the file's
      std::vector<std::string> with_file;
      std::vector<std::string> base_args = BaseArgs(spec);
      for (size_t i = 0; i < base_args.size(); i += 2) {
        if (base_args[i] == "--" + name) continue;
        with_file.push_back(base_args[i]);
        with_file.push_back(base_args[i + 1]);
      }
      with_file.push_back("--config");
      with_file.push_back(path);
      Options f;
      s = ParseArgs(with_file, &f);
      ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
      EXPECT_EQ(Dump(o), Dump(f)) << key;
    }
  }
  EXPECT_GE(tested, OptionTable().size() - 2);
}

// A value out of bounds is refused with a message that names the flag (or
// key), the value and the bound.
TEST(OptionTable, BadBoundsNameFlagValueAndBound) {
  struct Case {
    std::vector<const char*> args;
    const char* message;
  } cases[] = {
      {{"--data", "/d", "--port", "70000"}, "--port 70000: expected a port number 0..65535"},
      {{"--data", "/d", "--metrics-port=65536"},
       "--metrics-port 65536: expected a port number 0..65535"},
      {{"--data", "/d", "--max-frame", "63"},
       "--max-frame 63: expected a byte count between 64 and 4294967295"},
      {{"--data", "/d", "--max-frame", "4G"},
       "--max-frame 4G: expected a byte count between 64 and 4294967295"},
      {{"--data", "/d", "--max-connections", "1000001"},
       "--max-connections 1000001: expected a number of connections 0..1000000"},
      {{"--data", "/d", "--announce-interval", "0"},
       "--announce-interval 0: expected a positive number of seconds"},
      {{"--data", "/d", "--scrub-age", "-1"},
       "--scrub-age -1: expected a non-negative number of seconds"},
      {{"--data", "/d", "--verify-mbps", "-0.5"},
       "--verify-mbps -0.5: expected a non-negative number of MB per second"},
      {{"--data", "/d", "--capacity", "0"}, "--capacity 0: expected a positive byte count"},
      {{"--data", "/d", "--reserve", "1X"}, "--reserve 1X: expected a byte count"},
      {{"--mint-token", "--key-file", "k", "--ops", "1", "--ttl", "2e10"},
       "--ttl 2e10: expected a positive number of seconds, at most 10000000000"},
      {{"--data", "/d", "--namespace", ""}, "--namespace : expected a directory"},
      {{"--data", "/d", "--advertise", "h:"}, "--advertise h:: expected HOST:PORT"},
  };
  for (const Case& c : cases) {
    Options o;
    Status s = Parse(c.args, &o);
    EXPECT_TRUE(s.IsInvalidArgument()) << c.message;
    EXPECT_HAS(s.message(), c.message);
  }
  // in a config file: the file, the line and the key as written
  test::TempDir dir;
  std::string path = WriteFile(dir, "peer.toml", "data = \"/d\"\nmax_write_mbps = -3\n");
  Options o;
  Status s = Parse({"--config", path.c_str()}, &o);
  EXPECT_HAS(s.message(),
             path + ":2: max_write_mbps = -3: expected a non-negative number of MB per second");
}

// --help lists every option of the table once, with its default and old name.
TEST(OptionTable, UsageListsEveryOption) {
  const std::string usage = Usage();
  const std::string flat = FlatUsage();
  for (const OptionSpec& spec : OptionTable()) {
    SCOPED_TRACE(spec.name);
    std::string head = std::string("\n  --") + spec.name;
    if (spec.arg != nullptr) head += std::string(" ") + spec.arg;
    size_t at = usage.find(head + " ");
    if (at == std::string::npos) at = usage.find(head + "\n");
    ASSERT_NE(std::string::npos, at);
    EXPECT_EQ(std::string::npos, usage.find(std::string("\n  --") + spec.name + " ", at + 1))
        << "listed twice";
    std::string help_start = std::string(spec.help).substr(0, 20);
    EXPECT_NE(std::string::npos, flat.find(help_start.substr(0, help_start.rfind(' '))));
    if (spec.def != nullptr) {
      EXPECT_NE(std::string::npos, flat.find(std::string("default ") + spec.def));
    }
    if (spec.alias != nullptr) {
      EXPECT_NE(std::string::npos, flat.find(std::string("formerly --") + spec.alias));
    }
  }
  // the options' lines fit in 80 columns (a flag and its value may be longer than the column
  // where the help starts, and then push it right)
  std::istringstream lines(usage);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, 4, "  --") == 0 || line.compare(0, 30, std::string(30, ' ')) == 0) {
      EXPECT_LE(line.size(), 80u) << line;
    }
  }
}

}  // namespace
}  // namespace st
