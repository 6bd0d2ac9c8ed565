// The namespace walk shared by the scrubber and the infofile mirror, on real
// directories.
#include "namespace_walk.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <map>
#include <string>

#include "test_util.h"

namespace st {
namespace {

void Touch(const std::string& path, const std::string& text = "x") {
  std::ofstream(path, std::ios::binary) << text;
}

// path -> size of every file visited.
Status Walk(const std::string& root, std::map<std::string, uint64_t>* seen, bool* complete,
            const std::atomic<bool>* cancel = nullptr) {
  NamespaceWalkOptions o;
  o.root = root;
  o.log_tag = "test";
  o.cancelled = "test walk cancelled";
  o.cancel = cancel;
  return WalkNamespace(
      Env::Default(), o,
      [&](const std::string& path, const FileInfo& st) {
        EXPECT_TRUE(st.is_regular) << path;
        EXPECT_TRUE(seen->emplace(path.substr(root.size()), st.size).second) << "twice: " << path;
        return Status::OK();
      },
      complete);
}

TEST(NamespaceWalk, EveryRegularFileOnceLinksFollowedStSkipped) {
  test::TempDir dir;
  const std::string ns = dir.path();
  ASSERT_EQ(0, mkdir((ns + "/a").c_str(), 0755));
  ASSERT_EQ(0, mkdir((ns + "/a/b").c_str(), 0755));
  ASSERT_EQ(0, mkdir((ns + "/.st-new").c_str(), 0755));
  Touch(ns + "/top", "12345");
  Touch(ns + "/a/one");
  Touch(ns + "/a/b/two", "22");
  Touch(ns + "/.st-creating");
  Touch(ns + "/.st-new/hidden");
  Touch(dir.path() + "/a/b/.st-x");
  ASSERT_EQ(0, symlink("..", (ns + "/a/b/up").c_str()));             // a loop
  ASSERT_EQ(0, symlink("/nonexistent/x", (ns + "/dangling").c_str()));  // gone: not an error
  ASSERT_EQ(0, symlink("a/one", (ns + "/link-to-one").c_str()));      // a file, by its link too
  ASSERT_EQ(0, mkfifo((ns + "/fifo").c_str(), 0600));                 // not a regular file

  std::map<std::string, uint64_t> seen;
  bool complete = false;
  Status s = Walk(ns, &seen, &complete);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(complete);
  std::map<std::string, uint64_t> want = {{"/top", 5},
                                          {"/a/one", 1},
                                          {"/a/b/two", 2},
                                          {"/link-to-one", 1}};
  EXPECT_EQ(want, seen);
}

TEST(NamespaceWalk, TheRootMustBeADirectory) {
  test::TempDir dir;
  std::map<std::string, uint64_t> seen;
  bool complete = true;
  Status s = Walk(dir.path() + "/missing", &seen, &complete);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("namespace root")) << s.message();
  Touch(dir.path() + "/file");
  s = Walk(dir.path() + "/file", &seen, &complete);
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("is not a directory")) << s.message();
  EXPECT_TRUE(seen.empty());
}

TEST(NamespaceWalk, CancelAndVisitorErrorsStopIt) {
  test::TempDir dir;
  Touch(dir.path() + "/a");
  Touch(dir.path() + "/b");
  std::atomic<bool> cancel{true};
  std::map<std::string, uint64_t> seen;
  bool complete = true;
  Status s = Walk(dir.path(), &seen, &complete, &cancel);
  EXPECT_TRUE(s.IsUnavailable());
  EXPECT_EQ("test walk cancelled", s.message());
  EXPECT_TRUE(seen.empty());

  NamespaceWalkOptions o;
  o.root = dir.path();
  int visits = 0;
  s = WalkNamespace(
      Env::Default(), o,
      [&](const std::string&, const FileInfo&) {
        ++visits;
        return Status::IOError("stop here");
      },
      &complete);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(1, visits);
}

TEST(NamespaceWalk, AnUnreadableDirectoryMakesItIncomplete) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every directory";
  test::TempDir dir;
  ASSERT_EQ(0, mkdir((dir.path() + "/locked").c_str(), 0755));
  Touch(dir.path() + "/locked/f");
  Touch(dir.path() + "/g");
  ASSERT_EQ(0, chmod((dir.path() + "/locked").c_str(), 0));
  std::map<std::string, uint64_t> seen;
  bool complete = true;
  Status s = Walk(dir.path(), &seen, &complete);
  chmod((dir.path() + "/locked").c_str(), 0755);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(complete);
  EXPECT_EQ(1u, seen.count("/g"));
}

}  // namespace
}  // namespace st
