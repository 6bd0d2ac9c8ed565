#include "fs_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "test_util.h"

namespace st {
namespace {

// A fake /sys: dev/block/<major>:<minor> -> ../../devices/virtual/block/<dev>,
// and fs/ext4/<dev>/journal_task holding `task`.
void FakeSys(const std::string& root, unsigned major, unsigned minor, const std::string& dev,
             const std::string& task) {
  for (const char* d : {"/dev", "/dev/block", "/fs", "/fs/ext4"}) mkdir((root + d).c_str(), 0755);
  mkdir((root + "/fs/ext4/" + dev).c_str(), 0755);
  std::string link = root + "/dev/block/" + std::to_string(major) + ":" + std::to_string(minor);
  ASSERT_EQ(0, symlink(("../../devices/virtual/block/" + dev).c_str(), link.c_str()));
  std::ofstream(root + "/fs/ext4/" + dev + "/journal_task") << task << "\n";
}

TEST(FsCheck, NoJournalFromSysfs) {
  test::TempDir sys;
  FakeSys(sys.path(), 254, 0, "vda", "<none>");
  std::string dev;
  bool journal = true;
  ASSERT_TRUE(Ext4Journal(sys.path(), 254, 0, &dev, &journal).ok());
  EXPECT_EQ("vda", dev);
  EXPECT_FALSE(journal);
}

TEST(FsCheck, JournalFromSysfs) {
  test::TempDir sys;
  FakeSys(sys.path(), 8, 1, "sda1", "412");
  std::string dev;
  bool journal = false;
  ASSERT_TRUE(Ext4Journal(sys.path(), 8, 1, &dev, &journal).ok());
  EXPECT_EQ("sda1", dev);
  EXPECT_TRUE(journal);
}

TEST(FsCheck, UnknownDeviceIsAnError) {
  test::TempDir sys;
  std::string dev;
  bool journal = true;
  Status s = Ext4Journal(sys.path(), 7, 3, &dev, &journal);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
}

TEST(FsCheck, WarningOnlyForExt4WithoutJournal) {
  FsFacts f;
  EXPECT_EQ("", FsWarning(f, "/data"));  // not ext4
  f.ext4 = true;
  EXPECT_EQ("", FsWarning(f, "/data"));  // journaled
  f.journal = false;
  f.device = "vda";
  std::string w = FsWarning(f, "/data");
  EXPECT_NE(std::string::npos, w.find("/data")) << w;
  EXPECT_NE(std::string::npos, w.find("/dev/vda")) << w;
  EXPECT_NE(std::string::npos, w.find("without a journal")) << w;
}

TEST(FsCheck, ReadsTheRealFilesystem) {
  // Whatever this machine's filesystem is, the facts are read without error
  // and agree with the warning: only ext4 without a journal warns.
  test::TempDir dir;
  FsFacts f;
  Status s = ReadFsFacts(dir.path(), "/sys", &f);
  if (!s.ok()) GTEST_SKIP() << "sysfs does not say: " << s.ToString();
  EXPECT_EQ(f.ext4 && !f.journal, !FsWarning(f, dir.path()).empty());
  if (f.ext4) {
    EXPECT_FALSE(f.device.empty());
  }
}

}  // namespace
}  // namespace st
