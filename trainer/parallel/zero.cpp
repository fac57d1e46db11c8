#include "trainer/parallel/zero.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "trainer/kernels/tensor_runs.h"

namespace ftb {

// One unit's flat shard and the bookkeeping to materialise its parameters.
class FlatUnit : public UnitHooks {
 public:
  // `storage`: the dtype of the flat shard (fp32 masters; a frozen unit keeps its own).
  FlatUnit(const std::vector<ModelParam>& params, Comm& shard, Comm& replicate, bool persistent,
           torch::ScalarType gather_dtype, torch::ScalarType storage = torch::kFloat32)
      : shard_(shard), replicate_(replicate), persistent_(persistent), gather_dtype_(gather_dtype) {
    torch::NoGradGuard no_grad;
    model_params_ = params;
    if (!params.empty()) device_ = params[0].tensor.device();
    for (const auto& p : params) {
      params_.push_back(p.tensor);
      replicated_.push_back(p.tpReplicated());
    }
    int64_t total = 0;
    for (auto& p : params_) {
      shapes_.push_back(p.sizes().vec());
      offsets_.push_back(total);
      total += p.numel();
    }
    const int64_t n = shard_.size();
    shard_numel_ = (total + n - 1) / n;
    padded_ = shard_numel_ * n;
    torch::Tensor full = torch::zeros({padded_}, on().dtype(storage));
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
    // grad_ is allocated by its first use (grad()), in the first step: a model loaded
    // into the shards before training (hf/pretrained.h) does not pay for it while loading.
  }

  // UnitHooks (stage 3): all-gather the shards into a fresh buffer and point the
  // module's parameters at it.
  void materialize() override {
    if (empty()) return;
    torch::NoGradGuard no_grad;
    torch::Tensor full = torch::empty({padded_}, on().dtype(gather_dtype_));
    torch::Tensor src = master_.to(gather_dtype_);
    shard_.allGather(full, src);
    bind(full);
  }
  void release() override {
    for (auto& p : params_) p.set_data(torch::empty({0}, p.options().dtype(gather_dtype_)));
  }
  void consumeGrads(const std::vector<torch::Tensor>& grads) override { scatterAdd(grads, true); }
  // The optimizer step inside backward (stage 3): each reduce-scattered shard gradient goes to
  // `fn` instead of accumulating into grad(), which then never exists.
  void setOnFinal(std::function<void(const torch::Tensor&)> fn) { on_final_ = std::move(fn); }

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
    if (!empty() && replicate_.size() > 1) replicate_.allReduceSum(grad());
  }
  // Stages 1-2: refresh every rank's full parameters from the updated shards.
  void gatherUpdated() {
    if (empty()) return;
    torch::NoGradGuard no_grad;
    torch::Tensor mine = master_.clone();  // the input must not alias the output
    shard_.allGather(full_, mine);
  }

  torch::Tensor normWeight(int64_t tp) const {
    torch::Tensor w = torch::ones({padded_}, on());
    for (size_t i = 0; i < params_.size(); ++i)
      if (replicated_[i]) w.narrow(0, offsets_[i], numel(i)).fill_(1.0 / double(tp));
    return w.narrow(0, shard_.rank() * shard_numel_, shard_numel_).clone();
  }

  FlatLayout layout() const {
    return {model_params_, shapes_, offsets_, shard_.rank() * shard_numel_, shard_numel_};
  }
  torch::Tensor& master() { return master_; }
  torch::Tensor& grad() {
    if (!grad_.defined()) grad_ = torch::zeros({shard_numel_}, on());
    return grad_;
  }
  const std::vector<torch::Tensor>& tensors() const { return params_; }
  // No parameters (LoRA: the root unit, whose weights are all frozen).
  bool empty() const { return padded_ == 0; }

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
    if (empty()) return;
    torch::NoGradGuard no_grad;
    torch::Tensor flat = torch::zeros({padded_}, on());
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) flat.narrow(0, offsets_[i], numel(i)).copy_(grads[i].reshape(-1));
    if (scatter) {
      torch::Tensor mine = torch::empty({shard_numel_}, on());
      shard_.reduceScatterSum(mine, flat);
      flat = torch::Tensor();  // the full gradient is freed before the optimizer runs
      if (on_final_) return on_final_(mine);
      grad().add_(mine);
    } else {
      shard_.allReduceSum(flat);
      grad().add_(flat.narrow(0, shard_.rank() * shard_numel_, shard_numel_));
    }
  }

  std::vector<torch::Tensor> params_;
  std::vector<bool> replicated_;  // tp-replicated (ModelParam::tpReplicated)
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<ModelParam> model_params_;
  std::vector<int64_t> offsets_;
  int64_t shard_numel_ = 0, padded_ = 0;
  Comm& shard_;
  Comm& replicate_;
  bool persistent_;
  torch::ScalarType gather_dtype_;
  torch::Device device_ = torch::kCPU;  // the parameters' device: every flat buffer lives there
  torch::Tensor full_, master_, grad_;
  std::function<void(const torch::Tensor&)> on_final_;

  torch::TensorOptions on() const { return torch::TensorOptions().device(device_); }
};

// Stage 3: a block's trainable unit and its frozen units (LoRA's base, one per dtype),
// gathered and released together; gradients go to the trainable one.
class BlockGroup : public UnitHooks {
 public:
  explicit BlockGroup(FlatUnit* trainable) : trainable_(trainable) {}
  void addFrozen(FlatUnit* u) { frozen_.push_back(u); }
  void materialize() override {
    trainable_->materialize();
    for (FlatUnit* u : frozen_) u->materialize();
  }
  void release() override {
    trainable_->release();
    for (FlatUnit* u : frozen_) u->release();
  }
  void consumeGrads(const std::vector<torch::Tensor>& grads) override {
    trainable_->consumeGrads(grads);
  }

 private:
  FlatUnit* trainable_;
  std::vector<FlatUnit*> frozen_;
};

namespace {

// Stages 1 and 2: full parameters stay materialised between steps.
class PersistentZeroSync : public ZeroSync {
 public:
  PersistentZeroSync(Comm& shard, Comm& replicate, torch::ScalarType compute_dtype, int64_t tp)
      : ZeroSync(shard, replicate, compute_dtype, tp, /*persistent=*/true) {}
  void afterOptimizer() override {
    for (auto& b : blocks_) b->gatherUpdated();
    root_->gatherUpdated();
    zeroGrads();
  }
  void paramsLoaded() override {
    for (auto& b : blocks_) b->gatherUpdated();
    root_->gatherUpdated();
  }
};

class Zero1Sync final : public PersistentZeroSync {
 public:
  using PersistentZeroSync::PersistentZeroSync;
  void finishGradients() override {
    for (auto& b : blocks_) b->reduceParamGrads(/*scatter=*/false);
    root_->reduceParamGrads(/*scatter=*/false);
    finishReplicas();
  }
};

// Stage 2: a unit's gradients are reduce-scattered into its shard as soon as a backward
// has produced all of them (a post-hook on each parameter's gradient accumulator counts
// them down), in every micro-batch, and its full gradients are freed right there. So
// between units a rank holds its gradient shards plus the units still in backward
// (the root, whose embedding gradient comes last, and the block in flight), not the
// whole model's gradients as stage 1 does. Units complete in the same order on every
// rank (same graph), so the reduce-scatters match. A unit not complete after the last
// backward (a parameter without gradient) is reduced by finishGradients(), in unit order.
class Zero2Sync final : public PersistentZeroSync {
 public:
  using PersistentZeroSync::PersistentZeroSync;
  void beforeBackward(bool) override {
    for (Pending& u : units_) u.left = u.total;
  }
  void finishGradients() override {
    for (Pending& u : units_)
      if (u.left > 0) u.unit->reduceParamGrads(/*scatter=*/true);
    for (Pending& u : units_) u.left = 0;
    finishReplicas();
  }

 protected:
  void unitAdded(FlatUnit& unit) override {
    const size_t index = units_.size();
    units_.push_back({&unit, 0, 0});
    for (const torch::Tensor& t : unit.tensors()) {
      if (!t.requires_grad()) continue;
      ++units_[index].total;
      std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(t);
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, index](const torch::autograd::variable_list& outputs,
                        const torch::autograd::variable_list&) {
            Pending& u = units_[index];
            if (u.left > 0 && --u.left == 0) u.unit->reduceParamGrads(/*scatter=*/true);
            return outputs;
          }));
      accumulators_.push_back(std::move(acc));
    }
  }

 private:
  struct Pending {
    FlatUnit* unit;
    size_t total, left;  // parameters with gradients; not yet produced in this backward
  };
  std::vector<Pending> units_;  // in addUnit order: blocks, then the root
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
};

class Zero3Sync final : public ZeroSync, public BlockExecutor {
 public:
  Zero3Sync(Comm& shard, Comm& replicate, torch::ScalarType compute_dtype, int64_t tp)
      : ZeroSync(shard, replicate, compute_dtype, tp, /*persistent=*/false) {}
  BlockExecutor* blockExecutor() override { return this; }
  void beginStep() override {
    handed_sq_ = 0;
    root_->materialize();
    for (auto& u : frozen_root_) u->materialize();
  }
  // Each unit's shard gradient is final once reduce-scattered (a block's in its backward, the
  // root's in finishGradients): handed over there. Not with replicas (HSDP), whose all-reduce
  // across replicas comes after backward.
  bool applyInBackward(ApplyGrad apply) override {
    if (replicate_.size() > 1) return false;
    apply_ = std::move(apply);
    const std::vector<FlatUnit*> units = trainableUnits();
    for (size_t i = 0; i < units.size(); ++i)
      units[i]->setOnFinal([this, i](const torch::Tensor& g) {
        handed_sq_ += paramSquaredNorm(g, norm_weights_, i);
        apply_(i, g);
      });
    return true;
  }
  // Block gradients were reduce-scattered in backward (UnitHooks::consumeGrads).
  void finishGradients() override {
    root_->reduceParamGrads(/*scatter=*/true);
    root_->release();
    for (auto& u : frozen_root_) u->release();
    finishReplicas();
  }
  void afterOptimizer() override { zeroGrads(); }

  torch::Tensor run(int64_t layer, TransformerBlockImpl& block, const torch::Tensor& x,
                    const RopeTables& rope) override {
    BlockGroup& group = *groups_[layer];
    if (!torch::GradMode::is_enabled()) {  // evaluation: gather, run, free
      group.materialize();
      torch::Tensor y = block.forward(x, rope);
      group.release();
      return y;
    }
    return checkpointedBlock(block, x, rope, &group);
  }
};

}  // namespace

ZeroSync::ZeroSync(Comm& shard, Comm& replicate, torch::ScalarType compute_dtype, int64_t tp,
                   bool persistent)
    : shard_(shard),
      replicate_(replicate),
      compute_dtype_(compute_dtype),
      tp_(tp),
      persistent_(persistent) {}
ZeroSync::~ZeroSync() = default;

std::unique_ptr<ZeroSync> makeZeroSync(int stage, Comm& shard, Comm& replicate,
                                       torch::ScalarType compute_dtype, int64_t tp) {
  if (stage == 1) return std::make_unique<Zero1Sync>(shard, replicate, compute_dtype, tp);
  if (stage == 2) return std::make_unique<Zero2Sync>(shard, replicate, compute_dtype, tp);
  return std::make_unique<Zero3Sync>(shard, replicate, compute_dtype, tp);
}

void ZeroSync::addUnit(int64_t layer, const std::vector<ModelParam>& params) {
  // Stage 3 blocks travel in the compute dtype; the root stays fp32 for the whole step.
  torch::ScalarType dt = (!persistent_ && layer >= 0) ? compute_dtype_ : torch::kFloat32;
  auto u = std::make_unique<FlatUnit>(trainableOnly(params), shard_, replicate_, persistent_, dt);
  if (tp_ > 1 && !u->empty()) norm_weights_.push_back(u->normWeight(tp_));
  unitAdded(*u);
  if (!persistent_ && layer >= 0) groups_.push_back(std::make_unique<BlockGroup>(u.get()));
  addFrozen(layer, frozenOnly(params));
  if (layer >= 0)
    blocks_.push_back(std::move(u));
  else
    root_ = std::move(u);
}

// Stages 1-2 hold the frozen weights whole, as DDP does; stage 3 shards them too, one
// flat unit per storage dtype (bf16 matrices, fp32 norms), gathered with the block.
void ZeroSync::addFrozen(int64_t layer, const std::vector<ModelParam>& frozen) {
  if (frozen.empty()) return;
  if (persistent_) {
    frozen_.insert(frozen_.end(), frozen.begin(), frozen.end());
    return;
  }
  for (torch::ScalarType storage : {torch::kFloat32, torch::kBFloat16}) {
    std::vector<ModelParam> group;
    for (const auto& p : frozen)
      if (p.tensor.scalar_type() == storage) group.push_back(p);
    if (group.empty()) continue;
    const torch::ScalarType gather =
        layer >= 0 && compute_dtype_ == torch::kBFloat16 ? torch::kBFloat16 : storage;
    auto u = std::make_unique<FlatUnit>(group, shard_, replicate_, false, gather, storage);
    if (layer >= 0)
      groups_.back()->addFrozen(u.get());
    else
      frozen_root_.push_back(u.get());
    frozen_units_.push_back(std::move(u));
  }
}

std::vector<FlatUnit*> ZeroSync::trainableUnits() const {
  std::vector<FlatUnit*> v;
  for (auto& b : blocks_)
    if (!b->empty()) v.push_back(b.get());
  if (!root_->empty()) v.push_back(root_.get());
  return v;
}

std::vector<torch::Tensor> ZeroSync::optimizerParams() const {
  std::vector<torch::Tensor> v;
  for (FlatUnit* u : trainableUnits()) v.push_back(u->master());
  return v;
}

std::vector<FlatLayout> ZeroSync::optimizerLayout() const {
  std::vector<FlatLayout> v;
  for (FlatUnit* u : trainableUnits()) v.push_back(u->layout());
  return v;
}

std::vector<torch::Tensor> ZeroSync::gradients() const {
  std::vector<torch::Tensor> v;
  if (apply_) return v;  // handed to the optimizer in backward, never stored
  for (FlatUnit* u : trainableUnits()) v.push_back(u->grad());
  return v;
}

std::vector<torch::Tensor> ZeroSync::frozenParams() const {
  std::vector<torch::Tensor> v = GradSync::frozenParams();
  for (auto& u : frozen_units_) v.push_back(u->master());
  return v;
}

std::vector<FlatLayout> ZeroSync::frozenLayout() const {
  std::vector<FlatLayout> v = GradSync::frozenLayout();
  for (auto& u : frozen_units_) v.push_back(u->layout());
  return v;
}

// Shards are disjoint across the shard group; replicas (HSDP) hold equal copies.
double ZeroSync::localSquaredNorm() const {
  if (apply_) return handed_sq_;  // stage 3 inside backward: no replicas
  return gradSquaredNorm(gradients(), norm_weights_) / double(replicate_.size());
}

void ZeroSync::finishReplicas() {
  for (auto& b : blocks_) b->finishGrads();
  root_->finishGrads();
}

void ZeroSync::zeroGrads() {
  if (apply_) return;  // no gradient buffers inside backward
  for (FlatUnit* u : trainableUnits()) u->grad().zero_();
}

}  // namespace ftb
