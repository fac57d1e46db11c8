#include "trainer/parallel/step_runner.h"

#include "trainer/comm/phase_timer.h"

namespace ftb {

namespace {

class SequentialRunner final : public StepRunner {
 public:
  SequentialRunner(Transformer model, GradSync& sync, int64_t tp)
      : model_(std::move(model)), sync_(sync), tp_(tp) {}

  FwdBwdStats run(const StepBatches& mine, double positions) override {
    FwdBwdStats st;
    PhaseTimer timer;
    torch::Tensor loss_total;  // fp64 on the device: read once, after the last backward
    for (size_t m = 0; m < mine.micro.size(); ++m) {
      const Batch& b = mine.micro[m];
      torch::Tensor loss_sum;
      {
        RECORD_USER_SCOPE("forward");  // named ranges for traces: trainer/loop/profiler.h
        loss_sum = model_->lossSum(model_->forward(b.inputs), b.targets, b.mask);
      }
      timer.endSplit(st.fwd_s, st.comm_s);
      sync_.beforeBackward(m + 1 == mine.micro.size());
      {
        RECORD_USER_SCOPE("backward");
        (loss_sum / positions).backward();
      }
      timer.endSplit(st.bwd_s, st.comm_s);
      // The same sum in the same order as host doubles would give (fp32 to fp64 is exact).
      const torch::Tensor l = loss_sum.detach().to(torch::kFloat64);
      loss_total = loss_total.defined() ? loss_total + l : l;
      st.padded += double(b.padded_tokens);
      st.dataset += double(b.dataset_tokens);
    }
    timer.settle();  // the step's one wait for the device before its gradient sync
    if (loss_total.defined()) st.loss_sum = loss_total.item<double>();
    return st;
  }
  int64_t sampleCopies() const override { return tp_; }

 private:
  Transformer model_;
  GradSync& sync_;
  int64_t tp_;
};

}  // namespace

std::unique_ptr<StepRunner> makeSequentialRunner(Transformer model, GradSync& sync, int64_t tp) {
  return std::make_unique<SequentialRunner>(std::move(model), sync, tp);
}

}  // namespace ftb
