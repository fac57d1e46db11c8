// Point-to-point transport between two neighbouring pipeline stages: activations go to
// the next stage, their gradients come back (trainer/parallel/pipeline.h runs the schedule).
//
// Contracts:
// - A P2PLink joins this rank and one peer over a 2-rank c10d Backend (Gloo send/recv),
//   made by Distributed::newLink (parallel/dist.h); messages are matched by tag, not by
//   issue order, so the two sides may post them in different orders.
// - sendAsync / recvAsync return at once: compute goes on while the bytes move (Gloo's
//   own threads), and PendingWork::wait() blocks at most the link's timeout, then throws
//   DistError naming this rank and host, what it waited for, and the peer's stage, rank
//   and host.
// - Tensors travel as bytes (any dtype, bf16 included); a receive's tensor must have the
//   sent tensor's shape and dtype (both sides derive them from the step's batches).
// - REQUIRES: the tensor of a pending send or receive stays alive and unmodified until
//   its wait() returns (PendingWork keeps a reference).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "trainer/comm/comm.h"

namespace ftb {

// Who is on the other end, for error messages.
struct PeerInfo {
  int stage = 0, rank = 0;
  std::string host;
  std::string text() const;  // "stage 1 (rank 3, host node2)"
};

class P2PLink {
 public:
  // peer_index: the peer's rank in `backend` (0 or 1).
  P2PLink(c10::intrusive_ptr<c10d::Backend> backend, int peer_index, PeerInfo peer,
          std::chrono::milliseconds timeout);
  ~P2PLink();
  // `what` names the message in errors ("activations of micro-batch 3, chunk 0").
  // REQUIRES: tag >= 0 and unique among this link's messages in flight.
  std::unique_ptr<PendingWork> sendAsync(const torch::Tensor& t, int tag, const std::string& what);
  std::unique_ptr<PendingWork> recvAsync(torch::Tensor& t, int tag, const std::string& what);
  int64_t bytesSent() const { return bytes_sent_; }
  const PeerInfo& peer() const { return peer_; }

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  int peer_index_;
  PeerInfo peer_;
  std::chrono::milliseconds timeout_;
  int64_t bytes_sent_ = 0;
};

}  // namespace ftb
