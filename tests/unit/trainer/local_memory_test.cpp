// The local-memory transports' control segment (parallel/local_memory.h) never outlives
// its set-up: removed once every member has opened it, on a peer's timeout, and when
// /dev/shm cannot hold it; a segment left by a killed creator is removed by the next one.
// In process, over a HashStore (the member records travel through it as through the
// TCPStore); tests/e2e/trainer/test_shared_memory.py kills real ranks at random moments.
#include "trainer/parallel/local_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "common/error.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;

// The ftb-comm segments in /dev/shm created by process `pid`.
std::vector<std::string> segmentsOf(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "ftb-comm-" + std::to_string(pid) + "-";
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0)
      out.push_back(e.path().filename().string());
  return out;
}

std::string pidNamespaceDigits() {
  const std::string link = fs::read_symlink("/proc/self/ns/pid").string();  // pid:[4026531836]
  std::string d;
  for (char c : link)
    if (c >= '0' && c <= '9') d += c;
  return d;
}

// A pid no process holds: a child that has exited and been reaped.
pid_t deadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

void makeSegment(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
  close(fd);
}

bool segmentExists(const std::string& name) { return fs::exists("/dev/shm/" + name); }

std::string joinSegment(c10d::Store& store, int me, const std::vector<int>& ranks, size_t payload,
                        LocalMembers* out) {
  return joinLocalMemory(
      store, me, ranks, payload, [](char* p) { std::memset(p, 0, 8); }, out);
}

TEST(LocalMemory, SegmentIsGoneOnceEveryMemberHasItMapped) {
  c10d::HashStore store;
  LocalMembers m;
  ASSERT_EQ(joinSegment(store, 0, {0}, 4096, &m), "");
  EXPECT_TRUE(segmentsOf(getpid()).empty());
  std::memcpy(m.segment.payload(), "mapped", 7);  // the mapping outlives the name
  EXPECT_STREQ(m.segment.payload(), "mapped");
  ASSERT_EQ(m.pids.size(), 1u);
  EXPECT_EQ(m.pids[0], getpid());
}

TEST(LocalMemory, PeerTimeoutLeavesNoSegment) {
  c10d::HashStore store;
  store.setTimeout(std::chrono::milliseconds(300));
  LocalMembers m;
  // Member 1 never publishes: member 0 created the segment, then times out waiting.
  EXPECT_THROW(joinSegment(store, 0, {0, 1}, 4096, &m), DistError);
  EXPECT_EQ(segmentsOf(getpid()), std::vector<std::string>{});
}

TEST(LocalMemory, SegmentDevShmCannotHoldFallsBackAndLeavesNothing) {
  struct statvfs st {};
  ASSERT_EQ(statvfs("/dev/shm", &st), 0);
  const size_t more = size_t(st.f_blocks) * st.f_frsize + (size_t(1) << 30);  // its whole size+
  c10d::HashStore store;
  LocalMembers m;
  const std::string why = joinSegment(store, 0, {0}, more, &m);
  EXPECT_NE(why.find("posix_fallocate"), std::string::npos) << why;
  EXPECT_NE(why.find("in /dev/shm"), std::string::npos) << why;
  EXPECT_EQ(segmentsOf(getpid()), std::vector<std::string>{});
}

TEST(LocalMemory, StaleSegmentOfAGoneCreatorIsRemovedOthersAreKept) {
  const std::string ns = pidNamespaceDigits();
  const pid_t dead = deadPid();
  const std::string stale = "ftb-comm-" + std::to_string(dead) + "-" + ns + "-11";
  const std::string live = "ftb-comm-" + std::to_string(getpid()) + "-" + ns + "-12";
  const std::string elsewhere = "ftb-comm-" + std::to_string(dead) + "-1" + ns + "-13";
  const std::string other_form = "ftb-comm-" + std::to_string(dead) + "-14";
  for (const std::string& n : {stale, live, elsewhere, other_form}) makeSegment(n);
  EXPECT_GE(removeStaleSegments(), 1);
  EXPECT_FALSE(segmentExists(stale));
  EXPECT_TRUE(segmentExists(live)) << "its creator (this process) is alive";
  EXPECT_TRUE(segmentExists(elsewhere)) << "a pid of another pid namespace means another process";
  EXPECT_TRUE(segmentExists(other_form)) << "not a name this library writes";
  for (const std::string& n : {live, elsewhere, other_form}) shm_unlink(("/" + n).c_str());
}

TEST(LocalMemory, CreatorRemovesStaleSegmentsBeforeCreating) {
  const pid_t dead = deadPid();
  const std::string stale = "ftb-comm-" + std::to_string(dead) + "-" + pidNamespaceDigits() + "-21";
  makeSegment(stale);
  c10d::HashStore store;
  LocalMembers m;
  ASSERT_EQ(joinSegment(store, 0, {0}, 4096, &m), "");
  EXPECT_FALSE(segmentExists(stale));
}

}  // namespace
}  // namespace ftb
