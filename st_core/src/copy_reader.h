// Reading revealed record copies in batches, checked as the bytes pass
// (docs/reliability.md, "Checksummed scans"; issue "Writes at the disk's
// speed, scans at the machine's", item 3).
//
// A read task of a scan reads the files GET_LOCAL revealed to its node. For
// many small records the per-record work is the point: open, read, check
// and place each copy in one loop over the batch, with no interpreter in
// between. Each copy is read in chunks of at most kCheckChunk bytes and its
// CRC-32C is extended with each chunk right after the read, while the bytes
// are still in cache: the check costs no second pass over memory.
//
// Layout of a batch in the caller's buffer (Arrow-ready):
//
//   batch  := copy[0] pad copy[1] pad ... copy[n-1]
//   copy i starts at offsets[i] = RoundUp(offsets[i-1] + size[i-1], align),
//   offsets[0] = 0, and offsets[n] = offsets[n-1] + size[n-1] (the end).
//
// With align 1 the copies are back to back and (offsets, buffer) are the
// offsets and data of an Arrow binary array. With align 64 each copy starts
// where Arrow's IPC and Parquet readers may use its buffers without a copy.
//
// The buffer must hold BatchCapacity(sizes, align) bytes: the layout plus
// one spare byte, so that the last read of each copy can ask for one byte
// more than the copy should have and learn in the same system call whether
// the file is longer than its revealed size (open, read, close: three
// system calls for a small copy, where a read to end of file needs four).
// That spare byte lands in the next copy's slot, or its padding, before the
// next copy is read over it.
//
// Thread-safe: the functions keep no state; two threads may read into
// different buffers at once.
#ifndef ST_CORE_COPY_READER_H_
#define ST_CORE_COPY_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace st {

constexpr size_t kCheckChunk = 256 * 1024;  // read, then CRC, this much at a time (L2-hot)

// Why a copy failed; the numbers are the Python API's (st_py.client.getlocal.read_copies).
enum class CopyFault : int {
  kNone = 0,
  kMissing = 1,   // open: ENOENT (deleted, or the peer lost it)
  kMismatch = 2,  // size differs from the revealed one, or CRC-32C from the file name's
  kIOError = 3,   // any other open or read error
};

struct CopyResult {
  size_t index;     // which copy of the batch
  CopyFault fault;  // never kNone in a result list
  uint64_t size;    // bytes read (size + 1 when the file is longer)
  uint32_t crc;     // CRC-32C of the bytes read (0 if not computed)
};

// The CRC-32C in a peer's record file name (<enc>@<rank>@<crc:08x>[.name]);
// false if the name has none.
bool PathCrc32c(std::string_view path, uint32_t* crc);

// Bytes a buffer needs for `sizes` laid out with `align` (a power of two),
// the spare byte included.
uint64_t BatchCapacity(const std::vector<uint64_t>& sizes, uint64_t align);

// Reads copy i of `paths` (expected size sizes[i]) to buf + offsets[i],
// filling offsets (n + 1 entries, see the layout above), and appends one
// CopyResult to `bad` for each copy that is missing, of another size, or
// (with `check`) whose CRC-32C differs from the one in its file name; the
// slots of those copies hold garbage. `capacity` must be at least
// BatchCapacity(sizes, align); returns false (reading nothing) if it is not
// or if paths and sizes differ in length.
bool ReadCopyBatch(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes,
                   uint64_t align, bool check, char* buf, uint64_t capacity,
                   std::vector<uint64_t>* offsets, std::vector<CopyResult>* bad);

}  // namespace st

#endif  // ST_CORE_COPY_READER_H_
