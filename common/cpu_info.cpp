#include "common/cpu_info.h"

#include <cpuid.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace ftb {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void setFlags(CpuInfo& c, const std::set<std::string>& f) {
  auto has = [&f](const char* n) { return f.count(n) > 0; };
  c.avx = has("avx");
  c.avx2 = has("avx2");
  c.fma = has("fma");
  c.avx512f = has("avx512f");
  c.avx512bw = has("avx512bw");
  c.avx512dq = has("avx512dq");
  c.avx512vl = has("avx512vl");
  c.avx512_bf16 = has("avx512_bf16");
  c.amx_tile = has("amx_tile");
  c.amx_bf16 = has("amx_bf16");
}

// ISA bits from cpuid leaves 1 and 7 (used only where /proc/cpuinfo has no flags).
void flagsFromCpuid(CpuInfo& c) {
  unsigned a = 0, b = 0, cx = 0, d = 0;
  std::set<std::string> f;
  if (__get_cpuid(1, &a, &b, &cx, &d)) {
    if (cx & (1u << 12)) f.insert("fma");
    if (cx & (1u << 28)) f.insert("avx");
  }
  if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
    const std::pair<int, const char*> ebx[] = {
        {5, "avx2"}, {16, "avx512f"}, {17, "avx512dq"}, {30, "avx512bw"}, {31, "avx512vl"}};
    for (auto [bit, name] : ebx)
      if (b & (1u << bit)) f.insert(name);
    if (d & (1u << 22)) f.insert("amx_bf16");
    if (d & (1u << 24)) f.insert("amx_tile");
    if (__get_cpuid_count(7, 1, &a, &b, &cx, &d) && (a & (1u << 5))) f.insert("avx512_bf16");
  }
  setFlags(c, f);
  c.flags_source = "cpuid";
}

std::string readProcFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

int readInt(const std::string& path) {
  std::ifstream in(path);
  int v = -1;
  in >> v;
  return in ? v : -1;
}

}  // namespace

CpuInfo parseCpuInfo(const std::string& text) {
  CpuInfo c;
  std::istringstream in(text);
  std::string line;
  bool have_flags = false;
  while (std::getline(in, line)) {
    if (trim(line).empty()) {
      if (!c.vendor.empty() || have_flags) break;  // end of the first processor block
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(line.substr(0, colon)), val = trim(line.substr(colon + 1));
    if (key == "model name")
      c.model_name = val;
    else if (key == "vendor_id")
      c.vendor = val;
    else if (key == "cpu family")
      c.family = std::atoi(val.c_str());
    else if (key == "model")
      c.model = std::atoi(val.c_str());
    else if (key == "flags") {
      std::istringstream fs(val);
      std::set<std::string> f;
      for (std::string w; fs >> w;) f.insert(w);
      setFlags(c, f);
      have_flags = true;
      c.flags_source = "/proc/cpuinfo";
    }
  }
  if (c.model_name.empty()) c.model_name = "unknown";
  return c;
}

CpuInfo detectCpu() {
  CpuInfo c = parseCpuInfo(readProcFile("/proc/cpuinfo"));
  if (c.flags_source.empty()) flagsFromCpuid(c);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) c.bound_cpus.push_back(i);
  }
  std::set<std::pair<int, int>> cores;
  for (int cpu : c.bound_cpus) {
    std::string t = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int pkg = readInt(t + "physical_package_id"), core = readInt(t + "core_id");
    // Without topology, count the logical CPU as its own core.
    cores.insert(core < 0 ? std::pair{-1, cpu} : std::pair{pkg, core});
  }
  c.bound_physical_cores = static_cast<int>(cores.size());
  return c;
}

std::string CpuInfo::bestFmaUnit() const {
  if (avx512f) return "avx512 FMA";
  if (avx2 && fma) return "avx2 FMA";
  return "sse2";
}

std::string CpuInfo::bestBf16Unit() const {
  if (amx_bf16 && amx_tile) return "amx_bf16";
  if (avx512_bf16) return "avx512_bf16";
  return bestFmaUnit();
}

std::string CpuInfo::isaString() const {
  std::string s;
  const std::pair<bool, const char*> bits[] = {{avx, "avx"},           {avx2, "avx2"},
                                               {fma, "fma"},           {avx512f, "avx512f"},
                                               {avx512bw, "avx512bw"}, {avx512dq, "avx512dq"},
                                               {avx512vl, "avx512vl"}, {avx512_bf16, "avx512_bf16"},
                                               {amx_bf16, "amx_bf16"}, {amx_tile, "amx_tile"}};
  for (auto [on, name] : bits)
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  return s.empty() ? "sse2" : s;
}

std::string CpuInfo::boundCpuList() const {
  std::string s;
  for (size_t i = 0; i < bound_cpus.size();) {
    size_t j = i;
    while (j + 1 < bound_cpus.size() && bound_cpus[j + 1] == bound_cpus[j] + 1) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(bound_cpus[i]);
    if (j > i) s += "-" + std::to_string(bound_cpus[j]);
    i = j + 1;
  }
  return s;
}

int openblasCoretypeLevel(const std::string& name) {
  static const std::pair<const char*, int> kLevels[] = {
      {"katmai", 1},       {"coppermine", 1},    {"northwood", 1},  {"prescott", 1},
      {"banias", 1},       {"core2", 1},         {"penryn", 1},     {"dunnington", 1},
      {"nehalem", 1},      {"atom", 1},          {"athlon", 1},     {"opteron", 1},
      {"opteron_sse3", 1}, {"barcelona", 1},     {"bobcat", 1},     {"nano", 1},
      {"sandybridge", 2},  {"bulldozer", 2},     {"piledriver", 2}, {"steamroller", 2},
      {"haswell", 3},      {"zen", 3},           {"excavator", 3},  {"skylakex", 4},
      {"cooperlake", 5},   {"sapphirerapids", 6}};
  std::string n = asciiLower(trim(name));
  for (auto [k, level] : kLevels)
    if (n == k) return level;
  return 0;
}

int cpuIsaLevel(const CpuInfo& c) {
  bool avx512 = c.avx512f && c.avx512bw && c.avx512dq && c.avx512vl;
  if (avx512 && c.avx512_bf16 && c.amx_bf16 && c.amx_tile) return 6;
  if (avx512 && c.avx512_bf16) return 5;
  if (avx512) return 4;
  if (c.avx2 && c.fma) return 3;
  if (c.avx) return 2;
  return 1;
}

std::string recommendedOpenblasCoretype(const CpuInfo& c) {
  switch (cpuIsaLevel(c)) {
    case 6:  // Cooperlake's sgemm kernels; SapphireRapids is unknown to OpenBLAS < 0.3.22
    case 5:
      return "Cooperlake";
    case 4:
      return "SkylakeX";
    case 3:
      return c.vendor == "AuthenticAMD" ? "Zen" : "Haswell";
    case 2:
      return "Sandybridge";
    default:
      return "Nehalem";
  }
}

CoretypeCheck checkOpenblasCoretype(const CpuInfo& cpu, const std::string& setting) {
  CoretypeCheck r;
  r.setting = setting;
  r.recommended = recommendedOpenblasCoretype(cpu);
  if (trim(setting).empty()) return r;  // OpenBLAS detects the core itself
  const int have = openblasCoretypeLevel(setting), best = cpuIsaLevel(cpu);
  const std::string fix = "; set OPENBLAS_CORETYPE=" + r.recommended + " or unset it";
  if (have == 0) {
    r.verdict = CoretypeCheck::Verdict::kUnknown;
    r.message = "OPENBLAS_CORETYPE=" + setting + " is not an OpenBLAS x86_64 core type" + fix;
  } else if (have < std::min(best, 5)) {
    r.verdict = CoretypeCheck::Verdict::kBelow;
    r.message = "OPENBLAS_CORETYPE=" + setting + " uses narrower kernels than this CPU (" +
                cpu.model_name + ", " + cpu.bestFmaUnit() + ") runs" + fix;
  } else if (have > best) {
    r.verdict = CoretypeCheck::Verdict::kAbove;
    r.message = "OPENBLAS_CORETYPE=" + setting + " needs instructions this CPU (" + cpu.model_name +
                ") lacks: illegal-instruction crash" + fix;
  } else {
    r.verdict = CoretypeCheck::Verdict::kOk;
  }
  return r;
}

std::string asciiLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace ftb
