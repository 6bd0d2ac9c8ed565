// Record names and StoreTorrent file names as the peer sees them
// (docs/wire-protocol.md, "Record store").
//
//   <data>/files/<file_id:016x>/<bucket:02x>/<enc(name)>@<copy_rank>@<crc32c:08x>
//   <data>/files/<file_id:016x>/<bucket:02x>/<enc(name)>@<copy_rank>@<crc32c:08x>.name
//
//   bucket    := crc32c(name) & 0xff
//   enc(name) := bytes A-Z a-z 0-9 - _ . kept, every other byte %XX (upper
//                case); a leading '.' is %2E. If that is longer than 200
//                bytes: '~' + lower-case hex SHA-256 of the name, and the raw
//                name lives in the ".name" sidecar beside the record.
//   copy_rank is decimal.
//
// An encoded name never contains '/', is never "." or "..", never starts
// with '.', and a record file name stays below 255 bytes.
#ifndef ST_CORE_NAME_CODEC_H_
#define ST_CORE_NAME_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "status.h"

namespace st {

constexpr size_t kMaxEncodedName = 200;
constexpr char kSidecarSuffix[] = ".name";

// InvalidArgument unless 1 <= size <= 4096 and no NUL byte.
Status ValidateRecordName(std::string_view name);

// InvalidArgument unless the StoreTorrent file name starts with '/', has no
// empty, "." or ".." component and no NUL byte.
Status ValidateFileName(std::string_view file_name);

// enc(name). The name must be valid.
std::string EncodeName(std::string_view name);

// True if enc is the hashed form ("~<sha256>"), whose name is in a sidecar.
inline bool IsHashedEncoding(std::string_view enc) { return !enc.empty() && enc[0] == '~'; }

// Inverse of EncodeName for the escaped (not hashed) form. False if enc is
// not the canonical encoding of any name.
bool DecodeEncodedName(std::string_view enc, std::string* name);

// crc32c(name) & 0xff.
uint8_t NameBucket(std::string_view name);

// "<enc>@<rank>@<crc:08x>"
std::string RecordFileName(std::string_view enc, uint8_t copy_rank, uint32_t crc);

// Splits a record file name. False if it does not have the form above.
bool ParseRecordFileName(std::string_view file_name, std::string_view* enc, uint8_t* copy_rank,
                         uint32_t* crc);

// Lower-case hex SHA-256.
std::string Sha256Hex(std::string_view data);

}  // namespace st

#endif  // ST_CORE_NAME_CODEC_H_
