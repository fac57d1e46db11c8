#include "launcher/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "common/error.h"

extern char** environ;

namespace ftb::launcher {
namespace {

struct Spawned {
  PipeFds out = makePipe();
  PipeFds err = makePipe();
  sigset_t mask;
  std::unique_ptr<WorkerProcess> proc;

  explicit Spawned(std::vector<std::string> argv, std::string path = "/bin/sh") {
    sigemptyset(&mask);
    SpawnRequest r;
    r.path = path;
    r.argv = std::move(argv);
    for (char** e = environ; *e; ++e) r.env.push_back(*e);
    r.env.push_back("FTB_TEST_VAR=42");
    r.stdout_fd = out.write.get();
    r.stderr_fd = err.write.get();
    r.mask = &mask;
    proc = std::make_unique<WorkerProcess>(r);
    out.write.reset();
    err.write.reset();
  }
  void waitExit() {
    for (int i = 0; i < 5000 && !proc->tryReap(); ++i) usleep(1000);
  }
  std::string stdoutText() {
    std::string s;
    char b[256];
    ssize_t n;
    while ((n = read(out.read.get(), b, sizeof b)) > 0) s.append(b, n);
    return s;
  }
};

auto soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(5); }

// A stop and a continue are seen by tryReap() (WUNTRACED/WCONTINUED), neither as an exit.
TEST(Process, StopAndContinueAreSeenNotTakenForAnExit) {
  Spawned s({"sh", "-c", "sleep 30"});
  ASSERT_EQ(s.proc->waitExec(soon()), "");
  EXPECT_EQ(s.proc->stopSignal(), 0);
  const auto before = std::chrono::system_clock::now();
  ASSERT_EQ(kill(s.proc->pid(), SIGSTOP), 0);
  for (int i = 0; i < 5000 && !s.proc->stopSignal(); ++i) {
    ASSERT_FALSE(s.proc->tryReap());
    usleep(1000);
  }
  EXPECT_EQ(s.proc->stopSignal(), SIGSTOP);
  EXPECT_TRUE(s.proc->running());
  EXPECT_GE(
      s.proc->stoppedSinceUs(),
      std::chrono::duration_cast<std::chrono::microseconds>(before.time_since_epoch()).count());
  ASSERT_EQ(kill(s.proc->pid(), SIGCONT), 0);
  for (int i = 0; i < 5000 && s.proc->stopSignal(); ++i) {
    ASSERT_FALSE(s.proc->tryReap());
    usleep(1000);
  }
  EXPECT_EQ(s.proc->stopSignal(), 0);
  EXPECT_EQ(s.proc->stoppedSinceUs(), 0);
  s.proc->signalGroup(SIGKILL);
  s.waitExit();
  EXPECT_EQ(s.proc->termSignal(), SIGKILL);
}

TEST(Process, ExitCodeEnvAndOwnProcessGroup) {
  Spawned s({"sh", "-c", "echo $FTB_TEST_VAR $(ps -o pgid= -p $$ | tr -d ' ') $$; exit 3"});
  EXPECT_EQ(s.proc->waitExec(soon()), "");
  s.waitExit();
  ASSERT_FALSE(s.proc->running());
  EXPECT_EQ(s.proc->exitCode(), 3);
  EXPECT_EQ(s.proc->termSignal(), 0);
  std::string pid = std::to_string(s.proc->pid());
  EXPECT_EQ(s.stdoutText(), "42 " + pid + " " + pid + "\n");
}

TEST(Process, KilledBySignal) {
  Spawned s({"sh", "-c", "kill -9 $$"});
  s.waitExit();
  EXPECT_EQ(s.proc->termSignal(), 9);
}

TEST(Process, ExecFailureIsReported) {
  Spawned s({"nope"}, "/nonexistent/binary");
  EXPECT_NE(s.proc->waitExec(soon()).find("No such file"), std::string::npos);
  s.waitExit();
  EXPECT_EQ(s.proc->exitCode(), 127);
}

TEST(Process, SignalGroupReachesGrandchildren) {
  Spawned s({"sh", "-c", "sleep 30 & sleep 30; echo survived"});
  s.proc->waitExec(soon());
  usleep(50 * 1000);
  s.proc->signalGroup(SIGTERM);
  s.waitExit();
  EXPECT_EQ(s.proc->termSignal(), SIGTERM);
  EXPECT_EQ(s.stdoutText(), "");  // EOF: the background sleep died too (it held the pipe)
}

TEST(Process, DestructorKillsAndReaps) {
  pid_t pid;
  {
    Spawned s({"sh", "-c", "sleep 30"});
    pid = s.proc->pid();
  }
  EXPECT_NE(kill(pid, 0), 0);  // gone, not even a zombie
}

TEST(Process, ResolveProgram) {
  EXPECT_EQ(resolveProgram("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(resolveProgram("/bin/sh", ""), "/bin/sh");
  EXPECT_THROW(resolveProgram("no-such-program-xyz", "/bin:/usr/bin"), ConfigError);
  char tmpl[] = "/tmp/ftb_noexec_XXXXXX";
  int fd = mkstemp(tmpl);  // mode 0600: not executable
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_THROW(resolveProgram(tmpl, "/bin"), ConfigError);
  unlink(tmpl);
}

}  // namespace
}  // namespace ftb::launcher
