#include "trainer/parallel/zero.h"

namespace ftb {

// One unit's flat shard and the bookkeeping to materialise its parameters.
class FlatUnit : public UnitHooks {
 public:
  FlatUnit(std::vector<std::string> names, std::vector<torch::Tensor> params, Comm& shard,
           Comm& replicate, bool persistent, torch::ScalarType gather_dtype)
      : names_(std::move(names)), params_(std::move(params)), shard_(shard),
        replicate_(replicate), persistent_(persistent), gather_dtype_(gather_dtype) {
    torch::NoGradGuard no_grad;
    int64_t total = 0;
    for (auto& p : params_) {
      shapes_.push_back(p.sizes().vec());
      offsets_.push_back(total);
      total += p.numel();
    }
    const int64_t n = shard_.size();
    shard_numel_ = (total + n - 1) / n;
    padded_ = shard_numel_ * n;
    torch::Tensor full = torch::zeros({padded_});
    for (size_t i = 0; i < params_.size(); ++i)
      full.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].reshape(-1));
    if (persistent_) {
      full_ = full;
      master_ = full_.narrow(0, shard_.rank() * shard_numel_, shard_numel_);
      bind(full_);
    } else {
      master_ = full.narrow(0, shard_.rank() * shard_numel_, shard_numel_).clone();
      release();
    }
    grad_ = torch::zeros({shard_numel_});
  }

  // UnitHooks (stage 3): all-gather the shards into a fresh buffer and point the
  // module's parameters at it.
  void materialize() override {
    torch::NoGradGuard no_grad;
    torch::Tensor full = torch::empty({padded_}, torch::TensorOptions().dtype(gather_dtype_));
    torch::Tensor src = master_.to(gather_dtype_);
    shard_.allGather(full, src);
    bind(full);
  }
  void release() override {
    for (auto& p : params_) p.set_data(torch::empty({0}, p.options().dtype(gather_dtype_)));
  }
  void consumeGrads(const std::vector<torch::Tensor>& grads) override { scatterAdd(grads, true); }

  // Stages 1-2 and the root unit: reduce the parameters' accumulated .grad.
  void reduceParamGrads(bool scatter) {
    std::vector<torch::Tensor> grads;
    for (auto& p : params_) {
      grads.push_back(p.grad());
      p.mutable_grad() = torch::Tensor();
    }
    scatterAdd(grads, scatter);
  }
  void finishGrads() {
    if (replicate_.size() > 1) replicate_.allReduceSum(grad_);
  }
  // Stages 1-2: refresh every rank's full parameters from the updated shards.
  void gatherUpdated() {
    torch::NoGradGuard no_grad;
    torch::Tensor mine = master_.clone();  // the input must not alias the output
    shard_.allGather(full_, mine);
  }

  torch::Tensor normWeight(int64_t tp) const {
    torch::Tensor w = torch::ones({padded_});
    for (size_t i = 0; i < params_.size(); ++i)
      if (TransformerImpl::isTpReplicated(names_[i]))
        w.narrow(0, offsets_[i], numel(i)).fill_(1.0 / double(tp));
    return w.narrow(0, shard_.rank() * shard_numel_, shard_numel_).clone();
  }

  UnitLayout layout(int64_t layer) const {
    return {layer, names_, shapes_, offsets_, shard_.rank() * shard_numel_, shard_numel_};
  }
  torch::Tensor& master() { return master_; }
  torch::Tensor& grad() { return grad_; }

 private:
  int64_t numel(size_t i) const {
    int64_t n = 1;
    for (int64_t d : shapes_[i]) n *= d;
    return n;
  }
  void bind(const torch::Tensor& full) {
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].set_data(full.narrow(0, offsets_[i], numel(i)).view(shapes_[i]));
  }
  // Flattens `grads` (undefined = zero) in fp32 and adds this rank's reduced slice to
  // grad_: reduce-scatter when `scatter`, else all-reduce and keep the slice.
  void scatterAdd(const std::vector<torch::Tensor>& grads, bool scatter) {
    torch::NoGradGuard no_grad;
    torch::Tensor flat = torch::zeros({padded_});
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined())
        flat.narrow(0, offsets_[i], numel(i)).copy_(grads[i].reshape(-1));
    if (scatter) {
      torch::Tensor mine = torch::empty({shard_numel_});
      shard_.reduceScatterSum(mine, flat);
      grad_.add_(mine);
    } else {
      shard_.allReduceSum(flat);
      grad_.add_(flat.narrow(0, shard_.rank() * shard_numel_, shard_numel_));
    }
  }

  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> offsets_;
  int64_t shard_numel_ = 0, padded_ = 0;
  Comm& shard_;
  Comm& replicate_;
  bool persistent_;
  torch::ScalarType gather_dtype_;
  torch::Tensor full_, master_, grad_;
};

ZeroEngine::ZeroEngine(int stage, Comm& shard, Comm& replicate, torch::ScalarType compute_dtype)
    : stage_(stage), shard_(shard), replicate_(replicate), compute_dtype_(compute_dtype) {}
ZeroEngine::~ZeroEngine() = default;

void ZeroEngine::addUnit(int64_t layer, torch::nn::Module& unit) {
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  if (layer >= 0) {
    for (auto& np : unit.named_parameters()) {
      names.push_back(np.key());
      params.push_back(np.value());
    }
  } else {  // root: only the parameters outside the blocks
    for (auto& np : unit.named_parameters(/*recurse=*/false)) {
      names.push_back(np.key());
      params.push_back(np.value());
    }
  }
  bool persistent = stage_ < 3;
  // Blocks travel in the compute dtype; the root stays fp32 for the whole step.
  torch::ScalarType dt = (stage_ == 3 && layer >= 0) ? compute_dtype_ : torch::kFloat32;
  auto u = std::make_unique<FlatUnit>(std::move(names), std::move(params), shard_, replicate_,
                                      persistent, dt);
  if (layer >= 0)
    blocks_.push_back(std::move(u));
  else
    root_ = std::move(u);
}

void ZeroEngine::beginStep() {
  if (stage_ == 3) root_->materialize();
}

void ZeroEngine::reduceGradients() {
  if (stage_ < 3)
    for (auto& b : blocks_) b->reduceParamGrads(/*scatter=*/stage_ == 2);
  root_->reduceParamGrads(/*scatter=*/stage_ >= 2);
  if (stage_ == 3) root_->release();
  for (auto& b : blocks_) b->finishGrads();
  root_->finishGrads();
}

std::vector<torch::Tensor> ZeroEngine::masterShards() const {
  std::vector<torch::Tensor> v;
  for (auto& b : blocks_) v.push_back(b->master());
  v.push_back(root_->master());
  return v;
}

std::vector<torch::Tensor> ZeroEngine::gradShards() const {
  std::vector<torch::Tensor> v;
  for (auto& b : blocks_) v.push_back(b->grad());
  v.push_back(root_->grad());
  return v;
}

std::vector<torch::Tensor> ZeroEngine::normWeights(int64_t tp) const {
  std::vector<torch::Tensor> v;
  if (tp == 1) return v;
  for (auto& b : blocks_) v.push_back(b->normWeight(tp));
  v.push_back(root_->normWeight(tp));
  return v;
}

void ZeroEngine::afterStep() {
  if (stage_ < 3) {
    for (auto& b : blocks_) b->gatherUpdated();
    root_->gatherUpdated();
  }
  for (auto& b : blocks_) b->grad().zero_();
  root_->grad().zero_();
}

std::vector<UnitLayout> ZeroEngine::unitLayouts() const {
  std::vector<UnitLayout> v;
  for (size_t i = 0; i < blocks_.size(); ++i) v.push_back(blocks_[i]->layout(int64_t(i)));
  v.push_back(root_->layout(-1));
  return v;
}

void ZeroEngine::afterLoad() {
  if (stage_ >= 3) return;
  for (auto& b : blocks_) b->gatherUpdated();
  root_->gatherUpdated();
}

torch::Tensor ZeroEngine::run(int64_t layer, TransformerBlockImpl& block, const torch::Tensor& x,
                              const RopeTables& rope) {
  if (stage_ < 3) return block.forward(x, rope);
  if (!torch::GradMode::is_enabled()) {  // evaluation: gather, run, free
    blocks_[layer]->materialize();
    torch::Tensor y = block.forward(x, rope);
    blocks_[layer]->release();
    return y;
  }
  return checkpointedBlock(block, x, rope, blocks_[layer].get());
}

}  // namespace ftb
