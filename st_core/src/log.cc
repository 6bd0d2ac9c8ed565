#include "log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace st {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

constexpr size_t kMaxMessage = 2048;  // longer messages are cut

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 if it is not one.
size_t Utf8Length(const std::string& s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  if (n == 2 && c < 0xC2) return 0;                                      // overlong
  if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;                  // overlong
  if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;                 // surrogate
  if (n == 4 && (c > 0xF4 || (c == 0xF0 && b(i + 1) < 0x90))) return 0;  // > U+10FFFF, overlong
  if (n == 4 && c == 0xF4 && b(i + 1) >= 0x90) return 0;
  return n;
}

// s as the inside of a JSON string: quotes, backslashes and control
// characters escaped, bytes that are not UTF-8 replaced by U+FFFD.
void AppendJsonString(const std::string& s, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", c);
      out->append(esc);
      ++i;
    } else {
      size_t n = Utf8Length(s, i);
      if (n == 0) {
        out->append("\xEF\xBF\xBD");  // U+FFFD
        ++i;
      } else {
        out->append(s, i, n);
        i += n;
      }
    }
  }
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void SetLogFormat(LogFormat format) { g_format.store(static_cast<int>(format)); }

bool ParseLogFormat(const std::string& name, LogFormat* out) {
  if (name == "text") {
    *out = LogFormat::kText;
  } else if (name == "json") {
    *out = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

std::string FormatLogLine(LogFormat format, LogLevel level, long sec, long usec,
                          const std::string& msg) {
  time_t t = static_cast<time_t>(sec);
  struct tm tm;
  char stamp[64];
  int ms = static_cast<int>(usec / 1000);
  std::string line;
  if (format == LogFormat::kJson) {
    gmtime_r(&t, &tm);
    std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    line.reserve(msg.size() + 96);
    line.append("{\"ts\":\"").append(stamp).append("\",\"level\":\"");
    line.append(LevelName(level)).append("\",\"logger\":\"st-peer\",\"msg\":\"");
    AppendJsonString(msg, &line);
    line.append("\"}");
    return line;
  }
  localtime_r(&t, &tm);
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  line.append(stamp).append(" ").append(LevelName(level)).append(" st-peer: ");
  size_t start = line.size();
  line.append(msg);
  for (size_t i = start; i < line.size(); ++i) {  // keep one line per message
    if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
  }
  return line;
}

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level)) return;
  char buf[kMaxMessage];
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = static_cast<size_t>(m) < sizeof(buf) ? static_cast<size_t>(m) : sizeof(buf) - 1;
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  std::string line =
      FormatLogLine(static_cast<LogFormat>(g_format.load()), level, static_cast<long>(tv.tv_sec),
                    static_cast<long>(tv.tv_usec), std::string(buf, len));
  line.push_back('\n');
  ssize_t w = ::write(STDERR_FILENO, line.data(), line.size());
  (void)w;
}

}  // namespace st
