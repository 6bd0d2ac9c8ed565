#include "copy_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "crc32c.h"
#include "test_util.h"

namespace st {
namespace {

// A copy's file as a peer names it: <name>@<rank>@<crc32c:08x>.
std::string WriteCopy(const std::string& dir, const std::string& name, const std::string& data,
                      uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  std::string path = dir + "/" + name + "@0@" + hex;
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

std::string WriteCopy(const std::string& dir, const std::string& name, const std::string& data) {
  return WriteCopy(dir, name, data, crc32c::Value(data));
}

std::string Body(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7919) & 0xff);
  return s;
}

struct Batch {
  std::vector<char> buf;
  std::vector<uint64_t> offsets;
  std::vector<CopyResult> bad;
};

Batch Read(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes,
           uint64_t align, bool check = true) {
  Batch b;
  b.buf.assign(BatchCapacity(sizes, align), '\x5a');
  EXPECT_TRUE(ReadCopyBatch(paths, sizes, align, check, b.buf.data(), b.buf.size(), &b.offsets,
                            &b.bad));
  return b;
}

TEST(CopyReader, BackToBackCopiesOfEverySize) {
  test::TempDir dir;
  std::vector<std::string> paths, bodies;
  std::vector<uint64_t> sizes;
  // small, exactly one chunk, around a chunk, several chunks, empty
  for (size_t n : {size_t{1}, size_t{4096}, kCheckChunk - 1, kCheckChunk, kCheckChunk + 1,
                   3 * kCheckChunk + 17, size_t{0}, size_t{100}}) {
    bodies.push_back(Body(n, static_cast<int>(paths.size())));
    paths.push_back(WriteCopy(dir.path(), "r" + std::to_string(paths.size()), bodies.back()));
    sizes.push_back(n);
  }
  Batch b = Read(paths, sizes, 1);
  EXPECT_TRUE(b.bad.empty());
  ASSERT_EQ(paths.size() + 1, b.offsets.size());
  uint64_t off = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(off, b.offsets[i]);
    EXPECT_EQ(bodies[i], std::string(b.buf.data() + off, sizes[i])) << i;
    off += sizes[i];
  }
  EXPECT_EQ(off, b.offsets.back());
  EXPECT_EQ(off + 1, b.buf.size());  // the spare byte only
}

TEST(CopyReader, AlignedStarts) {
  test::TempDir dir;
  std::vector<std::string> paths, bodies;
  std::vector<uint64_t> sizes;
  for (size_t n : {size_t{5}, size_t{64}, size_t{65}, size_t{1000}}) {
    bodies.push_back(Body(n, static_cast<int>(n)));
    paths.push_back(WriteCopy(dir.path(), "a" + std::to_string(n), bodies.back()));
    sizes.push_back(n);
  }
  Batch b = Read(paths, sizes, 64);
  EXPECT_TRUE(b.bad.empty());
  std::vector<uint64_t> want = {0, 64, 128, 256, 1256};
  EXPECT_EQ(want, b.offsets);
  for (size_t i = 0; i < paths.size(); ++i)
    EXPECT_EQ(bodies[i], std::string(b.buf.data() + b.offsets[i], sizes[i]));
  EXPECT_EQ(1257u, BatchCapacity(sizes, 64));
}

TEST(CopyReader, EachFaultIsReportedAndTheOthersAreRead) {
  test::TempDir dir;
  std::string good = Body(4096, 1), flipped = Body(4096, 2), big = Body(2 * kCheckChunk, 3);
  std::vector<std::string> paths = {
      WriteCopy(dir.path(), "good", good),
      WriteCopy(dir.path(), "gone", good),
      WriteCopy(dir.path(), "longer", good + "x", crc32c::Value(good)),
      WriteCopy(dir.path(), "shorter", good.substr(1), crc32c::Value(good)),
      WriteCopy(dir.path(), "flipped", flipped, crc32c::Value(flipped) ^ 1),
      WriteCopy(dir.path(), "bigflip", big, crc32c::Value(big) ^ 1),
      dir.path(),  // a directory: read fails with EISDIR
      WriteCopy(dir.path(), "last", good),
  };
  std::remove(paths[1].c_str());
  std::vector<uint64_t> sizes = {4096, 4096, 4096, 4096, 4096, big.size(), 4096, 4096};
  Batch b = Read(paths, sizes, 1);
  ASSERT_EQ(6u, b.bad.size());
  EXPECT_EQ(1u, b.bad[0].index);
  EXPECT_EQ(CopyFault::kMissing, b.bad[0].fault);
  EXPECT_EQ(2u, b.bad[1].index);
  EXPECT_EQ(CopyFault::kMismatch, b.bad[1].fault);
  EXPECT_EQ(4097u, b.bad[1].size);  // seen longer in the same read
  EXPECT_EQ(3u, b.bad[2].index);
  EXPECT_EQ(CopyFault::kMismatch, b.bad[2].fault);
  EXPECT_EQ(4095u, b.bad[2].size);
  EXPECT_EQ(4u, b.bad[3].index);
  EXPECT_EQ(crc32c::Value(flipped), b.bad[3].crc);
  EXPECT_EQ(5u, b.bad[4].index);
  EXPECT_EQ(CopyFault::kMismatch, b.bad[4].fault);
  EXPECT_EQ(crc32c::Value(big), b.bad[4].crc);  // extended chunk by chunk: the whole copy's CRC
  EXPECT_EQ(6u, b.bad[5].index);  // a directory: read fails (EISDIR)
  EXPECT_EQ(CopyFault::kIOError, b.bad[5].fault);
  // the good copies around the bad ones are intact
  EXPECT_EQ(good, std::string(b.buf.data() + b.offsets[0], 4096));
  EXPECT_EQ(good, std::string(b.buf.data() + b.offsets[7], 4096));
}

TEST(CopyReader, WithoutCheckOnlyTheSizeCounts) {
  test::TempDir dir;
  std::string body = Body(300, 4);
  std::vector<std::string> paths = {WriteCopy(dir.path(), "x", body, crc32c::Value(body) ^ 1),
                                    WriteCopy(dir.path(), "y", body + "!", crc32c::Value(body))};
  Batch b = Read(paths, {300, 300}, 1, /*check=*/false);
  ASSERT_EQ(1u, b.bad.size());
  EXPECT_EQ(1u, b.bad[0].index);
  EXPECT_EQ(body, std::string(b.buf.data(), 300));
}

TEST(CopyReader, RefusesASmallBufferAndBadArguments) {
  std::vector<char> buf(10);
  std::vector<uint64_t> offsets;
  std::vector<CopyResult> bad;
  EXPECT_FALSE(ReadCopyBatch({"/nonexistent"}, {10}, 1, true, buf.data(), 10, &offsets, &bad));
  EXPECT_FALSE(ReadCopyBatch({"/a", "/b"}, {1}, 1, true, buf.data(), 10, &offsets, &bad));
  EXPECT_FALSE(ReadCopyBatch({"/a"}, {1}, 3, true, buf.data(), 10, &offsets, &bad));
  EXPECT_TRUE(bad.empty());
  EXPECT_TRUE(ReadCopyBatch({"/nonexistent"}, {9}, 1, true, buf.data(), 10, &offsets, &bad));
  ASSERT_EQ(1u, bad.size());
  EXPECT_EQ(CopyFault::kMissing, bad[0].fault);
}

TEST(CopyReader, PathCrc32c) {
  uint32_t crc = 0;
  EXPECT_TRUE(PathCrc32c("/d/ab/r1@0@0a0B0c0D", &crc));
  EXPECT_EQ(0x0a0b0c0du, crc);
  EXPECT_TRUE(PathCrc32c("/d/ab/r1@1@deadbeef.name", &crc));
  EXPECT_EQ(0xdeadbeefu, crc);
  EXPECT_FALSE(PathCrc32c("/d/ab/r1", &crc));
  EXPECT_FALSE(PathCrc32c("/d/ab/r1@0@xyz12345", &crc));
  EXPECT_FALSE(PathCrc32c("/d/ab/r1@0@123", &crc));
}

}  // namespace
}  // namespace st
