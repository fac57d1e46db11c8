// Tests for SLURM hostlist and tasks-per-node expansion.
#include "common/hostlist.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace ftb {
namespace {

using Hosts = std::vector<std::string>;

TEST(Hostlist, SingleHost) { EXPECT_EQ(expandHostlist("n1"), Hosts({"n1"})); }

TEST(Hostlist, Range) { EXPECT_EQ(expandHostlist("n[1-3]"), Hosts({"n1", "n2", "n3"})); }

TEST(Hostlist, ZeroPaddingKeptAndCommaInsideBrackets) {
  EXPECT_EQ(expandHostlist("n[01-04,07]"), Hosts({"n01", "n02", "n03", "n04", "n07"}));
}

TEST(Hostlist, PaddingIsWidthOfLowerBound) {
  EXPECT_EQ(expandHostlist("n[8-10]"), Hosts({"n8", "n9", "n10"}));
  EXPECT_EQ(expandHostlist("n[098-101]"), Hosts({"n098", "n099", "n100", "n101"}));
}

TEST(Hostlist, SeveralItems) {
  EXPECT_EQ(expandHostlist("n[1-2],m[3-4]"), Hosts({"n1", "n2", "m3", "m4"}));
  EXPECT_EQ(expandHostlist("a,b,c"), Hosts({"a", "b", "c"}));
}

TEST(Hostlist, CartesianProductLeftmostSlowest) {
  EXPECT_EQ(expandHostlist("r[1-2]n[1-2]"), Hosts({"r1n1", "r1n2", "r2n1", "r2n2"}));
}

TEST(Hostlist, DashInName) {
  EXPECT_EQ(expandHostlist("gpu-a[1-2]"), Hosts({"gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expandHostlist("n[01-04,07],gpu-a[1-2]"),
            Hosts({"n01", "n02", "n03", "n04", "n07", "gpu-a1", "gpu-a2"}));
}

TEST(Hostlist, ResultIsWhitespaceFree) {
  EXPECT_EQ(expandHostlist(" n1 , n[2-3] "), Hosts({"n1", "n2", "n3"}));
  for (const std::string& h : expandHostlist("a[1-2],b"))
    EXPECT_EQ(h.find_first_of(" \t\n"), std::string::npos) << h;
}

// The message without its hint; every hostlist error must carry the syntax hint.
std::string hostlistError(const std::string& expr) {
  try {
    expandHostlist(expr, "SLURM_JOB_NODELIST");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    const std::string msg = e.what();
    const std::string hint =
        "\n  hint: expected SLURM hostlist syntax: names of letters, digits, '-', '.', '_' with "
        "bracket ranges, e.g. 'n[01-04,07],gpu-a1'";
    const size_t at = msg.find(hint);
    EXPECT_NE(at, std::string::npos) << msg;
    return at == std::string::npos ? msg : msg.substr(0, at);
  }
  ADD_FAILURE() << "no error for '" << expr << "'";
  return "";
}

TEST(Hostlist, Errors) {
  EXPECT_EQ(hostlistError("n[1-"),
            "config error: key 'SLURM_JOB_NODELIST': unbalanced '[' at position 1 in 'n[1-'");
  EXPECT_EQ(hostlistError("n[3-1]"),
            "config error: key 'SLURM_JOB_NODELIST': range end 1 is smaller than its start 3 "
            "at position 4 in 'n[3-1]'");
  EXPECT_EQ(hostlistError("n[]"),
            "config error: key 'SLURM_JOB_NODELIST': empty range at position 2 in 'n[]'");
  EXPECT_EQ(hostlistError("n[a-b]"),
            "config error: key 'SLURM_JOB_NODELIST': expected a number at position 2 in "
            "'n[a-b]'");
  EXPECT_EQ(hostlistError(""),
            "config error: key 'SLURM_JOB_NODELIST': empty hostlist at position 0 in ''");
  EXPECT_EQ(hostlistError(","),
            "config error: key 'SLURM_JOB_NODELIST': empty host name at position 0 in ','");
  EXPECT_NE(hostlistError("n1]").find("unbalanced ']'"), std::string::npos);
  EXPECT_NE(hostlistError("n[1-2"), "");
  EXPECT_NE(hostlistError("a,,b").find("empty host name at position 2"), std::string::npos);
  EXPECT_NE(hostlistError("n[1-99999999]").find("too large"), std::string::npos);
}

TEST(Hostlist, RejectsCharactersHostNamesCannotHave) {
  EXPECT_EQ(hostlistError("n1:2"),
            "config error: key 'SLURM_JOB_NODELIST': character ':' is not allowed in a host name "
            "(letters, digits, '-', '.', '_') at position 2 in 'n1:2'");
  for (const char* bad : {"a/b", "n[1-2]x*", "h@1", "n;1"})
    EXPECT_NE(hostlistError(bad).find("is not allowed in a host name"), std::string::npos) << bad;
  EXPECT_EQ(expandHostlist("a_b.c-d[1-2]"), Hosts({"a_b.c-d1", "a_b.c-d2"}));
}

TEST(Hostlist, MillionHostsExpandsInLinearTime) {
  // n[0001-999999] used to hang the dry run; the expansion itself is one pass.
  auto hosts = expandHostlist("n[000001-999999]");
  ASSERT_EQ(hosts.size(), 999999u);
  EXPECT_EQ(hosts.front(), "n000001");
  EXPECT_EQ(hosts.back(), "n999999");
}

TEST(Hostlist, DefaultKeyName) {
  try {
    expandHostlist("n[");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("config error: key 'hostlist': ", 0), 0u) << e.what();
  }
}

TEST(TasksPerNode, Expands) {
  EXPECT_EQ(expandTasksPerNode("2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(expandTasksPerNode("4"), std::vector<int>({4}));
  EXPECT_EQ(expandTasksPerNode("1,3(x2)"), std::vector<int>({1, 3, 3}));
}

TEST(TasksPerNode, Errors) {
  for (const char* bad : {"2(x)", "x", "", "2(3)", "2(x3", "2,", "2(x0)", "2 ", "4,0", "0(x2)"}) {
    EXPECT_THROW(expandTasksPerNode(bad), ConfigError) << bad;
  }
  try {
    expandTasksPerNode("2(x)");
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config error: key 'SLURM_TASKS_PER_NODE': expected a repeat count at "
                 "position 3 in '2(x)'\n  hint: expected SLURM's tasks-per-node syntax: counts >= "
                 "1, a repeat as "
                 "COUNT(xN), e.g. '2(x3),1'");
  }
  // Found by fuzz_hostlist: a node with 0 tasks was accepted.
  try {
    expandTasksPerNode("4,0");
    ADD_FAILURE() << "4,0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config error: key 'SLURM_TASKS_PER_NODE': tasks per node must be >= 1 at "
                 "position 2 in '4,0'\n  hint: expected SLURM's tasks-per-node syntax: counts >= "
                 "1, a repeat as "
                 "COUNT(xN), e.g. '2(x3),1'");
  }
}

}  // namespace
}  // namespace ftb
