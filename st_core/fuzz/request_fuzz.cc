// libFuzzer target: the peer's request handling on attacker bytes
// (docs/security.md, "Fuzzing").
//
// The input is what a client sends on one connection. One event loop and a
// real Server are made once per process (and the Server again only when an
// input wants the other kind of peer, below), in front of one RecordStore
// and one namespace root. Each input is one in-memory connection
// (mem_transport.h: a MemPipe, the server's end a Transport under a real
// Connection) handed to the server as an accepted one
// (Server::AcceptConnection, so the bytes go through the --max-connections
// accounting, Connection's framing and Server::HandleRequest exactly as in
// st-peer; only the socket is left out). The test is the client: it writes
// the input (all at once, or in pieces of 1 to 97 bytes each read by the
// server before the next is written, a function of the input's CRC:
// Connection's partial-frame path), reads every reply out of a pipe that
// holds 1 to 200 bytes or 1 MiB (also a function of the input: with the
// small one every reply is written in pieces, Connection's backed-up output
// path), and once every request it sent has been answered half-closes and
// closes the connection (after a frame that does not parse: reads until the
// server closes). Between these steps it delivers what the connection is
// ready for, as an epoll turn would, and runs the loop's due timers and
// posted tasks (EventLoop::RunReady): no socket, no epoll, no thread.
//
// The record store lives in memory (mem_env.h: a MemEnv for the data
// directory, a path that does not exist on disk, so nothing that went around
// the Env could write there); the namespace root with its infofile is on
// disk under $TMPDIR, read by SQLite as in st-peer. The Env's background
// work runs inline (InlineEnv), its completions still posted to the loop.
//
// An input whose first frame is AUTH meets a peer that checks capabilities
// (docs/capabilities.md), with a fixed key and clock; any other input a peer
// without a key (AUTH answered OK and ignored).
//
// What an input may change is back as it was when the input ends: the
// store is emptied (below), the connection is closed and forgotten, no
// GET_LOCAL round or scrub is left running (the loop runs until then), and
// impact control has no limit. So an input meets the same server whatever
// ran before it, and a crash reproduces from the input alone.
//
// Nothing reaches the network: the server advertises 127.0.0.1:4000 (the
// address in tests/vectors/wire.json's GET_LOCAL vectors), ring segments for
// successors are decoded and dropped instead of sent, and ring timeouts are
// zero, so a GET_LOCAL with other peers answers TIMEOUT at once.
//
// Invariants checked after each input, besides "no crash, no sanitizer
// report, no hang":
//   - every reply frame parses: a reply type, protocol version 1, a payload
//     its decoder accepts, an error code in the table; a DATA reply's bytes
//     match its CRC; LOCAL_LIST paths lie in <data>/files/;
//   - every request gets exactly one final reply carrying its seq
//     (server.h); a frame that does not parse gets BAD_FRAME (or
//     FRAME_TOO_LARGE) as the last reply, then the connection closes;
//   - the server counts no connection, client or ring link afterwards;
//   - nothing was written outside the data directory: the sandbox on disk
//     holds only ns/ as made; the data directory only PEER_ID, LOCK, an
//     empty tmp/ and files/<16 hex>/<2 hex>/<record file>[.name] whose name
//     decodes, sits in its bucket and matches the store's index, count and
//     bytes.
// Then every file of the store is deleted (DELETE_FILE's code path), so each
// input starts from an empty store.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "capability.h"
#include "coding.h"
#include "crc32c.h"
#include "env.h"
#include "event_loop.h"
#include "fuzz_util.h"
#include "infofile_schema.h"
#include "log.h"
#include "mem_env.h"
#include "mem_transport.h"
#include "name_codec.h"
#include "protocol.h"
#include "record_store.h"
#include "server.h"
#include "sqlite_ro.h"
#include "test_util.h"

namespace st {
namespace {

constexpr char kAdvertise[] = "127.0.0.1:4000";
constexpr char kOtherPeer[] = "127.0.0.1:4001";
// Smaller than the default so that FRAME_TOO_LARGE is within reach and a
// partial frame never makes the connection buffer 64 MiB.
constexpr uint32_t kMaxFrame = 1u << 20;
constexpr double kWatchdogSeconds = 4.0;  // below scripts/fuzz.sh's -timeout=5
// An input whose first frame is AUTH meets a peer that checks capabilities
// (docs/capabilities.md) with this key, at this fixed time (so that tokens
// in the corpus never expire); any other input meets a peer without a key.
// make_corpus.py signs its AUTH seeds with the same key.
constexpr char kCapabilityKey[] = "st-fuzz-capability-key-32-bytes!";
static_assert(sizeof(kCapabilityKey) - 1 == kCapabilityKeySize, "a 32-byte key");
constexpr uint64_t kFuzzNow = 1700000000;

// ---- The sandbox, made once per process ----------------------------------------

// The Env's background work (a GET's first verification, GET_LOCAL's
// infofile read, SCRUB's inventory) runs at once on the loop thread, its
// completion still posted to the loop as in st-peer: the target has one
// thread, so an input runs the same way every time, and everything it
// allocates is freed before it ends (libFuzzer's per-input leak check stays
// cheap: it runs LSan only when an input's mallocs and frees differ).
class InlineEnv : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  void Schedule(std::function<void()> work) override { work(); }
};

struct Sandbox {
  std::string root;  // <TMPDIR>/st_fuzz_XXXXXX: holds ns/ only
  std::string data;  // <root>/data: in mem_env only, not on disk
  std::string ns;
  std::unique_ptr<test::MemEnv> mem;  // the data directory
  std::unique_ptr<Env> env;           // the store's: InlineEnv over mem
  std::unique_ptr<RecordStore> store;
  sqlite3* holder = nullptr;  // keeps the infofile in SQLite's shared cache
};

Sandbox* g_box = nullptr;

// The entries of a directory on disk, sorted. getdents64 into a stack
// buffer: opendir's 32 KiB heap buffer cost more than the rest of an
// input's checks (under ASan every large allocation is an mmap).
std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ST_FUZZ_CHECK(fd >= 0, "cannot list %s: %s", dir.c_str(), std::strerror(errno));
  alignas(8) char buf[4096];
  while (true) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
    ST_FUZZ_CHECK(n >= 0, "cannot list %s: %s", dir.c_str(), std::strerror(errno));
    if (n == 0) break;
    for (long off = 0; off < n;) {
      const auto* e = reinterpret_cast<const struct dirent64*>(buf + off);
      off += e->d_reclen;
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      out.emplace_back(e->d_name);
    }
  }
  close(fd);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Sql(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out.push_back(c);
    if (c == '\'') out.push_back('\'');
  }
  return out + "'";
}

// An infofile (docs/infofile.md, format_version 2) for file 42, "/d/f", the
// file of the GET_LOCAL and RING_SEGMENT vectors: this peer (index 0) holds
// "a" at rank 0 and "x" at rank 0, the other peer "bc" at rank 1 and "a" at
// rank 1, all committed at generation 1.
void WriteInfofile(const std::string& path, const std::string& my_peer_id) {
  sqlite3* db = nullptr;
  ST_FUZZ_CHECK(sqlite3_open(path.c_str(), &db) == SQLITE_OK, "sqlite3_open %s", path.c_str());
  std::string sql =
      std::string(test::kInfofileSchemaSql) +
      "BEGIN;"
      "INSERT INTO meta VALUES('format','storetorrent-infofile'),('format_version',2),"
      "('file_id',42),('generation',1);"
      "INSERT INTO peers VALUES(0," +
      Sql(my_peer_id) + "," + Sql(kAdvertise) +
      ");"
      "INSERT INTO peers VALUES(1,'fuzz-other-peer'," +
      Sql(kOtherPeer) +
      ");"
      "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) "
      "VALUES('a',1,0,1,0),('bc',1,0,1,0),('x',1,0,1,0);"
      "INSERT INTO copies VALUES('a',0,0,1),('x',0,0,1),('bc',1,1,1),('a',1,1,1);"
      "COMMIT;";
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  ST_FUZZ_CHECK(rc == SQLITE_OK, "writing the infofile: %s", err != nullptr ? err : "?");
  sqlite3_free(err);
  sqlite3_close(db);
}

// SQLite's shared cache (process-wide, this target only): while one
// connection to the infofile stays open, the peer's own read-only opens of
// it (GET_LOCAL, SCRUB) share its schema and pages instead of reading and
// parsing the schema again, which was most of such an input's time. The
// peer's code runs as in st-peer; SQLite only skips work.
void HoldInfofile(Sandbox* box, const std::string& path) {
  ST_FUZZ_CHECK(sqlite3_enable_shared_cache(1) == SQLITE_OK, "sqlite3_enable_shared_cache");
  int rc = sqlite3_open_v2(sqlite::ReadOnlyUri(path).c_str(), &box->holder,
                           SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  ST_FUZZ_CHECK(rc == SQLITE_OK, "opening %s: %s", path.c_str(), sqlite3_errmsg(box->holder));
  rc = sqlite3_exec(box->holder, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  ST_FUZZ_CHECK(rc == SQLITE_OK, "reading the schema of %s: %s", path.c_str(),
                sqlite3_errmsg(box->holder));
}

void StopPeer();

void RemoveSandbox() {
  if (g_box == nullptr) return;
  StopPeer();
  g_box->store.reset();
  sqlite3_close(g_box->holder);
  g_box->holder = nullptr;
  test::RemoveTree(g_box->root);
}

void MakeSandbox() {
  signal(SIGPIPE, SIG_IGN);
  const char* level = getenv("ST_FUZZ_LOG");  // e.g. ST_FUZZ_LOG=debug to watch the server
  if (level != nullptr && std::strcmp(level, "debug") == 0) {
    SetLogLevel(LogLevel::kDebug);
  } else if (level != nullptr && std::strcmp(level, "info") == 0) {
    SetLogLevel(LogLevel::kInfo);
  } else {
    SetLogLevel(LogLevel::kError);
  }
  g_box = new Sandbox;
  const char* base = getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/st_fuzz_XXXXXX";
  ST_FUZZ_CHECK(mkdtemp(&tmpl[0]) != nullptr, "mkdtemp %s: %s", tmpl.c_str(), std::strerror(errno));
  char real[4096];
  ST_FUZZ_CHECK(realpath(tmpl.c_str(), real) != nullptr, "realpath %s", tmpl.c_str());
  g_box->root = real;
  g_box->data = g_box->root + "/data";
  g_box->ns = g_box->root + "/ns";
  StoreOptions so;
  so.data_dir = g_box->data;
  g_box->mem = std::make_unique<test::MemEnv>(Env::Default(), g_box->data);
  g_box->env = std::make_unique<InlineEnv>(g_box->mem.get());
  so.env = g_box->env.get();
  Status s = RecordStore::Open(so, &g_box->store);
  ST_FUZZ_CHECK(s.ok(), "opening the record store: %s", s.ToString().c_str());
  ST_FUZZ_CHECK(mkdir(g_box->ns.c_str(), 0755) == 0 && mkdir((g_box->ns + "/d").c_str(), 0755) == 0,
                "mkdir ns");
  WriteInfofile(g_box->ns + "/d/f", g_box->store->peer_id());
  HoldInfofile(g_box, g_box->ns + "/d/f");
  atexit(RemoveSandbox);
}

// ---- What the server must answer ------------------------------------------------

struct Expected {
  std::multiset<uint64_t> sync;   // answered while the frame is dispatched
  std::multiset<uint64_t> async;  // GET_LOCAL, SCRUB: answered through the host later
  bool fatal = false;             // a frame that closes the connection
  uint64_t fatal_seq = 0;
  ErrorCode fatal_code = ErrorCode::kBadFrame;
  size_t frames = 0;
};

bool FirstFrameIsAuth(const uint8_t* p, size_t n) {
  return n > 4 && p[4] == static_cast<uint8_t>(MsgType::kAuth);
}

// Answered later, from outside the frame's dispatch (a bad frame after it
// may close the connection first): GET_LOCAL, SCRUB, a RING_SEGMENT (its OK
// waits for this peer's own segment) and PUT_CHAIN (it waits for the next
// holder).
bool IsAsync(uint8_t type) {
  return type == static_cast<uint8_t>(MsgType::kGetLocal) ||
         type == static_cast<uint8_t>(MsgType::kScrub) ||
         type == static_cast<uint8_t>(MsgType::kRingSegment) ||
         type == static_cast<uint8_t>(MsgType::kPutChain);
}

// The server's reading of the stream, from protocol.h alone.
Expected Simulate(const uint8_t* p, size_t n) {
  Expected e;
  size_t off = 0;
  while (true) {
    FrameHeader h;
    PrefixResult r = ParsePrefix(p + off, n - off, kMaxFrame, &h);
    if (r == PrefixResult::kNeedMore) break;
    if (r != PrefixResult::kOk) {
      e.fatal = true;
      e.fatal_seq = r == PrefixResult::kBadVersion ? h.seq : 0;
      e.fatal_code =
          r == PrefixResult::kTooLarge ? ErrorCode::kFrameTooLarge : ErrorCode::kBadFrame;
      break;
    }
    if (n - off < h.frame_size()) break;  // lost when the client closes
    std::string_view payload(reinterpret_cast<const char*>(p + off + kFramePrefixSize),
                             h.payload_size());
    Status s;
    switch (static_cast<MsgType>(h.type)) {
      case MsgType::kPut: {
        PutRequest req;
        s = DecodePut(payload, &req);
        break;
      }
      case MsgType::kPutChain: {
        PutChainRequest req;
        s = DecodePutChain(payload, &req);
        break;
      }
      case MsgType::kGet:
      case MsgType::kDelete: {
        NameRequest req;
        s = DecodeName(payload, &req);
        break;
      }
      case MsgType::kDeleteFile: {
        uint64_t id;
        s = DecodeDeleteFile(payload, &id);
        break;
      }
      case MsgType::kGetLocal: {
        RingHeader ring;
        s = DecodeGetLocal(payload, h.flags, &ring);
        break;
      }
      case MsgType::kPing:
        s = DecodePing(payload);
        break;
      case MsgType::kScrub:
        s = DecodeScrub(payload);
        break;
      case MsgType::kAuth: {
        std::string_view token;
        s = DecodeAuth(payload, &token);
        break;
      }
      case MsgType::kListMeta:
        s = DecodeListMeta(payload);
        break;
      case MsgType::kGetMeta: {
        GetMetaRequest req;
        s = DecodeGetMeta(payload, &req);
        break;
      }
      case MsgType::kRingSegment: {
        RingSegment seg;
        s = DecodeRingSegment(payload, h.flags, &seg);
        break;
      }
      default:
        break;  // UNKNOWN_TYPE, and the connection stays open
    }
    ++e.frames;
    if (!s.ok()) {
      e.fatal = true;
      e.fatal_seq = h.seq;
      e.fatal_code = ErrorCode::kBadFrame;
      break;
    }
    (IsAsync(h.type) ? e.async : e.sync).insert(h.seq);
    off += h.frame_size();
  }
  return e;
}

// ---- The server under test ------------------------------------------------------

class FuzzServer : public Server {
 public:
  using Server::AcceptConnection;
  using Server::Server;
  // Never touch the network: a segment for a ring successor must decode, and
  // is then dropped (the round times out, as with a silent peer).
  void SendSegment(const std::string& addr, uint16_t flags, std::string payload) override {
    RingSegment seg;
    Status s = DecodeRingSegment(payload, flags, &seg);
    ST_FUZZ_CHECK(s.ok(), "the server built a RING_SEGMENT for %s that does not decode: %s",
                  addr.c_str(), s.ToString().c_str());
    ST_FUZZ_CHECK(addr != kAdvertise, "the server sends a ring segment to itself");
    ST_FUZZ_CHECK(std::find(seg.ring.peers.begin(), seg.ring.peers.end(), addr) !=
                      seg.ring.peers.end(),
                  "a ring segment for %s, who is not in its ring", Printable(addr).c_str());
    // Server::Connect's parsing of the (attacker-chosen) address, without the
    // connect: the real one would resolve and dial any host:port it is given.
    std::string host, port;
    if (SplitHostPort(addr, &host, &port)) {
      ST_FUZZ_CHECK(!port.empty() && port.size() <= 5 && std::stoul(port) <= 65535,
                    "SplitHostPort accepted port '%s'", Printable(port).c_str());
    }
  }

  // PUT_CHAIN's forward: never touch the network either; the hop must be an
  // address Server::Connect would accept, and it is unreachable.
  void CallLink(const std::string& addr, const std::function<std::string(uint64_t)>& build,
                double timeout_s, LinkDone done) override {
    (void)timeout_s;
    std::string frame = build(1);
    FrameHeader h;
    ST_FUZZ_CHECK(ParsePrefix(reinterpret_cast<const uint8_t*>(frame.data()), frame.size(),
                              kMaxFrame, &h) == PrefixResult::kOk &&
                      h.type == static_cast<uint8_t>(MsgType::kPutChain) &&
                      (h.flags & kFlagForwarded),
                  "the server forwards something other than a PUT_CHAIN to %s",
                  Printable(addr).c_str());
    PutChainRequest next;
    ST_FUZZ_CHECK(DecodePutChain(std::string_view(frame).substr(kFramePrefixSize), &next).ok(),
                  "the server forwards a PUT_CHAIN that does not decode");
    ST_FUZZ_CHECK(addr != kAdvertise, "the server forwards a copy to itself");
    loop()->Post([done] { done(nullptr, {}, "unreachable in the fuzzer"); });
  }
};

// (CallLink, below, for PUT_CHAIN, is in FuzzServer too.)

struct Reply {
  FrameHeader h;
  std::string payload;
};

// The client's end of one input's connection.
class FuzzClient {
 public:
  FuzzClient(test::MemPipe* pipe, const uint8_t* data, size_t size, size_t want_replies,
             size_t chunk)
      : pipe_(pipe), data_(data), size_(size), want_(want_replies), chunk_(chunk) {}

  bool done() const { return closed_; }
  const std::vector<Reply>& replies() const { return replies_; }
  size_t sent() const { return sent_; }
  size_t final_replies() const { return finals_; }
  bool shut() const { return shut_; }

  // What a client does in one turn: write (one piece, once the server has
  // read the last), read what the server wrote, close when the conversation
  // is over. Returns whether anything happened.
  bool Step() {
    if (closed_) return false;
    bool progress = false;
    if (sent_ < size_ && pipe_->unread_input() == 0) {
      size_t n = std::min(size_ - sent_, chunk_);
      if (!pipe_->ClientWrite(std::string_view(reinterpret_cast<const char*>(data_) + sent_, n))) {
        // The server closed after a fatal frame: what is left is not read.
        n = size_ - sent_;
      }
      sent_ += n;
      progress = true;
    }
    std::string out = pipe_->TakeOutput();
    if (!out.empty()) {
      in_.append(out);
      Parse();
      progress = true;
    }
    if (pipe_->ClientSeesEof()) {
      // EOF after the server's half-close or close: the conversation is over.
      pipe_->ClientClose();
      closed_ = true;
      return true;
    }
    // Every request sent has its answer: tell the server we are done (it
    // sees EOF, dropping a partial frame) and leave.
    if (!shut_ && sent_ == size_ && finals_ >= want_) {
      shut_ = true;
      pipe_->ClientClose();
      closed_ = true;
      progress = true;
    }
    return progress;
  }

 private:
  void Parse() {
    while (true) {
      FrameHeader h;
      PrefixResult r = ParsePrefix(reinterpret_cast<const uint8_t*>(in_.data()) + parsed_,
                                   in_.size() - parsed_, 0xFFFFFFFFu, &h);
      if (r == PrefixResult::kNeedMore) return;
      ST_FUZZ_CHECK(r == PrefixResult::kOk, "the server sent a frame with a bad prefix (%d)",
                    static_cast<int>(r));
      if (in_.size() - parsed_ < h.frame_size()) return;
      Reply rep;
      rep.h = h;
      rep.payload = in_.substr(parsed_ + kFramePrefixSize, h.payload_size());
      parsed_ += h.frame_size();
      if (!(h.flags & kFlagMore)) ++finals_;
      replies_.push_back(std::move(rep));
    }
  }

  test::MemPipe* pipe_;
  const uint8_t* data_;
  size_t size_;
  size_t want_;
  size_t chunk_;
  size_t sent_ = 0;
  bool shut_ = false;
  bool closed_ = false;
  std::string in_;
  size_t parsed_ = 0;
  size_t finals_ = 0;
  std::vector<Reply> replies_;
};

// ---- Checks -----------------------------------------------------------------------

void CheckReplyFrame(const Reply& r, const std::string& files_dir) {
  ST_FUZZ_CHECK(r.h.version == kProtocolVersion, "reply of version %u", r.h.version);
  std::string_view p = r.payload;
  switch (static_cast<MsgType>(r.h.type)) {
    case MsgType::kOk: {
      // Empty, removed:u64, the SCRUB counts, or the PING identity.
      if (p.empty() || p.size() == 8 || p.size() == kScrubReplySize) break;
      Reader rd(p);
      std::string_view id, addr;
      ST_FUZZ_CHECK(rd.Str16(&id) && rd.Str16(&addr) && rd.done(),
                    "an OK reply of %zu bytes that no request has", p.size());
      ST_FUZZ_CHECK(addr == kAdvertise, "PING reply names address %s", Printable(addr).c_str());
      break;
    }
    case MsgType::kData: {
      DataReply d;
      ST_FUZZ_CHECK(DecodeData(p, &d).ok(), "DATA reply does not decode");
      ST_FUZZ_CHECK(crc32c::Value(d.data) == d.crc32c,
                    "GET returned %zu bytes whose CRC is not the stored one", d.data.size());
      break;
    }
    case MsgType::kLocalList: {
      std::vector<LocalListEntry> entries;
      ST_FUZZ_CHECK(DecodeLocalList(p, &entries).ok(), "LOCAL_LIST reply does not decode");
      for (const auto& e : entries) {
        ST_FUZZ_CHECK(e.path.compare(0, files_dir.size() + 1, files_dir + "/") == 0 &&
                          e.path.find("/../") == std::string::npos,
                      "LOCAL_LIST reveals a path outside the store: %s", Printable(e.path).c_str());
      }
      break;
    }
    case MsgType::kError: {
      ErrorReply e;
      ST_FUZZ_CHECK(DecodeError(p, &e).ok(), "ERROR reply does not decode");
      ST_FUZZ_CHECK(std::strcmp(ErrorCodeName(e.code), "UNKNOWN_ERROR") != 0,
                    "ERROR reply with code %u, not in the protocol's table", e.code);
      ST_FUZZ_CHECK(!e.message.empty(), "ERROR reply without a message");
      break;
    }
    default:
      ST_FUZZ_CHECK(false, "reply of type 0x%02x", r.h.type);
  }
}

// ST_FUZZ_VERBOSE=1: one line per reply, to see what an input does.
void PrintReplies(const FuzzClient& c) {
  for (const Reply& r : c.replies()) {
    const char* name = MsgTypeName(r.h.type);
    std::string what;
    ErrorReply e;
    std::vector<LocalListEntry> list;
    if (r.h.type == static_cast<uint8_t>(MsgType::kError) && DecodeError(r.payload, &e).ok()) {
      what = std::string(ErrorCodeName(e.code)) + ": " + Printable(e.message, 300);
    } else if (r.h.type == static_cast<uint8_t>(MsgType::kLocalList) &&
               DecodeLocalList(r.payload, &list).ok()) {
      for (const auto& x : list)
        what += Printable(x.name) + "@" + std::to_string(x.copy_rank) + " ";
    } else {
      what = std::to_string(r.payload.size()) + " payload bytes";
    }
    std::fprintf(stderr, "  reply seq %llu %s%s %s\n", static_cast<unsigned long long>(r.h.seq),
                 name != nullptr ? name : "?", (r.h.flags & kFlagMore) ? " MORE" : "",
                 what.c_str());
  }
}

std::string SeqList(const std::multiset<uint64_t>& s) {
  std::string out;
  for (uint64_t x : s) out += std::to_string(x) + " ";
  return out;
}

void CheckReplies(const Expected& e, const FuzzClient& c, const std::string& files_dir) {
  const auto& replies = c.replies();
  std::multiset<uint64_t> finals;
  std::set<uint64_t> open_chains;  // seqs of LOCAL_LIST chains still waiting for the last frame
  for (const Reply& r : replies) {
    CheckReplyFrame(r, files_dir);
    if (r.h.flags & kFlagMore) {
      // LOCAL_LIST chains, and PUT_CHAIN's early OK (ASYNC: first copy stored)
      ST_FUZZ_CHECK(r.h.type == static_cast<uint8_t>(MsgType::kLocalList) ||
                        r.h.type == static_cast<uint8_t>(MsgType::kOk),
                    "MORE on a reply of type 0x%02x", r.h.type);
      open_chains.insert(r.h.seq);
    } else {
      open_chains.erase(r.h.seq);
      finals.insert(r.h.seq);
    }
  }
  ST_FUZZ_CHECK(open_chains.empty() || e.fatal, "a reply chain without its last frame");
  if (!e.fatal) {
    std::multiset<uint64_t> want = e.sync;
    want.insert(e.async.begin(), e.async.end());
    ST_FUZZ_CHECK(finals == want, "replies for seqs { %s} but requests { %s}",
                  SeqList(finals).c_str(), SeqList(want).c_str());
    return;
  }
  ST_FUZZ_CHECK(!replies.empty(), "no reply to a frame that does not parse");
  const Reply& last = replies.back();
  ErrorReply err;
  ST_FUZZ_CHECK(last.h.type == static_cast<uint8_t>(MsgType::kError) &&
                    DecodeError(last.payload, &err).ok() &&
                    err.code == static_cast<uint16_t>(e.fatal_code) && last.h.seq == e.fatal_seq,
                "the last reply is not ERROR %s for seq %llu",
                ErrorCodeName(static_cast<uint16_t>(e.fatal_code)),
                static_cast<unsigned long long>(e.fatal_seq));
  finals.erase(finals.find(last.h.seq));
  for (uint64_t s : e.sync) {
    auto it = finals.find(s);
    ST_FUZZ_CHECK(it != finals.end(), "request seq %llu before the bad frame got no reply",
                  static_cast<unsigned long long>(s));
    finals.erase(it);
  }
  for (uint64_t s : finals) {
    ST_FUZZ_CHECK(e.async.count(s) > 0, "a reply for seq %llu, which no request has",
                  static_cast<unsigned long long>(s));
  }
}

// The entries of a directory of the data directory (in the MemEnv), sorted.
std::vector<std::string> MemList(const Sandbox& box, const std::string& dir) {
  std::vector<std::string> out;
  Status s = box.mem->GetChildren(dir, &out);
  ST_FUZZ_CHECK(s.ok(), "cannot list %s: %s", dir.c_str(), s.ToString().c_str());
  std::sort(out.begin(), out.end());
  return out;
}

bool MemIsDir(const Sandbox& box, const std::string& path) {
  FileInfo fi;
  return box.mem->GetFileInfo(path, &fi, false).ok() && fi.is_dir;
}

// The sandbox: on disk only the namespace as made; in the data directory
// only the layout of record_store.h, every record file in the index and the
// index holding nothing else. Returns the file ids seen.
std::vector<uint64_t> CheckStore(const Sandbox& box) {
  std::vector<std::string> top = ListDir(box.root);
  ST_FUZZ_CHECK(top == (std::vector<std::string>{"ns"}),
                "something was written beside the namespace on disk (%zu entries in %s)",
                top.size(), box.root.c_str());
  ST_FUZZ_CHECK(ListDir(box.ns) == std::vector<std::string>{"d"} &&
                    ListDir(box.ns + "/d") == std::vector<std::string>{"f"},
                "the namespace (read-only for the peer) changed");
  std::vector<std::string> data = MemList(box, box.data);
  ST_FUZZ_CHECK(data == (std::vector<std::string>{"LOCK", "PEER_ID", "files", "tmp"}),
                "unexpected entries in the data directory (%zu)", data.size());
  ST_FUZZ_CHECK(MemList(box, box.data + "/tmp").empty(), "a temporary file was left in tmp/");

  std::vector<uint64_t> ids;
  uint64_t records = 0, bytes = 0;
  std::string files = box.data + "/files";
  for (const std::string& fdir : MemList(box, files)) {
    uint64_t file_id = 0;
    ST_FUZZ_CHECK(ParseLowerHex(fdir, 16, &file_id) && MemIsDir(box, files + "/" + fdir),
                  "unexpected entry files/%s", Printable(fdir).c_str());
    ids.push_back(file_id);
    const RecordStore::FileIndex* index = box.store->Find(file_id);
    size_t on_disk = 0;
    for (const std::string& bdir : MemList(box, files + "/" + fdir)) {
      uint64_t bucket = 0;
      std::string bpath = files + "/" + fdir + "/" + bdir;
      ST_FUZZ_CHECK(ParseLowerHex(bdir, 2, &bucket) && MemIsDir(box, bpath),
                    "unexpected entry files/%s/%s", fdir.c_str(), Printable(bdir).c_str());
      std::vector<std::string> entries = MemList(box, bpath);
      std::set<std::string> names(entries.begin(), entries.end());
      for (const std::string& fname : entries) {
        std::string path = bpath + "/" + fname;
        FileInfo st;
        ST_FUZZ_CHECK(box.mem->GetFileInfo(path, &st, false).ok() && st.is_regular,
                      "%s is not a regular file", path.c_str());
        if (EndsWith(fname, kSidecarSuffix)) {
          std::string rec = fname.substr(0, fname.size() - std::strlen(kSidecarSuffix));
          ST_FUZZ_CHECK(names.count(rec) == 1, "a name file without its record: %s", path.c_str());
          continue;
        }
        std::string_view enc;
        uint8_t rank = 0;
        uint32_t crc = 0;
        ST_FUZZ_CHECK(ParseRecordFileName(fname, &enc, &rank, &crc),
                      "a file that is not a record: %s", Printable(path).c_str());
        std::string name;
        if (IsHashedEncoding(enc)) {
          ST_FUZZ_CHECK(names.count(fname + kSidecarSuffix) == 1, "hashed record without name: %s",
                        path.c_str());
          ST_FUZZ_CHECK(box.mem->Contents(path + kSidecarSuffix, &name), "cannot read %s.name",
                        path.c_str());
          ST_FUZZ_CHECK(EncodeName(name) == enc, "name file does not match %s", path.c_str());
        } else {
          ST_FUZZ_CHECK(DecodeEncodedName(enc, &name), "record file name does not decode: %s",
                        Printable(path).c_str());
        }
        ST_FUZZ_CHECK(NameBucket(name) == bucket, "record %s in the wrong bucket", path.c_str());
        ST_FUZZ_CHECK(index != nullptr, "records on disk of file %s, none in the index",
                      fdir.c_str());
        auto it = index->find(name);
        ST_FUZZ_CHECK(it != index->end(), "record on disk not in the index: %s",
                      Printable(path).c_str());
        ST_FUZZ_CHECK(it->second.copy_rank == rank && it->second.crc == crc &&
                          it->second.size == st.size,
                      "index entry differs from %s", Printable(path).c_str());
        ++on_disk;
        bytes += st.size;
      }
    }
    ST_FUZZ_CHECK(on_disk == (index != nullptr ? index->size() : 0),
                  "file %s: %zu records on disk, %zu in the index", fdir.c_str(), on_disk,
                  index != nullptr ? index->size() : size_t{0});
    records += on_disk;
  }
  ST_FUZZ_CHECK(records == box.store->record_count(), "%llu records on disk, the store counts %llu",
                static_cast<unsigned long long>(records),
                static_cast<unsigned long long>(box.store->record_count()));
  ST_FUZZ_CHECK(bytes == box.store->used_bytes(), "%llu bytes on disk, the store counts %llu",
                static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(box.store->used_bytes()));
  return ids;
}

void ResetStore(Sandbox* box, const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    uint64_t removed = 0;
    Status s = box->store->DeleteFile(id, &removed);
    ST_FUZZ_CHECK(s.ok(), "DeleteFile: %s", s.ToString().c_str());
  }
  ST_FUZZ_CHECK(MemList(*box, box->data + "/files").empty(), "DeleteFile left files/ non-empty");
  ST_FUZZ_CHECK(box->store->record_count() == 0 && box->store->used_bytes() == 0,
                "the store still counts records after deleting every file");
}

// ---- The peer, made once ------------------------------------------------------------

// The loop and the server every input meets: one without a key, or one that
// checks capabilities. Only one lives at a time: a server tells the store
// which writers are still connected (RecordStore::SetWriterOpen).
struct Peer {
  std::unique_ptr<EventLoop> loop;
  std::unique_ptr<FuzzServer> server;
  bool keyed = false;
};

Peer* g_peer = nullptr;

void StopPeer() {
  if (g_peer == nullptr) return;
  g_peer->server.reset();
  g_peer->loop.reset();
  delete g_peer;
  g_peer = nullptr;
}

FuzzServer* PeerFor(Sandbox* box, bool keyed) {
  if (g_peer == nullptr) {
    g_peer = new Peer;
    Status s = EventLoop::Create(&g_peer->loop);
    ST_FUZZ_CHECK(s.ok(), "EventLoop::Create: %s", s.ToString().c_str());
  }
  if (g_peer->server != nullptr && g_peer->keyed == keyed) return g_peer->server.get();
  g_peer->server.reset();
  ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;  // the listener is never used: inputs come through AcceptConnection
  so.advertise = kAdvertise;
  so.namespace_dir = box->ns;
  so.max_frame = kMaxFrame;
  so.get_local_cache_s = 0;
  so.ring_timeout_base_s = 0;
  so.ring_timeout_per_peer_s = 0;
  so.scrub_interval_s = 0;  // only on SCRUB
  // No infofile mirrors: LIST_META and GET_META answer NO_NAMESPACE at once,
  // and the data directory keeps its layout.
  so.mirror_interval_s = 0;
  so.scrub_age_s = 0;  // so a SCRUB removes what is not committed
  // No verifier pass between inputs (a server made per input never reached
  // its first one either).
  so.verify_interval_s = 0;
  if (keyed) so.capability_key = kCapabilityKey;
  so.clock = [] { return kFuzzNow; };
  g_peer->server = std::make_unique<FuzzServer>(g_peer->loop.get(), box->store.get(), so);
  g_peer->keyed = keyed;
  Status s = g_peer->server->Start();
  ST_FUZZ_CHECK(s.ok(), "Server::Start: %s", s.ToString().c_str());
  return g_peer->server.get();
}

// How the bytes move, a function of the input so that a crash reproduces:
// the input all at once (one read) or in pieces of 1 to 97 bytes; a pipe
// that holds 1 MiB of replies or only 1 to 200 bytes (every reply then goes
// out in pieces, and the server stops reading while its output is backed up).
struct Shape {
  size_t chunk;
  size_t capacity;
};

Shape ShapeOf(const uint8_t* data, size_t size) {
  uint32_t h = crc32c::Value(data, size);
  Shape s;
  s.chunk = (h & 3) == 0 ? size : 1 + (h >> 2) % 97;
  s.capacity = ((h >> 9) & 3) == 0 ? 1 + (h >> 11) % 200 : size_t{1} << 20;
  return s;
}

void RunOne(const uint8_t* data, size_t size) {
  Sandbox* box = g_box;
  Expected want = Simulate(data, size);
  FuzzServer* server = PeerFor(box, FirstFrameIsAuth(data, size));
  EventLoop* loop = g_peer->loop.get();
  Shape shape = ShapeOf(data, size);

  auto pipe = std::make_shared<test::MemPipe>(shape.capacity);
  server->AcceptConnection(std::make_unique<test::MemTransport>(pipe), "fuzz-client");
  ST_FUZZ_CHECK(server->connection_count() == 1 && server->client_count() == 1,
                "the server has %zu connections (%zu clients) for one input",
                server->connection_count(), server->client_count());

  // After a frame that does not parse, the server answers it and closes:
  // read until EOF. Otherwise leave once every request has its answer.
  size_t want_replies = want.fatal ? SIZE_MAX : want.sync.size() + want.async.size();
  FuzzClient client(pipe.get(), data, size, want_replies, shape.chunk);

  // Turn after turn (the client's step, what the connection is ready for,
  // the loop's due timers and posted tasks) until the client is done, the
  // server has nothing left running and a turn does nothing.
  bool hung = false;
  const double started = EventLoop::Now();
  uint64_t turns = 0;
  while (true) {
    ++turns;
    bool progress = client.Step();
    progress |= pipe->Deliver();
    progress |= loop->RunReady() > 0;
    if (progress) continue;
    bool idle = client.done() && server->connection_count() == 0 && server->round_count() == 0 &&
                (server->scrubber() == nullptr || !server->scrubber()->running());
    if (idle) break;
    // Waiting for a timer (none should be far off): let time pass.
    if (EventLoop::Now() - started > kWatchdogSeconds) {
      hung = true;
      break;
    }
    usleep(100);
  }
  ST_FUZZ_CHECK(!hung,
                "no end after %.0f s: client done %d (sent %zu of %zu bytes, %zu of %zu replies, "
                "shut %d), %zu server connections, %zu rounds, scrub running %d",
                kWatchdogSeconds, client.done(), client.sent(), size, client.final_replies(),
                want_replies, client.shut(), server->connection_count(), server->round_count(),
                server->scrubber() != nullptr && server->scrubber()->running());

  if (getenv("ST_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr,
                 "  %zu bytes (pieces of %zu, pipe of %zu), %zu frames, %zu replies, %.2f ms, "
                 "%llu turns\n",
                 size, shape.chunk, shape.capacity, want.frames, client.replies().size(),
                 (EventLoop::Now() - started) * 1e3, static_cast<unsigned long long>(turns));
    PrintReplies(client);
  }
  CheckReplies(want, client, box->store->data_dir() + "/files");
  ST_FUZZ_CHECK(server->connection_count() == 0 && server->client_count() == 0 &&
                    server->ring_inbound_count() == 0,
                "the server still counts %zu connections, %zu clients and %zu ring links after "
                "the input",
                server->connection_count(), server->client_count(), server->ring_inbound_count());

  std::vector<uint64_t> ids = CheckStore(*box);
  ResetStore(box, ids);
}

}  // namespace
}  // namespace st

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  st::MakeSandbox();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (st::g_box == nullptr) st::MakeSandbox();
  st::RunOne(data, size);
  return 0;
}
