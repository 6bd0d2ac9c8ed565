#include "protocol.h"

#include <algorithm>
#include <cstdio>

#include "coding.h"

namespace st {

const char* MsgTypeName(uint8_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kPut:
      return "PUT";
    case MsgType::kGet:
      return "GET";
    case MsgType::kDelete:
      return "DELETE";
    case MsgType::kDeleteFile:
      return "DELETE_FILE";
    case MsgType::kGetLocal:
      return "GET_LOCAL";
    case MsgType::kPing:
      return "PING";
    case MsgType::kScrub:
      return "SCRUB";
    case MsgType::kAuth:
      return "AUTH";
    case MsgType::kRingSegment:
      return "RING_SEGMENT";
    case MsgType::kPutChain:
      return "PUT_CHAIN";
    case MsgType::kListMeta:
      return "LIST_META";
    case MsgType::kGetMeta:
      return "GET_META";
    case MsgType::kMetaList:
      return "META_LIST";
    case MsgType::kOk:
      return "OK";
    case MsgType::kData:
      return "DATA";
    case MsgType::kLocalList:
      return "LOCAL_LIST";
    case MsgType::kError:
      return "ERROR";
  }
  return nullptr;
}

const char* ErrorCodeName(uint16_t code) {
  static const char* const kNames[] = {
      "",          "BAD_FRAME",    "FRAME_TOO_LARGE",  "UNKNOWN_TYPE",
      "BAD_NAME",  "NOT_FOUND",    "EXISTS",           "CRC_MISMATCH",
      "IO_ERROR",  "NO_SPACE",     "PEER_UNREACHABLE", "TIMEOUT",
      "INVARIANT", "NO_NAMESPACE", "NOT_IN_RING",      "DENIED",
      "INTERNAL",  "BUSY",         "STALE_INFOFILE"};
  if (code >= 1 && code < sizeof(kNames) / sizeof(kNames[0])) return kNames[code];
  return "UNKNOWN_ERROR";
}

PrefixResult ParsePrefix(const uint8_t* p, size_t n, uint32_t max_frame, FrameHeader* h) {
  if (n < kLengthSize) return PrefixResult::kNeedMore;
  h->length = DecodeFixed32(p);
  if (h->length < kHeaderSize) return PrefixResult::kBadLength;
  if (h->length > max_frame) return PrefixResult::kTooLarge;
  if (n < kFramePrefixSize) return PrefixResult::kNeedMore;
  h->type = p[4];
  h->version = p[5];
  h->flags = DecodeFixed16(p + 6);
  h->seq = DecodeFixed64(p + 8);
  if (h->version != kProtocolVersion) return PrefixResult::kBadVersion;
  return PrefixResult::kOk;
}

namespace {

Status Short() { return Status::Corruption("payload shorter than its fields"); }

Status Finish(const Reader& r) {
  if (!r.done()) {
    return Status::Corruption(std::to_string(r.left()) + " trailing bytes after the payload");
  }
  return Status::OK();
}

Status ReadRingHeader(Reader* r, uint16_t flags, RingHeader* out) {
  std::string_view file_name;
  uint16_t n;
  if (!r->U64(&out->file_id) || !r->U64(&out->generation) || !r->Str16(&file_name) || !r->U16(&n)) {
    return Short();
  }
  out->file_name.assign(file_name);
  out->peers.clear();
  out->peers.reserve(n);
  for (uint16_t i = 0; i < n; ++i) {
    std::string_view peer;
    if (!r->Str16(&peer)) return Short();
    out->peers.emplace_back(peer);
  }
  out->as_of.reset();
  if (flags & kFlagAsOf) {
    uint64_t as_of;
    if (!r->U64(&as_of)) return Short();
    if (out->generation != 0 && as_of > out->generation) {
      return Status::Corruption("as_of " + std::to_string(as_of) +
                                " is after the ring's generation " +
                                std::to_string(out->generation));
    }
    out->as_of = as_of;
  }
  return Status::OK();
}

void PutRingHeader(std::string* dst, const RingHeader& ring) {
  PutFixed64(dst, ring.file_id);
  PutFixed64(dst, ring.generation);
  PutStr16(dst, ring.file_name);
  PutFixed16(dst, static_cast<uint16_t>(ring.peers.size()));
  for (const auto& p : ring.peers) PutStr16(dst, p);
  if (ring.as_of) PutFixed64(dst, *ring.as_of);
}

size_t RingHeaderSize(const RingHeader& ring) {
  size_t n = 8 + 8 + 2 + ring.file_name.size() + 2;
  for (const auto& p : ring.peers) n += 2 + p.size();
  return ring.as_of ? n + 8 : n;
}

}  // namespace

Status DecodePut(std::string_view payload, PutRequest* out) {
  Reader r(payload);
  if (!r.U64(&out->file_id) || !r.U8(&out->copy_rank) || !r.U32(&out->crc32c) ||
      !r.Str16(&out->name)) {
    return Short();
  }
  out->data = r.Rest();
  return Status::OK();
}

Status DecodePutChain(std::string_view payload, PutChainRequest* out) {
  Reader r(payload);
  uint8_t hops = 0;
  if (!r.U64(&out->file_id) || !r.U8(&out->copy_rank) || !r.U32(&out->crc32c) ||
      !r.Str16(&out->name) || !r.U8(&hops)) {
    return Short();
  }
  if (hops > kMaxChainHops) {
    return Status::Corruption("chain of " + std::to_string(hops) + " hops (at most " +
                              std::to_string(kMaxChainHops) + ")");
  }
  if (static_cast<unsigned>(out->copy_rank) + hops > 255) {
    return Status::Corruption("copy ranks of the chain exceed 255");
  }
  out->hops.clear();
  for (uint8_t i = 0; i < hops; ++i) {
    std::string_view hop;
    if (!r.Str16(&hop)) return Short();
    if (hop.empty()) return Status::Corruption("empty hop address");
    out->hops.push_back(hop);
  }
  out->data = r.Rest();
  return Status::OK();
}

Status DecodeName(std::string_view payload, NameRequest* out) {
  Reader r(payload);
  if (!r.U64(&out->file_id) || !r.Str16(&out->name)) return Short();
  return Finish(r);
}

Status DecodeDeleteFile(std::string_view payload, uint64_t* file_id) {
  Reader r(payload);
  if (!r.U64(file_id)) return Short();
  return Finish(r);
}

Status DecodeGetLocal(std::string_view payload, uint16_t flags, RingHeader* out) {
  Reader r(payload);
  Status s = ReadRingHeader(&r, flags, out);
  if (!s.ok()) return s;
  return Finish(r);
}

Status DecodePing(std::string_view payload) {
  Reader r(payload);
  return Finish(r);
}

Status DecodeScrub(std::string_view payload) {
  Reader r(payload);
  return Finish(r);
}

Status DecodeAuth(std::string_view payload, std::string_view* token) {
  *token = payload;
  return Status::OK();
}

Status DecodeRingSegment(std::string_view payload, uint16_t flags, RingSegment* out) {
  Reader r(payload);
  Status s = ReadRingHeader(&r, flags, &out->ring);
  if (!s.ok()) return s;
  uint32_t count;
  if (!r.U16(&out->origin) || !r.U32(&count)) return Short();
  out->entries.clear();
  // Each entry takes at least 3 bytes: do not trust count for the reservation.
  out->entries.reserve(std::min<size_t>(count, r.left() / 3));
  for (uint32_t i = 0; i < count; ++i) {
    RingEntry e;
    std::string_view name;
    if (!r.U8(&e.copy_rank) || !r.Str16(&name)) return Short();
    e.name.assign(name);
    out->entries.push_back(std::move(e));
  }
  return Finish(r);
}

Status DecodeData(std::string_view payload, DataReply* out) {
  Reader r(payload);
  if (!r.U32(&out->crc32c) || !r.U8(&out->copy_rank)) return Short();
  out->data = r.Rest();
  return Status::OK();
}

Status DecodeLocalList(std::string_view payload, std::vector<LocalListEntry>* out) {
  Reader r(payload);
  uint32_t count;
  if (!r.U32(&count)) return Short();
  out->clear();
  out->reserve(std::min<size_t>(count, r.left() / 13));
  for (uint32_t i = 0; i < count; ++i) {
    LocalListEntry e;
    std::string_view name, path;
    if (!r.U8(&e.copy_rank) || !r.U64(&e.size) || !r.Str16(&name) || !r.Str16(&path)) {
      return Short();
    }
    e.name.assign(name);
    e.path.assign(path);
    out->push_back(std::move(e));
  }
  return Finish(r);
}

Status DecodeError(std::string_view payload, ErrorReply* out) {
  Reader r(payload);
  std::string_view msg;
  if (!r.U16(&out->code) || !r.Str16(&msg)) return Short();
  out->message.assign(msg);
  out->peers.clear();
  if (r.left() > 0) {  // optional: the peers the error concerns
    uint16_t n = 0;
    if (!r.U16(&n)) return Short();
    if (n == 0) return Status::Corruption("an ERROR's peers field is present but empty");
    for (uint16_t i = 0; i < n; ++i) {
      std::string_view p;
      if (!r.Str16(&p)) return Short();
      out->peers.emplace_back(p);
    }
  }
  return Finish(r);
}

Status DecodeListMeta(std::string_view payload) {
  Reader r(payload);
  return Finish(r);
}

Status DecodeGetMeta(std::string_view payload, GetMetaRequest* out) {
  Reader r(payload);
  if (!r.U64(&out->file_id) || !r.U64(&out->offset) || !r.U32(&out->length)) return Short();
  return Finish(r);
}

Status DecodeMetaList(std::string_view payload, std::vector<MetaListEntry>* out) {
  Reader r(payload);
  uint32_t count;
  if (!r.U32(&count)) return Short();
  out->clear();
  // Each entry takes at least 30 bytes: do not trust count for the reservation.
  out->reserve(std::min<size_t>(count, r.left() / 30));
  for (uint32_t i = 0; i < count; ++i) {
    MetaListEntry e;
    std::string_view name;
    if (!r.U64(&e.file_id) || !r.U64(&e.generation) || !r.U64(&e.size) || !r.U32(&e.crc32c) ||
        !r.Str16(&name)) {
      return Short();
    }
    e.name.assign(name);
    out->push_back(std::move(e));
  }
  return Finish(r);
}

Status DecodeScrubReply(std::string_view payload, ScrubReply* out) {
  Reader r(payload);
  if (!r.U64(&out->files) || !r.U64(&out->removed_uncommitted) ||
      !r.U64(&out->removed_deleted_files) || !r.U64(&out->removed_tmp) || !r.U64(&out->kept)) {
    return Short();
  }
  return Finish(r);
}

void EncodeFramePrefix(uint8_t* dst, MsgType type, uint16_t flags, uint64_t seq,
                       size_t payload_size) {
  EncodeFixed32(dst, static_cast<uint32_t>(kHeaderSize + payload_size));
  dst[4] = static_cast<uint8_t>(type);
  dst[5] = kProtocolVersion;
  EncodeFixed16(dst + 6, flags);
  EncodeFixed64(dst + 8, seq);
}

namespace {

// Starts a frame whose payload will be appended by the caller; FinishFrame
// fixes up the length.
std::string StartFrame(MsgType type, uint16_t flags, uint64_t seq, size_t reserve) {
  std::string out;
  out.reserve(kFramePrefixSize + reserve);
  out.resize(kFramePrefixSize);
  EncodeFramePrefix(reinterpret_cast<uint8_t*>(&out[0]), type, flags, seq, 0);
  return out;
}

void FinishFrame(std::string* frame) {
  EncodeFixed32(reinterpret_cast<uint8_t*>(&(*frame)[0]),
                static_cast<uint32_t>(frame->size() - kLengthSize));
}

}  // namespace

std::string EncodeFrame(MsgType type, uint16_t flags, uint64_t seq, std::string_view payload) {
  std::string out = StartFrame(type, flags, seq, payload.size());
  out.append(payload.data(), payload.size());
  FinishFrame(&out);
  return out;
}

std::string EncodePut(uint64_t seq, uint16_t flags, const PutRequest& req) {
  std::string f = StartFrame(MsgType::kPut, flags, seq, 15 + req.name.size() + req.data.size());
  PutFixed64(&f, req.file_id);
  PutFixed8(&f, req.copy_rank);
  PutFixed32(&f, req.crc32c);
  PutStr16(&f, req.name);
  f.append(req.data.data(), req.data.size());
  FinishFrame(&f);
  return f;
}

std::string EncodePutChain(uint64_t seq, uint16_t flags, const PutChainRequest& req) {
  size_t size = 16 + req.name.size() + req.data.size();
  for (std::string_view h : req.hops) size += 2 + h.size();
  std::string f = StartFrame(MsgType::kPutChain, flags, seq, size);
  PutFixed64(&f, req.file_id);
  PutFixed8(&f, req.copy_rank);
  PutFixed32(&f, req.crc32c);
  PutStr16(&f, req.name);
  PutFixed8(&f, static_cast<uint8_t>(req.hops.size()));
  for (std::string_view h : req.hops) PutStr16(&f, h);
  f.append(req.data.data(), req.data.size());
  FinishFrame(&f);
  return f;
}

static std::string EncodeNamed(MsgType type, uint64_t seq, uint64_t file_id,
                               std::string_view name) {
  std::string f = StartFrame(type, 0, seq, 10 + name.size());
  PutFixed64(&f, file_id);
  PutStr16(&f, name);
  FinishFrame(&f);
  return f;
}

std::string EncodeGet(uint64_t seq, uint64_t file_id, std::string_view name) {
  return EncodeNamed(MsgType::kGet, seq, file_id, name);
}

std::string EncodeDelete(uint64_t seq, uint64_t file_id, std::string_view name) {
  return EncodeNamed(MsgType::kDelete, seq, file_id, name);
}

std::string EncodeDeleteFile(uint64_t seq, uint64_t file_id) {
  std::string f = StartFrame(MsgType::kDeleteFile, 0, seq, 8);
  PutFixed64(&f, file_id);
  FinishFrame(&f);
  return f;
}

std::string EncodeGetLocal(uint64_t seq, const RingHeader& ring) {
  std::string f = StartFrame(MsgType::kGetLocal, ring.flags(), seq, RingHeaderSize(ring));
  PutRingHeader(&f, ring);
  FinishFrame(&f);
  return f;
}

std::string EncodePing(uint64_t seq) { return EncodeFrame(MsgType::kPing, 0, seq, {}); }

std::string EncodeScrub(uint64_t seq) { return EncodeFrame(MsgType::kScrub, 0, seq, {}); }

std::string EncodeAuth(uint64_t seq, std::string_view token) {
  return EncodeFrame(MsgType::kAuth, 0, seq, token);
}

std::string EncodeListMeta(uint64_t seq) { return EncodeFrame(MsgType::kListMeta, 0, seq, {}); }

std::string EncodeGetMeta(uint64_t seq, const GetMetaRequest& req) {
  std::string f = StartFrame(MsgType::kGetMeta, 0, seq, 20);
  PutFixed64(&f, req.file_id);
  PutFixed64(&f, req.offset);
  PutFixed32(&f, req.length);
  FinishFrame(&f);
  return f;
}

std::string EncodeRingSegmentPayload(const RingHeader& ring, uint16_t origin,
                                     const RingEntry* begin, const RingEntry* end) {
  std::string p;
  size_t n = RingHeaderSize(ring) + 6;
  for (const RingEntry* e = begin; e != end; ++e) n += 3 + e->name.size();
  p.reserve(n);
  PutRingHeader(&p, ring);
  PutFixed16(&p, origin);
  PutFixed32(&p, static_cast<uint32_t>(end - begin));
  for (const RingEntry* e = begin; e != end; ++e) {
    PutFixed8(&p, e->copy_rank);
    PutStr16(&p, e->name);
  }
  return p;
}

std::string EncodeRingSegment(uint64_t seq, uint16_t flags, const RingSegment& seg) {
  const RingEntry* b = seg.entries.data();
  return EncodeFrame(MsgType::kRingSegment, flags | seg.ring.flags(), seq,
                     EncodeRingSegmentPayload(seg.ring, seg.origin, b, b + seg.entries.size()));
}

std::vector<std::string> EncodeRingSegmentPayloads(const RingHeader& ring, uint16_t origin,
                                                   const std::vector<RingEntry>& entries,
                                                   size_t chunk_bytes) {
  std::vector<std::string> out;
  const RingEntry* base = entries.data();
  size_t start = 0, bytes = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    bytes += 3 + entries[i].name.size();
    if (bytes >= chunk_bytes && i + 1 < entries.size()) {
      out.push_back(EncodeRingSegmentPayload(ring, origin, base + start, base + i + 1));
      start = i + 1;
      bytes = 0;
    }
  }
  out.push_back(EncodeRingSegmentPayload(ring, origin, base + start, base + entries.size()));
  return out;
}

std::string EncodeOk(uint64_t seq, std::string_view payload) {
  return EncodeFrame(MsgType::kOk, 0, seq, payload);
}

std::string EncodeOkRemoved(uint64_t seq, uint64_t removed) {
  std::string f = StartFrame(MsgType::kOk, 0, seq, 8);
  PutFixed64(&f, removed);
  FinishFrame(&f);
  return f;
}

std::string EncodeScrubReply(uint64_t seq, const ScrubReply& r) {
  std::string f = StartFrame(MsgType::kOk, 0, seq, kScrubReplySize);
  PutFixed64(&f, r.files);
  PutFixed64(&f, r.removed_uncommitted);
  PutFixed64(&f, r.removed_deleted_files);
  PutFixed64(&f, r.removed_tmp);
  PutFixed64(&f, r.kept);
  FinishFrame(&f);
  return f;
}

std::string EncodePingReply(uint64_t seq, std::string_view peer_id, std::string_view addr) {
  std::string f = StartFrame(MsgType::kOk, 0, seq, 4 + peer_id.size() + addr.size());
  PutStr16(&f, peer_id.substr(0, kMaxStr16));
  PutStr16(&f, addr.substr(0, kMaxStr16));
  FinishFrame(&f);
  return f;
}

std::string EncodeDataHeader(uint64_t seq, uint32_t crc, uint8_t copy_rank, uint64_t data_size) {
  std::string f(kFramePrefixSize, '\0');
  EncodeFramePrefix(reinterpret_cast<uint8_t*>(&f[0]), MsgType::kData, 0, seq, 5 + data_size);
  PutFixed32(&f, crc);
  PutFixed8(&f, copy_rank);
  return f;
}

std::string EncodeData(uint64_t seq, uint32_t crc, uint8_t copy_rank, std::string_view data) {
  std::string f = EncodeDataHeader(seq, crc, copy_rank, data.size());
  f.append(data.data(), data.size());
  return f;
}

static void PutLocalListEntry(std::string* f, const LocalListEntry& e) {
  PutFixed8(f, e.copy_rank);
  PutFixed64(f, e.size);
  PutStr16(f, std::string_view(e.name).substr(0, kMaxStr16));
  PutStr16(f, std::string_view(e.path).substr(0, kMaxStr16));
}

std::string EncodeLocalList(uint64_t seq, uint16_t flags, const std::vector<LocalListEntry>& e) {
  std::string f = StartFrame(MsgType::kLocalList, flags, seq, 4 + e.size() * 64);
  PutFixed32(&f, static_cast<uint32_t>(e.size()));
  for (const auto& x : e) PutLocalListEntry(&f, x);
  FinishFrame(&f);
  return f;
}

std::vector<std::string> EncodeLocalListFrames(uint64_t seq,
                                               const std::vector<LocalListEntry>& entries,
                                               size_t chunk_bytes) {
  std::vector<std::string> frames;
  size_t i = 0;
  do {
    std::string f =
        StartFrame(MsgType::kLocalList, 0, seq, std::min<size_t>(chunk_bytes, 1 << 20) + 64);
    PutFixed32(&f, 0);
    uint32_t count = 0;
    while (i < entries.size() && (count == 0 || f.size() < chunk_bytes)) {
      PutLocalListEntry(&f, entries[i]);
      ++i;
      ++count;
    }
    EncodeFixed32(reinterpret_cast<uint8_t*>(&f[kFramePrefixSize]), count);
    FinishFrame(&f);
    frames.push_back(std::move(f));
  } while (i < entries.size());
  for (size_t k = 0; k + 1 < frames.size(); ++k) {
    EncodeFixed16(reinterpret_cast<uint8_t*>(&frames[k][6]), kFlagMore);
  }
  return frames;
}

static void PutMetaListEntry(std::string* f, const MetaListEntry& e) {
  PutFixed64(f, e.file_id);
  PutFixed64(f, e.generation);
  PutFixed64(f, e.size);
  PutFixed32(f, e.crc32c);
  PutStr16(f, std::string_view(e.name).substr(0, kMaxStr16));
}

std::string EncodeMetaList(uint64_t seq, uint16_t flags, const std::vector<MetaListEntry>& e) {
  std::string f = StartFrame(MsgType::kMetaList, flags, seq, 4 + e.size() * 64);
  PutFixed32(&f, static_cast<uint32_t>(e.size()));
  for (const auto& x : e) PutMetaListEntry(&f, x);
  FinishFrame(&f);
  return f;
}

std::vector<std::string> EncodeMetaListFrames(uint64_t seq, const std::vector<MetaListEntry>& e,
                                              size_t chunk_bytes) {
  std::vector<std::string> frames;
  size_t i = 0;
  do {
    std::string f =
        StartFrame(MsgType::kMetaList, 0, seq, std::min<size_t>(chunk_bytes, 1 << 20) + 64);
    PutFixed32(&f, 0);
    uint32_t count = 0;
    while (i < e.size() && (count == 0 || f.size() < chunk_bytes)) {
      PutMetaListEntry(&f, e[i]);
      ++i;
      ++count;
    }
    EncodeFixed32(reinterpret_cast<uint8_t*>(&f[kFramePrefixSize]), count);
    FinishFrame(&f);
    frames.push_back(std::move(f));
  } while (i < e.size());
  for (size_t k = 0; k + 1 < frames.size(); ++k) {
    EncodeFixed16(reinterpret_cast<uint8_t*>(&frames[k][6]), kFlagMore);
  }
  return frames;
}

std::string EncodeError(uint64_t seq, ErrorCode code, std::string_view message,
                        const std::vector<std::string>& peers) {
  if (message.size() > 4000) message = message.substr(0, 4000);
  size_t n = std::min(peers.size(), kMaxErrorPeers);
  size_t len = 4 + message.size();
  if (n > 0) {
    len += 2;
    for (size_t i = 0; i < n; ++i) len += 2 + std::min<size_t>(peers[i].size(), 255);
  }
  std::string f = StartFrame(MsgType::kError, 0, seq, len);
  PutFixed16(&f, static_cast<uint16_t>(code));
  PutStr16(&f, message);
  if (n > 0) {
    PutFixed16(&f, static_cast<uint16_t>(n));
    for (size_t i = 0; i < n; ++i) PutStr16(&f, std::string_view(peers[i]).substr(0, 255));
  }
  FinishFrame(&f);
  return f;
}

std::string Printable(std::string_view s, size_t max_len) {
  std::string out;
  size_t n = std::min(s.size(), max_len);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

}  // namespace st
