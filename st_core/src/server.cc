#include "server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "coding.h"
#include "crc32c.h"
#include "log.h"
#include "name_codec.h"
#include "net.h"

namespace st {
namespace {

ErrorCode StoreErrorCode(const Status& s) {
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
      return ErrorCode::kBadName;
    case Status::Code::kCorruption:
      return ErrorCode::kCrcMismatch;
    case Status::Code::kAlreadyExists:
      return ErrorCode::kExists;
    case Status::Code::kNoSpace:
      return ErrorCode::kNoSpace;
    case Status::Code::kNotFound:
      return ErrorCode::kNotFound;
    default:
      return ErrorCode::kIoError;
  }
}

}  // namespace

namespace {

AdmissionOptions AdmissionFrom(const ServerOptions& o) {
  AdmissionOptions a;
  a.max_write_bytes_per_s = o.max_write_bytes_per_s;
  a.max_read_bytes_per_s = o.max_read_bytes_per_s;
  a.max_requests_per_s = o.max_requests_per_s;
  a.yield_to_host_load = o.yield_to_host_load;
  a.yield_floor = o.yield_floor;
  a.host_load_period_s = o.host_load_period_s;
  a.cpu_sampler = o.cpu_sampler;
  return a;
}

LinksOptions LinksFrom(const ServerOptions& o, const std::string& peer_id) {
  LinksOptions l;
  l.capability_key = o.capability_key;
  l.peer_id = peer_id;
  l.clock = o.clock;
  return l;
}

}  // namespace

Server::Server(EventLoop* loop, RecordStore* store, ServerOptions options)
    : loop_(loop),
      store_(store),
      options_(std::move(options)),
      admission_(loop, AdmissionFrom(options_)),
      links_(loop, this, LinksFrom(options_, store->peer_id())),
      background_(store->env(), loop) {
  // A copy's writer is gone once its connection has closed (ids are never reused).
  store_->SetWriterOpen([this](uint64_t id) { return conns_.count(id) != 0; });
}

std::string Server::RenderMetrics() {
  PeerGauges g;
  g.connections = conns_.size();
  g.records = store_->record_count();
  g.used_bytes = store_->used_bytes();
  g.capacity_bytes = store_->capacity();
  store_->FsSpace(&g.fs_total_bytes, &g.fs_free_bytes);
  g.throttled = admission_.throttled();
  g.impact_scale = admission_.impact_scale();
  g.yield_enabled = admission_.yields();
  g.host_other_cpu = admission_.host_other_cpu();
  g.getlocal_rounds = round_count();
  g.peer_id = store_->peer_id();
  if (mirror_) {
    const MetaMirrorCounters& m = mirror_->counters();
    g.mirror_enabled = true;
    g.meta_mirrors = m.mirrors.load();
    g.mirror_passes = m.passes.load();
    g.mirror_failed_passes = m.failed_passes.load();
    g.mirror_copies = m.copies.load();
    g.mirror_removals = m.removals.load();
    g.mirror_errors = m.errors.load();
    g.mirror_last_pass_s = static_cast<double>(m.last_pass_ns.load()) * 1e-9;
  }
  if (options_.copies != nullptr) {
    const InfofileCopies::Counters& c = options_.copies->counters();
    g.copies_enabled = true;
    g.copy_fetches = c.fetches.load();
    g.copy_fetches_from_standbys = c.from_standbys.load();
    g.copy_fetch_failures = c.failures.load();
    g.copy_bytes = c.bytes.load();
    CopyLag::Stats lag = options_.copies->lag()->Get();
    g.infofile_copies = lag.copies;
    g.copies_behind = lag.behind;
    g.copies_max_lag = lag.max_lag;
    g.copies_caught_up_s = lag.caught_up_at;
  }
  if (verifier_) {
    const VerifierCounters& v = verifier_->counters();
    g.verify_passes = v.passes.load();
    g.copies_verified = v.copies_verified.load();
    g.bytes_verified = v.bytes_verified.load();
    g.copies_bad = v.copies_bad.load();
    g.copies_quarantined = v.copies_quarantined.load();
    g.verify_errors = v.errors.load();
    g.verify_last_pass_s = static_cast<double>(v.last_pass_ns.load()) * 1e-9;
  }
  return RenderPrometheus(metrics_, g);
}

double Server::Admit(Connection* conn, const FrameHeader& h) {
  (void)conn;
  const RequestType* row = FindRequestType(h.type);
  const unsigned flags = row != nullptr ? row->flags : 0;
  // Ring traffic, AUTH and PING are never held: a GET_LOCAL collective or a
  // liveness check must not wait behind another client's bulk transfer.
  if (flags & kNeverHeld) return 0;
  Admission::Cost cost;
  cost.writes = (flags & kWriteBytes) != 0;
  cost.write_bytes = h.payload_size();
  cost.reads = (flags & kReadBytes) != 0;
  return admission_.Admit(EventLoop::Now(), cost);
}

Server::~Server() {
  store_->SetWriterOpen(nullptr);
  for (auto& kv : inbound_) {
    if (kv.second.probation_timer != 0) loop_->CancelTimer(kv.second.probation_timer);
  }
  verifier_.reset();
  mirror_.reset();
  scrubber_.reset();
  get_local_.reset();
  conns_.clear();
  graveyard_.clear();
  if (listen_fd_ >= 0) {
    loop_->RemoveFd(listen_fd_);
    ::close(listen_fd_);
  }
}

Status Server::Start() {
  Status s = ListenTcp(options_.host, options_.port, 1024, &listen_fd_, &port_);
  if (!s.ok()) return s;
  advertise_ =
      options_.advertise.empty() ? options_.host + ":" + std::to_string(port_) : options_.advertise;

  GetLocalOptions gl;
  gl.advertise = advertise_;
  gl.namespace_dir = options_.namespace_dir;
  gl.copies = options_.copies;
  gl.cache_s = options_.get_local_cache_s;
  gl.timeout_base_s = options_.ring_timeout_base_s;
  gl.timeout_per_peer_s = options_.ring_timeout_per_peer_s;
  gl.timeout_per_million_s = options_.ring_timeout_per_million_s;
  get_local_ = std::make_unique<GetLocal>(loop_, store_, gl, this);

  VerifierOptions vo;
  vo.interval_s = options_.verify_interval_s;
  vo.bytes_per_s = options_.verify_bytes_per_s;
  verifier_ = std::make_unique<Verifier>(loop_, store_, vo, &bad_copies_);
  verifier_->Start();

  if (!options_.namespace_dir.empty() || options_.copies != nullptr) {
    // With copies (--metadata fetch) the scrubber reads them, brought to the
    // tracker's latest, instead of the namespace (scrub_plan.h).
    ScrubberOptions so;
    so.namespace_dir = options_.namespace_dir;
    so.copies = options_.copies;
    so.interval_s = options_.scrub_interval_s;
    so.age_s = options_.scrub_age_s;
    scrubber_ = std::make_unique<Scrubber>(loop_, store_, so);
    scrubber_->Start();
  }
  if (!options_.namespace_dir.empty()) {
    if (options_.mirror_interval_s > 0 && options_.copies == nullptr) {
      MetaMirrorOptions mo;
      mo.namespace_dir = options_.namespace_dir;
      mo.interval_s = options_.mirror_interval_s;
      mo.remove_after_s = options_.scrub_age_s;
      mirror_ = std::make_unique<MetaMirror>(loop_, store_, mo);
      mirror_->Start();
    }
  }
  if (options_.copies != nullptr && options_.mirror_interval_s > 0) {
    // --metadata fetch: the copies are the mirrors (LIST_META, GET_META),
    // brought to the tracker's latest every --mirror-interval.
    MetaMirrorOptions mo;
    mo.copies = options_.copies;
    mo.interval_s = options_.mirror_interval_s;
    mo.remove_after_s = options_.scrub_age_s;
    mirror_ = std::make_unique<MetaMirror>(loop_, store_, mo);
    mirror_->Start();
  }

  admission_.Start();

  return loop_->AddFd(listen_fd_, EventLoop::kReadable, [this](int) { OnAccept(); });
}

void Server::PauseAccept() {
  // Out of file descriptors: stop accepting for a moment instead of spinning.
  if (accept_paused_) return;
  accept_paused_ = true;
  loop_->ModifyFd(listen_fd_, 0);
  loop_->AddTimer(0.1, [this] {
    accept_paused_ = false;
    loop_->ModifyFd(listen_fd_, EventLoop::kReadable);
  });
}

void Server::OnAccept() {
  for (int i = 0; i < 64; ++i) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listen_fd_, reinterpret_cast<struct sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ST_LOG_WARN("accept: %s; pausing accepts for 100 ms", std::strerror(errno));
        PauseAccept();
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ST_LOG_WARN("accept: %s", std::strerror(errno));
      }
      return;
    }
    SetNoDelay(fd);
    AcceptConnection(std::make_unique<SocketTransport>(loop_, fd),
                     SockAddrString(reinterpret_cast<struct sockaddr*>(&ss)));
  }
}

void Server::AcceptConnection(std::unique_ptr<Transport> transport, std::string remote) {
  Kind kind = Kind::kClient;
  if (options_.max_connections > 0 &&
      kind_count_[static_cast<int>(Kind::kClient)] >= options_.max_connections) {
    // Over the limit: it may still be a ring peer's link (its first frame
    // tells), so it gets a short probation unless too many are pending.
    if (kind_count_[static_cast<int>(Kind::kProbation)] +
            kind_count_[static_cast<int>(Kind::kRefused)] >=
        kMaxProbation) {
      RefuseNow(transport.get(), remote);
      return;
    }
    kind = Kind::kProbation;
  }
  Connection* c = Adopt(std::move(transport), std::move(remote), false);
  if (c == nullptr) return;
  uint64_t id = c->id();
  Inbound& in = inbound_.emplace(id, Inbound{kind, false, 0, {}}).first->second;
  ++kind_count_[static_cast<int>(kind)];
  if (kind == Kind::kProbation) {
    c->SetTimeouts(options_.idle_timeout_s, 0);
    in.probation_timer = loop_->AddTimer(kProbationSeconds, [this, id] {
      auto it = inbound_.find(id);
      if (it == inbound_.end()) return;
      it->second.probation_timer = 0;
      if (it->second.kind != Kind::kProbation) return;
      auto cit = conns_.find(id);
      if (cit == conns_.end() || cit->second->closed()) return;
      if (kind_count_[static_cast<int>(Kind::kClient)] < options_.max_connections) {
        SetKind(id, &it->second, Kind::kClient);  // a slot came free meanwhile
        cit->second->SetTimeouts(options_.idle_timeout_s, options_.keepalive_timeout_s);
        return;
      }
      Refuse(cit->second.get(), &it->second, "");
    });
  }
}

void Server::SetKind(uint64_t id, Inbound* in, Kind kind) {
  (void)id;
  --kind_count_[static_cast<int>(in->kind)];
  ++kind_count_[static_cast<int>(kind)];
  in->kind = kind;
}

std::string Server::BusyMessage() const {
  return "this peer is at its limit of " + std::to_string(options_.max_connections) +
         " client connections (st-peer --max-connections); closing this one: retry later or "
         "use another peer";
}

void Server::NoteRefusal(const std::string& remote) {
  ++refused_since_log_;
  double now = EventLoop::Now();
  if (now < refusal_log_at_) return;
  ST_LOG_WARN("refused %llu connection(s) with BUSY (the latest from %s): %zu client connections "
              "are open, the limit of --max-connections; %zu ring links",
              static_cast<unsigned long long>(refused_since_log_), remote.c_str(),
              kind_count_[static_cast<int>(Kind::kClient)],
              kind_count_[static_cast<int>(Kind::kRing)]);
  refused_since_log_ = 0;
  refusal_log_at_ = now + 10;  // at most one line per 10 s
}

void Server::Refuse(Connection* c, Inbound* in, const std::string& why) {
  if (in->probation_timer != 0) {
    loop_->CancelTimer(in->probation_timer);
    in->probation_timer = 0;
  }
  SetKind(c->id(), in, Kind::kRefused);
  NoteRefusal(c->remote());
  c->SendErrorAndClose(0, ErrorCode::kBusy, why.empty() ? BusyMessage() : why, /*log=*/false);
}

void Server::RefuseNow(Transport* t, const std::string& remote) {
  // Too many connections waiting to be refused: no Connection for this one.
  // Whatever it already sent is read first, so that closing does not reset
  // the connection before the error frame is read (best effort; the socket
  // is non-blocking).
  char scratch[4096];
  for (int i = 0; i < 16 && t->Read(scratch, sizeof(scratch)) > 0; ++i) {
  }
  std::string f = EncodeError(0, ErrorCode::kBusy, BusyMessage());
  struct iovec iov = {f.data(), f.size()};
  ssize_t n = t->Writev(&iov, 1, /*more=*/false);
  (void)n;
  t->ShutdownWrite();
  t->Close();
  NoteRefusal(remote);
}

void Server::OnFrameStart(Connection* c, const FrameHeader& h) {
  auto it = inbound_.find(c->id());
  if (it == inbound_.end() || it->second.classified) return;
  // A ring link sends AUTH before its first RING_SEGMENT, and so does a
  // client before its first request: the frame after the AUTHs tells. (A
  // connection on probation stays on it meanwhile: its timer still runs.)
  if (h.type == static_cast<uint8_t>(MsgType::kAuth)) return;
  Inbound& in = it->second;
  in.classified = true;
  if (in.probation_timer != 0) {
    loop_->CancelTimer(in.probation_timer);
    in.probation_timer = 0;
  }
  if (h.type == static_cast<uint8_t>(MsgType::kRingSegment) ||
      (h.type == static_cast<uint8_t>(MsgType::kPutChain) && (h.flags & kFlagForwarded))) {
    // A ring predecessor's link (GET_LOCAL, or a chain of copies): it does not take a client slot,
    // and it is kept open between collectives (no keepalive timeout).
    if (options_.max_connections > 0 &&
        kind_count_[static_cast<int>(Kind::kRing)] >= options_.max_connections) {
      Refuse(c, &in,
             "this peer already has " + std::to_string(options_.max_connections) +
                 " inbound ring links (st-peer --max-connections); closing this one");
      return;
    }
    SetKind(c->id(), &in, Kind::kRing);
    c->SetTimeouts(options_.idle_timeout_s, 0);
    return;
  }
  if (in.kind != Kind::kProbation) return;
  if (kind_count_[static_cast<int>(Kind::kClient)] < options_.max_connections) {
    SetKind(c->id(), &in, Kind::kClient);  // a slot came free meanwhile
    c->SetTimeouts(options_.idle_timeout_s, options_.keepalive_timeout_s);
    return;
  }
  Refuse(c, &in, "");
}

Connection* Server::Adopt(std::unique_ptr<Transport> transport, std::string remote,
                          bool connecting) {
  uint64_t id = ++next_conn_id_;
  auto conn = std::make_unique<Connection>(loop_, std::move(transport), id, std::move(remote),
                                           options_.max_frame, this);
  Connection* raw = conn.get();
  conns_[id] = std::move(conn);
  // Outgoing ring links stay open between collectives: no keepalive limit.
  raw->SetTimeouts(options_.idle_timeout_s, connecting ? 0 : options_.keepalive_timeout_s);
  if (!connecting) {  // inbound: requests to this peer
    raw->SetMetrics(&metrics_);
    metrics_.connections_accepted.fetch_add(1, std::memory_order_relaxed);
  }
  Status s = raw->Start(connecting);
  if (!s.ok()) {
    ST_LOG_WARN("cannot watch connection %s: %s", raw->remote().c_str(), s.ToString().c_str());
    raw->Close(s.ToString());
    return nullptr;
  }
  ST_LOG_DEBUG("connection %llu %s %s", static_cast<unsigned long long>(id),
               connecting ? "to" : "from", raw->remote().c_str());
  return raw;
}

void Server::OnClosed(Connection* conn, const std::string& reason) {
  uint64_t id = conn->id();
  auto in = inbound_.find(id);
  if (in != inbound_.end()) {
    if (in->second.probation_timer != 0) loop_->CancelTimer(in->second.probation_timer);
    --kind_count_[static_cast<int>(in->second.kind)];
    inbound_.erase(in);
  }
  if (!links_.OnClosed(id, reason)) {
    ST_LOG_DEBUG("connection %s closed: %s", conn->remote().c_str(), reason.c_str());
  }
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  graveyard_.push_back(std::move(it->second));
  conns_.erase(it);
  if (graveyard_.size() == 1) loop_->Post([this] { graveyard_.clear(); });
}

void Server::OnBatchStart(Connection*) { BeginCork(); }

void Server::OnBatchEnd(Connection*) { EndCork(); }

void Server::EndCork() {
  if (cork_depth_ == 0 || --cork_depth_ > 0) return;
  std::vector<uint64_t> ids;
  ids.swap(corked_);
  for (uint64_t id : ids) {
    // Looked up again: an Uncork may close a connection (and move it out).
    auto it = conns_.find(id);
    if (it != conns_.end()) it->second->Uncork();
  }
}

void Server::SendToClient(uint64_t conn_id, std::string frame) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end() || it->second->closed()) return;
  if (cork_depth_ > 0 && !it->second->corked()) {
    it->second->Cork();
    corked_.push_back(conn_id);
  }
  // Every deferred request (GET_LOCAL, SCRUB) ends with one frame without
  // MORE; the connection is not idle until then.
  bool last = frame.size() < kFramePrefixSize ||
              (DecodeFixed16(reinterpret_cast<const uint8_t*>(frame.data()) + 6) & kFlagMore) == 0;
  // Send may close the connection, which moves it to the graveyard (still
  // alive until a posted task frees it) and invalidates `it`.
  Connection* c = it->second.get();
  c->Send(std::move(frame));
  if (last) c->EndDeferred();
}

Connection* Server::AdoptLink(int fd, std::string remote) {
  return Adopt(std::make_unique<SocketTransport>(loop_, fd), std::move(remote),
               /*connecting=*/true);
}

Connection* Server::FindOpen(uint64_t id) {
  auto c = conns_.find(id);
  return c != conns_.end() && !c->second->closed() ? c->second.get() : nullptr;
}

void Server::OnLinkFailed(const std::string& addr, const std::string& why) {
  if (get_local_) get_local_->OnPeerUnreachable(addr, why);
}

void Server::SendSegment(const std::string& addr, uint16_t flags, std::string payload) {
  std::string error;
  if (!links_.Send(addr, MsgType::kRingSegment, flags, payload, &error)) {
    ST_LOG_WARN("cannot connect to ring peer %s: %s", addr.c_str(), error.c_str());
    loop_->Post([this, addr, error] {
      if (get_local_) get_local_->OnPeerUnreachable(addr, error);
    });
  }
}

uint64_t Server::Now() const { return options_.clock ? options_.clock() : UnixNow(); }

void Server::OnFrame(Connection* c, const FrameHeader& h, std::string_view payload) {
  if (links_.OnFrame(c, h, payload)) return;  // a reply on an outgoing link
  HandleRequest(c, h, payload);
}

void Server::HandleScrub(Connection* c, const FrameHeader& h, std::string_view, Request*) {
  const uint64_t seq = h.seq;
  if (!scrubber_) {
    c->Send(EncodeError(seq, ErrorCode::kNoNamespace,
                        "this peer has neither a namespace root nor infofile copies, so it cannot "
                        "tell committed records from stale ones; start st-peer with --namespace "
                        "<dir> or --tracker (--metadata fetch) to scrub"));
    return;
  }
  uint64_t conn_id = c->id();
  c->BeginDeferred();
  const bool copies = scrubber_->from_copies();
  scrubber_->Request([this, conn_id, seq, copies](const Status& s, const ScrubReply& counts) {
    if (s.ok()) {
      SendToClient(conn_id, EncodeScrubReply(seq, counts));
    } else {
      // Unavailable: the namespace root cannot be read, or (copies) the tracker cannot be reached.
      ErrorCode code = !s.IsUnavailable() ? ErrorCode::kIoError
                       : copies           ? ErrorCode::kStaleInfofile
                                          : ErrorCode::kNoNamespace;
      SendToClient(conn_id,
                   EncodeError(seq, code, "scrub failed, nothing removed: " + s.message()));
    }
  });
}

namespace {

const char kNoMirrors[] =
    "this peer keeps no infofile mirrors: start st-peer with --namespace <dir> and a "
    "--mirror-interval above 0";

}  // namespace

void Server::HandleListMeta(Connection* c, const FrameHeader& h, std::string_view, Request*) {
  const uint64_t seq = h.seq;
  if (!mirror_) {
    c->Send(EncodeError(seq, ErrorCode::kNoNamespace, kNoMirrors));
    return;
  }
  uint64_t conn_id = c->id();
  c->BeginDeferred();
  // Before the first pass has read <data>/meta/ the catalog is empty: wait for it.
  mirror_->AfterFirstPass([this, conn_id, seq] {
    std::vector<MetaListEntry> entries;
    entries.reserve(mirror_->catalog().size());
    for (const auto& kv : mirror_->catalog()) entries.push_back(kv.second);
    for (std::string& f : EncodeMetaListFrames(seq, entries, 256 * 1024)) {
      SendToClient(conn_id, std::move(f));
    }
  });
}

void Server::HandleGetMeta(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  const GetMetaRequest req = std::get<GetMetaRequest>(r->body);
  const uint64_t seq = h.seq;
  if (!mirror_) {
    c->Send(EncodeError(seq, ErrorCode::kNoNamespace, kNoMirrors));
    return;
  }
  uint64_t conn_id = c->id();
  c->BeginDeferred();
  mirror_->AfterFirstPass([this, conn_id, seq, req] {
    char id[17];
    std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(req.file_id));
    if (mirror_->catalog().count(req.file_id) == 0) {
      SendToClient(conn_id, EncodeError(seq, ErrorCode::kNotFound,
                                        std::string("this peer has no mirror of file ") + id));
      return;
    }
    // At most what one DATA frame under this peer's --max-frame carries.
    size_t limit = options_.max_frame > kHeaderSize + 5 ? options_.max_frame - kHeaderSize - 5 : 0;
    size_t want = std::min<size_t>(req.length, limit);
    std::string path = mirror_->PathOf(req.file_id);
    Env* env = store_->env();
    auto data = std::make_shared<std::string>();
    auto status = std::make_shared<Status>();
    uint64_t offset = req.offset;
    background_.Schedule(
        [env, path, offset, want, data, status] {
          std::unique_ptr<RandomAccessFile> f;
          *status = env->NewRandomAccessFile(path, &f);
          if (!status->ok()) return;
          data->resize(want);
          size_t done = 0;
          while (done < want) {
            size_t got = 0;
            *status = f->Read(offset + done, want - done, &(*data)[done], &got);
            if (!status->ok()) return;
            if (got == 0) break;
            done += got;
          }
          data->resize(done);
        },
        [this, conn_id, seq, id = std::string(id), data, status] {
          if (status->IsNotFound()) {
            SendToClient(conn_id, EncodeError(seq, ErrorCode::kNotFound,
                                              "the mirror of file " + id + " is gone"));
          } else if (!status->ok()) {
            ST_LOG_WARN("GET_META of file %s: %s", id.c_str(), status->ToString().c_str());
            SendToClient(conn_id, EncodeError(seq, ErrorCode::kIoError, status->message()));
          } else {
            SendToClient(conn_id, EncodeData(seq, crc32c::Value(*data), 0, *data));
          }
        });
  });
}

void Server::HandleAuth(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  const uint64_t seq = h.seq;
  std::string_view token = std::get<std::string_view>(r->body);
  if (!checks_capabilities()) {
    // Without a key nothing is checked (development mode, logged at start).
    c->Send(EncodeOk(seq));
    return;
  }
  auto it = inbound_.find(c->id());
  if (it == inbound_.end()) {
    c->Send(EncodeError(seq, ErrorCode::kInternal,
                        "AUTH on a connection the server does not track (server.cc, HandleAuth)"));
    return;
  }
  uint64_t now = Now();
  Capability cap;
  Status s = VerifyToken(options_.capability_key, token, now, &cap);
  if (!s.ok()) {
    ST_LOG_INFO("refused a capability from %s: %s", c->remote().c_str(), s.message().c_str());
    c->Send(EncodeError(seq, ErrorCode::kDenied, "AUTH refused: " + s.message()));
    return;
  }
  ST_LOG_DEBUG("connection %s: capability %s on file %016llx for '%s', expires at %llu",
               c->remote().c_str(), OpsText(cap.ops).c_str(),
               static_cast<unsigned long long>(cap.file_id), Printable(cap.user, 64).c_str(),
               static_cast<unsigned long long>(cap.expires));
  it->second.caps.Add(cap, now);
  c->Send(EncodeOk(seq));
}

bool Server::Allowed(Connection* c, uint64_t seq, uint8_t type, uint64_t file_id, uint8_t op) {
  if (!checks_capabilities()) return true;
  std::string why;
  auto it = inbound_.find(c->id());
  if (it == inbound_.end()) {
    why = "the server does not track this connection (server.cc, Allowed)";
  } else if (it->second.caps.Check(file_id, op, Now(), &why)) {
    return true;
  }
  const char* name = MsgTypeName(type);
  std::string msg = std::string(name != nullptr ? name : "request") + " denied: " + why;
  ++denied_since_log_;
  double now = EventLoop::Now();
  if (now >= denied_log_at_) {
    ST_LOG_INFO("denied %llu request(s) for want of a capability (the latest from %s: %s)",
                static_cast<unsigned long long>(denied_since_log_), c->remote().c_str(),
                msg.c_str());
    denied_since_log_ = 0;
    denied_log_at_ = now + 10;  // at most one line per 10 s
  }
  c->Send(EncodeError(seq, ErrorCode::kDenied, msg));
  return false;
}

std::string Server::PutReply(uint64_t seq, uint64_t file_id, std::string_view name,
                             const Status& s) {
  if (s.ok()) return EncodeOk(seq);
  ErrorCode code = s.IsNotFound() ? ErrorCode::kIoError : StoreErrorCode(s);
  if (code == ErrorCode::kIoError || code == ErrorCode::kNoSpace) {
    ST_LOG_WARN("PUT '%s' of file %016llx: %s", Printable(name).c_str(),
                static_cast<unsigned long long>(file_id), s.ToString().c_str());
  }
  std::string msg = s.message();
  if (code == ErrorCode::kBadName) msg = "record name refused: " + msg;
  return EncodeError(seq, code, msg);
}

std::string Server::GetError(uint64_t seq, uint64_t file_id, std::string_view name,
                             const Status& s) {
  if (s.IsCorruption() || s.IsIOError()) {
    ST_LOG_WARN("GET '%s' of file %016llx: %s", Printable(name).c_str(),
                static_cast<unsigned long long>(file_id), s.ToString().c_str());
  }
  return EncodeError(seq, StoreErrorCode(s), s.message());
}

void Server::StoreRecord(std::shared_ptr<OwnedPut> put, StoreDone done) {
  if (store_->sync()) {
    StoreOffLoop(std::move(put), std::move(done));
    return;
  }
  done(store_->Put(put->file_id, put->copy_rank, put->crc, put->name, put->data, put->mode));
}

void Server::StoreOffLoop(std::shared_ptr<OwnedPut> put, StoreDone done) {
  auto pending = std::make_shared<RecordStore::PendingPut>();  // WritePut fills in its ctime
  Status s = store_->BeginPut(put->file_id, put->copy_rank, put->crc, put->name, put->data,
                              put->mode, pending.get());
  std::string key = std::to_string(put->file_id) + "/" + put->name;
  if (s.IsUnavailable()) {
    // A PUT of the same record is being written: this one runs after it.
    put_waiters_[key].push_back([this, put, done] { StoreOffLoop(put, done); });
    return;
  }
  if (!s.ok() || !pending->write) {
    done(s);
    return;
  }
  auto result = std::make_shared<Status>();
  RecordStore* store = store_;
  bool group = !store_->sync_each();
  background_.Schedule([store, pending, put,
                        result] { *result = store->WritePut(pending.get(), put->data); },
                       [this, pending, result, key, done, group, put] {
                         if (group && result->ok()) {
                           // Written (in parallel with other PUTs); durable
                           // with the next group fsync, answered after it.
                           sync_waiting_.push_back(SyncItem{put, *pending, done, key, Status()});
                           MaybeGroupSync();
                           return;
                         }
                         done(store_->FinishPut(*pending, *result));
                         RunPutWaiters(key);
                       });
}

void Server::RunPutWaiters(const std::string& key) {
  auto w = put_waiters_.find(key);
  if (w == put_waiters_.end()) return;
  std::vector<std::function<void()>> waiting;
  waiting.swap(w->second);
  put_waiters_.erase(w);
  for (auto& run : waiting) run();
}

void Server::MaybeGroupSync() {
  if (sync_in_flight_ || sync_waiting_.empty()) return;
  auto batch = std::make_shared<std::vector<SyncItem>>();
  batch->swap(sync_waiting_);
  sync_in_flight_ = true;
  RecordStore* store = store_;
  auto synced = std::make_shared<Status>();
  background_.Schedule(
      [store, batch, synced] {
        // One syncfs for every record written since the last one.
        *synced = store->SyncAll();
        if (synced->ok()) return;
        for (auto& item : *batch) store->RemoveWritten(item.pending);  // refused: must not stay
      },
      [this, batch, synced] {
        sync_in_flight_ = false;
        ++sync_batches_;
        BeginCork();  // the batch's replies: one sendmsg per client connection
        for (auto& item : *batch) {
          item.done(store_->FinishPut(item.pending, *synced));
          RunPutWaiters(item.key);
        }
        EndCork();
        MaybeGroupSync();  // the PUTs written meanwhile, as one batch
      });
}

void Server::HandlePutChain(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  const PutChainRequest& req = std::get<PutChainRequest>(r->body);
  const uint64_t seq = h.seq;
  const uint16_t flags = h.flags;
  auto chain = std::make_shared<ChainPut>();
  chain->flags = flags;
  for (std::string_view hop : req.hops) {
    std::string host, port;
    std::string h(hop);
    if (!SplitHostPort(h, &host, &port)) {
      c->Send(EncodeError(seq, ErrorCode::kBadFrame,
                          "PUT_CHAIN hop '" + Printable(h) + "' is not a host:port address"));
      return;
    }
    if (h == advertise_) {
      c->Send(EncodeError(seq, ErrorCode::kBadFrame,
                          "PUT_CHAIN names this peer (" + advertise_ +
                              ") as a later holder: a chain needs distinct peers"));
      return;
    }
    chain->hops.push_back(std::move(h));
  }
  // The bytes outlive the frame: they are forwarded after the copy here is stored.
  auto put = std::make_shared<OwnedPut>();
  put->file_id = req.file_id;
  put->copy_rank = req.copy_rank;
  put->crc = req.crc32c;
  put->name.assign(req.name);
  put->data.assign(req.data);
  put->mode.replace = (flags & kFlagReplace) != 0;
  // A forwarded copy's writer is the chain's head, not this link: unknown.
  if (!(flags & kFlagForwarded)) {
    put->mode.leftover = (flags & kFlagLeftover) != 0;
    put->mode.writer = c->id();
  }
  chain->put = put;
  uint64_t conn_id = c->id();
  c->BeginDeferred();
  StoreRecord(put, [this, conn_id, seq, chain](const Status& s) {
    const OwnedPut& p = *chain->put;
    if (!s.ok()) {  // this peer's own copy: the error names no other peer
      SendToClient(conn_id, PutReply(seq, p.file_id, p.name, s));
      return;
    }
    if (chain->hops.empty()) {
      SendToClient(conn_id, EncodeOk(seq));
      return;
    }
    if (chain->flags & kFlagAsync) {
      SendToClient(conn_id, EncodeFrame(MsgType::kOk, kFlagMore, seq, ""));
    }
    ForwardChain(conn_id, seq, chain);
  });
}

void Server::ForwardChain(uint64_t conn_id, uint64_t seq, std::shared_ptr<ChainPut> chain) {
  const OwnedPut& p = *chain->put;
  const std::string hop = chain->hops[0];
  const unsigned rank = static_cast<unsigned>(p.copy_rank) + 1;
  uint16_t flags = kFlagForwarded | (chain->flags & kFlagReplace);
  double timeout = options_.chain_timeout_s * static_cast<double>(chain->hops.size());
  CallLink(
      hop,
      [&](uint64_t link_seq) {
        PutChainRequest next;
        next.file_id = p.file_id;
        next.copy_rank = static_cast<uint8_t>(rank);
        next.crc32c = p.crc;
        next.name = p.name;
        for (size_t i = 1; i < chain->hops.size(); ++i) next.hops.push_back(chain->hops[i]);
        next.data = p.data;
        return EncodePutChain(link_seq, flags, next);
      },
      timeout,
      [this, conn_id, seq, chain, hop, rank](const FrameHeader* h, std::string_view payload,
                                             const std::string& failure) {
        std::string stored = "copies 0.." + std::to_string(rank - 1) + " are stored";
        if (h != nullptr && h->type == static_cast<uint8_t>(MsgType::kOk)) {
          SendToClient(conn_id, EncodeOk(seq));
          return;
        }
        ErrorCode code = ErrorCode::kPeerUnreachable;
        std::vector<std::string> peers{hop};
        std::string msg;
        ErrorReply e;
        if (h == nullptr) {
          msg = "cannot forward copy " + std::to_string(rank) + " to " + hop + ": " + failure;
        } else if (h->type == static_cast<uint8_t>(MsgType::kError) &&
                   DecodeError(payload, &e).ok()) {
          code = static_cast<ErrorCode>(e.code);
          if (!e.peers.empty()) peers = e.peers;  // a peer further down failed
          msg = "chain: " + e.message;
          if (e.peers.empty())
            msg = "copy " + std::to_string(rank) + " on " + hop + ": " + e.message;
        } else {
          msg = "peer " + hop + " answered a forwarded PUT_CHAIN with a frame of type " +
                std::to_string(h->type);
        }
        if (msg.compare(0, 7, "chain: ") != 0) msg += " (" + stored + ")";
        SendToClient(conn_id, EncodeError(seq, code, msg, peers));
      });
}

void Server::CallLink(const std::string& addr, const std::function<std::string(uint64_t)>& build,
                      double timeout_s, LinkDone done) {
  links_.Call(addr, build, timeout_s, std::move(done));
}

void Server::SendRecordToClient(uint64_t conn_id, uint64_t seq, RecordStore::ReadHandle* rec) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end() || it->second->closed()) return;  // the handle closes the file
  Connection* c = it->second.get();
  c->Send(EncodeDataHeader(seq, rec->crc, rec->copy_rank, rec->size));
  c->SendFile(rec->file->ReleaseFd(), rec->size);
  c->EndDeferred();
}

// ---- The request table ------------------------------------------------------------

namespace {

// Decoders: the payload into Request::body, and the file and record name
// the shared checks need.

Status DecodePutRequest(uint16_t, std::string_view payload, Server::Request* req) {
  PutRequest& put = req->body.emplace<PutRequest>();
  Status s = DecodePut(payload, &put);
  req->file_id = put.file_id;
  return s;
}

Status DecodePutChainRequest(uint16_t, std::string_view payload, Server::Request* req) {
  PutChainRequest& chain = req->body.emplace<PutChainRequest>();
  Status s = DecodePutChain(payload, &chain);
  req->file_id = chain.file_id;
  return s;
}

Status DecodeNameRequest(uint16_t, std::string_view payload, Server::Request* req) {  // GET, DELETE
  NameRequest& name = req->body.emplace<NameRequest>();
  Status s = DecodeName(payload, &name);
  req->file_id = name.file_id;
  req->name = name.name;
  return s;
}

Status DecodeDeleteFileRequest(uint16_t, std::string_view payload, Server::Request* req) {
  return DecodeDeleteFile(payload, &req->file_id);
}

Status DecodeGetLocalRequest(uint16_t flags, std::string_view payload, Server::Request* req) {
  RingHeader& ring = req->body.emplace<RingHeader>();
  Status s = DecodeGetLocal(payload, flags, &ring);
  req->file_id = ring.file_id;
  return s;
}

Status DecodePingRequest(uint16_t, std::string_view payload, Server::Request*) {
  return DecodePing(payload);
}

Status DecodeScrubRequest(uint16_t, std::string_view payload, Server::Request*) {
  return DecodeScrub(payload);
}

Status DecodeAuthRequest(uint16_t, std::string_view payload, Server::Request* req) {
  return DecodeAuth(payload, &req->body.emplace<std::string_view>());
}

Status DecodeListMetaRequest(uint16_t, std::string_view payload, Server::Request*) {
  return DecodeListMeta(payload);
}

Status DecodeGetMetaRequest(uint16_t, std::string_view payload, Server::Request* req) {
  GetMetaRequest& meta = req->body.emplace<GetMetaRequest>();
  Status s = DecodeGetMeta(payload, &meta);
  req->file_id = meta.file_id;
  return s;
}

Status DecodeRingSegmentRequest(uint16_t flags, std::string_view payload, Server::Request* req) {
  RingSegment& seg = req->body.emplace<RingSegment>();
  Status s = DecodeRingSegment(payload, flags, &seg);
  req->file_id = seg.ring.file_id;
  return s;
}

}  // namespace

const std::vector<Server::RequestType>& Server::RequestTable() {
  // type, operation, flags, decoder, handler. The operations are those of
  // docs/capabilities.md: a client's PUT_CHAIN needs WRITE, a peer's
  // forwarded one PEER; GET_META needs READ on the file or ADMIN on every
  // file; SCRUB and LIST_META name files and records: ADMIN on every file.
  static const std::vector<RequestType> table = {
      {MsgType::kPut, kOpWrite, kWriteBytes, DecodePutRequest, &Server::HandlePut},
      {MsgType::kPutChain, kOpWrite, kWriteBytes | kPeerIfForwarded, DecodePutChainRequest,
       &Server::HandlePutChain},
      {MsgType::kGet, kOpRead, kReadBytes | kCheckName, DecodeNameRequest, &Server::HandleGet},
      {MsgType::kDelete, kOpDelete, kCheckName, DecodeNameRequest, &Server::HandleDelete},
      {MsgType::kDeleteFile, kOpDelete, 0, DecodeDeleteFileRequest, &Server::HandleDeleteFile},
      {MsgType::kGetLocal, kOpRead, 0, DecodeGetLocalRequest, &Server::HandleGetLocal},
      {MsgType::kPing, 0, kNeverHeld, DecodePingRequest, &Server::HandlePing},
      {MsgType::kScrub, kOpAdmin, 0, DecodeScrubRequest, &Server::HandleScrub},
      {MsgType::kAuth, 0, kNeverHeld, DecodeAuthRequest, &Server::HandleAuth},
      {MsgType::kListMeta, kOpAdmin, 0, DecodeListMetaRequest, &Server::HandleListMeta},
      {MsgType::kGetMeta, kOpRead, kOrAdmin, DecodeGetMetaRequest, &Server::HandleGetMeta},
      {MsgType::kRingSegment, kOpPeer, kNeverHeld, DecodeRingSegmentRequest,
       &Server::HandleRingSegment},
  };
  return table;
}

const Server::RequestType* Server::FindRequestType(uint8_t type) {
  static const auto* const by_type = [] {
    auto* index = new std::array<const RequestType*, 256>();
    for (const RequestType& row : RequestTable()) (*index)[static_cast<uint8_t>(row.type)] = &row;
    return index;
  }();
  return (*by_type)[type];
}

void Server::HandleRequest(Connection* c, const FrameHeader& h, std::string_view payload) {
  const RequestType* row = FindRequestType(h.type);
  if (row == nullptr) {
    char msg[160];
    std::snprintf(msg, sizeof(msg),
                  "message type 0x%02x is not a request this peer knows (protocol version 1); "
                  "frame skipped",
                  h.type);
    c->Send(EncodeError(h.seq, ErrorCode::kUnknownType, msg));
    return;
  }
  Request req;
  Status s = row->decode(h.flags, payload, &req);
  if (!s.ok()) {
    c->SendErrorAndClose(h.seq, ErrorCode::kBadFrame,
                         std::string(MsgTypeName(h.type)) + " payload does not parse: " +
                             s.message() + "; closing the connection");
    return;
  }
  if (!Permitted(c, h, *row, req)) return;
  if (row->flags & kCheckName) {
    s = ValidateRecordName(req.name);
    if (!s.ok()) {
      c->Send(EncodeError(h.seq, ErrorCode::kBadName, "record name refused: " + s.message()));
      return;
    }
  }
  (this->*row->handle)(c, h, payload, &req);
}

bool Server::Permitted(Connection* c, const FrameHeader& h, const RequestType& row,
                       const Request& req) {
  if (row.op == 0 || !checks_capabilities()) return true;
  uint8_t op = (row.flags & kPeerIfForwarded) && (h.flags & kFlagForwarded) ? kOpPeer : row.op;
  if (row.flags & kOrAdmin) {
    auto it = inbound_.find(c->id());
    std::string why;
    if (it != inbound_.end() && it->second.caps.Check(req.file_id, op, Now(), &why)) return true;
    return Allowed(c, h.seq, h.type, 0, kOpAdmin);
  }
  return Allowed(c, h.seq, h.type, req.file_id, op);
}

// ---- The handlers -------------------------------------------------------------------

void Server::HandlePut(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  const PutRequest& req = std::get<PutRequest>(r->body);
  const uint64_t seq = h.seq;
  PutMode mode;
  mode.replace = (h.flags & kFlagReplace) != 0;
  mode.leftover = (h.flags & kFlagLeftover) != 0;
  mode.writer = c->id();
  if (store_->sync()) {
    // The fsyncs run off the loop; the frame's buffer does not outlive
    // this call, so the PUT takes a copy.
    auto put = std::make_shared<OwnedPut>();
    put->file_id = req.file_id;
    put->copy_rank = req.copy_rank;
    put->crc = req.crc32c;
    put->name.assign(req.name);
    put->data.assign(req.data);
    put->mode = mode;
    uint64_t conn_id = c->id();
    c->BeginDeferred();
    StoreOffLoop(put, [this, conn_id, seq, put](const Status& st) {
      SendToClient(conn_id, PutReply(seq, put->file_id, put->name, st));
    });
    return;
  }
  Status s = store_->Put(req.file_id, req.copy_rank, req.crc32c, req.name, req.data, mode);
  c->Send(PutReply(seq, req.file_id, req.name, s));
}

void Server::HandleGet(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  const NameRequest& req = std::get<NameRequest>(r->body);
  const uint64_t seq = h.seq;
  auto rec = std::make_shared<RecordStore::ReadHandle>();
  Status s = store_->OpenForRead(req.file_id, req.name, rec.get());
  if (!s.ok()) {
    c->Send(GetError(seq, req.file_id, req.name, s));
    return;
  }
  if (rec->size + kHeaderSize + 5 > 0xFFFFFFFFull) {
    c->Send(EncodeError(seq, ErrorCode::kInternal,
                        "record of " + std::to_string(rec->size) +
                            " bytes does not fit in one frame (server.cc, GET)"));
    return;
  }
  admission_.TakeRead(EventLoop::Now(), static_cast<double>(rec->size));
  if (rec->verified) {
    c->Send(EncodeDataHeader(seq, rec->crc, rec->copy_rank, rec->size));
    c->SendFile(rec->file->ReleaseFd(), rec->size);
    return;
  }
  // Not read since the peer started or since it was written to: its
  // CRC-32C is checked first, off the loop (it reads the whole file).
  uint64_t conn_id = c->id();
  uint64_t file_id = req.file_id;
  std::string name(req.name);
  auto result = std::make_shared<Status>();
  c->BeginDeferred();
  background_.Schedule([rec, result] { *result = RecordStore::VerifyRead(*rec); },
                       [this, conn_id, seq, file_id, name, rec, result] {
                         if (!result->ok()) {
                           SendToClient(conn_id, GetError(seq, file_id, name, *result));
                           return;
                         }
                         store_->MarkVerified(file_id, name, *rec);
                         SendRecordToClient(conn_id, seq, rec.get());
                       });
}

void Server::HandleDelete(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  const NameRequest& req = std::get<NameRequest>(r->body);
  const uint64_t seq = h.seq;
  std::string dir_to_sync;
  Status s = store_->Delete(req.file_id, req.name, &dir_to_sync);
  if (!s.ok() || dir_to_sync.empty()) {
    c->Send(s.ok() ? EncodeOk(seq) : EncodeError(seq, StoreErrorCode(s), s.message()));
    return;
  }
  // Under --sync the name's removal is made durable before the OK, off the loop.
  uint64_t conn_id = c->id();
  Env* env = store_->env();
  c->BeginDeferred();
  background_.Schedule([env, dir_to_sync] { env->SyncDir(dir_to_sync); },
                       [this, conn_id, seq] { SendToClient(conn_id, EncodeOk(seq)); });
}

void Server::HandleDeleteFile(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  uint64_t removed = 0;
  Status s = store_->DeleteFile(r->file_id, &removed);
  if (s.ok()) {
    c->Send(EncodeOkRemoved(h.seq, removed));
  } else {
    c->Send(EncodeError(h.seq, s.IsNoSpace() ? ErrorCode::kNoSpace : ErrorCode::kIoError,
                        s.message()));
  }
}

void Server::HandleGetLocal(Connection* c, const FrameHeader& h, std::string_view, Request* r) {
  c->BeginDeferred();  // every reply goes through SendToClient
  get_local_->OnGetLocal(c->id(), h.seq, std::get<RingHeader>(r->body));
}

void Server::HandlePing(Connection* c, const FrameHeader& h, std::string_view, Request*) {
  c->Send(EncodePingReply(h.seq, store_->peer_id(), advertise_));
}

void Server::HandleRingSegment(Connection* c, const FrameHeader& h, std::string_view payload,
                               Request* r) {
  const uint64_t seq = h.seq;
  uint64_t conn_id = c->id();
  std::string remote = c->remote();
  c->BeginDeferred();  // the OK waits for this peer's own segment
  get_local_->OnSegment(h.flags, payload, std::move(std::get<RingSegment>(r->body)),
                        [this, conn_id, seq, remote](bool ok, ErrorCode code,
                                                     const std::string& message) {
                          if (ok) {
                            SendToClient(conn_id, EncodeOk(seq));
                            return;
                          }
                          ST_LOG_WARN("refused a RING_SEGMENT from %s: %s", remote.c_str(),
                                      message.c_str());
                          SendToClient(conn_id, EncodeError(seq, code, message));
                        });
}

}  // namespace st
