#include "sqlite_ro.h"

#include <cstdint>

namespace st {
namespace sqlite {
namespace {

std::string UriEscape(const std::string& path) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    bool safe = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '/' || c == '-' || c == '_' || c == '.' || c == '~';
    if (safe) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

// Busy handler: wait in 10 ms steps up to the timeout, unless cancelled.
int OnBusy(void* arg, int count) {
  auto* w = static_cast<BusyWait*>(arg);
  if (w->cancel != nullptr && w->cancel->load(std::memory_order_relaxed)) return 0;
  if (static_cast<int64_t>(count) * 10 >= w->timeout_ms) return 0;
  sqlite3_sleep(10);
  return 1;
}

}  // namespace

std::string ReadOnlyUri(const std::string& path) { return "file:" + UriEscape(path) + "?mode=ro"; }

Status SqlError(const std::string& path, sqlite3* db, const char* what) {
  return Status::IOError("infofile " + path + ": " + what + ": " +
                         (db != nullptr ? sqlite3_errmsg(db) : "out of memory"));
}

Status OpenReadOnly(const std::string& path, BusyWait* wait, Db* db) {
  std::string uri = ReadOnlyUri(path);
  int rc = sqlite3_open_v2(uri.c_str(), &db->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) return SqlError(path, db->db, "open");
  sqlite3_busy_handler(db->db, OnBusy, wait);
  return Status::OK();
}

}  // namespace sqlite
}  // namespace st
