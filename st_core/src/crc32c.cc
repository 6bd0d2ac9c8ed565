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
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t init_crc, const void* data,
                                                          size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t c = init_crc ^ 0xffffffffu;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian host: the byte order the CRC wants
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
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
