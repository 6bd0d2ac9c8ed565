// Socket setup for the peer's listeners and links, in one place (after
// redis's src/anet.c). The server (server.h) and the metrics endpoint
// (metrics_http.h) listen through ListenTcp; what they do with the
// connections is theirs.
#ifndef ST_CORE_NET_H_
#define ST_CORE_NET_H_

#include <sys/socket.h>

#include <string>

#include "status.h"

namespace st {

// Listens on host:port: the first address `host` resolves to (any address
// if it is empty) that can be bound, with a non-blocking, close-on-exec
// socket and SO_REUSEADDR. Port 0 binds an ephemeral port; *bound_port is the
// port bound. InvalidArgument if host does not resolve; IOError naming the
// system call and the address otherwise.
Status ListenTcp(const std::string& host, int port, int backlog, int* fd, int* bound_port);

// Sets TCP_NODELAY (best effort).
void SetNoDelay(int fd);

// "1.2.3.4:5678" or "[::1]:5678"; "?" for another family.
std::string SockAddrString(const struct sockaddr* sa);

}  // namespace st

#endif  // ST_CORE_NET_H_
