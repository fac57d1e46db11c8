#include "common/run_control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/own_dir.h"

namespace ftb {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kRequest = "request";

std::string requestPath(const std::string& run_dir) {
  return (fs::path(controlDir(run_dir)) / kRequest).string();
}

std::string replyPrefix(int64_t id) { return "reply." + std::to_string(id) + ".rank_"; }

json replyJson(const CtlReply& r) {
  return {{"id", r.id},
          {"rank", r.rank},
          {"world_size", r.world_size},
          {"host", r.host},
          {"pid", r.pid},
          {"command", r.command},
          {"state", toString(r.state)},
          {"steps_done", r.steps_done},
          {"max_steps", r.max_steps},
          {"loss", r.loss},
          {"tokens_per_s", r.tokens_per_s},
          {"eta_s", r.eta_s},
          {"last_checkpoint", r.last_checkpoint}};
}

CtlReply replyFromJson(const json& j) {
  CtlReply r;
  r.id = j.at("id").get<int64_t>();
  r.rank = j.at("rank").get<int>();
  r.world_size = j.at("world_size").get<int>();
  r.host = j.at("host").get<std::string>();
  r.pid = j.at("pid").get<int64_t>();
  r.command = j.at("command").get<std::string>();
  r.state = parseRunState(j.at("state").get<std::string>());
  r.steps_done = j.at("steps_done").get<int64_t>();
  r.max_steps = j.at("max_steps").get<int64_t>();
  r.loss = j.at("loss").get<double>();
  r.tokens_per_s = j.at("tokens_per_s").get<double>();
  r.eta_s = j.at("eta_s").get<double>();
  r.last_checkpoint = j.at("last_checkpoint").get<std::string>();
  return r;
}

}  // namespace

std::string controlDir(const std::string& run_dir) {
  return (fs::path(run_dir) / "control").string();
}

const char* ctlCommandName(CtlCommand c) {
  switch (c) {
    case CtlCommand::kStatus:
      return "status";
    case CtlCommand::kSave:
      return "save";
    case CtlCommand::kStop:
      return "stop";
    case CtlCommand::kNone:
      break;
  }
  return "none";
}

std::optional<CtlCommand> parseCtlCommand(const std::string& word) {
  for (CtlCommand c : {CtlCommand::kStatus, CtlCommand::kSave, CtlCommand::kStop})
    if (word == ctlCommandName(c)) return c;
  return std::nullopt;
}

void clearControlDir(const std::string& run_dir) {
  const std::string dir = controlDir(run_dir);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw IoError("cannot create the control directory " + dir + ": " + std::strerror(errno));
  if (const std::string why = ownDirProblem(dir); !why.empty())
    throw ConfigError("", "",
                      "the control directory " + dir + " " + why +
                          ": whoever can write in it could stop or checkpoint this run",
                      "remove it (this run did not make it), or choose another output.dir");
  if (::chmod(dir.c_str(), 0700) != 0)
    throw IoError("cannot make the control directory " + dir +
                  " private (mode 0700): " + std::strerror(errno));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) fs::remove(e.path(), ec);
}

std::optional<CtlRequest> takeRequest(const std::string& run_dir) {
  const std::string path = requestPath(run_dir);
  if (::access(path.c_str(), F_OK) != 0) return std::nullopt;  // the per-step cost: one syscall
  std::string text;
  try {
    text = readInputFile(path, "control request", 256);
  } catch (const FtbError& e) {
    FTB_WARN("ignoring control request: " << e.what());
  }
  std::remove(path.c_str());
  std::istringstream in(text);
  std::string word;
  int64_t id = 0;
  std::optional<CtlCommand> c;
  if (!(in >> word >> id) || !(c = parseCtlCommand(word)) || id <= 0 || id >= (int64_t{1} << 53)) {
    if (!text.empty()) FTB_WARN("ignoring malformed control request '" << text << "' in " << path);
    return std::nullopt;
  }
  return CtlRequest{*c, id};
}

void writeReply(const std::string& run_dir, const CtlReply& reply) {
  char name[64];
  std::snprintf(name, sizeof name, "%05d.json", reply.rank);
  const fs::path path = fs::path(controlDir(run_dir)) / (replyPrefix(reply.id) + name);
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << replyJson(reply).dump() << "\n";
    if (!out.flush()) throw IoError("cannot write the control reply " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw IoError("cannot rename " + tmp + " to " + path.string() + ": " + std::strerror(errno));
}

namespace {

// Waits (until `deadline`) for the run's rank 0 to create control/, then requires it to be
// this user's. Throws DistError when it does not appear, IoError when it is not ours.
void awaitOwnControlDir(const std::string& dir, std::chrono::steady_clock::time_point deadline) {
  while (ownDirProblem(dir) == "is missing") {
    if (std::chrono::steady_clock::now() >= deadline)
      throw DistError(dir + " did not appear: the run's rank 0 creates it when the run starts");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (const std::string why = ownDirProblem(dir); !why.empty())
    throw IoError("the control directory " + dir + " " + why +
                  ": only the user who started the run can control it");
}

// Writes the request to a new private file `tmp`; throws IoError naming it and the OS error.
void writeRequestFile(const std::string& tmp, const CtlRequest& req) {
  const std::string text =
      std::string(ctlCommandName(req.command)) + " " + std::to_string(req.id) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int err = errno;
  ::close(fd);
  if (!ok) {
    std::remove(tmp.c_str());
    throw IoError("cannot write " + tmp + ": " + std::strerror(err));
  }
}

}  // namespace

bool postRequest(const std::string& run_dir, const CtlRequest& req, double timeout_s) {
  const fs::path dir = controlDir(run_dir);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  awaitOwnControlDir(dir.string(), deadline);
  const std::string tmp = (dir / ("request.tmp." + std::to_string(req.id))).string();
  writeRequestFile(tmp, req);
  bool posted = false;
  while (true) {
    if (::link(tmp.c_str(), requestPath(run_dir).c_str()) == 0) {
      posted = true;
      break;
    }
    if (errno != EEXIST) {
      const int err = errno;
      std::remove(tmp.c_str());
      throw IoError("cannot post " + requestPath(run_dir) + ": " + std::strerror(err));
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::remove(tmp.c_str());
  return posted;
}

bool requestPending(const std::string& run_dir) {
  return ::access(requestPath(run_dir).c_str(), F_OK) == 0;
}

std::vector<CtlReply> readReplies(const std::string& run_dir, int64_t id) {
  std::vector<CtlReply> out;
  std::error_code ec;
  const std::string prefix = replyPrefix(id);
  for (const auto& e : fs::directory_iterator(controlDir(run_dir), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".json") continue;
    try {
      out.push_back(replyFromJson(json::parse(readInputFile(e.path().string(), "control reply"))));
    } catch (const std::exception&) {
      // written by rename, so complete; anything else is not ours: skipped
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CtlReply& a, const CtlReply& b) { return a.rank < b.rank; });
  return out;
}

void removeReplies(const std::string& run_dir, int64_t id) {
  std::error_code ec;
  const std::string prefix = replyPrefix(id);
  for (const auto& e : fs::directory_iterator(controlDir(run_dir), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
}

}  // namespace ftb
