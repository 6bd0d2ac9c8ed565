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
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level)) return;
  char buf[2048];
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  int n = std::snprintf(buf, sizeof(buf),
                        "%04d-%02d-%02d %02d:%02d:%02d.%03d %s st-peer: ", tm.tm_year + 1900,
                        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                        static_cast<int>(tv.tv_usec / 1000), LevelName(level));
  if (n < 0) return;
  size_t len = static_cast<size_t>(n);
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + len, sizeof(buf) - len - 1, fmt, ap);
  va_end(ap);
  if (m > 0) len += static_cast<size_t>(m);
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  // Keep one line per message.
  for (size_t i = static_cast<size_t>(n); i < len; ++i) {
    if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ' ';
  }
  buf[len++] = '\n';
  ssize_t w = ::write(STDERR_FILENO, buf, len);
  (void)w;
}

}  // namespace st
