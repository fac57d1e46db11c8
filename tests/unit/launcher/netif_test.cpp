#include "launcher/netif.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace ftb::launcher {
namespace {

TEST(Netif, ParseCidr) {
  Cidr c = parseCidr("10.77.0.5/24");
  EXPECT_EQ(c.prefix, 24);
  EXPECT_TRUE(inNetwork("10.77.0.200", c));
  EXPECT_FALSE(inNetwork("10.77.1.1", c));
  EXPECT_TRUE(inNetwork("1.2.3.4", parseCidr("0.0.0.0/0")));
  for (const char* bad : {"10.0.0.0", "10.0.0.0/33", "x/8", "10.0.0/8", "10.0.0.0/", "/8"})
    EXPECT_THROW(parseCidr(bad), ConfigError) << bad;
}

TEST(Netif, SelectByInterfaceAndNetwork) {
  std::vector<IfAddr> addrs = {{"lo", "127.0.0.1", 8, true}, {"eth0", "192.168.1.5", 24, false}};
  std::vector<std::string> names = {"lo", "eth0", "down0"};
  EXPECT_FALSE(selectAddress(addrs, names, "", ""));
  EXPECT_EQ(selectAddress(addrs, names, "eth0", "")->ip, "192.168.1.5");
  EXPECT_EQ(selectAddress(addrs, names, "", "192.168.0.0/16")->name, "eth0");
  try {
    selectAddress(addrs, names, "nope0", "");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
  EXPECT_THROW(selectAddress(addrs, names, "down0", ""), ConfigError);
  EXPECT_THROW(selectAddress(addrs, names, "", "10.0.0.0/8"), ConfigError);
}

TEST(Netif, LoopbackIsListedAndRoutable) {
  bool lo = false;
  for (const auto& a : listInterfaces()) lo = lo || (a.loopback && a.ip == "127.0.0.1");
  EXPECT_TRUE(lo);
  EXPECT_EQ(sourceAddressFor("127.0.0.1"), "127.0.0.1");
}

}  // namespace
}  // namespace ftb::launcher
