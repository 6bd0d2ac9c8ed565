#include "record_store.h"

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "coding.h"
#include "crc32c.h"
#include "log.h"
#include "name_codec.h"
#include "protocol.h"

namespace st {
namespace {

std::string NewUuid(Env* env) {
  unsigned char b[16];
  std::unique_ptr<RandomAccessFile> f;
  size_t got = 0;
  bool ok = env->NewRandomAccessFile("/dev/urandom", &f).ok() &&
            f->Read(0, sizeof(b), reinterpret_cast<char*>(b), &got).ok() && got == sizeof(b);
  if (!ok) {
    srandom(static_cast<unsigned>(time(nullptr) ^ getpid()));
    for (auto& x : b) x = static_cast<unsigned char>(random());
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  char out[37];
  std::snprintf(out, sizeof(out),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

double Seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

RecordStore::RecordStore(const StoreOptions& options)
    : options_(options), env_(options.env != nullptr ? options.env : Env::Default()) {}

RecordStore::~RecordStore() = default;

Status RecordStore::Open(const StoreOptions& options, std::unique_ptr<RecordStore>* store) {
  std::unique_ptr<RecordStore> s(new RecordStore(options));
  Status st = s->Init();
  if (!st.ok()) return st;
  *store = std::move(s);
  return Status::OK();
}

Status RecordStore::MkdirIfMissing(const std::string& path) {
  Status s = env_->CreateDir(path);
  return s.IsAlreadyExists() ? Status::OK() : s;
}

// Removes every entry of a directory, and the directories in it.
void RecordStore::RemoveEntries(const std::string& dir) {
  std::vector<std::string> names;
  if (!env_->GetChildren(dir, &names).ok()) return;
  for (const std::string& n : names) {
    std::string p = dir + "/" + n;
    if (env_->RemoveFile(p).IsInvalidArgument()) {  // a directory
      RemoveEntries(p);
      env_->RemoveDir(p);
    }
  }
}

Status RecordStore::Init() {
  if (options_.data_dir.empty()) return Status::InvalidArgument("no data directory");
  // mkdir -p the data directory.
  std::string path = options_.data_dir;
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      Status s = MkdirIfMissing(path.substr(0, pos));
      if (!s.ok()) return s;
    }
  }
  Status s = env_->RealPath(path, &data_dir_);
  if (!s.ok()) return s;
  tmp_dir_ = data_dir_ + "/tmp";
  files_dir_ = data_dir_ + "/files";

  s = env_->LockFile(data_dir_ + "/LOCK", &lock_);
  if (s.IsUnavailable()) {
    return Status::IOError("data directory " + data_dir_ +
                           " is in use by another st-peer (LOCK is held)");
  }
  if (!s.ok()) return s;

  s = MkdirIfMissing(tmp_dir_);
  if (s.ok()) s = MkdirIfMissing(files_dir_);
  if (s.ok()) SpreadFileDirectories();
  if (s.ok()) s = CleanTmp();
  if (s.ok()) s = LoadPeerId();
  if (s.ok()) s = Scan();
  return s;
}

void RecordStore::SpreadFileDirectories() {
  // Each file's directory (files/<file_id>) is placed as a top-level one, in
  // a block group of its own, so its records' inodes come from there and not
  // from the groups every earlier file's records (and their deletions) used:
  // on ext4 without a journal a creation skips each inode deleted in the
  // last minutes one by one (docs/peer.md, "Where records' inodes go").
  // Best effort: other filesystems have no such flag, and lose nothing.
  Status s = env_->SpreadSubdirectories(files_dir_);
  if (s.ok()) {
    ST_LOG_INFO(
        "new file directories under %s are spread over the filesystem's block groups (TOPDIR)",
        files_dir_.c_str());
  }
}

Status RecordStore::CleanTmp() {
  std::vector<std::string> names;
  Status s = env_->GetChildren(tmp_dir_, &names);
  if (!s.ok()) return s;
  size_t removed = 0;
  for (const std::string& n : names) {
    std::string p = tmp_dir_ + "/" + n;
    s = env_->RemoveFile(p);
    if (s.ok()) {
      ++removed;
    } else if (s.IsInvalidArgument()) {
      RemoveEntries(p);
      env_->RemoveDir(p);
      ++removed;
    }
  }
  if (removed > 0)
    ST_LOG_INFO("removed %zu leftover temporary files from %s", removed, tmp_dir_.c_str());
  return Status::OK();
}

Status RecordStore::LoadPeerId() {
  std::string path = data_dir_ + "/PEER_ID";
  std::string content;
  Status s = env_->ReadSmallFile(path, 4096, &content);
  if (s.ok()) {
    while (!content.empty() && (content.back() == '\n' || content.back() == ' '))
      content.pop_back();
    if (content.empty())
      return Status::Corruption(path + " is empty; remove it to make a new identity");
    peer_id_ = content;
    return Status::OK();
  }
  if (!s.IsNotFound()) return s;
  // Create it once, durably: temp file, fsync, rename, fsync the directory.
  peer_id_ = NewUuid(env_);
  std::string tmp = tmp_dir_ + "/PEER_ID.tmp";
  std::unique_ptr<WritableFile> f;
  s = env_->NewWritableFile(tmp, /*exclusive=*/false, &f);
  if (!s.ok()) return s;
  s = f->Append(peer_id_ + "\n");
  if (s.ok()) s = f->Sync();
  Status c = f->Close();
  if (s.ok()) s = c;
  if (s.ok()) s = env_->RenameFile(tmp, path);
  if (!s.ok()) {
    env_->RemoveFile(tmp);
    return s;
  }
  env_->SyncDir(data_dir_);
  ST_LOG_INFO("created peer identity %s in %s", peer_id_.c_str(), path.c_str());
  return Status::OK();
}

Status RecordStore::Scan() {
  std::vector<std::string> names;
  Status s = env_->GetChildren(files_dir_, &names);
  if (!s.ok()) return s;
  std::vector<std::pair<uint64_t, std::string>> dirs;
  for (const std::string& n : names) {
    if (n[0] == '.') continue;
    uint64_t file_id;
    if (!ParseLowerHex(n, 16, &file_id)) {
      ST_LOG_WARN("ignoring unexpected entry %s/%s", files_dir_.c_str(), n.c_str());
      continue;
    }
    dirs.emplace_back(file_id, files_dir_ + "/" + n);
  }
  for (const auto& [file_id, dir] : dirs) {
    s = ScanFile(file_id, dir);
    if (!s.ok()) return s;
  }
  ST_LOG_INFO("record store %s: %llu records, %llu bytes in %zu files", data_dir_.c_str(),
              static_cast<unsigned long long>(record_count()),
              static_cast<unsigned long long>(used_bytes()), files_.size());
  return Status::OK();
}

Status RecordStore::ScanFile(uint64_t file_id, const std::string& dir) {
  std::vector<std::string> names;
  Status s = env_->GetChildren(dir, &names);
  if (!s.ok()) return s;
  std::vector<std::string> buckets;
  for (const std::string& n : names) {
    if (n[0] == '.') continue;
    uint64_t b;
    if (!ParseLowerHex(n, 2, &b)) {
      ST_LOG_WARN("ignoring unexpected entry %s/%s", dir.c_str(), n.c_str());
      continue;
    }
    buckets.push_back(n);
    NoteBucket(file_id, static_cast<uint8_t>(b));
  }

  FileIndex& index = files_[file_id];
  // Where each indexed name came from, to settle duplicates (a crash during a
  // REPLACE can leave the old and the new copy): the newer one wins.
  struct Origin {
    std::string path;
    int64_t ctime_ns;
  };
  std::unordered_map<std::string, Origin> origins;

  for (const std::string& bucket : buckets) {
    std::string bdir = dir + "/" + bucket;
    std::vector<std::string> entries;
    s = env_->GetChildren(bdir, &entries);
    if (!s.ok()) return s;
    std::vector<std::string> sidecars;
    std::unordered_map<std::string, bool> record_files;
    for (const std::string& fname : entries) {
      if (EndsWith(fname, kSidecarSuffix)) {
        sidecars.push_back(fname);
        continue;
      }
      std::string path = bdir + "/" + fname;
      std::string_view enc;
      uint8_t rank;
      uint32_t crc;
      if (!ParseRecordFileName(fname, &enc, &rank, &crc)) {
        ST_LOG_WARN("ignoring unexpected file %s", path.c_str());
        continue;
      }
      std::string name;
      if (IsHashedEncoding(enc)) {
        Status rs = env_->ReadSmallFile(path + kSidecarSuffix, kMaxRecordName + 1, &name);
        if (!rs.ok() || EncodeName(name) != enc) {
          ST_LOG_WARN("ignoring %s: its name file is missing or does not match", path.c_str());
          continue;
        }
      } else if (!DecodeEncodedName(enc, &name)) {
        ST_LOG_WARN("ignoring %s: not a canonical record name encoding", path.c_str());
        continue;
      }
      FileInfo st;
      if (!env_->GetFileInfo(path, &st).ok() || !st.is_regular) {
        ST_LOG_WARN("ignoring %s: not a regular file", path.c_str());
        continue;
      }
      record_files[fname] = true;
      RecordMeta meta{st.size, crc, rank};
      auto it = index.find(name);
      if (it != index.end()) {
        Origin& prev = origins[name];
        bool newer = st.ctime_ns > prev.ctime_ns;
        const std::string& loser = newer ? prev.path : path;
        ST_LOG_WARN("two copies of record '%s' of file %016llx; keeping the newer, removing %s",
                    Printable(name).c_str(), static_cast<unsigned long long>(file_id),
                    loser.c_str());
        env_->RemoveFile(loser);
        env_->RemoveFile(loser + kSidecarSuffix);
        if (!newer) continue;
        AddStats(-1, -static_cast<int64_t>(it->second.size));
        it->second = meta;
        prev = Origin{path, st.ctime_ns};
      } else {
        index.emplace(name, meta);
        origins[name] = Origin{path, st.ctime_ns};
      }
      AddStats(1, static_cast<int64_t>(meta.size));
    }
    for (const std::string& sc : sidecars) {
      std::string rec = sc.substr(0, sc.size() - std::strlen(kSidecarSuffix));
      if (record_files.count(rec) == 0) {
        // A sidecar whose record never made it (crash between the two renames).
        std::string_view enc;
        uint8_t rank;
        uint32_t crc;
        FileInfo st;
        if (ParseRecordFileName(rec, &enc, &rank, &crc) &&
            env_->GetFileInfo(bdir + "/" + rec, &st).IsNotFound()) {
          env_->RemoveFile(bdir + "/" + sc);
        }
      }
    }
  }
  if (index.empty()) files_.erase(file_id);
  return Status::OK();
}

void RecordStore::AddStats(int64_t records, int64_t bytes) {
  records_.fetch_add(static_cast<uint64_t>(records), std::memory_order_relaxed);
  used_bytes_.fetch_add(static_cast<uint64_t>(bytes), std::memory_order_relaxed);
}

std::string RecordStore::FileDir(uint64_t file_id) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "/%016llx", static_cast<unsigned long long>(file_id));
  return files_dir_ + buf;
}

std::string RecordStore::BucketDir(uint64_t file_id, uint8_t bucket) const {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "/%02x", static_cast<unsigned>(bucket));
  return FileDir(file_id) + buf;
}

std::string RecordStore::RecordPath(uint64_t file_id, std::string_view name,
                                    const RecordMeta& meta) const {
  return BucketDir(file_id, NameBucket(name)) + "/" +
         RecordFileName(EncodeName(name), meta.copy_rank, meta.crc);
}

Status RecordStore::FsSpace(uint64_t* total, uint64_t* avail) const {
  return env_->GetFreeSpace(data_dir_, total, avail);
}

bool RecordStore::BucketKnown(uint64_t file_id, uint8_t bucket) const {
  std::lock_guard<std::mutex> lock(dirs_mu_);
  auto it = known_dirs_.find(file_id);
  return it != known_dirs_.end() && it->second.test(bucket);
}

bool RecordStore::FileDirKnown(uint64_t file_id) const {
  std::lock_guard<std::mutex> lock(dirs_mu_);
  return known_dirs_.count(file_id) != 0;
}

void RecordStore::NoteBucket(uint64_t file_id, uint8_t bucket) {
  std::lock_guard<std::mutex> lock(dirs_mu_);
  known_dirs_[file_id].set(bucket);
}

void RecordStore::ForgetBucket(uint64_t file_id, uint8_t bucket) {
  std::lock_guard<std::mutex> lock(dirs_mu_);
  auto it = known_dirs_.find(file_id);
  if (it != known_dirs_.end()) it->second.reset(bucket);
}

void RecordStore::ForgetFileDir(uint64_t file_id) {
  std::lock_guard<std::mutex> lock(dirs_mu_);
  known_dirs_.erase(file_id);
}

Status RecordStore::MakeBucketDir(uint64_t file_id, uint8_t bucket) {
  std::string fdir = FileDir(file_id);
  std::string bdir = BucketDir(file_id, bucket);
  // The file's folder first unless this store knows it is there: one mkdir
  // per new bucket of a known file, two for a new file, no probe before.
  bool created_file_dir = false;
  Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt > 0 || !FileDirKnown(file_id)) {
      s = env_->CreateDir(fdir);
      if (!s.ok() && !s.IsAlreadyExists()) return s;
      created_file_dir = created_file_dir || s.ok();
    }
    s = env_->CreateDir(bdir);
    if (!s.IsNotFound()) break;
    ForgetFileDir(file_id);  // the file's folder went behind our back: make it again
  }
  if (s.IsAlreadyExists()) s = Status::OK();
  if (!s.ok()) return s;
  if (sync_each()) {
    if (created_file_dir) env_->SyncDir(files_dir_);
    env_->SyncDir(fdir);
  }
  NoteBucket(file_id, bucket);
  return Status::OK();
}

Status RecordStore::WriteLinked(const std::string& bdir, const std::string& dst,
                                std::string_view data, bool* fall_back, int64_t* ctime_ns) {
  *fall_back = false;
  std::unique_ptr<WritableFile> f;
  Status s = env_->NewAnonymousFile(bdir, &f);
  if (s.IsInvalidArgument()) {  // no O_TMPFILE here
    ST_LOG_INFO(
        "the filesystem of %s has no O_TMPFILE: records are written to temp files and renamed",
        bdir.c_str());
    use_tmpfile_ = false;
    *fall_back = true;
    return Status::OK();
  }
  if (!s.ok()) return s;  // NotFound: the caller makes the bucket
  s = f->Append(data);
  if (s.ok() && sync_each()) s = f->Sync();
  if (s.ok()) {
    Status l = f->Link(dst);
    if (l.IsAlreadyExists()) {
      *fall_back = true;  // a same-named file (REPLACE of the same rank and CRC): rename over it
    } else if (l.IsInvalidArgument()) {
      ST_LOG_INFO("no /proc: records are written to temp files and renamed");
      use_tmpfile_ = false;
      *fall_back = true;
    } else {
      s = l;
    }
  }
  if (s.ok() && !*fall_back && ctime_ns != nullptr) {
    // linkat set the ctime: read it from the open file (an fstat, no path
    // walk). Unknown if that fails: the first GET then checks the bytes.
    FileInfo info;
    *ctime_ns = f->Stat(&info).ok() ? info.ctime_ns : -1;
  }
  // Closing an unlinked O_TMPFILE file frees it: a failed or interrupted
  // PUT leaves nothing behind, not even a temp file for the scrubber.
  Status c = f->Close();
  if (s.ok() && !*fall_back) s = c;
  return s;
}

Status RecordStore::WriteAtomic(uint64_t file_id, uint8_t bucket, const std::string& name,
                                std::string_view data, int64_t* ctime_ns) {
  if (ctime_ns != nullptr) *ctime_ns = -1;
  std::string bdir = BucketDir(file_id, bucket);
  std::string dst = bdir + "/" + name;
  if (!BucketKnown(file_id, bucket)) {  // the first record of this bucket (since start)
    Status s = MakeBucketDir(file_id, bucket);
    if (!s.ok()) return s;
  }
  if (use_tmpfile_) {
    bool fall_back = false;
    Status s = WriteLinked(bdir, dst, data, &fall_back, ctime_ns);
    if (s.IsNotFound()) {  // the bucket folder was removed behind our back
      ForgetBucket(file_id, bucket);
      s = MakeBucketDir(file_id, bucket);
      if (s.ok()) s = WriteLinked(bdir, dst, data, &fall_back, ctime_ns);
    }
    if (!fall_back) {
      if (!s.ok()) return s;
      return sync_each() ? env_->SyncDir(bdir) : Status::OK();
    }
  }
  char tmp_name[64];
  std::snprintf(tmp_name, sizeof(tmp_name), "/%d-%llu.tmp", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(++tmp_counter_));
  std::string tmp = tmp_dir_ + tmp_name;
  std::unique_ptr<WritableFile> f;
  Status s = env_->NewWritableFile(tmp, /*exclusive=*/true, &f);
  if (!s.ok()) return s;
  s = f->Append(data);
  if (s.ok() && sync_each()) s = f->Sync();
  Status c = f->Close();
  if (s.ok()) s = c;
  if (s.ok()) {
    s = env_->RenameFile(tmp, dst);
    if (s.IsNotFound()) {
      ForgetBucket(file_id, bucket);
      s = MakeBucketDir(file_id, bucket);
      if (s.ok()) s = env_->RenameFile(tmp, dst);
    }
  }
  if (!s.ok()) {
    env_->RemoveFile(tmp);
    return s;
  }
  if (ctime_ns != nullptr) {  // the rename set the ctime (a rare path: a stat is fine)
    FileInfo info;
    if (env_->GetFileInfo(dst, &info).ok()) *ctime_ns = info.ctime_ns;
  }
  if (sync_each()) return env_->SyncDir(bdir);
  return Status::OK();
}

std::string RecordStore::PutKey(uint64_t file_id, std::string_view name) {
  std::string key(reinterpret_cast<const char*>(&file_id), sizeof(file_id));
  key.append(name.data(), name.size());
  return key;
}

Status RecordStore::Put(uint64_t file_id, uint8_t copy_rank, uint32_t crc, std::string_view name,
                        std::string_view data, bool replace) {
  PutMode mode;
  mode.replace = replace;
  return Put(file_id, copy_rank, crc, name, data, mode);
}

Status RecordStore::Put(uint64_t file_id, uint8_t copy_rank, uint32_t crc, std::string_view name,
                        std::string_view data, const PutMode& mode) {
  PendingPut put;
  Status s = BeginPut(file_id, copy_rank, crc, name, data, mode, &put);
  if (!s.ok() || !put.write) return s;
  Status w = WritePut(&put, data);
  if (w.ok() && options_.sync && !options_.sync_each) {
    w = SyncAll();
    if (!w.ok()) RemoveWritten(put);
  }
  return FinishPut(put, w);
}

Status RecordStore::SyncAll() { return env_->SyncFilesystem(data_dir_); }

void RecordStore::RemoveWritten(const PendingPut& put) {
  std::string enc = EncodeName(put.name);
  std::string path = BucketDir(put.file_id, NameBucket(put.name)) + "/" +
                     RecordFileName(enc, put.copy_rank, put.crc);
  env_->RemoveFile(path);
  if (IsHashedEncoding(enc)) env_->RemoveFile(path + kSidecarSuffix);
}

Status RecordStore::BeginPut(uint64_t file_id, uint8_t copy_rank, uint32_t crc,
                             std::string_view name, std::string_view data, const PutMode& mode,
                             PendingPut* put) {
  put->write = false;
  Status s = ValidateRecordName(name);
  if (!s.ok()) return s;
  uint32_t actual = crc32c::Value(data);
  if (actual != crc) {
    char msg[128];
    std::snprintf(
        msg, sizeof(msg),
        "CRC-32C of the %zu data bytes is %08x but the frame says %08x; resend the record",
        data.size(), actual, crc);
    return Status::Corruption(msg);
  }
  std::string key = PutKey(file_id, name);
  if (puts_in_flight_.count(key) != 0) {
    return Status::Unavailable("a PUT of this record is being written");
  }
  RecordMeta* old = nullptr;
  if (auto f = files_.find(file_id); f != files_.end()) {
    auto it = f->second.find(std::string(name));
    if (it != f->second.end()) old = &it->second;
  }
  if (old != nullptr) {
    if (old->copy_rank == copy_rank && old->crc == crc && old->size == data.size()) {
      // An idempotent retry. The copy is now this writer's too: a LEFTOVER
      // PUT must not take it from under a live writer that stored the same
      // bytes after the one that left it.
      if (mode.writer != 0) old->writer = mode.writer;
      return Status::OK();
    }
    // A crashed writer's leftover (paper 4.4): the connection that stored it
    // has closed. Whether it is committed is the client's to check (the
    // infofile); the peer only vouches that its writer is gone.
    const bool writer_gone = old->writer != 0 && writer_open_ && !writer_open_(old->writer);
    if (!mode.replace && !(mode.leftover && writer_gone)) {
      const char* why = !mode.leftover ? "set REPLACE to overwrite it"
                        : old->writer == 0
                            ? "its writer is unknown (stored before this peer started, or "
                              "forwarded down a chain), so LEFTOVER does not replace it"
                            : "the connection that stored it is still open, so LEFTOVER "
                              "does not replace it";
      char msg[320];
      std::snprintf(msg, sizeof(msg),
                    "this peer already holds the record at copy rank %u with CRC %08x; %s",
                    static_cast<unsigned>(old->copy_rank), old->crc, why);
      return Status::AlreadyExists(msg);
    }
  }
  uint64_t old_size = old != nullptr ? old->size : 0;
  uint64_t committed = used_bytes() + reserved_bytes_;
  if (options_.capacity > 0 && committed - old_size + data.size() > options_.capacity) {
    return Status::NoSpace("the peer's capacity of " + std::to_string(options_.capacity) +
                           " bytes would be exceeded (" + std::to_string(used_bytes()) +
                           " bytes used, " + std::to_string(reserved_bytes_) +
                           " bytes being written)");
  }
  if (options_.reserve > 0) {
    uint64_t total, avail;
    s = FsSpace(&total, &avail);
    if (!s.ok()) return s;
    uint64_t want = data.size() + reserved_bytes_;
    if (avail < options_.reserve || avail - options_.reserve < want) {
      return Status::NoSpace("storing " + std::to_string(data.size()) +
                             " bytes would leave less than the reserve of " +
                             std::to_string(options_.reserve) + " bytes free (" +
                             std::to_string(avail) + " bytes free)");
    }
  }
  put->file_id = file_id;
  put->copy_rank = copy_rank;
  put->crc = crc;
  put->name.assign(name.data(), name.size());
  put->size = data.size();
  put->writer = mode.writer;
  put->write = true;
  puts_in_flight_.insert(std::move(key));
  reserved_bytes_ += put->size;
  return Status::OK();
}

Status RecordStore::WritePut(PendingPut* put, std::string_view data) {
  std::string enc = EncodeName(put->name);
  uint8_t bucket = NameBucket(put->name);
  std::string fname = RecordFileName(enc, put->copy_rank, put->crc);
  if (IsHashedEncoding(enc)) {
    Status s = WriteAtomic(put->file_id, bucket, fname + kSidecarSuffix, put->name, nullptr);
    if (!s.ok()) return s;
  }
  Status s = WriteAtomic(put->file_id, bucket, fname, data, &put->ctime_ns);
  if (!s.ok() && IsHashedEncoding(enc)) {
    env_->RemoveFile(BucketDir(put->file_id, bucket) + "/" + fname + kSidecarSuffix);
  }
  return s;
}

Status RecordStore::FinishPut(const PendingPut& put, const Status& written) {
  puts_in_flight_.erase(PutKey(put.file_id, put.name));
  reserved_bytes_ -= put.size;
  if (!written.ok()) {
    if (!written.IsNoSpace()) return written;
    return Status::NoSpace("the filesystem of this peer's data directory " + data_dir_ +
                           " is full (" + written.message() +
                           "); nothing was stored, put the copy on "
                           "another peer");
  }
  std::string enc = EncodeName(put.name);
  uint8_t bucket = NameBucket(put.name);
  std::string fname = RecordFileName(enc, put.copy_rank, put.crc);
  FileIndex& index = files_[put.file_id];
  auto it = index.find(put.name);
  if (it != index.end()) {  // REPLACE: the old copy goes
    std::string old_fname = RecordFileName(enc, it->second.copy_rank, it->second.crc);
    if (old_fname != fname) {
      std::string old_path = BucketDir(put.file_id, bucket) + "/" + old_fname;
      Status r = env_->RemoveFile(old_path);
      if (!r.ok() && !r.IsNotFound()) {
        ST_LOG_WARN("replaced record but could not remove the old copy %s: %s", old_path.c_str(),
                    r.ToString().c_str());
      }
      if (IsHashedEncoding(enc)) env_->RemoveFile(old_path + kSidecarSuffix);
    }
    AddStats(-1, -static_cast<int64_t>(it->second.size));
  }
  RecordMeta meta{put.size, put.crc, put.copy_rank};
  meta.writer = put.writer;
  // The bytes just written matched crc: verified as of the ctime WritePut
  // read from the open file once it had its name.
  meta.verified_ctime_ns = put.ctime_ns;
  index[put.name] = meta;
  AddStats(1, static_cast<int64_t>(put.size));
  return Status::OK();
}

const RecordStore::FileIndex* RecordStore::Find(uint64_t file_id) const {
  auto it = files_.find(file_id);
  return it == files_.end() ? nullptr : &it->second;
}

std::vector<uint64_t> RecordStore::FileIds() const {
  std::vector<uint64_t> ids;
  ids.reserve(files_.size());
  for (const auto& kv : files_) {
    if (!kv.second.empty()) ids.push_back(kv.first);
  }
  return ids;
}

const RecordMeta* RecordStore::Lookup(uint64_t file_id, std::string_view name) const {
  const FileIndex* index = Find(file_id);
  if (index == nullptr) return nullptr;
  auto it = index->find(std::string(name));
  return it == index->end() ? nullptr : &it->second;
}

Status RecordStore::OpenForRead(uint64_t file_id, std::string_view name, ReadHandle* out) {
  const RecordMeta* meta = Lookup(file_id, name);
  if (meta == nullptr) return Status::NotFound("this peer holds no such record");
  std::string path = RecordPath(file_id, name, *meta);
  std::unique_ptr<RandomAccessFile> f;
  Status s = env_->NewRandomAccessFile(path, &f);
  if (s.IsNotFound()) {
    // Removed behind our back: forget it.
    ST_LOG_WARN("record file %s vanished; dropping it from the index", path.c_str());
    AddStats(-1, -static_cast<int64_t>(meta->size));
    files_[file_id].erase(std::string(name));
    return Status::NotFound("this peer holds no such record (its file vanished)");
  }
  if (!s.ok()) return s;
  FileInfo st;
  s = f->Stat(&st);
  if (!s.ok()) return s;
  out->file = std::move(f);
  out->path = std::move(path);
  out->size = st.size;
  out->crc = meta->crc;
  out->copy_rank = meta->copy_rank;
  out->ctime_ns = st.ctime_ns;
  out->verified = meta->verified_ctime_ns == st.ctime_ns;
  out->expected_size = meta->size;
  return Status::OK();
}

Status RecordStore::VerifyRead(const ReadHandle& rec) {
  if (rec.size != rec.expected_size) {
    char msg[160];
    std::snprintf(msg, sizeof(msg), " holds %llu bytes but the record was stored with %llu",
                  static_cast<unsigned long long>(rec.size),
                  static_cast<unsigned long long>(rec.expected_size));
    return Status::Corruption("record file " + rec.path + msg + "; read another copy");
  }
  constexpr size_t kChunk = 256 * 1024;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  uint32_t crc = 0;
  uint64_t off = 0;
  while (off < rec.size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, rec.size - off));
    size_t n = 0;
    Status s = rec.file->Read(off, want, buf.get(), &n);
    if (!s.ok()) return s;
    if (n == 0) return Status::Corruption("record file " + rec.path + " shrank while it was read");
    crc = crc32c::Extend(crc, buf.get(), n);
    off += n;
  }
  if (crc != rec.crc) {
    char msg[160];
    std::snprintf(msg, sizeof(msg),
                  " is corrupt: its %llu bytes have CRC-32C %08x, the record was stored with %08x",
                  static_cast<unsigned long long>(rec.size), crc, rec.crc);
    return Status::Corruption("record file " + rec.path + msg + "; read another copy");
  }
  return Status::OK();
}

void RecordStore::MarkVerified(uint64_t file_id, std::string_view name, const ReadHandle& rec) {
  auto fit = files_.find(file_id);
  if (fit == files_.end()) return;
  auto it = fit->second.find(std::string(name));
  // Only if it is still the copy that was verified.
  if (it == fit->second.end() || it->second.crc != rec.crc ||
      it->second.copy_rank != rec.copy_rank) {
    return;
  }
  it->second.verified_ctime_ns = rec.ctime_ns;
}

Status RecordStore::Get(uint64_t file_id, std::string_view name, OpenRecord* out, bool verify) {
  ReadHandle rec;
  Status s = OpenForRead(file_id, name, &rec);
  if (!s.ok()) return s;
  if (verify && !rec.verified) {
    s = VerifyRead(rec);
    if (!s.ok()) return s;
    MarkVerified(file_id, name, rec);
  }
  out->fd = rec.file->ReleaseFd();
  out->size = rec.size;
  out->crc = rec.crc;
  out->copy_rank = rec.copy_rank;
  return Status::OK();
}

Status RecordStore::Delete(uint64_t file_id, std::string_view name, std::string* dir_to_sync) {
  auto fit = files_.find(file_id);
  if (fit == files_.end()) return Status::NotFound("this peer holds no such record");
  auto it = fit->second.find(std::string(name));
  if (it == fit->second.end()) return Status::NotFound("this peer holds no such record");
  std::string path = RecordPath(file_id, name, it->second);
  Status s = env_->RemoveFile(path);
  if (!s.ok() && !s.IsNotFound()) return s;
  if (IsHashedEncoding(EncodeName(name))) env_->RemoveFile(path + kSidecarSuffix);
  AddStats(-1, -static_cast<int64_t>(it->second.size));
  fit->second.erase(it);
  if (fit->second.empty()) files_.erase(fit);
  if (options_.sync) {
    std::string dir = path.substr(0, path.rfind('/'));
    if (dir_to_sync != nullptr) {
      *dir_to_sync = std::move(dir);
    } else {
      env_->SyncDir(dir);
    }
  }
  return Status::OK();
}

Status RecordStore::DeleteFile(uint64_t file_id, uint64_t* removed) {
  *removed = 0;
  auto fit = files_.find(file_id);
  if (fit != files_.end()) {
    uint64_t bytes = 0;
    for (const auto& kv : fit->second) bytes += kv.second.size;
    *removed = fit->second.size();
    AddStats(-static_cast<int64_t>(*removed), -static_cast<int64_t>(bytes));
    files_.erase(fit);
  }
  std::string dir = FileDir(file_id);
  ForgetFileDir(file_id);
  FileInfo st;
  if (!env_->GetFileInfo(dir, &st).ok()) return Status::OK();
  RemoveEntries(dir);
  Status s = env_->RemoveDir(dir);
  if (!s.ok() && !s.IsNotFound()) return s;
  if (options_.sync) env_->SyncDir(files_dir_);
  return Status::OK();
}

Status RecordStore::RemoveIfStale(uint64_t file_id, std::string_view name, uint8_t copy_rank,
                                  uint32_t crc, double mtime_cutoff, bool* removed) {
  *removed = false;
  auto fit = files_.find(file_id);
  if (fit == files_.end()) return Status::OK();
  auto it = fit->second.find(std::string(name));
  if (it == fit->second.end()) return Status::OK();
  const RecordMeta& meta = it->second;
  if (meta.copy_rank != copy_rank || meta.crc != crc) return Status::OK();
  std::string path = RecordPath(file_id, name, meta);
  FileInfo st;
  Status s = env_->GetFileInfo(path, &st);
  if (!s.ok()) {
    if (!s.IsNotFound()) return s;
  } else {
    if (Seconds(st.mtime_ns) > mtime_cutoff) return Status::OK();
    s = env_->RemoveFile(path);
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  if (IsHashedEncoding(EncodeName(name))) env_->RemoveFile(path + kSidecarSuffix);
  AddStats(-1, -static_cast<int64_t>(meta.size));
  fit->second.erase(it);
  if (fit->second.empty()) files_.erase(fit);
  *removed = true;
  return Status::OK();
}

Status RecordStore::Quarantine(uint64_t file_id, std::string_view name, uint8_t copy_rank,
                               uint32_t crc, bool* moved, std::string* to) {
  *moved = false;
  auto fit = files_.find(file_id);
  if (fit == files_.end()) return Status::OK();
  auto it = fit->second.find(std::string(name));
  if (it == fit->second.end()) return Status::OK();
  const RecordMeta& meta = it->second;
  if (meta.copy_rank != copy_rank || meta.crc != crc) return Status::OK();
  std::string path = RecordPath(file_id, name, meta);
  char dir[32];
  std::snprintf(dir, sizeof(dir), "/%016llx", static_cast<unsigned long long>(file_id));
  std::string qdir = data_dir_ + "/quarantine";
  Status s = MkdirIfMissing(qdir);
  if (s.ok()) s = MkdirIfMissing(qdir + dir);
  if (!s.ok()) return s;
  std::string base = path.substr(path.rfind('/') + 1);
  std::string dst = qdir + dir + "/" + base;
  FileInfo st;
  for (int n = 1; env_->GetFileInfo(dst, &st).ok(); ++n) {  // quarantined before: keep both
    dst = qdir + dir + "/" + base + "." + std::to_string(n);
  }
  s = env_->RenameFile(path, dst);
  if (!s.ok() && !s.IsNotFound()) return s;
  if (IsHashedEncoding(EncodeName(name)))
    env_->RenameFile(path + kSidecarSuffix, dst + kSidecarSuffix);
  AddStats(-1, -static_cast<int64_t>(meta.size));
  fit->second.erase(it);
  if (fit->second.empty()) files_.erase(fit);
  *moved = s.ok();
  *to = dst;
  return Status::OK();
}

Status RecordStore::RemoveTmpIfStale(const std::string& name, double mtime_cutoff, bool* removed) {
  *removed = false;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Status::InvalidArgument("not a temporary file name: " + name);
  }
  std::string path = tmp_dir_ + "/" + name;
  FileInfo st;
  Status s = env_->GetFileInfo(path, &st, /*follow_symlinks=*/false);
  if (!s.ok()) return s.IsNotFound() ? Status::OK() : s;
  if (!st.is_regular || Seconds(st.mtime_ns) > mtime_cutoff) return Status::OK();
  s = env_->RemoveFile(path);
  if (!s.ok()) return s.IsNotFound() ? Status::OK() : s;
  *removed = true;
  return Status::OK();
}

void RecordStore::PruneFileDirs(uint64_t file_id) {
  std::string dir = FileDir(file_id);
  ForgetFileDir(file_id);  // a kept folder is made known again by the next PUT's mkdir
  std::vector<std::string> names;
  if (!env_->GetChildren(dir, &names).ok()) return;
  for (const std::string& b : names) {
    uint64_t n;
    if (ParseLowerHex(b, 2, &n)) env_->RemoveDir(dir + "/" + b);  // fails unless empty
  }
  if (env_->RemoveDir(dir).ok() && options_.sync) env_->SyncDir(files_dir_);
}

}  // namespace st
