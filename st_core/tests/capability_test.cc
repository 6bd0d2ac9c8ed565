// Capability tokens (docs/capabilities.md): minting, parsing and verifying,
// the shared vectors of tests/vectors/capability.json (which the Python
// side, st_py/core/capability.py, checks too), key files and the per-connection
// table's rules.
#include "capability.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"
#include "vectors.h"

namespace st {
namespace {

using nlohmann::json;
using test::FromHex;
using test::ToHex;

json LoadVectors() { return test::LoadVectors("capability.json"); }

const std::string kKey =
    FromHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
const std::string kOtherKey(32, 'Z');
constexpr uint64_t kNow = 1700000000;

Capability Cap(uint8_t ops, uint64_t file_id, uint64_t expires, std::string user = "alice") {
  Capability c;
  c.ops = ops;
  c.file_id = file_id;
  c.expires = expires;
  c.user = std::move(user);
  return c;
}

// "malformed", "version", "signature", "expired" or "" (accepted): the
// categories of the vectors' bad_tokens.
std::string Refusal(const std::string& key, const std::string& token, uint64_t now) {
  Capability c;
  Status s = VerifyToken(key, token, now, &c);
  if (s.ok()) return "";
  const std::string& m = s.message();
  if (m.find("malformed") != std::string::npos) return "malformed";
  if (m.find("version") != std::string::npos) return "version";
  if (m.find("signature") != std::string::npos) return "signature";
  if (m.find("expired") != std::string::npos) return "expired";
  return "other: " + m;
}

TEST(Capability, MintVerifyRoundTrip) {
  Capability in = Cap(kOpRead | kOpWrite, 0x2a, kNow + 3600, "bob");
  std::string t = MintToken(kKey, in);
  EXPECT_EQ(kCapabilityMinSize + 3, t.size());
  Capability out;
  ASSERT_TRUE(VerifyToken(kKey, t, kNow, &out).ok());
  EXPECT_EQ(in, out);
  // The layout of docs/capabilities.md, field by field.
  EXPECT_EQ(1, t[0]);
  EXPECT_EQ(3, t[1]);
  EXPECT_EQ("2a00000000000000", ToHex(t.substr(2, 8)));
  EXPECT_EQ("10ff536500000000", ToHex(t.substr(10, 8)));
  EXPECT_EQ("0300626f62", ToHex(t.substr(18, 5)));
  Capability parsed;
  ASSERT_TRUE(ParseToken(t, &parsed).ok());
  EXPECT_EQ(in, parsed);
}

TEST(Capability, SharedVectors) {
  json v = LoadVectors();
  ASSERT_GE(v["tokens"].size(), 4u);
  ASSERT_EQ(kCapabilityClockSkewS, v["clock_skew_s"].get<uint64_t>());
  for (const json& t : v["tokens"]) {
    SCOPED_TRACE(t["name"].get<std::string>());
    std::string key = FromHex(t["key_hex"].get<std::string>());
    Capability c;
    c.version = t["version"].get<uint8_t>();
    c.ops = t["ops"].get<uint8_t>();
    c.file_id = t["file_id"].get<uint64_t>();
    c.expires = t["expires"].get<uint64_t>();
    c.user = t["user"].get<std::string>();
    std::string token = MintToken(key, c);
    EXPECT_EQ(t["token_hex"].get<std::string>(), ToHex(token));
    Capability back;
    // Valid up to expires + the skew allowance.
    ASSERT_TRUE(VerifyToken(key, FromHex(t["token_hex"].get<std::string>()),
                            c.expires + kCapabilityClockSkewS, &back)
                    .ok());
    EXPECT_EQ(c, back);
  }
  ASSERT_GE(v["bad_tokens"].size(), 5u);
  for (const json& b : v["bad_tokens"]) {
    SCOPED_TRACE(b["name"].get<std::string>());
    EXPECT_EQ(b["error"].get<std::string>(),
              Refusal(FromHex(b["key_hex"].get<std::string>()),
                      FromHex(b["token_hex"].get<std::string>()), b["now"].get<uint64_t>()));
  }
}

TEST(Capability, AnyFlippedBitIsRefused) {
  std::string t = MintToken(kKey, Cap(kOpRead, 7, kNow + 60, "carol"));
  ASSERT_EQ("", Refusal(kKey, t, kNow));
  for (size_t i = 0; i < t.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = t;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      std::string why = Refusal(kKey, f, kNow);
      EXPECT_NE("", why) << "byte " << i << " bit " << bit;
      // Flips of the body's fixed fields that keep the length right must be
      // caught by the MAC, not only by the parser.
      if (i >= 1 && i < 18) {
        EXPECT_EQ("signature", why) << "byte " << i << " bit " << bit;
      }
    }
  }
}

TEST(Capability, WrongKeyIsRefused) {
  std::string t = MintToken(kKey, Cap(kOpWrite, 7, kNow + 60));
  EXPECT_EQ("signature", Refusal(kOtherKey, t, kNow));
  EXPECT_EQ("", Refusal(kKey, t, kNow));
}

TEST(Capability, TruncatedAndOversizedTokens) {
  std::string t = MintToken(kKey, Cap(kOpWrite, 7, kNow + 60, "dave"));
  for (size_t n = 0; n < t.size(); ++n) {
    EXPECT_EQ("malformed", Refusal(kKey, t.substr(0, n), kNow)) << n << " bytes";
  }
  EXPECT_EQ("malformed", Refusal(kKey, t + std::string(1, '\0'), kNow));
  EXPECT_EQ("malformed", Refusal(kKey, t + t, kNow));
  EXPECT_EQ("malformed", Refusal(kKey, std::string(100000, '\x01'), kNow));
  // The user is at most 256 bytes: 256 is minted whole, more is refused.
  std::string u256(256, 'u');
  Capability c;
  ASSERT_TRUE(VerifyToken(kKey, MintToken(kKey, Cap(kOpRead, 1, kNow, u256)), kNow, &c).ok());
  EXPECT_EQ(u256, c.user);
  ASSERT_TRUE(VerifyToken(kKey, MintToken(kKey, Cap(kOpRead, 1, kNow, u256 + "v")), kNow, &c).ok());
  EXPECT_EQ(u256, c.user) << "MintToken cuts the user to 256 bytes";
  std::string long_user;
  long_user += '\x01';
  long_user += '\x01';
  long_user += std::string(16, '\0');
  long_user += std::string("\x01\x01", 2);  // user length 257
  long_user += std::string(257, 'u') + std::string(32, '\0');
  EXPECT_EQ("malformed", Refusal(kKey, long_user, kNow));
  // An unknown version.
  Capability v2 = Cap(kOpRead, 1, kNow + 60);
  v2.version = 2;
  EXPECT_EQ("version", Refusal(kKey, MintToken(kKey, v2), kNow));
}

TEST(Capability, ExpiryWithClockSkew) {
  std::string t = MintToken(kKey, Cap(kOpRead, 1, kNow));
  EXPECT_EQ("", Refusal(kKey, t, kNow - 1000));
  EXPECT_EQ("", Refusal(kKey, t, kNow));
  EXPECT_EQ("", Refusal(kKey, t, kNow + kCapabilityClockSkewS));
  EXPECT_EQ("expired", Refusal(kKey, t, kNow + kCapabilityClockSkewS + 1));
  EXPECT_FALSE(CapabilityExpired(kNow, kNow + 30));
  EXPECT_TRUE(CapabilityExpired(kNow, kNow + 31));
  EXPECT_TRUE(CapabilityExpired(0, kNow));
  EXPECT_FALSE(CapabilityExpired(UINT64_MAX, UINT64_MAX));
  EXPECT_FALSE(CapabilityExpired(UINT64_MAX, 0));
  Capability c;
  Status s = VerifyToken(kKey, t, kNow + 100, &c);
  EXPECT_NE(std::string::npos, s.message().find("expired at 1700000000")) << s.message();
}

TEST(Capability, TableFileZeroMatchesEveryFile) {
  CapabilityTable t;
  std::string m;
  EXPECT_FALSE(t.Check(5, kOpPeer, kNow, &m));
  t.Add(Cap(kOpPeer, 0, kNow + 3600, "peer:x"), kNow);
  EXPECT_TRUE(t.Check(5, kOpPeer, kNow, &m));
  EXPECT_TRUE(t.Check(0xffffffffffffffffull, kOpPeer, kNow, &m));
  EXPECT_TRUE(t.Check(0, kOpPeer, kNow, &m));
  EXPECT_FALSE(t.Check(5, kOpRead, kNow, &m));
  // A token for one file does not match others, nor file 0's requests (SCRUB).
  CapabilityTable one;
  one.Add(Cap(kOpAdmin | kOpRead, 9, kNow + 3600), kNow);
  EXPECT_TRUE(one.Check(9, kOpRead, kNow, &m));
  EXPECT_FALSE(one.Check(10, kOpRead, kNow, &m));
  EXPECT_NE(std::string::npos, m.find("file 000000000000000a")) << m;
  EXPECT_FALSE(one.Check(0, kOpAdmin, kNow, &m));
}

TEST(Capability, TableOpMismatchAndMessages) {
  CapabilityTable t;
  std::string m;
  EXPECT_FALSE(t.Check(0x2a, kOpWrite, kNow, &m));
  EXPECT_NE(std::string::npos, m.find("file 000000000000002a")) << m;
  EXPECT_NE(std::string::npos, m.find("WRITE")) << m;
  EXPECT_NE(std::string::npos, m.find("holds none")) << m;
  t.Add(Cap(kOpRead, 0x2a, kNow + 100, "erin"), kNow);
  EXPECT_TRUE(t.Check(0x2a, kOpRead, kNow, &m));
  EXPECT_FALSE(t.Check(0x2a, kOpWrite, kNow, &m));
  EXPECT_NE(std::string::npos, m.find("needs a WRITE")) << m;
  EXPECT_NE(std::string::npos, m.find("allows READ")) << m;
  EXPECT_NE(std::string::npos, m.find("erin")) << m;
  EXPECT_NE(std::string::npos, m.find("expires at 1700000100")) << m;
  EXPECT_FALSE(t.Check(0x2a, kOpDelete, kNow, &m));
  // A newer token for the file replaces the older one.
  t.Add(Cap(kOpWrite, 0x2a, kNow + 100), kNow);
  EXPECT_EQ(1u, t.size());
  EXPECT_TRUE(t.Check(0x2a, kOpWrite, kNow, &m));
  EXPECT_FALSE(t.Check(0x2a, kOpRead, kNow, &m));
}

TEST(Capability, TableExpiry) {
  CapabilityTable t;
  std::string m;
  t.Add(Cap(kOpRead, 3, kNow), kNow - 10);
  EXPECT_TRUE(t.Check(3, kOpRead, kNow + 30, &m));
  EXPECT_FALSE(t.Check(3, kOpRead, kNow + 31, &m));
  EXPECT_NE(std::string::npos, m.find("expired at 1700000000")) << m;
  // An expired file token does not hide a valid wildcard one, and vice versa.
  t.Add(Cap(kOpRead, 0, kNow + 1000, "ops"), kNow);
  EXPECT_TRUE(t.Check(3, kOpRead, kNow + 31, &m));
}

TEST(Capability, TableIsBounded) {
  CapabilityTable t;
  std::string m;
  for (uint64_t i = 1; i <= CapabilityTable::kMaxEntries + 10; ++i) {
    t.Add(Cap(kOpRead, i, kNow + 1000 + i), kNow);
  }
  EXPECT_EQ(CapabilityTable::kMaxEntries, t.size());
  // The ones expiring first made room; the newest are held.
  EXPECT_FALSE(t.Check(1, kOpRead, kNow, &m));
  EXPECT_TRUE(t.Check(CapabilityTable::kMaxEntries + 10, kOpRead, kNow, &m));
}

TEST(Capability, Ops) {
  uint8_t ops = 0;
  EXPECT_TRUE(ParseOps("16", &ops));
  EXPECT_EQ(kOpAdmin, ops);
  EXPECT_TRUE(ParseOps("0x1f", &ops));
  EXPECT_EQ(kOpAll, ops);
  EXPECT_TRUE(ParseOps("read+WRITE", &ops));
  EXPECT_EQ(kOpRead | kOpWrite, ops);
  EXPECT_TRUE(ParseOps("peer,admin", &ops));
  EXPECT_EQ(kOpPeer | kOpAdmin, ops);
  EXPECT_FALSE(ParseOps("", &ops));
  EXPECT_FALSE(ParseOps("0", &ops));
  EXPECT_FALSE(ParseOps("32", &ops));
  EXPECT_FALSE(ParseOps("read+", &ops));
  EXPECT_FALSE(ParseOps("rread", &ops));
  EXPECT_FALSE(ParseOps("1x", &ops));
  EXPECT_EQ("READ+DELETE", OpsText(kOpRead | kOpDelete));
  EXPECT_EQ("nothing", OpsText(0));
}

void WriteFile(const std::string& path, const std::string& content, mode_t mode) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  ASSERT_EQ(0, chmod(path.c_str(), mode));
}

TEST(Capability, KeyFiles) {
  test::TempDir dir;
  const std::string hex = ToHex(kKey);
  std::string key, warning;
  std::string p = dir.path() + "/secret.key";

  WriteFile(p, hex + "\n", 0600);
  ASSERT_TRUE(LoadKeyFile(p, &key, &warning).ok());
  EXPECT_EQ(kKey, key);
  EXPECT_EQ("", warning);
  WriteFile(p, hex, 0400);  // no newline
  ASSERT_TRUE(LoadKeyFile(p, &key, &warning).ok());
  EXPECT_EQ(kKey, key);

  // Readable by others: loaded, with a warning naming the mode.
  WriteFile(p, hex + "\n", 0644);
  ASSERT_TRUE(LoadKeyFile(p, &key, &warning).ok());
  EXPECT_NE(std::string::npos, warning.find("0644")) << warning;
  EXPECT_NE(std::string::npos, warning.find("chmod 600")) << warning;

  const std::string bad[] = {"",
                             "\n",
                             hex.substr(0, 62) + "\n",
                             hex + "00\n",
                             hex + "\n\n",
                             " " + hex,
                             hex.substr(0, 63) + "g\n",
                             hex + "\r\n",
                             std::string(4096, 'a')};
  for (const std::string& content : bad) {
    WriteFile(p, content, 0600);
    key = "unchanged";
    Status s = LoadKeyFile(p, &key, &warning);
    EXPECT_FALSE(s.ok()) << "accepted '" << content << "'";
    EXPECT_EQ("unchanged", key);
    EXPECT_NE(std::string::npos, s.message().find("64 hex digits")) << s.message();
    EXPECT_NE(std::string::npos, s.message().find(p)) << s.message();
  }
  Status s = LoadKeyFile(dir.path() + "/missing", &key, &warning);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.message().find("missing")) << s.message();
  EXPECT_FALSE(LoadKeyFile(dir.path(), &key, &warning).ok());  // a directory
}

}  // namespace
}  // namespace st
