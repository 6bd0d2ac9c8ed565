// GET_LOCAL: the ring collective of paper 3.7 (docs/wire-protocol.md,
// "Semantics").
//
// A collective is named by (file_id, generation, as_of, peerlist). Each peer's
// segment is the list of (copy_rank, name) it holds on disk at the rank the
// infofile commits to it. State machine of one round at one peer:
//
//   (none) --GET_LOCAL or RING_SEGMENT--> COLLECTING
//       arm the timeout (base + per_peer * N); read the infofile on a
//       background thread (it may wait for a lock: the loop goes on serving);
//       back on the loop, compute the own segment and send it to the
//       successor. Local GET_LOCAL requests become waiters. RING_SEGMENTs
//       are forwarded at once; their OK (or, if this peer cannot read the
//       infofile, their NO_NAMESPACE) waits for the own segment.
//   COLLECTING --RING_SEGMENT(origin o)--> COLLECTING
//       store it (MORE chunks accumulate per origin); forward it to the
//       successor unless o is the successor.
//   COLLECTING --all N segments--> DONE
//       Reveal(); reply LOCAL_LIST (or INVARIANT) to every waiter; keep the
//       result for --get-local-cache seconds for late clients.
//   COLLECTING --timeout--> (none): TIMEOUT naming the missing peers.
//   COLLECTING --successor unreachable--> (none): PEER_UNREACHABLE.
//   DONE --RING_SEGMENT--> a new round (the collective is run again).
//   DONE --cache expiry--> (none).
//
// Runs on the event loop thread. Network I/O goes through the Host (the
// server); the infofile read runs on the store's Env (background.h).
#ifndef ST_CORE_GET_LOCAL_H_
#define ST_CORE_GET_LOCAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "background.h"
#include "event_loop.h"
#include "infofile.h"
#include "infofile_copy.h"
#include "protocol.h"
#include "record_store.h"
#include "reveal.h"

namespace st {

struct GetLocalOptions {
  std::string advertise;       // this peer's address as it appears in peerlists
  std::string namespace_dir;   // empty: GET_LOCAL answers NO_NAMESPACE (unless copies)
  // --metadata fetch: the infofile is read from this peer's copy, brought to
  // the ring's generation first; if it cannot be, STALE_INFOFILE. Outlives this.
  InfofileCopies* copies = nullptr;
  double cache_s = 60;
  double timeout_base_s = 2;
  double timeout_per_peer_s = 0.5;
  double timeout_per_million_s = 10;  // per million entries in the ring
  size_t chunk_bytes = 1 << 20;  // LOCAL_LIST and RING_SEGMENT frame size
};

class GetLocal {
 public:
  class Host {
   public:
    virtual ~Host() = default;
    // Queue a frame for a client connection; dropped if it is gone.
    virtual void SendToClient(uint64_t conn_id, std::string frame) = 0;
    // Send a RING_SEGMENT with this payload to addr over the persistent
    // peer connection. Failures come back later (never from inside this
    // call) through OnPeerUnreachable.
    virtual void SendSegment(const std::string& addr, uint16_t flags, std::string payload) = 0;
  };

  GetLocal(EventLoop* loop, RecordStore* store, GetLocalOptions options, Host* host);
  ~GetLocal();

  GetLocal(const GetLocal&) = delete;
  GetLocal& operator=(const GetLocal&) = delete;

  // A client's GET_LOCAL. The reply (LOCAL_LIST frames or one ERROR) goes
  // out through the host, now or when the round completes.
  void OnGetLocal(uint64_t conn_id, uint64_t seq, const RingHeader& ring);

  // How a RING_SEGMENT is answered: OK (ok), or ERROR code with message.
  // Called exactly once, now or when this peer's own segment is known.
  using SegmentReply = std::function<void(bool ok, ErrorCode code, const std::string& message)>;

  // A RING_SEGMENT from the predecessor.
  void OnSegment(uint16_t flags, std::string_view payload, RingSegment seg, SegmentReply reply);

  // The link to addr failed: every collecting round whose successor it is
  // fails with PEER_UNREACHABLE.
  void OnPeerUnreachable(const std::string& addr, const std::string& reason);

  size_t round_count() const { return rounds_.size(); }
  // Infofile reads scheduled and not yet back on the loop.
  size_t reads_pending() const { return background_.pending(); }

 private:
  struct Waiter {
    uint64_t conn_id;
    uint64_t seq;
  };
  struct Round;

  static std::string Key(const RingHeader& ring);
  bool FindMe(const RingHeader& ring, size_t* me, ErrorCode* code, std::string* message) const;
  Round* StartRound(const RingHeader& ring, size_t me, ErrorCode* code, std::string* message);
  // Back on the loop with the infofile's committed copies (or the error).
  // `stale` (non-empty): the copy could not reach the ring's generation
  // (--metadata fetch), answered STALE_INFOFILE with that message.
  void OnInfofileRead(const std::string& key, uint64_t id, const Status& s,
                      std::vector<CommittedCopy> committed, const std::string& stale);
  // Answers the RING_SEGMENTs waiting for the own segment.
  static void AnswerSegments(Round* r, bool ok, ErrorCode code, const std::string& message);
  // Once every segment is in: Reveal off the loop, then Complete.
  void MaybeComplete(Round* r);
  // Back on the loop with Reveal's result: answers the waiters. May destroy r.
  void Complete(Round* r, bool ok, const InvariantViolation& v, std::vector<LocalListEntry> result);
  void ReplyTo(const Round& r, const Waiter& w);
  // Answers every waiter of the round with ERROR `code` naming `peers`.
  void Fail(const std::string& key, ErrorCode code, const std::string& message,
            const std::vector<std::string>& peers = {});
  void Erase(const std::string& key);
  void OnTimeout(const std::string& key, uint64_t id);

  EventLoop* loop_;
  RecordStore* store_;
  GetLocalOptions options_;
  Host* host_;
  uint64_t next_id_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Round>> rounds_;
  // Last, so destroyed first: cancels infofile reads waiting for a lock.
  BackgroundWork background_;
};

}  // namespace st

#endif  // ST_CORE_GET_LOCAL_H_
