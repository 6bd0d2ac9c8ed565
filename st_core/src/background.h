// Disk work off the event loop: Schedule(work, done_on_loop) runs work on one
// of the Env's background threads, then done on the loop thread. The peer uses
// it for everything that can block on a disk or a lock: GET_LOCAL's infofile
// read, a GET's first CRC verification, and PUT/DELETE under --sync (the
// fsyncs). The scrubber's inventory runs the same way.
//
// One BackgroundWork per owner (the server). Destroying it, on the loop
// thread, raises cancel() (an infofile read waiting for a lock gives up), waits
// for the work already running to end, and drops every done callback not run
// yet, so a callback never runs after its owner is gone.
//
// Work must not touch loop-thread state; give it copies or shared_ptrs, and
// apply the result in done.
#ifndef ST_CORE_BACKGROUND_H_
#define ST_CORE_BACKGROUND_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "env.h"
#include "event_loop.h"

namespace st {

class BackgroundWork {
 public:
  BackgroundWork(Env* env, EventLoop* loop);
  ~BackgroundWork();

  BackgroundWork(const BackgroundWork&) = delete;
  BackgroundWork& operator=(const BackgroundWork&) = delete;

  // Loop thread only.
  void Schedule(std::function<void()> work, std::function<void()> done_on_loop);

  // Set once the owner is going away; long work should give up when it is.
  const std::atomic<bool>* cancel() const { return &shared_->cancel; }
  // Scheduled and not yet done (loop thread).
  size_t pending() const { return pending_; }
  Env* env() const { return env_; }

 private:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    size_t running = 0;   // guarded by mu
    bool closed = false;  // guarded by mu; also read on the loop thread
    std::atomic<bool> cancel{false};
  };

  Env* env_;
  EventLoop* loop_;
  std::shared_ptr<Shared> shared_;
  size_t pending_ = 0;
};

}  // namespace st

#endif  // ST_CORE_BACKGROUND_H_
