#include "announcer.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "event_loop.h"

#include "capability.h"
#include "coding.h"
#include "log.h"
#include "storetorrent/v1/tracker.grpc.pb.h"

namespace st {

Announcer::Announcer(AnnouncerOptions options, const RecordStore* store)
    : options_(std::move(options)), store_(store), started_at_(store->env()->NowWall()) {}

// The data directory's filesystem as "<hostname>:<st_dev in hex>": peers on
// one node's one disk announce the same id, so the tracker counts that
// disk's space once (docs/operations.md, "Status page"). "" if unknown.
// The gRPC target of --tracker: one HOST:PORT as it is; several, comma-separated (a
// leader tracker and its standbys, of which only the elected one listens), as gRPC's
// multi-address target "ipv4:IP:PORT,IP:PORT", one channel that connects to whichever
// answers (docs/deployment.md, "The metadata log in etcd"; IP addresses only there).
std::string TrackerTarget(const std::string& tracker) {
  if (tracker.find(',') == std::string::npos || tracker.rfind("ipv4:", 0) == 0 ||
      tracker.rfind("ipv6:", 0) == 0) {
    return tracker;
  }
  return "ipv4:" + tracker;
}

static std::string FilesystemId(const RecordStore* store) {
  FileInfo info;
  if (!store->env()->GetFileInfo(store->data_dir(), &info).ok()) return "";
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  char dev[32];
  std::snprintf(dev, sizeof(dev), "%llx", static_cast<unsigned long long>(info.dev));
  return std::string(host) + ":" + dev;
}

Announcer::~Announcer() { Stop(); }

void Announcer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Announcer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Announcer::Run() {
  // After a failure, gRPC backs off reconnecting (up to minutes) and rate-limits
  // re-resolving the name: a peer would stay silent long after a tracker
  // restart and be reported failed. So each attempt after a failure uses a
  // fresh channel, and the backoff is kept within one announce interval.
  grpc::ChannelArguments args;
  int max_backoff_ms = static_cast<int>(std::max(0.2, std::min(options_.interval_s, 10.0)) * 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.ca_pem;
    ssl.pem_cert_chain = options_.cert_pem;
    ssl.pem_private_key = options_.key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  auto connect = [&] {
    return storetorrent::v1::Tracker::NewStub(
        grpc::CreateCustomChannel(TrackerTarget(options_.tracker), creds, args));
  };
  auto stub = connect();
  bool failing = false;
  auto last_log = std::chrono::steady_clock::time_point();
  uint64_t failures = 0;
  const auto kLogEvery = std::chrono::seconds(30);
  // The loop's busy time including the turn in progress (loop_busy_ns only
  // grows when a turn ends), so a stuck turn counts as busy; and a loop that
  // waits but has not come back for kOverdueS (its thread stopped or
  // starved: it wakes every tick) counts its silence as busy too.
  const double kOverdueS = 5 * EventLoop::kTickS;
  auto busy_now = [this, kOverdueS](double now) -> double {
    double busy = options_.loop_busy_ns != nullptr
                      ? static_cast<double>(options_.loop_busy_ns->load()) * 1e-9
                      : 0;
    int64_t start =
        options_.loop_turn_start_ns != nullptr ? options_.loop_turn_start_ns->load() : 0;
    int64_t last = options_.loop_last_turn_ns != nullptr ? options_.loop_last_turn_ns->load() : 0;
    if (start > 0) {
      busy += std::max(0.0, now - static_cast<double>(start) * 1e-9);
    } else if (last > 0 && now - static_cast<double>(last) * 1e-9 > kOverdueS) {
      busy += now - static_cast<double>(last) * 1e-9;
    }
    return busy;
  };
  double busy_since = EventLoop::Now();
  double busy_before = busy_now(busy_since);
  bool stalled = false;
  const std::string fs_id = FilesystemId(store_);
  // The tracker's reply says when to announce next: its --announce-interval
  // is the cluster's one setting; ours holds until the first reply.
  double interval_s = options_.interval_s;
  // Where the tracker's list of this peer's files stands (its last reply's).
  std::string copies_epoch;
  uint64_t copies_cursor = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    double now_s = EventLoop::Now();
    // The heartbeat is stale whatever stops the loop: a turn that does not
    // end, or a thread that does not come back from epoll_wait.
    int64_t last = options_.loop_last_turn_ns != nullptr ? options_.loop_last_turn_ns->load() : 0;
    double stuck_s = last > 0 ? now_s - static_cast<double>(last) * 1e-9 : 0;
    if (stuck_s > options_.loop_stall_limit_s) {
      if (!stalled) {
        int64_t turn =
            options_.loop_turn_start_ns != nullptr ? options_.loop_turn_start_ns->load() : 0;
        ST_LOG_ERROR("event loop stuck for %.1f s (%s; --loop-stall-limit %g s): announces stop, "
                     "so the tracker fails this peer until the loop turns again",
                     stuck_s,
                     turn > 0 ? "in one turn: a handler or syscall has not returned"
                              : "not back from waiting: its thread is stopped or starved",
                     options_.loop_stall_limit_s);
      }
      stalled = true;
      if (options_.stalls != nullptr) options_.stalls->fetch_add(1, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)),
                   [this] { return stop_; });
      if (stop_) break;
      continue;
    }
    if (stalled) {
      ST_LOG_INFO("event loop turns again: announcing");
      stalled = false;
    }
    storetorrent::v1::AnnounceRequest req;
    req.set_peer_id(options_.peer_id);
    req.set_addr(options_.addr);
    req.set_started_at(started_at_);
    req.set_data_dir(store_->data_dir());
    req.set_fs_id(fs_id);
    req.set_domain(options_.domain);
    uint64_t total = 0, avail = 0;
    uint64_t used = store_->used_bytes();
    if (store_->FsSpace(&total, &avail).ok()) {
      req.set_fs_size_bytes(total);
      req.set_fs_free_bytes(avail);
      uint64_t cap = store_->capacity();
      if (cap > 0) {
        total = std::min(total, cap);
        avail = std::min(avail, cap > used ? cap - used : 0);
      }
    }
    req.set_capacity_bytes(total);
    req.set_free_bytes(avail);
    req.set_used_bytes(used);
    req.set_records(store_->record_count());
    if (options_.loop_busy_ns != nullptr) {
      double busy = busy_now(now_s);
      double wall = now_s - busy_since;
      if (wall > 0) req.set_load(std::clamp((busy - busy_before) / wall, 0.0, 1.0));
      busy_before = busy;
      busy_since = now_s;
    }

    std::vector<BadCopy> bad;
    if (options_.bad_copies != nullptr) bad = options_.bad_copies->Take(1000);
    for (const BadCopy& b : bad) {
      storetorrent::v1::BadCopy* m = req.add_bad_copies();
      m->set_file_id(b.file_id);
      m->set_name(b.name);
      m->set_copy_rank(b.copy_rank);
      m->set_crc32c(b.crc);
      m->set_detail("quarantined as " + b.quarantined_as);
    }
    if (options_.copies != nullptr) {
      CopyLag::Stats cs = options_.copies->lag()->Get();
      req.set_keeps_copies(true);
      req.set_copies_epoch(copies_epoch);
      req.set_copies_cursor(copies_cursor);
      req.set_copies(cs.copies);
      req.set_copies_behind(cs.behind);
      req.set_copies_max_lag(cs.max_lag);
      req.set_copies_caught_up_at(cs.caught_up_at);
    }
    if (options_.verifier != nullptr) {
      req.set_copies_verified(options_.verifier->copies_verified.load());
      req.set_copies_bad(options_.verifier->copies_bad.load());
      req.set_copies_quarantined(options_.verifier->copies_quarantined.load());
    }

    if (failing) stub = connect();
    grpc::ClientContext ctx;
    if (!options_.capability_key.empty()) {
      Capability cap;
      cap.ops = kOpPeer;
      cap.expires = UnixNow() + 300;
      cap.user = "peer:" + options_.peer_id;
      ctx.AddMetadata("x-st-capability", EncodeLowerHex(MintToken(options_.capability_key, cap)));
    }
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(options_.deadline_s * 1000)));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
      in_flight_ = &ctx;
    }
    storetorrent::v1::AnnounceReply reply;
    grpc::Status status = stub->Announce(&ctx, req, &reply);
    if (!bad.empty()) {
      if (status.ok()) {
        BadCopyQueue::Acknowledge(store_->env(), bad);
      } else {
        options_.bad_copies->PutBack(std::move(bad));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = nullptr;
      if (stop_) break;
    }
    auto now = std::chrono::steady_clock::now();
    if (status.ok()) {
      if (reply.interval_s() > 0) interval_s = std::clamp(reply.interval_s(), 0.05, 600.0);
      if (options_.copies != nullptr && !reply.copies_epoch().empty()) {
        std::vector<CopyLag::Named> named;
        named.reserve(reply.peer_files_size());
        for (const auto& f : reply.peer_files()) {
          named.push_back(CopyLag::Named{f.file_id(), f.name(), f.generation()});
        }
        options_.copies->lag()->TrackerNamed(named, store_->env()->NowWall());
        // where the standbys serve copies (infofile_fetch_client.h; none: the tracker alone)
        options_.copies->SetStandbys({reply.standby_fetch_addrs().begin(),
                                      reply.standby_fetch_addrs().end()});
        copies_epoch = reply.copies_epoch();
        copies_cursor = reply.copies_cursor();
      }
      if (failing) {
        ST_LOG_INFO("announce to tracker %s works again after %llu failures",
                    options_.tracker.c_str(), static_cast<unsigned long long>(failures));
      }
      failing = false;
      failures = 0;
    } else {
      ++failures;
      if (!failing || now - last_log >= kLogEvery) {
        ST_LOG_WARN("announce to tracker %s failed (%llu in a row): %s; still serving, retrying "
                    "every %.1f s",
                    options_.tracker.c_str(), static_cast<unsigned long long>(failures),
                    status.error_message().c_str(), options_.interval_s);
        last_log = now;
      }
      failing = true;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)),
                 [this] { return stop_; });
    if (stop_) break;
  }
}

}  // namespace st
