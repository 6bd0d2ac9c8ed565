// st_py._native: the client's send and receive paths in C++ (issues 4 and 21,
// paper 3.2).
//
// A Sender queues the request frames of one peer connection: a PUT's prefix
// is framed here, small record bodies are copied next to it (one iovec for
// many small frames), large ones are referenced, not copied, and flush()
// writes what the socket accepts with one sendmsg of up to IOV_MAX buffers,
// without the GIL.
//
// A Receiver reads replies from one non-blocking peer socket and splits them
// into frames with the peer's own parser (protocol.h ParsePrefix) and CRC-32C
// (crc32c.h). The body of a large DATA reply is received straight into the
// bytes object handed to the caller, and its CRC-32C is computed chunk by
// chunk while the bytes are still in cache: one copy from the kernel, no
// second pass, and the GIL is released for both. Everything else about a
// frame (the payload grammar of small replies, dispatch by sequence number)
// stays in Python (st_py/wire/transport.py); the pure-Python decoder in
// st_py/wire/protocol.py is the reference and the fallback.

#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fcntl.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "coding.h"
#include "copy_reader.h"
#include "crc32c.h"
#include "protocol.h"

namespace nb = nanobind;

namespace {

constexpr size_t kChunk = 256 * 1024;       // one recv of small frames; CRC stays cache-hot
constexpr size_t kBig = 256 * 1024;         // DATA frames this large go straight to their bytes
constexpr size_t kDataFixed = 4 + 1;        // DATA payload: u32 crc32c, u8 copy_rank, then data

constexpr int kEndOfStream = -1;  // recv() returned 0

[[noreturn]] void RaiseErrno(int err) {
  if (err == kEndOfStream) {  // as st_py/wire/transport.py says it
    PyObject* args = Py_BuildValue("(is)", ECONNRESET, "connection closed by peer");
    PyErr_SetObject(PyExc_ConnectionResetError, args);
    Py_XDECREF(args);
  } else {
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);  // picks the OSError subclass of errno
  }
  throw nb::python_error();
}

// One frame as Python sees it: (type, flags, seq, payload, data_info).
// data_info is None, or for DATA (crc32c in the frame, copy_rank, CRC-32C of
// the data received), in which case payload is the record data alone.
nb::tuple FrameTuple(const st::FrameHeader& h, nb::object payload, nb::object data_info) {
  return nb::make_tuple(h.type, h.flags, h.seq, payload, data_info);
}

// Marks an object in use for the length of a call that releases the GIL:
// a second thread calling in meanwhile gets a RuntimeError instead of racing
// on its buffers (a client's connections belong to one thread at a time).
class InUse {
 public:
  explicit InUse(bool* flag) : flag_(flag) {
    if (*flag_) throw std::runtime_error("a peer connection is used by two threads at once");
    *flag_ = true;
  }
  ~InUse() { *flag_ = false; }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  bool* flag_;
};

class Receiver {
 public:
  Receiver(int fd, uint32_t max_frame, size_t max_read)
      : fd_(fd), max_frame_(max_frame), max_read_(max_read), buf_(kChunk) {}

  ~Receiver() { Py_XDECREF(big_); }

  // Reads what the socket has (up to about max_read bytes, then other
  // sockets get a turn) and returns the whole
  // frames received, in order. Raises ConnectionResetError when the peer
  // closed the connection, OSError on a socket error, ValueError on a frame
  // that breaks docs/wire-protocol.md. With oks a list, the final empty OK
  // replies (a PUT's or DELETE's, no MORE flag) are not returned as frames:
  // their seqs are appended to oks, one int each (a write's acknowledgements
  // without a tuple and a bytes object each).
  nb::list Receive(nb::handle oks) {
    InUse in_use(&busy_);
    oks_ = PyList_Check(oks.ptr()) ? oks.ptr() : nullptr;
    if (pending_errno_ != 0) RaiseErrno(pending_errno_);
    nb::list out;
    size_t got = 0;
    while (got < max_read_) {
      if (big_ != nullptr) {
        ssize_t n = FillBig();
        if (n < 0) break;  // EAGAIN
        got += static_cast<size_t>(n);
        if (big_pos_ == big_len_) EmitBig(out);
        continue;
      }
      if (!ParseBuffered(out)) continue;  // a large DATA body started: fill it first
      ssize_t n = RecvInto(buf_.data() + wpos_, buf_.size() - wpos_);
      if (n < 0) break;
      got += static_cast<size_t>(n);
      wpos_ += static_cast<size_t>(n);
    }
    // Frames read by the last recv: the socket may have nothing more, so
    // they must not wait for the next readable event.
    if (big_ == nullptr) ParseBuffered(out);
    bool none = out.size() == 0 && (oks_ == nullptr || PyList_GET_SIZE(oks_) == 0);
    oks_ = nullptr;
    if (pending_errno_ != 0 && none) RaiseErrno(pending_errno_);
    return out;  // frames (and oks) received before a socket error are delivered first
  }

  // Bytes received but not yet returned as a frame.
  size_t buffered() const { return (wpos_ - rpos_) + (big_ != nullptr ? big_pos_ : 0); }

 private:
  // recv() with the GIL released. Returns bytes read, or -1 on EAGAIN or
  // on an error or end of stream (kept in pending_errno_).
  ssize_t RecvInto(uint8_t* dst, size_t n) {
    if (pending_errno_ != 0) return -1;
    ssize_t r;
    int err = 0;
    {
      nb::gil_scoped_release nogil;
      do {
        r = ::recv(fd_, dst, n, 0);
      } while (r < 0 && errno == EINTR);
      if (r < 0) err = errno;
    }
    if (r == 0) err = kEndOfStream;
    if (r <= 0) {
      if (err != EAGAIN && err != EWOULDBLOCK) pending_errno_ = err;
      return -1;
    }
    return r;
  }

  ssize_t FillBig() {
    uint8_t* dst = reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(big_)) + big_pos_;
    ssize_t n = RecvInto(dst, big_len_ - big_pos_);
    if (n > 0) {
      {
        nb::gil_scoped_release nogil;
        big_crc_ = st::crc32c::Extend(big_crc_, dst, static_cast<size_t>(n));
      }
      big_pos_ += static_cast<size_t>(n);
    }
    return n;
  }

  void EmitBig(nb::list& out) {
    nb::object data = nb::steal(big_);
    big_ = nullptr;
    out.append(FrameTuple(big_header_, data, nb::make_tuple(big_frame_crc_, big_rank_, big_crc_)));
  }

  [[noreturn]] void BadPrefix(st::PrefixResult r, const st::FrameHeader& h) {
    std::string msg;
    if (r == st::PrefixResult::kBadVersion) {
      msg = "protocol version " + std::to_string(h.version) + ", expected " +
            std::to_string(st::kProtocolVersion);
    } else {
      msg = "frame length " + std::to_string(h.length) + " outside [12, " +
            std::to_string(max_frame_) + "]";
    }
    throw nb::value_error(msg.c_str());
  }

  // Emits every whole frame in buf_[rpos_, wpos_) and compacts the buffer so
  // the next recv has room. Returns false if a large DATA body was started.
  bool ParseBuffered(nb::list& out) {
    while (true) {
      const uint8_t* p = buf_.data() + rpos_;
      size_t avail = wpos_ - rpos_;
      st::FrameHeader h;
      st::PrefixResult r = st::ParsePrefix(p, avail, max_frame_, &h);
      if (r == st::PrefixResult::kNeedMore) break;
      if (r != st::PrefixResult::kOk) BadPrefix(r, h);
      size_t frame = h.frame_size();
      bool is_data = h.type == static_cast<uint8_t>(st::MsgType::kData);
      if (is_data && h.payload_size() < kDataFixed)
        throw nb::value_error("payload shorter than its fields");
      if (is_data && frame >= kBig && avail < frame) {
        if (avail < st::kFramePrefixSize + kDataFixed) break;
        StartBig(h, p, avail);
        return false;
      }
      if (avail < frame) break;
      const uint8_t* payload = p + st::kFramePrefixSize;
      if (oks_ != nullptr && h.type == static_cast<uint8_t>(st::MsgType::kOk) &&
          (h.flags & st::kFlagMore) == 0 && h.payload_size() == 0) {
        PyObject* seq = PyLong_FromUnsignedLongLong(h.seq);
        if (seq == nullptr) throw nb::python_error();
        int r = PyList_Append(oks_, seq);
        Py_DECREF(seq);
        if (r != 0) throw nb::python_error();
      } else if (is_data) {
        uint32_t frame_crc = st::DecodeFixed32(payload);
        uint8_t rank = payload[4];
        size_t n = h.payload_size() - kDataFixed;
        nb::bytes data(reinterpret_cast<const char*>(payload + kDataFixed), n);
        uint32_t actual = st::crc32c::Value(payload + kDataFixed, n);
        out.append(FrameTuple(h, data, nb::make_tuple(frame_crc, rank, actual)));
      } else {
        out.append(FrameTuple(h,
                              nb::bytes(reinterpret_cast<const char*>(payload), h.payload_size()),
                              nb::none()));
      }
      rpos_ += frame;
    }
    // Compact, and grow for a small frame larger than the buffer.
    size_t left = wpos_ - rpos_;
    if (rpos_ > 0) {
      std::memmove(buf_.data(), buf_.data() + rpos_, left);
      rpos_ = 0;
      wpos_ = left;
    }
    if (left >= st::kFramePrefixSize) {  // below that the buffer has room for the header
      size_t want = st::kLengthSize + st::DecodeFixed32(buf_.data());
      bool big_data =
          buf_[st::kLengthSize] == static_cast<uint8_t>(st::MsgType::kData) && want >= kBig;
      // want <= max_frame: ParsePrefix checked it
      if (!big_data && want > buf_.size()) buf_.resize(want);
    }
    return true;
  }

  void StartBig(const st::FrameHeader& h, const uint8_t* p, size_t avail) {
    size_t n = h.payload_size() - kDataFixed;
    PyObject* obj = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
    if (obj == nullptr) throw nb::python_error();
    const uint8_t* payload = p + st::kFramePrefixSize;
    big_header_ = h;
    big_frame_crc_ = st::DecodeFixed32(payload);
    big_rank_ = payload[4];
    size_t have = avail - st::kFramePrefixSize - kDataFixed;  // < n: the frame is incomplete
    uint8_t* dst = reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(obj));
    std::memcpy(dst, payload + kDataFixed, have);
    big_crc_ = st::crc32c::Value(dst, have);
    big_ = obj;
    big_len_ = n;
    big_pos_ = have;
    rpos_ = wpos_ = 0;
  }

  int fd_;
  bool busy_ = false;  // in Receive
  PyObject* oks_ = nullptr;  // Receive's oks list (borrowed for the call), or null
  int pending_errno_ = 0;  // the socket failed or closed; raised once the frames before it are out
  uint32_t max_frame_;
  size_t max_read_;
  std::vector<uint8_t> buf_;
  size_t rpos_ = 0, wpos_ = 0;
  // A large DATA frame being received into its own bytes object.
  PyObject* big_ = nullptr;
  size_t big_len_ = 0, big_pos_ = 0;
  uint32_t big_crc_ = 0, big_frame_crc_ = 0;
  uint8_t big_rank_ = 0;
  st::FrameHeader big_header_;
};

// The request frames queued for one non-blocking peer socket, sent by
// Flush() with sendmsg (MSG_NOSIGNAL) without the GIL. Bytes of small parts
// (up to kCopyMax) are copied into one growing byte stream, so a run of small
// frames is a single iovec; a larger part is referenced through the buffer
// protocol and sent from its own memory. Parts are sent whole and in order.
class Sender {
 public:
  static constexpr size_t kCopyMax = 16 * 1024;
  static constexpr size_t kIovMax = 512;

  // A PUT frame's prefix and fixed fields: file_id:u64 copy_rank:u8
  // crc32c:u32 and the name's u16 length (docs/wire-protocol.md).
  static constexpr size_t kPutFixed = st::kFramePrefixSize + 8 + 1 + 4 + 2;

  explicit Sender(int fd) : fd_(fd) {}
  ~Sender() { Drop(); }
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Queues the PUT frame of one record copy (docs/wire-protocol.md): its
  // prefix and fields are encoded here, then data follows.
  void Put(uint64_t seq, uint64_t file_id, uint8_t copy_rank, uint32_t crc, nb::bytes name,
           nb::handle data, uint16_t flags) {
    InUse in_use(&busy_);
    if (name.size() > 0xFFFF) throw nb::value_error("record name longer than a str16");
    Py_buffer view;
    if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
    uint8_t prefix[kPutFixed];
    EncodePutPrefix(prefix, seq, file_id, copy_rank, crc, name.size(),
                    static_cast<size_t>(view.len), flags);
    Copy(prefix, sizeof(prefix));
    Copy(name.c_str(), name.size());
    AddView(&view);
  }

  // Queues the PUT frames of many record copies in one call (a write batch,
  // docs/client.md): frame i has sequence number seq0 + i, copy rank
  // ranks[i], CRC-32C crcs[i], name names[i] (bytes) and data datas[i] (any
  // buffer). The frames are encoded and small bodies copied with the GIL
  // released; each frame is laid out exactly as Put() lays it out.
  void PutBatch(uint64_t seq0, uint64_t file_id, uint16_t flags, const std::vector<uint8_t>& ranks,
                const std::vector<uint32_t>& crcs, nb::list names, nb::list datas) {
    InUse in_use(&busy_);
    size_t n = ranks.size();
    if (crcs.size() != n || names.size() != n || datas.size() != n)
      throw nb::value_error("ranks, crcs, names and datas differ in length");
    std::vector<Py_buffer> views(n);
    std::vector<std::pair<const char*, size_t>> keys(n);
    size_t got = 0;
    auto release = [&]() {
      for (size_t i = 0; i < got; ++i) {
        if (views[i].obj != nullptr) PyBuffer_Release(&views[i]);
      }
    };
    size_t copied = 0;
    for (; got < n; ++got) {
      PyObject* name = PyList_GET_ITEM(names.ptr(), got);
      if (!PyBytes_Check(name)) {
        release();
        throw nb::type_error("names must be bytes");
      }
      keys[got] = {PyBytes_AS_STRING(name), static_cast<size_t>(PyBytes_GET_SIZE(name))};
      if (keys[got].second > 0xFFFF) {
        release();
        throw nb::value_error("record name longer than a str16");
      }
      if (PyObject_GetBuffer(PyList_GET_ITEM(datas.ptr(), got), &views[got], PyBUF_SIMPLE) != 0) {
        views[got].obj = nullptr;
        release();
        throw nb::python_error();
      }
      size_t len = static_cast<size_t>(views[got].len);
      copied += kPutFixed + keys[got].second + (len <= kCopyMax ? len : 0);
    }
    {
      nb::gil_scoped_release nogil;
      stream_.reserve(stream_.size() + copied);
      for (size_t i = 0; i < n; ++i) {
        uint8_t prefix[kPutFixed];
        EncodePutPrefix(prefix, seq0 + i, file_id, ranks[i], crcs[i], keys[i].second,
                        static_cast<size_t>(views[i].len), flags);
        Copy(prefix, sizeof(prefix));
        Copy(keys[i].first, keys[i].second);
        size_t len = static_cast<size_t>(views[i].len);
        if (len <= kCopyMax) {
          Copy(views[i].buf, len);
        } else {  // referenced, not copied: the view is kept until sent
          Seg s{};
          s.view = views[i];
          s.len = len;
          segs_.push_back(s);
          out_bytes_ += len;
          views[i].obj = nullptr;
        }
      }
    }
    release();  // the copied ones
  }

  // Queues one part of a frame (bytes, bytearray, memoryview; any buffer).
  void Queue(nb::handle part) {
    InUse in_use(&busy_);
    Py_buffer view;
    if (PyObject_GetBuffer(part.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
    AddView(&view);
  }

  // Writes what the socket accepts, up to everything queued. Returns the
  // bytes written (0 if the socket is full). Raises OSError on a socket error.
  size_t Flush() {
    InUse in_use(&busy_);
    size_t total = 0;
    while (!segs_.empty()) {
      iovec iov[kIovMax];
      size_t n = 0;
      for (auto it = segs_.begin(); it != segs_.end() && n < kIovMax; ++it, ++n) {
        iov[n].iov_base = it->view.obj != nullptr
                              ? static_cast<char*>(it->view.buf) + it->off
                              : const_cast<char*>(stream_.data()) + (it->off - stream_base_);
        iov[n].iov_len = it->len;
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      ssize_t r;
      int err = 0;
      {
        nb::gil_scoped_release nogil;
        do {
          r = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
        } while (r < 0 && errno == EINTR);
        if (r < 0) err = errno;
      }
      if (r < 0) {
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        RaiseErrno(err);
      }
      Consume(static_cast<size_t>(r));
      total += static_cast<size_t>(r);
    }
    return total;
  }

  // Drops everything queued (the connection failed).
  void Clear() {
    InUse in_use(&busy_);
    Drop();
  }

  size_t out_bytes() const { return out_bytes_; }
  bool empty() const { return segs_.empty(); }

 private:
  void Drop() {
    for (Seg& s : segs_) {
      if (s.view.obj != nullptr) PyBuffer_Release(&s.view);
    }
    segs_.clear();
    stream_base_ += stream_.size();
    stream_.clear();
    stream_head_ = 0;
    out_bytes_ = 0;
  }

  static void EncodePutPrefix(uint8_t* out, uint64_t seq, uint64_t file_id, uint8_t copy_rank,
                              uint32_t crc, size_t name_len, size_t data_len, uint16_t flags) {
    size_t payload = 8 + 1 + 4 + 2 + name_len + data_len;
    st::EncodeFramePrefix(out, st::MsgType::kPut, flags, seq, payload);
    uint8_t* q = out + st::kFramePrefixSize;
    st::EncodeFixed64(q, file_id);
    q[8] = copy_rank;
    st::EncodeFixed32(q + 9, crc);
    st::EncodeFixed16(q + 13, static_cast<uint16_t>(name_len));
  }

  struct Seg {
    Py_buffer view;  // view.obj null: bytes of stream_ from offset off
    uint64_t off;  // into view.buf, or an absolute offset into the stream
    size_t len;
  };

  // Appends bytes to the copied stream, extending the last segment when it
  // is the stream's tail.
  void Copy(const void* p, size_t n) {
    if (n == 0) return;
    uint64_t abs = stream_base_ + stream_.size();
    stream_.append(static_cast<const char*>(p), n);
    out_bytes_ += n;
    if (!segs_.empty() && segs_.back().view.obj == nullptr &&
        segs_.back().off + segs_.back().len == abs) {
      segs_.back().len += n;
      return;
    }
    Seg s{};
    s.off = abs;
    s.len = n;
    segs_.push_back(s);
  }

  // Takes over a buffer view: copied if small (and released), else kept.
  void AddView(Py_buffer* view) {
    size_t n = static_cast<size_t>(view->len);
    if (n <= kCopyMax) {
      Copy(view->buf, n);
      PyBuffer_Release(view);
      return;
    }
    Seg s{};
    s.view = *view;
    s.off = 0;
    s.len = n;
    segs_.push_back(s);
    out_bytes_ += n;
  }

  // Forgets the first n bytes sent.
  void Consume(size_t n) {
    out_bytes_ -= n;
    while (n > 0) {
      Seg& s = segs_.front();
      size_t k = std::min(n, s.len);
      if (s.view.obj == nullptr) stream_head_ = s.off + k - stream_base_;
      s.off += k;
      s.len -= k;
      n -= k;
      if (s.len == 0) {
        if (s.view.obj != nullptr) PyBuffer_Release(&s.view);
        segs_.pop_front();
      }
    }
    if (segs_.empty()) {  // everything sent: reuse the stream from its start
      stream_base_ += stream_.size();
      stream_.clear();
      stream_head_ = 0;
    } else if (stream_head_ > (1u << 20) && stream_head_ * 2 > stream_.size()) {
      stream_.erase(0, stream_head_);  // compact: copied bytes already sent
      stream_base_ += stream_head_;
      stream_head_ = 0;
    }
  }

  int fd_;
  bool busy_ = false;  // in a call (Flush releases the GIL)
  std::deque<Seg> segs_;
  std::string stream_;  // copied bytes; stream_[0] is absolute offset stream_base_
  uint64_t stream_base_ = 0;
  uint64_t stream_head_ = 0;  // bytes of stream_ already sent
  size_t out_bytes_ = 0;
};

// CRC-32C of each buffer of `parts` (a list of bytes-like objects), computed
// with the GIL released: a write batch's CRCs in one call.
nb::list Crc32cMany(nb::list parts) {
  size_t n = parts.size();
  std::vector<Py_buffer> views(n);
  for (size_t i = 0; i < n; ++i) {
    if (PyObject_GetBuffer(PyList_GET_ITEM(parts.ptr(), i), &views[i], PyBUF_SIMPLE) != 0) {
      for (size_t j = 0; j < i; ++j) PyBuffer_Release(&views[j]);
      throw nb::python_error();
    }
  }
  std::vector<uint32_t> crcs(n);
  {
    nb::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i)
      crcs[i] = st::crc32c::Value(views[i].buf, static_cast<size_t>(views[i].len));
  }
  nb::list out;
  for (size_t i = 0; i < n; ++i) {
    PyBuffer_Release(&views[i]);
    out.append(crcs[i]);
  }
  return out;
}

// The faults of a batch as Python sees them: [(index, reason, size, crc32c)].
nb::list BadList(const std::vector<st::CopyResult>& bad) {
  nb::list out;
  for (const st::CopyResult& b : bad)
    out.append(nb::make_tuple(b.index, static_cast<int>(b.fault), b.size, b.crc));
  return out;
}

// Reads revealed record copies into one bytes object, back to back, checking
// each copy's size and the CRC-32C in its file name as the bytes pass
// (copy_reader.h). The GIL is released for the I/O and the CRCs. Returns
// (bytes, bad): bad lists (index, reason, actual size, actual CRC-32C) with
// reason 1 missing, 2 size or CRC differs, 3 another I/O error; their slots
// in bytes hold garbage.
nb::tuple ReadCopies(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes) {
  if (paths.size() != sizes.size()) throw nb::value_error("paths and sizes differ in length");
  uint64_t capacity = st::BatchCapacity(sizes, 1);  // the layout and copy_reader's spare byte
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(capacity));
  if (out == nullptr) throw nb::python_error();
  char* base = PyBytes_AS_STRING(out);
  std::vector<uint64_t> offsets;
  std::vector<st::CopyResult> bad;
  {
    nb::gil_scoped_release nogil;
    st::ReadCopyBatch(paths, sizes, 1, true, base, capacity, &offsets, &bad);
  }
  if (_PyBytes_Resize(&out, static_cast<Py_ssize_t>(capacity - 1)) != 0) throw nb::python_error();
  nb::object buf = nb::steal(out);
  return nb::make_tuple(buf, BadList(bad));
}

// Reads revealed record copies into `data`, a writable buffer of at least
// batch_capacity(sizes, align) bytes (an Arrow buffer from pyarrow's memory
// pool, so its pages are reused from batch to batch instead of faulted in),
// laid out as copy_reader.h says; with `check`, each copy's CRC-32C is
// checked as its bytes pass. The GIL is released for the I/O and the CRCs.
// Returns (offsets, bad): offsets as bytes of n + 1 little-endian int64
// (copy i at offsets[i], the end last), bad as read_copies gives it.
nb::tuple ReadInto(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes,
                   nb::handle data, uint64_t align, bool check) {
  if (paths.size() != sizes.size()) throw nb::value_error("paths and sizes differ in length");
  if (align == 0 || (align & (align - 1)) != 0)
    throw nb::value_error("align must be a power of two");
  Py_buffer view;
  if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0)
    throw nb::python_error();
  std::vector<uint64_t> offsets;
  std::vector<st::CopyResult> bad;
  bool ok;
  {
    nb::gil_scoped_release nogil;
    ok = st::ReadCopyBatch(paths, sizes, align, check, static_cast<char*>(view.buf),
                           static_cast<uint64_t>(view.len), &offsets, &bad);
  }
  PyBuffer_Release(&view);
  if (!ok) throw nb::value_error("data is smaller than batch_capacity(sizes, align)");
  static_assert(sizeof(uint64_t) == 8);
  PyObject* offs = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(offsets.size() * 8));
  if (offs == nullptr) throw nb::python_error();
  char* p = PyBytes_AS_STRING(offs);
  for (uint64_t o : offsets) {
    st::EncodeFixed64(reinterpret_cast<uint8_t*>(p), o);
    p += 8;
  }
  return nb::make_tuple(nb::steal(offs), BadList(bad));
}

// LOCAL_LIST payload (docs/wire-protocol.md): u32 n, then n x (u8 copy_rank,
// u64 size, str16 name, str16 path), as four Python lists (ranks, sizes,
// names, paths) with the strings decoded as UTF-8 (surrogateescape): a
// GET_LOCAL plan of a million records without a Python object per field.
nb::tuple DecodeLocalList(nb::bytes payload) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.c_str());
  const uint8_t* end = p + payload.size();
  auto malformed = [](const char* what) {
    PyErr_SetString(PyExc_ValueError, what);
    throw nb::python_error();
  };
  if (end - p < 4) malformed("LOCAL_LIST: no entry count");
  uint32_t n = st::DecodeFixed32(p);
  p += 4;
  if (static_cast<uint64_t>(n) * 13 > static_cast<uint64_t>(end - p))
    malformed("LOCAL_LIST: more entries than bytes");
  nb::object ranks = nb::steal(PyList_New(n)), sizes = nb::steal(PyList_New(n));
  nb::object names = nb::steal(PyList_New(n)), paths = nb::steal(PyList_New(n));
  if (!ranks.is_valid() || !sizes.is_valid() || !names.is_valid() || !paths.is_valid())
    throw nb::python_error();
  auto str16 = [&](PyObject* list, uint32_t i) {
    if (end - p < 2) malformed("LOCAL_LIST: truncated string length");
    uint16_t len = st::DecodeFixed16(p);
    p += 2;
    if (end - p < len) malformed("LOCAL_LIST: truncated string");
    PyObject* s = PyUnicode_DecodeUTF8(reinterpret_cast<const char*>(p), len, "surrogateescape");
    if (s == nullptr) throw nb::python_error();
    PyList_SET_ITEM(list, i, s);
    p += len;
  };
  for (uint32_t i = 0; i < n; ++i) {
    if (end - p < 9) malformed("LOCAL_LIST: truncated entry");
    PyObject* rank = PyLong_FromLong(p[0]);
    PyObject* size = PyLong_FromUnsignedLongLong(st::DecodeFixed64(p + 1));
    if (rank == nullptr || size == nullptr) throw nb::python_error();
    PyList_SET_ITEM(ranks.ptr(), i, rank);
    PyList_SET_ITEM(sizes.ptr(), i, size);
    p += 9;
    str16(names.ptr(), i);
    str16(paths.ptr(), i);
  }
  if (p != end) malformed("LOCAL_LIST: trailing bytes after the entries");
  return nb::make_tuple(ranks, sizes, names, paths);
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "StoreTorrent's client send and receive paths in C++ (share the peer's frame codec and "
            "CRC-32C).";
  m.attr("RECEIVE_OKS") = true;  // Receiver.receive(oks): the transport's feature check
  m.def(
      "keep_freed_memory",
      [](size_t max_bytes) {
        // Large record bodies are allocated and freed at GB/s; by default glibc
        // hands freed memory back to the kernel (trim, or munmap of large
        // chunks), so every new body page-faults its pages in again, which costs
        // more than receiving it. Keep up to max_bytes of freed memory for reuse.
        int ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's maximum
        ok &= mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<size_t>(max_bytes, INT32_MAX)));
        return ok == 1;
      },
      nb::arg("max_bytes"),
      "Make glibc keep up to max_bytes of freed heap memory for reuse instead of returning it to "
      "the "
      "kernel (mallopt M_TRIM_THRESHOLD, M_MMAP_THRESHOLD 32 MiB). Returns True if glibc took "
      "both.");
  m.def(
      "crc32c",
      [](nb::bytes b) {
        const char* p = b.c_str();
        size_t n = b.size();
        nb::gil_scoped_release nogil;
        return st::crc32c::Value(p, n);
      },
      "CRC-32C (Castagnoli) of a bytes object, with the peer's implementation.");
  m.def("crc32c_many", &Crc32cMany, nb::arg("parts"),
        "CRC-32C of each buffer of a list, computed with the GIL released; returns a list of "
        "int.");
  m.def("read_copies", &ReadCopies, nb::arg("paths"), nb::arg("sizes"),
        "Read record copies into one bytes object (each at the offset its size gives), checking "
        "each one's size and the CRC-32C in its file name; returns (bytes, [(index, reason, "
        "size, crc32c) of the bad ones]), reason 1 missing, 2 size or CRC-32C differs, 3 I/O "
        "error.");
  m.def("read_into", &ReadInto, nb::arg("paths"), nb::arg("sizes"), nb::arg("data"),
        nb::arg("align") = 1, nb::arg("check") = true,
        "Read record copies into the writable buffer data, copy i at offsets[i] (each start "
        "rounded up to align bytes), checking each one's size and (check) the CRC-32C in its "
        "file name as the bytes pass; returns (offsets as n + 1 little-endian int64 in bytes, "
        "[(index, reason, size, crc32c) of the bad ones]) as read_copies. data must hold "
        "batch_capacity(sizes, align) bytes. Thread-safe for distinct buffers.");
  m.def(
      "batch_capacity",
      [](const std::vector<uint64_t>& sizes, uint64_t align) {
        if (align == 0 || (align & (align - 1)) != 0)
          throw nb::value_error("align must be a power of two");
        return st::BatchCapacity(sizes, align);
      },
      nb::arg("sizes"), nb::arg("align") = 1,
      "Bytes read_into needs for copies of these sizes with this alignment (the layout and one "
      "spare byte).");
  m.def("decode_local_list", &DecodeLocalList, nb::arg("payload"),
        "A LOCAL_LIST payload as four lists (copy ranks, sizes, names, paths); raises "
        "ValueError if it is malformed.");
  nb::class_<Receiver>(m, "Receiver",
                       "Reads reply frames from one non-blocking socket (its file descriptor).")
      .def(nb::init<int, uint32_t, size_t>(), nb::arg("fd"), nb::arg("max_frame"),
           nb::arg("max_read") = 8 * 1024 * 1024)
      .def("receive", &Receiver::Receive, nb::arg("oks") = nb::none(),
           "Whole frames received so far, as (type, flags, seq, payload, data_info) tuples; "
           "for DATA, payload is the record data and data_info is (crc32c, copy_rank, "
           "crc32c of the data received). With oks a list, the seqs of final OK replies with "
           "an empty payload are appended to it instead of returned as frames. Raises "
           "ConnectionResetError, OSError, ValueError.")
      .def_prop_ro("buffered", &Receiver::buffered);
  nb::class_<Sender>(m, "Sender",
                     "Queues request frames for one non-blocking socket (its file descriptor) "
                     "and writes them with sendmsg.")
      .def(nb::init<int>(), nb::arg("fd"))
      .def("put", &Sender::Put, nb::arg("seq"), nb::arg("file_id"), nb::arg("copy_rank"),
           nb::arg("crc32c"), nb::arg("name"), nb::arg("data"), nb::arg("flags") = 0,
           "Queue the PUT frame of one record copy: prefix framed here, then data "
           "(copied up to 16 KiB, else referenced).")
      .def("put_batch", &Sender::PutBatch, nb::arg("seq0"), nb::arg("file_id"), nb::arg("flags"),
           nb::arg("ranks"), nb::arg("crcs"), nb::arg("names"), nb::arg("datas"),
           "Queue the PUT frames of many record copies, frame i with seq seq0 + i, copy rank "
           "ranks[i], CRC-32C crcs[i], name names[i] (bytes), data datas[i]; encoded with the "
           "GIL released, laid out as put() does.")
      .def("queue", &Sender::Queue, nb::arg("part"), "Queue one part of a frame (any buffer).")
      .def("flush", &Sender::Flush,
           "Write what the socket accepts; returns the bytes written. Raises OSError.")
      .def("clear", &Sender::Clear, "Drop everything queued.")
      .def_prop_ro("out_bytes", &Sender::out_bytes)
      .def_prop_ro("empty", &Sender::empty);
}
