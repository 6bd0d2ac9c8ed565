#include "crc32c.h"

#include <cstring>

#include "coding.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace st {
namespace crc32c {
namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli polynomial

struct Tables {
  uint32_t t[8][256];
};

constexpr Tables MakeTables() {
  Tables tb{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    tb.t[0][i] = c;
  }
  for (int s = 1; s < 8; ++s) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t prev = tb.t[s - 1][i];
      tb.t[s][i] = (prev >> 8) ^ tb.t[0][prev & 0xff];
    }
  }
  return tb;
}

constexpr Tables kTables = MakeTables();

bool DetectHardware() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

const bool kHaveHardware = DetectHardware();

}  // namespace

uint32_t ExtendPortable(uint32_t init_crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t c = init_crc ^ 0xffffffffu;
  while (n >= 8) {
    uint32_t lo = DecodeFixed32(p) ^ c;
    uint32_t hi = DecodeFixed32(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return c ^ 0xffffffffu;
}

#if defined(__x86_64__)
namespace {

// The crc32 instruction has a latency of 3 cycles and a throughput of 1, so
// one dependent chain runs at a third of the speed the CPU can give. Large
// buffers are cut into three blocks whose CRCs are computed in parallel and
// then combined: the CRC register after block A then block B is the register
// after A shifted over len(B) zero bytes, XOR the register of B started from
// zero (CRCs are linear over GF(2)). A shift is four table lookups; the
// tables are the operator "append n zero bytes" for n = kLong and kShort.
// Method: Mark Adler's crc32c.c (zlib license), as in Google's crc32c.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

struct ZeroTables {
  uint32_t t[4][256];
};

constexpr uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1) {
    if (vec & 1) sum ^= mat[i];
  }
  return sum;
}

struct Gf2Matrix {
  uint32_t m[32];
};

constexpr Gf2Matrix Gf2Square(const Gf2Matrix& a) {
  Gf2Matrix sq{};
  for (int i = 0; i < 32; ++i) sq.m[i] = Gf2Times(a.m, a.m[i]);
  return sq;
}

// The operator that appends len zero bytes (len a power of two) to a CRC register.
constexpr ZeroTables MakeZeroTables(size_t len) {
  Gf2Matrix op{};  // one zero bit
  op.m[0] = kPoly;
  for (int i = 1; i < 32; ++i) op.m[i] = 1u << (i - 1);
  op = Gf2Square(Gf2Square(Gf2Square(op)));  // one zero byte
  for (; len > 1; len >>= 1) op = Gf2Square(op);
  ZeroTables z{};
  for (uint32_t i = 0; i < 256; ++i) {
    z.t[0][i] = Gf2Times(op.m, i);
    z.t[1][i] = Gf2Times(op.m, i << 8);
    z.t[2][i] = Gf2Times(op.m, i << 16);
    z.t[3][i] = Gf2Times(op.m, i << 24);
  }
  return z;
}

constexpr ZeroTables kZerosLong = MakeZeroTables(kLong);
constexpr ZeroTables kZerosShort = MakeZeroTables(kShort);

inline uint64_t Shift(const ZeroTables& z, uint64_t crc) {
  return z.t[0][crc & 0xff] ^ z.t[1][(crc >> 8) & 0xff] ^ z.t[2][(crc >> 16) & 0xff] ^
         z.t[3][(crc >> 24) & 0xff];
}

__attribute__((target("sse4.2"))) inline uint64_t Word(uint64_t c, const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);  // little-endian host: the byte order the CRC wants
  return _mm_crc32_u64(c, w);
}

// Three interleaved chains over 3 x block bytes at p; returns the register.
template <size_t kBlock>
__attribute__((target("sse4.2"))) inline uint64_t Triple(uint64_t c0, const uint8_t* p,
                                                         const ZeroTables& z) {
  uint64_t c1 = 0, c2 = 0;
  for (const uint8_t* end = p + kBlock; p < end; p += 8) {
    c0 = Word(c0, p);
    c1 = Word(c1, p + kBlock);
    c2 = Word(c2, p + 2 * kBlock);
  }
  c0 = Shift(z, c0) ^ c1;
  return Shift(z, c0) ^ c2;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t init_crc, const void* data,
                                                          size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t c = init_crc ^ 0xffffffffu;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  for (; n >= 3 * kLong; p += 3 * kLong, n -= 3 * kLong) c = Triple<kLong>(c, p, kZerosLong);
  for (; n >= 3 * kShort; p += 3 * kShort, n -= 3 * kShort) c = Triple<kShort>(c, p, kZerosShort);
  for (; n >= 8; p += 8, n -= 8) c = Word(c, p);
  while (n-- > 0) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return static_cast<uint32_t>(c) ^ 0xffffffffu;
}
#else
uint32_t ExtendHardware(uint32_t init_crc, const void* data, size_t n) {
  return ExtendPortable(init_crc, data, n);
}
#endif

bool CanUseHardware() { return kHaveHardware; }

uint32_t Extend(uint32_t init_crc, const void* data, size_t n) {
  return kHaveHardware ? ExtendHardware(init_crc, data, n) : ExtendPortable(init_crc, data, n);
}

}  // namespace crc32c
}  // namespace st
