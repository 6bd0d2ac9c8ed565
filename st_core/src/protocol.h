// The StoreTorrent wire protocol, version 1 (docs/wire-protocol.md).
//
// Pure functions, no I/O: frame prefix parsing, payload decoding into
// structs, and encoding of whole frames.
//
//   frame   := length:u32 header payload
//   length  := byte count of header + payload; 12 <= length <= max_frame
//   header  := type:u8 version:u8 flags:u16 seq:u64
//
// Decoded string fields are views into the payload unless the struct holds
// std::string (ring messages, which outlive the frame).
#ifndef ST_CORE_PROTOCOL_H_
#define ST_CORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "status.h"

namespace st {

constexpr uint8_t kProtocolVersion = 1;
constexpr size_t kLengthSize = 4;    // the length prefix
constexpr size_t kHeaderSize = 12;   // type, version, flags, seq
constexpr size_t kFramePrefixSize = kLengthSize + kHeaderSize;
constexpr uint32_t kDefaultMaxFrame = 64u * 1024 * 1024 + 4096;
constexpr size_t kMaxRecordName = 4096;
constexpr size_t kMaxStr16 = 0xFFFF;

constexpr uint16_t kFlagMore = 0x0001;
constexpr uint16_t kFlagReplace = 0x0002;
// PUT_CHAIN: answer OK with MORE once this peer has stored its copy, then the
// final reply when the rest of the chain has (the async protocols).
constexpr uint16_t kFlagAsync = 0x0004;
// PUT_CHAIN sent by a peer down its chain (over a ring link), not by a client.
constexpr uint16_t kFlagForwarded = 0x0008;
// PUT, PUT_CHAIN (from a client): replace a copy of the same name only if the
// connection that stored it has closed: a crashed writer's uncommitted copy
// (paper 4.4; docs/replication.md, "A crashed writer's leftovers"). The
// client checks first that the record is not committed.
constexpr uint16_t kFlagLeftover = 0x0010;
// GET_LOCAL, RING_SEGMENT: the ring header ends with as_of:u64, the
// generation whose records are revealed (docs/snapshots.md); without it,
// as_of is the ring's generation.
constexpr uint16_t kFlagAsOf = 0x0020;
// A chain holds at most this many peers after the first (replication x8).
constexpr size_t kMaxChainHops = 7;

enum class MsgType : uint8_t {
  kPut = 0x01,
  kGet = 0x02,
  kDelete = 0x03,
  kDeleteFile = 0x04,
  kGetLocal = 0x05,
  kPing = 0x06,
  kScrub = 0x07,
  kAuth = 0x08,  // payload: one capability token (docs/capabilities.md)
  kPutChain = 0x09,  // PUT, then forwarded down a chain of holders
  kListMeta = 0x0A,  // the infofile mirrors this peer keeps (meta_mirror.h)
  kGetMeta = 0x0B,   // bytes of one mirror
  kRingSegment = 0x10,
  kOk = 0x80,
  kData = 0x82,
  kLocalList = 0x85,
  kMetaList = 0x86,  // reply to LIST_META
  kError = 0xFF,
};

enum class ErrorCode : uint16_t {
  kBadFrame = 1,
  kFrameTooLarge = 2,
  kUnknownType = 3,
  kBadName = 4,
  kNotFound = 5,
  kExists = 6,
  kCrcMismatch = 7,
  kIoError = 8,
  kNoSpace = 9,
  kPeerUnreachable = 10,
  kTimeout = 11,
  kInvariant = 12,
  kNoNamespace = 13,
  kNotInRing = 14,
  kDenied = 15,
  kInternal = 16,
  kBusy = 17,  // the peer is at its connection limit; the connection is closed
  kStaleInfofile = 18,  // --metadata fetch: the copy is behind the generation asked and the
                        // tracker could not bring it there (GET_LOCAL)
};

// "PUT", "LOCAL_LIST", ... or nullptr for an unknown type.
const char* MsgTypeName(uint8_t type);
// "BAD_FRAME", ... or "UNKNOWN_ERROR".
const char* ErrorCodeName(uint16_t code);

struct FrameHeader {
  uint32_t length = 0;  // header + payload
  uint8_t type = 0;
  uint8_t version = 0;
  uint16_t flags = 0;
  uint64_t seq = 0;

  size_t payload_size() const { return length - kHeaderSize; }
  size_t frame_size() const { return kLengthSize + length; }
};

enum class PrefixResult {
  kNeedMore,    // fewer bytes than needed to judge the prefix
  kOk,          // *h is filled; the frame spans h->frame_size() bytes
  kBadLength,   // length < 12: BAD_FRAME, seq 0 (the header is not readable)
  kTooLarge,    // length > max_frame: FRAME_TOO_LARGE, seq 0
  kBadVersion,  // version != 1: BAD_FRAME with h->seq
};

// Parses the length prefix and header at p[0, n).
PrefixResult ParsePrefix(const uint8_t* p, size_t n, uint32_t max_frame, FrameHeader* h);

// ---- Requests --------------------------------------------------------------

struct PutRequest {
  uint64_t file_id = 0;
  uint8_t copy_rank = 0;
  uint32_t crc32c = 0;
  std::string_view name;
  std::string_view data;
};

// PUT_CHAIN: store copy_rank here, then forward copy_rank + 1 to hops[0]
// with hops[1..] (docs/wire-protocol.md, "Chain replication").
struct PutChainRequest {
  uint64_t file_id = 0;
  uint8_t copy_rank = 0;
  uint32_t crc32c = 0;
  std::string_view name;
  std::vector<std::string_view> hops;  // host:port of the next holders, in rank order
  std::string_view data;
};

// GET and DELETE.
struct NameRequest {
  uint64_t file_id = 0;
  std::string_view name;
};

// The fields GET_LOCAL and RING_SEGMENT share:
//   ring := file_id:u64 generation:u64 file_name:str16 ring_size:u16
//           peer:str16 * ring_size [as_of:u64, with the flag AS_OF]
// as_of is at most generation unless generation is 0 (the latest state).
struct RingHeader {
  RingHeader() = default;
  RingHeader(uint64_t id, uint64_t gen, std::string name, std::vector<std::string> ring,
             std::optional<uint64_t> as = std::nullopt)
      : file_id(id),
        generation(gen),
        file_name(std::move(name)),
        peers(std::move(ring)),
        as_of(as) {}

  uint64_t file_id = 0;
  uint64_t generation = 0;  // the plan's generation: copies are read as held then
  std::string file_name;
  std::vector<std::string> peers;
  std::optional<uint64_t> as_of;  // the generation read (AS_OF); unset: generation

  // The generation whose records the ring reveals.
  uint64_t read_generation() const { return as_of.value_or(generation); }
  // The header flags its frames carry (AS_OF when as_of is set).
  uint16_t flags() const { return as_of ? kFlagAsOf : 0; }
};

struct RingEntry {
  uint8_t copy_rank = 0;
  std::string name;

  bool operator==(const RingEntry& o) const { return copy_rank == o.copy_rank && name == o.name; }
};

struct RingSegment {
  RingHeader ring;
  uint16_t origin = 0;
  std::vector<RingEntry> entries;
};

// ---- Replies ---------------------------------------------------------------

struct DataReply {
  uint32_t crc32c = 0;
  uint8_t copy_rank = 0;
  std::string_view data;
};

struct LocalListEntry {
  uint8_t copy_rank = 0;
  uint64_t size = 0;
  std::string name;
  std::string path;

  bool operator==(const LocalListEntry& o) const {
    return copy_rank == o.copy_rank && size == o.size && name == o.name && path == o.path;
  }
};

struct ErrorReply {
  uint16_t code = 0;
  std::string message;
  std::vector<std::string> peers;  // host:port of the peers the error concerns (may be empty)
};

// The OK reply to SCRUB: what one scrub run did.
//   files:u64 removed_uncommitted:u64 removed_deleted_files:u64 removed_tmp:u64 kept:u64
struct ScrubReply {
  uint64_t files = 0;                  // file ids of the local store examined
  uint64_t removed_uncommitted = 0;    // records removed: not committed at their rank
  uint64_t removed_deleted_files = 0;  // records removed: no infofile has their file id
  uint64_t removed_tmp = 0;            // temporary files removed from <data>/tmp/
  uint64_t kept = 0;                   // records examined and kept

  bool operator==(const ScrubReply& o) const {
    return files == o.files && removed_uncommitted == o.removed_uncommitted &&
           removed_deleted_files == o.removed_deleted_files && removed_tmp == o.removed_tmp &&
           kept == o.kept;
  }
};
constexpr size_t kScrubReplySize = 40;

// GET_META: bytes [offset, offset + length) of the mirror of file_id.
struct GetMetaRequest {
  uint64_t file_id = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
};

// One entry of a META_LIST reply: an infofile mirror (docs/wire-protocol.md).
//   entry := file_id:u64 generation:u64 size:u64 crc32c:u32 name:str16
struct MetaListEntry {
  uint64_t file_id = 0;
  uint64_t generation = 0;  // meta.generation of the mirror
  uint64_t size = 0;        // bytes of the mirror
  uint32_t crc32c = 0;      // CRC-32C of those bytes
  std::string name;         // meta.name: the file's name in the namespace

  bool operator==(const MetaListEntry& o) const {
    return file_id == o.file_id && generation == o.generation && size == o.size &&
           crc32c == o.crc32c && name == o.name;
  }
};

// Payload decoders. Each returns Corruption with a short reason if the
// payload does not match the grammar of its type (including trailing bytes).
Status DecodePut(std::string_view payload, PutRequest* out);
Status DecodePutChain(std::string_view payload, PutChainRequest* out);
Status DecodeName(std::string_view payload, NameRequest* out);  // GET, DELETE
Status DecodeDeleteFile(std::string_view payload, uint64_t* file_id);
// GET_LOCAL and RING_SEGMENT take the frame's flags (AS_OF adds as_of).
Status DecodeGetLocal(std::string_view payload, uint16_t flags, RingHeader* out);
Status DecodePing(std::string_view payload);
Status DecodeScrub(std::string_view payload);  // empty
// AUTH: the whole payload is the token; it always decodes (a malformed token
// is refused with DENIED, not BAD_FRAME: docs/capabilities.md).
Status DecodeAuth(std::string_view payload, std::string_view* token);
Status DecodeRingSegment(std::string_view payload, uint16_t flags, RingSegment* out);
Status DecodeData(std::string_view payload, DataReply* out);
Status DecodeLocalList(std::string_view payload, std::vector<LocalListEntry>* out);
Status DecodeError(std::string_view payload, ErrorReply* out);
Status DecodeListMeta(std::string_view payload);  // empty
Status DecodeGetMeta(std::string_view payload, GetMetaRequest* out);
Status DecodeMetaList(std::string_view payload, std::vector<MetaListEntry>* out);
// The payload of an OK reply to SCRUB.
Status DecodeScrubReply(std::string_view payload, ScrubReply* out);

// ---- Encoders (whole frames: length prefix, header, payload) ----------------

std::string EncodeFrame(MsgType type, uint16_t flags, uint64_t seq, std::string_view payload);
// Writes the 16-byte prefix of a frame with payload_size bytes of payload.
void EncodeFramePrefix(uint8_t* dst, MsgType type, uint16_t flags, uint64_t seq,
                       size_t payload_size);

std::string EncodePut(uint64_t seq, uint16_t flags, const PutRequest& req);
std::string EncodePutChain(uint64_t seq, uint16_t flags, const PutChainRequest& req);
std::string EncodeGet(uint64_t seq, uint64_t file_id, std::string_view name);
std::string EncodeDelete(uint64_t seq, uint64_t file_id, std::string_view name);
std::string EncodeDeleteFile(uint64_t seq, uint64_t file_id);
// With AS_OF when ring.as_of is set.
std::string EncodeGetLocal(uint64_t seq, const RingHeader& ring);
std::string EncodePing(uint64_t seq);
std::string EncodeScrub(uint64_t seq);
std::string EncodeAuth(uint64_t seq, std::string_view token);
std::string EncodeListMeta(uint64_t seq);
std::string EncodeGetMeta(uint64_t seq, const GetMetaRequest& req);

// The RING_SEGMENT payload for entries [begin, end); its frames carry
// ring.flags() besides MORE.
std::string EncodeRingSegmentPayload(const RingHeader& ring, uint16_t origin,
                                     const RingEntry* begin, const RingEntry* end);
// flags | seg.ring.flags().
std::string EncodeRingSegment(uint64_t seq, uint16_t flags, const RingSegment& seg);
// Splits a segment into payloads of roughly chunk_bytes of entries each
// (always at least one payload). All but the last are to be sent with MORE.
std::vector<std::string> EncodeRingSegmentPayloads(const RingHeader& ring, uint16_t origin,
                                                   const std::vector<RingEntry>& entries,
                                                   size_t chunk_bytes);

std::string EncodeOk(uint64_t seq, std::string_view payload = {});
std::string EncodeOkRemoved(uint64_t seq, uint64_t removed);
std::string EncodeScrubReply(uint64_t seq, const ScrubReply& r);
std::string EncodePingReply(uint64_t seq, std::string_view peer_id, std::string_view addr);
std::string EncodeData(uint64_t seq, uint32_t crc, uint8_t copy_rank, std::string_view data);
// The part of a DATA frame before data_size bytes of record data.
std::string EncodeDataHeader(uint64_t seq, uint32_t crc, uint8_t copy_rank, uint64_t data_size);
std::string EncodeLocalList(uint64_t seq, uint16_t flags, const std::vector<LocalListEntry>& e);
// LOCAL_LIST frames of roughly chunk_bytes each; MORE on all but the last.
// An empty list is one frame with count 0.
std::vector<std::string> EncodeLocalListFrames(uint64_t seq,
                                               const std::vector<LocalListEntry>& entries,
                                               size_t chunk_bytes);
std::string EncodeMetaList(uint64_t seq, uint16_t flags, const std::vector<MetaListEntry>& e);
// META_LIST frames of roughly chunk_bytes each; MORE on all but the last.
// An empty list is one frame with count 0.
std::vector<std::string> EncodeMetaListFrames(uint64_t seq, const std::vector<MetaListEntry>& e,
                                              size_t chunk_bytes);
// Messages longer than 4000 bytes are cut. `peers` names the peers the
// error concerns (GET_LOCAL ring failures), at most kMaxErrorPeers, each cut
// to 255 bytes; the field is left out when empty.
constexpr size_t kMaxErrorPeers = 1024;
std::string EncodeError(uint64_t seq, ErrorCode code, std::string_view message,
                        const std::vector<std::string>& peers = {});

// Printable form of a name for messages and logs: non-printable bytes as
// \xHH, cut after max_len bytes.
std::string Printable(std::string_view s, size_t max_len = 200);

}  // namespace st

#endif  // ST_CORE_PROTOCOL_H_
