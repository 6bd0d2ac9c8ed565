// Logging to stderr, one line per message (docs/operations.md, "Logs"):
//   text (default): 2026-11-23 13:49:33.685 INFO st-peer: <text>   (local time)
//   json: {"ts":"2026-11-23T12:49:33.685Z","level":"INFO","logger":"st-peer",
//          "msg":"<text>"}   (ts: UTC, RFC 3339 with milliseconds)
// The tracker writes the same formats (st_py/core/logs.py). Thread-safe (each line
// is a single write(2)).
#ifndef ST_CORE_LOG_H_
#define ST_CORE_LOG_H_

#include <string>

namespace st {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kText = 0, kJson = 1 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void SetLogFormat(LogFormat format);
// "text" or "json" (--log-format); false for anything else.
bool ParseLogFormat(const std::string& name, LogFormat* out);
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The line Log writes for a message (without its newline), at Unix time
// sec + usec: for tests.
std::string FormatLogLine(LogFormat format, LogLevel level, long sec, long usec,
                          const std::string& msg);

#define ST_LOG_DEBUG(...) ::st::Log(::st::LogLevel::kDebug, __VA_ARGS__)
#define ST_LOG_INFO(...) ::st::Log(::st::LogLevel::kInfo, __VA_ARGS__)
#define ST_LOG_WARN(...) ::st::Log(::st::LogLevel::kWarn, __VA_ARGS__)
#define ST_LOG_ERROR(...) ::st::Log(::st::LogLevel::kError, __VA_ARGS__)

}  // namespace st

#endif  // ST_CORE_LOG_H_
