// The control channel between the launchers of one job (one launcher per node).
//
// Contract: send() never blocks and may target the sender itself; tryRecv() never blocks;
// messages from one source with one tag arrive in the order they were sent. Nothing here
// waits: callers poll with their own deadlines, so every wait can say what it waited for.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ftb::launcher {

struct Message {
  int source = 0;
  std::string payload;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;  // node rank of this launcher
  virtual int size() const = 0;  // number of nodes
  virtual void send(int dest, int tag, const std::string& payload) = 0;
  virtual std::optional<Message> tryRecv(int tag) = 0;
  // Orderly end: completes pending sends and waits until every node has called finish(),
  // at most `timeout_s`; on timeout calls abortJob(exit_code). No call is allowed after it.
  virtual void finish(double timeout_s, int exit_code) = 0;
  // Ends this process and every other launcher of the job with `exit_code`, after calling
  // the hook given to setBeforeAbort() (if any) once.
  [[noreturn]] virtual void abortJob(int exit_code) = 0;
  virtual std::string describe() const = 0;
  void setBeforeAbort(std::function<void()> hook) { before_abort_ = std::move(hook); }

 protected:
  void runBeforeAbort() {
    if (auto hook = std::move(before_abort_)) hook();
    before_abort_ = nullptr;
  }

 private:
  std::function<void()> before_abort_;
};

// One node, no MPI: messages to self are queued in memory.
class LocalTransport : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void send(int dest, int tag, const std::string& payload) override;
  std::optional<Message> tryRecv(int tag) override;
  void finish(double, int) override {}
  [[noreturn]] void abortJob(int exit_code) override;
  std::string describe() const override { return "single node (no MPI)"; }

 private:
  std::map<int, std::deque<std::string>> queues_;
};

}  // namespace ftb::launcher
