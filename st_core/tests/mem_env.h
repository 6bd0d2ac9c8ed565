// An Env (env.h) that keeps the files under one directory in memory, after
// leveldb's helpers/memenv: the request fuzzer's record store lives there,
// so an input's PUTs, GETs and DELETEs cost no system call and the store is
// emptied and checked without listing a real directory. Every other path
// goes to the target Env (the namespace root and its infofiles, which SQLite
// reads through its own VFS, stay on disk).
//
//   MemEnv env(Env::Default(), "/nonexistent/st-mem/data");
//   opts.env = &env;  opts.data_dir = "/nonexistent/st-mem/data";
//
// The root should be a path that does not exist on disk: code that went
// around the Env would then fail instead of writing there.
//
// Semantics follow POSIX as the POSIX Env reports it: errors are PosixError
// values with the errno a file system would give (ENOENT, EEXIST, ENOTDIR,
// EISDIR, ENOTEMPTY); a file removed or renamed while open stays readable
// through the open handle; every change of a file's bytes or names gives it
// a new ctime. Times come from a counter (one nanosecond per change), not a
// clock, so a run is the same every time. A file handed out with ReleaseFd
// (the peer sends GET bodies with sendfile) becomes a memfd holding a copy
// of its bytes. LockFile locks within this Env only.
//
// Thread-safe (one mutex), as env.h asks.
#ifndef ST_CORE_TESTS_MEM_ENV_H_
#define ST_CORE_TESTS_MEM_ENV_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "env.h"
#include "status.h"

namespace st {
namespace test {

class MemEnv : public EnvWrapper {
 public:
  // root: an absolute path without a trailing slash; it exists (empty) from
  // the start, as do its parents for the purposes of this Env.
  MemEnv(Env* target, std::string root) : EnvWrapper(target), root_(std::move(root)) {
    nodes_[root_] = NewNode(/*dir=*/true);
  }

  const std::string& root() const { return root_; }

  // Every path under root (root itself included) and whether it is a
  // directory, in sorted order: what a recursive listing would show.
  std::vector<std::pair<std::string, bool>> List() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, bool>> out;
    for (const auto& kv : nodes_) out.emplace_back(kv.first, kv.second->dir);
    return out;
  }
  // The bytes of a file under root; false if there is none.
  bool Contents(const std::string& path, std::string* out) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end() || it->second->dir) return false;
    *out = *it->second->data;
    return true;
  }

  Status NewWritableFile(const std::string& path, bool exclusive,
                         std::unique_ptr<WritableFile>* file) override {
    if (!Mine(path)) return EnvWrapper::NewWritableFile(path, exclusive, file);
    std::lock_guard<std::mutex> lock(mu_);
    Status s = CheckParent(path, "create " + path);
    if (!s.ok()) return s;
    auto it = nodes_.find(path);
    std::shared_ptr<Node> node;
    if (it != nodes_.end()) {
      if (exclusive) return PosixError("create " + path, EEXIST);
      if (it->second->dir) return PosixError("create " + path, EISDIR);
      node = it->second;
      node->data->clear();
      Touch(node.get());
    } else {
      node = NewNode(false);
      nodes_[path] = node;
    }
    file->reset(new MemWritableFile(this, node, ""));
    return Status::OK();
  }

  Status NewAnonymousFile(const std::string& dir, std::unique_ptr<WritableFile>* file) override {
    if (!Mine(dir)) return EnvWrapper::NewAnonymousFile(dir, file);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(dir);
    if (it == nodes_.end()) return PosixError("create a file in " + dir, ENOENT);
    if (!it->second->dir) return PosixError("create a file in " + dir, ENOTDIR);
    file->reset(new MemWritableFile(this, NewNode(false), dir));
    return Status::OK();
  }

  Status NewRandomAccessFile(const std::string& path,
                             std::unique_ptr<RandomAccessFile>* file) override {
    if (!Mine(path)) return EnvWrapper::NewRandomAccessFile(path, file);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return PosixError("open " + path, ENOENT);
    file->reset(new MemRandomAccessFile(this, it->second, path));
    return Status::OK();
  }

  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    if (!Mine(dir)) return EnvWrapper::GetChildren(dir, names);
    names->clear();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(dir);
    if (it == nodes_.end()) return PosixError("opendir " + dir, ENOENT);
    if (!it->second->dir) return PosixError("opendir " + dir, ENOTDIR);
    const std::string prefix = dir + "/";
    for (it = nodes_.lower_bound(prefix);
         it != nodes_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (it->first.find('/', prefix.size()) == std::string::npos) {
        names->push_back(it->first.substr(prefix.size()));
      }
    }
    return Status::OK();
  }

  Status GetFileInfo(const std::string& path, FileInfo* info,
                     bool follow_symlinks = true) override {
    if (!Mine(path)) return EnvWrapper::GetFileInfo(path, info, follow_symlinks);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return PosixError("stat " + path, ENOENT);
    Fill(*it->second, info);
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    if (!Mine(path)) return EnvWrapper::RemoveFile(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return PosixError("unlink " + path, ENOENT);
    if (it->second->dir) return Status::InvalidArgument(path + " is a directory");
    nodes_.erase(it);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (!Mine(from) && !Mine(to)) return EnvWrapper::RenameFile(from, to);
    if (Mine(from) != Mine(to)) return PosixError("rename to " + to, EXDEV);
    std::lock_guard<std::mutex> lock(mu_);
    auto src = nodes_.find(from);
    if (src == nodes_.end()) return PosixError("rename to " + to, ENOENT);
    if (src->second->dir) return PosixError("rename to " + to, EINVAL);  // not needed here
    Status s = CheckParent(to, "rename to " + to);
    if (!s.ok()) return s;
    auto dst = nodes_.find(to);
    if (dst != nodes_.end() && dst->second->dir) return PosixError("rename to " + to, EISDIR);
    std::shared_ptr<Node> node = src->second;
    nodes_.erase(src);
    nodes_[to] = node;
    Touch(node.get());
    return Status::OK();
  }

  Status CreateDir(const std::string& path) override {
    if (!Mine(path)) return EnvWrapper::CreateDir(path);
    std::lock_guard<std::mutex> lock(mu_);
    if (nodes_.count(path) != 0) return PosixError("mkdir " + path, EEXIST);
    Status s = CheckParent(path, "mkdir " + path);
    if (!s.ok()) return s;
    nodes_[path] = NewNode(true);
    return Status::OK();
  }

  Status RemoveDir(const std::string& path) override {
    if (!Mine(path)) return EnvWrapper::RemoveDir(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return PosixError("rmdir " + path, ENOENT);
    if (!it->second->dir) return PosixError("rmdir " + path, ENOTDIR);
    if (path == root_) return PosixError("rmdir " + path, EBUSY);
    const std::string prefix = path + "/";
    auto child = nodes_.lower_bound(prefix);
    if (child != nodes_.end() && child->first.compare(0, prefix.size(), prefix) == 0) {
      return PosixError("rmdir " + path, ENOTEMPTY);
    }
    nodes_.erase(it);
    return Status::OK();
  }

  Status SyncDir(const std::string& path) override {
    if (!Mine(path)) return EnvWrapper::SyncDir(path);
    return Exists(path, "open " + path);
  }
  Status SyncFilesystem(const std::string& path) override {
    if (!Mine(path)) return EnvWrapper::SyncFilesystem(path);
    return Exists(path, "open " + path);
  }

  Status RealPath(const std::string& path, std::string* out) override {
    if (!Mine(path)) return EnvWrapper::RealPath(path, out);
    Status s = Exists(path, "realpath " + path);
    if (s.ok()) *out = path;
    return s;
  }

  Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) override {
    if (!Mine(path)) return EnvWrapper::LockFile(path, lock);
    std::lock_guard<std::mutex> guard(mu_);
    Status s = CheckParent(path, "open " + path);
    if (!s.ok()) return s;
    if (nodes_.count(path) == 0) nodes_[path] = NewNode(false);
    if (!locked_.insert(path).second) {
      return Status::Unavailable(path + " is locked by another process");
    }
    lock->reset(new MemLock(this, path));
    return Status::OK();
  }

  Status GetFreeSpace(const std::string& path, uint64_t* total, uint64_t* avail) override {
    if (!Mine(path)) return EnvWrapper::GetFreeSpace(path, total, avail);
    Status s = Exists(path, "statvfs " + path);
    if (!s.ok()) return s;
    *total = kSpace;
    *avail = kSpace;
    return Status::OK();
  }

  static constexpr uint64_t kSpace = uint64_t{1} << 40;

 private:
  struct Node {
    bool dir = false;
    std::shared_ptr<std::string> data;  // a file's bytes
    uint64_t ino = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
  };

  class MemWritableFile : public WritableFile {
   public:
    // anon_dir: the directory of an anonymous file (NewAnonymousFile), "" otherwise.
    MemWritableFile(MemEnv* env, std::shared_ptr<Node> node, std::string anon_dir)
        : env_(env), node_(std::move(node)), anon_dir_(std::move(anon_dir)) {}
    Status Append(std::string_view data) override {
      std::lock_guard<std::mutex> lock(env_->mu_);
      if (closed_) return Status::IOError("write to a closed file");
      node_->data->append(data);
      env_->Touch(node_.get());
      return Status::OK();
    }
    Status Sync() override { return Status::OK(); }
    Status Close() override {
      closed_ = true;
      return Status::OK();
    }
    Status Link(const std::string& path) override {
      if (anon_dir_.empty() || closed_) {
        return Status::InvalidArgument("only an open anonymous file can be linked");
      }
      if (!env_->Mine(path)) return PosixError("link " + path, EXDEV);
      std::lock_guard<std::mutex> lock(env_->mu_);
      Status s = env_->CheckParent(path, "link " + path);
      if (!s.ok()) return s;
      if (env_->nodes_.count(path) != 0) return PosixError("link " + path, EEXIST);
      env_->nodes_[path] = node_;
      env_->Touch(node_.get());
      return Status::OK();
    }
    Status Stat(FileInfo* info) override {
      if (closed_) return Status::InvalidArgument("stat of a closed file");
      std::lock_guard<std::mutex> lock(env_->mu_);
      env_->Fill(*node_, info);
      return Status::OK();
    }

   private:
    MemEnv* env_;
    std::shared_ptr<Node> node_;
    std::string anon_dir_;
    bool closed_ = false;
  };

  class MemRandomAccessFile : public RandomAccessFile {
   public:
    MemRandomAccessFile(MemEnv* env, std::shared_ptr<Node> node, std::string path)
        : env_(env), node_(std::move(node)), path_(std::move(path)) {}
    Status Read(uint64_t offset, size_t n, char* scratch, size_t* got) override {
      std::lock_guard<std::mutex> lock(env_->mu_);
      if (node_->dir) return PosixError("read " + path_, EISDIR);
      const std::string& d = *node_->data;
      *got = offset >= d.size() ? 0 : std::min<size_t>(n, d.size() - offset);
      if (*got > 0) std::memcpy(scratch, d.data() + offset, *got);
      return Status::OK();
    }
    Status Stat(FileInfo* info) override {
      std::lock_guard<std::mutex> lock(env_->mu_);
      env_->Fill(*node_, info);
      return Status::OK();
    }
    int ReleaseFd() override {
      std::string bytes;
      {
        std::lock_guard<std::mutex> lock(env_->mu_);
        if (!node_->dir) bytes = *node_->data;
      }
      int fd = memfd_create("st-mem-env", MFD_CLOEXEC);
      if (fd < 0) return -1;
      size_t done = 0;
      while (done < bytes.size()) {
        ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      return fd;
    }

   private:
    MemEnv* env_;
    std::shared_ptr<Node> node_;
    std::string path_;
  };

  class MemLock : public FileLock {
   public:
    MemLock(MemEnv* env, std::string path) : env_(env), path_(std::move(path)) {}
    ~MemLock() override {
      std::lock_guard<std::mutex> lock(env_->mu_);
      env_->locked_.erase(path_);
    }

   private:
    MemEnv* env_;
    std::string path_;
  };

  bool Mine(const std::string& path) const {
    return path.compare(0, root_.size(), root_) == 0 &&
           (path.size() == root_.size() || path[root_.size()] == '/');
  }

  // mu_ held.
  std::shared_ptr<Node> NewNode(bool dir) {
    auto n = std::make_shared<Node>();
    n->dir = dir;
    if (!dir) n->data = std::make_shared<std::string>();
    n->ino = ++next_ino_;
    Touch(n.get());
    return n;
  }
  void Touch(Node* n) { n->mtime_ns = n->ctime_ns = ++clock_ns_; }
  void Fill(const Node& n, FileInfo* info) const {
    info->size = n.dir ? 0 : n.data->size();
    info->mtime_ns = n.mtime_ns;
    info->ctime_ns = n.ctime_ns;
    info->is_regular = !n.dir;
    info->is_dir = n.dir;
    info->dev = kDev;
    info->ino = n.ino;
  }
  Status CheckParent(const std::string& path, const std::string& context) const {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos || slash < root_.size()) return PosixError(context, ENOENT);
    auto it = nodes_.find(path.substr(0, slash));
    if (it == nodes_.end()) return PosixError(context, ENOENT);
    if (!it->second->dir) return PosixError(context, ENOTDIR);
    return Status::OK();
  }
  Status Exists(const std::string& path, const std::string& context) const {
    std::lock_guard<std::mutex> lock(mu_);
    return nodes_.count(path) != 0 ? Status::OK() : PosixError(context, ENOENT);
  }

  static constexpr uint64_t kDev = 0x5374;  // "St"

  const std::string root_;
  mutable std::mutex mu_;
  // By path. A directory's children are the paths that start with its path
  // and "/" (contiguous in this order, though "dir.x" may sort between).
  std::map<std::string, std::shared_ptr<Node>> nodes_;
  std::set<std::string> locked_;
  uint64_t next_ino_ = 0;
  int64_t clock_ns_ = 0;
};

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_MEM_ENV_H_
