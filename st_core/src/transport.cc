#include "transport.h"

#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace st {

SocketTransport::~SocketTransport() { Close(); }

Status SocketTransport::Watch(int mask, Handler handler) {
  Status s = loop_->AddFd(fd_, mask, std::move(handler));
  watched_ = s.ok();
  return s;
}

void SocketTransport::SetInterest(int mask) {
  if (watched_) loop_->ModifyFd(fd_, mask);
}

ssize_t SocketTransport::Read(void* buf, size_t n) { return ::read(fd_, buf, n); }

ssize_t SocketTransport::Writev(const struct iovec* iov, int cnt, bool more) {
  struct msghdr msg{};
  msg.msg_iov = const_cast<struct iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(cnt);
  return ::sendmsg(fd_, &msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
}

ssize_t SocketTransport::SendFile(int file_fd, off_t* offset, size_t count) {
  return ::sendfile(fd_, file_fd, offset, count);
}

int SocketTransport::ConnectError() {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  return err;
}

void SocketTransport::ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

void SocketTransport::Close() {
  if (fd_ < 0) return;
  if (watched_) loop_->RemoveFd(fd_);
  watched_ = false;
  ::close(fd_);
  fd_ = -1;
}

}  // namespace st
