#include "copy_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include "crc32c.h"

namespace st {

namespace {

uint64_t RoundUp(uint64_t v, uint64_t align) { return (v + align - 1) & ~(align - 1); }

// Reads one copy into dst (room for want + 1 bytes), its CRC-32C extended
// chunk by chunk as the bytes arrive. Returns kNone or the fault, with the
// bytes read and their CRC in *got and *crc.
CopyFault ReadOne(const std::string& path, char* dst, uint64_t want, bool check, uint64_t* got,
                  uint32_t* crc) {
  *got = 0;
  *crc = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? CopyFault::kMissing : CopyFault::kIOError;
  CopyFault fault = CopyFault::kNone;
  for (;;) {
    uint64_t left = want - *got;
    // The last read asks for one byte more than is left: a file longer than
    // its revealed size shows in the same call.
    uint64_t ask = left >= kCheckChunk ? kCheckChunk : left + 1;
    ssize_t n = ::read(fd, dst + *got, ask);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fault = CopyFault::kIOError;
      break;
    }
    if (n == 0) break;  // end of file
    uint64_t u = static_cast<uint64_t>(n);
    if (u > left) {  // longer than revealed: the extra byte is not the copy's
      *got += u;
      break;
    }
    if (check) *crc = crc32c::Extend(*crc, dst + *got, u);
    *got += u;
    // A short read of a regular file is its end; one that stops exactly at
    // the revealed size needs no further call to say so.
    if (u < ask && *got == want) break;
  }
  ::close(fd);
  if (fault != CopyFault::kNone) return fault;
  if (*got != want) return CopyFault::kMismatch;
  uint32_t expected;
  if (check && PathCrc32c(path, &expected) && *crc != expected) return CopyFault::kMismatch;
  return CopyFault::kNone;
}

}  // namespace

bool PathCrc32c(std::string_view path, uint32_t* crc) {
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (base.size() >= 5 && base.substr(base.size() - 5) == ".name") base.remove_suffix(5);
  size_t at = base.rfind('@');
  if (at == std::string_view::npos || base.size() - at - 1 != 8) return false;
  uint32_t v = 0;
  for (char c : base.substr(at + 1)) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint32_t>(d);
  }
  *crc = v;
  return true;
}

uint64_t BatchCapacity(const std::vector<uint64_t>& sizes, uint64_t align) {
  uint64_t end = 0;
  for (size_t i = 0; i < sizes.size(); ++i) end = (i ? RoundUp(end, align) : 0) + sizes[i];
  return end + 1;
}

bool ReadCopyBatch(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes,
                   uint64_t align, bool check, char* buf, uint64_t capacity,
                   std::vector<uint64_t>* offsets, std::vector<CopyResult>* bad) {
  if (paths.size() != sizes.size() || align == 0 || (align & (align - 1)) != 0) return false;
  if (capacity < BatchCapacity(sizes, align)) return false;
  offsets->clear();
  offsets->reserve(sizes.size() + 1);
  uint64_t end = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    uint64_t start = i ? RoundUp(end, align) : 0;
    offsets->push_back(start);
    end = start + sizes[i];
    uint64_t got;
    uint32_t crc;
    CopyFault f = ReadOne(paths[i], buf + start, sizes[i], check, &got, &crc);
    if (f != CopyFault::kNone) bad->push_back({i, f, got, crc});
  }
  offsets->push_back(end);
  return true;
}

}  // namespace st
