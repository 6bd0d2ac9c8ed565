#include "net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>

namespace st {

Status ListenTcp(const std::string& host, int port, int backlog, int* fd, int* bound_port) {
  struct addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  const std::string p = std::to_string(port);
  const std::string addr = host + ":" + p;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0) return Status::InvalidArgument("cannot resolve " + host + ": " + gai_strerror(rc));
  Status s = Status::IOError("no address to listen on for " + host);
  int lfd = -1;
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    lfd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
      s = PosixError("socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0) {
      s = PosixError("bind " + addr, errno);
    } else if (::listen(lfd, backlog) != 0) {
      s = PosixError("listen " + addr, errno);
    } else {
      s = Status::OK();
      break;
    }
    ::close(lfd);
    lfd = -1;
  }
  freeaddrinfo(res);
  if (!s.ok()) return s;

  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(lfd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) {
    s = PosixError("getsockname", errno);
    ::close(lfd);
    return s;
  }
  *bound_port = ss.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port)
                    : ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
  *fd = lfd;
  return Status::OK();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string SockAddrString(const struct sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const struct sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

}  // namespace st
