// Capabilities: HMAC-SHA256-signed tokens for the data path
// (docs/capabilities.md; the Python side is st_py/core/capability.py).
//
//   token := version:u8 ops:u8 file_id:u64 expires:u64 user:str16 mac:32 bytes
//   mac   := HMAC-SHA256(key, "storetorrent-capability-v1" || every byte before mac)
//
// Little-endian like the wire protocol. version is 1; ops is a bit set of
// kOpRead ... kOpAdmin; file_id 0 means every file; expires is unix seconds
// (UTC); user (at most 256 bytes) only names the holder in logs.
//
// A connection remembers the tokens it was sent with AUTH in a
// CapabilityTable (one per file id; a newer one replaces the older), and
// every request is checked against it.
#ifndef ST_CORE_CAPABILITY_H_
#define ST_CORE_CAPABILITY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "status.h"

namespace st {

constexpr uint8_t kCapabilityVersion = 1;
constexpr uint8_t kOpRead = 1;     // GET, GET_LOCAL
constexpr uint8_t kOpWrite = 2;    // PUT
constexpr uint8_t kOpDelete = 4;   // DELETE, DELETE_FILE
constexpr uint8_t kOpPeer = 8;     // RING_SEGMENT
constexpr uint8_t kOpAdmin = 16;   // SCRUB
constexpr uint8_t kOpAll = 31;
constexpr size_t kCapabilityKeySize = 32;
constexpr size_t kCapabilityMacSize = 32;
constexpr size_t kCapabilityMaxUser = 256;
// version, ops, file_id, expires, user length.
constexpr size_t kCapabilityHeadSize = 1 + 1 + 8 + 8 + 2;
constexpr size_t kCapabilityMinSize = kCapabilityHeadSize + kCapabilityMacSize;
constexpr size_t kCapabilityMaxSize = kCapabilityMinSize + kCapabilityMaxUser;
// A token is accepted until this many seconds after its expiry.
constexpr uint64_t kCapabilityClockSkewS = 30;
// The HMAC's domain separation prefix.
constexpr char kCapabilityDomain[] = "storetorrent-capability-v1";

struct Capability {
  uint8_t version = kCapabilityVersion;
  uint8_t ops = 0;
  uint64_t file_id = 0;  // 0: every file
  uint64_t expires = 0;  // unix seconds
  std::string user;

  bool operator==(const Capability& o) const {
    return version == o.version && ops == o.ops && file_id == o.file_id && expires == o.expires &&
           user == o.user;
  }
};

// The current unix time in seconds.
uint64_t UnixNow();

// "READ+WRITE", ..., or "nothing".
std::string OpsText(uint8_t ops);
// One operation's name ("WRITE"); for a set, OpsText.
const char* OpName(uint8_t op);
// An ops set from "16", "0x10", "admin" or "read+write" (names in any case,
// joined by '+' or ','). False if empty, unknown, 0 or above 31.
bool ParseOps(std::string_view text, uint8_t* ops);

// A signed token. key must be kCapabilityKeySize bytes; the user is cut to
// kCapabilityMaxUser bytes; version is taken from cap.
std::string MintToken(std::string_view key, const Capability& cap);
// The fields of a token without checking its signature. InvalidArgument
// ("malformed capability: ...", "capability version N is not supported ...").
Status ParseToken(std::string_view token, Capability* out);
// ParseToken, then the signature (constant-time comparison) and the expiry
// (refused if now > expires + kCapabilityClockSkewS). Any refusal is
// InvalidArgument with a message for a person saying why.
Status VerifyToken(std::string_view key, std::string_view token, uint64_t now, Capability* out);
// True if a token expiring at `expires` is refused at `now`.
bool CapabilityExpired(uint64_t expires, uint64_t now);

// A key file's content: 64 hex digits and an optional newline -> 32 bytes.
Status ParseKeyText(std::string_view text, std::string* key);
// Reads a key file (ParseKeyText). *warning is set (else cleared) if the
// file is readable or writable by its group or others.
Status LoadKeyFile(const std::string& path, std::string* key, std::string* warning);

// The capabilities one connection holds.
class CapabilityTable {
 public:
  // Tokens a connection may hold at once; beyond that the expired ones, then
  // the one expiring first, make room.
  static constexpr size_t kMaxEntries = 4096;

  // A verified token: replaces the one held for its file id.
  void Add(const Capability& cap, uint64_t now);
  // True if a held token for file_id (or for file 0, every file) allows op
  // and has not expired at now (with the clock skew allowance). Otherwise
  // *message says which file and operation were needed, what the held
  // tokens allow and when they expire(d).
  bool Check(uint64_t file_id, uint8_t op, uint64_t now, std::string* message) const;

  size_t size() const { return entries_.size(); }
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    uint8_t ops = 0;
    uint64_t expires = 0;
    std::string user;
  };
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace st

#endif  // ST_CORE_CAPABILITY_H_
