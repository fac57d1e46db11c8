#include "launcher/transport.h"

#include <cstdlib>

#include "common/error.h"

namespace ftb::launcher {

void LocalTransport::send(int dest, int tag, const std::string& payload) {
  if (dest != 0) throw DistError("single-node transport: no node " + std::to_string(dest));
  queues_[tag].push_back(payload);
}

std::optional<Message> LocalTransport::tryRecv(int tag) {
  auto& q = queues_[tag];
  if (q.empty()) return std::nullopt;
  Message m{0, std::move(q.front())};
  q.pop_front();
  return m;
}

void LocalTransport::abortJob(int exit_code) { std::exit(exit_code); }

}  // namespace ftb::launcher
