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

  // Runs until Stop(). Returns at once if Stop() was called before.
  void Run();
  void Stop();                // loop thread
  void StopFromAnyThread();   // any thread

  // Monotonic clock in seconds.
  static double Now();

  // Adds the time spent outside epoll_wait (handling events, timers and
  // posted tasks) to *busy_ns, for the peer's load (metrics.h). Set before Run.
  void SetBusyCounter(std::atomic<uint64_t>* busy_ns) { busy_ns_ = busy_ns; }

  // The loop's heartbeat for liveness (announcer.h): *turn_start_ns holds
  // Now() in nanoseconds from the moment epoll_wait returns until the turn's
  // handlers, timers and tasks are done, and 0 while the loop waits. A value
  // that stays non-zero for long is a stuck loop. Set before Run.
  void SetTurnClock(std::atomic<int64_t>* turn_start_ns) { turn_start_ns_ = turn_start_ns; }

 private:
  EventLoop() = default;
  void Wake();
  void RunTimers();
  void RunPosted();

  std::atomic<uint64_t>* busy_ns_ = nullptr;
  std::atomic<int64_t>* turn_start_ns_ = nullptr;
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
