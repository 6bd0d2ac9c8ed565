// Logging to stderr, one line per message: "<time> <level> st-peer: <text>".
// Thread-safe (each line is a single write(2)).
#ifndef ST_CORE_LOG_H_
#define ST_CORE_LOG_H_

namespace st {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define ST_LOG_DEBUG(...) ::st::Log(::st::LogLevel::kDebug, __VA_ARGS__)
#define ST_LOG_INFO(...) ::st::Log(::st::LogLevel::kInfo, __VA_ARGS__)
#define ST_LOG_WARN(...) ::st::Log(::st::LogLevel::kWarn, __VA_ARGS__)
#define ST_LOG_ERROR(...) ::st::Log(::st::LogLevel::kError, __VA_ARGS__)

}  // namespace st

#endif  // ST_CORE_LOG_H_
