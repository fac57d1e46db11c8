#include "trainer/parallel/tied_embedding.h"

#include "trainer/kernels/tensor_runs.h"

namespace ftb {
namespace {

class TiedEmbeddingSync final : public GradSync {
 public:
  TiedEmbeddingSync(std::unique_ptr<GradSync> inner, torch::Tensor tied, Comm& pair,
                    bool first_stage, int64_t dp_size)
      : inner_(std::move(inner)),
        tied_(std::move(tied)),
        pair_(pair),
        first_stage_(first_stage),
        dp_size_(dp_size) {}

  void beginStep() override { inner_->beginStep(); }
  void beforeBackward(bool last) override { inner_->beforeBackward(last); }
  void finishGradients() override {
    inner_->finishGradients();
    torch::Tensor g = tied_.grad();
    if (!g.defined()) throw std::logic_error("tied embedding: the copy has no gradient buffer");
    pair_.allReduceSum(g);
  }
  std::vector<torch::Tensor> optimizerParams() const override { return inner_->optimizerParams(); }
  std::vector<torch::Tensor> gradients() const override { return inner_->gradients(); }
  // The inner share less the copy's on the last stage (the inner one divides by dp_size,
  // every data-parallel replica counting its share of the same gradients).
  double localSquaredNorm() const override {
    const double all = inner_->localSquaredNorm();
    if (first_stage_) return all;
    return all - gradSquaredNorm({tied_.grad()}) / double(dp_size_);
  }
  bool optimizerZeroesGrads() const override { return inner_->optimizerZeroesGrads(); }
  void afterOptimizer() override { inner_->afterOptimizer(); }
  void paramsLoaded() override { inner_->paramsLoaded(); }
  std::vector<FlatLayout> optimizerLayout() const override { return inner_->optimizerLayout(); }
  std::vector<torch::Tensor> frozenParams() const override { return inner_->frozenParams(); }
  std::vector<FlatLayout> frozenLayout() const override { return inner_->frozenLayout(); }

 private:
  std::unique_ptr<GradSync> inner_;
  torch::Tensor tied_;
  Comm& pair_;
  bool first_stage_;
  int64_t dp_size_;
};

}  // namespace

std::unique_ptr<GradSync> tieEmbeddingGradients(std::unique_ptr<GradSync> inner, torch::Tensor tied,
                                                Comm& pair, bool first_stage, int64_t dp_size) {
  return std::make_unique<TiedEmbeddingSync>(std::move(inner), std::move(tied), pair, first_stage,
                                             dp_size);
}

}  // namespace ftb
