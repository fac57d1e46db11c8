// IPv4 interface discovery and address selection.
//
// Contract: addresses are IPv4 dotted quads. selectAddress() implements --iface / --network:
// it returns the chosen address or throws ConfigError (exit 2) when the interface does not
// exist, has no IPv4 address, or no address lies in the network.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ftb::launcher {

struct IfAddr {
  std::string name;  // interface, e.g. "eth0"
  std::string ip;    // "10.77.0.11"
  int prefix = 32;   // netmask length
  bool loopback = false;
};

struct Cidr {
  uint32_t addr = 0;  // host byte order, masked
  int prefix = 0;
};

std::vector<IfAddr> listInterfaces();           // IPv4 only, interfaces that are up
std::vector<std::string> listInterfaceNames();  // every interface, any family

// Throws ConfigError("--network", ...) for malformed input ("10.0.0.0/33", "x/8").
Cidr parseCidr(const std::string& text);
std::optional<uint32_t> parseIpv4(const std::string& ip);  // host byte order
bool inNetwork(const std::string& ip, const Cidr& net);
bool sameSubnet(const IfAddr& a, const std::string& other_ip);  // using a's prefix

// --iface NAME or --network CIDR against `addrs`; nullopt when both are empty.
std::optional<IfAddr> selectAddress(const std::vector<IfAddr>& addrs,
                                    const std::vector<std::string>& iface_names,
                                    const std::string& iface, const std::string& network);

// Source address the kernel would use to reach `ip` (UDP connect, no packet sent);
// "" when there is no route.
std::string sourceAddressFor(const std::string& ip);

}  // namespace ftb::launcher
