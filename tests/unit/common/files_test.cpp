// Tests for the durable writes of common/files.h: writeFileDurably() replaces a file
// whole, and a write that fails part-way (here: the file size limit, as a full disk
// would) leaves the old file as it was, no temporary file, and an IoError that names
// the file and the OS error.
#include "common/files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "test_util.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Files, WriteFileDurablyReplacesTheFileWhole) {
  const std::string dir = test::makeTempDir("ftb_files_"), path = dir + "/table.csv";
  writeFileDurably(path, "old\n");
  EXPECT_EQ(readAll(path), "old\n");
  const std::string text(100000, 'x');
  writeFileDurably(path, text);
  EXPECT_EQ(readAll(path), text);
  EXPECT_EQ(names(dir), std::vector<std::string>{"table.csv"});  // no temporary file left
}

TEST(Files, FailedWriteKeepsTheOldFileAndNamesFileAndError) {
  const std::string dir = test::makeTempDir("ftb_files_"), path = dir + "/table.csv";
  writeFileDurably(path, "old\n");
  // In a child: a 4 KiB file size limit makes the write of 64 KiB fail part-way (EFBIG,
  // SIGXFSZ ignored), as ENOSPC would. The child reports the message through a file.
  const std::string msg_path = dir + "/../" + fs::path(dir).filename().string() + ".msg";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{};
    getrlimit(RLIMIT_FSIZE, &lim);
    const rlim_t soft = lim.rlim_cur;
    lim.rlim_cur = 4096;  // the soft limit only: restored below for the message file
    setrlimit(RLIMIT_FSIZE, &lim);
    int code = 0;
    std::string msg;
    try {
      writeFileDurably(path, std::string(65536, 'n'));
    } catch (const IoError& e) {
      code = e.exitCode();
      msg = e.what();
    }
    lim.rlim_cur = soft;
    setrlimit(RLIMIT_FSIZE, &lim);
    std::ofstream(msg_path) << msg;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 4);  // IoError
  const std::string msg = readAll(msg_path);
  EXPECT_NE(msg.find("cannot write " + path + ": File too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + " is unchanged"), std::string::npos) << msg;
  EXPECT_EQ(readAll(path), "old\n");
  EXPECT_EQ(names(dir), std::vector<std::string>{"table.csv"});  // the partial tmp is removed
}

TEST(Files, WriteIntoAMissingDirectoryIsAnIoErrorNamingTheFile) {
  const std::string path = test::makeTempDir("ftb_files_") + "/no/such/dir/out.csv";
  try {
    writeFileDurably(path, "x");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + path + ": No such file or directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace ftb
