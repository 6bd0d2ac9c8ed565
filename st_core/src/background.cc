#include "background.h"

namespace st {

BackgroundWork::BackgroundWork(Env* env, EventLoop* loop)
    : env_(env), loop_(loop), shared_(std::make_shared<Shared>()) {}

BackgroundWork::~BackgroundWork() {
  shared_->cancel.store(true);
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->closed = true;
  shared_->cv.wait(lock, [this] { return shared_->running == 0; });
}

void BackgroundWork::Schedule(std::function<void()> work, std::function<void()> done_on_loop) {
  std::shared_ptr<Shared> shared = shared_;
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    ++shared->running;
  }
  ++pending_;
  EventLoop* loop = loop_;
  size_t* pending = &pending_;
  env_->Schedule([shared, loop, pending, work = std::move(work),
                  done = std::move(done_on_loop)]() mutable {
    work();
    std::lock_guard<std::mutex> lock(shared->mu);
    if (!shared->closed) {
      // Posted under the lock: the destructor (loop thread) cannot have
      // started, so when this task runs, `closed` tells whether the owner and
      // `pending` still exist.
      loop->Post([shared, pending, done = std::move(done)] {
        if (shared->closed) return;
        --*pending;
        done();
      });
    }
    --shared->running;
    shared->cv.notify_all();
  });
}

}  // namespace st
