// The POSIX Env (env.h): system calls, CLOCK_MONOTONIC / CLOCK_REALTIME and
// a fixed pool of background threads.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>

#include "env.h"

namespace st {

Status Env::ReadSmallFile(const std::string& path, size_t limit, std::string* out) {
  std::unique_ptr<RandomAccessFile> f;
  Status s = NewRandomAccessFile(path, &f);
  if (!s.ok()) return s;
  out->clear();
  char buf[8192];
  while (true) {
    size_t got = 0;
    s = f->Read(out->size(), sizeof(buf), buf, &got);
    if (!s.ok()) return s;
    if (got == 0) return Status::OK();
    out->append(buf, got);
    if (out->size() > limit) return Status::Corruption(path + " is larger than expected");
  }
}

Status Env::SpreadSubdirectories(const std::string& dir) {
  return Status::InvalidArgument("spreading the subdirectories of " + dir +
                                 " is not supported here");
}

namespace {

int64_t Nanos(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void ToFileInfo(const struct stat& st, FileInfo* info) {
  info->size = static_cast<uint64_t>(st.st_size);
  info->mtime_ns = Nanos(st.st_mtim);
  info->ctime_ns = Nanos(st.st_ctim);
  info->is_regular = S_ISREG(st.st_mode);
  info->is_dir = S_ISDIR(st.st_mode);
  info->dev = static_cast<uint64_t>(st.st_dev);
  info->ino = static_cast<uint64_t>(st.st_ino);
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path, bool anonymous)
      : fd_(fd), path_(std::move(path)), anonymous_(anonymous) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::string_view data) override {
    const char* p = data.data();
    size_t n = data.size();
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return PosixError("write " + path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::OK();
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return PosixError("fsync " + path_, errno);
    return Status::OK();
  }

  Status Close() override {
    if (fd_ < 0) return Status::OK();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return PosixError("close " + path_, errno);
    return Status::OK();
  }

  Status Link(const std::string& path) override {
    if (!anonymous_ || fd_ < 0)
      return Status::InvalidArgument("only an open anonymous file can be linked");
    char proc[64];
    std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd_);
    if (::linkat(AT_FDCWD, proc, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      return Status::OK();
    }
    int err = errno;
    if (err == ENOENT && ::access("/proc/self/fd", F_OK) != 0) {
      return Status::InvalidArgument("no /proc: an anonymous file cannot be given a name");
    }
    return PosixError("link " + path, err);
  }

  Status Stat(FileInfo* info) override {
    struct stat st;
    if (fd_ < 0) return Status::InvalidArgument("stat of a closed file " + path_);
    if (::fstat(fd_, &st) != 0) return PosixError("fstat " + path_, errno);
    ToFileInfo(st, info);
    return Status::OK();
  }

 private:
  int fd_;
  std::string path_;  // for messages: the directory of an anonymous file
  bool anonymous_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixRandomAccessFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) override {
    while (true) {
      ssize_t r = ::pread(fd_, scratch, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return PosixError("read " + path_, errno);
      *got = static_cast<size_t>(r);
      return Status::OK();
    }
  }

  Status Stat(FileInfo* info) override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError("fstat " + path_, errno);
    ToFileInfo(st, info);
    return Status::OK();
  }

  int ReleaseFd() override {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
  std::string path_;
};

class PosixFileLock : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // closing releases the flock

 private:
  int fd_;
};

// A fixed pool of threads serving one FIFO queue; the threads are detached:
// the default Env lives as long as the process (like leveldb's).
class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {}

  void Schedule(std::function<void()> work) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!started_) {
      started_ = true;
      for (int i = 0; i < threads_; ++i) std::thread([this] { Run(); }).detach();
    }
    queue_.push_back(std::move(work));
    cv_.notify_one();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
    }
  }

  int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  std::deque<std::function<void()>> queue_;
};

class PosixEnv : public Env {
 public:
  PosixEnv() : pool_(kDefaultThreads) {}

  Status NewWritableFile(const std::string& path, bool exclusive,
                         std::unique_ptr<WritableFile>* file) override {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return PosixError("create " + path, errno);
    file->reset(new PosixWritableFile(fd, path, false));
    return Status::OK();
  }

  Status NewAnonymousFile(const std::string& dir, std::unique_ptr<WritableFile>* file) override {
    int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      int err = errno;
      if (err == EOPNOTSUPP || err == EISDIR || err == EINVAL) {
        return Status::InvalidArgument("the filesystem of " + dir + " has no O_TMPFILE");
      }
      return PosixError("create a file in " + dir, err);
    }
    file->reset(new PosixWritableFile(fd, dir, true));
    return Status::OK();
  }

  Status NewRandomAccessFile(const std::string& path,
                             std::unique_ptr<RandomAccessFile>* file) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    file->reset(new PosixRandomAccessFile(fd, path));
    return Status::OK();
  }

  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    names->clear();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError("opendir " + dir, errno);
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names->emplace_back(e->d_name);
    }
    ::closedir(d);
    return Status::OK();
  }

  Status GetFileInfo(const std::string& path, FileInfo* info, bool follow_symlinks) override {
    struct stat st;
    int rc = follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
    if (rc != 0) return PosixError("stat " + path, errno);
    ToFileInfo(st, info);
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) == 0) return Status::OK();
    int err = errno;
    if (err == EISDIR) return Status::InvalidArgument(path + " is a directory");
    return PosixError("unlink " + path, err);
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return PosixError("rename to " + to, errno);
    return Status::OK();
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return PosixError("mkdir " + path, errno);
    return Status::OK();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return PosixError("rmdir " + path, errno);
    return Status::OK();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    Status s;
    if (::fsync(fd) != 0) s = PosixError("fsync " + path, errno);
    ::close(fd);
    return s;
  }

  Status SyncFilesystem(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    Status s;
    if (::syncfs(fd) != 0) s = PosixError("fsync (syncfs) of the filesystem of " + path, errno);
    ::close(fd);
    return s;
  }

  Status RealPath(const std::string& path, std::string* out) override {
    char real[PATH_MAX];
    if (::realpath(path.c_str(), real) == nullptr) return PosixError("realpath " + path, errno);
    *out = real;
    return Status::OK();
  }

  Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError("open " + path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return Status::Unavailable(path + " is locked by another process");
      return PosixError("flock " + path, err);
    }
    lock->reset(new PosixFileLock(fd));
    return Status::OK();
  }

  Status GetFreeSpace(const std::string& path, uint64_t* total, uint64_t* avail) override {
    struct statvfs vfs;
    if (::statvfs(path.c_str(), &vfs) != 0) return PosixError("statvfs " + path, errno);
    *total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    *avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    return Status::OK();
  }

  Status SpreadSubdirectories(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + dir, errno);
    int flags = 0;
    Status s;
    if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) {
      s = Status::InvalidArgument("no inode flags on the filesystem of " + dir + ": " +
                                  std::strerror(errno));
    } else if (!(flags & FS_TOPDIR_FL)) {
      flags |= FS_TOPDIR_FL;
      if (::ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0) {
        s = Status::InvalidArgument("cannot set the TOPDIR flag of " + dir + ": " +
                                    std::strerror(errno));
      }
    }
    ::close(fd);
    return s;
  }

  double NowMonotonic() override {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }

  double NowWall() override {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }

  void Schedule(std::function<void()> work) override { pool_.Schedule(std::move(work)); }

 private:
  ThreadPool pool_;
};

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv();  // never destroyed: its threads may still run at exit
  return env;
}

}  // namespace st
