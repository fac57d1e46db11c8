#include "trainer/model/activation_checkpoint.h"

#include <algorithm>
#include <atomic>

#include "trainer/kernels/host_copy.h"
#include "trainer/model/linear.h"
#include "trainer/model/llama.h"

namespace ftb {
namespace {

std::atomic<bool> g_activation_offload{false};

// x (CUDA) into pinned host memory on the side stream, after the work that produced x.
torch::Tensor offloadToHost(const torch::Tensor& x) {
  torch::Tensor host = hostBufferLike(x);
  SideCopies(x.device()).toHost(host, x);
  return host;
}

// The offloaded input back on `device`, once the side stream's copies are done.
torch::Tensor fetchFromHost(const torch::Tensor& host, c10::DeviceIndex device) {
  const torch::Device d(torch::kCUDA, device);
  SideCopies copies(d);
  copies.hostWait(copies.mark());
  return host.to(d, /*non_blocking=*/true);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
T* ptrOf(AutogradContext* ctx, const char* key) {
  return reinterpret_cast<T*>(ctx->saved_data[key].toInt());
}

// The tensors whose gradients autograd routes through BlockFn without hooks: the block's
// trainable tensors, less the projection weights a zero-bubble weight pass takes
// (blockProjection, linear.h; a block's 2-D trainable tensors are exactly its projection
// weights and adapters).
std::vector<torch::Tensor> gradParams(const TransformerBlockImpl& block) {
  std::vector<torch::Tensor> v = block.trainableTensors();
  if (weightGradsDeferred())
    v.erase(std::remove_if(v.begin(), v.end(), [](const torch::Tensor& t) { return t.dim() == 2; }),
            v.end());
  return v;
}

struct BlockFn : public torch::autograd::Function<BlockFn> {
  // Without hooks the parameters (gradParams) are inputs, so autograd routes their gradients
  // through backward() into .grad; with hooks the hooks take them. `anchored`: params is one
  // empty tensor that only makes autograd run this backward (checkpointedBlock).
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, at::TensorList params,
                               TransformerBlockImpl* block, const RopeTables* rope,
                               UnitHooks* hooks, bool anchored) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["rope"] = reinterpret_cast<int64_t>(rope);
    ctx->saved_data["hooks"] = reinterpret_cast<int64_t>(hooks);
    ctx->saved_data["dtype"] = static_cast<int64_t>(computeDtype());
    if (anchored) ctx->saved_data["anchor"] = true;
    if (g_activation_offload.load() && x.is_cuda()) {
      ctx->saved_data["offloaded"] = offloadToHost(x);
      ctx->saved_data["device"] = static_cast<int64_t>(x.device().index());
    } else {
      ctx->save_for_backward({x});
    }
    torch::NoGradGuard no_grad;
    if (hooks) hooks->materialize();
    torch::Tensor y = block->forward(x, *rope);
    if (hooks) hooks->release();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* block = ptrOf<TransformerBlockImpl>(ctx, "block");
    auto* rope = ptrOf<const RopeTables>(ctx, "rope");
    auto* hooks = ptrOf<UnitHooks>(ctx, "hooks");
    ComputeDtypeGuard dtype(static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt()));
    // x needs no gradient when nothing before the block trains (LoRA's block 0).
    const bool need_x = ctx->needs_input_grad(0);
    torch::Tensor x = ctx->saved_data.count("offloaded")
                          ? fetchFromHost(ctx->saved_data["offloaded"].toTensor(),
                                          c10::DeviceIndex(ctx->saved_data["device"].toInt()))
                          : ctx->get_saved_variables()[0];
    x = x.detach().requires_grad_(need_x);
    if (hooks) hooks->materialize();
    std::vector<torch::Tensor> params = hooks ? block->trainableTensors() : gradParams(*block);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = block->forward(x, *rope);
    }
    std::vector<torch::Tensor> inputs;
    if (need_x) inputs.push_back(x);
    inputs.insert(inputs.end(), params.begin(), params.end());
    const bool deferring = !hooks && weightGradsDeferred();
    if (deferring) inputs.push_back(weightGradAnchor());  // run every deferred projection
    variable_list grads = torch::autograd::grad({y}, inputs, {grad_out[0]},
                                                /*retain_graph=*/false,
                                                /*create_graph=*/false,
                                                /*allow_unused=*/true);
    if (deferring) grads.pop_back();
    const auto first_param = grads.begin() + (need_x ? 1 : 0);
    variable_list out{need_x ? grads[0] : torch::Tensor()};
    if (hooks) {
      hooks->consumeGrads(std::vector<torch::Tensor>(first_param, grads.end()));
      hooks->release();
    } else {
      out.insert(out.end(), first_param, grads.end());
    }
    if (ctx->saved_data.count("anchor")) out.push_back(torch::Tensor());
    out.push_back(torch::Tensor());  // block
    out.push_back(torch::Tensor());  // rope
    out.push_back(torch::Tensor());  // hooks
    out.push_back(torch::Tensor());  // anchored
    return out;
  }
};

}  // namespace

void setActivationOffload(bool on) { g_activation_offload.store(on); }

torch::Tensor checkpointedBlock(TransformerBlockImpl& block, const torch::Tensor& x,
                                const RopeTables& rope, UnitHooks* hooks) {
  std::vector<torch::Tensor> params;
  if (!hooks) params = gradParams(block);
  const bool anchored =
      params.empty() && !x.requires_grad() && !block.trainableTensors().empty();
  if (anchored) {
    // The block trains, but autograd reaches none of its gradients (the hooks take them, or
    // a zero-bubble weight pass) and nothing before it trains (LoRA's block 0): an empty
    // input that requires grad makes autograd run this block's backward.
    static const torch::Tensor anchor = torch::empty({0}).requires_grad_(true);
    params = {anchor};
  }
  return BlockFn::apply(x, at::TensorList(params), &block, &rope, hooks, anchored);
}

}  // namespace ftb
