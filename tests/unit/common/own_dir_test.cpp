// Directories a run keeps its state in must be this user's (common/own_dir.h): the run
// directory (prepareRunDir), control/ (clearControlDir, postRequest). Another user is played
// by chown to a uid that is not ours, so these tests need root and skip otherwise
// (tests/e2e/trainer/test_shared_output.py does the same with a real second user).
#include "common/own_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/config.h"
#include "common/error.h"
#include "common/run_control.h"
#include "common/tag.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
constexpr uid_t kOther = 54321;

class OwnDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: plays another user with chown";
    char tmpl[] = "/tmp/ftb_own_dir_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // A directory `name` under dir_ owned by kOther, mode `mode`.
  std::string othersDir(const std::string& name, mode_t mode = 0777) {
    const std::string p = dir_ + "/" + name;
    fs::create_directories(p);
    EXPECT_EQ(::chown(p.c_str(), kOther, kOther), 0);
    EXPECT_EQ(::chmod(p.c_str(), mode), 0);
    return p;
  }
  template <class F>
  static std::string thrown(F f) {
    try {
      f();
    } catch (const FtbError& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(OwnDirTest, OwnDirectoryAndOwnSymlinkPass) {
  EXPECT_EQ(ownDirProblem(dir_), "");
  ASSERT_EQ(::symlink(dir_.c_str(), (dir_ + "/mine").c_str()), 0);
  EXPECT_EQ(ownDirProblem(dir_ + "/mine"), "");
  EXPECT_EQ(ownDirProblem(dir_ + "/nothing"), "is missing");
  std::ofstream(dir_ + "/file") << "x";
  EXPECT_EQ(ownDirProblem(dir_ + "/file"), "is not a directory");
}

TEST_F(OwnDirTest, AnotherUsersDirectoryOrSymlinkIsNamed) {
  EXPECT_EQ(ownDirProblem(othersDir("theirs")),
            "is owned by uid 54321, not by this user (" + describeUid(0) + ")");
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(dir_.c_str(), link.c_str()), 0);  // points to our own directory
  ASSERT_EQ(::lchown(link.c_str(), kOther, kOther), 0);
  EXPECT_EQ(ownDirProblem(link).rfind("is a symlink owned by uid 54321", 0), 0u);
}

TEST_F(OwnDirTest, RunDirectoryAnotherUserMadeIsRefused) {
  const Config cfg = Config::fromString("", "run.toml", {});
  const std::string run = runDirPath(cfg, 1, dir_, false, 1);
  othersDir(fs::path(run).filename().string());
  const std::string e = thrown([&] { prepareRunDir(cfg, 1, dir_, false, 1); });
  EXPECT_NE(e.find("key 'output.dir': the run directory " + run + " is owned by uid 54321"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(run + "/run.toml"));
  // Our own: accepted, with --no-sweep-dir too.
  EXPECT_TRUE(prepareRunDir(cfg, 1, dir_ + "/mine", false, 1).created);
  EXPECT_TRUE(prepareRunDir(cfg, 1, dir_ + "/flat", true, 1).created);
  EXPECT_NE(thrown([&] { prepareRunDir(cfg, 1, othersDir("shared_flat"), true, 1); }), "");
}

TEST_F(OwnDirTest, ControlDirectoryIsPrivateAndOnlyOurs) {
  clearControlDir(dir_);
  struct stat st {};
  ASSERT_EQ(::stat(controlDir(dir_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::chmod(controlDir(dir_).c_str(), 0755), 0);  // an earlier build's, or umask
  clearControlDir(dir_);
  ASSERT_EQ(::stat(controlDir(dir_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  fs::create_directories(dir_ + "/run2");
  othersDir("run2/control");
  const std::string e = thrown([&] { clearControlDir(dir_ + "/run2"); });
  EXPECT_NE(e.find("the control directory " + dir_ + "/run2/control is owned by uid 54321"),
            std::string::npos)
      << e;
  // The client side refuses it too: IoError (ctl exit 4) naming owner and user.
  const std::string c = thrown([&] { postRequest(dir_ + "/run2", {CtlCommand::kStop, 7}, 1.0); });
  EXPECT_NE(c.find("is owned by uid 54321, not by this user"), std::string::npos) << c;
  EXPECT_NE(c.find("only the user who started the run can control it"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/run2/control/request"));
}

TEST_F(OwnDirTest, ClientWaitsForControlDirectoryThenTimesOut) {
  fs::create_directories(dir_ + "/starting");
  try {
    postRequest(dir_ + "/starting", {CtlCommand::kStatus, 9}, 0.2);
    ADD_FAILURE() << "no error";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("did not appear"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ + "/starting/control"));  // the client never creates it
}

}  // namespace
}  // namespace ftb
