#include "launcher/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "common/error.h"

namespace ftb::launcher {
namespace {

uint32_t maskOf(int prefix) { return prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix); }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

}  // namespace

std::vector<IfAddr> listInterfaces() {
  std::vector<IfAddr> out;
  ifaddrs* head = nullptr;
  if (getifaddrs(&head) != 0) return out;
  for (ifaddrs* p = head; p; p = p->ifa_next) {
    if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET || !(p->ifa_flags & IFF_UP)) continue;
    IfAddr a;
    a.name = p->ifa_name;
    char buf[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(p->ifa_addr);
    inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
    a.ip = buf;
    if (p->ifa_netmask) {
      uint32_t m = ntohl(reinterpret_cast<sockaddr_in*>(p->ifa_netmask)->sin_addr.s_addr);
      a.prefix = __builtin_popcount(m);
    }
    a.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(a);
  }
  freeifaddrs(head);
  return out;
}

std::vector<std::string> listInterfaceNames() {
  std::vector<std::string> out;
  if (struct if_nameindex* idx = if_nameindex()) {
    for (auto* p = idx; p->if_index != 0; ++p) out.push_back(p->if_name);
    if_freenameindex(idx);
  }
  return out;
}

std::optional<uint32_t> parseIpv4(const std::string& ip) {
  in_addr a{};
  if (inet_pton(AF_INET, ip.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

Cidr parseCidr(const std::string& text) {
  auto slash = text.find('/');
  auto bad = [&](const std::string& why) -> Cidr {
    throw ConfigError("--network", "command line", "'" + text + "': " + why,
                      "expected a CIDR like 10.0.0.0/24");
  };
  if (slash == std::string::npos) return bad("missing '/prefix'");
  auto ip = parseIpv4(text.substr(0, slash));
  if (!ip) return bad("'" + text.substr(0, slash) + "' is not an IPv4 address");
  std::string p = text.substr(slash + 1);
  if (p.empty() || p.size() > 2 || !std::all_of(p.begin(), p.end(), ::isdigit))
    return bad("prefix must be a number 0..32");
  int prefix = std::stoi(p);
  if (prefix > 32) return bad("prefix must be a number 0..32");
  return Cidr{*ip & maskOf(prefix), prefix};
}

bool inNetwork(const std::string& ip, const Cidr& net) {
  auto a = parseIpv4(ip);
  return a && (*a & maskOf(net.prefix)) == net.addr;
}

bool sameSubnet(const IfAddr& a, const std::string& other_ip) {
  auto x = parseIpv4(a.ip);
  return x && inNetwork(other_ip, Cidr{*x & maskOf(a.prefix), a.prefix});
}

std::optional<IfAddr> selectAddress(const std::vector<IfAddr>& addrs,
                                    const std::vector<std::string>& iface_names,
                                    const std::string& iface, const std::string& network) {
  if (!iface.empty()) {
    for (const auto& a : addrs)
      if (a.name == iface) return a;
    bool exists = std::count(iface_names.begin(), iface_names.end(), iface) > 0;
    throw ConfigError("--iface", "command line",
                      exists ? "interface '" + iface + "' has no IPv4 address or is down"
                             : "interface '" + iface + "' does not exist",
                      "interfaces here: " + joined(iface_names));
  }
  if (!network.empty()) {
    Cidr net = parseCidr(network);
    for (const auto& a : addrs)
      if (inNetwork(a.ip, net)) return a;
    std::vector<std::string> have;
    for (const auto& a : addrs)
      have.push_back(a.name + " " + a.ip + "/" + std::to_string(a.prefix));
    throw ConfigError("--network", "command line", "no local address in " + network,
                      "addresses here: " + joined(have));
  }
  return std::nullopt;
}

std::string sourceAddressFor(const std::string& ip) {
  auto dst = parseIpv4(ip);
  if (!dst) return "";
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return "";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9);
  sa.sin_addr.s_addr = htonl(*dst);
  std::string out;
  if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    char buf[INET_ADDRSTRLEN];
    if (getsockname(s, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf))
      out = buf;
  }
  close(s);
  return out;
}

}  // namespace ftb::launcher
