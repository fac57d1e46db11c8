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
      : P2PLink(std::move(peer)),
        backend_(std::move(backend)),
        peer_index_(peer_index),
        timeout_(timeout) {}
  std::string transport() const override { return "backend point-to-point"; }

 protected:
  std::unique_ptr<PendingWork> postSend(const torch::Tensor& bytes, int tag,
                                        const std::string& what) override {
    std::vector<torch::Tensor> v{bytes};
    return std::make_unique<P2PWork>(backend_->send(v, peer_index_, tag), bytes, what, timeout_);
  }
  std::unique_ptr<PendingWork> postRecv(const torch::Tensor& bytes, int tag,
                                        const std::string& what) override {
    std::vector<torch::Tensor> v{bytes};
    return std::make_unique<P2PWork>(backend_->recv(v, peer_index_, tag), bytes, what, timeout_);
  }

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  int peer_index_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<PendingWork> P2PLink::sendAsync(const torch::Tensor& t, int tag,
                                                const std::string& what) {
  torch::Tensor bytes = bytesOf(t.contiguous());
  bytes_sent_ += bytes.numel();
  return postSend(bytes, tag, "send " + what + " to " + peer_.text());
}

std::unique_ptr<PendingWork> P2PLink::recvAsync(torch::Tensor& t, int tag,
                                                const std::string& what) {
  if (!t.is_contiguous())
    throw std::logic_error("P2PLink::recvAsync: the receive tensor must be contiguous");
  return postRecv(bytesOf(t), tag, "receive " + what + " from " + peer_.text());
}

std::unique_ptr<P2PLink> makeBackendLink(c10::intrusive_ptr<c10d::Backend> backend, int peer_index,
                                         PeerInfo peer, std::chrono::milliseconds timeout) {
  return std::make_unique<BackendLink>(std::move(backend), peer_index, std::move(peer), timeout);
}

}  // namespace ftb
