#include "common/checkpoint_manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <type_traits>

#include "common/checked_math.h"
#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json_input.h"

namespace ftb {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json sliceJson(const CkptSlice& s) {
  return {{"file", s.file}, {"dataset", s.dataset}, {"offset", s.offset}, {"size", s.size}};
}

// "" when every number in `v` (recursively) is an integer an int64_t holds, else the
// first one that is not: JSON allows 1e300 or 2^64 where the manifest stores int64, and
// converting those to int64_t is undefined (found by tests/fuzz/fuzz_manifest).
std::string nonInt64Number(const json& v) {
  if (v.is_array() || v.is_object()) {
    for (const json& e : v)
      if (std::string bad = nonInt64Number(e); !bad.empty()) return bad;
    return "";
  }
  if (!v.is_number() ||
      v.is_number_integer() && (!v.is_number_unsigned() ||
                                v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())))
    return "";
  return v.dump();
}

// Typed field access that names the manifest and the field on failure.
template <typename T>
T field(const json& j, const char* key, const std::string& where, const std::string& path) {
  if (!j.is_object() || !j.contains(key))
    throw CheckpointError(path, "manifest is missing '" + where + key + "'");
  if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::vector<int64_t>> ||
                std::is_same_v<T, std::map<std::string, int64_t>>) {
    if (std::string bad = nonInt64Number(j.at(key)); !bad.empty())
      throw CheckpointError(path, "manifest field '" + where + key + "' holds " + bad +
                                      ", not an integer of 64 bits");
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw CheckpointError(
        path, "manifest field '" + where + key + "' has the wrong type (" + e.what() + ")");
  }
}

CkptTensor parseTensor(const json& j, const std::string& name, const std::string& path) {
  const std::string w = "tensors." + name + ".";
  CkptTensor t;
  t.shape = field<std::vector<int64_t>>(j, "shape", w, path);
  t.dtype = field<std::string>(j, "dtype", w, path);
  for (const json& s : field<json>(j, "slices", w, path)) {
    CkptSlice c;
    c.file = field<std::string>(s, "file", w + "slices[].", path);
    c.dataset = field<std::string>(s, "dataset", w + "slices[].", path);
    c.offset = field<std::vector<int64_t>>(s, "offset", w + "slices[].", path);
    c.size = field<std::vector<int64_t>>(s, "size", w + "slices[].", path);
    if (c.offset.size() != t.shape.size() || c.size.size() != t.shape.size())
      throw CheckpointError(
          path, "manifest slice of '" + name + "' has " + std::to_string(c.offset.size()) +
                    "-D offset but the tensor is " + std::to_string(t.shape.size()) + "-D");
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (c.offset[d] < 0 || c.size[d] < 0 || t.shape[d] < 0 || c.offset[d] > t.shape[d] ||
          c.size[d] > t.shape[d] - c.offset[d])
        throw CheckpointError(path, "manifest slice of '" + name + "' in " + c.file +
                                        " lies outside the tensor's shape in dimension " +
                                        std::to_string(d));
    t.slices.push_back(std::move(c));
  }
  return t;
}

// A parser callback that throws CheckpointError at the second occurrence of a key in one
// object (JSON allows it; a reader would silently keep one of the two values).
json::parser_callback_t refuseDuplicateKeys(const std::string& path) {
  auto open = std::make_shared<std::vector<std::set<std::string>>>();
  return [open, path](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open->emplace_back();
    if (event == json::parse_event_t::object_end && !open->empty()) open->pop_back();
    if (event == json::parse_event_t::key && !open->empty() &&
        !open->back().insert(parsed.get<std::string>()).second)
      throw CheckpointError(path, "manifest has the key '" + parsed.get<std::string>() +
                                      "' twice in one object (edited by hand?)");
    return true;
  };
}

bool sameCompatValue(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::optional<Value> va = valueFromString(a), vb = valueFromString(b);
  return va && vb && sameValue(*va, *vb);
}

constexpr size_t kMaxManifestBytes = size_t{256} << 20;  // 256 MiB

std::string readManifestText(const std::string& mpath) {
  struct stat st {};
  if (::lstat(mpath.c_str(), &st) != 0 && errno == ENOENT)
    throw CheckpointError(mpath, "manifest missing (the save did not finish)");
  if (::lstat(mpath.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw CheckpointError(mpath, "manifest is a symbolic link; a save writes a regular file");
  try {  // refuses a FIFO, device or directory without opening it to block (common/files.h)
    return readInputFile(mpath, "checkpoint manifest", kMaxManifestBytes);
  } catch (const ConfigError& e) {
    throw CheckpointError(mpath, e.what());
  }
}

std::string manifestFileNameProblem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name == "." || name == "..") return "is '" + name + "'";
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
    return "is a path, not a file name inside the step directory";
  return "";
}

void checkManifestState(const Manifest& m, const std::string& dir, const std::string& mpath) {
  auto step = m.state.find("step");
  if (step == m.state.end()) throw CheckpointError(mpath, "state has no 'step'");
  if (step->second < 0)
    throw CheckpointError(mpath, "state.step is " + std::to_string(step->second) + ", below 0");
  std::optional<int64_t> named = checkpointStepOf(fs::path(dir).filename().string());
  if (named && *named != step->second)
    throw CheckpointError(mpath, "state.step is " + std::to_string(step->second) +
                                     " but the directory is " + fs::path(dir).filename().string() +
                                     " (a save names its directory after its step)");
  for (const auto& [k, v] : m.state)
    if (v < 0)
      throw CheckpointError(mpath, "state." + k + " is " + std::to_string(v) + ", below 0");
}

void checkManifestTensor(const std::string& name, const CkptTensor& t, const std::string& mpath) {
  static const std::set<std::string> kDtypes = {"float32", "float64", "bfloat16", "int64",
                                                "uint8"};
  if (!kDtypes.count(t.dtype))
    throw CheckpointError(mpath, "tensor '" + name + "' has dtype '" + t.dtype +
                                     "'; a checkpoint holds float32, float64, bfloat16, int64 "
                                     "or uint8");
  for (int64_t d : t.shape)
    if (d < 0) throw CheckpointError(mpath, "tensor '" + name + "' has a negative dimension");
  std::set<std::string> datasets;
  for (const CkptSlice& s : t.slices) {
    // writeShardFile names slice k of tensor N "/N/k": any other name is another tensor's.
    const std::string prefix = "/" + name + "/";
    const std::string k = s.dataset.rfind(prefix, 0) == 0 ? s.dataset.substr(prefix.size()) : "";
    if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos)
      throw CheckpointError(mpath, "a slice of tensor '" + name + "' names dataset '" + s.dataset +
                                       "', not one of its own ('" + prefix + "<k>')");
    if (!datasets.insert(s.file + ":" + s.dataset).second)
      throw CheckpointError(
          mpath, "tensor '" + name + "' lists dataset " + s.dataset + " of " + s.file + " twice");
  }
}

}  // namespace

std::string compatDiff(const std::map<std::string, std::string>& saved,
                       const std::map<std::string, std::string>& now) {
  std::string diff;
  for (const auto& [k, v] : now) {
    auto it = saved.find(k);
    if (it != saved.end() && sameCompatValue(it->second, v)) continue;
    const std::string was = it == saved.end() ? "(absent)" : it->second;
    diff += (diff.empty() ? "" : "; ") + k + " = " + was + " in the checkpoint, " + v + " now";
  }
  return diff;
}

std::string manifestToJson(const Manifest& m) {
  json j;
  j["format"] = "ftbench-checkpoint";
  j["format_version"] = m.format_version;
  j["ftbench_version"] = m.ftbench_version;
  j["config_hash"] = m.config_hash;
  j["tag"] = m.tag;
  j["created_utc"] = m.created_utc;
  const CkptLayout& l = m.layout;
  j["layout"] = {{"world", l.world}, {"dp_replicate", l.dp_replicate}, {"dp_shard", l.dp_shard},
                 {"tp", l.tp},       {"zero_stage", l.zero_stage},     {"nodes", l.nodes}};
  if (l.pp > 1) j["layout"]["pp"] = l.pp;
  j["compat"] = m.compat;
  j["state"] = m.state;
  j["files"] = json::array();
  for (const CkptFile& f : m.files)
    j["files"].push_back(
        {{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  j["tensors"] = json::object();
  for (const auto& [name, t] : m.tensors) {
    json s = json::array();
    for (const CkptSlice& c : t.slices) s.push_back(sliceJson(c));
    j["tensors"][name] = {{"shape", t.shape}, {"dtype", t.dtype}, {"slices", s}};
  }
  return j.dump(1) + "\n";
}

Manifest parseManifest(const std::string& text, const std::string& path) {
  // The checks below recurse once per level (nonInt64Number): nesting is bounded first.
  if (jsonTooDeepAt(text, kMaxJsonDepth) != std::string_view::npos)
    throw CheckpointError(path, "manifest nests deeper than " + std::to_string(kMaxJsonDepth) +
                                    " levels (damaged, or not a manifest)");
  json j;
  try {
    j = json::parse(text, refuseDuplicateKeys(path));
  } catch (const json::exception& e) {
    throw CheckpointError(
        path, std::string("manifest is not valid JSON (truncated or damaged): ") + e.what());
  }
  if (field<std::string>(j, "format", "", path) != "ftbench-checkpoint")
    throw CheckpointError(path, "not an ftbench checkpoint manifest (format field)");
  Manifest m;
  m.format_version = field<int64_t>(j, "format_version", "", path);
  if (m.format_version != kCheckpointFormatVersion)
    throw CheckpointError(path, "format_version " + std::to_string(m.format_version) +
                                    ", this ftbench reads " +
                                    std::to_string(kCheckpointFormatVersion));
  m.ftbench_version = field<std::string>(j, "ftbench_version", "", path);
  m.config_hash = field<std::string>(j, "config_hash", "", path);
  m.tag = field<std::string>(j, "tag", "", path);
  m.created_utc = field<std::string>(j, "created_utc", "", path);
  json l = field<json>(j, "layout", "", path);
  for (auto [k, v] : {std::pair{"world", &m.layout.world},
                      {"dp_replicate", &m.layout.dp_replicate},
                      {"dp_shard", &m.layout.dp_shard},
                      {"tp", &m.layout.tp},
                      {"zero_stage", &m.layout.zero_stage},
                      {"nodes", &m.layout.nodes}})
    *v = field<int64_t>(l, k, "layout.", path);
  if (l.contains("pp")) m.layout.pp = field<int64_t>(l, "pp", "layout.", path);
  m.compat = field<std::map<std::string, std::string>>(j, "compat", "", path);
  m.state = field<std::map<std::string, int64_t>>(j, "state", "", path);
  for (const json& f : field<json>(j, "files", "", path))
    m.files.push_back({field<std::string>(f, "name", "files[].", path),
                       field<int64_t>(f, "rank", "files[].", path),
                       field<int64_t>(f, "bytes", "files[].", path),
                       field<std::string>(f, "crc32", "files[].", path)});
  const json tensors = field<json>(j, "tensors", "", path);
  for (const auto& [name, t] : tensors.items()) m.tensors[name] = parseTensor(t, name, path);
  return m;
}

std::string checkpointDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string checkpointShardName(int64_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%05lld.h5", static_cast<long long>(rank));
  return buf;
}

std::optional<int64_t> checkpointStepOf(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return std::stoll(name.substr(5));
}

std::vector<std::string> listCheckpointDirs(const std::string& ckpt_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(ckpt_dir, ec), end; !ec && it != end; it.increment(ec))
    if (auto s = checkpointStepOf(it->path().filename().string()); s && it->is_directory())
      found.emplace_back(*s, it->path().string());
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string fileCrc32(const std::string& path, int64_t* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw CheckpointError(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  int64_t n = 0;
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = crc32(crc, buf.data(), static_cast<uInt>(got));
    n += static_cast<int64_t>(got);
  }
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) throw CheckpointError(path, "read error while checksumming");
  if (bytes) *bytes = n;
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

void checkManifestStructure(const Manifest& m, const std::string& dir, const std::string& mpath) {
  auto bad = [&](const std::string& what) { throw CheckpointError(mpath, what); };
  const CkptLayout& l = m.layout;
  for (int64_t v : {l.world, l.dp_replicate, l.dp_shard, l.tp, l.nodes, l.pp})
    if (v < 1) bad("layout has a size below 1 (world, dp_replicate, dp_shard, tp, nodes, pp)");
  const std::optional<int64_t> product = checkedProduct({l.pp, l.dp_replicate, l.dp_shard, l.tp});
  if (!product || l.world != *product)
    bad("layout.world " + std::to_string(l.world) + " is not pp x dp_replicate x dp_shard x tp (" +
        std::to_string(l.pp) + " x " + std::to_string(l.dp_replicate) + " x " +
        std::to_string(l.dp_shard) + " x " + std::to_string(l.tp) + ")");
  if (l.zero_stage < 0 || l.zero_stage > 3) bad("layout.zero_stage is not 0..3");
  if (int64_t(m.files.size()) != l.world)
    bad("lists " + std::to_string(m.files.size()) + " files for layout.world " +
        std::to_string(l.world) + " (one file per rank)");
  std::set<int64_t> ranks;
  std::set<std::string> names;
  for (const CkptFile& f : m.files) {
    if (std::string why = manifestFileNameProblem(f.name); !why.empty())
      bad("files[] name '" + f.name + "' " + why);
    if (!names.insert(f.name).second) bad("lists file " + f.name + " twice");
    if (f.rank < 0 || f.rank >= l.world || !ranks.insert(f.rank).second)
      bad("file " + f.name + " has rank " + std::to_string(f.rank) +
          ", not one of the distinct ranks 0.." + std::to_string(l.world - 1));
    struct stat st {};
    const std::string p = (fs::path(dir) / f.name).string();
    if (::lstat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw CheckpointError(p, S_ISLNK(st.st_mode)
                                   ? "is a symbolic link; a save writes regular files"
                                   : "is not a regular file");
  }
  checkManifestState(m, dir, mpath);
  for (const auto& [name, t] : m.tensors) checkManifestTensor(name, t, mpath);
}

Manifest loadVerifiedManifest(const std::string& dir, const std::vector<int64_t>& ranks) {
  const std::string mpath = (fs::path(dir) / kManifestName).string();
  Manifest m = parseManifest(readManifestText(mpath), mpath);
  checkManifestStructure(m, dir, mpath);
  std::set<std::string> names;
  for (const CkptFile& f : m.files) {
    names.insert(f.name);
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), f.rank) == ranks.end()) continue;
    const std::string p = (fs::path(dir) / f.name).string();
    int64_t bytes = 0;
    std::string crc = fileCrc32(p, &bytes);
    if (bytes != f.bytes)
      throw CheckpointError(p, "size " + std::to_string(bytes) + " bytes, the manifest says " +
                                   std::to_string(f.bytes) + " (truncated or replaced)");
    if (crc != f.crc32)
      throw CheckpointError(
          p, "crc32 " + crc + ", the manifest says " + f.crc32 + " (the file is damaged)");
  }
  for (const auto& [name, t] : m.tensors)
    for (const CkptSlice& s : t.slices)
      if (!names.count(s.file))
        throw CheckpointError(mpath, "tensor '" + name + "' names file " + s.file +
                                         ", which the manifest does not list");
  return m;
}

}  // namespace ftb
