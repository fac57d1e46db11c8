// HDF5 writes on a full file system (ENOSPC): a small tmpfs filled to the brim.
// Mounting needs root (CAP_SYS_ADMIN); elsewhere these tests skip and say why.
// Each writer runs in a forked child that exits normally afterwards, so HDF5's own
// shutdown at exit (where a failed close used to crash, SIGSEGV in H5F__close_cb) is
// part of what is tested.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/hdf5.h"

namespace ftb {
namespace {

// A tmpfs of `bytes` mounted on a fresh temporary directory; unmounted when destroyed.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(size_t bytes) {
    std::string tmpl = ::testing::TempDir() + "ftb_enospc_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      why_ = std::string("mkdtemp: ") + std::strerror(errno);
      return;
    }
    dir_ = tmpl;
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) != 0)
      why_ = "cannot mount a tmpfs on " + dir_ +
             " (needs root or CAP_SYS_ADMIN): " + std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (why_.empty()) umount2(dir_.c_str(), MNT_DETACH);
    if (!dir_.empty()) rmdir(dir_.c_str());
  }
  bool mounted() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const std::string& dir() const { return dir_; }
  // Writes a file until the file system is full (write fails with ENOSPC).
  void fill() const {
    int fd = open((dir_ + "/filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::vector<char> block(4096, 'x');
    ssize_t n = 0;
    while ((n = write(fd, block.data(), block.size())) > 0) {
    }
    const int err = errno;
    close(fd);
    ASSERT_EQ(err, ENOSPC) << std::strerror(err);
  }
  void unfill() const { std::filesystem::remove(dir_ + "/filler"); }

 private:
  std::string dir_, why_;
};

// Runs `body` in a child that then exits normally (atexit handlers run); returns the
// wait status. The child's exit code is body's result (0 = its expectations held).
template <typename Body>
int inChild(Body body) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

std::string statusText(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

RunInfo info() {
  RunInfo i;
  i.tag = "full_disk";
  i.config_toml = "[model]\nname = \"tiny\"\n";
  return i;
}

constexpr int kColumns = 24;  // about the trainer's metric count

void declareColumns(MetricsFile& m) {
  m.declareMetric("step", true);
  for (int c = 1; c < kColumns; ++c) m.declareMetric("m" + std::to_string(c), false);
}

std::map<std::string, double> row(int step) {
  std::map<std::string, double> r{{"step", step}};
  for (int c = 1; c < kColumns; ++c) r["m" + std::to_string(c)] = step + 1.0 + c;
  return r;
}

// Every row a reader gets is one the writer appended: row i is step i (the fill value 0
// of a row whose data never reached the disk is not data).
void expectWholeRows(const MetricsData& d, size_t at_least) {
  const std::vector<double>& steps = d.steps.at("step");
  EXPECT_GE(steps.size(), at_least);
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i], double(i)) << "row " << i;
    for (int c = 1; c < kColumns; ++c)
      ASSERT_EQ(d.steps.at("m" + std::to_string(c))[i], i + 1.0 + c) << "row " << i << " m" << c;
  }
  EXPECT_LE(int64_t(steps.size()), d.status.steps_done) << "rows beyond the recorded steps_done";
}

TEST(FullDiskTest, MetricsFlushFailsNamingTheFileAndKeepsOnlyWholeRows) {
  SmallTmpfs fs(2 << 20);
  if (!fs.mounted()) GTEST_SKIP() << fs.why();
  const std::string path = fs.dir() + "/metrics/rank_00000.h5";
  const int status = inChild([&] {
    try {
      MetricsFile m = MetricsFile::create(path, info());
      declareColumns(m);
      for (int s = 0; s < 10; ++s) m.appendStep(row(s));
      m.flush();
      fs.fill();
      for (int s = 10; s < 5000; ++s) m.appendStep(row(s));
      try {
        m.flush();
        return 10;  // a flush on a full disk must fail
      } catch (const IoError& e) {
        if (std::string(e.what()).find(path) == std::string::npos) return 11;
      }
      try {
        m.setStatus(RunState::Failed, 4, "disk full");
      } catch (const IoError&) {
      }
      try {
        m.close();
      } catch (const IoError&) {
      }
    } catch (...) {
      return 12;
    }
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << statusText(status);
  fs.unfill();
  MetricsData d;
  try {
    d = readMetricsFile(path);
  } catch (const IoError& e) {
    FAIL() << "the rows flushed before the disk filled are lost: " << e.what();
  }
  expectWholeRows(d, 10);
}

// Rows whose data never reached the disk (the extent grew, the chunk write failed) read
// as the fill value and are not returned as rows.
TEST(FullDiskTest, RowsNeverWrittenAreNotReadAsData) {
  std::string dir = ::testing::TempDir() + "ftb_fill_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/rank_00000.h5";
  {
    MetricsFile m = MetricsFile::create(path, info());
    declareColumns(m);
    for (int s = 0; s < 5; ++s) m.appendStep(row(s));
    m.close();
  }
  {
    h5::H5Handle f = h5::openFile(path, /*writable=*/true);
    h5::H5Handle steps = h5::openGroup(f, "steps");
    for (const std::string& name : h5::listMembers(steps)) {
      h5::H5Handle d = h5::openDataset(steps, name);
      hsize_t n = 1030;  // into a second chunk never written
      h5::checkStatus(H5Dset_extent(d, &n), d, "H5Dset_extent");
    }
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(d.steps.at("step").size(), 5u);
  expectWholeRows(d, 5);
  std::filesystem::remove_all(dir);
}

// A file created on a full disk fails with an IoError naming it, and the process exits
// normally afterwards.
TEST(FullDiskTest, CreateOnAFullDiskFailsNamingTheFile) {
  SmallTmpfs fs(256 << 10);
  if (!fs.mounted()) GTEST_SKIP() << fs.why();
  const std::string path = fs.dir() + "/metrics/rank_00000.h5";
  fs.fill();
  const int status = inChild([&] {
    try {
      MetricsFile m = MetricsFile::create(path, info());
      declareColumns(m);
      for (int s = 0; s < 2000; ++s) m.appendStep(row(s));
      m.close();
      return 10;
    } catch (const IoError& e) {
      return std::string(e.what()).find(path) == std::string::npos ? 11 : 0;
    }
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << statusText(status);
}

// One group and dataset of 128 KiB per tensor, 2 MiB in all, then the close (as
// trainer/checkpoint/shard_io.cpp writes a shard).
void writeShard(const std::string& path) {
  h5::H5Handle f = h5::createFile(path, /*file_locking=*/false);
  h5::writeAttrString(f, "format", "test");
  std::vector<float> data(32 << 10, 1.5f);
  hsize_t n = data.size();
  for (int t = 0; t < 16; ++t) {
    const std::string name = "layer" + std::to_string(t);
    h5::createGroup(f, name);
    h5::H5Handle space(h5::check(H5Screate_simple(1, &n, nullptr), f, "H5Screate_simple"),
                       h5::Kind::kDataspace);
    h5::H5Handle d(h5::check(H5Dcreate2(f, (name + "/0").c_str(), H5T_NATIVE_FLOAT, space,
                                        H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                             f, "H5Dcreate2"),
                   h5::Kind::kDataset);
    h5::checkStatus(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), d,
                    "H5Dwrite");
    h5::writeAttrInts(d, "offset", {0});
  }
  f.close();
}

// A checkpoint shard's writes (one group and dataset per tensor) fill the disk: an
// IoError naming the file, from a write or from the close, and a normal exit. The failed
// close used to leave libhdf5 a dangling file id that its shutdown at exit crashed on
// (SIGSEGV in H5F__close_cb).
TEST(FullDiskTest, ShardWritesFailNamingTheFileAndTheProcessExitsNormally) {
  SmallTmpfs fs(3 << 20);
  if (!fs.mounted()) GTEST_SKIP() << fs.why();
  const std::string saved = fs.dir() + "/step_00000005/shard_00000.h5";
  const std::string path = fs.dir() + "/step_00000010.tmp/shard_00000.h5";
  std::filesystem::create_directories(fs.dir() + "/step_00000005");
  std::filesystem::create_directories(fs.dir() + "/step_00000010.tmp");
  const int status = inChild([&] {
    try {
      writeShard(saved);  // 2 MiB: fits
    } catch (...) {
      return 12;
    }
    try {
      writeShard(path);  // another 2 MiB: does not
      return 10;
    } catch (const IoError& e) {
      return std::string(e.what()).find(path) == std::string::npos ? 11 : 0;
    }
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << statusText(status);
}

}  // namespace
}  // namespace ftb
