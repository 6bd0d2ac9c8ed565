// The byte stream under a Connection (connection.h), after redis's
// connection abstraction (src/connection.h: connRead, connWritev,
// connSetReadHandler): what a Connection does with its socket and nothing
// more. Each method behaves like the system call it stands for (a count, or
// -1 with errno set), so Connection handles EAGAIN, EINTR and errors the same
// way whatever lies underneath.
//
// st-peer uses SocketTransport: a non-blocking socket watched by the
// EventLoop. The request fuzzer puts an in-memory pipe here
// (st_core/tests/mem_transport.h), so an input runs the peer's framing,
// dispatch and replies without a socket or an epoll call.
//
// Loop thread only, like the Connection that owns it.
#ifndef ST_CORE_TRANSPORT_H_
#define ST_CORE_TRANSPORT_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "event_loop.h"
#include "status.h"

namespace st {

class Transport {
 public:
  // Called with what is ready (EventLoop::kReadable | kWritable); errors and
  // hang-ups are reported as both, as the EventLoop does.
  using Handler = std::function<void(int events)>;

  virtual ~Transport() = default;

  // Starts reporting readiness for mask to handler (EventLoop::AddFd).
  virtual Status Watch(int mask, Handler handler) = 0;
  // Changes what is watched (EventLoop::ModifyFd).
  virtual void SetInterest(int mask) = 0;
  // read(2): bytes read, 0 at the end of the stream, or -1 and errno
  // (EAGAIN: nothing to read now).
  virtual ssize_t Read(void* buf, size_t n) = 0;
  // sendmsg(2) of cnt buffers with MSG_NOSIGNAL (and MSG_MORE if more):
  // bytes written (perhaps fewer than given), or -1 and errno (EAGAIN: no
  // room now; EPIPE: the other side is gone).
  virtual ssize_t Writev(const struct iovec* iov, int cnt, bool more) = 0;
  // sendfile(2): up to count bytes of file_fd from *offset (advanced by what
  // was written); 0 if the file has no bytes there; -1 and errno.
  virtual ssize_t SendFile(int file_fd, off_t* offset, size_t count) = 0;
  // The outcome of a connect in progress: 0, EINPROGRESS, or an errno
  // (getsockopt SO_ERROR).
  virtual int ConnectError() = 0;
  // shutdown(SHUT_WR): the other side reads to the end, then sees EOF.
  virtual void ShutdownWrite() = 0;
  // Stops watching and closes; later calls do nothing.
  virtual void Close() = 0;
};

// A non-blocking socket (taken over: closed by Close or the destructor)
// watched by loop.
class SocketTransport : public Transport {
 public:
  SocketTransport(EventLoop* loop, int fd) : loop_(loop), fd_(fd) {}
  ~SocketTransport() override;

  SocketTransport(const SocketTransport&) = delete;
  SocketTransport& operator=(const SocketTransport&) = delete;

  Status Watch(int mask, Handler handler) override;
  void SetInterest(int mask) override;
  ssize_t Read(void* buf, size_t n) override;
  ssize_t Writev(const struct iovec* iov, int cnt, bool more) override;
  ssize_t SendFile(int file_fd, off_t* offset, size_t count) override;
  int ConnectError() override;
  void ShutdownWrite() override;
  void Close() override;

 private:
  EventLoop* loop_;
  int fd_;
  bool watched_ = false;
};

}  // namespace st

#endif  // ST_CORE_TRANSPORT_H_
