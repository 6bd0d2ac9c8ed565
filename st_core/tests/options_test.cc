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

TEST(Options, Defaults) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d"}, &o).ok());
  EXPECT_EQ("/d", o.data_dir);
  EXPECT_EQ("127.0.0.1", o.host);
  EXPECT_EQ(0, o.port);
  EXPECT_EQ(2.0, o.announce_interval_s);
  EXPECT_EQ(67112960u, o.max_frame);
  EXPECT_EQ(60.0, o.get_local_cache_s);
  EXPECT_EQ(2.0, o.ring_timeout_base_s);
  EXPECT_EQ(0.5, o.ring_timeout_per_peer_s);
  EXPECT_FALSE(o.sync);
  EXPECT_EQ(0u, o.capacity);
  EXPECT_EQ(0u, o.reserve);
  EXPECT_EQ(86400.0, o.scrub_interval_s);
  EXPECT_EQ(3600.0, o.scrub_age_s);
  EXPECT_EQ(5.0, o.mirror_interval_s);
  EXPECT_EQ(30.0, o.idle_timeout_s);
  EXPECT_EQ(0.0, o.keepalive_timeout_s);
  EXPECT_EQ(1024u, o.max_connections);
}

TEST(Options, ImpactControlAndChains) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d"}, &o).ok());
  EXPECT_EQ(0.0, o.max_write_mbps);
  EXPECT_EQ(0.0, o.max_read_mbps);
  EXPECT_EQ(0.0, o.max_request_rate);
  EXPECT_EQ(5.0, o.chain_timeout_s);
  ASSERT_TRUE(Parse({"--data", "/d", "--max-write-mbps", "40", "--max-read-mbps=80.5",
                     "--max-request-rate", "400", "--chain-timeout", "2"},
                    &o)
                  .ok());
  EXPECT_EQ(40.0, o.max_write_mbps);
  EXPECT_EQ(80.5, o.max_read_mbps);
  EXPECT_EQ(400.0, o.max_request_rate);
  EXPECT_EQ(2.0, o.chain_timeout_s);
  Status s = Parse({"--data", "/d", "--max-write-mbps", "-1"}, &o);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(std::string::npos, s.message().find("a non-negative number")) << s.message();
  EXPECT_TRUE(Parse({"--data", "/d", "--chain-timeout", "0"}, &o).IsInvalidArgument());
}

TEST(Options, HostileInputLimits) {
  Options o;
  ASSERT_TRUE(Parse({"--data", "/d", "--idle-timeout", "1.5", "--keepalive-timeout=300",
                     "--max-connections", "4"},
                    &o)
                  .ok());
  EXPECT_EQ(1.5, o.idle_timeout_s);
  EXPECT_EQ(300.0, o.keepalive_timeout_s);
  EXPECT_EQ(4u, o.max_connections);
  ASSERT_TRUE(Parse({"--data", "/d", "--idle-timeout", "0", "--max-connections", "0"}, &o).ok());
  EXPECT_EQ(0.0, o.idle_timeout_s);  // 0: off
  EXPECT_EQ(0u, o.max_connections);  // 0: no limit
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
  EXPECT_EQ(0.0, o.scrub_interval_s);
  EXPECT_EQ(60.5, o.scrub_age_s);
  EXPECT_FALSE(Parse({"--data", "/d", "--scrub-interval", "-1"}, &o).ok());
  ASSERT_TRUE(Parse({"--data", "/d", "--mirror-interval", "0"}, &o).ok());
  EXPECT_EQ(0.0, o.mirror_interval_s);
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
  EXPECT_EQ(7000, o.port);
  EXPECT_EQ("h:7000", o.advertise);
  EXPECT_EQ("/ns", o.namespace_dir);
  EXPECT_EQ("t:50051", o.tracker);
  EXPECT_EQ(0.5, o.announce_interval_s);
  EXPECT_EQ(1u << 20, o.max_frame);
  EXPECT_EQ(0.0, o.get_local_cache_s);
  EXPECT_TRUE(o.sync);
  EXPECT_EQ(10ull << 30, o.capacity);
  EXPECT_EQ(4096u, o.reserve);
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
  std::ostringstream s;
  s << o.data_dir << "|" << o.host << "|" << o.port << "|" << o.metrics_port << "|" << o.advertise
    << "|" << o.namespace_dir << "|" << o.tracker << "|" << o.tracker_ca << "|" << o.tracker_cert
    << "|" << o.tracker_key << "|" << o.announce_interval_s << "|" << o.max_frame << "|"
    << o.get_local_cache_s << "|" << o.ring_timeout_base_s << "|" << o.ring_timeout_per_peer_s
    << "|" << o.chain_timeout_s << "|" << o.max_write_mbps << "|" << o.max_read_mbps << "|"
    << o.max_request_rate << "|" << o.scrub_interval_s << "|" << o.scrub_age_s << "|"
    << o.mirror_interval_s << "|" << o.sync << "|" << o.capacity << "|" << o.reserve << "|"
    << o.idle_timeout_s << "|" << o.keepalive_timeout_s << "|" << o.max_connections << "|"
    << o.key_file << "|" << o.verbose;
  return s.str();
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
max-write-mbps = 40
max-read-mbps = 80.5
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
                     "--max-write-mbps",
                     "40",
                     "--max-read-mbps",
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
  EXPECT_EQ(7100, from_file.port);
  EXPECT_EQ(1u << 20, from_file.max_frame);
  EXPECT_EQ(10ull << 30, from_file.capacity);
  EXPECT_EQ(80.5, from_file.max_read_mbps);
  EXPECT_EQ("/mnt/st/ns", from_file.namespace_dir);
  EXPECT_TRUE(from_file.sync);
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
  EXPECT_EQ("/from/file", o.data_dir);
  EXPECT_EQ(7200, o.port);
  EXPECT_EQ("0.0.0.0", o.host);
  EXPECT_EQ(10.0, o.max_write_mbps);  // max_write_mbps: underscores work too
  EXPECT_TRUE(o.sync);
  EXPECT_FALSE(o.verbose);  // false: the flag left out
  std::string config_eq = "--config=" + path;
  ASSERT_TRUE(Parse({config_eq.c_str(), "--data", "/cli", "--verbose"}, &o).ok());
  EXPECT_EQ("/cli", o.data_dir);
  EXPECT_EQ(7100, o.port);
  EXPECT_TRUE(o.verbose);
  // an empty file is fine; --data is still required
  std::string empty = WriteFile(dir, "empty.toml", "# nothing\n");
  ASSERT_TRUE(Parse({"--config", empty.c_str(), "--data", "/d"}, &o).ok());
  Options defaults;
  defaults.data_dir = "/d";
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
  EXPECT_HAS(m, "max-write-mbps");  // the list of keys

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
  EXPECT_EQ("/data1/storetorrent", o.data_dir);
  EXPECT_EQ(7100, o.port);
  EXPECT_EQ("/etc/storetorrent/secret.key", o.key_file);
}

}  // namespace
}  // namespace st
