#include "name_codec.h"

#include "coding.h"

#include <openssl/sha.h>

#include <cstdio>
#include <cstring>

#include "crc32c.h"

namespace st {
namespace {

bool IsSafe(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // lower case is not canonical
}

const char kUpperHex[] = "0123456789ABCDEF";

}  // namespace

Status ValidateRecordName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("record name is empty");
  if (name.size() > 4096) {
    return Status::InvalidArgument("record name of " + std::to_string(name.size()) +
                                   " bytes is longer than 4096 bytes");
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("record name contains a NUL byte");
  }
  return Status::OK();
}

Status ValidateFileName(std::string_view file_name) {
  if (file_name.empty() || file_name[0] != '/') {
    return Status::InvalidArgument("file name must start with '/'");
  }
  if (file_name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("file name contains a NUL byte");
  }
  size_t pos = 1;
  while (true) {
    size_t slash = file_name.find('/', pos);
    std::string_view comp =
        file_name.substr(pos,
                         slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    if (comp.empty()) return Status::InvalidArgument("file name has an empty component");
    if (comp == "." || comp == "..") {
      return Status::InvalidArgument("file name has a '.' or '..' component");
    }
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  return Status::OK();
}

std::string EncodeName(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 8);
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (IsSafe(c) && !(i == 0 && c == '.')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kUpperHex[c >> 4]);
      out.push_back(kUpperHex[c & 0xf]);
    }
    if (out.size() > kMaxEncodedName) break;  // will be hashed anyway
  }
  if (out.size() > kMaxEncodedName) return "~" + Sha256Hex(name);
  return out;
}

bool DecodeEncodedName(std::string_view enc, std::string* name) {
  name->clear();
  for (size_t i = 0; i < enc.size(); ++i) {
    char c = enc[i];
    if (c == '%') {
      if (i + 2 >= enc.size()) return false;
      int hi = HexValue(enc[i + 1]), lo = HexValue(enc[i + 2]);
      if (hi < 0 || lo < 0) return false;
      name->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (IsSafe(static_cast<unsigned char>(c))) {
      name->push_back(c);
    } else {
      return false;
    }
  }
  // Canonical form only: re-encoding must give back exactly enc.
  return ValidateRecordName(*name).ok() && EncodeName(*name) == enc;
}

uint8_t NameBucket(std::string_view name) {
  return static_cast<uint8_t>(crc32c::Value(name) & 0xff);
}

std::string RecordFileName(std::string_view enc, uint8_t copy_rank, uint32_t crc) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "@%u@%08x", static_cast<unsigned>(copy_rank), crc);
  std::string out(enc);
  out += tail;
  return out;
}

bool ParseRecordFileName(std::string_view file_name, std::string_view* enc, uint8_t* copy_rank,
                         uint32_t* crc) {
  size_t at2 = file_name.rfind('@');
  if (at2 == std::string_view::npos || at2 == 0) return false;
  size_t at1 = file_name.rfind('@', at2 - 1);
  if (at1 == std::string_view::npos || at1 == 0) return false;
  std::string_view rank_s = file_name.substr(at1 + 1, at2 - at1 - 1);
  std::string_view crc_s = file_name.substr(at2 + 1);
  if (rank_s.empty() || rank_s.size() > 3 || crc_s.size() != 8) return false;
  unsigned rank = 0;
  for (char c : rank_s) {
    if (c < '0' || c > '9') return false;
    rank = rank * 10 + static_cast<unsigned>(c - '0');
  }
  if (rank > 255 || (rank_s.size() > 1 && rank_s[0] == '0')) return false;
  uint64_t v = 0;
  if (!ParseLowerHex(crc_s, 8, &v)) return false;
  *enc = file_name.substr(0, at1);
  *copy_rank = static_cast<uint8_t>(rank);
  *crc = static_cast<uint32_t>(v);
  return true;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

}  // namespace st
