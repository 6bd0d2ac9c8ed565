// CRC-32C (Castagnoli), as in iSCSI (RFC 3720). Used for record checksums
// (PUT/GET) and for the record store's bucket of a name.
//
// On x86-64 CPUs with SSE4.2 the crc32 instruction is used (checked once at
// run time with cpuid); elsewhere a slicing-by-8 table.
#ifndef ST_CORE_CRC32C_H_
#define ST_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace st {
namespace crc32c {

// Returns the CRC-32C of concat(A, data[0,n)) where init_crc is the CRC-32C
// of A. Extend(0, ...) is the CRC of data alone.
uint32_t Extend(uint32_t init_crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::string_view s) { return Extend(0, s.data(), s.size()); }

// The two implementations, exposed for tests.
uint32_t ExtendPortable(uint32_t init_crc, const void* data, size_t n);
// Only valid if CanUseHardware().
uint32_t ExtendHardware(uint32_t init_crc, const void* data, size_t n);
bool CanUseHardware();

}  // namespace crc32c
}  // namespace st

#endif  // ST_CORE_CRC32C_H_
