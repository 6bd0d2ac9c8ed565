#include "verifier.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "log.h"
#include "name_codec.h"
#include "protocol.h"

namespace st {

void BadCopyQueue::Push(BadCopy c) {
  std::lock_guard<std::mutex> lock(mu_);
  q_.push_back(std::move(c));
}

std::vector<BadCopy> BadCopyQueue::Take(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<BadCopy> out;
  while (!q_.empty() && out.size() < max) {
    out.push_back(std::move(q_.front()));
    q_.pop_front();
  }
  return out;
}

void BadCopyQueue::PutBack(std::vector<BadCopy> copies) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = copies.rbegin(); it != copies.rend(); ++it) q_.push_front(std::move(*it));
}

void BadCopyQueue::Acknowledge(Env* env, const std::vector<BadCopy>& copies) {
  for (const BadCopy& b : copies) {
    if (b.quarantined_as.empty()) continue;
    Status s = env->RenameFile(b.quarantined_as, b.quarantined_as + ".reported");
    if (!s.ok() && !s.IsNotFound()) {
      ST_LOG_WARN("verify: cannot mark %s reported: %s (it is reported again after a restart)",
                  b.quarantined_as.c_str(), s.ToString().c_str());
    }
  }
}

Verifier::Verifier(EventLoop* loop, RecordStore* store, VerifierOptions options,
                   BadCopyQueue* reports)
    : loop_(loop),
      store_(store),
      options_(options),
      reports_(reports),
      background_(std::make_unique<BackgroundWork>(store->env(), loop)),
      alive_(std::make_shared<bool>(true)) {}

Verifier::~Verifier() {
  *alive_ = false;
  if (timer_ != 0) loop_->CancelTimer(timer_);
  background_.reset();  // cancels the running batch and waits for it
}

// Quarantined copies whose report never reached the tracker (the peer
// stopped first): <data>/quarantine/<file_id>/<record file name>[.N], not
// yet *.reported. Reported again with the next announce.
void Verifier::RequeueUnreported() {
  if (reports_ == nullptr) return;
  Env* env = store_->env();
  std::string root = store_->data_dir() + "/quarantine";
  std::vector<std::string> dirs;
  if (!env->GetChildren(root, &dirs).ok()) return;
  size_t n = 0;
  for (const std::string& d : dirs) {
    uint64_t file_id = 0;
    if (d.size() != 16 ||
        std::sscanf(d.c_str(), "%16llx", reinterpret_cast<unsigned long long*>(&file_id)) != 1) {
      continue;
    }
    std::vector<std::string> files;
    if (!env->GetChildren(root + "/" + d, &files).ok()) continue;
    for (const std::string& f : files) {
      auto ends = [&f](std::string_view s) {
        return f.size() >= s.size() && f.compare(f.size() - s.size(), s.size(), s) == 0;
      };
      if (ends(".reported") || ends(kSidecarSuffix)) continue;
      std::string_view base(f);
      size_t dot = base.rfind('.');  // a copy quarantined twice: "<record file name>.N"
      if (dot != std::string_view::npos && dot > base.rfind('@') &&
          base.find_first_not_of("0123456789", dot + 1) == std::string_view::npos) {
        base = base.substr(0, dot);
      }
      std::string_view enc;
      BadCopy b;
      if (!ParseRecordFileName(base, &enc, &b.copy_rank, &b.crc)) continue;
      std::string path = root + "/" + d + "/" + f;
      if (IsHashedEncoding(enc)) {
        if (!env->ReadSmallFile(path + kSidecarSuffix, 4096 + 1, &b.name).ok()) continue;
      } else if (!DecodeEncodedName(enc, &b.name)) {
        continue;
      }
      b.file_id = file_id;
      b.quarantined_as = path;
      reports_->Push(std::move(b));
      ++n;
    }
  }
  if (n > 0)
    ST_LOG_WARN("verify: %zu quarantined copies not yet reported to the tracker: reporting", n);
}

void Verifier::Start() {
  RequeueUnreported();
  if (options_.interval_s <= 0) return;
  timer_ = loop_->AddTimer(options_.interval_s, [this] { Tick(); });
}

void Verifier::Tick() {
  timer_ = 0;
  if (!running_) Begin();
}

void Verifier::Begin() {
  running_ = true;
  started_ = EventLoop::Now();
  pass_bytes_ = pass_copies_ = pass_bad_ = 0;
  files_ = store_->FileIds();
  file_next_ = 0;
  names_.clear();
  name_next_ = 0;
  NextBatch();
}

void Verifier::NextBatch() {
  auto batch = std::make_shared<std::vector<Item>>();
  while (batch->size() < kBatch) {
    if (name_next_ >= names_.size()) {
      if (file_next_ >= files_.size()) break;
      names_.clear();
      name_next_ = 0;
      if (const RecordStore::FileIndex* idx = store_->Find(files_[file_next_])) {
        names_.reserve(idx->size());
        for (const auto& kv : *idx) names_.push_back(kv.first);
      }
      ++file_next_;
      continue;
    }
    Item it;
    it.file_id = files_[file_next_ - 1];
    it.name = names_[name_next_++];
    if (!store_->OpenForRead(it.file_id, it.name, &it.handle).ok()) continue;  // gone meanwhile
    batch->push_back(std::move(it));
  }
  if (batch->empty()) {
    Finish();
    return;
  }
  const std::atomic<bool>* cancel = background_->cancel();
  double rate = options_.bytes_per_s, started = started_;
  uint64_t before = pass_bytes_;
  std::weak_ptr<bool> alive = alive_;
  background_->Schedule(
      [batch, cancel, rate, started, before] {
        uint64_t bytes = before;
        for (Item& it : *batch) {
          if (cancel->load()) {
            it.result = Status::Unavailable("the peer is stopping");
            continue;
          }
          it.result = RecordStore::VerifyRead(it.handle);
          it.handle.file.reset();  // close the descriptor now
          bytes += it.handle.size;
          // The rate cap: never ahead of `rate` bytes per second over the pass.
          while (rate > 0 && !cancel->load()) {
            double ahead = started + static_cast<double>(bytes) / rate - EventLoop::Now();
            if (ahead <= 0) break;
            usleep(static_cast<useconds_t>(std::min(ahead, 0.05) * 1e6));
          }
        }
      },
      [this, alive, batch] {
        auto a = alive.lock();
        if (a && *a) OnBatch(batch);
      });
}

void Verifier::OnBatch(std::shared_ptr<std::vector<Item>> batch) {
  for (Item& it : *batch) {
    if (it.result.IsUnavailable()) continue;  // cancelled
    pass_bytes_ += it.handle.size;
    if (it.result.ok()) {
      ++pass_copies_;
      counters_.copies_verified.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_verified.fetch_add(it.handle.size, std::memory_order_relaxed);
      store_->MarkVerified(it.file_id, it.name, it.handle);
      continue;
    }
    if (!it.result.IsCorruption()) {
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      ST_LOG_WARN("verify: cannot read record '%s' of file %016llx: %s (retried next pass)",
                  Printable(it.name).c_str(), static_cast<unsigned long long>(it.file_id),
                  it.result.ToString().c_str());
      continue;
    }
    ++pass_bad_;
    counters_.copies_bad.fetch_add(1, std::memory_order_relaxed);
    bool moved = false;
    std::string to;
    Status s =
        store_->Quarantine(it.file_id, it.name, it.handle.copy_rank, it.handle.crc, &moved, &to);
    if (!s.ok()) {
      ST_LOG_ERROR("verify: %s; and it cannot be quarantined: %s", it.result.ToString().c_str(),
                   s.ToString().c_str());
      continue;
    }
    if (!moved) continue;  // replaced or deleted meanwhile
    counters_.copies_quarantined.fetch_add(1, std::memory_order_relaxed);
    ST_LOG_ERROR("verify: %s; quarantined as %s (never served again; the tracker marks the copy "
                 "pending and `storetorrent repair` restores it from a good copy)",
                 it.result.ToString().c_str(), to.c_str());
    if (reports_ != nullptr) {
      BadCopy b;
      b.file_id = it.file_id;
      b.name = it.name;
      b.copy_rank = it.handle.copy_rank;
      b.crc = it.handle.crc;
      b.quarantined_as = to;
      reports_->Push(std::move(b));
    }
  }
  NextBatch();
}

void Verifier::Finish() {
  running_ = false;
  counters_.passes.fetch_add(1, std::memory_order_relaxed);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  counters_.last_pass_ns.store(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
  ST_LOG_INFO("verify: %llu copies (%.1f MB) checked against their CRC-32C, %llu bad; %.1f s",
              static_cast<unsigned long long>(pass_copies_ + pass_bad_),
              static_cast<double>(pass_bytes_) / 1e6, static_cast<unsigned long long>(pass_bad_),
              EventLoop::Now() - started_);
  files_.clear();
  names_.clear();
  if (options_.interval_s > 0 && timer_ == 0)
    timer_ = loop_->AddTimer(options_.interval_s, [this] { Tick(); });
}

}  // namespace st
