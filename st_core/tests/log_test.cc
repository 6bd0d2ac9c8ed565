#include "log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "options.h"

namespace st {
namespace {

// 2026-11-23T12:49:33.685Z
constexpr long kSec = 1795438173;
constexpr long kUsec = 685432;

TEST(Log, JsonLineIsOneObject) {
  std::string line = FormatLogLine(LogFormat::kJson, LogLevel::kWarn, kSec, kUsec, "disk slow");
  nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ("2026-11-23T12:49:33.685Z", j["ts"]);
  EXPECT_EQ("WARN", j["level"]);
  EXPECT_EQ("st-peer", j["logger"]);
  EXPECT_EQ("disk slow", j["msg"]);
  EXPECT_EQ(4u, j.size());
}

TEST(Log, JsonEscapesQuotesControlsAndBadUtf8) {
  std::string msg = "a \"q\" \\ b\nc\td\x01 \xC3\xA9 \xFF\xC3 \xED\xA0\x80 \xF0\x9F\x98\x80";
  std::string line = FormatLogLine(LogFormat::kJson, LogLevel::kError, kSec, kUsec, msg);
  EXPECT_EQ(std::string::npos, line.find('\n'));
  nlohmann::json j = nlohmann::json::parse(line);  // throws on invalid JSON or UTF-8
  EXPECT_EQ("a \"q\" \\ b\nc\td\x01 \xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD "
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD "
            "\xF0\x9F\x98\x80",
            j["msg"].get<std::string>());
}

TEST(Log, TextLineHasTheTrackersTimestampFormat) {
  std::string line = FormatLogLine(LogFormat::kText, LogLevel::kInfo, kSec, kUsec, "one\ntwo");
  // "YYYY-MM-DD HH:MM:SS.mmm INFO st-peer: one two", local time
  ASSERT_GT(line.size(), 24u);
  for (size_t i : {4u, 7u}) EXPECT_EQ('-', line[i]) << line;
  EXPECT_EQ(' ', line[10]) << line;
  for (size_t i : {13u, 16u}) EXPECT_EQ(':', line[i]) << line;
  EXPECT_EQ('.', line[19]) << line;
  EXPECT_EQ("685 INFO st-peer: one two", line.substr(20)) << line;
}

TEST(Log, LogFormatFlag) {
  LogFormat f;
  EXPECT_TRUE(ParseLogFormat("json", &f));
  EXPECT_EQ(LogFormat::kJson, f);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(LogFormat::kText, f);
  EXPECT_FALSE(ParseLogFormat("xml", &f));

  Options o;
  const char* json[] = {"st-peer", "--data", "/d", "--log-format", "json"};
  ASSERT_TRUE(ParseOptions(5, json, &o).ok());
  EXPECT_EQ("json", o.log_format);
  const char* none[] = {"st-peer", "--data", "/d"};
  ASSERT_TRUE(ParseOptions(3, none, &o).ok());
  EXPECT_EQ("text", o.log_format);
  const char* bad[] = {"st-peer", "--data", "/d", "--log-format=xml"};
  Status s = ParseOptions(4, bad, &o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.message().find("text or json")) << s.message();
}

}  // namespace
}  // namespace st
