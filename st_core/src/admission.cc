#include "admission.h"

#include <algorithm>
#include <utility>

#include "log.h"

namespace st {
namespace {

TokenBucket MakeBucket(double rate, double least) {
  if (rate <= 0) return TokenBucket();
  return TokenBucket(rate, Admission::BurstFor(rate, least));
}

}  // namespace

double Admission::BurstFor(double rate, double least) { return std::max(rate * 0.1, least); }

Admission::Admission(EventLoop* loop, AdmissionOptions options)
    : loop_(loop),
      options_(std::move(options)),
      write_bucket_(MakeBucket(options_.max_write_bytes_per_s, 1)),
      read_bucket_(MakeBucket(options_.max_read_bytes_per_s, 1)),
      request_bucket_(MakeBucket(options_.max_requests_per_s, 1)) {}

Admission::~Admission() {
  if (host_load_timer_ != 0) loop_->CancelTimer(host_load_timer_);
}

void Admission::Start() {
  if (options_.yield_to_host_load && options_.max_write_bytes_per_s <= 0 &&
      options_.max_read_bytes_per_s <= 0 && options_.max_requests_per_s <= 0) {
    ST_LOG_WARN("--yield-to-host-load has no limit to scale: give --max-write-mb-per-s, "
                "--max-read-mb-per-s or --max-request-rate; the host's load is not followed");
  } else if (options_.yield_to_host_load) {
    ST_LOG_INFO(
        "impact control follows the host's load: its limits scaled between %.2f and 1 by what "
        "other processes use of the CPU, every %g s",
        options_.yield_floor, options_.host_load_period_s);
    host_load_ = std::make_unique<HostLoadController>(options_.yield_floor);
    SampleHostLoad();  // the base of the first interval; then one sample a period
  }
}

double Admission::Admit(double now, const Cost& cost) {
  double wait = request_bucket_.WaitFor(now, 1);
  if (cost.writes) wait = std::max(wait, write_bucket_.WaitFor(now, 1));
  // A GET's cost is known once the record is found: it is taken then (a debt
  // the next GETs wait for).
  if (cost.reads) wait = std::max(wait, read_bucket_.WaitFor(now, 1));
  if (wait > 0) {
    ++throttled_;
    return std::max(wait, 0.001);
  }
  request_bucket_.Take(now, 1);
  if (cost.writes) write_bucket_.Take(now, static_cast<double>(cost.write_bytes));
  return 0;
}

void Admission::TakeRead(double now, double bytes) { read_bucket_.Take(now, bytes); }

void Admission::SampleHostLoad() {
  host_load_timer_ = loop_->AddTimer(options_.host_load_period_s, [this] { SampleHostLoad(); });
  CpuTimes t;
  Status s = options_.cpu_sampler ? options_.cpu_sampler(&t) : ReadCpuTimes(&t);
  if (!s.ok()) {
    if (!sampler_failed_) {
      ST_LOG_WARN("--yield-to-host-load: cannot sample the CPU (%s); the limits stay as they are",
                  s.ToString().c_str());
    }
    sampler_failed_ = true;
    return;
  }
  sampler_failed_ = false;
  const double before = host_load_->scale();
  const double scale = host_load_->Update(t);
  host_other_cpu_ = host_load_->other_load();
  if (scale != before) ScaleLimits(scale);
  // One INFO line when the peer starts or stops yielding, at most one a
  // minute (a host hovering at the noise band would flap); the rest DEBUG.
  const bool yielding = scale < 1;
  if (yielding != yielding_) {
    const double now = EventLoop::Now();
    const bool info = now - yield_logged_at_ >= 60;
    if (info) yield_logged_at_ = now;
    if (yielding) {
      Log(info ? LogLevel::kInfo : LogLevel::kDebug,
          "yielding to the host's load: other processes use %.0f%% of its CPU, limits at %.2f",
          100 * host_load_->other_load(), scale);
    } else {
      Log(info ? LogLevel::kInfo : LogLevel::kDebug,
          "the host's load is gone: impact-control limits whole again");
    }
    yielding_ = yielding;
  } else if (scale != before) {
    ST_LOG_DEBUG("host load: other processes %.0f%% of the CPU, own %.0f%%, limits at %.2f",
                 100 * host_load_->other_load(), 100 * host_load_->own_load(), scale);
  }
}

void Admission::ScaleLimits(double scale) {
  impact_scale_ = scale;
  const double now = EventLoop::Now();
  const double w = options_.max_write_bytes_per_s * scale;
  const double r = options_.max_read_bytes_per_s * scale;
  const double q = options_.max_requests_per_s * scale;
  write_bucket_.SetRate(now, w, BurstFor(w, 1));
  read_bucket_.SetRate(now, r, BurstFor(r, 1));
  request_bucket_.SetRate(now, q, BurstFor(q, 1));
}

}  // namespace st
