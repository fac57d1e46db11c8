#include "launcher/output.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace ftb::launcher {
namespace {

std::string readAll(int fd) {
  std::string s;
  char b[4096];
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0) s.append(b, n);
  return s;
}

TEST(StreamPump, PrefixesWholeLinesAndKeepsTail) {
  PipeFds console = makePipe();
  PipeFds src = makePipe();
  StreamPump p(std::move(src.read), Fd(), console.write.get(), "[3] ", 2);
  writeAll(src.write.get(), "a\nb");
  p.pump();
  writeAll(src.write.get(), "c\nd\ne");
  src.write.reset();
  p.pump();
  EXPECT_FALSE(p.open());  // EOF seen
  p.finish();
  console.write.reset();
  EXPECT_EQ(readAll(console.read.get()), "[3] a\n[3] bc\n[3] d\n[3] e\n");
  EXPECT_EQ(p.tail(), (std::vector<std::string>{"d", "e"}));
}

TEST(StreamPump, FileGetsRawBytes) {
  char tmpl[] = "/tmp/ftb_pump_XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  {
    StreamPump p(Fd(), Fd(fd), -1, "[0] ", 0);
    p.consume("x\ny", 3);
    p.finish();
  }
  std::ifstream in(tmpl);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "x\ny");
  unlink(tmpl);
}

// --log-dir on a full disk lost every worker line silently (/dev/full: each write ENOSPC).
TEST(StreamPump, FailedLogWriteWarnsAndSendsTheLinesToTheConsole) {
  int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0);
  PipeFds console = makePipe();
  testing::internal::CaptureStderr();
  {
    StreamPump p(Fd(), Fd(full), -1, "", 0);
    p.onFileFailure("/logs/run/attempt_0/rank_3.err", console.write.get());
    p.consume("a\nb\n", 4);
    p.consume("c\n", 2);
    p.finish();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  console.write.reset();
  EXPECT_NE(err.find("cannot write worker log /logs/run/attempt_0/rank_3.err: No space left on "
                     "device; it holds the first 0 bytes of the stream, the rest goes to the "
                     "launcher's console"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("cannot write", err.find("cannot write") + 1), std::string::npos)
      << "one warning, not one per write: " << err;
  EXPECT_EQ(readAll(console.read.get()), "a\nb\nc\n");
}

}  // namespace
}  // namespace ftb::launcher
