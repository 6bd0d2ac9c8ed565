#include "connection.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "log.h"

namespace st {
namespace {
constexpr size_t kMaxReadPerEvent = 8 * 1024 * 1024;  // fairness between connections
constexpr double kLingerSeconds = 1.0;
}  // namespace

Connection::Connection(EventLoop* loop, std::unique_ptr<Transport> transport, uint64_t id,
                       std::string remote, uint32_t max_frame, Handler* handler)
    : loop_(loop),
      transport_(std::move(transport)),
      id_(id),
      remote_(std::move(remote)),
      max_frame_(max_frame),
      handler_(handler) {}

Connection::~Connection() {
  if (linger_timer_ != 0) loop_->CancelTimer(linger_timer_);
  if (hold_timer_ != 0) loop_->CancelTimer(hold_timer_);
  if (idle_timer_ != 0) loop_->CancelTimer(idle_timer_);
  if (!closed_) transport_->Close();
  for (auto& item : out_) {
    if (item.file_fd >= 0) ::close(item.file_fd);
  }
}

Status Connection::Start(bool connecting) {
  connecting_ = connecting;
  interest_ = connecting ? EventLoop::kWritable : EventLoop::kReadable;
  last_read_ = last_activity_ = EventLoop::Now();
  Status s = transport_->Watch(interest_, [this](int events) { OnEvents(events); });
  if (s.ok()) ArmIdleTimer();
  return s;
}

void Connection::SetTimeouts(double idle_timeout_s, double keepalive_timeout_s) {
  idle_timeout_s_ = idle_timeout_s > 0 ? idle_timeout_s : 0;
  keepalive_timeout_s_ = keepalive_timeout_s > 0 ? keepalive_timeout_s : 0;
  if (idle_timer_ != 0) {  // limits changed: re-arm from scratch
    loop_->CancelTimer(idle_timer_);
    idle_timer_ = 0;
  }
  if (!closed() && last_activity_ > 0) ArmIdleTimer();
}

void Connection::EndDeferred() {
  if (deferred_ > 0) --deferred_;
  if (keepalive_timeout_s_ > 0) {
    last_activity_ = EventLoop::Now();
    ArmIdleTimer();
  }
}

double Connection::IdleDeadline() const {
  if (closed() || connecting_ || lingering_ || paused_ || held_ || eof_ || close_after_flush_ ||
      stop_frames_) {
    return 0;
  }
  if (end_ > start_) return idle_timeout_s_ > 0 ? last_read_ + idle_timeout_s_ : 0;
  if (out_.empty() && deferred_ == 0 && keepalive_timeout_s_ > 0) {
    return last_activity_ + keepalive_timeout_s_;
  }
  return 0;
}

void Connection::ArmIdleTimer() {
  if (idle_timeout_s_ <= 0 && keepalive_timeout_s_ <= 0) return;
  double deadline = IdleDeadline();
  // No limit applies now: a pending timer finds that out when it fires.
  if (deadline <= 0) return;
  // Deadlines only move later within a state, so an earlier pending timer
  // is kept (it re-arms itself); the timer is re-added only when a shorter
  // limit starts to apply.
  if (idle_timer_ != 0 && idle_deadline_ <= deadline) return;
  if (idle_timer_ != 0) loop_->CancelTimer(idle_timer_);
  idle_deadline_ = deadline;
  idle_timer_ = loop_->AddTimer(deadline - EventLoop::Now(), [this] {
    idle_timer_ = 0;
    OnIdleTimer();
  });
}

void Connection::OnIdleTimer() {
  double deadline = IdleDeadline();
  if (deadline <= 0) return;
  if (EventLoop::Now() < deadline) {
    ArmIdleTimer();
    return;
  }
  if (end_ > start_) {
    size_t have = end_ - start_;
    char msg[256];
    if (pending_frame_ > 0) {
      std::snprintf(msg, sizeof(msg),
                    "frame incomplete: %zu of its %zu bytes arrived, then nothing for %g s "
                    "(st-peer --idle-timeout); closing the connection",
                    have, pending_frame_, idle_timeout_s_);
    } else {
      std::snprintf(msg, sizeof(msg),
                    "frame incomplete: %zu bytes of its %zu-byte prefix arrived, then nothing "
                    "for %g s (st-peer --idle-timeout); closing the connection",
                    have, kFramePrefixSize, idle_timeout_s_);
    }
    SendErrorAndClose(0, ErrorCode::kTimeout, msg);
    return;
  }
  ST_LOG_INFO("closing connection %s: idle for %g s (st-peer --keepalive-timeout)", remote_.c_str(),
              keepalive_timeout_s_);
  Close("idle for longer than --keepalive-timeout");
}

void Connection::OnEvents(int events) {
  if (connecting_) {
    OnConnectDone();
    if (closed() || connecting_) return;
  }
  if ((events & EventLoop::kReadable) && (interest_ & EventLoop::kReadable)) {
    OnReadable();
    if (closed()) return;
  }
  if ((events & EventLoop::kWritable) && want_write_) {
    Flush();
    if (closed()) return;
  }
  // Frames left in the buffer while output was backed up.
  if (frames_waiting_ && !paused_ && !held_) ProcessFrames();
  if (!closed()) ArmIdleTimer();
}

void Connection::OnConnectDone() {
  int err = transport_->ConnectError();
  if (err == EINPROGRESS || err == EALREADY) return;
  if (err != 0) {
    Close(std::string("connect to ") + remote_ + ": " + std::strerror(err));
    return;
  }
  connecting_ = false;
  Flush();
  if (!closed()) UpdateInterest();
}

bool Connection::EnsureSpace() {
  size_t live = end_ - start_;
  if (live == 0) start_ = end_ = 0;
  if (start_ > 0 && cap_ - end_ < kReadChunk) {
    std::memmove(buf_.get(), buf_.get() + start_, live);
    start_ = 0;
    end_ = live;
  }
  // A frame's prefix says how large it is, but a buffer for more than
  // kUpFrontFrame bytes grows with the bytes that arrive (at most doubling),
  // so a prefix alone cannot make the peer claim --max-frame bytes.
  size_t want = pending_frame_;
  if (want > kUpFrontFrame) want = std::max(kUpFrontFrame, std::min(want, 2 * cap_));
  size_t target = std::max(live + kReadChunk, want);
  if (cap_ - end_ < kReadChunk && cap_ < target) {
    std::unique_ptr<uint8_t[]> nb(new (std::nothrow) uint8_t[target]);
    if (!nb) {
      ST_LOG_WARN("connection %s: cannot allocate %zu bytes for its input", remote_.c_str(),
                  target);
      Close("out of memory for a frame of " + std::to_string(target) + " bytes");
      return false;
    }
    if (live > 0) std::memcpy(nb.get(), buf_.get() + start_, live);
    buf_ = std::move(nb);
    cap_ = target;
    start_ = 0;
    end_ = live;
  }
  return true;
}

void Connection::OnReadable() {
  if (lingering_) {
    char scratch[65536];
    while (true) {
      ssize_t n = transport_->Read(scratch, sizeof(scratch));
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      Close("closed after a protocol error");
      return;
    }
  }
  size_t total = 0;
  while (!closed() && !paused_ && !held_ && !stop_frames_ && !eof_) {
    if (!EnsureSpace()) return;
    size_t space = cap_ - end_;
    ssize_t n = transport_->Read(buf_.get() + end_, space);
    if (n > 0) {
      end_ += static_cast<size_t>(n);
      total += static_cast<size_t>(n);
      if (metrics_ != nullptr) metrics_->bytes_received.fetch_add(n, std::memory_order_relaxed);
      if (idle_timeout_s_ > 0 || keepalive_timeout_s_ > 0) {
        last_read_ = last_activity_ = EventLoop::Now();
      }
      ProcessFrames();
      if (static_cast<size_t>(n) < space || total >= kMaxReadPerEvent) break;
      continue;
    }
    if (n == 0) {
      eof_ = true;
      if (end_ > start_) {
        ST_LOG_INFO("connection %s closed in the middle of a frame; dropped %zu bytes of it",
                    remote_.c_str(), end_ - start_);
        start_ = end_ = 0;
      }
      if (out_.empty()) {
        Close("closed by the other side");
      } else {
        close_after_flush_ = true;
        UpdateInterest();
      }
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Close(std::string("read: ") + std::strerror(errno));
    return;
  }
}

void Connection::ProcessFrames() {
  // The Flush at the end of a batch may unpause the connection: frames
  // still buffered are then processed now, as no event may come for them.
  do {
    ProcessBufferedFrames();
  } while (!closed() && frames_waiting_ && !paused_ && !held_ && !stop_frames_);
}

void Connection::Uncork() {
  if (corked_ == 0 || --corked_ > 0) return;
  if (!in_dispatch_ && !connecting_) Flush();
}

void Connection::ProcessBufferedFrames() {
  in_dispatch_ = true;
  frames_waiting_ = false;
  handler_->OnBatchStart(this);
  while (!closed() && !stop_frames_) {
    if (paused_ || held_) {
      frames_waiting_ = end_ > start_;
      break;
    }
    size_t live = end_ - start_;
    FrameHeader h;
    PrefixResult r = ParsePrefix(buf_.get() + start_, live, max_frame_, &h);
    if (r == PrefixResult::kNeedMore) break;
    if (r == PrefixResult::kBadLength) {
      SendErrorAndClose(0, ErrorCode::kBadFrame,
                        "frame length " + std::to_string(h.length) +
                            " is below the 12-byte header; closing the connection");
      break;
    }
    if (r == PrefixResult::kTooLarge) {
      SendErrorAndClose(0, ErrorCode::kFrameTooLarge,
                        "frame of " + std::to_string(h.length) +
                            " bytes is above this peer's limit of " + std::to_string(max_frame_) +
                            " bytes (st-peer --max-frame); closing the connection");
      break;
    }
    if (r == PrefixResult::kBadVersion) {
      SendErrorAndClose(h.seq, ErrorCode::kBadFrame,
                        "protocol version " + std::to_string(h.version) +
                            ", this peer speaks version 1; closing the connection");
      break;
    }
    if (pending_frame_ == 0) {  // first sight of this frame's prefix
      handler_->OnFrameStart(this, h);
      if (closed() || stop_frames_) break;
    }
    if (live < h.frame_size()) {
      pending_frame_ = h.frame_size();
      break;
    }
    double wait = handler_->Admit(this, h);
    if (closed()) break;
    if (wait > 0) {
      pending_frame_ = h.frame_size();  // seen: OnFrameStart is not called again
      frames_waiting_ = true;
      Hold(wait);
      break;
    }
    pending_frame_ = 0;
    std::string_view payload(reinterpret_cast<const char*>(buf_.get() + start_ + kFramePrefixSize),
                             h.payload_size());
    start_ += h.frame_size();  // the bytes stay in place until the next read
    if (metrics_ != nullptr) {
      metrics_->requests[h.type].fetch_add(1, std::memory_order_relaxed);
      dispatched_[h.seq] = {EventLoop::Now(), h.type};
    }
    handler_->OnFrame(this, h, payload);
  }
  in_dispatch_ = false;
  handler_->OnBatchEnd(this);
  if (closed()) return;
  if (start_ == end_) {
    start_ = end_ = 0;
    if (cap_ > 4 * kReadChunk) {  // give back the memory of a large frame
      buf_.reset();
      cap_ = 0;
    }
  }
  Flush();
}

void Connection::NoteReply(const std::string& bytes) {
  if (bytes.size() < kFramePrefixSize) return;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  uint8_t type = p[4];
  uint16_t flags = static_cast<uint16_t>(p[6] | (p[7] << 8));
  uint64_t seq = 0;
  for (int i = 7; i >= 0; --i) seq = (seq << 8) | p[8 + i];
  if (type == static_cast<uint8_t>(MsgType::kError) && bytes.size() >= kFramePrefixSize + 2) {
    uint16_t code = static_cast<uint16_t>(p[16] | (p[17] << 8));
    metrics_->errors[code < PeerMetrics::kCodes ? code : 0].fetch_add(1, std::memory_order_relaxed);
  }
  if (flags & kFlagMore) return;  // not the last frame of its reply
  auto it = dispatched_.find(seq);
  if (it == dispatched_.end()) return;
  metrics_->ObserveLatency(it->second.second, EventLoop::Now() - it->second.first);
  dispatched_.erase(it);
}

void Connection::Send(std::string bytes) {
  if (metrics_ != nullptr && !closed()) NoteReply(bytes);
  // After SendErrorAndClose its ERROR is the last frame, even while output
  // is backed up: a deferred reply that comes later is dropped, as it is
  // once the connection lingers or has closed.
  if (closed() || lingering_ || stop_frames_ || bytes.empty()) return;
  queued_bytes_ += bytes.size();
  // A small reply (a PUT's OK, an ERROR) joins the byte buffer at the tail:
  // the replies of a batch of frames leave in one buffer, so one sendmsg
  // carries them however many there are (not one iovec each, 64 a call).
  if (bytes.size() <= kCoalesceReply && !out_.empty() && out_.back().file_fd < 0 &&
      out_.back().data.size() + bytes.size() <= kCoalesceBuffer) {
    out_.back().data.append(bytes);
  } else {
    OutItem item;
    item.data = std::move(bytes);
    out_.push_back(std::move(item));
  }
  if (queued_bytes_ > kMaxQueuedBytes) paused_ = true;
  if (!in_dispatch_ && !connecting_ && corked_ == 0) Flush();
}

void Connection::SendFile(int file_fd, uint64_t len) {
  if (closed() || lingering_ || stop_frames_ || len == 0) {
    ::close(file_fd);
    return;
  }
  queued_bytes_ += len;
  ++queued_files_;
  OutItem item;
  item.file_fd = file_fd;
  item.file_len = len;
  out_.push_back(std::move(item));
  if (queued_bytes_ > kMaxQueuedBytes || queued_files_ > kMaxQueuedFiles) paused_ = true;
  if (!in_dispatch_ && !connecting_ && corked_ == 0) Flush();
}

void Connection::SendErrorAndClose(uint64_t seq, ErrorCode code, std::string_view message,
                                   bool log) {
  if (closed()) return;
  if (log) {
    ST_LOG_INFO("closing connection %s after %s: %.*s", remote_.c_str(),
                ErrorCodeName(static_cast<uint16_t>(code)), static_cast<int>(message.size()),
                message.data());
  }
  Send(EncodeError(seq, code, message));
  stop_frames_ = true;
  close_after_flush_ = true;
  start_ = end_ = 0;
  if (!in_dispatch_ && !connecting_ && corked_ == 0) Flush();
}

void Connection::Flush() {
  if (closed() || connecting_) return;
  while (!out_.empty()) {
    OutItem& front = out_.front();
    if (front.file_fd >= 0) {
      off_t off = static_cast<off_t>(front.file_off);
      size_t chunk =
          static_cast<size_t>(std::min<uint64_t>(front.file_len - front.file_off, 1u << 30));
      ssize_t n = transport_->SendFile(front.file_fd, &off, chunk);
      if (n > 0) {
        if (metrics_ != nullptr) metrics_->bytes_sent.fetch_add(n, std::memory_order_relaxed);
        front.file_off += static_cast<uint64_t>(n);
        queued_bytes_ -= static_cast<size_t>(n);
        if (front.file_off == front.file_len) {
          ::close(front.file_fd);
          out_.pop_front();
          --queued_files_;
        }
        continue;
      }
      if (n == 0) {
        Close("a record file shrank while it was being sent");
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_write_ = true;
        break;
      }
      Close(std::string("sendfile: ") + std::strerror(errno));
      return;
    }
    struct iovec iov[64];
    int cnt = 0;
    bool file_follows = false;
    for (auto it = out_.begin(); it != out_.end() && cnt < 64; ++it) {
      if (it->file_fd >= 0) {
        file_follows = true;
        break;
      }
      iov[cnt].iov_base = const_cast<char*>(it->data.data() + it->offset);
      iov[cnt].iov_len = it->data.size() - it->offset;
      ++cnt;
    }
    ssize_t n = transport_->Writev(iov, cnt, file_follows);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_write_ = true;
        break;
      }
      Close(std::string("send: ") + std::strerror(errno));
      return;
    }
    size_t left = static_cast<size_t>(n);
    if (metrics_ != nullptr) metrics_->bytes_sent.fetch_add(left, std::memory_order_relaxed);
    queued_bytes_ -= left;
    while (left > 0) {
      OutItem& it = out_.front();
      size_t avail = it.data.size() - it.offset;
      if (left >= avail) {
        left -= avail;
        out_.pop_front();
      } else {
        it.offset += left;
        left = 0;
      }
    }
  }
  if (out_.empty()) {
    want_write_ = false;
    if (keepalive_timeout_s_ > 0) last_activity_ = EventLoop::Now();
  }
  if (paused_ && queued_bytes_ <= kMaxQueuedBytes / 2 && queued_files_ <= kMaxQueuedFiles / 2) {
    paused_ = false;
    // The sender was held up by us: its idle time counts from now.
    if (idle_timeout_s_ > 0) last_read_ = EventLoop::Now();
  }
  if (out_.empty() && close_after_flush_) {
    if (eof_) {
      Close("closed by the other side");
    } else if (!lingering_) {
      StartLinger();
    }
    return;
  }
  UpdateInterest();
  if (!in_dispatch_) ArmIdleTimer();
}

void Connection::Hold(double seconds) {
  held_ = true;
  UpdateInterest();
  hold_timer_ = loop_->AddTimer(seconds, [this] {
    hold_timer_ = 0;
    held_ = false;
    // The sender was held up by us: its idle time counts from now.
    if (idle_timeout_s_ > 0) last_read_ = EventLoop::Now();
    UpdateInterest();
    ProcessFrames();
    if (!closed()) ArmIdleTimer();
  });
}

void Connection::StartLinger() {
  // Half-close so the client reads the error, then discard whatever it still
  // sends for a moment: closing with unread input would reset the
  // connection and could destroy the error reply in flight.
  transport_->ShutdownWrite();
  lingering_ = true;
  UpdateInterest();
  linger_timer_ = loop_->AddTimer(kLingerSeconds, [this] {
    linger_timer_ = 0;
    Close("closed after a protocol error");
  });
}

void Connection::UpdateInterest() {
  if (closed()) return;
  int mask = 0;
  if (connecting_) {
    mask = EventLoop::kWritable;
  } else {
    if (lingering_ || (!paused_ && !held_ && !close_after_flush_ && !eof_))
      mask |= EventLoop::kReadable;
    if (want_write_) mask |= EventLoop::kWritable;
  }
  if (mask != interest_) {
    interest_ = mask;
    transport_->SetInterest(mask);
  }
}

void Connection::Close(const std::string& reason) {
  if (closed()) return;
  if (linger_timer_ != 0) {
    loop_->CancelTimer(linger_timer_);
    linger_timer_ = 0;
  }
  if (idle_timer_ != 0) {
    loop_->CancelTimer(idle_timer_);
    idle_timer_ = 0;
  }
  if (hold_timer_ != 0) {
    loop_->CancelTimer(hold_timer_);
    hold_timer_ = 0;
  }
  transport_->Close();
  closed_ = true;
  for (auto& item : out_) {
    if (item.file_fd >= 0) ::close(item.file_fd);
  }
  out_.clear();
  queued_bytes_ = 0;
  queued_files_ = 0;
  handler_->OnClosed(this, reason);
}

}  // namespace st
