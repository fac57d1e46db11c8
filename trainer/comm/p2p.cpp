#include "trainer/comm/p2p.h"

#include <sstream>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "common/error.h"
#include "common/log.h"

namespace ftb {

std::string PeerInfo::text() const {
  return "stage " + std::to_string(stage) + " (rank " + std::to_string(rank) + ", host " + host +
         ")";
}

torch::Tensor bytesOf(const torch::Tensor& t) { return t.view({-1}).view(torch::kUInt8); }

namespace {

class P2PWork final : public PendingWork {
 public:
  P2PWork(c10::intrusive_ptr<c10d::Work> work, torch::Tensor keep, std::string what,
          std::chrono::milliseconds timeout)
      : work_(std::move(work)), keep_(std::move(keep)), what_(std::move(what)), timeout_(timeout) {}
  void wait() override {
    CollectiveTimer timer;  // time blocked on the pipeline counts as communication
    try {
      work_->wait(timeout_);
    } catch (const std::exception& e) {
      std::ostringstream os;
      os << logPrefix() << " waiting to " << what_ << " (" << keep_.numel() << " bytes) failed "
         << "within the timeout of " << timeout_.count() / 1000.0
         << " s (parallel.timeout_seconds): " << firstLine(e.what());
      throw DistError(os.str());
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  torch::Tensor keep_;
  std::string what_;
  std::chrono::milliseconds timeout_;
};

// Gloo send/recv: the backend matches by (peer, tag) and moves the bytes on its threads.
class BackendLink final : public P2PLink {
 public:
  BackendLink(c10::intrusive_ptr<c10d::Backend> backend, int peer_index, PeerInfo peer,
              std::chrono::milliseconds timeout)
      : backend_(std::move(backend)),
        peer_index_(peer_index),
        peer_(std::move(peer)),
        timeout_(timeout) {}
  std::unique_ptr<PendingWork> sendAsync(const torch::Tensor& t, int tag,
                                         const std::string& what) override;
  std::unique_ptr<PendingWork> recvAsync(torch::Tensor& t, int tag,
                                         const std::string& what) override;
  int64_t bytesSent() const override { return bytes_sent_; }
  const PeerInfo& peer() const override { return peer_; }
  std::string transport() const override { return "backend point-to-point"; }

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  int peer_index_;
  PeerInfo peer_;
  std::chrono::milliseconds timeout_;
  int64_t bytes_sent_ = 0;
};

std::unique_ptr<PendingWork> BackendLink::sendAsync(const torch::Tensor& t, int tag,
                                                    const std::string& what) {
  torch::Tensor bytes = bytesOf(t.contiguous());
  std::vector<torch::Tensor> v{bytes};
  auto work = backend_->send(v, peer_index_, tag);
  bytes_sent_ += bytes.numel();
  return std::make_unique<P2PWork>(std::move(work), bytes, "send " + what + " to " + peer_.text(),
                                   timeout_);
}

std::unique_ptr<PendingWork> BackendLink::recvAsync(torch::Tensor& t, int tag,
                                                    const std::string& what) {
  if (!t.is_contiguous())
    throw std::logic_error("P2PLink::recvAsync: the receive tensor must be contiguous");
  torch::Tensor bytes = bytesOf(t);
  std::vector<torch::Tensor> v{bytes};
  auto work = backend_->recv(v, peer_index_, tag);
  return std::make_unique<P2PWork>(std::move(work), bytes,
                                   "receive " + what + " from " + peer_.text(), timeout_);
}

}  // namespace

std::unique_ptr<P2PLink> makeBackendLink(c10::intrusive_ptr<c10d::Backend> backend, int peer_index,
                                         PeerInfo peer, std::chrono::milliseconds timeout) {
  return std::make_unique<BackendLink>(std::move(backend), peer_index, std::move(peer), timeout);
}

}  // namespace ftb
