// Impact control that follows the host's own load (FreeLoader, seed 004
// section 4.2: the benefactor's monitor layer "observes changes in usage of
// the CPU ... [to] throttle its data service rate and yield to native
// workloads"; docs/peer.md, "Yielding to the host's load").
//
// With --yield-to-host-load, once a second the peer samples the host's CPU
// time (/proc/stat) and its own (/proc/self/stat). What other processes used
// over the second, as a share of the CPU time the machine had, is the load
// of the host's own work; the controller turns it into a factor that scales
// the impact-control limits (token_bucket.h): all of them while no other
// work runs, down to a floor while other work takes the CPU, and back up
// when it stops:
//
//   other  = (host busy - own) / host total, over the last interval, 0..1
//   target = 1 - (other - kNoiseBand) / (1 - kNoiseBand), within [floor, 1]
//   scale  = target at once when it is lower (yield at once), else
//            min(target, scale + kRisePerSample) (come back gradually)
//
// The controller is a pure function of its samples (no clock, no /proc), so
// tests feed it samples; ReadCpuTimes reads the real ones.
#ifndef ST_CORE_HOST_LOAD_H_
#define ST_CORE_HOST_LOAD_H_

#include <cstdint>
#include <string_view>

#include "status.h"

namespace st {

// Cumulative CPU times in clock ticks (USER_HZ).
struct CpuTimes {
  uint64_t host_busy = 0;   // every CPU: user + nice + system + irq + softirq
  uint64_t host_total = 0;  // host_busy + idle + iowait (steal left out: time the VM did not have)
  uint64_t self = 0;  // this process, every thread: utime + stime
};

// The "cpu" line (the sum over every CPU) of /proc/stat into host_busy and
// host_total. False if it is not there or malformed.
bool ParseProcStat(std::string_view text, CpuTimes* out);

// utime + stime (fields 14 and 15) of /proc/<pid>/stat into *ticks. The
// command name in parentheses may hold spaces and ')': fields are counted
// from the last ')'. False if malformed.
bool ParseProcSelfStat(std::string_view text, uint64_t* ticks);

// The host's and this process's CPU times now, from /proc.
Status ReadCpuTimes(CpuTimes* out);

class HostLoadController {
 public:
  // Other work below this share of the host's CPU is noise (daemons, the
  // kernel's threads, a shell): the limits stay whole.
  static constexpr double kNoiseBand = 0.1;
  // How much the factor may grow per sample once other work stops: from a
  // floor of 0.1 back to 1 in four samples (seconds).
  static constexpr double kRisePerSample = 0.25;

  // floor: the least factor, in (0, 1].
  explicit HostLoadController(double floor);

  // Takes the next sample and returns the factor now in force. The first
  // sample (and one whose counters went back or did not move) only sets
  // the base of the next: the factor stays.
  double Update(const CpuTimes& sample);

  double scale() const { return scale_; }
  // Shares of the host's CPU over the last interval (0..1): other
  // processes', and this peer's own.
  double other_load() const { return other_; }
  double own_load() const { return own_; }
  double floor() const { return floor_; }

  // The factor for a share `other` of the host's CPU used by other work.
  static double Target(double other, double floor);

 private:
  double floor_;
  double scale_ = 1;
  double other_ = 0;
  double own_ = 0;
  bool primed_ = false;
  CpuTimes last_;
};

}  // namespace st

#endif  // ST_CORE_HOST_LOAD_H_
