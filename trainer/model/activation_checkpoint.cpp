#include "trainer/model/activation_checkpoint.h"

#include "trainer/model/llama.h"

namespace ftb {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
T* ptrOf(AutogradContext* ctx, const char* key) {
  return reinterpret_cast<T*>(ctx->saved_data[key].toInt());
}

struct BlockFn : public torch::autograd::Function<BlockFn> {
  // Without hooks the parameters are inputs, so autograd routes their gradients
  // through backward() into .grad; with hooks the hooks take them.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, at::TensorList params,
                               TransformerBlockImpl* block, const RopeTables* rope,
                               UnitHooks* hooks) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["rope"] = reinterpret_cast<int64_t>(rope);
    ctx->saved_data["hooks"] = reinterpret_cast<int64_t>(hooks);
    ctx->saved_data["dtype"] = static_cast<int64_t>(computeDtype());
    if (hooks && !params.empty()) ctx->saved_data["anchor"] = true;
    ctx->save_for_backward({x});
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
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(need_x);
    if (hooks) hooks->materialize();
    std::vector<torch::Tensor> params = block->trainableTensors();
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = block->forward(x, *rope);
    }
    std::vector<torch::Tensor> inputs;
    if (need_x) inputs.push_back(x);
    inputs.insert(inputs.end(), params.begin(), params.end());
    variable_list grads = torch::autograd::grad({y}, inputs, {grad_out[0]},
                                                /*retain_graph=*/false,
                                                /*create_graph=*/false,
                                                /*allow_unused=*/true);
    const auto first_param = grads.begin() + (need_x ? 1 : 0);
    variable_list out{need_x ? grads[0] : torch::Tensor()};
    if (hooks) {
      hooks->consumeGrads(std::vector<torch::Tensor>(first_param, grads.end()));
      hooks->release();
      if (ctx->saved_data.count("anchor")) out.push_back(torch::Tensor());
    } else {
      out.insert(out.end(), first_param, grads.end());
    }
    out.push_back(torch::Tensor());  // block
    out.push_back(torch::Tensor());  // rope
    out.push_back(torch::Tensor());  // hooks
    return out;
  }
};

}  // namespace

torch::Tensor checkpointedBlock(TransformerBlockImpl& block, const torch::Tensor& x,
                                const RopeTables& rope, UnitHooks* hooks) {
  std::vector<torch::Tensor> params;
  if (!hooks) {
    params = block.trainableTensors();
  } else if (!x.requires_grad() && !block.trainableTensors().empty()) {
    // The hooks take the gradients, and nothing before the block trains (LoRA's block 0):
    // an empty input that requires grad makes autograd run this block's backward.
    static const torch::Tensor anchor = torch::empty({0}).requires_grad_(true);
    params = {anchor};
  }
  return BlockFn::apply(x, at::TensorList(params), &block, &rope, hooks);
}

}  // namespace ftb
