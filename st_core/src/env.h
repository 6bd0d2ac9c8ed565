// The peer's window on the operating system, after leveldb's Env
// (include/leveldb/env.h): filesystem operations, the clock, and background
// threads. The record store, the scrubber and the infofile reads go through
// an Env, so a test can put a fault-injecting one in between (EIO, ENOSPC,
// short writes, slow disks; st_core/tests/fault_env.h) without root or a
// full tmpfs.
//
// Every method is safe to call from any thread. Errors are Status values
// made by PosixError (ENOENT -> NotFound, ENOSPC/EDQUOT -> NoSpace, EEXIST ->
// AlreadyExists, anything else -> IOError), with the path in the message.
//
// SQLite reads the infofiles through its own VFS; what the Env gives those
// reads is a background thread (Schedule), so a locked or slow infofile
// never stalls the event loop.
#ifndef ST_CORE_ENV_H_
#define ST_CORE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "status.h"

namespace st {

struct FileInfo {
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // wall clock
  int64_t ctime_ns = 0;  // wall clock; changes on every write, link or chmod
  bool is_regular = false;
  bool is_dir = false;
  uint64_t dev = 0;  // with ino, tells whether two paths name one file
  uint64_t ino = 0;
};

// A file being written. Not thread-safe; one owner at a time.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of data (retrying short writes) or fails.
  virtual Status Append(std::string_view data) = 0;
  // fdatasync: the bytes are on stable storage when it returns OK.
  virtual Status Sync() = 0;
  // Closes the descriptor; later calls return OK. The destructor closes too,
  // ignoring errors.
  virtual Status Close() = 0;
  // Only for a file made by NewAnonymousFile, before Close: gives it the name
  // path (linkat of /proc/self/fd/N), so it appears whole. AlreadyExists if
  // path exists; InvalidArgument if this kind of link is impossible here
  // (no /proc): use a named temporary file and RenameFile instead.
  virtual Status Link(const std::string& path) = 0;
  // fstat of the open file (before Close): its size and times as they are
  // now. The record store reads a new record's ctime here after Link, with
  // no path to look up.
  virtual Status Stat(FileInfo* info) = 0;
};

// A file opened for reading. Not thread-safe; one owner at a time.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into scratch; *got is 0 at end of file.
  virtual Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) = 0;
  virtual Status Stat(FileInfo* info) = 0;
  // Hands the descriptor to the caller (for sendfile); the object keeps none.
  virtual int ReleaseFd() = 0;
};

// Held while a LOCK file is flock()ed; releases it when destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The POSIX Env: process-wide, never destroyed. Its background pool has
  // kDefaultThreads threads, started on first use.
  static Env* Default();
  static constexpr int kDefaultThreads = 4;

  // ---- Files ---------------------------------------------------------------
  // Creates path for writing: exclusive (O_EXCL: AlreadyExists if it exists)
  // or truncating an existing file.
  virtual Status NewWritableFile(const std::string& path, bool exclusive,
                                 std::unique_ptr<WritableFile>* file) = 0;
  // An unnamed file in dir (O_TMPFILE), to be given a name with Link.
  // InvalidArgument if the filesystem of dir has none (use a named temporary
  // file); NotFound if dir does not exist.
  virtual Status NewAnonymousFile(const std::string& dir, std::unique_ptr<WritableFile>* file) = 0;
  virtual Status NewRandomAccessFile(const std::string& path,
                                     std::unique_ptr<RandomAccessFile>* file) = 0;
  // Reads a whole small file; Corruption if it is larger than limit bytes.
  virtual Status ReadSmallFile(const std::string& path, size_t limit, std::string* out);

  // ---- Names ---------------------------------------------------------------
  // The entries of dir, without "." and "..".
  virtual Status GetChildren(const std::string& dir, std::vector<std::string>* names) = 0;
  // stat (or lstat with follow_symlinks false).
  virtual Status GetFileInfo(const std::string& path, FileInfo* info,
                             bool follow_symlinks = true) = 0;
  // unlink; InvalidArgument (not IOError) if path is a directory.
  virtual Status RemoveFile(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // mkdir with mode 0755; AlreadyExists if it exists.
  virtual Status CreateDir(const std::string& path) = 0;
  // rmdir; IOError (ENOTEMPTY) unless empty.
  virtual Status RemoveDir(const std::string& path) = 0;
  // fsync of a directory, making the names created or removed in it durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // syncfs of the filesystem holding path: every file and name written on it
  // so far is durable when it returns OK (the peer's group fsync).
  virtual Status SyncFilesystem(const std::string& path) = 0;
  // The absolute path with symbolic links resolved.
  virtual Status RealPath(const std::string& path, std::string* out) = 0;
  // Takes an exclusive flock on path (created if missing) without waiting;
  // Unavailable if another process holds it.
  virtual Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) = 0;
  // The size of the filesystem holding path and the bytes available to this
  // process (statvfs).
  virtual Status GetFreeSpace(const std::string& path, uint64_t* total, uint64_t* avail) = 0;
  // Asks the filesystem to place the directories made in dir as it places
  // top-level ones: ext4's TOPDIR flag (chattr +T), with which each new
  // subdirectory gets its inodes from a block group of its own choosing
  // (Orlov) instead of dir's. OK if the flag is set (or was);
  // InvalidArgument where the filesystem has no such flag (XFS, btrfs,
  // tmpfs) or this process may not set it. The default does nothing and
  // says InvalidArgument.
  virtual Status SpreadSubdirectories(const std::string& dir);

  // ---- Clock ---------------------------------------------------------------
  virtual double NowMonotonic() = 0;  // seconds
  virtual double NowWall() = 0;       // Unix seconds

  // ---- Background work -----------------------------------------------------
  // Runs work on a background thread, in FIFO order across a pool. Event-loop
  // code does not call this directly: BackgroundWork (background.h) brings the
  // result back to the loop.
  virtual void Schedule(std::function<void()> work) = 0;
};

// Forwards every call to another Env; override what you want to change
// (leveldb's EnvWrapper). The target must outlive the wrapper.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  Status NewWritableFile(const std::string& path, bool exclusive,
                         std::unique_ptr<WritableFile>* file) override {
    return target_->NewWritableFile(path, exclusive, file);
  }
  Status NewAnonymousFile(const std::string& dir, std::unique_ptr<WritableFile>* file) override {
    return target_->NewAnonymousFile(dir, file);
  }
  Status NewRandomAccessFile(const std::string& path,
                             std::unique_ptr<RandomAccessFile>* file) override {
    return target_->NewRandomAccessFile(path, file);
  }
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    return target_->GetChildren(dir, names);
  }
  Status GetFileInfo(const std::string& path, FileInfo* info, bool follow_symlinks) override {
    return target_->GetFileInfo(path, info, follow_symlinks);
  }
  Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  Status CreateDir(const std::string& path) override { return target_->CreateDir(path); }
  Status RemoveDir(const std::string& path) override { return target_->RemoveDir(path); }
  Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  Status SyncFilesystem(const std::string& path) override { return target_->SyncFilesystem(path); }
  Status RealPath(const std::string& path, std::string* out) override {
    return target_->RealPath(path, out);
  }
  Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) override {
    return target_->LockFile(path, lock);
  }
  Status GetFreeSpace(const std::string& path, uint64_t* total, uint64_t* avail) override {
    return target_->GetFreeSpace(path, total, avail);
  }
  Status SpreadSubdirectories(const std::string& dir) override {
    return target_->SpreadSubdirectories(dir);
  }
  double NowMonotonic() override { return target_->NowMonotonic(); }
  double NowWall() override { return target_->NowWall(); }
  void Schedule(std::function<void()> work) override { target_->Schedule(std::move(work)); }

 private:
  Env* target_;
};

}  // namespace st

#endif  // ST_CORE_ENV_H_
