#include "metrics_http.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net.h"

namespace st {

MetricsHttp::MetricsHttp(EventLoop* loop, Render render)
    : loop_(loop), render_(std::move(render)) {}

MetricsHttp::~MetricsHttp() {
  while (!clients_.empty()) Drop(clients_.begin()->first);
  if (listen_fd_ >= 0) {
    loop_->RemoveFd(listen_fd_);
    ::close(listen_fd_);
  }
}

Status MetricsHttp::Start(const std::string& host, int port) {
  Status s = ListenTcp(host, port, 64, &listen_fd_, &port_);
  if (!s.ok()) return s;
  return loop_->AddFd(listen_fd_, EventLoop::kReadable, [this](int) { OnAccept(); });
}

void MetricsHttp::OnAccept() {
  for (int i = 0; i < 16; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto c = std::make_unique<Client>();
    c->fd = fd;
    c->timer = loop_->AddTimer(kTimeoutS, [this, fd] {
      auto it = clients_.find(fd);
      if (it != clients_.end()) it->second->timer = 0;
      Drop(fd);
    });
    clients_[fd] = std::move(c);
    if (!loop_->AddFd(fd, EventLoop::kReadable, [this, fd](int ev) { OnClient(fd, ev); }).ok()) {
      Drop(fd);
    }
  }
}

void MetricsHttp::OnClient(int fd, int events) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client* c = it->second.get();
  if (c->out.empty() && (events & EventLoop::kReadable)) {
    char buf[2048];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        c->in.append(buf, static_cast<size_t>(n));
        if (c->in.size() > kMaxRequest) return Drop(fd);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return Drop(fd);  // EOF before a whole request, or an error
    }
    if (c->in.find("\r\n\r\n") == std::string::npos && c->in.find("\n\n") == std::string::npos)
      return;
    Respond(c);
  }
  while (c->sent < c->out.size()) {
    ssize_t n = ::send(fd, c->out.data() + c->sent, c->out.size() - c->sent, MSG_NOSIGNAL);
    if (n > 0) {
      c->sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      loop_->ModifyFd(fd, EventLoop::kWritable);
      return;
    }
    break;
  }
  Drop(fd);
}

void MetricsHttp::Respond(Client* c) {
  size_t eol = c->in.find_first_of("\r\n");
  std::string line = c->in.substr(0, eol);
  std::string method = line.substr(0, line.find(' '));
  size_t sp = line.find(' ');
  std::string path =
      sp == std::string::npos ? "" : line.substr(sp + 1, line.find(' ', sp + 1) - sp - 1);
  size_t q = path.find('?');
  if (q != std::string::npos) path.resize(q);
  std::string status = "200 OK";
  std::string type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
  if (method != "GET" && method != "HEAD") {
    status = "405 Method Not Allowed";
    body = "only GET /metrics\n";
  } else if (path == "/metrics") {
    body = render_();
  } else if (path == "/") {
    type = "text/plain; charset=utf-8";
    body = "st-peer: Prometheus metrics at /metrics\n";
  } else {
    status = "404 Not Found";
    body = "no such page; the metrics are at /metrics\n";
  }
  c->out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (method != "HEAD") c->out += body;
}

void MetricsHttp::Drop(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second->timer != 0) loop_->CancelTimer(it->second->timer);
  loop_->RemoveFd(fd);
  ::close(fd);
  clients_.erase(it);
}

}  // namespace st
