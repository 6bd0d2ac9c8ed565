#include "links.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "capability.h"
#include "log.h"
#include "net.h"

namespace st {

bool SplitHostPort(const std::string& addr, std::string* host, std::string* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  std::string h = addr.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::string p = addr.substr(colon + 1);
  for (char c : p) {
    if (c < '0' || c > '9') return false;
  }
  if (p.size() > 5 || std::stoul(p) > 65535) return false;
  *host = h;
  *port = p;
  return true;
}

Links::Links(EventLoop* loop, Host* host, LinksOptions options)
    : loop_(loop), host_(host), options_(std::move(options)) {}

Links::~Links() {
  for (auto& l : link_calls_) {
    for (auto& c : l.second) loop_->CancelTimer(c.second.timer);
  }
}

uint64_t Links::Now() const { return options_.clock ? options_.clock() : UnixNow(); }

Connection* Links::Connect(const std::string& addr, std::string* error) {
  std::string host, port;
  if (!SplitHostPort(addr, &host, &port)) {
    *error = "not a host:port address";
    return nullptr;
  }
  struct addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    *error = std::string("cannot resolve: ") + gai_strerror(rc);
    return nullptr;
  }
  int fd = ::socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    freeaddrinfo(res);
    return nullptr;
  }
  SetNoDelay(fd);
  rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) {
    *error = std::string("connect: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  Connection* c = host_->AdoptLink(fd, addr);
  if (c == nullptr) {
    *error = "cannot watch the connection";
    return nullptr;
  }
  links_[addr] = c->id();
  link_addr_[c->id()] = addr;
  return c;
}

Connection* Links::LinkTo(const std::string& addr, std::string* error) {
  auto it = links_.find(addr);
  if (it != links_.end()) {
    Connection* c = host_->FindOpen(it->second);
    if (c != nullptr) return c;
  }
  return Connect(addr, error);
}

void Links::Authenticate(Connection* link) {
  if (options_.capability_key.empty()) return;
  Auth& la = link_auth_[link->id()];
  uint64_t now = Now();
  if (la.expires != 0 && la.expires > now && la.expires - now > kTokenRenewS) return;
  Capability cap;
  cap.ops = kOpPeer;
  cap.file_id = 0;
  cap.expires = now + kTokenTtlS;
  cap.user = "peer:" + options_.peer_id;
  uint64_t seq = ++next_seq_;
  link->Send(EncodeAuth(seq, MintToken(options_.capability_key, cap)));
  la.expires = cap.expires;
  la.seqs.push_back(seq);
  ++auths_sent_;
  ST_LOG_DEBUG("ring link %s: sent a PEER capability valid until %llu", link->remote().c_str(),
               static_cast<unsigned long long>(cap.expires));
}

bool Links::Send(const std::string& addr, MsgType type, uint16_t flags, std::string_view payload,
                 std::string* error) {
  Connection* link = LinkTo(addr, error);
  if (link == nullptr) return false;
  Authenticate(link);
  link->Send(EncodeFrame(type, flags, ++next_seq_, payload));
  return true;
}

void Links::Call(const std::string& addr, const std::function<std::string(uint64_t)>& build,
                 double timeout_s, Done done) {
  std::string error;
  Connection* link = LinkTo(addr, &error);
  if (link == nullptr) {
    loop_->Post([done, error] { done(nullptr, {}, error); });
    return;
  }
  Authenticate(link);
  uint64_t link_id = link->id();
  uint64_t link_seq = ++next_seq_;
  PendingCall& call = link_calls_[link_id][link_seq];
  call.done = std::move(done);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", timeout_s);
  std::string why = std::string("no reply within ") + secs + " s (st-peer --chain-timeout)";
  call.timer = loop_->AddTimer(timeout_s, [this, link_id, link_seq, why] {
    auto l = link_calls_.find(link_id);
    if (l == link_calls_.end()) return;
    auto c = l->second.find(link_seq);
    if (c == l->second.end()) return;
    Done d = std::move(c->second.done);
    l->second.erase(c);
    d(nullptr, {}, why);
  });
  link->Send(build(link_seq));
}

void Links::FailCalls(uint64_t link_id, const std::string& reason) {
  auto l = link_calls_.find(link_id);
  if (l == link_calls_.end()) return;
  std::unordered_map<uint64_t, PendingCall> calls;
  calls.swap(l->second);
  link_calls_.erase(l);
  for (auto& kv : calls) {
    loop_->CancelTimer(kv.second.timer);
    Done d = std::move(kv.second.done);
    loop_->Post([d, reason] { d(nullptr, {}, "the link closed: " + reason); });
  }
}

bool Links::OnClosed(uint64_t id, const std::string& reason) {
  link_auth_.erase(id);
  auto la = link_addr_.find(id);
  if (la == link_addr_.end()) return false;
  std::string addr = la->second;
  link_addr_.erase(la);
  auto l = links_.find(addr);
  if (l != links_.end() && l->second == id) links_.erase(l);
  ST_LOG_INFO("connection to ring peer %s closed: %s", addr.c_str(), reason.c_str());
  FailCalls(id, reason);
  loop_->Post([this, addr, reason] { host_->OnLinkFailed(addr, reason); });
  return true;
}

bool Links::OnFrame(Connection* c, const FrameHeader& h, std::string_view payload) {
  auto link = link_addr_.find(c->id());
  if (link == link_addr_.end()) return false;
  const std::string addr = link->second;  // a callback below may close the link
  auto calls = link_calls_.find(c->id());
  if (calls != link_calls_.end()) {
    auto call = calls->second.find(h.seq);
    if (call != calls->second.end()) {
      loop_->CancelTimer(call->second.timer);
      Done done = std::move(call->second.done);
      calls->second.erase(call);
      if (calls->second.empty()) link_calls_.erase(calls);
      done(&h, payload, "");
      return true;
    }
  }
  bool auth_reply = false;
  auto la = link_auth_.find(c->id());
  if (la != link_auth_.end()) {
    auto& seqs = la->second.seqs;
    for (auto s = seqs.begin(); s != seqs.end(); ++s) {
      if (*s == h.seq) {
        seqs.erase(s);
        auth_reply = true;
        break;
      }
    }
  }
  if (h.type == static_cast<uint8_t>(MsgType::kOk)) return true;
  if (h.type == static_cast<uint8_t>(MsgType::kError)) {
    ErrorReply e;
    std::string why = !DecodeError(payload, &e).ok() ? "it sent an unreadable ERROR frame"
                      : auth_reply ? std::string("it refused this peer's capability (AUTH): ") +
                                         ErrorCodeName(e.code) + ": " + e.message +
                                         " (do both peers use the same --key-file?)"
                                   : std::string("it refused an index segment: ") +
                                         ErrorCodeName(e.code) + ": " + e.message;
    ST_LOG_WARN("ring peer %s: %s", addr.c_str(), why.c_str());
    host_->OnLinkFailed(addr, why);
    return true;
  }
  ST_LOG_WARN("ring peer %s sent an unexpected frame of type 0x%02x", addr.c_str(), h.type);
  return true;
}

}  // namespace st
