// What the filesystem of the data directory does to write rates
// (docs/benchmarks.md, "Churn: writes after deletions").
//
// On ext4 without a journal, inode allocation skips every inode deleted in
// the last 60 s (360 s while its inode table block is dirty) by scanning
// them one by one (fs/ext4/ialloc.c, recently_deleted()): after a churn of
// many deletions nearby, each file creation scans thousands of them, and a
// peer's one-file-per-record writes run several times slower for a minute
// or more. With a journal the check is skipped. The peer says so at start.
#ifndef ST_CORE_FS_CHECK_H_
#define ST_CORE_FS_CHECK_H_

#include <sys/types.h>

#include <string>

#include "status.h"

namespace st {

struct FsFacts {
  bool ext4 = false;
  bool journal = true;  // ext4 only: false when it runs without a journal
  std::string device;   // e.g. "vda", "sda1" (ext4 only; "" if not found)
};

// The facts of the filesystem holding `dir`: statfs for ext4, then the
// device's /sys/fs/ext4/<dev>/journal_task ("<none>": no journal).
// `sys_root` is "/sys" except in tests.
Status ReadFsFacts(const std::string& dir, const std::string& sys_root, FsFacts* out);

// The device name of block device (major, minor) from
// <sys_root>/dev/block/<major>:<minor> and whether its ext4 runs with a
// journal (<sys_root>/fs/ext4/<name>/journal_task). NotFound if sysfs does
// not say.
Status Ext4Journal(const std::string& sys_root, unsigned major, unsigned minor, std::string* device,
                   bool* journal);

// A warning for the peer's log, or "" when the filesystem is fine.
std::string FsWarning(const FsFacts& facts, const std::string& dir);

}  // namespace st

#endif  // ST_CORE_FS_CHECK_H_
