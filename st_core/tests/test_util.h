// Helpers shared by the unit tests.
#ifndef ST_CORE_TESTS_TEST_UTIL_H_
#define ST_CORE_TESTS_TEST_UTIL_H_

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace st {
namespace test {

// Regular files below `dir`, recursively, not counting dot-files.
inline size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string p = dir + "/" + e->d_name;
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      n += CountFiles(p);
    } else {
      ++n;
    }
  }
  closedir(d);
  return n;
}

inline void RemoveTree(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d != nullptr) {
    while (struct dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      std::string p = path + "/" + e->d_name;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(p);
      } else {
        unlink(p.c_str());
      }
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

// A fresh directory under $TMPDIR, removed at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/st_test_XXXXXX";
    char* p = mkdtemp(&tmpl[0]);
    path_ = p != nullptr ? p : "";
  }
  ~TempDir() { RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

#ifdef ST_SOURCE_DIR
// The contents of a file of the source tree, e.g. "tests/vectors/wire.json"
// (the vectors the Python codec checks too); empty if it cannot be read.
inline std::string ReadSourceFile(const std::string& relative) {
  std::ifstream in(std::string(ST_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
#endif

// A TCP connection to 127.0.0.1:port; -1 if it fails.
inline int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

// A socket bound to an ephemeral port of 127.0.0.1 (listening if `listening`)
// and its address "127.0.0.1:port" in *addr; -1 if it fails.
inline int BindLoopback(bool listening, std::string* addr) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof(a)) != 0 ||
      (listening && listen(fd, 16) != 0) ||
      getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  return fd;
}

// Waits for a condition instead of sleeping (leveldb and dask tests do the
// same): calls `done` until it returns true, every millisecond at first and
// then less often (up to every 50 ms), for at most `timeout_s` seconds; the
// last call is at the deadline. Returns whether `done` became true. The
// timeout only bounds a failing test: a passing one waits as long as the
// condition takes and no longer. Await what the test needs, and say what it
// was for the failure message:
//   ASSERT_TRUE(test::PollFor([&] { return peer.ClientCount() == 0; }, 10))
//       << "the peer never saw the client close";
// `done` runs on the calling thread: read another thread's state through
// something that synchronizes (an atomic, or a task posted to its loop).
inline bool PollFor(const std::function<bool()>& done, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  Clock::duration pause = std::chrono::milliseconds(1);
  while (true) {
    if (done()) return true;
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min(pause, deadline - now));
    pause = std::min<Clock::duration>(pause * 2, std::chrono::milliseconds(50));
  }
}

inline std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

inline std::string ToHex(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_TEST_UTIL_H_
