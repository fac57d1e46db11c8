// launcher/env_probe.h: the ELF interpreter lookup and how probe text is reported.
#include "launcher/env_probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/report.h"

namespace ftb::launcher {
namespace {

TEST(EnvProbe, ElfInterpreterOfThisTestBinary) {
  std::string why;
  const std::string interp = elfInterpreter("/proc/self/exe", &why);
  EXPECT_TRUE(why.empty()) << why;
  ASSERT_FALSE(interp.empty());
  EXPECT_EQ(interp[0], '/');
  EXPECT_TRUE(std::filesystem::exists(interp)) << interp;
}

TEST(EnvProbe, ScriptsAndMissingFilesHaveNoInterpreter) {
  const auto script = std::filesystem::temp_directory_path() /
                      ("ftb_env_probe_" + std::to_string(getpid()) + ".sh");
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  std::string why;
  EXPECT_EQ(elfInterpreter(script.string(), &why), "");
  EXPECT_NE(why.find("is not an ELF executable"), std::string::npos) << why;
  std::filesystem::remove(script);
  why.clear();
  EXPECT_EQ(elfInterpreter("/nonexistent/program", &why), "");
  EXPECT_FALSE(why.empty());
}

TEST(EnvProbe, ReportNamesTheFirstLineAndKeepsWarnings) {
  std::ostringstream o;
  writeWorkerEnv(o, "BLAS x; allocator y\nenvironment: 4 intra-op thread(s) on 2 bound CPU(s)",
                 "  ");
  EXPECT_EQ(o.str(),
            "  worker environment (local rank 0, probed): BLAS x; allocator y\n"
            "  environment: 4 intra-op thread(s) on 2 bound CPU(s)\n");
  std::ostringstream none;
  writeWorkerEnv(none, "", "  ");
  EXPECT_EQ(none.str(), "");
}

}  // namespace
}  // namespace ftb::launcher
