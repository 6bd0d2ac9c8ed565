// The peer's HTTP endpoint for Prometheus (st-peer --metrics-port): on the
// event loop, one request per connection, HTTP/1.0 style (the response is
// closed by the server). `GET /metrics` answers the exposition text of
// Render(); `GET /` a line saying where the metrics are; anything else 404,
// and a request that is not HEAD/GET 405. A client that sends no complete
// request header within 5 s, or more than 8 KiB of one, is dropped.
//
// The peer speaks only this much HTTP, so it carries no HTTP library (there
// is no Prometheus client library for C++ in Debian 12; docs/decisions.md).
#ifndef ST_CORE_METRICS_HTTP_H_
#define ST_CORE_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "event_loop.h"
#include "status.h"

namespace st {

class MetricsHttp {
 public:
  using Render = std::function<std::string()>;

  MetricsHttp(EventLoop* loop, Render render);
  ~MetricsHttp();

  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  // Listens on host:port (0: an ephemeral port).
  Status Start(const std::string& host, int port);
  int port() const { return port_; }

  static constexpr size_t kMaxRequest = 8192;
  static constexpr double kTimeoutS = 5.0;

 private:
  struct Client {
    int fd = -1;
    std::string in;
    std::string out;
    size_t sent = 0;
    EventLoop::TimerId timer = 0;
  };
  void OnAccept();
  void OnClient(int fd, int events);
  void Respond(Client* c);
  void Drop(int fd);

  EventLoop* loop_;
  Render render_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::unordered_map<int, std::unique_ptr<Client>> clients_;
};

}  // namespace st

#endif  // ST_CORE_METRICS_HTTP_H_
