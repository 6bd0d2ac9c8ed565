// A peer over real sockets for the tests: TestPeer runs a Server on an
// ephemeral loopback port with its event loop in a thread; Client speaks the
// wire protocol to it with blocking sockets.
#ifndef ST_CORE_TESTS_PEER_HARNESS_H_
#define ST_CORE_TESTS_PEER_HARNESS_H_

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "crc32c.h"
#include "event_loop.h"
#include "protocol.h"
#include "record_store.h"
#include "server.h"
#include "test_util.h"

namespace st {
namespace test {

struct Reply {
  FrameHeader h;
  std::string payload;
  bool eof = false;
};

class Client {
 public:
  explicit Client(int port) {
    fd_ = ConnectLoopback(port);
    EXPECT_GE(fd_, 0);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Client() { Close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  void Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << strerror(errno);
      off += static_cast<size_t>(n);
    }
  }

  // Reads exactly n bytes; false on EOF or timeout.
  bool ReadN(size_t n, std::string* out, double timeout_s) {
    out->clear();
    while (out->size() < n) {
      struct pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
      char buf[65536];
      ssize_t r = recv(fd_, buf, std::min(sizeof(buf), n - out->size()), 0);
      if (r <= 0) return false;
      out->append(buf, static_cast<size_t>(r));
    }
    return true;
  }

  // The next frame; eof set on EOF or after timeout_s without one.
  Reply Read(double timeout_s = 10) {
    Reply r;
    std::string prefix;
    if (!ReadN(kFramePrefixSize, &prefix, timeout_s)) {
      r.eof = true;
      return r;
    }
    EXPECT_EQ(PrefixResult::kOk, ParsePrefix(reinterpret_cast<const uint8_t*>(prefix.data()),
                                             prefix.size(), 0xFFFFFFFFu, &r.h));
    if (!ReadN(r.h.payload_size(), &r.payload, timeout_s)) r.eof = true;
    return r;
  }

  Reply Call(const std::string& frame, double timeout_s = 10) {
    Send(frame);
    return Read(timeout_s);
  }

  // True if the server closed the connection (EOF) within timeout_s.
  bool ClosedByPeer(double timeout_s = 5) {
    struct pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    char c;
    return recv(fd_, &c, 1, 0) <= 0;
  }

 private:
  int fd_ = -1;
};

inline uint16_t ErrorOf(const Reply& r) {
  if (r.h.type != static_cast<uint8_t>(MsgType::kError)) return 0;
  ErrorReply e;
  EXPECT_TRUE(DecodeError(r.payload, &e).ok());
  return e.code;
}

// The peers an ERROR reply names (empty for other replies).
inline std::vector<std::string> ErrorPeers(const Reply& r) {
  ErrorReply e;
  if (r.h.type != static_cast<uint8_t>(MsgType::kError) || !DecodeError(r.payload, &e).ok())
    return {};
  return e.peers;
}

inline std::string ErrorMessage(const Reply& r) {
  ErrorReply e;
  if (r.h.type != static_cast<uint8_t>(MsgType::kError) || !DecodeError(r.payload, &e).ok()) {
    return "";
  }
  return e.message;
}

inline bool IsOk(const Reply& r) {
  return !r.eof && r.h.type == static_cast<uint8_t>(MsgType::kOk);
}

// The record's bytes if r is a DATA reply; "<error>" otherwise.
inline std::string DataOf(const Reply& r) {
  DataReply d;
  if (r.eof || r.h.type != static_cast<uint8_t>(MsgType::kData) ||
      !DecodeData(r.payload, &d).ok()) {
    return "<error>";
  }
  return std::string(d.data);
}

inline std::string PutFrame(uint64_t seq, uint64_t fid, uint8_t rank, const std::string& name,
                            const std::string& data, uint16_t flags = 0) {
  PutRequest p;
  p.file_id = fid;
  p.copy_rank = rank;
  p.crc32c = crc32c::Value(data);
  p.name = name;
  p.data = data;
  return EncodePut(seq, flags, p);
}

// The LOCAL_LIST frames answering seq, or the ERROR code (0xFFFF on EOF).
inline std::vector<LocalListEntry> ReadLocalList(Client* c, uint64_t seq, uint16_t* error,
                                                 std::string* message, double timeout_s = 15) {
  std::vector<LocalListEntry> all;
  *error = 0;
  while (true) {
    Reply r = c->Read(timeout_s);
    if (r.eof) {
      *error = 0xFFFF;
      return all;
    }
    EXPECT_EQ(seq, r.h.seq);
    if (r.h.type == static_cast<uint8_t>(MsgType::kError)) {
      *error = ErrorOf(r);
      *message = ErrorMessage(r);
      return all;
    }
    EXPECT_EQ(static_cast<uint8_t>(MsgType::kLocalList), r.h.type);
    std::vector<LocalListEntry> part;
    EXPECT_TRUE(DecodeLocalList(r.payload, &part).ok());
    all.insert(all.end(), part.begin(), part.end());
    if (!(r.h.flags & kFlagMore)) return all;
  }
}

// A Server with its own record store and event loop thread.
class TestPeer {
 public:
  // store.data_dir empty: a fresh temporary directory.
  TestPeer(const ServerOptions& sv, StoreOptions store) {
    if (store.data_dir.empty()) store.data_dir = dir_.path() + "/data";
    Status s = RecordStore::Open(store, &store_);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(EventLoop::Create(&loop_).ok());
    server_ = std::make_unique<Server>(loop_.get(), store_.get(), sv);
    s = server_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    thread_ = std::thread([this] { loop_->Run(); });
  }
  ~TestPeer() { Stop(); }
  TestPeer(const TestPeer&) = delete;
  TestPeer& operator=(const TestPeer&) = delete;

  void Stop() {
    if (!thread_.joinable()) return;
    loop_->StopFromAnyThread();
    thread_.join();
    server_.reset();
  }

  int port() const { return server_->port(); }
  std::string addr() const { return server_->advertise(); }
  const std::string& peer_id() const { return store_->peer_id(); }
  const std::string& data_dir() const { return store_->data_dir(); }
  Server* server() { return server_.get(); }
  RecordStore* store() { return store_.get(); }

 private:
  TempDir dir_;
  std::unique_ptr<RecordStore> store_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_PEER_HARNESS_H_
