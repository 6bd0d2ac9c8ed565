#include "host_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

namespace st {
namespace {

// The whitespace-separated unsigned integers at the start of `text`, up to
// the end of its line; false if a field is not one.
bool ParseFields(std::string_view text, std::vector<uint64_t>* out) {
  size_t eol = text.find('\n');
  std::string line(text.substr(0, eol));
  const char* p = line.c_str();
  while (true) {
    while (*p == ' ' || *p == '\t') ++p;
    if (*p == '\0') return true;
    if (*p < '0' || *p > '9') return false;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(p, &end, 10);
    if (errno != 0 || end == p) return false;
    out->push_back(v);
    p = end;
  }
}

// The first `max` bytes of a /proc file (they are produced when read:
// fstat gives no size).
Status ReadProcFile(const char* path, size_t max, std::string* out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PosixError(std::string("open ") + path, errno);
  out->assign(max, '\0');
  size_t got = 0;
  while (got < max) {
    ssize_t n = ::read(fd, &(*out)[got], max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return PosixError(std::string("read ") + path, err);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(got);
  return Status::OK();
}

}  // namespace

bool ParseProcStat(std::string_view text, CpuTimes* out) {
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
  // (guest time is already counted in user and nice). Kernels before 2.6
  // stop after idle; the missing fields are 0.
  if (text.substr(0, 4) != "cpu " && text.substr(0, 4) != "cpu\t") return false;
  std::vector<uint64_t> f;
  if (!ParseFields(text.substr(4), &f) || f.size() < 4) return false;
  f.resize(std::max<size_t>(f.size(), 8), 0);
  const uint64_t user = f[0], nice = f[1], system = f[2], idle = f[3], iowait = f[4], irq = f[5],
                 softirq = f[6];
  out->host_busy = user + nice + system + irq + softirq;
  out->host_total = out->host_busy + idle + iowait;
  return true;
}

bool ParseProcSelfStat(std::string_view text, uint64_t* ticks) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos) return false;
  // After "pid (comm)": field 3 (the state, a letter), 4, 5, ... separated
  // by single spaces; utime and stime are fields 14 and 15.
  std::string_view rest = text.substr(close + 1);
  uint64_t sum = 0;
  size_t pos = 0;
  for (int field = 3; field <= 15; ++field) {
    if (pos >= rest.size() || rest[pos] != ' ') return false;
    size_t end = rest.find_first_of(" \n", pos + 1);
    if (end == std::string_view::npos) end = rest.size();
    if (field >= 14) {
      std::vector<uint64_t> v;
      if (!ParseFields(rest.substr(pos + 1, end - pos - 1), &v) || v.size() != 1) return false;
      sum += v[0];
    }
    pos = end;
  }
  *ticks = sum;
  return true;
}

Status ReadCpuTimes(CpuTimes* out) {
  std::string text;
  // The first line, the sum over every CPU, is well within 4 KiB.
  Status s = ReadProcFile("/proc/stat", 4096, &text);
  if (!s.ok()) return s;
  if (!ParseProcStat(text, out)) return Status::Corruption("/proc/stat: no cpu line");
  s = ReadProcFile("/proc/self/stat", 4096, &text);
  if (!s.ok()) return s;
  if (!ParseProcSelfStat(text, &out->self)) return Status::Corruption("/proc/self/stat: malformed");
  return Status::OK();
}

HostLoadController::HostLoadController(double floor) : floor_(std::clamp(floor, 1e-3, 1.0)) {}

double HostLoadController::Target(double other, double floor) {
  double t = 1 - (other - kNoiseBand) / (1 - kNoiseBand);
  return std::clamp(t, floor, 1.0);
}

double HostLoadController::Update(const CpuTimes& now) {
  const bool moved = primed_ && now.host_total > last_.host_total &&
                     now.host_busy >= last_.host_busy && now.self >= last_.self;
  const CpuTimes before = last_;
  last_ = now;
  primed_ = true;
  if (!moved) return scale_;
  const double total = static_cast<double>(now.host_total - before.host_total);
  const double busy = static_cast<double>(now.host_busy - before.host_busy);
  const double own = static_cast<double>(now.self - before.self);
  // The process's ticks are accounted exactly and the host's per tick, so
  // over a short interval its own may exceed the busy time by a tick.
  own_ = std::clamp(own / total, 0.0, 1.0);
  other_ = std::clamp((busy - own) / total, 0.0, 1.0);
  const double target = Target(other_, floor_);
  scale_ = target <= scale_ ? target : std::min(target, scale_ + kRisePerSample);
  return scale_;
}

}  // namespace st
