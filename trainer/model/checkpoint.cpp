#include "trainer/model/checkpoint.h"

namespace ftb {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct BlockFn : public torch::autograd::Function<BlockFn> {
  // params are passed so autograd routes their gradients through backward().
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, at::TensorList params,
                               TransformerBlockImpl* block, const RopeTables* rope) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["rope"] = reinterpret_cast<int64_t>(rope);
    ctx->saved_data["dtype"] = static_cast<int64_t>(computeDtype());
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;
    return block->forward(x, *rope);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* block = reinterpret_cast<TransformerBlockImpl*>(ctx->saved_data["block"].toInt());
    auto* rope = reinterpret_cast<const RopeTables*>(ctx->saved_data["rope"].toInt());
    ComputeDtypeGuard dtype(static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt()));
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    std::vector<torch::Tensor> params = block->parameters();
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = block->forward(x, *rope);
    }
    std::vector<torch::Tensor> inputs{x};
    inputs.insert(inputs.end(), params.begin(), params.end());
    variable_list grads = torch::autograd::grad({y}, inputs, {grad_out[0]},
                                                /*retain_graph=*/false,
                                                /*create_graph=*/false,
                                                /*allow_unused=*/true);
    grads.push_back(torch::Tensor());  // block pointer
    grads.push_back(torch::Tensor());  // rope pointer
    return grads;
  }
};

}  // namespace

torch::Tensor checkpointedBlock(TransformerBlock& block, const torch::Tensor& x,
                                const RopeTables& rope) {
  std::vector<torch::Tensor> params = block->parameters();
  return BlockFn::apply(x, at::TensorList(params), block.get(), &rope);
}

}  // namespace ftb
