// A fault-injecting Env for the tests (issue 11; leveldb's tests do the same
// with their FaultInjectionTestEnv): disk errors, short writes and slow or
// stuck disks, without root or a full tmpfs.
//
//   FaultEnv env(Env::Default());
//   env.Inject(FaultEnv::kWrite, Fault::ShortWrite(10, ENOSPC).On("/data/files/"));
//   env.Inject(FaultEnv::kSyncFile, Fault::Stuck());   // until Release()
//
// A fault applies to every operation of its kind whose path contains
// `path_contains`, `times` times (-1: until Clear()). Errors are reported the
// way the POSIX Env reports errno (PosixError).
#ifndef ST_CORE_TESTS_FAULT_ENV_H_
#define ST_CORE_TESTS_FAULT_ENV_H_

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "env.h"

namespace st {
namespace test {

class FaultEnv : public EnvWrapper {
 public:
  enum Op {
    kCreate,    // NewWritableFile, NewAnonymousFile
    kWrite,     // WritableFile::Append
    kSyncFile,  // WritableFile::Sync
    kLink,      // WritableFile::Link, RenameFile
    kOpen,      // NewRandomAccessFile
    kRead,      // RandomAccessFile::Read
    kSyncDir,   // SyncDir
    kMkdir,     // CreateDir
    kList,      // GetChildren
    kStat,      // GetFileInfo (a path's stat; WritableFile::Stat, an fstat, is not counted)
    kOpCount
  };

  struct Fault {
    int err = 0;                      // errno to fail with; 0: do not fail
    size_t short_bytes = SIZE_MAX;    // kWrite: write this many bytes first, then fail
    bool block = false;               // wait until Release() (a stuck disk), then go on
    std::string path_contains;        // empty: any path
    int times = -1;                   // -1: until Clear()

    static Fault Error(int err) {
      Fault f;
      f.err = err;
      return f;
    }
    // Writes `bytes` of the data, then fails with err (a disk filling up).
    static Fault ShortWrite(size_t bytes, int err) {
      Fault f = Error(err);
      f.short_bytes = bytes;
      return f;
    }
    static Fault Stuck() {
      Fault f;
      f.block = true;
      return f;
    }
    Fault On(std::string path_part) && {
      path_contains = std::move(path_part);
      return std::move(*this);
    }
    Fault Times(int n) && {
      times = n;
      return std::move(*this);
    }
  };

  explicit FaultEnv(Env* target) : EnvWrapper(target) {}

  void Inject(Op op, Fault f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (f.block) released_ = false;
    faults_[op] = std::move(f);
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.clear();
  }
  // Lets every blocked operation (and later ones of a blocking fault) go on.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    for (auto& kv : faults_) kv.second.block = false;
    cv_.notify_all();
  }
  // Operations waiting in a blocking fault now.
  int blocked() const { return blocked_.load(); }
  // Operations of a kind so far (faulty or not).
  uint64_t calls(Op op) const { return calls_[op].load(); }
  // Faults that fired (errors returned, short writes, blocks).
  uint64_t fired() const { return fired_.load(); }

  // Applies the fault for op on path, if any: blocks if it blocks; returns
  // its errno (0: go on) and, for writes, how many bytes to write first.
  int Check(Op op, std::string_view path, size_t* short_bytes = nullptr) {
    ++calls_[op];
    std::unique_lock<std::mutex> lock(mu_);
    auto it = faults_.find(op);
    if (it == faults_.end()) return 0;
    Fault& f = it->second;
    if (!f.path_contains.empty() && path.find(f.path_contains) == std::string_view::npos) return 0;
    if (f.times == 0) return 0;
    if (f.times > 0) --f.times;
    ++fired_;
    if (f.block && !released_) {
      ++blocked_;
      cv_.wait(lock, [this] { return released_; });
      --blocked_;
    }
    if (short_bytes != nullptr) *short_bytes = f.short_bytes;
    return f.err;
  }

  Status NewWritableFile(const std::string& path, bool exclusive,
                         std::unique_ptr<WritableFile>* file) override {
    if (int e = Check(kCreate, path)) return PosixError("create " + path, e);
    std::unique_ptr<WritableFile> f;
    Status s = target()->NewWritableFile(path, exclusive, &f);
    if (s.ok()) file->reset(new File(this, std::move(f), path));
    return s;
  }
  Status NewAnonymousFile(const std::string& dir, std::unique_ptr<WritableFile>* file) override {
    if (int e = Check(kCreate, dir)) {
      if (e == EOPNOTSUPP) return Status::InvalidArgument("no O_TMPFILE (injected)");
      return PosixError("create a file in " + dir, e);
    }
    std::unique_ptr<WritableFile> f;
    Status s = target()->NewAnonymousFile(dir, &f);
    if (s.ok()) file->reset(new File(this, std::move(f), dir));
    return s;
  }
  Status NewRandomAccessFile(const std::string& path,
                             std::unique_ptr<RandomAccessFile>* file) override {
    if (int e = Check(kOpen, path)) return PosixError("open " + path, e);
    std::unique_ptr<RandomAccessFile> f;
    Status s = target()->NewRandomAccessFile(path, &f);
    if (s.ok()) file->reset(new Reader(this, std::move(f), path));
    return s;
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (int e = Check(kLink, to)) return PosixError("rename to " + to, e);
    return target()->RenameFile(from, to);
  }
  // The group fsync counts as kSyncFile: it is what makes record files durable.
  Status SyncFilesystem(const std::string& path) override {
    if (int e = Check(kSyncFile, path)) return PosixError("fsync (syncfs) " + path, e);
    return target()->SyncFilesystem(path);
  }
  Status SyncDir(const std::string& path) override {
    if (int e = Check(kSyncDir, path)) return PosixError("fsync " + path, e);
    return target()->SyncDir(path);
  }
  Status CreateDir(const std::string& path) override {
    if (int e = Check(kMkdir, path)) return PosixError("mkdir " + path, e);
    return target()->CreateDir(path);
  }
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    if (int e = Check(kList, dir)) return PosixError("opendir " + dir, e);
    return target()->GetChildren(dir, names);
  }
  Status GetFileInfo(const std::string& path, FileInfo* info, bool follow_symlinks) override {
    if (int e = Check(kStat, path)) return PosixError("stat " + path, e);
    return target()->GetFileInfo(path, info, follow_symlinks);
  }

 private:
  class File : public WritableFile {
   public:
    File(FaultEnv* env, std::unique_ptr<WritableFile> f, std::string path)
        : env_(env), f_(std::move(f)), path_(std::move(path)) {}
    Status Append(std::string_view data) override {
      size_t first = SIZE_MAX;
      if (int e = env_->Check(kWrite, path_, &first)) {
        if (first != SIZE_MAX) f_->Append(data.substr(0, std::min(first, data.size())));
        return PosixError("write " + path_, e);
      }
      return f_->Append(data);
    }
    Status Sync() override {
      if (int e = env_->Check(kSyncFile, path_)) return PosixError("fsync " + path_, e);
      return f_->Sync();
    }
    Status Close() override { return f_->Close(); }
    Status Link(const std::string& path) override {
      if (int e = env_->Check(kLink, path)) return PosixError("link " + path, e);
      return f_->Link(path);
    }
    Status Stat(FileInfo* info) override { return f_->Stat(info); }

   private:
    FaultEnv* env_;
    std::unique_ptr<WritableFile> f_;
    std::string path_;
  };

  class Reader : public RandomAccessFile {
   public:
    Reader(FaultEnv* env, std::unique_ptr<RandomAccessFile> f, std::string path)
        : env_(env), f_(std::move(f)), path_(std::move(path)) {}
    Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) override {
      if (int e = env_->Check(kRead, path_)) return PosixError("read " + path_, e);
      return f_->Read(offset, n, scratch, got);
    }
    Status Stat(FileInfo* info) override { return f_->Stat(info); }
    int ReleaseFd() override { return f_->ReleaseFd(); }

   private:
    FaultEnv* env_;
    std::unique_ptr<RandomAccessFile> f_;
    std::string path_;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Op, Fault> faults_;
  bool released_ = false;
  std::atomic<int> blocked_{0};
  std::atomic<uint64_t> calls_[kOpCount] = {};
  std::atomic<uint64_t> fired_{0};
};

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_FAULT_ENV_H_
