// The scrubber's schedule and its two halves (paper 3.1, 4.3):
//
//   loop thread                         background thread (background.h)
//   Request() / periodic timer
//     -> Begin(): schedule it -------> MakeScrubPlan(): walk the namespace
//                                       (or bring the copies of the held
//                                       files to the tracker's latest),
//                                       read infofiles, walk the store and
//                                       tmp/ (deletes nothing)
//   OnPlan() <------------ Post --------
//     Apply(): in batches of kBatch, one loop turn each, through the record
//     store (RemoveIfStale re-checks rank, crc and mtime, and keeps the index
//     and used-bytes counters right); then tmp files and empty directories.
//   Finish(): log, answer the waiters; if requests came during the run,
//     run again for them.
//
// One run at a time. Request() during a run waits for it to end and is
// then served by a new run (so the answer reflects the state after the
// request). The periodic timer skips a tick while a run is going on.
//
// Everything but the inventory runs on the loop thread.
#ifndef ST_CORE_SCRUBBER_H_
#define ST_CORE_SCRUBBER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "background.h"
#include "event_loop.h"
#include "protocol.h"
#include "record_store.h"
#include "scrub_plan.h"

namespace st {

struct ScrubberOptions {
  std::string namespace_dir;   // required unless copies
  InfofileCopies* copies = nullptr;  // --metadata fetch: the copies (scrub_plan.h), not a walk
  double fetch_deadline_s = 10;      // per copy's catch-up
  double interval_s = 86400;   // periodic runs; 0: only on request
  double age_s = 3600;         // younger records and tmp files are never removed
  int busy_timeout_ms = 5000;  // per infofile
};

class Scrubber {
 public:
  // Called on the loop thread when the run that serves a request ends.
  // Unavailable: the namespace root could not be read, or (copies) the
  // tracker could not be reached, or the peer is stopping; IOError: the
  // record store could not be listed.
  using Done = std::function<void(const Status& s, const ScrubReply& counts)>;

  Scrubber(EventLoop* loop, RecordStore* store, ScrubberOptions options);
  ~Scrubber();  // cancels a running inventory and waits for it

  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  // Arms the periodic timer (if interval_s > 0).
  void Start();

  void Request(Done done);

  bool running() const { return running_; }
  bool from_copies() const { return options_.copies != nullptr; }
  uint64_t runs() const { return runs_; }

  static constexpr size_t kBatch = 512;  // removals per loop turn

 private:
  void Tick();
  void Begin();
  void OnPlan(const Status& s, std::shared_ptr<ScrubPlan> plan);
  void Apply();
  void Finish(const Status& s);

  EventLoop* loop_;
  RecordStore* store_;
  ScrubberOptions options_;
  std::shared_ptr<bool> alive_;  // false once destroyed; checked by posted tasks
  EventLoop::TimerId timer_ = 0;
  bool running_ = false;
  uint64_t runs_ = 0;
  double started_ = 0;       // monotonic
  double planned_ = 0;       // monotonic, when the plan arrived
  std::vector<Done> current_;  // served by the running scrub
  std::vector<Done> pending_;  // served by the next one
  std::shared_ptr<ScrubPlan> plan_;
  size_t next_ = 0;  // next removal of plan_ to apply
  ScrubReply counts_;
  // The inventory. Last, so destroyed first: it cancels a running inventory
  // and waits for it before anything the inventory's callback uses goes.
  BackgroundWork background_;
};

}  // namespace st

#endif  // ST_CORE_SCRUBBER_H_
