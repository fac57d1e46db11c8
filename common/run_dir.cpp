// prepareRunDir(): see the contract in tag.h.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "common/error.h"
#include "common/own_dir.h"
#include "common/run_status.h"
#include "common/tag.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string runTomlField(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line, prefix = "# " + name + " = ";
  while (std::getline(in, line) && !line.empty() && line[0] == '#')
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return "";
}

namespace {

// The run directory and each directory of the tag's path under output_dir (a tag may hold
// `/`) must be this user's: another user's could stop the run or swap its checkpoints.
// With no_sweep_dir (`tag` empty) output_dir itself is the run directory.
void requireOwnRunDir(const std::string& output_dir, const std::string& tag) {
  fs::path dir = output_dir;
  std::vector<fs::path> check;
  if (tag.empty()) check.push_back(dir);
  for (const auto& part : fs::path(tag)) check.push_back(dir /= part);
  for (const auto& d : check)
    if (const std::string why = ownDirProblem(d.string()); !why.empty())
      throw ConfigError("output.dir", "",
                        "the run directory " + d.string() + " " + why +
                            ": its owner could stop this run or swap its checkpoints",
                        "choose an output.dir of your own, or remove " + d.string() +
                            " (this run did not make it)");
}

std::string runTag(const Config& cfg, int world_size, int nodes) {
  std::string fmt = kDefaultTagFmt;
  if (cfg.has("output.sweep_fmt") && !cfg.getString("output.sweep_fmt").empty())
    fmt = cfg.getString("output.sweep_fmt");
  return formatTag(cfg, world_size, fmt, nodes);
}

}  // namespace

std::string runDirPath(const Config& cfg, int world_size, const std::string& output_dir,
                       bool no_sweep_dir, int nodes) {
  return no_sweep_dir ? output_dir
                      : (fs::path(output_dir) / runTag(cfg, world_size, nodes)).string();
}

RunDir prepareRunDir(const Config& cfg, int world_size, const std::string& output_dir,
                     bool no_sweep_dir, int nodes) {
  RunDir rd{"", runTag(cfg, world_size, nodes), false};
  rd.path = no_sweep_dir ? output_dir : (fs::path(output_dir) / rd.tag).string();
  std::error_code ec;
  fs::create_directories(rd.path, ec);
  if (ec) throw IoError("cannot create run directory " + rd.path + ": " + ec.message());
  requireOwnRunDir(output_dir, no_sweep_dir ? "" : rd.tag);

  const std::string hash = configHash(cfg, world_size, nodes);
  const std::string ws = std::to_string(world_size);
  const std::string text = std::string(kRecordedConfigMark) +
                           " the resolved config of this run (written once)\n"
                           "# tag = " +
                           rd.tag + "\n# config_hash = " + hash + "\n# world_size = " + ws +
                           "\n# nodes = " + std::to_string(nodes) + "\n" + cfg.toToml();
  const std::string final_path = rd.path + "/run.toml";
  // Write a private temp file, then link() it into place: link fails with EEXIST
  // if another process won the race, so run.toml is always complete and unique.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = rd.path + "/.run.toml." + std::to_string(getpid()) + "." +
                          std::to_string(std::random_device{}()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw IoError("cannot write " + tmp + ": " + std::strerror(errno));
  }
  int rc = ::link(tmp.c_str(), final_path.c_str());
  int link_errno = errno;
  ::unlink(tmp.c_str());
  if (rc == 0) {
    rd.created = true;
    return rd;
  }
  if (link_errno != EEXIST)
    throw IoError("cannot create " + final_path + ": " + std::strerror(link_errno));

  std::string existing = readFile(final_path);
  std::string old_hash = runTomlField(existing, "config_hash");
  std::string old_ws = runTomlField(existing, "world_size");
  if (old_hash.empty()) {  // hand-written run.toml: hash what it says
    try {
      old_hash =
          configHash(Config::fromString(existing, final_path, {}, cfg.schema()), world_size, nodes);
      old_ws = ws;
    } catch (const ConfigError&) {
      old_hash = "unreadable";
    }
  }
  if (old_hash != hash || old_ws != ws)
    throw ConfigError("tag collision: " + final_path + " records config_hash " + old_hash +
                      " (world_size " + (old_ws.empty() ? "?" : old_ws) +
                      ") but this run has config_hash " + hash + " (world_size " + ws +
                      "); include {hash} in output.sweep_fmt or choose another output.dir");
  // A single-node hash is what it was before the node count counted, so a directory
  // written before then by a multi-node run of this config has this run's tag.
  std::optional<int> old_nodes = runNodes(rd.path);
  if (old_nodes && *old_nodes != nodes)
    throw ConfigError("", final_path,
                      "tag collision: this directory holds a run on " + std::to_string(*old_nodes) +
                          " node(s) (written before the node count " +
                          "was part of the tag), but this run is on " + std::to_string(nodes) +
                          " node(s)",
                      "move that directory aside, or choose another output.dir");
  return rd;
}

}  // namespace ftb
