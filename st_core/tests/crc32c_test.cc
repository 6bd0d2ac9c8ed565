#include "crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace st {
namespace crc32c {
namespace {

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

struct Impl {
  const char* name;
  ExtendFn fn;
};

std::vector<Impl> Impls() {
  std::vector<Impl> v = {{"portable", &ExtendPortable}};
  if (CanUseHardware()) v.push_back({"hardware", &ExtendHardware});
  return v;
}

TEST(Crc32c, Rfc3720Vectors) {
  for (const Impl& impl : Impls()) {
    SCOPED_TRACE(impl.name);
    uint8_t buf[32];
    std::memset(buf, 0, sizeof(buf));
    EXPECT_EQ(0x8a9136aau, impl.fn(0, buf, sizeof(buf)));
    std::memset(buf, 0xff, sizeof(buf));
    EXPECT_EQ(0x62a8ab43u, impl.fn(0, buf, sizeof(buf)));
    for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
    EXPECT_EQ(0x46dd794eu, impl.fn(0, buf, sizeof(buf)));
    for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
    EXPECT_EQ(0x113fdb5cu, impl.fn(0, buf, sizeof(buf)));
    uint8_t iscsi[48] = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                         0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                         0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                         0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    EXPECT_EQ(0xd9963a56u, impl.fn(0, iscsi, sizeof(iscsi)));
    EXPECT_EQ(0xe3069283u, impl.fn(0, "123456789", 9));
    EXPECT_EQ(0u, impl.fn(0, "", 0));
  }
}

TEST(Crc32c, ImplementationsAgreeAtEveryLengthAndAlignment) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>((i * 7919) & 0xff));
  for (size_t off = 0; off < 9; ++off) {
    for (size_t len = 0; len + off <= 300; ++len) {
      uint32_t a = ExtendPortable(0, data.data() + off, len);
      if (CanUseHardware()) {
        ASSERT_EQ(a, ExtendHardware(0, data.data() + off, len));
      }
      ASSERT_EQ(a, Extend(0, data.data() + off, len));
    }
  }
}

TEST(Crc32c, InterleavedBlocksAgreeWithThePortableCode) {
  // The hardware path computes 3 x 8 KiB and 3 x 256 B blocks in parallel
  // and combines them: check lengths around every block boundary, at every
  // alignment, and chained calls.
  std::string data(200000, '\0');
  uint32_t x = 12345;
  for (char& ch : data) {
    x = x * 1103515245u + 12345u;
    ch = static_cast<char>(x >> 24);
  }
  if (!CanUseHardware()) GTEST_SKIP() << "no SSE4.2";
  for (size_t base : {size_t{768}, size_t{3 * 8192}, size_t{2 * 3 * 8192}, size_t{150000}}) {
    for (size_t off = 0; off < 9; ++off) {
      for (size_t len = base - 9; len <= base + 800; len += 7) {
        ASSERT_EQ(ExtendPortable(0, data.data() + off, len),
                  ExtendHardware(0, data.data() + off, len))
            << "len " << len << " offset " << off;
      }
    }
  }
  uint32_t a = ExtendHardware(ExtendHardware(0, data.data(), 70001), data.data() + 70001, 129999);
  EXPECT_EQ(ExtendPortable(0, data.data(), 200000), a);
}

TEST(Crc32c, ExtendEqualsOneShot) {
  std::string data = "hello, record; a longer piece of data to cross the 8-byte blocks...";
  for (const Impl& impl : Impls()) {
    SCOPED_TRACE(impl.name);
    uint32_t whole = impl.fn(0, data.data(), data.size());
    for (size_t cut = 0; cut <= data.size(); ++cut) {
      uint32_t part = impl.fn(0, data.data(), cut);
      EXPECT_EQ(whole, impl.fn(part, data.data() + cut, data.size() - cut));
    }
  }
  EXPECT_EQ(Value("a"), Value(std::string_view("a")));
}

}  // namespace
}  // namespace crc32c
}  // namespace st
