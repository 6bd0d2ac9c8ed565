// st-peer: the StoreTorrent storage peer. See docs/peer.md.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>

#include "announcer.h"
#include "capability.h"
#include "coding.h"
#include "event_loop.h"
#include "fs_check.h"
#include "infofile_copy.h"
#include "infofile_fetch_client.h"
#include "log.h"
#include "metrics_http.h"
#include "options.h"
#include "record_store.h"
#include "server.h"

namespace {

void RaiseFdLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int Fail(const std::string& msg) {
  ST_LOG_ERROR("%s", msg.c_str());
  return 1;
}

// st-peer --mint-token: a token for operators and scripts (docs/peer.md).
int RunMintToken(const st::Options& opt) {
  std::string key, warning;
  st::Status s = st::LoadKeyFile(opt.key_file, &key, &warning);
  if (!s.ok()) {
    std::fprintf(stderr, "st-peer: %s\n", s.message().c_str());
    return 1;
  }
  if (!warning.empty()) std::fprintf(stderr, "st-peer: warning: %s\n", warning.c_str());
  st::Capability cap;
  cap.ops = opt.mint_ops;
  cap.file_id = opt.mint_file_id;
  cap.expires = static_cast<uint64_t>(static_cast<double>(st::UnixNow()) + opt.mint_ttl_s);
  cap.user = opt.mint_user;
  std::printf("%s\n", st::EncodeLowerHex(st::MintToken(key, cap)).c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// Fault injection for tests (--fault-loop-stall-file, docs/reliability.md): a
// timer on the loop checks every 100 ms whether the file exists, and while it
// does, blocks the loop thread in that handler, as a wedged handler or a
// blocked syscall would; the process stays alive and its sockets open.
void StartLoopStallFault(st::EventLoop* loop, const std::string& path) {
  ST_LOG_WARN("fault injection: the event loop blocks while %s exists", path.c_str());
  auto check = std::make_shared<std::function<void()>>();
  *check = [loop, path, weak = std::weak_ptr<std::function<void()>>(check)] {
    if (access(path.c_str(), F_OK) == 0) {
      ST_LOG_WARN("fault injection: blocking the event loop while %s exists", path.c_str());
      while (access(path.c_str(), F_OK) == 0) usleep(20 * 1000);
      ST_LOG_WARN("fault injection: %s removed; the event loop turns again", path.c_str());
    }
    if (auto self = weak.lock()) loop->AddTimer(0.1, *self);
  };
  loop->AddTimer(0.1, *check);
  static std::shared_ptr<std::function<void()>> keep;  // lives as long as the process
  keep = check;
}

// The PEM files of --tracker-ca, --tracker-cert and --tracker-key (the
// announcer's and the infofile fetcher's TLS). False, with *error, if one
// given cannot be read.
bool ReadTrackerPems(const st::Options& opt, std::string* ca, std::string* cert, std::string* key,
                     std::string* error) {
  for (auto [path, out] :
       {std::pair{&opt.tracker_ca, ca}, {&opt.tracker_cert, cert}, {&opt.tracker_key, key}}) {
    if (path->empty()) continue;
    std::ifstream in(*path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty()) {
      *error = "cannot read " + *path + " (PEM for the tracker's TLS)";
      return false;
    }
    *out = text.str();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef M_ARENA_MAX
  // One malloc arena for every thread: glibc gives each new thread's
  // allocations an arena that reserves 64 MiB of address space at a time, so
  // the connection buffers of the loop thread (st-loop) would grow the
  // peer's virtual size in 64 MiB steps, which is what the buffer limits
  // bound (a frame's memory grows with the bytes that arrive; docs/peer.md,
  // tests/test_hostile.py). The peer's few threads rarely allocate at once.
  mallopt(M_ARENA_MAX, 1);
#endif
  st::Options opt;
  st::Status s = st::ParseOptions(argc, argv, &opt);
  if (!s.ok()) {
    std::fprintf(stderr, "st-peer: %s (see st-peer --help)\n", s.message().c_str());
    return 2;
  }
  if (opt.help) {
    std::fputs(st::Usage().c_str(), stdout);
    return 0;
  }
  if (opt.mint_token) return RunMintToken(opt);
  if (opt.verbose) st::SetLogLevel(st::LogLevel::kDebug);
  st::LogFormat log_format;
  if (st::ParseLogFormat(opt.log_format, &log_format)) st::SetLogFormat(log_format);

  if (!opt.key_file.empty()) {
    std::string warning;
    s = st::LoadKeyFile(opt.key_file, &opt.server.capability_key, &warning);
    if (!s.ok()) return Fail("cannot use --key-file: " + s.message());
    if (!warning.empty()) ST_LOG_WARN("%s", warning.c_str());
  }

  // Block the stop signals in every thread (gRPC's and the announcer's
  // threads inherit the mask); the loop reads them from a signalfd.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  RaiseFdLimit();

  std::unique_ptr<st::RecordStore> store;
  s = st::RecordStore::Open(opt.store, &store);
  if (!s.ok()) return Fail("cannot open the record store: " + s.ToString());
  st::FsFacts fs_facts;
  if (st::ReadFsFacts(store->data_dir(), "/sys", &fs_facts).ok()) {
    std::string fs_warning = st::FsWarning(fs_facts, store->data_dir());
    if (!fs_warning.empty()) ST_LOG_WARN("%s", fs_warning.c_str());
  }

  std::unique_ptr<st::EventLoop> loop;
  s = st::EventLoop::Create(&loop);
  if (!s.ok()) return Fail("cannot create the event loop: " + s.ToString());

  int sfd = signalfd(-1, &stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) return Fail(std::string("signalfd: ") + std::strerror(errno));
  st::EventLoop* loop_ptr = loop.get();
  s = loop->AddFd(sfd, st::EventLoop::kReadable, [sfd, loop_ptr](int) {
    struct signalfd_siginfo si;
    if (read(sfd, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
      ST_LOG_INFO("received signal %u; shutting down", si.ssi_signo);
      loop_ptr->Stop();
    }
  });
  if (!s.ok()) return Fail("cannot watch signals: " + s.ToString());

  // --metadata fetch (issue 40): GET_LOCAL reads this peer's copies of the
  // infofiles in <data>/meta/, brought forward from the tracker.
  std::unique_ptr<st::GrpcInfofileFetcher> fetcher;
  std::unique_ptr<st::InfofileCopies> copies;
  if (opt.metadata == "auto")  // a node that mounts nothing needs no setting: --tracker is enough
    opt.metadata = opt.server.namespace_dir.empty() && !opt.tracker.empty() ? "fetch" : "namespace";
  if (opt.metadata == "fetch") {
    if (opt.tracker.empty())
      return Fail("--metadata fetch needs --tracker: the infofile copies come from it");
    st::FetchClientOptions fo;
    fo.tracker = opt.tracker;
    fo.peer_id = store->peer_id();
    fo.capability_key = opt.server.capability_key;
    std::string pem_error;
    if (!ReadTrackerPems(opt, &fo.ca_pem, &fo.cert_pem, &fo.key_pem, &pem_error))
      return Fail(pem_error);
    fetcher = std::make_unique<st::GrpcInfofileFetcher>(fo);
    copies = std::make_unique<st::InfofileCopies>(store->data_dir() + "/meta", fetcher.get());
    opt.server.copies = copies.get();
    ST_LOG_INFO("metadata: infofile copies in %s/meta/ of every file this peer serves (the "
                "tracker's announce replies name them), brought to each GET_LOCAL's generation "
                "from %s (--metadata fetch)",
                store->data_dir().c_str(), opt.tracker.c_str());
  }
  const st::ServerOptions& sv = opt.server;
  auto server = std::make_unique<st::Server>(loop.get(), store.get(), sv);
  s = server->Start();
  if (!s.ok()) return Fail("cannot listen: " + s.ToString());

  std::unique_ptr<st::MetricsHttp> metrics;
  if (opt.metrics_port >= 0) {
    st::Server* srv = server.get();
    metrics = std::make_unique<st::MetricsHttp>(loop.get(), [srv] { return srv->RenderMetrics(); });
    s = metrics->Start(sv.host, opt.metrics_port);
    if (!s.ok()) return Fail("cannot serve metrics: " + s.ToString());
    ST_LOG_INFO("Prometheus metrics at http://%s:%d/metrics", sv.host.c_str(), metrics->port());
  }
  loop->SetBusyCounter(&server->metrics()->loop_busy_ns);
  loop->SetTurnClock(&server->metrics()->loop_turn_start_ns);
  if (!opt.fault_loop_stall_file.empty())
    StartLoopStallFault(loop.get(), opt.fault_loop_stall_file);

  // "listening on" last: whoever waits for it (st_py.deploy.cluster) has the metrics line by then.
  if (metrics) std::printf("metrics on %s:%d\n", sv.host.c_str(), metrics->port());
  std::printf("listening on %s:%d\n", sv.host.c_str(), server->port());
  std::fflush(stdout);
  ST_LOG_INFO("peer %s serving %s as %s%s%s", store->peer_id().c_str(), store->data_dir().c_str(),
              server->advertise().c_str(),
              opt.store.sync_each ? " (sync: an fsync per record)"
              : opt.store.sync    ? " (sync: group fsync)"
                                  : "",
              sv.namespace_dir.empty() && sv.copies == nullptr
                  ? " (no --namespace: GET_LOCAL disabled)"
                  : "");
  ST_LOG_INFO("failure domain %s", opt.domain.empty()
                                       ? "of its host (no --domain: peers of one machine share it)"
                                       : opt.domain.c_str());

  const char* scrub_reads =
      sv.copies != nullptr ? " (reading the copies, brought to the tracker's latest)" : "";
  if (sv.namespace_dir.empty() && sv.copies == nullptr) {
    ST_LOG_INFO("scrubber disabled: no --namespace and no --tracker, so committed records cannot "
                "be told from stale ones (SCRUB answers NO_NAMESPACE)");
  } else if (sv.scrub_interval_s > 0) {
    ST_LOG_INFO("scrubber: every %g s%s; records and temporary files younger than %g s are kept",
                sv.scrub_interval_s, scrub_reads, sv.scrub_age_s);
  } else {
    ST_LOG_INFO("scrubber: no periodic runs (--scrub-interval 0), only on SCRUB requests%s; "
                "records and temporary files younger than %g s are kept",
                scrub_reads, sv.scrub_age_s);
  }

  if (sv.copies != nullptr && sv.mirror_interval_s > 0) {
    ST_LOG_INFO("infofile copies: every %g s, the copies in %s/meta/ are brought to the "
                "tracker's latest and listed for storetorrent recover --from-peers (no namespace "
                "walk: the copies are the mirrors)",
                sv.mirror_interval_s, store->data_dir().c_str());
  } else if (!sv.namespace_dir.empty() && sv.mirror_interval_s > 0) {
    ST_LOG_INFO("infofile mirrors: every %g s, the infofiles of this peer's files are copied to "
                "%s/meta/ (storetorrent recover --from-peers)",
                sv.mirror_interval_s, store->data_dir().c_str());
  } else if (!sv.namespace_dir.empty() && sv.copies == nullptr) {
    ST_LOG_WARN("infofile mirrors disabled (--mirror-interval 0): a lost namespace cannot be "
                "recovered from this peer");
  }

  if (sv.max_write_bytes_per_s > 0 || sv.max_read_bytes_per_s > 0 || sv.max_requests_per_s > 0) {
    ST_LOG_INFO("impact control: writes %g MB/s, reads %g MB/s, %g requests/s (0: no limit)",
                sv.max_write_bytes_per_s / 1e6, sv.max_read_bytes_per_s / 1e6,
                sv.max_requests_per_s);
  }

  if (sv.capability_key.empty()) {
    ST_LOG_WARN("capabilities are not checked: start with --key-file (docs/capabilities.md); "
                "anyone who can connect may read, write and delete every record");
  } else {
    ST_LOG_INFO("capabilities are checked with the key of %s", opt.key_file.c_str());
  }

  {
    char conns[32] = "0 (no limit)", idle[32] = "0 (off)", keepalive[32] = "0 (off)";
    if (sv.max_connections > 0) {
      std::snprintf(conns, sizeof(conns), "%llu",
                    static_cast<unsigned long long>(sv.max_connections));
    }
    if (sv.idle_timeout_s > 0) std::snprintf(idle, sizeof(idle), "%g s", sv.idle_timeout_s);
    if (sv.keepalive_timeout_s > 0) {
      std::snprintf(keepalive, sizeof(keepalive), "%g s", sv.keepalive_timeout_s);
    }
    ST_LOG_INFO("connection limits: --max-connections %s, --idle-timeout %s (a stalled frame), "
                "--keepalive-timeout %s (an idle connection)",
                conns, idle, keepalive);
  }
  {
    // Each connection takes a descriptor, and a GET in flight one more.
    struct rlimit rl;
    uint64_t want = 2 * sv.max_connections + 256;
    if (sv.max_connections > 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
      ST_LOG_WARN("the file descriptor limit (%llu) is low for --max-connections %llu: raise "
                  "ulimit -n to at least %llu or lower --max-connections",
                  static_cast<unsigned long long>(rl.rlim_cur),
                  static_cast<unsigned long long>(sv.max_connections),
                  static_cast<unsigned long long>(want));
    }
  }

  std::unique_ptr<st::Announcer> announcer;
  if (!opt.tracker.empty()) {
    st::AnnouncerOptions ao;
    ao.tracker = opt.tracker;
    ao.peer_id = store->peer_id();
    ao.addr = server->advertise();
    ao.domain = opt.domain;
    ao.interval_s = opt.announce_interval_s;
    ao.capability_key = sv.capability_key;
    ao.loop_busy_ns = &server->metrics()->loop_busy_ns;
    ao.loop_last_turn_ns = &loop->last_turn_ns();
    ao.loop_turn_start_ns = &server->metrics()->loop_turn_start_ns;
    ao.stalls = &server->metrics()->loop_stalls;
    ao.bad_copies = server->bad_copies();
    ao.verifier = &server->verifier()->counters();
    ao.copies = copies.get();
    ao.loop_stall_limit_s = opt.loop_stall_limit_s > 0 ? opt.loop_stall_limit_s
                                                       : std::max(2.0, 2 * opt.announce_interval_s);
    std::string pem_error;
    if (!ReadTrackerPems(opt, &ao.ca_pem, &ao.cert_pem, &ao.key_pem, &pem_error))
      return Fail(pem_error);
    if (!ao.ca_pem.empty()) {
      ST_LOG_INFO("announcing to %s over TLS%s", opt.tracker.c_str(),
                  ao.cert_pem.empty() ? "" : " with a client certificate");
    }
    announcer = std::make_unique<st::Announcer>(ao, store.get());
    announcer->Start();
  }

  // The loop runs on a thread of its own named "st-loop", so that a debugger,
  // top -H and tests (tests/test_loop_liveness.py) can tell it from the
  // others; the main thread waits for it. A thread takes its creator's name,
  // so the background pool is started here first, not by the loop.
  store->env()->Schedule([] {});
  std::thread loop_thread([&loop] {
    pthread_setname_np(pthread_self(), "st-loop");
    loop->Run();
  });
  loop_thread.join();

  if (announcer) announcer->Stop();
  metrics.reset();
  server.reset();
  loop->RemoveFd(sfd);
  close(sfd);
  ST_LOG_INFO("stopped");
  return 0;
}
