// The control channel of a running trainer (`launcher ctl status|save|stop RUN_DIR`):
// plain files in <run_dir>/control/, so it works from any node that sees the run directory.
//
// Protocol (launcher/README.md, "ctl"):
// - The client posts one request: it writes "COMMAND ID" to a private temporary file and
//   link()s it to control/request, which fails while another request is pending (the
//   client retries until its timeout). ID is a positive integer below 2^53, unique per
//   request (microseconds since the epoch).
// - The trainer's rank 0 polls control/request once per step (one stat()), reads and
//   unlinks it, and puts command and ID into the step's all-reduce, so every rank acts on
//   the same step: status = answer; save = checkpoint after this step and go on; stop =
//   checkpoint after this step and end as `preempted` with the requeue code.
// - After that step every rank writes control/reply.ID.rank_NNNNN.json (tmp + rename).
//   The client waits for world_size replies, prints them and deletes them.
// Invariant: rank 0 removes leftover requests and replies when the run starts (it holds
// the run lock, so no live run owns them).
// Who may control a run: control/ is made by the run's rank 0 with mode 0700 and must be
// owned by the run's user (common/own_dir.h); rank 0 refuses one another user made, and
// the client refuses one that is not its user's, so no other user can post a request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/run_state.h"

namespace ftb {

enum class CtlCommand : int { kNone = 0, kStatus = 1, kSave = 2, kStop = 3 };

struct CtlRequest {
  CtlCommand command = CtlCommand::kNone;
  int64_t id = 0;
};

// One rank's answer, written after the step that carried the request.
struct CtlReply {
  int64_t id = 0;
  int rank = 0, world_size = 1;
  std::string host, command;
  RunState state = RunState::Running;  // Running, or Stopping after the run's last step
  int64_t pid = 0, steps_done = 0, max_steps = 0;
  double loss = 0, tokens_per_s = 0, eta_s = 0;  // tokens/s: global (dataset), last step
  std::string last_checkpoint;                   // "" when none
};

std::string controlDir(const std::string& run_dir);
const char* ctlCommandName(CtlCommand c);
// "status" | "save" | "stop" -> the command; anything else -> nullopt.
std::optional<CtlCommand> parseCtlCommand(const std::string& word);

// Trainer side. Rank 0: clearControlDir() at the start, takeRequest() once per step
// (never blocks; nullopt when no request or an unreadable one, which is removed with a
// warning). Every rank: writeReply(). Throw IoError only where noted.
// clearControlDir(): creates control/ (0700) or makes the existing one 0700 and empties it;
// ConfigError when it is not this user's (own_dir.h), IoError when it cannot be made.
void clearControlDir(const std::string& run_dir);
std::optional<CtlRequest> takeRequest(const std::string& run_dir);
void writeReply(const std::string& run_dir, const CtlReply& reply);  // throws IoError

// Client side. postRequest(): waits (within `timeout_s`) for control/ to exist; true once
// posted, false when another request was still pending after `timeout_s`. Throws DistError
// when control/ did not appear, IoError naming the file and the OS error or the owner when
// control/ is not this user's or the request cannot be written. requestPending():
// control/request exists.
bool postRequest(const std::string& run_dir, const CtlRequest& req, double timeout_s);
bool requestPending(const std::string& run_dir);
// Every reply to `id` present now (parsed; unparsable ones are skipped), sorted by rank.
std::vector<CtlReply> readReplies(const std::string& run_dir, int64_t id);
void removeReplies(const std::string& run_dir, int64_t id);

}  // namespace ftb
