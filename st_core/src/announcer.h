// A thread that reports the peer to the tracker (paper 3.3: soft state):
// every interval it calls Tracker.Announce with the peer's identity, address
// and space. Failures are logged (rate-limited) and the peer keeps serving.
//
// Liveness comes from the event loop, not from this thread: an announce is
// sent only while the loop turns. The loop wakes at least every tick
// (EventLoop::kTickS) and marks each turn (EventLoop::last_turn_ns); when no
// turn has been marked for longer than loop_stall_limit_s, whatever the
// reason (a blocked syscall, a handler that does not return, the loop thread
// stopped by a debugger or starved while it waits in epoll_wait), the
// announces stop, so the tracker fails the peer after its liveness window and
// clients route around it; they resume when the loop turns again. The load
// announced counts the turn in progress, and a loop overdue by several ticks,
// so a loop that is stuck reports itself busy and load-aware reads avoid it
// (docs/reliability.md).
//
// Each announce also says when this process started, its data directory and
// that directory's filesystem (for the status page), and its failure domain
// (docs/replication.md, "Failure domains"); the interval comes from the
// tracker's reply (interval_s here holds until the first one). A peer that
// keeps infofile copies (options.copies) is told by each reply which of its
// files changed (docs/peer.md, "Infofile copies").
#ifndef ST_CORE_ANNOUNCER_H_
#define ST_CORE_ANNOUNCER_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "infofile_copy.h"
#include "record_store.h"
#include "verifier.h"

namespace grpc {
class ClientContext;
}

namespace st {

struct AnnouncerOptions {
  std::string tracker;    // host:port of the tracker's gRPC service
  std::string peer_id;
  std::string addr;       // advertised address
  std::string domain;     // --domain (failure domain); empty: addr's host
  double interval_s = 2;
  double deadline_s = 1;
  // With a key, each announce carries a PEER capability (gRPC metadata
  // x-st-capability, hex) so the tracker knows it comes from a peer.
  std::string capability_key;
  // PEM contents: with ca_pem, announces go over TLS; with cert and key too,
  // the peer shows a client certificate (mutual TLS).
  std::string ca_pem, cert_pem, key_pem;
  // The event loop's busy time (EventLoop::SetBusyCounter); each announce
  // carries its share of the time since the previous one as the peer's load.
  const std::atomic<uint64_t>* loop_busy_ns = nullptr;
  // The loop's heartbeat (EventLoop::last_turn_ns) and how old it may be
  // before announces stop; stalls counts the announces withheld. Without a
  // heartbeat, announces never stop.
  const std::atomic<int64_t>* loop_last_turn_ns = nullptr;
  double loop_stall_limit_s = 4;
  // The turn in progress (EventLoop::SetTurnClock), counted as busy.
  const std::atomic<int64_t>* loop_turn_start_ns = nullptr;
  std::atomic<uint64_t>* stalls = nullptr;
  // Copies the verifier quarantined: sent with the next announce (given
  // back if it fails), and the verifier's counters.
  BadCopyQueue* bad_copies = nullptr;
  const VerifierCounters* verifier = nullptr;
  // --metadata fetch: each announce says the peer keeps copies, with their
  // lag (CopyLag::Get), and the reply's files (those whose peerlist names
  // this peer, changed since the last reply) go to copies->lag(), which the
  // mirror pass brings forward.
  InfofileCopies* copies = nullptr;
};

// The gRPC target of --tracker: one HOST:PORT as it is; several,
// comma-separated, as gRPC's multi-address target "ipv4:IP:PORT,IP:PORT"
// (the announcer's and the infofile fetcher's channels).
std::string TrackerTarget(const std::string& tracker);

class Announcer {
 public:
  // store must outlive the announcer; only its thread-safe accessors
  // (used_bytes, record_count, capacity, FsSpace) are used.
  Announcer(AnnouncerOptions options, const RecordStore* store);
  ~Announcer();

  Announcer(const Announcer&) = delete;
  Announcer& operator=(const Announcer&) = delete;

  void Start();
  // Wakes the thread, cancels an RPC in flight and joins. Idempotent.
  void Stop();

 private:
  void Run();

  AnnouncerOptions options_;
  const RecordStore* store_;
  double started_at_;  // Unix time: the tracker counts a new value as a restart
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                       // guarded by mu_
  grpc::ClientContext* in_flight_ = nullptr;  // guarded by mu_
};

}  // namespace st

#endif  // ST_CORE_ANNOUNCER_H_
