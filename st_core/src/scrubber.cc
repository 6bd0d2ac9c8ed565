#include "scrubber.h"

#include <algorithm>
#include <utility>

#include "log.h"

namespace st {

Scrubber::Scrubber(EventLoop* loop, RecordStore* store, ScrubberOptions options)
    : loop_(loop),
      store_(store),
      options_(std::move(options)),
      alive_(std::make_shared<bool>(true)),
      background_(store->env(), loop) {}

Scrubber::~Scrubber() {
  *alive_ = false;
  if (timer_ != 0) loop_->CancelTimer(timer_);
  // background_ goes next: it cancels a running inventory and waits for it.
}

void Scrubber::Start() {
  if (options_.interval_s <= 0) return;
  timer_ = loop_->AddTimer(options_.interval_s, [this] { Tick(); });
}

void Scrubber::Tick() {
  timer_ = loop_->AddTimer(options_.interval_s, [this] { Tick(); });
  if (running_) {
    ST_LOG_INFO("scrub: the previous run is still going on; skipping this one");
    return;
  }
  Begin();
}

void Scrubber::Request(Done done) {
  if (running_) {
    pending_.push_back(std::move(done));
    return;
  }
  current_.push_back(std::move(done));
  Begin();
}

void Scrubber::Begin() {
  running_ = true;
  ++runs_;
  started_ = EventLoop::Now();
  counts_ = ScrubReply();
  ScrubPlanOptions po;
  po.namespace_dir = options_.namespace_dir;
  po.copies = options_.copies;
  po.fetch_deadline_s = options_.fetch_deadline_s;
  po.data_dir = store_->data_dir();
  po.peer_id = store_->peer_id();
  po.age_s = options_.age_s;
  po.busy_timeout_ms = options_.busy_timeout_ms;
  po.env = store_->env();
  auto plan = std::make_shared<ScrubPlan>();
  auto status = std::make_shared<Status>();
  const std::atomic<bool>* cancel = background_.cancel();
  background_.Schedule([po, cancel, plan,
                        status] { *status = MakeScrubPlan(po, cancel, plan.get()); },
                       [this, plan, status] { OnPlan(*status, plan); });
}

void Scrubber::OnPlan(const Status& s, std::shared_ptr<ScrubPlan> plan) {
  planned_ = EventLoop::Now();
  if (!s.ok()) {
    Finish(s);
    return;
  }
  plan_ = std::move(plan);
  next_ = 0;
  counts_.files = plan_->files;
  Apply();
}

void Scrubber::Apply() {
  size_t end = std::min(plan_->removals.size(), next_ + kBatch);
  for (; next_ < end; ++next_) {
    const PlannedRemoval& r = plan_->removals[next_];
    bool removed = false;
    Status s =
        store_->RemoveIfStale(r.file_id, r.name, r.copy_rank, r.crc, plan_->cutoff, &removed);
    if (!s.ok()) {
      ST_LOG_WARN("scrub: cannot remove record '%s' of file %016llx: %s", Printable(r.name).c_str(),
                  static_cast<unsigned long long>(r.file_id), s.ToString().c_str());
      continue;
    }
    if (!removed) continue;
    ST_LOG_DEBUG("scrub: removed record '%s' @%u of file %016llx (%s)", Printable(r.name).c_str(),
                 static_cast<unsigned>(r.copy_rank), static_cast<unsigned long long>(r.file_id),
                 ScrubActionName(r.action));
    if (r.action == ScrubAction::kRemoveDeletedFile) {
      ++counts_.removed_deleted_files;
    } else {
      ++counts_.removed_uncommitted;
    }
  }
  if (next_ < plan_->removals.size()) {
    std::weak_ptr<bool> alive = alive_;
    loop_->Post([this, alive] {
      auto a = alive.lock();
      if (a && *a) Apply();
    });
    return;
  }
  for (const std::string& t : plan_->tmp_files) {
    bool removed = false;
    Status s = store_->RemoveTmpIfStale(t, plan_->cutoff, &removed);
    if (!s.ok()) {
      ST_LOG_WARN("scrub: cannot remove temporary file %s: %s", t.c_str(), s.ToString().c_str());
    }
    if (removed) ++counts_.removed_tmp;
  }
  for (uint64_t file_id : plan_->file_dirs) store_->PruneFileDirs(file_id);
  uint64_t removed = counts_.removed_uncommitted + counts_.removed_deleted_files;
  counts_.kept = plan_->records >= removed ? plan_->records - removed : 0;
  Finish(Status::OK());
}

void Scrubber::Finish(const Status& s) {
  double now = EventLoop::Now();
  if (s.ok()) {
    ST_LOG_INFO("scrub: %llu files (%llu skipped), %llu records: removed %llu uncommitted, %llu of "
                "deleted files, %llu temporary files; kept %llu; %.3f s (inventory %.3f s)",
                static_cast<unsigned long long>(counts_.files),
                static_cast<unsigned long long>(plan_->skipped),
                static_cast<unsigned long long>(plan_->records),
                static_cast<unsigned long long>(counts_.removed_uncommitted),
                static_cast<unsigned long long>(counts_.removed_deleted_files),
                static_cast<unsigned long long>(counts_.removed_tmp),
                static_cast<unsigned long long>(counts_.kept), now - started_, planned_ - started_);
  } else {
    ST_LOG_WARN("scrub failed after %.3f s, nothing removed: %s", now - started_,
                s.ToString().c_str());
  }
  plan_.reset();
  running_ = false;
  std::vector<Done> done;
  done.swap(current_);
  ScrubReply counts = counts_;
  std::weak_ptr<bool> alive = alive_;
  for (auto& d : done) d(s, counts);
  auto a = alive.lock();
  if (!a || !*a) return;  // a callback destroyed us (not expected, but cheap to check)
  if (!pending_.empty() && !running_) {
    current_.swap(pending_);
    Begin();
  }
}

}  // namespace st
