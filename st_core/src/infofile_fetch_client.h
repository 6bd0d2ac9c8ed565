// The peer's FetchInfofile client (issue 40; st-peer --metadata fetch): one
// server-streaming call to the tracker per catch-up of an infofile copy
// (infofile_copy.h owns the copies). Peers authenticate as for announces: a
// PEER capability minted with --key-file naming "peer:<peer_id>" (gRPC
// metadata x-st-capability), over TLS when --tracker-ca is given; the
// request's user is "peer:<peer_id>", and the tracker serves a peer only the
// files whose peerlist names it (st_py/tracker/service.py, FetchInfofile).
//
// Copies from standbys (docs/peer.md, "Copies from standbys"): the standbys
// that follow the log serve FetchInfofile on ports of their own, which the
// tracker's announce replies name (SetStandbys). A question that names a
// generation (GET_LOCAL's ring, the mirror pass's named one) goes to them
// first, a different one first each time (peers start at different ones),
// then to the tracker; a question for the tracker's latest (want_generation
// 0) goes to the tracker alone. A
// standby refuses a state it has not applied (FAILED_PRECONDITION, st-error:
// replica-behind), and an answer below the wanted generation or the copy's
// own log position is not used either: the next one is asked. A standby that
// does not answer (UNAVAILABLE, or its deadline: at most kStandbyTimeoutS and
// half the time left) is not asked for kBenchS. With no standbys the
// tracker's call is exactly the one it was.
//
// Thread-safety: Fetch may be called from several threads at once (one gRPC
// channel, a context per call).
#ifndef ST_CORE_INFOFILE_FETCH_CLIENT_H_
#define ST_CORE_INFOFILE_FETCH_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "infofile_copy.h"

namespace st {

struct FetchClientOptions {
  std::string tracker;  // --tracker (host:port, or several comma-separated)
  std::string peer_id;
  std::string capability_key;  // empty: no capability (a tracker without a key)
  std::string ca_pem, cert_pem, key_pem;  // TLS, as the announcer's
};

class GrpcInfofileFetcher : public InfofileFetcher {
 public:
  explicit GrpcInfofileFetcher(FetchClientOptions options);
  ~GrpcInfofileFetcher() override;

  Status Fetch(const std::string& name, uint64_t file_id, const CopyState& have,
               uint64_t want_generation, double deadline_s, FetchedInfofile* out) override;
  std::string tracker() const override { return options_.tracker; }
  void SetStandbys(const std::vector<std::string>& addrs) override;

  static constexpr double kStandbyTimeoutS = 10.0;  // a standby's whole answer at most
  static constexpr double kBenchS = 10.0;  // a standby that did not answer is not asked meanwhile

 private:
  struct Impl;
  FetchClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace st

#endif  // ST_CORE_INFOFILE_FETCH_CLIENT_H_
