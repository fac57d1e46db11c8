// Point-to-point transport between two neighbouring pipeline stages: activations go to
// the next stage, their gradients come back (trainer/parallel/pipeline.h runs the schedule).
//
// Contracts (every implementation):
// - A P2PLink joins this rank and one peer, made by Distributed::newLink (parallel/dist.h):
//   through local memory when both run on this host (parallel/local_link.h), else over a
//   2-rank c10d Backend (Gloo send/recv, makeBackendLink below). Messages are matched by
//   tag, not by issue order, so the two sides may post them in different orders; a
//   message completes once both sides have posted it (neither side's wait() is needed
//   for the other's to return), so every schedule that posts all its messages is free of
//   deadlock.
// - sendAsync / recvAsync return without waiting for the peer: compute goes on while the
//   bytes move, and PendingWork::wait() blocks at most the link's timeout, then throws
//   DistError naming this rank and host, what it waited for, its bytes, and the peer's
//   stage, rank and host.
// - Tensors travel as bytes (any dtype, bf16 included); a receive's tensor must have the
//   sent tensor's shape and dtype (both sides derive them from the step's batches).
// - REQUIRES: the tensor of a pending send or receive stays alive and unmodified until
//   its wait() returns (PendingWork keeps a reference), and no PendingWork outlives its link.
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

// The contract above is kept here, once: sendAsync/recvAsync take the tensors' bytes,
// count what is sent and name the message for errors; a transport implements only the
// two posts (Gloo: makeBackendLink below; local memory: parallel/local_link.h).
class P2PLink {
 public:
  explicit P2PLink(PeerInfo peer) : peer_(std::move(peer)) {}
  virtual ~P2PLink() = default;
  // `what` names the message in errors ("activations of micro-batch 3, chunk 0").
  // REQUIRES: tag >= 0 and unique among this link's messages in flight in its direction.
  std::unique_ptr<PendingWork> sendAsync(const torch::Tensor& t, int tag, const std::string& what);
  // REQUIRES: t contiguous.
  std::unique_ptr<PendingWork> recvAsync(torch::Tensor& t, int tag, const std::string& what);
  // Bytes of every send so far (the tensors' bytes, whatever the transport).
  int64_t bytesSent() const { return bytes_sent_; }
  const PeerInfo& peer() const { return peer_; }
  // "local memory" or "backend point-to-point", for the run's transport record.
  virtual std::string transport() const = 0;

 protected:
  // Post the send / receive of `bytes` (bytesOf a contiguous tensor, kept alive by the
  // caller's PendingWork contract); `what` is the whole message name for errors ("send
  // activations of micro-batch 3 to stage 1 (rank 1, host h)").
  virtual std::unique_ptr<PendingWork> postSend(const torch::Tensor& bytes, int tag,
                                                const std::string& what) = 0;
  virtual std::unique_ptr<PendingWork> postRecv(const torch::Tensor& bytes, int tag,
                                                const std::string& what) = 0;
  const PeerInfo peer_;

 private:
  int64_t bytes_sent_ = 0;
};

// A link over `backend`, a 2-rank c10d Backend (Gloo); peer_index: the peer's rank in it.
std::unique_ptr<P2PLink> makeBackendLink(c10::intrusive_ptr<c10d::Backend> backend, int peer_index,
                                         PeerInfo peer, std::chrono::milliseconds timeout);

// The bytes of `t` as a flat uint8 tensor sharing its storage. REQUIRES: t contiguous.
torch::Tensor bytesOf(const torch::Tensor& t);

}  // namespace ftb
