#include "event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "log.h"

namespace st {
namespace {

uint32_t ToEpoll(int mask) {
  uint32_t ev = 0;
  if (mask & EventLoop::kReadable) ev |= EPOLLIN | EPOLLRDHUP;
  if (mask & EventLoop::kWritable) ev |= EPOLLOUT;
  return ev;
}

}  // namespace

double EventLoop::Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int64_t EventLoop::NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Status EventLoop::Create(std::unique_ptr<EventLoop>* loop) {
  std::unique_ptr<EventLoop> l(new EventLoop());
  l->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (l->epfd_ < 0) return PosixError("epoll_create1", errno);
  l->wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (l->wakefd_ < 0) return PosixError("eventfd", errno);
  struct epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = l->wakefd_;
  if (epoll_ctl(l->epfd_, EPOLL_CTL_ADD, l->wakefd_, &ev) != 0)
    return PosixError("epoll_ctl", errno);
  l->last_turn_ns_.store(NowNs(), std::memory_order_relaxed);
  *loop = std::move(l);
  return Status::OK();
}

EventLoop::~EventLoop() {
  if (wakefd_ >= 0) ::close(wakefd_);
  if (epfd_ >= 0) ::close(epfd_);
}

Status EventLoop::AddFd(int fd, int mask, FdHandler handler) {
  struct epoll_event ev{};
  ev.events = ToEpoll(mask);
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return PosixError("epoll_ctl add", errno);
  handlers_[fd] = std::make_shared<FdHandler>(std::move(handler));
  return Status::OK();
}

Status EventLoop::ModifyFd(int fd, int mask) {
  struct epoll_event ev{};
  ev.events = ToEpoll(mask);
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) != 0) return PosixError("epoll_ctl mod", errno);
  return Status::OK();
}

void EventLoop::RemoveFd(int fd) {
  if (handlers_.erase(fd) > 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

EventLoop::TimerId EventLoop::AddTimer(double delay_s, Task task) {
  if (!(delay_s > 0)) delay_s = 0;
  TimerId id = ++next_timer_;
  double deadline = Now() + delay_s;
  timers_.emplace(std::make_pair(deadline, id), std::move(task));
  timer_deadlines_[id] = deadline;
  return id;
}

void EventLoop::CancelTimer(TimerId id) {
  auto it = timer_deadlines_.find(id);
  if (it == timer_deadlines_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  timer_deadlines_.erase(it);
}

void EventLoop::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(task));
  }
  Wake();
}

void EventLoop::Wake() {
  uint64_t one = 1;
  ssize_t w = ::write(wakefd_, &one, sizeof(one));
  (void)w;
}

void EventLoop::Stop() { stop_ = true; }

void EventLoop::StopFromAnyThread() {
  Post([this] { stop_ = true; });
}

size_t EventLoop::RunTimers() {
  size_t ran = 0;
  if (timers_.empty()) return ran;
  double now = Now();
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    auto it = timers_.begin();
    Task task = std::move(it->second);
    timer_deadlines_.erase(it->first.second);
    timers_.erase(it);
    task();
    ++ran;
  }
  return ran;
}

size_t EventLoop::RunPosted() {
  std::vector<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(posted_);
  }
  for (auto& t : tasks) t();
  return tasks.size();
}

size_t EventLoop::RunReady() {
  size_t ran = RunTimers();
  return ran + RunPosted();
}

void EventLoop::Run() {
  constexpr int kMaxEvents = 256;
  constexpr int kTickMs = static_cast<int>(kTickS * 1000);
  struct epoll_event events[kMaxEvents];
  while (!stop_) {
    // The heartbeat: one more turn done. Waiting at most a tick keeps it
    // fresh while idle, so a stale one means the loop is not turning.
    last_turn_ns_.store(NowNs(), std::memory_order_relaxed);
    int timeout_ms = kTickMs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!posted_.empty()) timeout_ms = 0;
    }
    if (timeout_ms != 0 && !timers_.empty()) {
      double delta = timers_.begin()->first.first - Now();
      if (delta <= 0) {
        timeout_ms = 0;
      } else if (delta < kTickS) {
        timeout_ms = static_cast<int>(std::ceil(delta * 1000.0));
      }
    }
    int n = epoll_wait(epfd_, events, kMaxEvents, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      ST_LOG_ERROR("epoll_wait: %s", PosixError("epoll_wait", errno).ToString().c_str());
      break;
    }
    int64_t busy_from = NowNs();
    if (turn_start_ns_ != nullptr) {
      turn_start_ns_->store(std::max<int64_t>(1, busy_from), std::memory_order_relaxed);
    }
    for (int i = 0; i < n && !stop_; ++i) {
      int fd = events[i].data.fd;
      if (fd == wakefd_) {
        uint64_t v;
        ssize_t r = ::read(wakefd_, &v, sizeof(v));
        (void)r;
        continue;
      }
      auto it = handlers_.find(fd);
      if (it == handlers_.end()) continue;  // removed by an earlier handler
      std::shared_ptr<FdHandler> h = it->second;
      uint32_t e = events[i].events;
      int mask = 0;
      if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) mask |= kReadable;
      if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) mask |= kWritable;
      (*h)(mask);
    }
    if (stop_) break;
    RunTimers();
    RunPosted();
    if (busy_ns_ != nullptr) {
      busy_ns_->fetch_add(static_cast<uint64_t>(NowNs() - busy_from), std::memory_order_relaxed);
    }
    if (turn_start_ns_ != nullptr) turn_start_ns_->store(0, std::memory_order_relaxed);
  }
  if (turn_start_ns_ != nullptr) turn_start_ns_->store(0, std::memory_order_relaxed);
  stop_ = false;  // a later Run runs again (the request fuzzer's one loop, input after input)
}

}  // namespace st
