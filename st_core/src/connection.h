// One non-blocking TCP connection speaking the frame protocol, inbound
// (client -> peer) or outbound (peer -> ring successor). Its bytes go through
// a Transport (transport.h): a socket in st-peer, an in-memory pipe in the
// request fuzzer.
//
// Input: large reads into one buffer; every complete frame in it is handed to
// the Handler back to back (pipelining, paper 3.2). The payload view passed
// to OnFrame is valid only during the call, so a PUT's data goes from the
// socket buffer to the record file without a copy. A frame is processed only
// once all its bytes are in: a connection closed mid-frame loses that frame.
// Bad prefixes are answered by the connection itself (BAD_FRAME /
// FRAME_TOO_LARGE) before it closes.
//
// Output: a queue of byte buffers and file regions. Small replies (up to
// kCoalesceReply bytes: OK, ERROR, short answers) are appended to the byte
// buffer at the tail of the queue (up to kCoalesceBuffer bytes), so the
// replies to one read's frames go out together; consecutive buffers go
// out with one sendmsg; file regions (GET bodies) with sendfile. While more
// than kMaxQueuedBytes (or kMaxQueuedFiles open record files) wait to be
// sent, the connection stops reading.
//
// Timeouts (SetTimeouts; both off unless set), one lazy timer per connection:
// - idle timeout: a frame begun (1 byte or more of it received) that gets no
//   further byte for that long closes the connection with ERROR TIMEOUT
//   (seq 0): a slow or stalled sender (slowloris) cannot hold a half-received
//   frame forever. Not counted while the connection itself stops reading
//   (output backed up).
// - keepalive timeout: a connection with nothing in flight (no input
//   buffered, no output queued, no deferred reply owed; see BeginDeferred)
//   for that long is closed quietly.
#ifndef ST_CORE_CONNECTION_H_
#define ST_CORE_CONNECTION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "event_loop.h"
#include "metrics.h"
#include "protocol.h"
#include "transport.h"

namespace st {

class Connection {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // A whole frame with a valid prefix.
    virtual void OnFrame(Connection* conn, const FrameHeader& header, std::string_view payload) = 0;
    // The prefix of a frame has arrived (its body may not have): called once
    // per frame, before OnFrame. The handler may refuse the connection here
    // (SendErrorAndClose or Close); the frame is then never delivered.
    virtual void OnFrameStart(Connection* conn, const FrameHeader& header) {
      (void)conn;
      (void)header;
    }
    // A whole frame is about to be delivered: 0 lets it through; a positive
    // number of seconds holds it (and stops reading the socket, so the
    // sender waits) and asks again after that long. Impact control
    // (token_bucket.h) answers here.
    virtual double Admit(Connection* conn, const FrameHeader& header) {
      (void)conn;
      (void)header;
      return 0;
    }
    // Around each batch of frames delivered from one read (OnFrame calls in
    // between): what the handler sends to other connections meanwhile can
    // be held (Cork) and sent once at the end.
    virtual void OnBatchStart(Connection* conn) { (void)conn; }
    virtual void OnBatchEnd(Connection* conn) { (void)conn; }
    // Called once, when the connection is closed (by either side, or on a
    // connect failure). The Connection may be destroyed only after this
    // call returns (e.g. from a task posted to the loop).
    virtual void OnClosed(Connection* conn, const std::string& reason) = 0;
  };

  static constexpr size_t kReadChunk = 256 * 1024;
  // Frames up to this size get their whole buffer when their prefix arrives;
  // larger ones a buffer that doubles as their bytes come.
  static constexpr size_t kUpFrontFrame = 4 * 1024 * 1024;
  static constexpr size_t kMaxQueuedBytes = 64 * 1024 * 1024;
  // GET bodies waiting to be sent hold an open file each: a client that
  // pipelines tiny GETs without reading the replies must not exhaust the
  // peer's file descriptors.
  static constexpr size_t kMaxQueuedFiles = 1024;
  // Send appends a reply of at most kCoalesceReply bytes to the byte buffer
  // queued last while that stays within kCoalesceBuffer bytes.
  static constexpr size_t kCoalesceReply = 4096;
  static constexpr size_t kCoalesceBuffer = 256 * 1024;

  // Takes ownership of transport. If connecting, it has a connect() in
  // progress; sends are queued until it completes.
  Connection(EventLoop* loop, std::unique_ptr<Transport> transport, uint64_t id, std::string remote,
             uint32_t max_frame, Handler* handler);
  ~Connection();

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Status Start(bool connecting);

  // Counts this connection's requests, replies, errors, bytes and request
  // latencies into m (metrics.h); for inbound connections.
  void SetMetrics(PeerMetrics* m) { metrics_ = m; }

  // Seconds; 0 turns a limit off (the default). See the file comment.
  void SetTimeouts(double idle_timeout_s, double keepalive_timeout_s);
  // A request whose reply is sent later, from outside OnFrame (GET_LOCAL,
  // SCRUB): while one is owed the connection is not idle.
  void BeginDeferred() { ++deferred_; }
  void EndDeferred();

  // Queue bytes (whole frames) for sending.
  void Send(std::string bytes);
  // While corked (counted: Cork and Uncork nest), Send and SendFile queue
  // without writing; the last Uncork writes what was queued, so replies
  // produced by one piece of work elsewhere (a group fsync's batch, a batch
  // of replies from a chain successor) leave in one sendmsg.
  void Cork() { ++corked_; }
  void Uncork();
  bool corked() const { return corked_ > 0; }
  // Queue len bytes of file_fd from its offset 0; takes ownership of file_fd.
  void SendFile(int file_fd, uint64_t len);
  // Sends an ERROR frame, stops reading frames and closes once it is out;
  // nothing sent after it goes out (the ERROR is the last frame).
  // log: an INFO line naming the connection and the error.
  void SendErrorAndClose(uint64_t seq, ErrorCode code, std::string_view message, bool log = true);
  void Close(const std::string& reason);

  bool closed() const { return closed_; }
  uint64_t id() const { return id_; }
  const std::string& remote() const { return remote_; }
  size_t queued_bytes() const { return queued_bytes_; }
  size_t deferred() const { return deferred_; }

 private:
  struct OutItem {
    std::string data;  // bytes, if file_fd < 0
    size_t offset = 0;
    int file_fd = -1;
    uint64_t file_off = 0;
    uint64_t file_len = 0;
  };

  void OnEvents(int events);
  void OnReadable();
  void OnConnectDone();
  void ProcessFrames();
  void ProcessBufferedFrames();  // one batch; ProcessFrames repeats it
  void Flush();
  void UpdateInterest();
  void StartLinger();
  bool EnsureSpace();
  // When the current state must end by itself (0: no limit applies now).
  double IdleDeadline() const;
  void ArmIdleTimer();
  void OnIdleTimer();
  void Hold(double seconds);

  EventLoop* loop_;
  std::unique_ptr<Transport> transport_;
  bool closed_ = false;
  uint64_t id_;
  std::string remote_;
  uint32_t max_frame_;
  Handler* handler_;

  bool connecting_ = false;
  bool in_dispatch_ = false;    // inside ProcessFrames: flush once at the end
  int corked_ = 0;              // Cork depth: flush at the last Uncork
  bool stop_frames_ = false;    // after a fatal frame error: parse nothing more
  bool close_after_flush_ = false;
  bool lingering_ = false;      // write side shut, discarding input until EOF
  bool paused_ = false;         // too much output queued: not reading
  bool held_ = false;           // the handler holds the next frame (Admit): not reading
  EventLoop::TimerId hold_timer_ = 0;
  bool want_write_ = false;
  bool eof_ = false;            // the other side closed its write side
  bool frames_waiting_ = false; // complete frames buffered while paused
  int interest_ = 0;
  EventLoop::TimerId linger_timer_ = 0;

  double idle_timeout_s_ = 0;
  double keepalive_timeout_s_ = 0;
  double last_read_ = 0;      // EventLoop::Now() of the last byte received
  double last_activity_ = 0;  // ... of the last byte received or reply finished
  size_t deferred_ = 0;
  EventLoop::TimerId idle_timer_ = 0;
  double idle_deadline_ = 0;  // of idle_timer_

  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0;
  size_t start_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last byte read
  size_t pending_frame_ = 0;  // size of the incomplete frame at start_, if known

  // Metrics: the dispatch time and type of each request not answered yet.
  PeerMetrics* metrics_ = nullptr;
  std::unordered_map<uint64_t, std::pair<double, uint8_t>> dispatched_;
  void NoteReply(const std::string& bytes);

  std::deque<OutItem> out_;
  size_t queued_bytes_ = 0;
  size_t queued_files_ = 0;
};

}  // namespace st

#endif  // ST_CORE_CONNECTION_H_
