// Explicit little-endian encoding of fixed-width integers (leveldb style).
// The wire protocol never relies on alignment or host byte order.
#ifndef ST_CORE_CODING_H_
#define ST_CORE_CODING_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace st {

inline void EncodeFixed16(uint8_t* dst, uint16_t v) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
}

inline void EncodeFixed32(uint8_t* dst, uint32_t v) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void EncodeFixed64(uint8_t* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint16_t DecodeFixed16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

inline uint32_t DecodeFixed32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

inline uint64_t DecodeFixed64(const uint8_t* p) {
  return static_cast<uint64_t>(DecodeFixed32(p)) |
         (static_cast<uint64_t>(DecodeFixed32(p + 4)) << 32);
}

inline void PutFixed8(std::string* dst, uint8_t v) { dst->push_back(static_cast<char>(v)); }

inline void PutFixed16(std::string* dst, uint16_t v) {
  uint8_t buf[2];
  EncodeFixed16(buf, v);
  dst->append(reinterpret_cast<const char*>(buf), 2);
}

inline void PutFixed32(std::string* dst, uint32_t v) {
  uint8_t buf[4];
  EncodeFixed32(buf, v);
  dst->append(reinterpret_cast<const char*>(buf), 4);
}

inline void PutFixed64(std::string* dst, uint64_t v) {
  uint8_t buf[8];
  EncodeFixed64(buf, v);
  dst->append(reinterpret_cast<const char*>(buf), 8);
}

// str16 := len:u16 bytes. The caller guarantees s.size() <= 0xFFFF.
inline void PutStr16(std::string* dst, std::string_view s) {
  PutFixed16(dst, static_cast<uint16_t>(s.size()));
  dst->append(s.data(), s.size());
}

// A bounds-checked reader over a byte string. Every getter returns false
// (and leaves the reader failed) once the input is exhausted.
class Reader {
 public:
  explicit Reader(std::string_view in) : p_(in.data()), left_(in.size()) {}

  bool U8(uint8_t* v) {
    if (left_ < 1) return Fail();
    *v = static_cast<uint8_t>(p_[0]);
    Skip(1);
    return true;
  }
  bool U16(uint16_t* v) {
    if (left_ < 2) return Fail();
    *v = DecodeFixed16(bytes());
    Skip(2);
    return true;
  }
  bool U32(uint32_t* v) {
    if (left_ < 4) return Fail();
    *v = DecodeFixed32(bytes());
    Skip(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (left_ < 8) return Fail();
    *v = DecodeFixed64(bytes());
    Skip(8);
    return true;
  }
  bool Str16(std::string_view* v) {
    uint16_t n;
    if (!U16(&n)) return false;
    if (left_ < n) return Fail();
    *v = std::string_view(p_, n);
    Skip(n);
    return true;
  }
  std::string_view Rest() {
    std::string_view r(p_, left_);
    Skip(left_);
    return r;
  }
  size_t left() const { return left_; }
  bool done() const { return left_ == 0; }

 private:
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(p_); }
  void Skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  bool Fail() {
    left_ = 0;
    return false;
  }

  const char* p_;
  size_t left_;
};

// Lower-case hex of bytes (tokens in logs and gRPC metadata).
inline std::string EncodeLowerHex(std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

// Parses exactly `digits` lower-case hex digits (the store's file names).
inline bool ParseLowerHex(std::string_view s, size_t digits, uint64_t* v) {
  if (s.size() != digits) return false;
  uint64_t x = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    x = (x << 4) | static_cast<uint64_t>(d);
  }
  *v = x;
  return true;
}

inline bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace st

#endif  // ST_CORE_CODING_H_
