// An in-memory connection for the request fuzzer and tests: a MemPipe holds
// the bytes both ways, MemTransport is the peer's end (a Transport,
// transport.h, under a Connection) and the test drives the other end
// itself. Nothing is a file descriptor and nothing waits: the test moves
// bytes with ClientWrite / TakeOutput and tells the Connection what is ready
// with Deliver, the way an epoll turn would.
//
//   auto pipe = std::make_shared<MemPipe>(64 * 1024);
//   server->AcceptConnection(std::make_unique<MemTransport>(pipe), "mem");
//   pipe->ClientWrite(bytes);
//   pipe->Deliver();            // the Connection reads, dispatches, replies
//   std::string replies = pipe->TakeOutput();
//
// Semantics are those of a socketpair as the Connection sees it: Read gives
// what the client wrote, then 0 once the client shut its write side or
// closed; writes fill an output buffer of `capacity` bytes (EAGAIN when it is
// full, so the Connection's backed-up output path runs) and fail with EPIPE
// once the client closed; ShutdownWrite makes the client see the end of the
// stream after the bytes already written. Readiness is level-triggered.
//
// Single-threaded (the loop thread).
#ifndef ST_CORE_TESTS_MEM_TRANSPORT_H_
#define ST_CORE_TESTS_MEM_TRANSPORT_H_

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "event_loop.h"
#include "transport.h"

namespace st {
namespace test {

class MemPipe {
 public:
  explicit MemPipe(size_t capacity) : capacity_(capacity) {}

  // ---- The client's end ----
  // Queues bytes for the peer; false (nothing queued) once the peer closed,
  // as a write to a closed socket fails.
  bool ClientWrite(std::string_view bytes) {
    if (server_closed_ || client_shut_) return false;
    in_.append(bytes);
    return true;
  }
  // Bytes the peer wrote and the client has not taken yet.
  std::string TakeOutput() {
    std::string out;
    out.swap(out_);
    return out;
  }
  // shutdown(SHUT_WR) of the client: the peer reads what is left, then 0.
  void ClientShutdown() { client_shut_ = true; }
  // close() of the client: also the peer's writes fail from now on.
  void ClientClose() {
    client_shut_ = true;
    client_closed_ = true;
  }
  // The peer shut its write side (or closed) and every byte is taken: the
  // client reads the end of the stream.
  bool ClientSeesEof() const { return (server_shut_ || server_closed_) && out_.empty(); }
  size_t unread_input() const { return in_.size() - in_read_; }
  // How many reads gave the peer bytes, and how many writes it made (each
  // stands for one read(2) and one sendmsg(2) of a socket).
  size_t reads() const { return reads_; }
  size_t writes() const { return writes_; }
  void CountWrite() { ++writes_; }
  bool server_closed() const { return server_closed_; }

  // What the peer's end is ready for now (EventLoop::kReadable |
  // kWritable), among what it watches.
  int Ready() const {
    if (server_closed_ || handler_ == nullptr) return 0;
    int ready = 0;
    if (in_read_ < in_.size() || client_shut_) ready |= EventLoop::kReadable;
    if (out_.size() < capacity_ || client_closed_) ready |= EventLoop::kWritable;
    return ready & interest_;
  }
  // One event of an epoll turn: calls the peer's handler with what is ready.
  // Returns false if nothing was.
  bool Deliver() {
    int ready = Ready();
    if (ready == 0) return false;
    std::shared_ptr<Transport::Handler> h = handler_;  // the handler may close the transport
    (*h)(ready);
    return true;
  }

  // ---- The peer's end (MemTransport) ----
  void Watch(int mask, Transport::Handler handler) {
    interest_ = mask;
    handler_ = std::make_shared<Transport::Handler>(std::move(handler));
  }
  void SetInterest(int mask) { interest_ = mask; }
  ssize_t Read(void* buf, size_t n) {
    size_t avail = in_.size() - in_read_;
    if (avail == 0) {
      if (client_shut_) return 0;
      errno = EAGAIN;
      return -1;
    }
    size_t k = std::min(n, avail);
    ++reads_;
    std::memcpy(buf, in_.data() + in_read_, k);
    in_read_ += k;
    if (in_read_ == in_.size()) {
      in_.clear();
      in_read_ = 0;
    }
    return static_cast<ssize_t>(k);
  }
  // Room for up to n more output bytes now: n, fewer, or -1 with errno.
  ssize_t Room(size_t n) const {
    if (client_closed_) {
      errno = EPIPE;
      return -1;
    }
    if (server_shut_) {
      errno = EPIPE;
      return -1;
    }
    size_t room = capacity_ > out_.size() ? capacity_ - out_.size() : 0;
    if (room == 0 && n > 0) {
      errno = EAGAIN;
      return -1;
    }
    return static_cast<ssize_t>(std::min(n, room));
  }
  void Append(const char* p, size_t n) { out_.append(p, n); }
  void ServerShutdown() { server_shut_ = true; }
  void ServerClose() {
    server_closed_ = true;
    handler_.reset();
    interest_ = 0;
  }

 private:
  size_t capacity_;
  size_t reads_ = 0;
  size_t writes_ = 0;
  std::string in_;
  size_t in_read_ = 0;
  std::string out_;
  bool client_shut_ = false;
  bool client_closed_ = false;
  bool server_shut_ = false;
  bool server_closed_ = false;
  int interest_ = 0;
  std::shared_ptr<Transport::Handler> handler_;
};

class MemTransport : public Transport {
 public:
  explicit MemTransport(std::shared_ptr<MemPipe> pipe) : pipe_(std::move(pipe)) {}
  ~MemTransport() override { Close(); }

  Status Watch(int mask, Handler handler) override {
    pipe_->Watch(mask, std::move(handler));
    return Status::OK();
  }
  void SetInterest(int mask) override { pipe_->SetInterest(mask); }
  ssize_t Read(void* buf, size_t n) override { return pipe_->Read(buf, n); }
  ssize_t Writev(const struct iovec* iov, int cnt, bool more) override {
    (void)more;
    pipe_->CountWrite();
    size_t want = 0;
    for (int i = 0; i < cnt; ++i) want += iov[i].iov_len;
    ssize_t room = pipe_->Room(want);
    if (room < 0) return room;
    size_t left = static_cast<size_t>(room);
    for (int i = 0; i < cnt && left > 0; ++i) {
      size_t k = std::min(left, iov[i].iov_len);
      pipe_->Append(static_cast<const char*>(iov[i].iov_base), k);
      left -= k;
    }
    return room;
  }
  ssize_t SendFile(int file_fd, off_t* offset, size_t count) override {
    ssize_t room = pipe_->Room(std::min<size_t>(count, 1 << 20));
    if (room <= 0) return room;
    std::string buf(static_cast<size_t>(room), '\0');
    ssize_t n = ::pread(file_fd, &buf[0], buf.size(), *offset);
    if (n <= 0) return n;
    pipe_->Append(buf.data(), static_cast<size_t>(n));
    *offset += n;
    return n;
  }
  int ConnectError() override { return 0; }
  void ShutdownWrite() override { pipe_->ServerShutdown(); }
  void Close() override {
    if (closed_) return;
    closed_ = true;
    pipe_->ServerClose();
  }

 private:
  std::shared_ptr<MemPipe> pipe_;
  bool closed_ = false;
};

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_MEM_TRANSPORT_H_
