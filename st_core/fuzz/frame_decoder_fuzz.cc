// libFuzzer target: the peer's frame decoder and every payload decoder of
// protocol.h, on arbitrary bytes (docs/security.md, "Fuzzing"), including
// the capability tokens AUTH carries (capability.h).
//
// The input is read two ways:
//   1. as a byte stream on a connection: ParsePrefix frame after frame (with
//      the default max_frame and with a small one), each complete frame's
//      payload going to every payload decoder;
//   2. as one payload, given to every payload decoder.
// Invariants checked besides "no crash, no sanitizer report":
//   - ParsePrefix judges a prefix the same way on every shorter read of it
//     (kNeedMore until it has the bytes it needs, then the final answer), and
//     a kOk header has 12 <= length <= max_frame;
//   - decoded string views lie inside the payload, and the fixed fields plus
//     the views add up to the payload's size;
//   - a payload that decodes re-encodes to exactly the same bytes (the
//     grammar has one encoding per value), except ERROR messages over 4000
//     bytes, which the encoder cuts;
//   - the chunking encoders (RING_SEGMENT payloads, LOCAL_LIST frames) split
//     a decoded list into frames that decode back to the same list, with
//     MORE on every frame but the last.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "capability.h"
#include "coding.h"
#include "fuzz_util.h"
#include "protocol.h"

namespace st {
namespace {

using fuzz::Within;

std::string_view PayloadOf(const std::string& frame) {
  return std::string_view(frame).substr(kFramePrefixSize);
}

// A whole frame produced by an encoder: its prefix parses and announces its size.
void CheckEncodedFrame(const std::string& frame, MsgType type) {
  FrameHeader h;
  ST_FUZZ_CHECK(ParsePrefix(reinterpret_cast<const uint8_t*>(frame.data()), frame.size(),
                            0xFFFFFFFFu, &h) == PrefixResult::kOk,
                "encoded frame of %zu bytes has a bad prefix", frame.size());
  ST_FUZZ_CHECK(h.frame_size() == frame.size(), "encoded frame says %zu bytes, has %zu",
                h.frame_size(), frame.size());
  ST_FUZZ_CHECK(h.type == static_cast<uint8_t>(type), "encoded frame of type 0x%02x, not 0x%02x",
                h.type, static_cast<unsigned>(type));
}

void CheckPut(std::string_view payload) {
  PutRequest req;
  if (!DecodePut(payload, &req).ok()) return;
  ST_FUZZ_CHECK(Within(req.name, payload) && Within(req.data, payload), "PUT views escape");
  ST_FUZZ_CHECK(8 + 1 + 4 + 2 + req.name.size() + req.data.size() == payload.size(),
                "PUT fields do not add up to the payload");
  std::string f = EncodePut(1, kFlagReplace, req);
  CheckEncodedFrame(f, MsgType::kPut);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "PUT does not re-encode to the same bytes");
}

void CheckName(std::string_view payload) {
  NameRequest req;
  if (!DecodeName(payload, &req).ok()) return;
  ST_FUZZ_CHECK(Within(req.name, payload), "GET/DELETE name escapes");
  ST_FUZZ_CHECK(8 + 2 + req.name.size() == payload.size(), "GET fields do not add up");
  std::string g = EncodeGet(2, req.file_id, req.name);
  std::string d = EncodeDelete(3, req.file_id, req.name);
  CheckEncodedFrame(g, MsgType::kGet);
  CheckEncodedFrame(d, MsgType::kDelete);
  ST_FUZZ_CHECK(PayloadOf(g) == payload && PayloadOf(d) == payload,
                "GET/DELETE does not re-encode to the same bytes");
}

void CheckDeleteFile(std::string_view payload) {
  uint64_t file_id = 0;
  if (!DecodeDeleteFile(payload, &file_id).ok()) return;
  std::string f = EncodeDeleteFile(4, file_id);
  CheckEncodedFrame(f, MsgType::kDeleteFile);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "DELETE_FILE does not re-encode");
  std::string ok = EncodeOkRemoved(4, file_id);
  ST_FUZZ_CHECK(PayloadOf(ok) == payload, "OK(removed) does not encode a u64");
}

// flags: 0 or AS_OF (a trailing as_of:u64, at most the generation unless it is 0).
void CheckGetLocal(std::string_view payload, uint16_t flags) {
  RingHeader ring;
  if (!DecodeGetLocal(payload, flags, &ring).ok()) return;
  size_t n = 8 + 8 + 2 + ring.file_name.size() + 2;
  for (const auto& p : ring.peers) n += 2 + p.size();
  if (flags & kFlagAsOf) n += 8;
  ST_FUZZ_CHECK(n == payload.size(), "GET_LOCAL fields do not add up (%zu vs %zu)", n,
                payload.size());
  ST_FUZZ_CHECK(ring.as_of.has_value() == ((flags & kFlagAsOf) != 0),
                "GET_LOCAL as_of without AS_OF or AS_OF without as_of");
  ST_FUZZ_CHECK(ring.generation == 0 || ring.read_generation() <= ring.generation,
                "GET_LOCAL as_of after its generation decodes");
  std::string f = EncodeGetLocal(5, ring);
  CheckEncodedFrame(f, MsgType::kGetLocal);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "GET_LOCAL does not re-encode");
  ST_FUZZ_CHECK(DecodeFixed16(reinterpret_cast<const uint8_t*>(f.data()) + 6) == flags,
                "GET_LOCAL re-encodes with other flags");
}

void CheckEmpty(std::string_view payload) {
  bool ping = DecodePing(payload).ok();
  bool scrub = DecodeScrub(payload).ok();
  ST_FUZZ_CHECK(ping == payload.empty() && scrub == payload.empty(),
                "PING/SCRUB accept a payload of %zu bytes", payload.size());
  if (payload.empty()) {
    ST_FUZZ_CHECK(PayloadOf(EncodePing(6)).empty() && PayloadOf(EncodeScrub(7)).empty(),
                  "PING/SCRUB encode a payload");
  }
}

void CheckRingSegment(std::string_view payload, uint16_t flags) {
  RingSegment seg;
  if (!DecodeRingSegment(payload, flags, &seg).ok()) return;
  const RingEntry* b = seg.entries.data();
  std::string p = EncodeRingSegmentPayload(seg.ring, seg.origin, b, b + seg.entries.size());
  ST_FUZZ_CHECK(p == payload, "RING_SEGMENT does not re-encode (%zu vs %zu bytes)", p.size(),
                payload.size());
  std::string f = EncodeRingSegment(8, kFlagMore, seg);
  CheckEncodedFrame(f, MsgType::kRingSegment);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "RING_SEGMENT frame does not re-encode");
  ST_FUZZ_CHECK(DecodeFixed16(reinterpret_cast<const uint8_t*>(f.data()) + 6) ==
                    (kFlagMore | flags),
                "RING_SEGMENT re-encodes with other flags");

  // Chunked: every chunk decodes to the same ring and origin, and the
  // entries come back in order.
  size_t chunk = 1 + payload.size() % 97;
  std::vector<std::string> parts =
      EncodeRingSegmentPayloads(seg.ring, seg.origin, seg.entries, chunk);
  ST_FUZZ_CHECK(!parts.empty(), "no RING_SEGMENT payload for %zu entries", seg.entries.size());
  std::vector<RingEntry> back;
  for (const std::string& part : parts) {
    RingSegment s;
    ST_FUZZ_CHECK(DecodeRingSegment(part, seg.ring.flags(), &s).ok(),
                  "a RING_SEGMENT chunk does not decode");
    ST_FUZZ_CHECK(s.origin == seg.origin && s.ring.file_id == seg.ring.file_id &&
                      s.ring.generation == seg.ring.generation && s.ring.as_of == seg.ring.as_of &&
                      s.ring.file_name == seg.ring.file_name && s.ring.peers == seg.ring.peers,
                  "a RING_SEGMENT chunk has another ring header");
    ST_FUZZ_CHECK(parts.size() == 1 || !s.entries.empty(), "an empty RING_SEGMENT chunk");
    back.insert(back.end(), s.entries.begin(), s.entries.end());
  }
  ST_FUZZ_CHECK(back == seg.entries, "RING_SEGMENT chunks lose or reorder entries");
}

void CheckData(std::string_view payload) {
  DataReply d;
  if (!DecodeData(payload, &d).ok()) return;
  ST_FUZZ_CHECK(Within(d.data, payload) && 5 + d.data.size() == payload.size(),
                "DATA view escapes or does not add up");
  std::string f = EncodeData(9, d.crc32c, d.copy_rank, d.data);
  CheckEncodedFrame(f, MsgType::kData);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "DATA does not re-encode");
  std::string hdr = EncodeDataHeader(9, d.crc32c, d.copy_rank, d.data.size());
  ST_FUZZ_CHECK(f.compare(0, hdr.size(), hdr) == 0, "DATA header differs from DATA frame");
}

void CheckLocalList(std::string_view payload) {
  std::vector<LocalListEntry> entries;
  if (!DecodeLocalList(payload, &entries).ok()) return;
  std::string f = EncodeLocalList(10, 0, entries);
  CheckEncodedFrame(f, MsgType::kLocalList);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "LOCAL_LIST does not re-encode");

  size_t chunk = 1 + payload.size() % 131;
  std::vector<std::string> frames = EncodeLocalListFrames(10, entries, chunk);
  ST_FUZZ_CHECK(!frames.empty(), "no LOCAL_LIST frame");
  std::vector<LocalListEntry> back;
  for (size_t i = 0; i < frames.size(); ++i) {
    CheckEncodedFrame(frames[i], MsgType::kLocalList);
    FrameHeader h;
    ParsePrefix(reinterpret_cast<const uint8_t*>(frames[i].data()), frames[i].size(), 0xFFFFFFFFu,
                &h);
    bool last = i + 1 == frames.size();
    ST_FUZZ_CHECK(h.flags == (last ? 0 : kFlagMore), "LOCAL_LIST frame %zu of %zu has flags %u", i,
                  frames.size(), static_cast<unsigned>(h.flags));
    ST_FUZZ_CHECK(h.seq == 10, "LOCAL_LIST frame with another seq");
    std::vector<LocalListEntry> part;
    ST_FUZZ_CHECK(DecodeLocalList(PayloadOf(frames[i]), &part).ok(),
                  "a LOCAL_LIST frame does not decode");
    ST_FUZZ_CHECK(frames.size() == 1 || !part.empty(), "an empty LOCAL_LIST frame in a chain");
    back.insert(back.end(), part.begin(), part.end());
  }
  ST_FUZZ_CHECK(back == entries, "LOCAL_LIST frames lose or reorder entries");
}

void CheckMeta(std::string_view payload) {
  ST_FUZZ_CHECK(DecodeListMeta(payload).ok() == payload.empty(),
                "LIST_META accepts a payload of %zu bytes", payload.size());
  GetMetaRequest g;
  if (DecodeGetMeta(payload, &g).ok()) {
    ST_FUZZ_CHECK(payload.size() == 20, "GET_META of %zu bytes decodes", payload.size());
    std::string f = EncodeGetMeta(11, g);
    CheckEncodedFrame(f, MsgType::kGetMeta);
    ST_FUZZ_CHECK(PayloadOf(f) == payload, "GET_META does not re-encode");
  }
  std::vector<MetaListEntry> entries;
  if (!DecodeMetaList(payload, &entries).ok()) return;
  std::string f = EncodeMetaList(12, 0, entries);
  CheckEncodedFrame(f, MsgType::kMetaList);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "META_LIST does not re-encode");
  size_t chunk = 1 + payload.size() % 131;
  std::vector<std::string> frames = EncodeMetaListFrames(12, entries, chunk);
  ST_FUZZ_CHECK(!frames.empty(), "no META_LIST frame");
  std::vector<MetaListEntry> back;
  for (size_t i = 0; i < frames.size(); ++i) {
    CheckEncodedFrame(frames[i], MsgType::kMetaList);
    FrameHeader h;
    ParsePrefix(reinterpret_cast<const uint8_t*>(frames[i].data()), frames[i].size(), 0xFFFFFFFFu,
                &h);
    ST_FUZZ_CHECK(h.flags == (i + 1 == frames.size() ? 0 : kFlagMore),
                  "META_LIST frame %zu of %zu has flags %u", i, frames.size(),
                  static_cast<unsigned>(h.flags));
    std::vector<MetaListEntry> part;
    ST_FUZZ_CHECK(DecodeMetaList(PayloadOf(frames[i]), &part).ok(),
                  "a META_LIST frame does not decode");
    back.insert(back.end(), part.begin(), part.end());
  }
  ST_FUZZ_CHECK(back == entries, "META_LIST frames lose or reorder entries");
}

void CheckError(std::string_view payload) {
  ErrorReply e;
  if (!DecodeError(payload, &e).ok()) return;
  size_t expect = 2 + 2 + e.message.size();
  bool canonical = e.message.size() <= 4000 && e.peers.size() <= kMaxErrorPeers;
  if (!e.peers.empty()) {
    expect += 2;
    for (const std::string& p : e.peers) {
      expect += 2 + p.size();
      canonical = canonical && p.size() <= 255;
    }
  }
  ST_FUZZ_CHECK(expect == payload.size(), "ERROR fields do not add up");
  ST_FUZZ_CHECK(ErrorCodeName(e.code) != nullptr, "no name for error code %u", e.code);
  std::string f = EncodeError(11, static_cast<ErrorCode>(e.code), e.message, e.peers);
  CheckEncodedFrame(f, MsgType::kError);
  ErrorReply back;
  ST_FUZZ_CHECK(DecodeError(PayloadOf(f), &back).ok(), "an encoded ERROR does not decode");
  if (canonical) {
    ST_FUZZ_CHECK(PayloadOf(f) == payload, "ERROR does not re-encode");
  } else if (e.message.size() <= 4000) {
    ST_FUZZ_CHECK(back.message == e.message, "an ERROR's message changed on re-encoding");
  } else {
    ST_FUZZ_CHECK(back.message == e.message.substr(0, 4000), "a long ERROR is not cut at 4000");
  }
}

void CheckScrubReply(std::string_view payload) {
  ScrubReply r;
  if (!DecodeScrubReply(payload, &r).ok()) {
    ST_FUZZ_CHECK(payload.size() != kScrubReplySize, "a 40-byte SCRUB reply is refused");
    return;
  }
  ST_FUZZ_CHECK(payload.size() == kScrubReplySize, "SCRUB reply of %zu bytes accepted",
                payload.size());
  std::string f = EncodeScrubReply(12, r);
  CheckEncodedFrame(f, MsgType::kOk);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "SCRUB reply does not re-encode");
}

// AUTH's payload is a capability token (capability.h): it parses only in
// its one canonical layout, only the right MAC verifies, and a verified
// token allows exactly its operations until it expires.
void CheckAuth(std::string_view payload) {
  std::string_view token;
  ST_FUZZ_CHECK(DecodeAuth(payload, &token).ok() && token == payload, "AUTH does not decode");
  std::string f = EncodeAuth(13, token);
  CheckEncodedFrame(f, MsgType::kAuth);
  ST_FUZZ_CHECK(PayloadOf(f) == payload, "AUTH does not re-encode");

  static const std::string kKey(kCapabilityKeySize, '\x5a');
  Capability cap;
  if (!ParseToken(payload, &cap).ok()) {
    Capability v;
    ST_FUZZ_CHECK(!VerifyToken(kKey, payload, 0, &v).ok(), "a token that does not parse verifies");
    return;
  }
  ST_FUZZ_CHECK(cap.version == kCapabilityVersion && cap.user.size() <= kCapabilityMaxUser &&
                    payload.size() == kCapabilityMinSize + cap.user.size(),
                "a token of %zu bytes parses with a user of %zu", payload.size(), cap.user.size());
  std::string minted = MintToken(kKey, cap);
  size_t body = payload.size() - kCapabilityMacSize;
  ST_FUZZ_CHECK(minted.size() == payload.size() && minted.compare(0, body, payload, 0, body) == 0,
                "a parsed token re-mints to other bytes");
  Capability back;
  ST_FUZZ_CHECK(VerifyToken(kKey, minted, cap.expires, &back).ok() && back == cap,
                "a freshly minted token does not verify");
  Capability v;
  ST_FUZZ_CHECK(VerifyToken(kKey, payload, cap.expires, &v).ok() == (minted == payload),
                "a token verifies without the right MAC (or with it, does not)");
  if (cap.expires <= UINT64_MAX - kCapabilityClockSkewS - 1) {
    uint64_t late = cap.expires + kCapabilityClockSkewS + 1;
    ST_FUZZ_CHECK(!VerifyToken(kKey, minted, late, &v).ok(), "an expired token verifies");
  }
  CapabilityTable table;
  table.Add(cap, cap.expires);
  for (uint8_t op = 1; op <= kOpAdmin; op = static_cast<uint8_t>(op << 1)) {
    std::string why;
    bool ok = table.Check(cap.file_id, op, cap.expires, &why);
    ST_FUZZ_CHECK(ok == ((cap.ops & op) != 0), "a token with ops %u %s op %u", cap.ops,
                  ok ? "allows" : "refuses", op);
    ST_FUZZ_CHECK(ok || !why.empty(), "a refusal without a message");
  }
  OpsText(cap.ops);
}

void CheckPrintable(std::string_view payload) {
  std::string p = Printable(payload, 64);
  for (unsigned char c : p) {
    ST_FUZZ_CHECK(c >= 0x20 && c < 0x7f, "Printable() let byte 0x%02x through", c);
  }
}

// Every decoder on one payload.
void CheckPayload(std::string_view payload) {
  CheckPut(payload);
  CheckName(payload);
  CheckDeleteFile(payload);
  CheckGetLocal(payload, 0);
  CheckGetLocal(payload, kFlagAsOf);
  CheckEmpty(payload);
  CheckRingSegment(payload, 0);
  CheckRingSegment(payload, kFlagAsOf);
  CheckData(payload);
  CheckLocalList(payload);
  CheckMeta(payload);
  CheckError(payload);
  CheckScrubReply(payload);
  CheckAuth(payload);
  CheckPrintable(payload);
}

// ParsePrefix on every shorter read of the same bytes agrees with the
// answer on all of them.
void CheckPrefixStable(const uint8_t* p, size_t n, uint32_t max_frame) {
  FrameHeader full;
  PrefixResult want = ParsePrefix(p, n, max_frame, &full);
  size_t limit = n < kFramePrefixSize ? n : kFramePrefixSize;
  for (size_t k = 0; k <= limit; ++k) {
    FrameHeader h;
    PrefixResult got = ParsePrefix(p, k, max_frame, &h);
    if (got == PrefixResult::kNeedMore) {
      ST_FUZZ_CHECK(k < kFramePrefixSize, "kNeedMore with %zu bytes", k);
      continue;
    }
    ST_FUZZ_CHECK(got == want, "prefix judged %d on %zu bytes, %d on %zu", static_cast<int>(got), k,
                  static_cast<int>(want), n);
  }
  if (want == PrefixResult::kOk) {
    ST_FUZZ_CHECK(full.length >= kHeaderSize && full.length <= max_frame, "kOk with length %u",
                  full.length);
    ST_FUZZ_CHECK(full.version == kProtocolVersion, "kOk with version %u", full.version);
    ST_FUZZ_CHECK(full.frame_size() == kLengthSize + full.length, "frame_size");
  }
}

// The input as a stream of frames, as Connection::ProcessFrames reads it.
void CheckStream(const uint8_t* p, size_t n, uint32_t max_frame) {
  size_t off = 0;
  while (off < n) {
    CheckPrefixStable(p + off, n - off, max_frame);
    FrameHeader h;
    if (ParsePrefix(p + off, n - off, max_frame, &h) != PrefixResult::kOk) return;
    if (n - off < h.frame_size()) return;  // a partial frame: wait for more
    MsgTypeName(h.type);
    std::string_view payload(reinterpret_cast<const char*>(p + off + kFramePrefixSize),
                             h.payload_size());
    CheckPayload(payload);
    off += h.frame_size();
  }
}

}  // namespace
}  // namespace st

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  st::CheckStream(data, size, st::kDefaultMaxFrame);
  st::CheckStream(data, size, 64);  // small frames: the FRAME_TOO_LARGE path
  st::CheckPayload(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
