#include "capability.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "coding.h"
#include "protocol.h"

namespace st {
namespace {

struct OpInfo {
  uint8_t bit;
  const char* name;
};
constexpr OpInfo kOps[] = {{kOpRead, "READ"},
                           {kOpWrite, "WRITE"},
                           {kOpDelete, "DELETE"},
                           {kOpPeer, "PEER"},
                           {kOpAdmin, "ADMIN"}};

// HMAC-SHA256(key, domain || body).
void Mac(std::string_view key, std::string_view body, uint8_t out[kCapabilityMacSize]) {
  std::string msg;
  msg.reserve(sizeof(kCapabilityDomain) - 1 + body.size());
  msg.append(kCapabilityDomain, sizeof(kCapabilityDomain) - 1);
  msg.append(body.data(), body.size());
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
}

std::string FileText(uint64_t file_id) {
  char buf[64];
  if (file_id == 0) {
    std::snprintf(buf, sizeof(buf), "every file (file id 0)");
  } else {
    std::snprintf(buf, sizeof(buf), "file %016llx", static_cast<unsigned long long>(file_id));
  }
  return buf;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

uint64_t UnixNow() {
  std::time_t t = std::time(nullptr);
  return t < 0 ? 0 : static_cast<uint64_t>(t);
}

const char* OpName(uint8_t op) {
  for (const OpInfo& o : kOps) {
    if (o.bit == op) return o.name;
  }
  return "?";
}

std::string OpsText(uint8_t ops) {
  std::string out;
  for (const OpInfo& o : kOps) {
    if ((ops & o.bit) == 0) continue;
    if (!out.empty()) out += "+";
    out += o.name;
  }
  if ((ops & ~kOpAll) != 0) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%02x", ops & ~kOpAll);
    if (!out.empty()) out += "+";
    out += buf;
  }
  return out.empty() ? "nothing" : out;
}

bool ParseOps(std::string_view text, uint8_t* ops) {
  if (text.empty()) return false;
  if (text[0] >= '0' && text[0] <= '9') {
    unsigned v = 0;
    size_t i = 0;
    int base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
      base = 16;
      i = 2;
    }
    for (; i < text.size(); ++i) {
      int d = HexDigit(text[i]);
      if (d < 0 || d >= base) return false;
      v = v * base + static_cast<unsigned>(d);
      if (v > kOpAll) return false;
    }
    if (v == 0) return false;
    *ops = static_cast<uint8_t>(v);
    return true;
  }
  uint8_t v = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of("+,", start);
    if (end == std::string_view::npos) end = text.size();
    std::string word = Lower(text.substr(start, end - start));
    bool found = false;
    for (const OpInfo& o : kOps) {
      if (word == Lower(o.name)) {
        v |= o.bit;
        found = true;
      }
    }
    if (!found) return false;
    start = end + 1;
  }
  *ops = v;
  return v != 0;
}

std::string MintToken(std::string_view key, const Capability& cap) {
  std::string_view user(cap.user);
  if (user.size() > kCapabilityMaxUser) user = user.substr(0, kCapabilityMaxUser);
  std::string t;
  t.reserve(kCapabilityMinSize + user.size());
  PutFixed8(&t, cap.version);
  PutFixed8(&t, cap.ops);
  PutFixed64(&t, cap.file_id);
  PutFixed64(&t, cap.expires);
  PutStr16(&t, user);
  uint8_t mac[kCapabilityMacSize];
  Mac(key, t, mac);
  t.append(reinterpret_cast<const char*>(mac), sizeof(mac));
  return t;
}

Status ParseToken(std::string_view token, Capability* out) {
  if (token.empty()) return Status::InvalidArgument("malformed capability: an empty token");
  uint8_t version = static_cast<uint8_t>(token[0]);
  if (version != kCapabilityVersion) {
    return Status::InvalidArgument("capability version " + std::to_string(version) +
                                   " is not supported (this peer knows version 1)");
  }
  if (token.size() < kCapabilityMinSize) {
    return Status::InvalidArgument("malformed capability: " + std::to_string(token.size()) +
                                   " bytes, less than the " + std::to_string(kCapabilityMinSize) +
                                   " of the shortest token");
  }
  Reader r(token.substr(0, token.size() - kCapabilityMacSize));
  Capability c;
  uint16_t user_len = 0;
  if (!r.U8(&c.version) || !r.U8(&c.ops) || !r.U64(&c.file_id) || !r.U64(&c.expires) ||
      !r.U16(&user_len)) {
    return Status::InvalidArgument("malformed capability: shorter than its fields");
  }
  if (user_len > kCapabilityMaxUser) {
    return Status::InvalidArgument("malformed capability: a user of " + std::to_string(user_len) +
                                   " bytes (at most " + std::to_string(kCapabilityMaxUser) + ")");
  }
  if (token.size() != kCapabilityMinSize + user_len) {
    return Status::InvalidArgument("malformed capability: " + std::to_string(token.size()) +
                                   " bytes where its user length makes " +
                                   std::to_string(kCapabilityMinSize + user_len));
  }
  std::string_view rest = r.Rest();
  c.user.assign(rest.data(), rest.size());
  *out = std::move(c);
  return Status::OK();
}

bool CapabilityExpired(uint64_t expires, uint64_t now) {
  return now > expires && now - expires > kCapabilityClockSkewS;
}

Status VerifyToken(std::string_view key, std::string_view token, uint64_t now, Capability* out) {
  Capability c;
  Status s = ParseToken(token, &c);
  if (!s.ok()) return s;
  uint8_t mac[kCapabilityMacSize];
  Mac(key, token.substr(0, token.size() - kCapabilityMacSize), mac);
  if (CRYPTO_memcmp(mac, token.data() + token.size() - kCapabilityMacSize, sizeof(mac)) != 0) {
    return Status::InvalidArgument(
        "capability has a bad signature (forged, or signed with another key than this peer's "
        "--key-file)");
  }
  if (CapabilityExpired(c.expires, now)) {
    return Status::InvalidArgument("capability (" + OpsText(c.ops) + " on " + FileText(c.file_id) +
                                   ", user '" + Printable(c.user, 64) + "') expired at " +
                                   std::to_string(c.expires) + " (unix s; now " +
                                   std::to_string(now) + " on this peer, " +
                                   std::to_string(kCapabilityClockSkewS) +
                                   " s of clock skew allowed): get a fresh one");
  }
  *out = std::move(c);
  return Status::OK();
}

Status ParseKeyText(std::string_view text, std::string* key) {
  std::string_view t = text;
  if (!t.empty() && t.back() == '\n') t.remove_suffix(1);
  const char* how = "64 hex digits (32 bytes) and an optional newline";
  if (t.size() != 2 * kCapabilityKeySize) {
    return Status::InvalidArgument(std::string("a key must be ") + how + "; this one has " +
                                   std::to_string(text.size()) + " bytes");
  }
  std::string k;
  k.reserve(kCapabilityKeySize);
  for (size_t i = 0; i < t.size(); i += 2) {
    int hi = HexDigit(t[i]), lo = HexDigit(t[i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(std::string("a key must be ") + how +
                                     "; this one has a byte that is not a hex digit at offset " +
                                     std::to_string(hi < 0 ? i : i + 1));
    }
    k.push_back(static_cast<char>((hi << 4) | lo));
  }
  *key = std::move(k);
  return Status::OK();
}

Status LoadKeyFile(const std::string& path, std::string* key, std::string* warning) {
  warning->clear();
  const std::string make = "; make one with: python -m st_py.core.capability new-key PATH";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PosixError("cannot open the key file " + path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return PosixError("cannot stat the key file " + path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("the key file " + path + " is not a regular file" + make);
  }
  // 64 digits and a newline; anything much longer is not a key file.
  if (st.st_size > 256) {
    ::close(fd);
    return Status::InvalidArgument("key file " + path +
                                   ": a key must be 64 hex digits (32 bytes) and an optional "
                                   "newline; this one has " +
                                   std::to_string(st.st_size) + " bytes" + make);
  }
  char buf[256];
  size_t n = 0;
  while (n < sizeof(buf)) {
    ssize_t r = ::read(fd, buf + n, sizeof(buf) - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return PosixError("cannot read the key file " + path, e);
    }
    if (r == 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  Status s = ParseKeyText(std::string_view(buf, n), key);
  if (!s.ok()) return Status::InvalidArgument("key file " + path + ": " + s.message() + make);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[16];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    *warning = "the key file " + path + " has mode " + mode +
               ": its group or others may read or change it, and whoever reads it can forge "
               "capabilities; chmod 600 " +
               path;
  }
  return Status::OK();
}

void CapabilityTable::Add(const Capability& cap, uint64_t now) {
  auto it = entries_.find(cap.file_id);
  if (it == entries_.end() && entries_.size() >= kMaxEntries) {
    for (auto e = entries_.begin(); e != entries_.end();) {
      e = CapabilityExpired(e->second.expires, now) ? entries_.erase(e) : std::next(e);
    }
    if (entries_.size() >= kMaxEntries) {
      auto first = entries_.begin();
      for (auto e = entries_.begin(); e != entries_.end(); ++e) {
        if (e->second.expires < first->second.expires) first = e;
      }
      entries_.erase(first);
    }
  }
  Entry& e = entries_[cap.file_id];
  e.ops = cap.ops;
  e.expires = cap.expires;
  e.user = cap.user;
}

bool CapabilityTable::Check(uint64_t file_id, uint8_t op, uint64_t now,
                            std::string* message) const {
  const Entry* held[2] = {nullptr, nullptr};
  uint64_t held_id[2] = {file_id, 0};
  if (file_id != 0) {
    auto it = entries_.find(file_id);
    if (it != entries_.end()) held[0] = &it->second;
  }
  auto wild = entries_.find(0);
  if (wild != entries_.end()) held[1] = &wild->second;
  for (const Entry* e : held) {
    if (e != nullptr && (e->ops & op) != 0 && !CapabilityExpired(e->expires, now)) return true;
  }
  std::string m = FileText(file_id) + " needs a " + OpName(op) + " capability";
  if (held[0] == nullptr && held[1] == nullptr) {
    m += ", and this connection holds none for it: send AUTH with a token that allows " +
         std::string(OpName(op)) + " first";
  } else {
    bool first = true;
    for (int i = 0; i < 2; ++i) {
      const Entry* e = held[i];
      if (e == nullptr) continue;
      m += first ? ": " : "; ";
      first = false;
      m += "the token this connection holds for " + FileText(held_id[i]) + " (user '" +
           Printable(e->user, 64) + "') allows " + OpsText(e->ops);
      if (CapabilityExpired(e->expires, now)) {
        m += " but expired at " + std::to_string(e->expires) + " (unix s; now " +
             std::to_string(now) + ", " + std::to_string(kCapabilityClockSkewS) +
             " s of clock skew allowed)";
      } else {
        m += ", expires at " + std::to_string(e->expires) + " (unix s)";
      }
    }
    m += "; send AUTH with a fresh token that allows " + std::string(OpName(op));
  }
  *message = std::move(m);
  return false;
}

}  // namespace st
