// The peer's network side: the listening socket, client connections and the
// dispatch of requests to the record store and GET_LOCAL. The server owns
// one of each of its parts: an Admission (admission.h: impact control, the
// token buckets and the host's load), a Links (links.h: the persistent
// outgoing connections to other peers) and the GetLocal, Scrubber,
// MetaMirror and Verifier of a namespace root.
//
// Every request gets exactly one reply carrying its seq (or several
// LOCAL_LIST frames, MORE on all but the last). Replies of pipelined requests
// may go out in any order: GET_LOCAL answers when its ring completes, a GET
// whose file must first be verified and a PUT or DELETE under --sync when
// their disk work, done on a background thread, ends (docs/peer.md,
// "Threads").
#ifndef ST_CORE_SERVER_H_
#define ST_CORE_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "admission.h"
#include "background.h"
#include "capability.h"
#include "connection.h"
#include "event_loop.h"
#include "get_local.h"
#include "links.h"
#include "meta_mirror.h"
#include "metrics.h"
#include "record_store.h"
#include "scrubber.h"
#include "verifier.h"

namespace st {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                 // 0: an ephemeral port
  std::string advertise;        // empty: "<host>:<bound port>"
  std::string namespace_dir;    // empty: GET_LOCAL answers NO_NAMESPACE (unless copies)
  // --metadata fetch: GET_LOCAL reads these copies, brought to the plan's
  // generation first (infofile_copy.h); outlives the server. nullptr: the namespace.
  InfofileCopies* copies = nullptr;
  uint32_t max_frame = kDefaultMaxFrame;
  double get_local_cache_s = 60;
  double ring_timeout_base_s = 2;
  double ring_timeout_per_peer_s = 0.5;
  double ring_timeout_per_million_s = 10;
  // PUT_CHAIN: a forwarded copy's reply must come within this, per peer left
  // in the chain (so the peer nearest a stuck one is the one that reports it).
  double chain_timeout_s = 5;
  // Impact control (FreeLoader seed 004, 3.2.2): 0 = no limit. Bytes per
  // second of PUT data received and of GET data sent, and requests per
  // second. Over the limit a connection's next request waits (the peer stops
  // reading that socket), so clients slow down instead of failing.
  double max_write_bytes_per_s = 0;
  double max_read_bytes_per_s = 0;
  double max_requests_per_s = 0;
  // Yielding to the host's own load (host_load.h; FreeLoader 4.2): every
  // host_load_period_s the limits above are scaled by a factor, from 1 while
  // no other work uses the host's CPU down to yield_floor while it does.
  bool yield_to_host_load = false;
  double yield_floor = 0.1;
  double host_load_period_s = 1;
  // Where the samples come from; empty: /proc (ReadCpuTimes). (Tests inject them.)
  std::function<Status(CpuTimes*)> cpu_sampler;
  double scrub_interval_s = 86400;  // periodic scrubs (namespace_dir or copies); 0: only on SCRUB
  double scrub_age_s = 3600;  // the scrubber never removes anything younger
  // Infofile mirrors for recovery without the namespace (meta_mirror.h;
  // needs namespace_dir): seconds between passes; 0: no mirrors, and
  // LIST_META / GET_META answer NO_NAMESPACE.
  double mirror_interval_s = 5;
  // The verifying scrubber (verifier.h): seconds between passes (0: none)
  // and its read rate cap in bytes per second (0: none).
  double verify_interval_s = 7 * 86400;
  double verify_bytes_per_s = 20e6;
  // Hostile or broken clients (docs/peer.md, "Hostile input"); 0: no limit.
  double idle_timeout_s = 30;  // a begun frame that gets no byte for this long
  double keepalive_timeout_s = 0;  // a client connection with nothing in flight
  size_t max_connections = 1024;  // client connections; ring links have as many again
  // Capabilities (docs/capabilities.md): the 32-byte key of --key-file.
  // Empty: AUTH is answered OK and ignored, and nothing is checked.
  std::string capability_key;
  // Unix seconds for capability expiry; empty: UnixNow(). (Tests move it.)
  std::function<uint64_t()> clock;
};

class Server : public Connection::Handler, public GetLocal::Host, private Links::Host {
 public:
  // A request's payload as its row's decoder left it: views into the frame
  // (copies for the ring types, which outlive it).
  struct Request {
    uint64_t file_id = 0;  // the file its capability must cover (0: every file)
    std::string_view name;  // the record it names (GET, DELETE)
    std::variant<std::monostate, PutRequest, PutChainRequest, NameRequest, RingHeader, RingSegment,
                 GetMetaRequest, std::string_view /* AUTH's token */>
        body;
  };
  // flags: the frame header's (AS_OF shapes the ring types' payload).
  using RequestDecoder = Status (*)(uint16_t flags, std::string_view payload, Request* req);
  using RequestHandler = void (Server::*)(Connection* c, const FrameHeader& h,
                                          std::string_view payload, Request* req);

  // Row flags of the request table.
  static constexpr unsigned kCheckName = 1u << 0;  // ValidateRecordName(req.name) first
  static constexpr unsigned kPeerIfForwarded = 1u << 1;  // kFlagForwarded: PEER instead of op
  static constexpr unsigned kOrAdmin = 1u << 2;  // or ADMIN on every file (file 0)
  static constexpr unsigned kNeverHeld = 1u << 3;  // impact control never holds it
  static constexpr unsigned kWriteBytes = 1u << 4;  // its payload counts as written bytes
  static constexpr unsigned kReadBytes = 1u << 5;  // waits for the read budget (GET)

  // One row of the request table (after redis's src/commands.def): a request
  // type, the capability operation it needs (capability.h kOp*; 0: none),
  // how its payload is decoded and which handler serves it. HandleRequest
  // does what every row shares, in this order: decode (BAD_FRAME and close
  // if the payload does not parse), the capability check (DENIED), the
  // record name check (BAD_NAME), then the handler. Admit reads the impact
  // control flags.
  struct RequestType {
    MsgType type;
    uint8_t op;
    unsigned flags;
    RequestDecoder decode;
    RequestHandler handle;
  };
  // Every request this peer serves, one row per type.
  static const std::vector<RequestType>& RequestTable();
  // The row of a message type; nullptr if it is not a request this peer serves.
  static const RequestType* FindRequestType(uint8_t type);

  Server(EventLoop* loop, RecordStore* store, ServerOptions options);
  ~Server() override;

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens; after this port() and advertise() are known.
  Status Start();

  int port() const { return port_; }
  const std::string& advertise() const { return advertise_; }
  size_t connection_count() const { return conns_.size(); }
  // Inbound connections counted against --max-connections.
  size_t client_count() const { return kind_count_[static_cast<int>(Kind::kClient)]; }
  size_t ring_inbound_count() const { return kind_count_[static_cast<int>(Kind::kRing)]; }
  size_t round_count() const { return get_local_ ? get_local_->round_count() : 0; }
  // nullptr without a namespace root.
  Scrubber* scrubber() { return scrubber_.get(); }
  // nullptr without a namespace root or with mirror_interval_s 0.
  MetaMirror* mirror() { return mirror_.get(); }
  Verifier* verifier() { return verifier_.get(); }
  // Copies the verifier quarantined, for the announcer to report.
  BadCopyQueue* bad_copies() { return &bad_copies_; }

  // Connection::Handler
  void OnFrame(Connection* conn, const FrameHeader& header, std::string_view payload) override;
  void OnFrameStart(Connection* conn, const FrameHeader& header) override;
  void OnClosed(Connection* conn, const std::string& reason) override;
  void OnBatchStart(Connection* conn) override;
  void OnBatchEnd(Connection* conn) override;
  double Admit(Connection* conn, const FrameHeader& header) override;

  // How long an over-the-limit connection may take to show a RING_SEGMENT
  // prefix before it is refused, and how many such connections (with the
  // refused ones still lingering) there may be at once; beyond that a new
  // connection gets its BUSY frame at once, on a best-effort basis.
  static constexpr double kProbationSeconds = 1.0;
  static constexpr size_t kMaxProbation = 64;

  // GetLocal::Host
  void SendToClient(uint64_t conn_id, std::string frame) override;
  void SendSegment(const std::string& addr, uint16_t flags, std::string payload) override;

  bool checks_capabilities() const { return !options_.capability_key.empty(); }
  // AUTH frames this peer sent on its ring links (any thread may read it).
  uint64_t ring_auths_sent() const { return links_.auths_sent(); }
  // Requests held back by impact control so far (any thread may read it).
  uint64_t throttled() const { return admission_.throttled(); }
  // The factor --yield-to-host-load applies to the limits now (1 without
  // it), and the share of the host's CPU other processes used over the last
  // period (any thread may read them).
  double impact_scale() const { return admission_.impact_scale(); }
  double host_other_cpu() const { return admission_.host_other_cpu(); }
  PeerMetrics* metrics() { return &metrics_; }
  // The Prometheus exposition of metrics() and the peer's gauges (loop thread).
  std::string RenderMetrics();

 protected:
  // A request to another peer over the link to addr (AUTH first if needed).
  // done gets the reply frame, or (h == nullptr) why there is none: the
  // link could not be made, closed, or timeout_s passed. Never called from
  // inside CallLink.
  using LinkDone = Links::Done;
  virtual void CallLink(const std::string& addr,
                        const std::function<std::string(uint64_t seq)>& build, double timeout_s,
                        LinkDone done);
  EventLoop* loop() const { return loop_; }
  // An accepted connection as an inbound one: the --max-connections
  // accounting (a client, on probation, or refused at once), then a
  // Connection of this server over transport. OnAccept calls it with a
  // SocketTransport for each socket the listener gives; the request fuzzer
  // with an in-memory pipe.
  void AcceptConnection(std::unique_ptr<Transport> transport, std::string remote);

 private:
  void OnAccept();
  // The shared checks of the request table, then the row's handler.
  void HandleRequest(Connection* c, const FrameHeader& h, std::string_view payload);
  // The request table's handlers (server.cc, RequestTable()).
  void HandlePut(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandlePutChain(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleGet(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleDelete(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleDeleteFile(Connection* c, const FrameHeader& h, std::string_view payload,
                        Request* req);
  void HandleGetLocal(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandlePing(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleScrub(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleAuth(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  // LIST_META and GET_META: the infofile mirrors (docs/wire-protocol.md).
  void HandleListMeta(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleGetMeta(Connection* c, const FrameHeader& h, std::string_view payload, Request* req);
  void HandleRingSegment(Connection* c, const FrameHeader& h, std::string_view payload,
                         Request* req);
  // A PUT that owns its bytes, for writing off the loop (--sync).
  struct OwnedPut {
    uint64_t file_id = 0;
    uint8_t copy_rank = 0;
    uint32_t crc = 0;
    std::string name;
    std::string data;
    PutMode mode;  // REPLACE, LEFTOVER and the writer's connection
  };
  // Stores the copy on this peer and calls done with the result on the loop
  // thread: now, or under --sync after BeginPut here, WritePut (and its
  // fsyncs) on a background thread and FinishPut back here. A PUT of a
  // record that is being written waits for that one.
  using StoreDone = std::function<void(const Status&)>;
  void StoreRecord(std::shared_ptr<OwnedPut> put, StoreDone done);
  void StoreOffLoop(std::shared_ptr<OwnedPut> put, StoreDone done);
  // Group fsync (--sync without --sync-each): each PUT is written on a
  // background thread as it comes; the PUTs written while one syncfs runs
  // wait for the next, which makes them all durable before they are
  // answered. One syncfs in flight at a time, so batches grow with the load.
  struct SyncItem {
    std::shared_ptr<OwnedPut> put;
    RecordStore::PendingPut pending;
    StoreDone done;
    std::string key;
    Status result;
  };
  void MaybeGroupSync();
  void RunPutWaiters(const std::string& key);

  // PUT_CHAIN (docs/wire-protocol.md, "Chain replication"): store here, then
  // forward to the next holder and answer when it has answered.
  struct ChainPut {
    std::shared_ptr<OwnedPut> put;
    std::vector<std::string> hops;
    uint16_t flags = 0;
  };
  void ForwardChain(uint64_t conn_id, uint64_t seq, std::shared_ptr<ChainPut> chain);

  static std::string PutReply(uint64_t seq, uint64_t file_id, std::string_view name,
                              const Status& s);
  static std::string GetError(uint64_t seq, uint64_t file_id, std::string_view name,
                              const Status& s);
  // DATA header and the file, then the deferred reply is paid.
  void SendRecordToClient(uint64_t conn_id, uint64_t seq, RecordStore::ReadHandle* rec);
  // With a key: true if the connection's capabilities allow op on file_id;
  // otherwise answers ERROR DENIED for seq and returns false.
  bool Allowed(Connection* c, uint64_t seq, uint8_t type, uint64_t file_id, uint8_t op);
  // Allowed for a request of the table: the row's operation on req's file
  // (PEER for a forwarded one, or ADMIN on every file instead, by its flags).
  bool Permitted(Connection* c, const FrameHeader& h, const RequestType& row, const Request& req);
  uint64_t Now() const;
  // Links::Host
  Connection* AdoptLink(int fd, std::string remote) override;
  Connection* FindOpen(uint64_t id) override;
  void OnLinkFailed(const std::string& addr, const std::string& why) override;
  Connection* Adopt(std::unique_ptr<Transport> transport, std::string remote, bool connecting);
  void PauseAccept();

  // Inbound connections, for --max-connections. A connection is a client
  // until its first frame is a RING_SEGMENT (then a ring link, which has a
  // limit of its own); one accepted above the limit is on probation until
  // its first frame's prefix shows what it is.
  enum class Kind : int { kClient = 0, kRing, kProbation, kRefused, kCount };
  struct Inbound {
    Kind kind;
    bool classified = false;  // its first frame (other than AUTH) has started
    EventLoop::TimerId probation_timer = 0;
    CapabilityTable caps;  // tokens sent with AUTH (only with a key)
  };
  void SetKind(uint64_t id, Inbound* in, Kind kind);
  void Refuse(Connection* c, Inbound* in, const std::string& why);
  void RefuseNow(Transport* t, const std::string& remote);
  std::string BusyMessage() const;
  void NoteRefusal(const std::string& remote);

  EventLoop* loop_;
  RecordStore* store_;
  ServerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string advertise_;
  uint64_t next_conn_id_ = 0;
  bool accept_paused_ = false;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  // Reply batching: while cork_depth_ > 0 (a batch of frames being
  // dispatched, a group fsync's PUTs being answered), SendToClient corks
  // each client connection it writes to (Connection::Cork) and lists it in
  // corked_; the outermost EndCork uncorks them, one sendmsg each.
  void BeginCork() { ++cork_depth_; }
  void EndCork();
  int cork_depth_ = 0;
  std::vector<uint64_t> corked_;
  std::vector<std::unique_ptr<Connection>> graveyard_;  // closed, freed by a posted task
  std::unique_ptr<GetLocal> get_local_;
  std::unique_ptr<Scrubber> scrubber_;  // only with a namespace root or copies
  std::unique_ptr<MetaMirror> mirror_;  // only with a namespace root and a mirror interval
  BadCopyQueue bad_copies_;
  std::unique_ptr<Verifier> verifier_;
  std::unordered_map<uint64_t, Inbound> inbound_;
  size_t kind_count_[static_cast<int>(Kind::kCount)] = {};
  uint64_t refused_since_log_ = 0;
  double refusal_log_at_ = 0;
  uint64_t denied_since_log_ = 0;
  double denied_log_at_ = 0;
  Admission admission_;  // impact control
  Links links_;  // outgoing connections to other peers
  PeerMetrics metrics_;
  std::vector<SyncItem> sync_waiting_;  // written, waiting for the next group fsync
  bool sync_in_flight_ = false;
  uint64_t sync_batches_ = 0;
  // PUTs waiting for a PUT of the same record ("<file_id>/<name>") to finish.
  std::unordered_map<std::string, std::vector<std::function<void()>>> put_waiters_;
  // Disk work off the loop (PUT and DELETE under --sync, GET verification).
  // Last, so destroyed first: no callback of it runs once the server goes.
  BackgroundWork background_;
};

}  // namespace st

#endif  // ST_CORE_SERVER_H_
