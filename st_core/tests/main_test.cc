// The st-peer binary: the "listening on" line, serving, clean stop on
// SIGINT/SIGTERM, usage errors, --key-file and --mint-token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "capability.h"
#include "protocol.h"
#include "test_util.h"

namespace st {
namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;  // the child's stdout
};

Child Spawn(const std::vector<std::string>& args) {
  int p[2];
  EXPECT_EQ(0, pipe(p));
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(ST_PEER_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(ST_PEER_BINARY, argv.data());
    _exit(127);
  }
  close(p[1]);
  c.out = p[0];
  return c;
}

std::string ReadLine(int fd, double timeout_s) {
  std::string line;
  while (true) {
    struct pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return line;
    char ch;
    if (read(fd, &ch, 1) != 1 || ch == '\n') return line;
    line.push_back(ch);
  }
}

// Waits up to timeout_s for the child; returns its wait status or -1.
int WaitFor(pid_t pid, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

void PingOnce(int port) {
  int fd = test::ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  std::string f = EncodePing(3);
  ASSERT_EQ(static_cast<ssize_t>(f.size()), write(fd, f.data(), f.size()));
  char buf[256];
  size_t got = 0;
  while (got < kFramePrefixSize) {
    ssize_t n = read(fd, buf + got, sizeof(buf) - got);
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kOk), static_cast<uint8_t>(buf[4]));
  EXPECT_EQ(3, buf[8]);
  close(fd);
}

TEST(Main, ListensServesAndStopsOnSignals) {
  for (int sig : {SIGINT, SIGTERM}) {
    test::TempDir dir;
    Child c = Spawn({"--data", dir.path() + "/d", "--port", "0"});
    std::string line = ReadLine(c.out, 10);
    ASSERT_EQ(0u, line.find("listening on 127.0.0.1:")) << line;
    int port = std::stoi(line.substr(line.rfind(':') + 1));
    ASSERT_GT(port, 0);
    PingOnce(port);
    kill(c.pid, sig);
    int status = WaitFor(c.pid, 5);
    ASSERT_NE(-1, status) << "st-peer did not stop on signal " << sig;
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(0, WEXITSTATUS(status));
    close(c.out);
  }
}

TEST(Main, UsageErrorsExitWithTwo) {
  Child c = Spawn({"--port", "0"});  // no --data
  int status = WaitFor(c.pid, 5);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(2, WEXITSTATUS(status));
  close(c.out);
  c = Spawn({"--help"});
  EXPECT_EQ(0u, ReadLine(c.out, 5).find("usage: st-peer"));
  status = WaitFor(c.pid, 5);
  EXPECT_EQ(0, WEXITSTATUS(status));
  close(c.out);
}

TEST(Main, MintTokenPrintsAVerifiableToken) {
  test::TempDir dir;
  const std::string key(32, '\x07');
  const std::string path = dir.path() + "/secret.key";
  std::ofstream(path) << test::ToHex(key) << "\n";
  ASSERT_EQ(0, chmod(path.c_str(), 0600));
  uint64_t before = UnixNow();
  Child c = Spawn({"--mint-token", "--key-file", path, "--ops", "16", "--file-id", "0", "--ttl",
                   "3600", "--user", "admin"});
  std::string line = ReadLine(c.out, 10);
  int status = WaitFor(c.pid, 5);
  close(c.out);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(0, WEXITSTATUS(status));
  std::string token = test::FromHex(line);
  ASSERT_EQ(line, test::ToHex(token)) << "not lower-case hex: " << line;
  Capability cap;
  Status s = VerifyToken(key, token, UnixNow(), &cap);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(kOpAdmin, cap.ops);
  EXPECT_EQ(0u, cap.file_id);
  EXPECT_EQ("admin", cap.user);
  EXPECT_GE(cap.expires, before + 3600);
  EXPECT_LE(cap.expires, UnixNow() + 3600);
  EXPECT_FALSE(VerifyToken(std::string(32, '\x08'), token, UnixNow(), &cap).ok());

  // A key file that is not a key: exit 1, nothing on stdout.
  std::ofstream(path, std::ios::trunc) << "not a key\n";
  c = Spawn({"--mint-token", "--key-file", path, "--ops", "16"});
  EXPECT_EQ("", ReadLine(c.out, 5));
  status = WaitFor(c.pid, 5);
  close(c.out);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(1, WEXITSTATUS(status));
  // Nor does a peer start with it.
  c = Spawn({"--data", dir.path() + "/d", "--key-file", path});
  EXPECT_EQ("", ReadLine(c.out, 5));
  status = WaitFor(c.pid, 5);
  close(c.out);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(1, WEXITSTATUS(status));
}

TEST(Main, KeyedPeerDeniesRequestsWithoutAToken) {
  test::TempDir dir;
  const std::string path = dir.path() + "/secret.key";
  std::ofstream(path) << test::ToHex(std::string(32, '\x07')) << "\n";
  ASSERT_EQ(0, chmod(path.c_str(), 0600));
  Child c = Spawn({"--data", dir.path() + "/d", "--port", "0", "--key-file", path});
  std::string line = ReadLine(c.out, 10);
  ASSERT_EQ(0u, line.find("listening on 127.0.0.1:")) << line;
  int port = std::stoi(line.substr(line.rfind(':') + 1));
  PingOnce(port);  // PING needs nothing
  int fd = test::ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  std::string f = EncodeDeleteFile(4, 1);
  ASSERT_EQ(static_cast<ssize_t>(f.size()), write(fd, f.data(), f.size()));
  char buf[512];
  size_t got = 0;
  while (got < kFramePrefixSize + 2) {
    ssize_t n = read(fd, buf + got, sizeof(buf) - got);
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(static_cast<uint8_t>(MsgType::kError), static_cast<uint8_t>(buf[4]));
  EXPECT_EQ(static_cast<int>(ErrorCode::kDenied), buf[kFramePrefixSize]);
  close(fd);
  kill(c.pid, SIGTERM);
  EXPECT_NE(-1, WaitFor(c.pid, 5));
  close(c.out);
}

}  // namespace
}  // namespace st
