// Tests for rank-prefixed logging: captures fd 2 through a temporary file.
#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ftb {
namespace {

// Redirects fd 2 to a temporary file for the lifetime of the object.
class StderrCapture {
 public:
  StderrCapture() {
    fflush(stderr);
    file_ = std::tmpfile();
    saved_ = dup(2);
    dup2(fileno(file_), 2);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), file_)) > 0) out.append(buf, n);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  FILE* file_ = nullptr;
  int saved_ = -1;
};

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setLogIdentity(1, 4, "hostx");
    setLogLevel(LogLevel::kInfo);
  }
};

TEST_F(LogTest, PrefixAndLevels) {
  EXPECT_EQ(logPrefix(), "[rank 1/4 hostx]");
  StderrCapture cap;
  FTB_INFO("step " << 3 << " done");
  FTB_WARN("slow");
  FTB_ERROR("broke");
  FTB_DEBUG("hidden at info level");
  EXPECT_EQ(cap.text(),
            "[rank 1/4 hostx] step 3 done\n"
            "[rank 1/4 hostx] WARNING: slow\n"
            "[rank 1/4 hostx] ERROR: broke\n");
}

TEST_F(LogTest, LevelFilter) {
  StderrCapture cap;
  setLogLevel(LogLevel::kWarn);
  logLine(LogLevel::kInfo, "dropped");
  logLine(LogLevel::kWarn, "kept");
  setLogLevel(LogLevel::kDebug);
  logLine(LogLevel::kDebug, "dbg");
  EXPECT_EQ(cap.text(), "[rank 1/4 hostx] WARNING: kept\n[rank 1/4 hostx] dbg\n");
}

TEST_F(LogTest, CustomPrefixAndTrailingNewline) {
  setLogPrefix("[launcher h]");
  StderrCapture cap;
  logLine(LogLevel::kInfo, "hello\n");
  EXPECT_EQ(cap.text(), "[launcher h] hello\n");
}

TEST(LogEnv, HostNameNonEmptyAndStable) {
  EXPECT_FALSE(hostName().empty());
  EXPECT_EQ(hostName(), hostName());
}

// FTB_LOG_LEVEL is read on first use, so check it in a freshly exec'd process
// ("threadsafe" death tests re-run the binary); the child exits 0 iff filtered right.
TEST(LogEnv, LevelFromEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("FTB_LOG_LEVEL", "error", 1);
  EXPECT_EXIT(
      {
        setLogIdentity(0, 1, "h");
        StderrCapture cap;
        logLine(LogLevel::kWarn, "w");
        logLine(LogLevel::kError, "e");
        std::exit(cap.text() == "[rank 0/1 h] ERROR: e\n" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  unsetenv("FTB_LOG_LEVEL");
}

}  // namespace
}  // namespace ftb
