// Decodes every vector of tests/vectors/wire.json and re-encodes it byte for
// byte; every bad frame yields its expected error.
#include "protocol.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "coding.h"
#include "crc32c.h"
#include "test_util.h"
#include "vectors.h"

namespace st {
namespace {

using nlohmann::json;
using test::FromHex;
using test::ToHex;

json LoadVectors() { return test::LoadVectors("wire.json"); }

std::string Hex(const json& j) { return FromHex(j.get<std::string>()); }

// A ring header's as_of is the vector's, present only with AS_OF.
void ExpectAsOf(const json& f, const RingHeader& ring) {
  if (f.contains("as_of")) {
    ASSERT_TRUE(ring.as_of.has_value());
    EXPECT_EQ(f["as_of"].get<uint64_t>(), *ring.as_of);
  } else {
    EXPECT_FALSE(ring.as_of.has_value());
  }
}

// Decodes one whole frame and re-encodes it from the decoded fields,
// checking the fields against the vector.
std::string DecodeAndReencode(const json& v) {
  std::string bytes = Hex(v["hex"]);
  FrameHeader h;
  EXPECT_EQ(PrefixResult::kOk, ParsePrefix(reinterpret_cast<const uint8_t*>(bytes.data()),
                                           bytes.size(), kDefaultMaxFrame, &h));
  EXPECT_EQ(bytes.size(), h.frame_size());
  EXPECT_EQ(v["seq"].get<uint64_t>(), h.seq);
  EXPECT_EQ(v["flags"].get<uint16_t>(), h.flags);
  EXPECT_STREQ(v["type"].get<std::string>().c_str(), MsgTypeName(h.type));
  std::string_view payload(bytes.data() + kFramePrefixSize, h.payload_size());
  const json& f = v["fields"];
  switch (static_cast<MsgType>(h.type)) {
    case MsgType::kPut: {
      PutRequest r;
      EXPECT_TRUE(DecodePut(payload, &r).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), r.file_id);
      EXPECT_EQ(f["copy_rank"].get<int>(), r.copy_rank);
      EXPECT_EQ(f["crc32c"].get<uint32_t>(), r.crc32c);
      EXPECT_EQ(Hex(f["name"]), r.name);
      EXPECT_EQ(Hex(f["data"]), r.data);
      EXPECT_EQ(crc32c::Value(r.data), r.crc32c);
      return EncodePut(h.seq, h.flags, r);
    }
    case MsgType::kPutChain: {
      PutChainRequest r;
      EXPECT_TRUE(DecodePutChain(payload, &r).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), r.file_id);
      EXPECT_EQ(f["copy_rank"].get<int>(), r.copy_rank);
      EXPECT_EQ(f["crc32c"].get<uint32_t>(), r.crc32c);
      EXPECT_EQ(Hex(f["name"]), r.name);
      std::vector<std::string> hops(r.hops.begin(), r.hops.end());
      EXPECT_EQ(f["hops"].get<std::vector<std::string>>(), hops);
      EXPECT_EQ(Hex(f["data"]), r.data);
      EXPECT_EQ(crc32c::Value(r.data), r.crc32c);
      return EncodePutChain(h.seq, h.flags, r);
    }
    case MsgType::kGet:
    case MsgType::kDelete: {
      NameRequest r;
      EXPECT_TRUE(DecodeName(payload, &r).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), r.file_id);
      EXPECT_EQ(Hex(f["name"]), r.name);
      return h.type == static_cast<uint8_t>(MsgType::kGet) ? EncodeGet(h.seq, r.file_id, r.name)
                                                           : EncodeDelete(h.seq, r.file_id, r.name);
    }
    case MsgType::kDeleteFile: {
      uint64_t file_id = 0;
      EXPECT_TRUE(DecodeDeleteFile(payload, &file_id).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), file_id);
      return EncodeDeleteFile(h.seq, file_id);
    }
    case MsgType::kGetLocal: {
      RingHeader r;
      EXPECT_TRUE(DecodeGetLocal(payload, h.flags, &r).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), r.file_id);
      EXPECT_EQ(f["generation"].get<uint64_t>(), r.generation);
      EXPECT_EQ(f["file_name"].get<std::string>(), r.file_name);
      EXPECT_EQ(f["peers"].get<std::vector<std::string>>(), r.peers);
      ExpectAsOf(f, r);
      return EncodeGetLocal(h.seq, r);
    }
    case MsgType::kPing:
      EXPECT_TRUE(DecodePing(payload).ok());
      return EncodePing(h.seq);
    case MsgType::kScrub:
      EXPECT_TRUE(DecodeScrub(payload).ok());
      return EncodeScrub(h.seq);
    case MsgType::kListMeta:
      EXPECT_TRUE(DecodeListMeta(payload).ok());
      return EncodeListMeta(h.seq);
    case MsgType::kGetMeta: {
      GetMetaRequest r;
      EXPECT_TRUE(DecodeGetMeta(payload, &r).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), r.file_id);
      EXPECT_EQ(f["offset"].get<uint64_t>(), r.offset);
      EXPECT_EQ(f["length"].get<uint32_t>(), r.length);
      return EncodeGetMeta(h.seq, r);
    }
    case MsgType::kMetaList: {
      std::vector<MetaListEntry> e;
      EXPECT_TRUE(DecodeMetaList(payload, &e).ok());
      EXPECT_EQ(f["entries"].size(), e.size());
      for (size_t i = 0; i < e.size() && i < f["entries"].size(); ++i) {
        EXPECT_EQ(f["entries"][i][0].get<uint64_t>(), e[i].file_id);
        EXPECT_EQ(f["entries"][i][1].get<uint64_t>(), e[i].generation);
        EXPECT_EQ(f["entries"][i][2].get<uint64_t>(), e[i].size);
        EXPECT_EQ(f["entries"][i][3].get<uint32_t>(), e[i].crc32c);
        EXPECT_EQ(Hex(f["entries"][i][4]), e[i].name);
      }
      return EncodeMetaList(h.seq, h.flags, e);
    }
    case MsgType::kAuth: {
      std::string_view token;
      EXPECT_TRUE(DecodeAuth(payload, &token).ok());
      EXPECT_EQ(Hex(f["token"]), token);
      return EncodeAuth(h.seq, token);
    }
    case MsgType::kRingSegment: {
      RingSegment s;
      EXPECT_TRUE(DecodeRingSegment(payload, h.flags, &s).ok());
      EXPECT_EQ(f["file_id"].get<uint64_t>(), s.ring.file_id);
      EXPECT_EQ(f["generation"].get<uint64_t>(), s.ring.generation);
      EXPECT_EQ(f["file_name"].get<std::string>(), s.ring.file_name);
      EXPECT_EQ(f["peers"].get<std::vector<std::string>>(), s.ring.peers);
      ExpectAsOf(f, s.ring);
      EXPECT_EQ(f["origin"].get<int>(), s.origin);
      EXPECT_EQ(f["entries"].size(), s.entries.size());
      for (size_t i = 0; i < s.entries.size() && i < f["entries"].size(); ++i) {
        EXPECT_EQ(f["entries"][i][0].get<int>(), s.entries[i].copy_rank);
        EXPECT_EQ(Hex(f["entries"][i][1]), s.entries[i].name);
      }
      return EncodeRingSegment(h.seq, h.flags & kFlagMore, s);  // AS_OF comes from the ring
    }
    case MsgType::kOk: {
      EXPECT_EQ(Hex(f["payload"]), payload);
      if (payload.size() == 8) {
        uint64_t removed = 0;
        EXPECT_TRUE(DecodeDeleteFile(payload, &removed).ok());  // removed:u64
        return EncodeOkRemoved(h.seq, removed);
      }
      if (payload.size() == kScrubReplySize) {
        // The OK reply to SCRUB; the vector names the counts in its "scrub" member.
        ScrubReply r;
        EXPECT_TRUE(DecodeScrubReply(payload, &r).ok());
        if (v.contains("scrub")) {
          const json& c = v["scrub"];
          EXPECT_EQ(c["files"].get<uint64_t>(), r.files);
          EXPECT_EQ(c["removed_uncommitted"].get<uint64_t>(), r.removed_uncommitted);
          EXPECT_EQ(c["removed_deleted_files"].get<uint64_t>(), r.removed_deleted_files);
          EXPECT_EQ(c["removed_tmp"].get<uint64_t>(), r.removed_tmp);
          EXPECT_EQ(c["kept"].get<uint64_t>(), r.kept);
        }
        return EncodeScrubReply(h.seq, r);
      }
      return EncodeOk(h.seq, payload);
    }
    case MsgType::kData: {
      DataReply r;
      EXPECT_TRUE(DecodeData(payload, &r).ok());
      EXPECT_EQ(f["crc32c"].get<uint32_t>(), r.crc32c);
      EXPECT_EQ(f["copy_rank"].get<int>(), r.copy_rank);
      EXPECT_EQ(Hex(f["data"]), r.data);
      // Header + body as the peer sends them (the body goes by sendfile).
      std::string split = EncodeDataHeader(h.seq, r.crc32c, r.copy_rank, r.data.size());
      split.append(r.data.data(), r.data.size());
      EXPECT_EQ(ToHex(bytes), ToHex(split));
      return EncodeData(h.seq, r.crc32c, r.copy_rank, r.data);
    }
    case MsgType::kLocalList: {
      std::vector<LocalListEntry> e;
      EXPECT_TRUE(DecodeLocalList(payload, &e).ok());
      EXPECT_EQ(f["entries"].size(), e.size());
      for (size_t i = 0; i < e.size() && i < f["entries"].size(); ++i) {
        EXPECT_EQ(f["entries"][i][0].get<int>(), e[i].copy_rank);
        EXPECT_EQ(f["entries"][i][1].get<uint64_t>(), e[i].size);
        EXPECT_EQ(Hex(f["entries"][i][2]), e[i].name);
        EXPECT_EQ(Hex(f["entries"][i][3]), e[i].path);
      }
      return EncodeLocalList(h.seq, h.flags, e);
    }
    case MsgType::kError: {
      ErrorReply r;
      EXPECT_TRUE(DecodeError(payload, &r).ok());
      EXPECT_EQ(f["code"].get<int>(), r.code);
      EXPECT_EQ(f["message"].get<std::string>(), r.message);
      std::vector<std::string> peers;
      if (f.contains("peers")) peers = f["peers"].get<std::vector<std::string>>();
      EXPECT_EQ(peers, r.peers);
      return EncodeError(h.seq, static_cast<ErrorCode>(r.code), r.message, r.peers);
    }
  }
  ADD_FAILURE() << "unexpected type " << int(h.type);
  return "";
}

TEST(Protocol, FrameVectorsRoundTrip) {
  json vectors = LoadVectors();
  ASSERT_GT(vectors["frames"].size(), 10u);
  for (const json& v : vectors["frames"]) {
    SCOPED_TRACE(v["name"].get<std::string>());
    EXPECT_EQ(v["hex"].get<std::string>(), ToHex(DecodeAndReencode(v)));
  }
}

// What a peer answers to a frame, as the connection and server do it:
// the error name, or "" if the frame is accepted.
std::string Classify(const std::string& bytes) {
  FrameHeader h;
  switch (ParsePrefix(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                      kDefaultMaxFrame, &h)) {
    case PrefixResult::kNeedMore:
      return "NEED_MORE";
    case PrefixResult::kBadLength:
    case PrefixResult::kBadVersion:
      return "BAD_FRAME";
    case PrefixResult::kTooLarge:
      return "FRAME_TOO_LARGE";
    case PrefixResult::kOk:
      break;
  }
  if (bytes.size() < h.frame_size()) return "NEED_MORE";
  std::string_view p(bytes.data() + kFramePrefixSize, h.payload_size());
  Status s;
  switch (static_cast<MsgType>(h.type)) {
    case MsgType::kPut: {
      PutRequest r;
      s = DecodePut(p, &r);
      break;
    }
    case MsgType::kPutChain: {
      PutChainRequest r;
      s = DecodePutChain(p, &r);
      break;
    }
    case MsgType::kGet:
    case MsgType::kDelete: {
      NameRequest r;
      s = DecodeName(p, &r);
      break;
    }
    case MsgType::kDeleteFile: {
      uint64_t id;
      s = DecodeDeleteFile(p, &id);
      break;
    }
    case MsgType::kGetLocal: {
      RingHeader r;
      s = DecodeGetLocal(p, h.flags, &r);
      break;
    }
    case MsgType::kPing:
      s = DecodePing(p);
      break;
    case MsgType::kScrub:
      s = DecodeScrub(p);
      break;
    case MsgType::kAuth: {
      std::string_view token;
      s = DecodeAuth(p, &token);
      break;
    }
    case MsgType::kRingSegment: {
      RingSegment r;
      s = DecodeRingSegment(p, h.flags, &r);
      break;
    }
    case MsgType::kError: {  // a reply, as a client decodes it
      ErrorReply r;
      s = DecodeError(p, &r);
      break;
    }
    default:
      return "UNKNOWN_TYPE";
  }
  return s.ok() ? "" : "BAD_FRAME";
}

TEST(Protocol, BadFrameVectors) {
  json vectors = LoadVectors();
  ASSERT_GT(vectors["bad_frames"].size(), 5u);
  for (const json& v : vectors["bad_frames"]) {
    SCOPED_TRACE(v["name"].get<std::string>());
    EXPECT_EQ(v["error"].get<std::string>(), Classify(Hex(v["hex"])));
  }
}

TEST(Protocol, CrcVectors) {
  json vectors = LoadVectors();
  for (const json& v : vectors["crc32c"]) {
    std::string data = Hex(v["hex"]);
    EXPECT_EQ(v["crc32c"].get<uint32_t>(), crc32c::Value(data));
  }
}

TEST(Protocol, PrefixNeedsMoreUntilComplete) {
  std::string f = EncodePing(5);
  FrameHeader h;
  for (size_t n = 0; n < kLengthSize; ++n) {
    EXPECT_EQ(PrefixResult::kNeedMore,
              ParsePrefix(reinterpret_cast<const uint8_t*>(f.data()), n, kDefaultMaxFrame, &h));
  }
  EXPECT_EQ(PrefixResult::kNeedMore,
            ParsePrefix(reinterpret_cast<const uint8_t*>(f.data()), 15, kDefaultMaxFrame, &h));
  EXPECT_EQ(PrefixResult::kOk,
            ParsePrefix(reinterpret_cast<const uint8_t*>(f.data()), 16, kDefaultMaxFrame, &h));
  EXPECT_EQ(5u, h.seq);
  // The max frame is a setting.
  EXPECT_EQ(PrefixResult::kTooLarge,
            ParsePrefix(reinterpret_cast<const uint8_t*>(f.data()), 16, 11 + 0, &h));
}

TEST(Protocol, LocalListChunksCarryMoreOnAllButLast) {
  std::vector<LocalListEntry> entries;
  for (int i = 0; i < 5000; ++i) {
    entries.push_back(LocalListEntry{static_cast<uint8_t>(i % 3), static_cast<uint64_t>(i),
                                     "record-" + std::to_string(i),
                                     "/data/files/0000000000000001/00/record-" +
                                         std::to_string(i)});
  }
  std::vector<std::string> frames = EncodeLocalListFrames(9, entries, 64 * 1024);
  ASSERT_GT(frames.size(), 3u);
  std::vector<LocalListEntry> back;
  for (size_t i = 0; i < frames.size(); ++i) {
    FrameHeader h;
    ASSERT_EQ(PrefixResult::kOk, ParsePrefix(reinterpret_cast<const uint8_t*>(frames[i].data()),
                                             frames[i].size(), kDefaultMaxFrame, &h));
    EXPECT_EQ(9u, h.seq);
    EXPECT_EQ(i + 1 < frames.size() ? kFlagMore : 0, h.flags);
    EXPECT_LE(frames[i].size(), 64u * 1024 + 300);
    std::vector<LocalListEntry> part;
    ASSERT_TRUE(DecodeLocalList(std::string_view(frames[i]).substr(kFramePrefixSize), &part).ok());
    back.insert(back.end(), part.begin(), part.end());
  }
  EXPECT_EQ(entries, back);
  // An empty list is one frame without MORE.
  frames = EncodeLocalListFrames(3, {}, 1 << 20);
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(ToHex(EncodeLocalList(3, 0, {})), ToHex(frames[0]));
}

TEST(Protocol, MetaListFramesChunk) {
  std::vector<MetaListEntry> entries;
  for (uint64_t i = 0; i < 5000; ++i) {
    entries.push_back({i + 1, i * 3, i * 4096, static_cast<uint32_t>(i * 7),
                       "/exp/run-" + std::to_string(i)});
  }
  std::vector<std::string> frames = EncodeMetaListFrames(9, entries, 16 * 1024);
  ASSERT_GT(frames.size(), 3u);
  std::vector<MetaListEntry> all;
  for (size_t i = 0; i < frames.size(); ++i) {
    FrameHeader h;
    ASSERT_EQ(PrefixResult::kOk, ParsePrefix(reinterpret_cast<const uint8_t*>(frames[i].data()),
                                             frames[i].size(), kDefaultMaxFrame, &h));
    EXPECT_EQ(static_cast<uint8_t>(MsgType::kMetaList), h.type);
    EXPECT_EQ(i + 1 < frames.size() ? kFlagMore : 0, h.flags);
    std::vector<MetaListEntry> part;
    ASSERT_TRUE(DecodeMetaList(std::string_view(frames[i]).substr(kFramePrefixSize), &part).ok());
    all.insert(all.end(), part.begin(), part.end());
  }
  EXPECT_EQ(entries, all);
  frames = EncodeMetaListFrames(3, {}, 1 << 20);
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(ToHex(EncodeMetaList(3, 0, {})), ToHex(frames[0]));
  // Truncated and trailing bytes are refused.
  std::string one = EncodeMetaList(4, 0, {entries[1]});
  std::string_view p = std::string_view(one).substr(kFramePrefixSize);
  std::vector<MetaListEntry> out;
  EXPECT_FALSE(DecodeMetaList(p.substr(0, p.size() - 1), &out).ok());
  EXPECT_FALSE(DecodeMetaList(std::string(p) + "x", &out).ok());
  GetMetaRequest g;
  EXPECT_FALSE(DecodeGetMeta(std::string(19, '\0'), &g).ok());
  EXPECT_FALSE(DecodeGetMeta(std::string(21, '\0'), &g).ok());
  EXPECT_FALSE(DecodeListMeta("x").ok());
}

TEST(Protocol, RingSegmentChunks) {
  RingHeader ring{7, 2, "/a/b", {"h:1", "h:2"}};
  std::vector<RingEntry> entries;
  for (int i = 0; i < 3000; ++i) entries.push_back(RingEntry{1, "n" + std::to_string(i)});
  auto payloads = EncodeRingSegmentPayloads(ring, 1, entries, 4096);
  ASSERT_GT(payloads.size(), 2u);
  std::vector<RingEntry> back;
  for (const auto& p : payloads) {
    RingSegment s;
    ASSERT_TRUE(DecodeRingSegment(p, 0, &s).ok());
    EXPECT_EQ(1, s.origin);
    EXPECT_EQ(ring.peers, s.ring.peers);
    back.insert(back.end(), s.entries.begin(), s.entries.end());
  }
  EXPECT_EQ(entries, back);
  EXPECT_EQ(1u, EncodeRingSegmentPayloads(ring, 0, {}, 4096).size());
}

// GET_LOCAL and RING_SEGMENT as of a past generation (docs/wire-protocol.md):
// AS_OF adds as_of:u64 after the peers; frames without it are unchanged.
TEST(Protocol, AsOfRoundTrips) {
  RingHeader plain{7, 9, "/a/b", {"h:1", "h:2"}};
  RingHeader past = plain;
  past.as_of = 3;
  std::string f = EncodeGetLocal(4, plain), g = EncodeGetLocal(4, past);
  EXPECT_EQ(0, DecodeFixed16(reinterpret_cast<const uint8_t*>(f.data()) + 6));
  EXPECT_EQ(kFlagAsOf, DecodeFixed16(reinterpret_cast<const uint8_t*>(g.data()) + 6));
  EXPECT_EQ(f.size() + 8, g.size());
  EXPECT_EQ(f.substr(kFramePrefixSize), g.substr(kFramePrefixSize, f.size() - kFramePrefixSize));
  RingHeader back;
  ASSERT_TRUE(DecodeGetLocal(std::string_view(g).substr(kFramePrefixSize), kFlagAsOf, &back).ok());
  EXPECT_EQ(std::optional<uint64_t>(3), back.as_of);
  EXPECT_EQ(3u, back.read_generation());
  ASSERT_TRUE(DecodeGetLocal(std::string_view(f).substr(kFramePrefixSize), 0, &back).ok());
  EXPECT_FALSE(back.as_of.has_value());
  EXPECT_EQ(9u, back.read_generation());
  // The flag without the field, the field without the flag: BAD_FRAME.
  EXPECT_FALSE(DecodeGetLocal(std::string_view(f).substr(kFramePrefixSize), kFlagAsOf, &back).ok());
  EXPECT_FALSE(DecodeGetLocal(std::string_view(g).substr(kFramePrefixSize), 0, &back).ok());
  // as_of after the generation is refused, except at generation 0 (the latest state).
  past.as_of = 10;
  std::string after = EncodeGetLocal(4, past);
  Status s = DecodeGetLocal(std::string_view(after).substr(kFramePrefixSize), kFlagAsOf, &back);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(std::string::npos, s.ToString().find("after the ring's generation")) << s.ToString();
  RingHeader latest{7, 0, "/a/b", {"h:1"}, 10};
  std::string l = EncodeGetLocal(4, latest);
  ASSERT_TRUE(DecodeGetLocal(std::string_view(l).substr(kFramePrefixSize), kFlagAsOf, &back).ok());
  EXPECT_EQ(10u, back.read_generation());

  // RING_SEGMENT: every chunk carries as_of; the frame's flags add AS_OF.
  past.as_of = 3;
  std::vector<RingEntry> entries;
  for (int i = 0; i < 500; ++i) entries.push_back(RingEntry{0, "n" + std::to_string(i)});
  auto payloads = EncodeRingSegmentPayloads(past, 1, entries, 512);
  ASSERT_GT(payloads.size(), 2u);
  std::vector<RingEntry> got;
  for (const auto& p : payloads) {
    RingSegment seg;
    ASSERT_TRUE(DecodeRingSegment(p, past.flags(), &seg).ok());
    EXPECT_EQ(std::optional<uint64_t>(3), seg.ring.as_of);
    got.insert(got.end(), seg.entries.begin(), seg.entries.end());
    RingSegment without;
    EXPECT_FALSE(DecodeRingSegment(p, 0, &without).ok());
  }
  EXPECT_EQ(entries, got);
  RingSegment seg;
  seg.ring = past;
  seg.origin = 1;
  seg.entries = entries;
  std::string rf = EncodeRingSegment(5, kFlagMore, seg);
  EXPECT_EQ(kFlagMore | kFlagAsOf, DecodeFixed16(reinterpret_cast<const uint8_t*>(rf.data()) + 6));
}

TEST(Protocol, DecodersRejectShortAndTrailing) {
  PutRequest put;
  EXPECT_FALSE(DecodePut(std::string(14, '\0'), &put).ok());
  EXPECT_TRUE(DecodePut(std::string(15, '\0'), &put).ok());  // empty name: BAD_NAME later
  EXPECT_FALSE(DecodePing("x").ok());
  RingSegment seg;
  std::string p = EncodeRingSegmentPayload(RingHeader{1, 1, "/f", {"a:1"}}, 0, nullptr, nullptr);
  EXPECT_TRUE(DecodeRingSegment(p, 0, &seg).ok());
  EXPECT_FALSE(DecodeRingSegment(p + "x", 0, &seg).ok());
  p[p.size() - 4] = 1;  // count 1, no entry
  EXPECT_FALSE(DecodeRingSegment(p, 0, &seg).ok());
  ErrorReply e;
  EXPECT_FALSE(DecodeError(std::string("\x05\x00\x09\x00"
                                       "abc",
                                       7),
                           &e)
                   .ok());
  EXPECT_FALSE(DecodeScrub("x").ok());
  ScrubReply sr;
  EXPECT_FALSE(DecodeScrubReply(std::string(39, '\0'), &sr).ok());
  EXPECT_FALSE(DecodeScrubReply(std::string(41, '\0'), &sr).ok());
}

TEST(Protocol, ScrubReplyRoundTrip) {
  ScrubReply r{3, 1ull << 40, 7, 0, 0xFFFFFFFFFFFFFFFFull};
  std::string f = EncodeScrubReply(21, r);
  ASSERT_EQ(kFramePrefixSize + kScrubReplySize, f.size());
  FrameHeader h;
  ASSERT_EQ(PrefixResult::kOk, ParsePrefix(reinterpret_cast<const uint8_t*>(f.data()), f.size(),
                                           kDefaultMaxFrame, &h));
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), h.type);
  EXPECT_EQ(21u, h.seq);
  ScrubReply back;
  ASSERT_TRUE(DecodeScrubReply(std::string_view(f).substr(kFramePrefixSize), &back).ok());
  EXPECT_EQ(r, back);
}

TEST(Protocol, Names) {
  EXPECT_STREQ("BAD_FRAME", ErrorCodeName(1));
  EXPECT_STREQ("INTERNAL", ErrorCodeName(16));
  EXPECT_STREQ("BUSY", ErrorCodeName(17));
  EXPECT_STREQ("STALE_INFOFILE", ErrorCodeName(18));
  EXPECT_STREQ("UNKNOWN_ERROR", ErrorCodeName(19));
  EXPECT_STREQ("UNKNOWN_ERROR", ErrorCodeName(99));
  EXPECT_EQ(nullptr, MsgTypeName(0x33));
  EXPECT_STREQ("SCRUB", MsgTypeName(0x07));
  EXPECT_STREQ("AUTH", MsgTypeName(0x08));
  EXPECT_STREQ("DENIED", ErrorCodeName(15));
  EXPECT_EQ("a\\x00b", Printable(std::string("a\0b", 3)));
}

}  // namespace
}  // namespace st
