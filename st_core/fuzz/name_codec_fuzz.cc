// libFuzzer target: the record-name codec that maps names from the wire to
// paths in the data directory (name_codec.h; docs/wire-protocol.md, "Record
// store"), and the StoreTorrent file-name check GET_LOCAL applies before it
// opens <namespace>/<file_name>.
//
// The input is tried as a record name, as an encoded name, as a record file
// name and as a StoreTorrent file name. Invariants:
//   - enc(name) of a valid name can never leave its bucket directory: no
//     '/', no NUL, not "." or "..", no leading '.', at most 200 bytes (or
//     the 65-byte hashed form), and the record file name plus ".name" fits
//     in 255 bytes;
//   - the escaped form decodes back to the name; only canonical encodings
//     decode, and they re-encode to themselves;
//   - a record file name parses back to (enc, rank, crc) and only the
//     canonical spelling parses;
//   - ValidateFileName accepts exactly the names an independent check does.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "crc32c.h"
#include "fuzz_util.h"
#include "name_codec.h"

namespace st {
namespace {

void CheckRecordName(std::string_view name) {
  if (!ValidateRecordName(name).ok()) {
    ST_FUZZ_CHECK(name.empty() || name.size() > 4096 || name.find('\0') != std::string_view::npos,
                  "a valid name of %zu bytes refused", name.size());
    return;
  }
  std::string enc = EncodeName(name);
  ST_FUZZ_CHECK(!enc.empty(), "empty encoding");
  ST_FUZZ_CHECK(enc.find('/') == std::string::npos && enc.find('\0') == std::string::npos,
                "encoding has '/' or NUL");
  ST_FUZZ_CHECK(enc != "." && enc != ".." && enc[0] != '.', "encoding starts with '.'");
  ST_FUZZ_CHECK(enc.size() <= kMaxEncodedName || (IsHashedEncoding(enc) && enc.size() == 65),
                "encoding of %zu bytes", enc.size());
  if (IsHashedEncoding(enc)) {
    ST_FUZZ_CHECK(enc == "~" + Sha256Hex(name), "hashed encoding is not ~sha256(name)");
  } else {
    std::string back;
    ST_FUZZ_CHECK(DecodeEncodedName(enc, &back), "escaped encoding does not decode");
    ST_FUZZ_CHECK(back == name, "escaped encoding decodes to another name");
  }
  uint8_t rank = static_cast<uint8_t>(name.size() * 37);
  uint32_t crc = crc32c::Value(name);
  std::string fname = RecordFileName(enc, rank, crc);
  ST_FUZZ_CHECK(fname.size() + std::strlen(kSidecarSuffix) <= 255, "record file name of %zu bytes",
                fname.size());
  std::string_view penc;
  uint8_t prank = 0;
  uint32_t pcrc = 0;
  ST_FUZZ_CHECK(ParseRecordFileName(fname, &penc, &prank, &pcrc),
                "record file name does not parse");
  ST_FUZZ_CHECK(penc == enc && prank == rank && pcrc == crc, "record file name parses differently");
  ST_FUZZ_CHECK(NameBucket(name) == (crc & 0xff), "bucket is not crc32c & 0xff");
}

void CheckEncoded(std::string_view enc) {
  std::string name;
  if (!DecodeEncodedName(enc, &name)) return;
  ST_FUZZ_CHECK(ValidateRecordName(name).ok(), "an encoding decodes to an invalid name");
  ST_FUZZ_CHECK(EncodeName(name) == enc, "a non-canonical encoding decodes");
}

void CheckRecordFileName(std::string_view fname) {
  std::string_view enc;
  uint8_t rank = 0;
  uint32_t crc = 0;
  if (!ParseRecordFileName(fname, &enc, &rank, &crc)) return;
  ST_FUZZ_CHECK(!enc.empty(), "record file name with an empty encoding parses");
  ST_FUZZ_CHECK(RecordFileName(enc, rank, crc) == fname, "a non-canonical record file name parses");
}

// The rule of docs/wire-protocol.md, written independently.
bool FileNameOk(std::string_view s) {
  if (s.empty() || s[0] != '/') return false;
  if (s.find('\0') != std::string_view::npos) return false;
  size_t start = 1;
  while (true) {
    size_t end = s.find('/', start);
    std::string_view comp =
        s.substr(start, end == std::string_view::npos ? s.size() - start : end - start);
    if (comp.empty() || comp == "." || comp == "..") return false;
    if (end == std::string_view::npos) return true;
    start = end + 1;
  }
}

void CheckFileName(std::string_view s) {
  bool ok = ValidateFileName(s).ok();
  ST_FUZZ_CHECK(ok == FileNameOk(s), "ValidateFileName says %d for a name of %zu bytes", ok,
                s.size());
}

}  // namespace
}  // namespace st

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  st::CheckRecordName(in);
  st::CheckEncoded(in);
  st::CheckRecordFileName(in);
  st::CheckFileName(in);
  return 0;
}
