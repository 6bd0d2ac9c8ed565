#include "fs_check.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>

namespace st {
namespace {
constexpr unsigned long kExt4Magic = 0xEF53;  // EXT2/3/4_SUPER_MAGIC (linux/magic.h)
}  // namespace

Status Ext4Journal(const std::string& sys_root, unsigned major, unsigned minor, std::string* device,
                   bool* journal) {
  std::string link = sys_root + "/dev/block/" + std::to_string(major) + ":" + std::to_string(minor);
  char target[PATH_MAX];
  ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
  if (n < 0) return PosixError("readlink " + link, errno);
  target[n] = '\0';
  std::string t(target);
  *device = t.substr(t.rfind('/') + 1);
  std::ifstream task(sys_root + "/fs/ext4/" + *device + "/journal_task");
  std::string pid;
  if (!task || !(task >> pid)) return Status::NotFound("no ext4 journal_task for " + *device);
  *journal = pid != "<none>";
  return Status::OK();
}

Status ReadFsFacts(const std::string& dir, const std::string& sys_root, FsFacts* out) {
  *out = FsFacts();
  struct statfs fs;
  if (::statfs(dir.c_str(), &fs) != 0) return PosixError("statfs " + dir, errno);
  out->ext4 = static_cast<unsigned long>(fs.f_type) == kExt4Magic;
  if (!out->ext4) return Status::OK();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return PosixError("stat " + dir, errno);
  return Ext4Journal(sys_root, major(st.st_dev), minor(st.st_dev), &out->device, &out->journal);
}

std::string FsWarning(const FsFacts& facts, const std::string& dir) {
  if (!facts.ext4 || facts.journal) return "";
  return "the data directory " + dir + " is on ext4 without a journal (" +
         (facts.device.empty() ? std::string("its device") : "/dev/" + facts.device) +
         "): after many files are deleted on it, creating files (one per record) runs several "
         "times slower for 60 to 360 s, as ext4 skips recently deleted inodes one by one; a "
         "journaled "
         "filesystem (ext4's default, XFS) does not (docs/benchmarks.md, \"Churn\")";
}

}  // namespace st
