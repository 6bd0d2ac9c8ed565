// Peers over real sockets with infofiles that keep past versions' copies in
// retained_copies (docs/snapshots.md, "The model"): GET_LOCAL as of a past
// generation follows a retained copy moved after the snapshot, and the
// scrubber keeps retained copies until the tracker drops their rows. The
// same on files of the tracker before that table: server_test.
#include <signal.h>
#include <sys/time.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "coding.h"
#include "crc32c.h"
#include "infofile_util.h"
#include "name_codec.h"
#include "peer_harness.h"
#include "test_util.h"

namespace st {
namespace {

using test::Client;
using test::ErrorMessage;
using test::PutFrame;
using test::ReadLocalList;
using test::Reply;
using test::TestPeer;

std::string ReadFile(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// A move at `gen` of the retained copy (name, until, rank) to peer `to`, as
// the tracker writes it: the old holder's row in copy_history, tagged.
std::string MoveRetained(const std::string& name, int until, int rank, int to, int gen,
                         const std::string& at) {
  std::string which = " WHERE name = '" + name + "' AND until = " + std::to_string(until) +
                      " AND copy_rank = " + std::to_string(rank) + ";";
  return "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at, "
         "retained_until) SELECT name, copy_rank, peer_idx, since, " +
         std::to_string(gen) + ", stored_as, " + at + ", until FROM retained_copies" + which +
         "UPDATE retained_copies SET peer_idx = " + std::to_string(to) +
         ", since = " + std::to_string(gen) + which;
}

// A version that stops being current at `gen`, as the tracker writes it.
std::string ToRetained(const std::string& name, int gen, const std::string& at) {
  std::string g = std::to_string(gen);
  return "INSERT INTO record_history(name, version, stored_as, size, crc32c, commit_seq, "
         "committed_at, until, until_at) SELECT name, version, stored_as, size, crc32c, "
         "commit_seq, committed_at, " +
         g + ", " + at + " FROM records WHERE name = '" + name +
         "';"
         "INSERT INTO retained_copies(name, until, copy_rank, peer_idx, since, stored_as) "
         "SELECT c.name, " +
         g + ", c.copy_rank, c.peer_idx, c.since, r.stored_as FROM copies c JOIN records r " +
         "USING(name) WHERE name = '" + name + "'; DELETE FROM copies WHERE name = '" + name + "';";
}

class SnapshotPeerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }
};

// a replaced at 2 and b deleted at 3, then at 4 a rebalance moves rank 0
// of each (retained copies) to p2: a read as of 1 planned at 4 reads them
// from p2, one planned at 3 from their old holders, with the bytes they
// had at 1, each record once.
TEST_F(SnapshotPeerTest, GetLocalAsOfFollowsARetainedCopyMoved) {
  test::TempDir ns;
  ServerOptions sv;
  sv.namespace_dir = ns.path();
  TestPeer p0(sv, StoreOptions()), p1(sv, StoreOptions()), p2(sv, StoreOptions());
  const uint64_t kFile = 41;
  struct Copy {
    TestPeer* peer;
    const char* name;
    uint8_t rank;
    const char* data;
  };
  // p0 keeps a@0 and p1 b@0 after the move (until their scrub age).
  const Copy copies[] = {{&p0, "a", 0, "a version 0"}, {&p1, "a", 1, "a version 0"},
                         {&p2, "a", 0, "a version 0"}, {&p1, "v1/a", 0, "a v1"},
                         {&p0, "v1/a", 1, "a v1"},     {&p1, "b", 0, "bee"},
                         {&p0, "b", 1, "bee"},         {&p2, "b", 0, "bee"}};
  for (const Copy& cp : copies) {
    Client c(cp.peer->port());
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk),
              c.Call(PutFrame(1, kFile, cp.rank, cp.name, cp.data)).h.type);
  }
  test::WriteInfofile(
      ns.path() + "/f", kFile,
      {{p0.peer_id(), p0.addr()}, {p1.peer_id(), p1.addr()}, {p2.peer_id(), p2.addr()}},
      {{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 1}, {"b", 1, 0}}, "storetorrent-infofile",
      ToRetained("a", 2, "0") +
          "INSERT INTO copies VALUES('a', 0, 1, 2), ('a', 1, 0, 2);"
          "UPDATE records SET version = 1, stored_as = 'v1/a', commit_seq = 2 WHERE name = 'a';" +
          ToRetained("b", 3, "0") + "DELETE FROM records WHERE name = 'b';" +
          MoveRetained("a", 2, 0, 2, 4, "0") + MoveRetained("b", 3, 0, 2, 4, "0") +
          "INSERT INTO snapshots VALUES('s1', 1, 0, '');"
          "UPDATE meta SET value = 4 WHERE key IN ('generation', 'format_version');");

  // What the ring reveals: name -> (peer index, rank, bytes); fails on a
  // record revealed twice.
  using Revealed = std::map<std::string, std::tuple<int, int, std::string>>;
  uint64_t seq = 0;
  auto ask = [&](uint64_t generation, uint64_t as_of) {
    RingHeader ring{kFile, generation, "/f", {p0.addr(), p1.addr(), p2.addr()}};
    if (as_of != generation) ring.as_of = as_of;
    ++seq;
    Client c0(p0.port()), c1(p1.port()), c2(p2.port());
    for (Client* c : {&c0, &c1, &c2}) c->Send(EncodeGetLocal(seq, ring));
    Revealed out;
    int i = 0;
    for (Client* c : {&c0, &c1, &c2}) {
      uint16_t error;
      std::string message;
      auto list = ReadLocalList(c, seq, &error, &message);
      EXPECT_EQ(0, error) << message;
      for (const auto& e : list) {
        std::string bytes = ReadFile(e.path);
        EXPECT_EQ(e.size, bytes.size()) << e.path;
        EXPECT_EQ(0u, out.count(e.name)) << e.name << " revealed twice";
        out[e.name] = {i, e.copy_rank, bytes};
      }
      ++i;
    }
    return out;
  };
  // As of the snapshot, planned after the move: from p2.
  EXPECT_EQ((Revealed{{"a", {2, 0, "a version 0"}}, {"b", {2, 0, "bee"}}}), ask(4, 1));
  // Planned before it (at 3), read after: from the old holders.
  EXPECT_EQ((Revealed{{"a", {0, 0, "a version 0"}}, {"b", {1, 0, "bee"}}}), ask(3, 1));
  // As of 2: a's version 1, b from p2; now: a's version 1 only.
  EXPECT_EQ((Revealed{{"a", {1, 0, "a v1"}}, {"b", {2, 0, "bee"}}}), ask(4, 2));
  EXPECT_EQ((Revealed{{"a", {1, 0, "a v1"}}}), ask(4, 4));
}

// Sets a file's mtime `seconds` in the past.
void Backdate(const std::string& path, double seconds) {
  struct timeval tv[2];
  gettimeofday(&tv[0], nullptr);
  tv[0].tv_sec -= static_cast<time_t>(seconds);
  tv[1] = tv[0];
  ASSERT_EQ(0, utimes(path.c_str(), tv)) << path << ": " << strerror(errno);
}

std::string RecordFile(const TestPeer& peer, uint64_t fid, const std::string& name, uint8_t rank,
                       const std::string& data) {
  char dir[64];
  snprintf(dir, sizeof(dir), "/files/%016llx/%02x/", static_cast<unsigned long long>(fid),
           static_cast<unsigned>(NameBucket(name)));
  return peer.data_dir() + dir + RecordFileName(EncodeName(name), rank, crc32c::Value(data));
}

ScrubReply ScrubOk(const Reply& r, uint64_t seq) {
  ScrubReply out;
  EXPECT_EQ(seq, r.h.seq);
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), r.h.type) << ErrorMessage(r);
  EXPECT_TRUE(DecodeScrubReply(r.payload, &out).ok());
  return out;
}

// The rows say what is kept: every retained copy of the peer, snapshot or
// not, and a copy moved away (a retained one too) within the scrub age;
// once the tracker drops a version's rows, its copies go.
TEST_F(SnapshotPeerTest, ScrubKeepsRetainedCopiesUntilTheirRowsAreGone) {
  test::TempDir ns;
  ServerOptions sv;
  sv.namespace_dir = ns.path();
  sv.scrub_interval_s = 86400;
  sv.scrub_age_s = 60;  // a short scrub age: what is older than a minute may go
  TestPeer peer(sv, StoreOptions());
  Client c(peer.port());
  const double kOld = 120;
  // r's version 0 (replaced at 3) and its version 1; e, d and f (deleted at
  // 4; d's and f's copies moved to peer-b at 5, d's long ago, f's just now);
  // m, whose copy here moved to peer-b at 2, long ago.
  const std::vector<std::string> names{"r", "v1/r", "e", "d", "f", "m"};
  uint64_t seq = 0;
  for (const std::string& name : names) {
    std::string data = "payload of " + name;
    ASSERT_EQ(static_cast<uint8_t>(MsgType::kOk),
              c.Call(PutFrame(++seq, 51, 0, name, data)).h.type);
    Backdate(RecordFile(peer, 51, name, 0, data), kOld);
  }
  const std::string old_at = std::to_string(static_cast<long long>(time(nullptr) - kOld));
  const std::string now_at = std::to_string(static_cast<long long>(time(nullptr)));
  test::WriteInfofile(
      ns.path() + "/f", 51, {{peer.peer_id(), peer.addr()}, {"peer-b", "h:2"}},
      {{"r", 0, 0}, {"e", 0, 0}, {"d", 0, 0}, {"f", 0, 0}, {"m", 0, 0}}, "storetorrent-infofile",
      "INSERT INTO copy_history(name, copy_rank, peer_idx, since, until, stored_as, until_at) "
      "VALUES('m', 0, 0, 1, 2, NULL, " +
          old_at +
          ");"
          "UPDATE copies SET peer_idx = 1, since = 2 WHERE name = 'm';" +
          ToRetained("r", 3, old_at) +
          "INSERT INTO copies VALUES('r', 0, 0, 3);"
          "UPDATE records SET version = 1, stored_as = 'v1/r', commit_seq = 3 WHERE name = 'r';" +
          ToRetained("e", 4, old_at) + ToRetained("d", 4, old_at) + ToRetained("f", 4, old_at) +
          "DELETE FROM records WHERE name IN ('e', 'd', 'f');" +
          MoveRetained("d", 4, 0, 1, 5, old_at) + MoveRetained("f", 4, 0, 1, 5, now_at) +
          "UPDATE meta SET value = 5 WHERE key = 'generation';"
          "UPDATE meta SET value = 4 WHERE key = 'format_version';");
  auto held = [&] {
    std::set<std::string> out;
    for (const std::string& name : names) {
      Reply rep = c.Call(EncodeGet(++seq, 51, name));
      if (rep.h.type == static_cast<uint8_t>(MsgType::kData)) out.insert(name);
    }
    return out;
  };
  // No snapshot row: r's version 0 and e are kept (retained here), f
  // (moved away within the scrub age); d and m (moved away long ago) go.
  ScrubReply got = ScrubOk(c.Call(EncodeScrub(100)), 100);
  EXPECT_EQ(2u, got.removed_uncommitted);
  EXPECT_EQ(4u, got.kept);
  EXPECT_EQ((std::set<std::string>{"r", "v1/r", "e", "f"}), held());
  // The tracker drops r's version 0 and e (record_history and
  // retained_copies rows together): they go.
  test::ExecSql(ns.path() + "/f", "DELETE FROM record_history WHERE name IN ('r', 'e');"
                                  "DELETE FROM retained_copies WHERE name IN ('r', 'e');");
  got = ScrubOk(c.Call(EncodeScrub(101)), 101);
  EXPECT_EQ(2u, got.removed_uncommitted);
  EXPECT_EQ((std::set<std::string>{"v1/r", "f"}), held());
}

}  // namespace
}  // namespace st
