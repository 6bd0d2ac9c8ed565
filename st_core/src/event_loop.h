// A small epoll event loop behind a narrow API (in the spirit of redis ae):
// add/modify/remove a file descriptor with read/write interest, one-shot
// timers, tasks posted from other threads, stop. Protocol code never calls
// epoll directly.
//
// Single-threaded: every method but Post() and StopFromAnyThread() must be
// called from the thread running Run().
#ifndef ST_CORE_EVENT_LOOP_H_
#define ST_CORE_EVENT_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "status.h"

namespace st {

class EventLoop {
 public:
  static constexpr int kReadable = 1;
  static constexpr int kWritable = 2;

  // Called with the ready mask (kReadable | kWritable). Errors and hang-ups
  // are reported as both, so the handler sees them on its next read/write.
  using FdHandler = std::function<void(int events)>;
  using Task = std::function<void()>;
  using TimerId = uint64_t;

  static Status Create(std::unique_ptr<EventLoop>* loop);
  ~EventLoop();

  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  Status AddFd(int fd, int mask, FdHandler handler);
  Status ModifyFd(int fd, int mask);
  // Safe to call from inside the fd's own handler.
  void RemoveFd(int fd);

  // One-shot timer after delay_s seconds. Returns a non-zero id.
  TimerId AddTimer(double delay_s, Task task);
  void CancelTimer(TimerId id);

  // Runs task on the loop thread after the current batch of events. Safe
  // from any thread.
  void Post(Task task);

  // Runs until Stop(). Returns at once if Stop() was called before. Once it
  // has returned, the next Run() runs until the next Stop().
  void Run();
  // One turn without file descriptors: runs the timers due now, then the
  // tasks posted so far, and returns how many ran (0: nothing was ready). It
  // never waits. For a caller that drives its connections itself (the
  // request fuzzer's in-memory transports); st-peer only calls Run.
  size_t RunReady();

  void Stop();                // loop thread
  void StopFromAnyThread();   // any thread

  // Monotonic clock in seconds, and in nanoseconds (as last_turn_ns() and
  // the turn clock hold it).
  static double Now();
  static int64_t NowNs();

  // Adds the time spent outside epoll_wait (handling events, timers and
  // posted tasks) to *busy_ns, for the peer's load (metrics.h). Set before Run.
  void SetBusyCounter(std::atomic<uint64_t>* busy_ns) { busy_ns_ = busy_ns; }

  // Liveness (announcer.h). The loop never waits longer than kTickS in
  // epoll_wait: even with nothing to do it wakes every tick, and each time
  // around, before it waits, it stores Now() in nanoseconds in
  // last_turn_ns(). So a value older than a few ticks means the loop is not
  // turning, whatever stops it: a handler or syscall that does not return,
  // or the loop thread itself stopped (by a debugger, a ptrace stop, or
  // starved) while it waits. Set from Create() on; readable from any thread.
  static constexpr double kTickS = 0.1;
  const std::atomic<int64_t>& last_turn_ns() const { return last_turn_ns_; }

  // The turn in progress, for the load (announcer.h): *turn_start_ns holds
  // Now() in nanoseconds from the moment epoll_wait returns until the turn's
  // handlers, timers and tasks are done, and 0 while the loop waits, so a
  // stuck turn counts as busy. Set before Run.
  void SetTurnClock(std::atomic<int64_t>* turn_start_ns) { turn_start_ns_ = turn_start_ns; }

 private:
  EventLoop() = default;
  void Wake();
  size_t RunTimers();  // return how many ran
  size_t RunPosted();

  std::atomic<uint64_t>* busy_ns_ = nullptr;
  std::atomic<int64_t>* turn_start_ns_ = nullptr;
  std::atomic<int64_t> last_turn_ns_{0};
  int epfd_ = -1;
  int wakefd_ = -1;
  bool stop_ = false;
  std::unordered_map<int, std::shared_ptr<FdHandler>> handlers_;
  TimerId next_timer_ = 0;
  std::map<std::pair<double, TimerId>, Task> timers_;
  std::unordered_map<TimerId, double> timer_deadlines_;
  std::mutex mu_;
  std::vector<Task> posted_;  // guarded by mu_
};

}  // namespace st

#endif  // ST_CORE_EVENT_LOOP_H_
