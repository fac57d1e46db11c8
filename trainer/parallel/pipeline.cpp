#include "trainer/parallel/pipeline.h"

#include <stdexcept>
#include <string>
#include <tuple>

#include "trainer/comm/comm.h"
#include "trainer/comm/phase_timer.h"
#include "trainer/metrics/perf.h"
#include "trainer/model/linear.h"

namespace ftb {

namespace {

bool isRecv(const PipeAction& a) {
  return a.kind == PipeAction::kRecvAct || a.kind == PipeAction::kRecvGrad;
}

class PipelineRunner final : public StepRunner {
 public:
  PipelineRunner(const PipePlan& plan, int64_t stage, std::vector<Transformer> chunks,
                 GradSync& sync, std::map<int64_t, P2PLink*> links, int64_t tp, int64_t dim,
                 torch::ScalarType dtype)
      : plan_(plan),
        stage_(stage),
        chunks_(std::move(chunks)),
        sync_(sync),
        links_(std::move(links)),
        tp_(tp),
        dim_(dim),
        dtype_(dtype),
        actions_(withTransfers(plan, stage, computeOrder(plan, stage))) {
    for (const PipeAction& a : actions_) {
      if (a.kind == PipeAction::kBackward) ++backwards_;
      if (a.kind == PipeAction::kWeight) ++weights_;
    }
  }

  FwdBwdStats run(const StepBatches& mine, double positions) override;
  int64_t sampleCopies() const override { return tp_ * plan_.stages; }

 private:
  // A message's key and tag: (is gradient, micro-batch, receiving model chunk).
  int tagOf(bool grad, int64_t mb, int64_t receiver) const {
    const int64_t chunks = plan_.stages * plan_.virtual_stages;
    return static_cast<int>(((grad ? plan_.microbatches : 0) + mb) * chunks + receiver);
  }
  int64_t modelChunk(const PipeAction& a) const { return plan_.modelChunk(stage_, a.chunk); }
  P2PLink& link(int64_t peer) {
    auto it = links_.find(peer);
    if (it == links_.end())
      throw std::logic_error("pipeline stage " + std::to_string(stage_) + " has no link to stage " +
                             std::to_string(peer));
    return *it->second;
  }
  std::string what(const char* kind, const PipeAction& a) const {
    return std::string(kind) + " of micro-batch " + std::to_string(a.mb) + ", model chunk " +
           std::to_string(modelChunk(a));
  }
  void postReceives(const StepBatches& mine);
  void forward(const PipeAction& a, const Batch& b, FwdBwdStats& st);
  void backward(const PipeAction& a, double positions, bool last);
  void weightPass(const PipeAction& a, bool final);
  void send(const PipeAction& a);
  // zb_h1: the store the slot's projections defer their weight gradients to, active
  // during its forward and backward (trainer/model/linear.h); other schedules: none.
  WeightGradStore* storeOf(const PipeAction& a) {
    return weights_ > 0 ? &slots_[{a.mb, a.chunk}].weight_grads : nullptr;
  }

  struct Slot {             // one (micro-batch, local chunk)
    torch::Tensor input;    // received activations (a leaf whose grad goes back), or undefined
    torch::Tensor output;   // activations sent on, or the loss sum on the last model chunk
    torch::Tensor grad_in;  // received gradient of output
    std::unique_ptr<PendingWork> act_work, grad_work;
    WeightGradStore weight_grads;  // zb_h1: from its backward to its weight pass
  };

  PipePlan plan_;
  int64_t stage_;
  std::vector<Transformer> chunks_;
  GradSync& sync_;
  std::map<int64_t, P2PLink*> links_;
  int64_t tp_, dim_;
  torch::ScalarType dtype_;
  std::vector<PipeAction> actions_;
  int64_t backwards_ = 0, weights_ = 0;
  std::map<std::pair<int64_t, int64_t>, Slot> slots_;
  std::vector<std::unique_ptr<PendingWork>> sends_;
};

void PipelineRunner::postReceives(const StepBatches& mine) {
  for (const PipeAction& a : actions_) {
    if (!isRecv(a)) continue;
    const Batch& b = mine.micro.at(a.mb);
    Slot& s = slots_[{a.mb, a.chunk}];
    torch::Tensor buf = torch::empty({b.inputs.size(0), b.inputs.size(1), dim_},
                                     torch::TensorOptions().dtype(dtype_).device(computeDevice()));
    const bool grad = a.kind == PipeAction::kRecvGrad;
    auto work = link(a.peer).recvAsync(buf, tagOf(grad, a.mb, modelChunk(a)),
                                       what(grad ? "gradients" : "activations", a));
    (grad ? s.grad_in : s.input) = buf;
    (grad ? s.grad_work : s.act_work) = std::move(work);
  }
}

void PipelineRunner::forward(const PipeAction& a, const Batch& b, FwdBwdStats& st) {
  Slot& s = slots_[{a.mb, a.chunk}];
  Transformer& model = chunks_[a.chunk];
  torch::Tensor in = b.inputs;
  if (!model->part().embed) in = s.input.requires_grad_(true);
  RECORD_USER_SCOPE("forward");
  ActiveWeightGradStore deferring(storeOf(a));
  torch::Tensor out = model->forwardPart(in);
  if (model->part().head) {
    out = model->lossSum(out, b.targets, b.mask);
    st.loss_sum += out.item<double>();
    st.padded += double(b.padded_tokens);
    st.dataset += double(b.dataset_tokens);
  }
  s.output = out;
}

void PipelineRunner::backward(const PipeAction& a, double positions, bool last) {
  Slot& s = slots_[{a.mb, a.chunk}];
  sync_.beforeBackward(last);
  RECORD_USER_SCOPE("backward");
  ActiveWeightGradStore deferring(storeOf(a));
  if (chunks_[a.chunk]->part().head)
    (s.output / positions).backward();
  else
    s.output.backward(s.grad_in);
  s.output = torch::Tensor();
  s.grad_in = torch::Tensor();
}

void PipelineRunner::weightPass(const PipeAction& a, bool final) {
  sync_.beforeWeightPass(final);
  RECORD_USER_SCOPE("weight_gradients");
  slots_[{a.mb, a.chunk}].weight_grads.apply();
}

void PipelineRunner::send(const PipeAction& a) {
  Slot& s = slots_[{a.mb, a.chunk}];
  const bool grad = a.kind == PipeAction::kSendGrad;
  const int64_t k = modelChunk(a), receiver = grad ? k - 1 : k + 1;
  torch::Tensor t = grad ? s.input.grad() : s.output.detach();
  if (!t.defined()) throw std::logic_error("pipeline: nothing to send for " + describe(a));
  sends_.push_back(link(a.peer).sendAsync(t, tagOf(grad, a.mb, receiver),
                                          what(grad ? "gradients" : "activations", a)));
  if (grad) s.input = torch::Tensor();  // this micro-batch's chunk is done
}

FwdBwdStats PipelineRunner::run(const StepBatches& mine, double positions) {
  FwdBwdStats st;
  const double c0 = collectiveSeconds();
  std::vector<int64_t> sent0;
  for (auto& [peer, l] : links_) sent0.push_back(l->bytesSent());
  postReceives(mine);
  int64_t done_backwards = 0, done_weights = 0;
  PhaseTimer timer;
  for (const PipeAction& a : actions_) {
    switch (a.kind) {
      case PipeAction::kRecvAct:
      case PipeAction::kRecvGrad: {
        Slot& s = slots_[{a.mb, a.chunk}];
        (a.kind == PipeAction::kRecvAct ? s.act_work : s.grad_work)->wait();
        // The time blocked in the receive is the bubble (part of comm_s); the rest of the
        // phase, the host's dispatch, goes to fwd_s as an issued send's does.
        timer.endSplit(st.fwd_s, st.bubble_s);
        break;
      }
      case PipeAction::kForward:
        forward(a, mine.micro.at(a.mb), st);
        timer.endSplit(st.fwd_s, st.comm_s);
        break;
      case PipeAction::kBackward:
        backward(a, positions, ++done_backwards == backwards_);
        timer.endSplit(st.bwd_s, st.comm_s);
        break;
      case PipeAction::kWeight:
        weightPass(a, ++done_weights == weights_);
        timer.endSplit(st.bwd_s, st.comm_s);
        break;
      default:
        send(a);
        timer.end(st.fwd_s);  // issuing a send: the host side of the transfer
    }
  }
  for (auto& w : sends_) w->wait();
  timer.settle();
  sends_.clear();
  slots_.clear();
  st.comm_s = collectiveSeconds() - c0;  // every wait: collectives, receives, sends
  size_t i = 0;
  for (auto& [peer, l] : links_) st.p2p_bytes += l->bytesSent() - sent0[i++];
  return st;
}

}  // namespace

std::unique_ptr<StepRunner> makePipelineRunner(const PipePlan& plan, int64_t stage,
                                               std::vector<Transformer> chunks, GradSync& sync,
                                               std::map<int64_t, P2PLink*> links, int64_t tp,
                                               int64_t dim, torch::ScalarType compute_dtype) {
  return std::make_unique<PipelineRunner>(plan, stage, std::move(chunks), sync, std::move(links),
                                          tp, dim, compute_dtype);
}

}  // namespace ftb
