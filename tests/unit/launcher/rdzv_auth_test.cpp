#include "launcher/rdzv_auth.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "common/error.h"

namespace ftb::launcher {
namespace {

namespace fs = std::filesystem;

std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) s += std::string{d[c >> 4], d[c & 15]};
  return s;
}

// Sets (or unsets, with nullopt) an environment variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~EnvVar() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ftb_rdzv_auth_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    chmod(p.c_str(), mode);
    return p;
  }
  std::string refusal(const std::string& path) {
    try {
      readSecretFile(path, "FTB_RDZV_SECRET_FILE");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST(RdzvAuth, HmacSha256MatchesRfc4231) {
  // Test case 1: 20-byte key 0x0b, "Hi There".
  EXPECT_EQ(hex(hmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: key "Jefe".
  EXPECT_EQ(hex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key (longer than the block: hashed first).
  EXPECT_EQ(hex(hmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(RdzvAuth, ConstantTimeEqualComparesEveryByte) {
  EXPECT_TRUE(constantTimeEqual("abc", "abc"));
  EXPECT_FALSE(constantTimeEqual("abc", "abd"));
  EXPECT_FALSE(constantTimeEqual("abc", "ab"));
  EXPECT_TRUE(constantTimeEqual("", ""));
}

TEST(RdzvAuth, NoncesAreRandom) {
  const std::string a = randomNonce(), b = randomNonce();
  EXPECT_EQ(a.size(), kNonceBytes);
  EXPECT_NE(a, b);
}

TEST_F(SecretFileTest, PrivateFileIsReadTrimmed) {
  EXPECT_EQ(readSecretFile(write("s", "0123456789abcdef0123\n", 0600), "K"),
            "0123456789abcdef0123");
}

TEST_F(SecretFileTest, RefusesWhatOthersCouldReadOrSwap) {
  EXPECT_NE(refusal(write("open", "0123456789abcdef0123", 0644)).find("mode 0644"),
            std::string::npos);
  EXPECT_NE(refusal(write("short", "tooshort", 0600)).find("at least 16"), std::string::npos);
  const std::string target = write("target", "0123456789abcdef0123", 0600);
  ASSERT_EQ(symlink(target.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_NE(refusal(dir_ + "/link").find("symlink"), std::string::npos);
  EXPECT_NE(refusal(dir_).find("not a regular file"), std::string::npos);
  EXPECT_NE(refusal(dir_ + "/missing").find("No such file"), std::string::npos);
}

TEST_F(SecretFileTest, EnvironmentWinsThenFileThenCreatedDefault) {
  EnvVar home("HOME", dir_);
  {
    EnvVar s("FTB_RDZV_SECRET", "env-secret-0123456789");
    EnvVar f("FTB_RDZV_SECRET_FILE", write("f", "file-secret-0123456789", 0600));
    EXPECT_EQ(loadRdzvSecret().key, "env-secret-0123456789");
  }
  {
    EnvVar s("FTB_RDZV_SECRET", "short");
    EXPECT_THROW(loadRdzvSecret(), ConfigError);
  }
  EnvVar s("FTB_RDZV_SECRET", std::nullopt);
  {
    EnvVar f("FTB_RDZV_SECRET_FILE", write("f2", "file-secret-0123456789", 0600));
    EXPECT_EQ(loadRdzvSecret().key, "file-secret-0123456789");
  }
  EnvVar f("FTB_RDZV_SECRET_FILE", std::nullopt);
  const RdzvSecret first = loadRdzvSecret();  // creates ~/.ftbench/rdzv_secret
  const std::string path = dir_ + "/.ftbench/rdzv_secret";
  EXPECT_EQ(first.source, "file " + path);
  EXPECT_EQ(first.key.size(), 2 * kNonceBytes);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(loadRdzvSecret().key, first.key);  // the second launcher reads the same one
}

}  // namespace
}  // namespace ftb::launcher
