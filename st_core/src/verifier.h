// The verifying scrubber (docs/peer.md, "Verifier"; docs/reliability.md):
// every --verify-interval seconds each peer re-reads every copy it stores and
// checks it against the CRC-32C it was stored with, at most --verify-rate
// bytes per second so analysis is not disturbed. A copy whose bytes do not
// match is quarantined (moved to <data>/quarantine/, dropped from the index:
// never served or revealed again) and reported to the tracker with the next
// announce (BadCopyQueue), which marks the copy pending in the infofile so
// `storetorrent repair` restores it from a good copy.
//
//   loop thread                          background thread (background.h)
//   timer -> Begin(): snapshot the file ids
//   NextBatch(): open up to kBatch copies
//     of the current file (OpenForRead) -> VerifyRead each, sleeping to keep
//                                          within the rate (cancellable)
//   OnBatch() <------------ Post --------
//     MarkVerified the good ones, Quarantine the corrupt ones (re-checking
//     that the copy is still the one read), count; next batch or Finish().
//
// One pass at a time; a copy written or deleted during a pass is skipped.
#ifndef ST_CORE_VERIFIER_H_
#define ST_CORE_VERIFIER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "background.h"
#include "event_loop.h"
#include "record_store.h"

namespace st {

// A copy the verifier quarantined, for the tracker.
struct BadCopy {
  uint64_t file_id = 0;
  std::string name;  // the stored name (a replaced record's .st-version/... name)
  uint8_t copy_rank = 0;
  uint32_t crc = 0;      // the CRC-32C it was stored with
  uint32_t actual = 0;   // the CRC-32C of the bytes found (0 if unreadable)
  std::string quarantined_as;
};

// Thread-safe: the verifier pushes on the loop thread, the announcer takes
// and (after a failed announce) gives back on its own thread. A report is
// durable: the quarantined file itself is the record of it until the
// tracker has it (Acknowledge renames it to *.reported), and a peer that
// restarts before then reports it again (Verifier::Start).
class BadCopyQueue {
 public:
  void Push(BadCopy c);
  std::vector<BadCopy> Take(size_t max);
  void PutBack(std::vector<BadCopy> copies);
  // The tracker has these (any thread): marks their quarantined files.
  static void Acknowledge(Env* env, const std::vector<BadCopy>& copies);

 private:
  std::mutex mu_;
  std::deque<BadCopy> q_;  // guarded by mu_
};

struct VerifierOptions {
  double interval_s = 7 * 86400;     // seconds between passes; 0: never
  double bytes_per_s = 20e6;         // read rate cap; 0: no cap
};

struct VerifierCounters {
  std::atomic<uint64_t> passes{0};
  std::atomic<uint64_t> copies_verified{0};
  std::atomic<uint64_t> bytes_verified{0};
  std::atomic<uint64_t> copies_bad{0};
  std::atomic<uint64_t> copies_quarantined{0};
  std::atomic<uint64_t> errors{0};  // unreadable (not a CRC mismatch): retried next pass
  std::atomic<int64_t> last_pass_ns{0};  // unix time of the last complete pass
};

class Verifier {
 public:
  Verifier(EventLoop* loop, RecordStore* store, VerifierOptions options, BadCopyQueue* reports);
  ~Verifier();  // cancels a pass and waits for its background batch

  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  void Start();  // arms the periodic timer (if interval_s > 0)
  const VerifierCounters& counters() const { return counters_; }

  static constexpr size_t kBatch = 64;  // copies per background batch

 private:
  struct Item {
    uint64_t file_id;
    std::string name;
    RecordStore::ReadHandle handle;
    Status result;
    uint32_t actual = 0;
  };

  void RequeueUnreported();
  void Tick();
  void Begin();
  void NextBatch();
  void OnBatch(std::shared_ptr<std::vector<Item>> batch);
  void Finish();

  EventLoop* loop_;
  RecordStore* store_;
  VerifierOptions options_;
  BadCopyQueue* reports_;
  std::unique_ptr<BackgroundWork> background_;
  std::shared_ptr<bool> alive_;
  EventLoop::TimerId timer_ = 0;
  bool running_ = false;
  std::vector<uint64_t> files_;  // of this pass
  size_t file_next_ = 0;
  std::vector<std::string> names_;  // of the current file
  size_t name_next_ = 0;
  double started_ = 0;
  uint64_t pass_bytes_ = 0;  // for the rate cap, over the pass
  uint64_t pass_copies_ = 0, pass_bad_ = 0;
  VerifierCounters counters_;
};

}  // namespace st

#endif  // ST_CORE_VERIFIER_H_
