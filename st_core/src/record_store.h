// The peer's on-disk record store (docs/wire-protocol.md, "Record store").
//
//   <data>/PEER_ID       the peer's identity (UUID v4), created once
//   <data>/LOCK          flock()ed while a peer uses the directory
//   <data>/tmp/          temporary files; emptied at start
//   <data>/files/<file_id:016x>/<bucket:02x>/<enc(name)>@<rank>@<crc:08x>[.name]
//   <data>/quarantine/<file_id:016x>/...  copies the verifier found corrupt
//                                          (verifier.h): kept for the operator,
//                                          never indexed or served
//
// A PUT writes a temporary file, optionally fsyncs it, renames it into place
// and optionally fsyncs the directory; the temporary file is removed on any
// failure, so no partial record is ever visible. The directory listing is the
// index: it is rebuilt in memory at start and kept up to date afterwards.
//
// Every disk access goes through the Env of StoreOptions (env.h).
//
// Not thread-safe: used from the event loop thread only, except
// used_bytes(), record_count() and FsSpace(), which any thread may call, and
// WritePut() and VerifyRead(), which do the disk work of a PUT or a GET on a
// background thread (background.h) between their loop-thread halves.
#ifndef ST_CORE_RECORD_STORE_H_
#define ST_CORE_RECORD_STORE_H_

#include <sys/stat.h>

#include <atomic>
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "env.h"
#include "status.h"

namespace st {

struct RecordMeta {
  uint64_t size = 0;
  uint32_t crc = 0;
  uint8_t copy_rank = 0;
  // The file's ctime (ns) when its bytes were last known to match crc (at
  // PUT, or at a verified GET); -1: never. A GET re-reads the file only when
  // its ctime differs, i.e. the file was written to since.
  int64_t verified_ctime_ns = -1;
  // The client connection that stored this copy (0: unknown, e.g. a copy
  // found on disk at start or forwarded down a chain). A PUT with LEFTOVER
  // may replace the copy once that connection has closed: a crashed
  // writer's uncommitted copy (paper 4.4; docs/replication.md, "A crashed
  // writer's leftovers").
  uint64_t writer = 0;
};

// How a PUT treats a copy of the same name this peer already holds.
struct PutMode {
  bool replace = false;   // REPLACE: overwrite it (rebalance, new versions)
  bool leftover = false;  // LEFTOVER: overwrite it only if its writer's connection has closed
  uint64_t writer = 0;    // the connection this PUT came on (0: unknown)
};

struct StoreOptions {
  std::string data_dir;
  bool sync = false;       // durable PUT/DELETE replies (see sync_each)
  // With sync: fsync each record file and its directory in WritePut (the
  // old way). Without: WritePut does not sync, and the caller makes a
  // batch durable with SyncAll() before it answers (group fsync).
  bool sync_each = false;
  uint64_t capacity = 0;  // 0: only the filesystem limits the used bytes
  uint64_t reserve = 0;   // refuse PUTs that would leave less free space
  Env* env = nullptr;     // nullptr: Env::Default()
};

class RecordStore {
 public:
  using FileIndex = std::unordered_map<std::string, RecordMeta>;

  struct OpenRecord {
    int fd = -1;  // owned by the caller
    uint64_t size = 0;
    uint32_t crc = 0;
    uint8_t copy_rank = 0;
  };

  // A PUT between its halves: BeginPut (loop) checks and reserves, WritePut
  // (any thread) writes the bytes, FinishPut (loop) indexes the record.
  struct PendingPut {
    uint64_t file_id = 0;
    uint8_t copy_rank = 0;
    uint32_t crc = 0;
    std::string name;
    uint64_t size = 0;
    uint64_t writer = 0;  // PutMode::writer
    bool write = false;  // false: an idempotent retry, nothing to write
    // Set by WritePut: the record file's ctime once it has its name (read
    // with an fstat of the still open file, no path lookup), -1 if unknown.
    // FinishPut records it as the ctime the bytes were verified at.
    int64_t ctime_ns = -1;
  };

  // A record opened for a GET. If !verified, VerifyRead (any thread) checks
  // it and MarkVerified (loop) remembers that it did.
  struct ReadHandle {
    std::shared_ptr<RandomAccessFile> file;
    std::string path;
    uint64_t size = 0;
    uint32_t crc = 0;
    uint8_t copy_rank = 0;
    int64_t ctime_ns = -1;
    bool verified = false;
    uint64_t expected_size = 0;  // as stored
  };

  // Creates the layout if needed, empties tmp/, loads or creates PEER_ID and
  // scans files/ to build the index.
  static Status Open(const StoreOptions& options, std::unique_ptr<RecordStore>* store);
  ~RecordStore();

  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  // OK when stored (or an idempotent retry: same rank and crc already held).
  // InvalidArgument: bad name. Corruption: data does not match crc.
  // AlreadyExists: held with another rank or crc and !replace (nor a
  // leftover of a closed writer connection, with mode.leftover).
  // NoSpace: ENOSPC/EDQUOT, capacity or reserve. IOError: anything else.
  Status Put(uint64_t file_id, uint8_t copy_rank, uint32_t crc, std::string_view name,
             std::string_view data, bool replace);
  Status Put(uint64_t file_id, uint8_t copy_rank, uint32_t crc, std::string_view name,
             std::string_view data, const PutMode& mode);
  // Whether a writer connection (RecordMeta::writer) is still open; set by
  // the server. Unset: every writer counts as open (no leftover is replaced).
  void SetWriterOpen(std::function<bool(uint64_t)> open) { writer_open_ = std::move(open); }

  // Put in three steps, for a caller that writes off the loop thread.
  // BeginPut makes every check of Put (name, CRC, existing copies, capacity,
  // reserve) and reserves the bytes; Unavailable if a PUT of the same record
  // is between BeginPut and FinishPut (wait for it, then try again). After an
  // OK BeginPut with put->write, call WritePut (any thread) and then
  // FinishPut with its result, which returns Put's result. With !put->write
  // (an idempotent retry) the PUT is done: call nothing else.
  Status BeginPut(uint64_t file_id, uint8_t copy_rank, uint32_t crc, std::string_view name,
                  std::string_view data, const PutMode& mode, PendingPut* put);
  // Sets put->ctime_ns.
  Status WritePut(PendingPut* put, std::string_view data);
  // Group fsync (any thread): makes everything written so far durable.
  Status SyncAll();
  // Any thread: removes the files WritePut wrote for put (when the group
  // fsync after it failed: the PUT is refused, its bytes must not stay).
  void RemoveWritten(const PendingPut& put);
  bool sync_each() const { return options_.sync && options_.sync_each; }
  Status FinishPut(const PendingPut& put, const Status& written);
  bool sync() const { return options_.sync; }

  // Opens the record file. NotFound if this peer holds no such record.
  // With verify, the file is checked against the size and CRC-32C it was
  // stored with, unless it was already checked and not written to since (its
  // ctime is unchanged): Corruption (naming the file) on a mismatch, so a
  // damaged copy is reported by the peer that holds it. Bit rot that leaves
  // the ctime alone is caught by the client's own CRC check.
  Status Get(uint64_t file_id, std::string_view name, OpenRecord* out, bool verify = false);

  // Get in steps, for a caller that verifies off the loop thread: OpenForRead
  // (loop; NotFound as Get), then, unless out->verified, VerifyRead (any
  // thread; Corruption as Get) and MarkVerified (loop) when it passed.
  Status OpenForRead(uint64_t file_id, std::string_view name, ReadHandle* out);
  static Status VerifyRead(const ReadHandle& rec);
  void MarkVerified(uint64_t file_id, std::string_view name, const ReadHandle& rec);

  // NotFound if this peer holds no such record.
  // Under sync the directory is fsynced before it returns, unless
  // dir_to_sync is given: then the caller must SyncDir(*dir_to_sync) (on a
  // background thread) before it answers the DELETE.
  Status Delete(uint64_t file_id, std::string_view name, std::string* dir_to_sync = nullptr);

  // Removes every record of the file; *removed is how many.
  Status DeleteFile(uint64_t file_id, uint64_t* removed);

  // For the scrubber, which plans on another thread and applies here: removes
  // the record only if this peer still holds it at copy_rank with crc and its
  // file was last modified at or before mtime_cutoff (wall-clock seconds).
  // *removed says whether it went; a record that changed is left alone.
  Status RemoveIfStale(uint64_t file_id, std::string_view name, uint8_t copy_rank, uint32_t crc,
                       double mtime_cutoff, bool* removed);

  // For the verifier (verifier.h): moves the record file (and its name
  // sidecar) to <data>/quarantine/<file_id>/ and drops it from the index,
  // only if this peer still holds the record at copy_rank with crc (a copy
  // replaced or deleted meanwhile is left alone: *moved false). *to is the
  // quarantined path. The copy is never served again; repair restores it.
  Status Quarantine(uint64_t file_id, std::string_view name, uint8_t copy_rank, uint32_t crc,
                    bool* moved, std::string* to);

  // Removes <data>/tmp/<name> if it is a regular file last modified at or
  // before mtime_cutoff.
  Status RemoveTmpIfStale(const std::string& name, double mtime_cutoff, bool* removed);

  // Removes the empty bucket directories of a file, then the file's
  // directory if it is empty.
  void PruneFileDirs(uint64_t file_id);

  // The index of one file, or nullptr if this peer holds none of its records.
  const FileIndex* Find(uint64_t file_id) const;
  // The file ids this peer holds records of (the infofile mirror's snapshot).
  std::vector<uint64_t> FileIds() const;
  const RecordMeta* Lookup(uint64_t file_id, std::string_view name) const;

  // Absolute path of the record file.
  std::string RecordPath(uint64_t file_id, std::string_view name, const RecordMeta& meta) const;

  // Filesystem size and space available to this process, from statvfs.
  Status FsSpace(uint64_t* total, uint64_t* avail) const;

  Env* env() const { return env_; }

  const std::string& data_dir() const { return data_dir_; }
  const std::string& peer_id() const { return peer_id_; }
  uint64_t capacity() const { return options_.capacity; }
  uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  uint64_t record_count() const { return records_.load(std::memory_order_relaxed); }

 private:
  explicit RecordStore(const StoreOptions& options);

  Status Init();
  Status LoadPeerId();
  // Sets files/'s TOPDIR flag where the filesystem has one (best effort).
  void SpreadFileDirectories();
  Status CleanTmp();
  Status Scan();
  Status ScanFile(uint64_t file_id, const std::string& dir);
  std::string FileDir(uint64_t file_id) const;
  std::string BucketDir(uint64_t file_id, uint8_t bucket) const;
  // Atomic PUT (paper 3.1): the record appears under its name only when
  // whole. An unnamed O_TMPFILE file in the bucket, written, fsynced (if
  // sync) and linked to dir/name; where the filesystem has no O_TMPFILE, a
  // temp file renamed to dir/name. Then the directory is fsynced (if sync).
  // Thread-safe (it touches only the Env and atomics).
  // *ctime_ns (if given): the file's ctime once named, -1 if unknown.
  Status WriteAtomic(uint64_t file_id, uint8_t bucket, const std::string& name,
                     std::string_view data, int64_t* ctime_ns);
  // The O_TMPFILE + linkat path. Sets *fall_back (and returns OK) when the
  // rename path must do it: no O_TMPFILE or /proc, or dst exists.
  Status WriteLinked(const std::string& bdir, const std::string& dst, std::string_view data,
                     bool* fall_back, int64_t* ctime_ns);
  // Makes the bucket directory (and the file's, if missing) and remembers
  // that it exists. Thread-safe.
  Status MakeBucketDir(uint64_t file_id, uint8_t bucket);
  // The bucket-folder cache (thread-safe): which <file>/<bucket>/ folders
  // this store made or found, so a PUT into one makes no mkdir and no probe.
  // A folder removed behind the store's back is found by the PUT that fails
  // to create its file there (NotFound): it forgets it, makes it again and
  // retries once.
  bool BucketKnown(uint64_t file_id, uint8_t bucket) const;
  bool FileDirKnown(uint64_t file_id) const;
  void NoteBucket(uint64_t file_id, uint8_t bucket);
  void ForgetBucket(uint64_t file_id, uint8_t bucket);
  void ForgetFileDir(uint64_t file_id);
  Status MkdirIfMissing(const std::string& path);
  void RemoveEntries(const std::string& dir);
  void AddStats(int64_t records, int64_t bytes);
  static std::string PutKey(uint64_t file_id, std::string_view name);

  StoreOptions options_;
  std::string data_dir_;  // absolute
  std::string tmp_dir_;
  std::string files_dir_;
  std::string peer_id_;
  Env* env_;
  std::unique_ptr<FileLock> lock_;
  std::atomic<uint64_t> tmp_counter_{0};
  std::atomic<bool> use_tmpfile_{true};  // cleared when the filesystem has no O_TMPFILE
  mutable std::mutex dirs_mu_;
  // file id -> its buckets known to exist; a file present here has its folder.
  std::unordered_map<uint64_t, std::bitset<256>> known_dirs_;  // guarded by dirs_mu_
  std::unordered_map<uint64_t, FileIndex> files_;
  std::unordered_set<std::string> puts_in_flight_;  // PutKey of each begun, unfinished PUT
  uint64_t reserved_bytes_ = 0;  // by PUTs in flight, for the capacity check
  std::function<bool(uint64_t)> writer_open_;  // SetWriterOpen
  std::atomic<uint64_t> used_bytes_{0};
  std::atomic<uint64_t> records_{0};
};

}  // namespace st

#endif  // ST_CORE_RECORD_STORE_H_
