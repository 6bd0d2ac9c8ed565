// A token bucket for impact control (FreeLoader, seed 004 sections 3.2.2 and
// 5.4): a storage node donated by another workload must not be swamped, so
// the peer can cap its write bandwidth, read bandwidth and request rate.
//
// Tokens accrue at `rate` per second up to `burst`. A request may start when
// the balance is at least `need` (1 for a request, a single byte for
// bandwidth) and then takes its whole cost, which may leave the balance
// negative: a large record is admitted at once and the requests after it wait
// for the debt to be paid. Over any long window the admitted cost is at most
// rate x window + burst.
//
// Not thread-safe: the event loop's. Time comes from the caller (seconds on
// a monotonic clock), so tests drive it.
#ifndef ST_CORE_TOKEN_BUCKET_H_
#define ST_CORE_TOKEN_BUCKET_H_

#include <algorithm>

namespace st {

class TokenBucket {
 public:
  TokenBucket() = default;  // unlimited
  // rate: tokens per second (> 0); burst: the most that accrue.
  TokenBucket(double rate, double burst) : rate_(rate), burst_(burst), tokens_(burst) {}

  bool limited() const { return rate_ > 0; }
  double rate() const { return rate_; }

  // Seconds until the balance reaches `need` (0: now).
  double WaitFor(double now, double need) {
    if (!limited()) return 0;
    Refill(now);
    return tokens_ >= need ? 0 : (need - tokens_) / rate_;
  }

  void Take(double now, double cost) {
    if (!limited()) return;
    Refill(now);
    tokens_ -= cost;
  }

  // A new rate (> 0) and burst from `now` on, for limits that follow the
  // host's load (host_load.h): what accrued until now at the old rate is
  // kept up to the new burst, and a debt stays a debt, paid at the new rate.
  // An unlimited bucket stays unlimited.
  void SetRate(double now, double rate, double burst) {
    if (!limited() || rate <= 0) return;
    Refill(now);
    rate_ = rate;
    burst_ = burst;
    tokens_ = std::min(tokens_, burst_);
  }

  double tokens() const { return tokens_; }

 private:
  void Refill(double now) {
    if (last_ > 0 && now > last_) tokens_ = std::min(burst_, tokens_ + (now - last_) * rate_);
    if (now > last_) last_ = now;
  }

  double rate_ = 0;
  double burst_ = 0;
  double tokens_ = 0;
  double last_ = 0;
};

}  // namespace st

#endif  // ST_CORE_TOKEN_BUCKET_H_
