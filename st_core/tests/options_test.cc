#include "options.h"

#include <gtest/gtest.h>

#include <vector>

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

}  // namespace
}  // namespace st
