#include "get_local.h"

#include <algorithm>
#include <cstdio>

#include "infofile.h"
#include "log.h"
#include "name_codec.h"
#include "reveal.h"

namespace st {

struct GetLocal::Round {
  uint64_t id = 0;
  std::string key;
  RingHeader ring;
  size_t me = 0;
  size_t successor = 0;
  double started = 0;
  bool done = false;
  bool revealing = false;  // every segment is in; Reveal runs off the loop
  std::vector<std::vector<RingEntry>> segments;
  std::vector<std::vector<RingEntry>> partial;  // MORE chunks so far, per origin
  std::vector<char> have;
  size_t have_count = 0;
  // own segment by record name: the name its copy is stored under, for sizes and paths
  std::unordered_map<std::string, std::pair<std::string, RecordMeta>> mine;
  std::vector<Waiter> waiters;
  bool own_ready = false;                     // the own segment is in segments[me]
  std::vector<SegmentReply> segment_replies;  // RING_SEGMENTs waiting for it
  EventLoop::TimerId timer = 0;  // timeout while collecting, cache expiry when done
  // Result, when done.
  bool failed = false;
  ErrorCode error = ErrorCode::kInternal;
  std::string message;
  std::vector<std::string> error_peers;  // the peers the error concerns
  std::vector<LocalListEntry> result;

  const std::string& successor_addr() const { return ring.peers[successor]; }
  std::string Describe() const {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "file_id %llu generation %llu",
                  static_cast<unsigned long long>(ring.file_id),
                  static_cast<unsigned long long>(ring.generation));
    std::string as_of = ring.as_of ? " as of " + std::to_string(*ring.as_of) : "";
    return std::string(buf) + as_of + " (" + Printable(ring.file_name) + ", " +
           std::to_string(ring.peers.size()) + " peers)";
  }
};

GetLocal::GetLocal(EventLoop* loop, RecordStore* store, GetLocalOptions options, Host* host)
    : loop_(loop),
      store_(store),
      options_(std::move(options)),
      host_(host),
      background_(store->env(), loop) {}

GetLocal::~GetLocal() {
  for (auto& kv : rounds_) {
    if (kv.second->timer != 0) loop_->CancelTimer(kv.second->timer);
  }
}

void GetLocal::AnswerSegments(Round* r, bool ok, ErrorCode code, const std::string& message) {
  std::vector<SegmentReply> replies;
  replies.swap(r->segment_replies);
  for (auto& reply : replies) reply(ok, code, message);
}

std::string GetLocal::Key(const RingHeader& ring) {
  // as_of is part of the name: two scans of different as_of never mix
  // segments (no AS_OF and AS_OF = generation name the same collective).
  std::string key = std::to_string(ring.file_id) + "/" + std::to_string(ring.generation) + "/" +
                    std::to_string(ring.read_generation());
  for (const auto& p : ring.peers) {
    key.push_back('\0');
    key += p;
  }
  return key;
}

bool GetLocal::FindMe(const RingHeader& ring, size_t* me, ErrorCode* code,
                      std::string* message) const {
  size_t found = 0;
  for (size_t i = 0; i < ring.peers.size(); ++i) {
    if (ring.peers[i] == options_.advertise) {
      if (found == 0) *me = i;
      ++found;
    }
  }
  if (found == 1) return true;
  *code = ErrorCode::kNotInRing;
  if (found == 0) {
    *message = "this peer's address " + options_.advertise + " is not in the peerlist of " +
               std::to_string(ring.peers.size()) +
               " peers; send GET_LOCAL to a peer of the file's peerlist (or start st-peer with "
               "--advertise matching the tracker's address)";
  } else {
    *message = "this peer's address " + options_.advertise + " appears " + std::to_string(found) +
               " times in the peerlist; a ring needs distinct addresses";
  }
  return false;
}

GetLocal::Round* GetLocal::StartRound(const RingHeader& ring, size_t me, ErrorCode* code,
                                      std::string* message) {
  if (options_.namespace_dir.empty() && options_.copies == nullptr) {
    *code = ErrorCode::kNoNamespace;
    *message =
        "this peer has no namespace root; start st-peer with --namespace <dir> (the tracker's "
        "namespace, shared read-only) to serve GET_LOCAL";
    return nullptr;
  }
  auto r = std::make_unique<Round>();
  r->id = ++next_id_;
  r->key = Key(ring);
  r->ring = ring;
  r->me = me;
  size_t n = ring.peers.size();
  r->successor = (me + 1) % n;
  r->started = EventLoop::Now();
  r->segments.resize(n);
  r->partial.resize(n);
  r->have.assign(n, 0);
  std::string key = r->key;
  uint64_t id = r->id;
  // The ring's work grows with its entries (about this peer's records of
  // the file times the peers): a fixed timeout failed every round of a
  // file of 10^6 records on a 2-core machine (docs/benchmarks.md).
  const RecordStore::FileIndex* index = store_->Find(ring.file_id);
  double entries =
      static_cast<double>(index != nullptr ? index->size() : 0) * static_cast<double>(n);
  double timeout = options_.timeout_base_s + options_.timeout_per_peer_s * static_cast<double>(n) +
                   options_.timeout_per_million_s * entries / 1e6;
  if (n > 1) r->timer = loop_->AddTimer(timeout, [this, key, id] { OnTimeout(key, id); });
  // A copy's catch-up gets half the ring's time, so a tracker that does not
  // answer is told as STALE_INFOFILE, not as the ring's TIMEOUT.
  double fetch_deadline_s = std::max(0.5, timeout / 2);
  // The infofile read may wait up to its busy timeout for a writer's lock:
  // off the loop.
  auto committed = std::make_shared<std::vector<CommittedCopy>>();
  auto status = std::make_shared<Status>();
  auto stale = std::make_shared<std::string>();  // --metadata fetch: why the copy is behind
  std::string path = options_.copies != nullptr ? options_.copies->PathOf(ring.file_id)
                                                : options_.namespace_dir + ring.file_name;
  InfofileCopies* copies = options_.copies;
  std::string file_name = ring.file_name;
  uint64_t file_id = ring.file_id;
  std::string peer_id = store_->peer_id();
  InfofileReadOptions ro;
  ro.generation = ring.generation;  // the plan's snapshot: exactly once across the ring
  ro.as_of = ring.as_of;            // the records of this generation (docs/snapshots.md)
  ro.cancel = background_.cancel();
  background_.Schedule(
      [path, file_id, file_name, copies, fetch_deadline_s, peer_id, ro, committed, status, stale] {
        if (copies != nullptr) {
          // Never reveal less than the plan's generation commits: the copy
          // reaches it first, or the round is refused with STALE_INFOFILE.
          uint64_t have = 0;
          double t0 = EventLoop::Now();
          Status s = copies->Ensure(file_name, file_id, ro.generation, fetch_deadline_s, &have);
          if (!s.ok()) {
            *stale = "the infofile copy of " + Printable(file_name) + " (file_id " +
                     std::to_string(file_id) + ") is at generation " + std::to_string(have) +
                     " and the plan asks for generation " + std::to_string(ro.generation) +
                     ": the tracker " + copies->tracker() + " could not bring it forward (" +
                     s.ToString() + "); this peer reveals nothing older, retry when the " +
                     "tracker is reachable";
            *status = s;
            return;
          }
          double waited = EventLoop::Now() - t0;
          if (waited > 0.1) {
            ST_LOG_INFO("GET_LOCAL %s: waited %.3f s for the infofile copy to reach generation "
                        "%llu (now %llu)",
                        Printable(file_name).c_str(), waited,
                        static_cast<unsigned long long>(ro.generation),
                        static_cast<unsigned long long>(have));
          }
        }
        *status = ReadCommittedCopies(path, file_id, peer_id, ro, committed.get());
      },
      [this, key, id, committed, status, stale] {
        OnInfofileRead(key, id, *status, std::move(*committed), *stale);
      });
  Round* raw = r.get();
  rounds_[raw->key] = std::move(r);
  return raw;
}

void GetLocal::OnInfofileRead(const std::string& key, uint64_t id, const Status& s,
                              std::vector<CommittedCopy> committed, const std::string& stale) {
  auto it = rounds_.find(key);
  if (it == rounds_.end() || it->second->id != id) return;  // failed or restarted meanwhile
  Round* r = it->second.get();
  if (!stale.empty()) {
    ST_LOG_WARN("GET_LOCAL refused: %s", stale.c_str());
    AnswerSegments(r, false, ErrorCode::kStaleInfofile, stale);
    Fail(key, ErrorCode::kStaleInfofile, stale);
    return;
  }
  if (!s.ok()) {
    std::string message =
        "cannot read the infofile of " + Printable(r->ring.file_name) +
        (options_.copies != nullptr
             ? " from this peer's copy " + options_.copies->PathOf(r->ring.file_id)
             : " under namespace " + options_.namespace_dir) +
        ": " + s.ToString();
    AnswerSegments(r, false, ErrorCode::kNoNamespace, message);
    Fail(key, ErrorCode::kNoNamespace, message);
    return;
  }
  std::vector<RingEntry> own;
  const RecordStore::FileIndex* index = store_->Find(r->ring.file_id);
  if (index != nullptr) {
    for (auto& c : committed) {
      auto e = index->find(c.key());
      if (e == index->end() || e->second.copy_rank != c.copy_rank) continue;
      r->mine[c.name] = {c.key(), e->second};
      own.push_back(RingEntry{c.copy_rank, std::move(c.name)});
    }
  }
  ST_LOG_DEBUG("GET_LOCAL round for %s: own segment of %zu records", r->Describe().c_str(),
               own.size());
  if (r->ring.peers.size() > 1) {
    std::vector<std::string> payloads =
        EncodeRingSegmentPayloads(r->ring, static_cast<uint16_t>(r->me), own, options_.chunk_bytes);
    for (size_t i = 0; i < payloads.size(); ++i) {
      uint16_t flags = r->ring.flags() | (i + 1 < payloads.size() ? kFlagMore : 0);
      host_->SendSegment(r->successor_addr(), flags, std::move(payloads[i]));
    }
  }
  r->segments[r->me] = std::move(own);
  r->have[r->me] = 1;
  ++r->have_count;
  r->own_ready = true;
  AnswerSegments(r, true, ErrorCode::kInternal, "");
  MaybeComplete(r);
}

void GetLocal::ReplyTo(const Round& r, const Waiter& w) {
  if (r.failed) {
    host_->SendToClient(w.conn_id, EncodeError(w.seq, r.error, r.message, r.error_peers));
    return;
  }
  for (auto& f : EncodeLocalListFrames(w.seq, r.result, options_.chunk_bytes)) {
    host_->SendToClient(w.conn_id, std::move(f));
  }
}

void GetLocal::MaybeComplete(Round* r) {
  if (r->done || r->revealing || r->have_count < r->ring.peers.size()) return;
  // Reveal and the paths of a file of 10^6 records take seconds: off the
  // loop, which keeps announcing and serving meanwhile (a stalled loop stops
  // announces and the tracker fails the peer).
  r->revealing = true;
  if (r->timer != 0) loop_->CancelTimer(r->timer);  // every segment arrived: no more timeout
  r->timer = 0;
  struct Work {
    std::vector<std::vector<RingEntry>> segments;
    std::unordered_map<std::string, std::pair<std::string, RecordMeta>> mine;
    bool ok = false;
    InvariantViolation violation;
    std::vector<LocalListEntry> result;
  };
  auto w = std::make_shared<Work>();
  w->segments = std::move(r->segments);
  w->mine = std::move(r->mine);
  size_t me = r->me;
  uint64_t file_id = r->ring.file_id;
  const RecordStore* store = store_;
  std::string key = r->key;
  uint64_t id = r->id;
  background_.Schedule(
      [w, me, file_id, store] {
        std::vector<RingEntry> revealed;
        w->ok = Reveal(w->segments, me, &revealed, &w->violation);
        if (!w->ok) return;
        w->result.reserve(revealed.size());
        for (auto& e : revealed) {
          const auto& [stored_as, meta] = w->mine[e.name];
          LocalListEntry le;
          le.copy_rank = e.copy_rank;
          le.size = meta.size;
          le.path = store->RecordPath(file_id, stored_as, meta);
          le.name = std::move(e.name);
          w->result.push_back(std::move(le));
        }
      },
      [this, w, key, id] {
        auto it = rounds_.find(key);
        if (it == rounds_.end() || it->second->id != id) return;  // failed or restarted meanwhile
        Complete(it->second.get(), w->ok, w->violation, std::move(w->result));
      });
}

void GetLocal::Complete(Round* r, bool ok, const InvariantViolation& v,
                        std::vector<LocalListEntry> result) {
  if (ok) {
    r->result = std::move(result);
    ST_LOG_INFO("GET_LOCAL %s complete in %.3f s: revealing %zu records", r->Describe().c_str(),
                EventLoop::Now() - r->started, r->result.size());
  } else {
    r->failed = true;
    r->error = ErrorCode::kInvariant;
    r->message = DescribeViolation(v, r->ring.peers);
    for (size_t i : v.peers) {
      if (i < r->ring.peers.size()) r->error_peers.push_back(r->ring.peers[i]);
    }
    ST_LOG_WARN("GET_LOCAL %s: %s", r->Describe().c_str(), r->message.c_str());
  }
  // The segments are no longer needed; keep only the result.
  r->segments.clear();
  r->partial.clear();
  r->mine.clear();
  r->done = true;
  if (r->timer != 0) loop_->CancelTimer(r->timer);
  r->timer = 0;
  for (const Waiter& w : r->waiters) ReplyTo(*r, w);
  r->waiters.clear();
  if (options_.cache_s > 0) {
    std::string key = r->key;
    uint64_t id = r->id;
    r->timer = loop_->AddTimer(options_.cache_s, [this, key, id] {
      auto it = rounds_.find(key);
      if (it != rounds_.end() && it->second->id == id) {
        it->second->timer = 0;
        rounds_.erase(it);
      }
    });
  } else {
    Erase(r->key);
  }
}

void GetLocal::Erase(const std::string& key) {
  auto it = rounds_.find(key);
  if (it == rounds_.end()) return;
  // Segments still waiting were accepted; what ended the round is not their
  // senders' concern (they time out or fail on their own).
  AnswerSegments(it->second.get(), true, ErrorCode::kInternal, "");
  if (it->second->timer != 0) loop_->CancelTimer(it->second->timer);
  rounds_.erase(it);
}

void GetLocal::Fail(const std::string& key, ErrorCode code, const std::string& message,
                    const std::vector<std::string>& peers) {
  auto it = rounds_.find(key);
  if (it == rounds_.end()) return;
  Round* r = it->second.get();
  ST_LOG_WARN("GET_LOCAL %s failed: %s", r->Describe().c_str(), message.c_str());
  for (const Waiter& w : r->waiters) {
    host_->SendToClient(w.conn_id, EncodeError(w.seq, code, message, peers));
  }
  Erase(key);  // drop the round's state
}

void GetLocal::OnTimeout(const std::string& key, uint64_t id) {
  auto it = rounds_.find(key);
  if (it == rounds_.end() || it->second->id != id || it->second->done) return;
  Round* r = it->second.get();
  r->timer = 0;
  std::string missing;
  std::vector<std::string> missing_peers;
  for (size_t i = 0; i < r->have.size(); ++i) {
    if (r->have[i]) continue;
    if (!missing.empty()) missing += ", ";
    missing += r->ring.peers[i];
    missing_peers.push_back(r->ring.peers[i]);
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", EventLoop::Now() - r->started);
  Fail(key, ErrorCode::kTimeout,
       "GET_LOCAL ring did not complete within " + std::string(secs) +
           " s; index segments missing from: " + missing +
           " (are those peers running, reachable, and was GET_LOCAL sent to them with the same "
           "generation and peerlist?)",
       missing_peers);
}

void GetLocal::OnGetLocal(uint64_t conn_id, uint64_t seq, const RingHeader& ring) {
  ErrorCode code;
  std::string message;
  Status s = ValidateFileName(ring.file_name);
  if (!s.ok()) {
    host_->SendToClient(conn_id, EncodeError(seq, ErrorCode::kBadName,
                                             "file name '" + Printable(ring.file_name) +
                                                 "' refused: " + s.message()));
    return;
  }
  size_t me = 0;
  if (!FindMe(ring, &me, &code, &message)) {
    host_->SendToClient(conn_id, EncodeError(seq, code, message));
    return;
  }
  auto it = rounds_.find(Key(ring));
  if (it != rounds_.end()) {
    Round* r = it->second.get();
    if (r->done) {
      ReplyTo(*r, Waiter{conn_id, seq});
    } else {
      r->waiters.push_back(Waiter{conn_id, seq});
    }
    return;
  }
  Round* r = StartRound(ring, me, &code, &message);
  if (r == nullptr) {
    host_->SendToClient(conn_id, EncodeError(seq, code, message));
    return;
  }
  r->waiters.push_back(Waiter{conn_id, seq});
  MaybeComplete(r);
}

void GetLocal::OnSegment(uint16_t flags, std::string_view payload, RingSegment seg,
                         SegmentReply reply) {
  Status s = ValidateFileName(seg.ring.file_name);
  if (!s.ok()) {
    reply(false, ErrorCode::kBadName,
          "file name '" + Printable(seg.ring.file_name) + "' refused: " + s.message());
    return;
  }
  size_t me = 0;
  ErrorCode code;
  std::string message;
  if (!FindMe(seg.ring, &me, &code, &message)) {
    reply(false, code, message);
    return;
  }
  size_t n = seg.ring.peers.size();
  size_t origin = seg.origin;
  if (origin >= n || origin == me) {
    // A malformed request, not a bug in this peer.
    reply(false, ErrorCode::kBadFrame,
          "RING_SEGMENT origin " + std::to_string(origin) + " is not another peer of a ring of " +
              std::to_string(n));
    return;
  }
  std::string key = Key(seg.ring);
  Round* r = nullptr;
  std::vector<Waiter> carried;
  auto it = rounds_.find(key);
  if (it != rounds_.end()) {
    Round* old = it->second.get();
    if (!old->done && !old->have[origin]) {
      r = old;
    } else {
      // A completed collective, or a second segment from the same origin:
      // the collective is being run again. Join the new round.
      if (!old->done) {
        ST_LOG_INFO("GET_LOCAL %s: second segment from %s, restarting the round",
                    old->Describe().c_str(), old->ring.peers[origin].c_str());
        carried = std::move(old->waiters);
      }
      Erase(key);
    }
  }
  if (r == nullptr) {
    r = StartRound(seg.ring, me, &code, &message);
    if (r == nullptr) {
      for (const Waiter& w : carried)
        host_->SendToClient(w.conn_id, EncodeError(w.seq, code, message));
      reply(false, code, message);
      return;
    }
    r->waiters = std::move(carried);
  }
  auto& acc = r->partial[origin];
  if (acc.empty()) {
    acc = std::move(seg.entries);
  } else {
    for (auto& e : seg.entries) acc.push_back(std::move(e));
  }
  if (!(flags & kFlagMore)) {
    r->segments[origin] = std::move(acc);
    acc.clear();
    r->have[origin] = 1;
    ++r->have_count;
  }
  if (origin != r->successor) {
    // The payload goes on as it came: its flags with it.
    host_->SendSegment(r->successor_addr(), flags & (kFlagMore | kFlagAsOf), std::string(payload));
  }
  if (r->own_ready) {
    reply(true, ErrorCode::kInternal, "");
  } else {
    r->segment_replies.push_back(std::move(reply));
  }
  MaybeComplete(r);
}

void GetLocal::OnPeerUnreachable(const std::string& addr, const std::string& reason) {
  std::vector<std::string> keys;
  for (auto& kv : rounds_) {
    const Round& r = *kv.second;
    if (!r.done && r.ring.peers.size() > 1 && r.successor_addr() == addr) keys.push_back(kv.first);
  }
  for (const auto& key : keys) {
    Fail(key, ErrorCode::kPeerUnreachable,
         "cannot reach ring successor " + addr + ": " + reason +
             " (is that peer running? GET_LOCAL needs every peer of the ring)",
         {addr});
  }
}

}  // namespace st
