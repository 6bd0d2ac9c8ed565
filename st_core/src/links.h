// The peer's outgoing connections to other peers ("links"): one persistent
// connection per address, made on first use (RING_SEGMENTs of GET_LOCAL to
// a ring successor, PUT_CHAIN's forwarded copies to the next holder) and
// kept open between uses; with a capability key, an AUTH with the peer's own
// PEER token before the first frame and again before the token expires; and
// calls (a request whose reply comes back to a callback, or a failure: the
// link could not be made, it closed, or no reply came in time).
//
// The connections themselves belong to the server (its table of every
// connection, its Connection::Handler): a Links asks its Host to watch a
// new socket and to find an open connection by id, and the server hands
// every frame and close of a link back to OnFrame and OnClosed.
//
// Not thread-safe: the event loop's (auths_sent() excepted).
#ifndef ST_CORE_LINKS_H_
#define ST_CORE_LINKS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "connection.h"
#include "event_loop.h"
#include "protocol.h"

namespace st {

// Splits "host:port" (or "[v6]:port"). False if malformed.
bool SplitHostPort(const std::string& addr, std::string* host, std::string* port);

struct LinksOptions {
  // The 32-byte key of --key-file; empty: links send no AUTH.
  std::string capability_key;
  std::string peer_id;  // this peer's, for its PEER tokens' user ("peer:<peer_id>")
  // Unix seconds for token expiry; empty: UnixNow().
  std::function<uint64_t()> clock;
};

class Links {
 public:
  class Host {
   public:
    virtual ~Host() = default;
    // Watches a socket just connected (or connecting) to remote as a
    // connection of the host's; nullptr if it cannot.
    virtual Connection* AdoptLink(int fd, std::string remote) = 0;
    // The host's connection with this id, if it is open; otherwise nullptr.
    virtual Connection* FindOpen(uint64_t id) = 0;
    // The peer at addr refused something sent on its link (an unreadable
    // or ERROR reply to an AUTH or a segment), or the link closed (then
    // from a posted task, never from inside OnClosed).
    virtual void OnLinkFailed(const std::string& addr, const std::string& why) = 0;
  };

  // done gets the reply frame, or (h == nullptr) why there is none.
  using Done = std::function<void(const FrameHeader* h, std::string_view payload,
                                  const std::string& failure)>;

  // A link's own PEER token (file 0, user "peer:<peer_id>") lasts this long,
  // and a fresh one is sent before a frame once the one sent is within
  // kTokenRenewS of its expiry.
  static constexpr uint64_t kTokenTtlS = 3600;
  static constexpr uint64_t kTokenRenewS = 600;

  Links(EventLoop* loop, Host* host, LinksOptions options);
  ~Links();

  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  // Sends a frame of this type over the link to addr (made if need be, AUTH
  // first if needed), with a seq of the links' own. False and *error if the
  // link cannot be made.
  bool Send(const std::string& addr, MsgType type, uint16_t flags, std::string_view payload,
            std::string* error);
  // A request over the link to addr: build makes its frame for a seq, done
  // gets its reply, or the failure (the link could not be made, closed, or
  // timeout_s passed). Never called from inside Call.
  void Call(const std::string& addr, const std::function<std::string(uint64_t seq)>& build,
            double timeout_s, Done done);

  // A frame that came on connection c: true if c is a link (the frame is
  // then a reply, handled here), false if it is not.
  bool OnFrame(Connection* c, const FrameHeader& h, std::string_view payload);
  // Connection id closed: true if it was a link (its calls fail, and the
  // host hears of it from a posted task), false if it was not.
  bool OnClosed(uint64_t id, const std::string& reason);

  // AUTH frames sent on links so far (any thread may read it).
  uint64_t auths_sent() const { return auths_sent_.load(); }

 private:
  struct PendingCall {
    Done done;
    EventLoop::TimerId timer = 0;
  };
  // A link's AUTH state.
  struct Auth {
    uint64_t expires = 0;        // of the last token sent; 0: none yet
    std::vector<uint64_t> seqs;  // AUTH frames not answered yet
  };

  // The open link to addr, or a new one (nullptr and *error if it cannot be
  // made).
  Connection* LinkTo(const std::string& addr, std::string* error);
  Connection* Connect(const std::string& addr, std::string* error);
  // Before a frame on a link: AUTH with a fresh PEER token if the link has
  // none or its token is about to expire.
  void Authenticate(Connection* link);
  void FailCalls(uint64_t link_id, const std::string& reason);
  uint64_t Now() const;

  EventLoop* loop_;
  Host* host_;
  LinksOptions options_;
  uint64_t next_seq_ = 0;
  std::unordered_map<std::string, uint64_t> links_;      // address -> connection id
  std::unordered_map<uint64_t, std::string> link_addr_;  // connection id -> address
  std::unordered_map<uint64_t, Auth> link_auth_;         // connection id -> its AUTH state
  // Requests in flight: link id -> seq -> call.
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, PendingCall>> link_calls_;
  std::atomic<uint64_t> auths_sent_{0};
};

}  // namespace st

#endif  // ST_CORE_LINKS_H_
