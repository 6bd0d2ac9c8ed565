#include "record_store.h"

#include "coding.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "crc32c.h"
#include "log.h"
#include "name_codec.h"
#include "protocol.h"

namespace st {
namespace {

Status MkdirIfMissing(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return PosixError("mkdir " + path, errno);
  return Status::OK();
}

Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PosixError("open " + path, errno);
  Status s;
  if (::fsync(fd) != 0) s = PosixError("fsync " + path, errno);
  ::close(fd);
  return s;
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return PosixError("write " + path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status ReadSmallFile(const std::string& path, std::string* out, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PosixError("open " + path, errno);
  out->clear();
  char buf[8192];
  Status s;
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      s = PosixError("read " + path, errno);
      break;
    }
    if (r == 0) break;
    out->append(buf, static_cast<size_t>(r));
    if (out->size() > limit) {
      s = Status::Corruption(path + " is larger than expected");
      break;
    }
  }
  ::close(fd);
  return s;
}

// Removes every entry of a directory (not recursively).
void RemoveEntries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    std::string p = dir + "/" + e->d_name;
    if (::unlink(p.c_str()) != 0 && errno == EISDIR) {
      RemoveEntries(p);
      ::rmdir(p.c_str());
    }
  }
  ::closedir(d);
}

std::string NewUuid() {
  unsigned char b[16];
  bool ok = false;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ok = ::read(fd, b, sizeof(b)) == static_cast<ssize_t>(sizeof(b));
    ::close(fd);
  }
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

}  // namespace

RecordStore::RecordStore(const StoreOptions& options) : options_(options) {}

RecordStore::~RecordStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status RecordStore::Open(const StoreOptions& options, std::unique_ptr<RecordStore>* store) {
  std::unique_ptr<RecordStore> s(new RecordStore(options));
  Status st = s->Init();
  if (!st.ok()) return st;
  *store = std::move(s);
  return Status::OK();
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
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real) == nullptr) return PosixError("realpath " + path, errno);
  data_dir_ = real;
  tmp_dir_ = data_dir_ + "/tmp";
  files_dir_ = data_dir_ + "/files";

  std::string lock_path = data_dir_ + "/LOCK";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return PosixError("open " + lock_path, errno);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Status::IOError("data directory " + data_dir_ +
                             " is in use by another st-peer (LOCK is held)");
    }
    return PosixError("flock " + lock_path, errno);
  }

  Status s = MkdirIfMissing(tmp_dir_);
  if (s.ok()) s = MkdirIfMissing(files_dir_);
  if (s.ok()) s = CleanTmp();
  if (s.ok()) s = LoadPeerId();
  if (s.ok()) s = Scan();
  return s;
}

Status RecordStore::CleanTmp() {
  DIR* d = ::opendir(tmp_dir_.c_str());
  if (d == nullptr) return PosixError("opendir " + tmp_dir_, errno);
  size_t removed = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    std::string p = tmp_dir_ + "/" + e->d_name;
    if (::unlink(p.c_str()) == 0) {
      ++removed;
    } else if (errno == EISDIR) {
      RemoveEntries(p);
      ::rmdir(p.c_str());
      ++removed;
    }
  }
  ::closedir(d);
  if (removed > 0) ST_LOG_INFO("removed %zu leftover temporary files from %s", removed, tmp_dir_.c_str());
  return Status::OK();
}

Status RecordStore::LoadPeerId() {
  std::string path = data_dir_ + "/PEER_ID";
  std::string content;
  Status s = ReadSmallFile(path, &content, 4096);
  if (s.ok()) {
    while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.pop_back();
    if (content.empty()) return Status::Corruption(path + " is empty; remove it to make a new identity");
    peer_id_ = content;
    return Status::OK();
  }
  if (!s.IsNotFound()) return s;
  // Create it once, durably: temp file, fsync, rename, fsync the directory.
  peer_id_ = NewUuid();
  std::string tmp = tmp_dir_ + "/PEER_ID.tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return PosixError("open " + tmp, errno);
  std::string line = peer_id_ + "\n";
  s = WriteAll(fd, line.data(), line.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = PosixError("fsync " + tmp, errno);
  if (::close(fd) != 0 && s.ok()) s = PosixError("close " + tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = PosixError("rename " + tmp, errno);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  FsyncPath(data_dir_);
  ST_LOG_INFO("created peer identity %s in %s", peer_id_.c_str(), path.c_str());
  return Status::OK();
}

Status RecordStore::Scan() {
  DIR* d = ::opendir(files_dir_.c_str());
  if (d == nullptr) return PosixError("opendir " + files_dir_, errno);
  std::vector<std::pair<uint64_t, std::string>> dirs;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    uint64_t file_id;
    if (!ParseLowerHex(e->d_name, 16, &file_id)) {
      ST_LOG_WARN("ignoring unexpected entry %s/%s", files_dir_.c_str(), e->d_name);
      continue;
    }
    dirs.emplace_back(file_id, files_dir_ + "/" + e->d_name);
  }
  ::closedir(d);
  for (const auto& [file_id, dir] : dirs) {
    Status s = ScanFile(file_id, dir);
    if (!s.ok()) return s;
  }
  ST_LOG_INFO("record store %s: %llu records, %llu bytes in %zu files", data_dir_.c_str(),
              static_cast<unsigned long long>(record_count()),
              static_cast<unsigned long long>(used_bytes()), files_.size());
  return Status::OK();
}

Status RecordStore::ScanFile(uint64_t file_id, const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return PosixError("opendir " + dir, errno);
  std::vector<std::string> buckets;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    uint64_t b;
    if (!ParseLowerHex(e->d_name, 2, &b)) {
      ST_LOG_WARN("ignoring unexpected entry %s/%s", dir.c_str(), e->d_name);
      continue;
    }
    buckets.push_back(e->d_name);
  }
  ::closedir(d);

  FileIndex& index = files_[file_id];
  // Where each indexed name came from, to settle duplicates (a crash during a
  // REPLACE can leave the old and the new copy): the newer one wins.
  struct Origin {
    std::string path;
    struct timespec ctime;
  };
  std::unordered_map<std::string, Origin> origins;

  for (const std::string& bucket : buckets) {
    std::string bdir = dir + "/" + bucket;
    DIR* bd = ::opendir(bdir.c_str());
    if (bd == nullptr) return PosixError("opendir " + bdir, errno);
    std::vector<std::string> sidecars;
    std::unordered_map<std::string, bool> record_files;
    std::vector<std::string> entries;
    while (struct dirent* e = ::readdir(bd)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      entries.emplace_back(e->d_name);
    }
    ::closedir(bd);
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
        Status s = ReadSmallFile(path + kSidecarSuffix, &name, kMaxRecordName + 1);
        if (!s.ok() || EncodeName(name) != enc) {
          ST_LOG_WARN("ignoring %s: its name file is missing or does not match", path.c_str());
          continue;
        }
      } else if (!DecodeEncodedName(enc, &name)) {
        ST_LOG_WARN("ignoring %s: not a canonical record name encoding", path.c_str());
        continue;
      }
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        ST_LOG_WARN("ignoring %s: not a regular file", path.c_str());
        continue;
      }
      record_files[fname] = true;
      RecordMeta meta{static_cast<uint64_t>(st.st_size), crc, rank};
      auto it = index.find(name);
      if (it != index.end()) {
        Origin& prev = origins[name];
        bool newer = st.st_ctim.tv_sec > prev.ctime.tv_sec ||
                     (st.st_ctim.tv_sec == prev.ctime.tv_sec &&
                      st.st_ctim.tv_nsec > prev.ctime.tv_nsec);
        const std::string& loser = newer ? prev.path : path;
        ST_LOG_WARN("two copies of record '%s' of file %016llx; keeping the newer, removing %s",
                    Printable(name).c_str(), static_cast<unsigned long long>(file_id),
                    loser.c_str());
        ::unlink(loser.c_str());
        ::unlink((loser + kSidecarSuffix).c_str());
        if (!newer) continue;
        AddStats(-1, -static_cast<int64_t>(it->second.size));
        it->second = meta;
        prev = Origin{path, st.st_ctim};
      } else {
        index.emplace(name, meta);
        origins[name] = Origin{path, st.st_ctim};
      }
      AddStats(1, static_cast<int64_t>(meta.size));
    }
    for (const std::string& sc : sidecars) {
      std::string rec = sc.substr(0, sc.size() - std::strlen(kSidecarSuffix));
      if (record_files.count(rec) == 0) {
        // A sidecar whose record never made it (crash between the two renames).
        std::string p = bdir + "/" + sc;
        std::string_view enc;
        uint8_t rank;
        uint32_t crc;
        if (ParseRecordFileName(rec, &enc, &rank, &crc)) {
          struct stat st;
          if (::stat((bdir + "/" + rec).c_str(), &st) != 0) ::unlink(p.c_str());
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
  struct statvfs vfs;
  if (::statvfs(data_dir_.c_str(), &vfs) != 0) return PosixError("statvfs " + data_dir_, errno);
  *total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  *avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return Status::OK();
}

Status RecordStore::MakeBucketDir(uint64_t file_id, uint8_t bucket) {
  std::string fdir = FileDir(file_id);
  std::string bdir = BucketDir(file_id, bucket);
  bool created_file_dir = ::mkdir(fdir.c_str(), 0755) == 0;
  if (!created_file_dir && errno != EEXIST) return PosixError("mkdir " + fdir, errno);
  if (::mkdir(bdir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return PosixError("mkdir " + bdir, errno);
    return Status::OK();
  }
  if (options_.sync) {
    if (created_file_dir) FsyncPath(files_dir_);
    FsyncPath(fdir);
  }
  return Status::OK();
}

Status RecordStore::WriteLinked(const std::string& bdir, const std::string& dst, std::string_view data,
                                bool* fall_back) {
  *fall_back = false;
  int fd = ::open(bdir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {  // no O_TMPFILE here
      ST_LOG_INFO("the filesystem of %s has no O_TMPFILE: records are written to temp files and renamed",
                  bdir.c_str());
      use_tmpfile_ = false;
      *fall_back = true;
      return Status::OK();
    }
    return PosixError("create a file in " + bdir, errno);  // ENOENT: the caller makes the bucket
  }
  Status s = WriteAll(fd, data.data(), data.size(), dst);
  if (s.ok() && options_.sync && ::fdatasync(fd) != 0) s = PosixError("fsync " + dst, errno);
  if (s.ok()) {
    char proc[64];
    std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (::linkat(AT_FDCWD, proc, AT_FDCWD, dst.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      int err = errno;
      if (err == EEXIST) {
        *fall_back = true;  // a same-named file (REPLACE of the same rank and CRC): rename over it
      } else if (err == ENOENT && ::access("/proc/self/fd", F_OK) != 0) {
        ST_LOG_INFO("no /proc: records are written to temp files and renamed");
        use_tmpfile_ = false;
        *fall_back = true;
      } else {
        s = PosixError("link " + dst, err);
      }
    }
  }
  // Closing an unlinked O_TMPFILE file frees it: a failed or interrupted
  // PUT leaves nothing behind, not even a temp file for the scrubber.
  if (::close(fd) != 0 && s.ok() && !*fall_back) s = PosixError("close " + dst, errno);
  return s;
}

Status RecordStore::WriteAtomic(uint64_t file_id, uint8_t bucket, const std::string& name,
                                std::string_view data) {
  std::string bdir = BucketDir(file_id, bucket);
  std::string dst = bdir + "/" + name;
  if (use_tmpfile_) {
    bool fall_back = false;
    Status s = WriteLinked(bdir, dst, data, &fall_back);
    if (!s.ok() && ::access(bdir.c_str(), F_OK) != 0) {  // the first record of this bucket
      s = MakeBucketDir(file_id, bucket);
      if (s.ok()) s = WriteLinked(bdir, dst, data, &fall_back);
    }
    if (!fall_back) {
      if (!s.ok()) return s;
      return options_.sync ? FsyncPath(bdir) : Status::OK();
    }
  }
  char tmp_name[64];
  std::snprintf(tmp_name, sizeof(tmp_name), "/%d-%llu.tmp", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(++tmp_counter_));
  std::string tmp = tmp_dir_ + tmp_name;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return PosixError("create " + tmp, errno);
  Status s = WriteAll(fd, data.data(), data.size(), tmp);
  if (s.ok() && options_.sync && ::fdatasync(fd) != 0) s = PosixError("fsync " + tmp, errno);
  if (::close(fd) != 0 && s.ok()) s = PosixError("close " + tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), dst.c_str()) != 0) {
    if (errno == ENOENT) {
      s = MakeBucketDir(file_id, bucket);
      if (s.ok() && ::rename(tmp.c_str(), dst.c_str()) != 0) s = PosixError("rename to " + dst, errno);
    } else {
      s = PosixError("rename to " + dst, errno);
    }
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (options_.sync) return FsyncPath(bdir);
  return Status::OK();
}

Status RecordStore::Put(uint64_t file_id, uint8_t copy_rank, uint32_t crc, std::string_view name,
                        std::string_view data, bool replace) {
  Status s = ValidateRecordName(name);
  if (!s.ok()) return s;
  uint32_t actual = crc32c::Value(data);
  if (actual != crc) {
    char msg[128];
    std::snprintf(msg, sizeof(msg),
                  "CRC-32C of the %zu data bytes is %08x but the frame says %08x; resend the record",
                  data.size(), actual, crc);
    return Status::Corruption(msg);
  }
  FileIndex* index = nullptr;
  auto fit = files_.find(file_id);
  if (fit != files_.end()) index = &fit->second;
  const RecordMeta* old = nullptr;
  if (index != nullptr) {
    auto it = index->find(std::string(name));
    if (it != index->end()) old = &it->second;
  }
  if (old != nullptr) {
    if (old->copy_rank == copy_rank && old->crc == crc && old->size == data.size()) {
      return Status::OK();  // idempotent retry
    }
    if (!replace) {
      char msg[160];
      std::snprintf(msg, sizeof(msg),
                    "this peer already holds the record at copy rank %u with CRC %08x; "
                    "set REPLACE to overwrite it",
                    static_cast<unsigned>(old->copy_rank), old->crc);
      return Status::AlreadyExists(msg);
    }
  }
  uint64_t old_size = old != nullptr ? old->size : 0;
  if (options_.capacity > 0 && used_bytes() - old_size + data.size() > options_.capacity) {
    return Status::NoSpace("the peer's capacity of " + std::to_string(options_.capacity) +
                           " bytes would be exceeded (" + std::to_string(used_bytes()) +
                           " bytes used)");
  }
  if (options_.reserve > 0) {
    uint64_t total, avail;
    s = FsSpace(&total, &avail);
    if (!s.ok()) return s;
    if (avail < options_.reserve || avail - options_.reserve < data.size()) {
      return Status::NoSpace("storing " + std::to_string(data.size()) + " bytes would leave less than the reserve of " +
                             std::to_string(options_.reserve) + " bytes free (" +
                             std::to_string(avail) + " bytes free)");
    }
  }

  std::string enc = EncodeName(name);
  uint8_t bucket = NameBucket(name);
  std::string fname = RecordFileName(enc, copy_rank, crc);
  bool hashed = IsHashedEncoding(enc);
  auto full = [&](const Status& st) {
    if (!st.IsNoSpace()) return st;
    return Status::NoSpace("the filesystem of this peer's data directory " + data_dir_ +
                           " is full (" + st.message() + "); nothing was stored, put the copy on "
                           "another peer");
  };
  if (hashed) {
    s = WriteAtomic(file_id, bucket, fname + kSidecarSuffix, name);
    if (!s.ok()) return full(s);
  }
  s = WriteAtomic(file_id, bucket, fname, data);
  if (!s.ok()) {
    if (hashed) ::unlink((BucketDir(file_id, bucket) + "/" + fname + kSidecarSuffix).c_str());
    return full(s);
  }
  if (index == nullptr) index = &files_[file_id];
  if (old != nullptr) {
    std::string old_fname = RecordFileName(enc, old->copy_rank, old->crc);
    if (old_fname != fname) {
      std::string old_path = BucketDir(file_id, bucket) + "/" + old_fname;
      if (::unlink(old_path.c_str()) != 0 && errno != ENOENT) {
        ST_LOG_WARN("replaced record but could not remove the old copy %s: %s", old_path.c_str(),
                    std::strerror(errno));
      }
      if (hashed) ::unlink((old_path + kSidecarSuffix).c_str());
    }
    AddStats(-1, -static_cast<int64_t>(old->size));
  }
  RecordMeta meta{data.size(), crc, copy_rank};
  struct stat st;  // the bytes just written matched crc: verified as of this ctime
  if (::stat((BucketDir(file_id, bucket) + "/" + fname).c_str(), &st) == 0) {
    meta.verified_ctime_ns = CtimeNs(st);
  }
  (*index)[std::string(name)] = meta;
  AddStats(1, static_cast<int64_t>(data.size()));
  return Status::OK();
}

const RecordStore::FileIndex* RecordStore::Find(uint64_t file_id) const {
  auto it = files_.find(file_id);
  return it == files_.end() ? nullptr : &it->second;
}

const RecordMeta* RecordStore::Lookup(uint64_t file_id, std::string_view name) const {
  const FileIndex* index = Find(file_id);
  if (index == nullptr) return nullptr;
  auto it = index->find(std::string(name));
  return it == index->end() ? nullptr : &it->second;
}

int64_t RecordStore::CtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}

Status RecordStore::VerifyFile(int fd, const std::string& path, uint64_t size,
                               const RecordMeta& meta) {
  if (size != meta.size) {
    char msg[160];
    std::snprintf(msg, sizeof(msg), " holds %llu bytes but the record was stored with %llu",
                  static_cast<unsigned long long>(size), static_cast<unsigned long long>(meta.size));
    return Status::Corruption("record file " + path + msg + "; read another copy");
  }
  constexpr size_t kChunk = 256 * 1024;
  if (!scratch_) scratch_.reset(new char[kChunk]);
  uint32_t crc = 0;
  uint64_t off = 0;
  while (off < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
    ssize_t n = ::pread(fd, scratch_.get(), want, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("read " + path, errno);
    if (n == 0) return Status::Corruption("record file " + path + " shrank while it was read");
    crc = crc32c::Extend(crc, scratch_.get(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  if (crc != meta.crc) {
    char msg[160];
    std::snprintf(msg, sizeof(msg),
                  " is corrupt: its %llu bytes have CRC-32C %08x, the record was stored with %08x",
                  static_cast<unsigned long long>(size), crc, meta.crc);
    return Status::Corruption("record file " + path + msg + "; read another copy");
  }
  return Status::OK();
}

Status RecordStore::Get(uint64_t file_id, std::string_view name, OpenRecord* out, bool verify) {
  const RecordMeta* meta = Lookup(file_id, name);
  if (meta == nullptr) return Status::NotFound("this peer holds no such record");
  std::string path = RecordPath(file_id, name, *meta);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      // Removed behind our back: forget it.
      ST_LOG_WARN("record file %s vanished; dropping it from the index", path.c_str());
      AddStats(-1, -static_cast<int64_t>(meta->size));
      files_[file_id].erase(std::string(name));
      return Status::NotFound("this peer holds no such record (its file vanished)");
    }
    return PosixError("open " + path, err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = PosixError("fstat " + path, errno);
    ::close(fd);
    return s;
  }
  if (verify && meta->verified_ctime_ns != CtimeNs(st)) {
    Status s = VerifyFile(fd, path, static_cast<uint64_t>(st.st_size), *meta);
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
    files_[file_id][std::string(name)].verified_ctime_ns = CtimeNs(st);
  }
  out->fd = fd;
  out->size = static_cast<uint64_t>(st.st_size);
  out->crc = meta->crc;
  out->copy_rank = meta->copy_rank;
  return Status::OK();
}

Status RecordStore::Delete(uint64_t file_id, std::string_view name) {
  auto fit = files_.find(file_id);
  if (fit == files_.end()) return Status::NotFound("this peer holds no such record");
  auto it = fit->second.find(std::string(name));
  if (it == fit->second.end()) return Status::NotFound("this peer holds no such record");
  std::string path = RecordPath(file_id, name, it->second);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return PosixError("unlink " + path, errno);
  if (IsHashedEncoding(EncodeName(name))) ::unlink((path + kSidecarSuffix).c_str());
  if (options_.sync) FsyncPath(path.substr(0, path.rfind('/')));
  AddStats(-1, -static_cast<int64_t>(it->second.size));
  fit->second.erase(it);
  if (fit->second.empty()) files_.erase(fit);
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
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::OK();
  RemoveEntries(dir);
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return PosixError("rmdir " + dir, errno);
  if (options_.sync) FsyncPath(files_dir_);
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
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return PosixError("stat " + path, errno);
  } else {
    double mtime = static_cast<double>(st.st_mtim.tv_sec) +
                   static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
    if (mtime > mtime_cutoff) return Status::OK();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return PosixError("unlink " + path, errno);
  }
  if (IsHashedEncoding(EncodeName(name))) ::unlink((path + kSidecarSuffix).c_str());
  AddStats(-1, -static_cast<int64_t>(meta.size));
  fit->second.erase(it);
  if (fit->second.empty()) files_.erase(fit);
  *removed = true;
  return Status::OK();
}

Status RecordStore::RemoveTmpIfStale(const std::string& name, double mtime_cutoff, bool* removed) {
  *removed = false;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Status::InvalidArgument("not a temporary file name: " + name);
  }
  std::string path = tmp_dir_ + "/" + name;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? Status::OK() : PosixError("stat " + path, errno);
  }
  double mtime =
      static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
  if (!S_ISREG(st.st_mode) || mtime > mtime_cutoff) return Status::OK();
  if (::unlink(path.c_str()) != 0) {
    return errno == ENOENT ? Status::OK() : PosixError("unlink " + path, errno);
  }
  *removed = true;
  return Status::OK();
}

void RecordStore::PruneFileDirs(uint64_t file_id) {
  std::string dir = FileDir(file_id);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> buckets;
  while (struct dirent* e = ::readdir(d)) {
    uint64_t b;
    if (ParseLowerHex(e->d_name, 2, &b)) buckets.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const std::string& b : buckets) ::rmdir((dir + "/" + b).c_str());  // fails unless empty
  if (::rmdir(dir.c_str()) == 0 && options_.sync) FsyncPath(files_dir_);
}

}  // namespace st
