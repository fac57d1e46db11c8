#include "trainer/model/attention_products.h"

#include <algorithm>

#include "trainer/kernels/openblas.h"
#include "trainer/model/linear.h"

namespace ftb {
namespace {

// One operand of a batched product as OpenBLAS reads it: each matrix is row-major with
// leading dimension ld, or (trans) the transpose of one; matrix i starts at
// data + i * batch_stride. Tensors whose layout is neither are copied contiguous first.
struct BlasOperand {
  torch::Tensor keep;  // the storage read
  const float* data = nullptr;
  int64_t ld = 0, batch_stride = 0;
  bool trans = false;
};

// REQUIRES: x is [batch, r, c] (r, c >= 1), fp32 on the CPU.
BlasOperand blasOperand(torch::Tensor x) {
  const int64_t r = x.size(1), c = x.size(2);
  BlasOperand o;
  if (x.stride(2) == 1 && (r == 1 || x.stride(1) >= c)) {
    o.ld = r == 1 ? c : x.stride(1);
  } else if (x.stride(1) == 1 && (c == 1 || x.stride(2) >= r)) {
    o.trans = true;  // xᵀ is row-major [c, r]
    o.ld = c == 1 ? r : x.stride(2);
  } else {
    x = x.contiguous();
    o.ld = c;
  }
  o.batch_stride = x.stride(0);
  o.data = x.data_ptr<float>();
  o.keep = x;
  return o;
}

// c[i] = a[i] · b[i] for every i, written into the view c [n, M, N].
// REQUIRES: a [n, M, K], b [n, K, N] fp32 CPU; c's rows contiguous (stride(2) == 1).
void blasBmmInto(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
  const int64_t n = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  TORCH_CHECK(c.stride(2) == 1 || N == 1, "blasBmmInto: the output's rows must be contiguous");
  const BlasOperand oa = blasOperand(a), ob = blasOperand(b);
  const kernels::OpenBlas* blas = kernels::openblas();
  float* out = c.data_ptr<float>();
  const int64_t ldc = M == 1 ? N : c.stride(1);
  for (int64_t i = 0; i < n; ++i)
    blas->sgemm(oa.trans, ob.trans, M, N, K, 1.f, oa.data + i * oa.batch_stride, oa.ld,
                ob.data + i * ob.batch_stride, ob.ld, 0.f, out + i * c.stride(0), ldc);
}

// Row block i: rows [s, e) of [0, T).
struct Block {
  int64_t s, e;
  int64_t len() const { return e - s; }
};

std::vector<Block> rowBlocks(int64_t T) {
  std::vector<Block> v;
  for (int64_t s = 0; s < T; s += kCausalBlockRows)
    v.push_back({s, std::min(T, s + kCausalBlockRows)});
  return v;
}

// s[:, block rows, 0:e] = q[:, block rows] · k[:, 0:e]ᵀ; 0 past e.  q, k [n, T, d].
torch::Tensor scoresForward(const torch::Tensor& q, const torch::Tensor& k) {
  const int64_t n = q.size(0), T = q.size(1);
  torch::Tensor s = torch::empty({n, T, T}, q.options());
  for (const Block& b : rowBlocks(T)) {
    torch::Tensor rows = s.narrow(1, b.s, b.len());
    blasBmmInto(q.narrow(1, b.s, b.len()), k.narrow(1, 0, b.e).transpose(1, 2),
                rows.narrow(2, 0, b.e));
    if (b.e < T) rows.narrow(2, b.e, T - b.e).zero_();
  }
  return s;
}

// o[:, block rows] = p[:, block rows, 0:e] · v[:, 0:e].  p [n, T, T], v [n, T, d].
torch::Tensor weightedForward(const torch::Tensor& p, const torch::Tensor& v) {
  torch::Tensor o = torch::empty(v.sizes(), v.options());
  for (const Block& b : rowBlocks(p.size(1)))
    blasBmmInto(p.narrow(1, b.s, b.len()).narrow(2, 0, b.e), v.narrow(1, 0, b.e),
                o.narrow(1, b.s, b.len()));
  return o;
}

// x = aᵀ · g over the rows a block of keys is seen from: for key block j,
// x[:, j] = a[:, s_j:T, j]ᵀ · g[:, s_j:T]. a [n, T, T] lower block-triangular, g [n, T, d].
torch::Tensor keyGradient(const torch::Tensor& a, const torch::Tensor& g) {
  const int64_t T = a.size(1);
  torch::Tensor x = torch::empty(g.sizes(), g.options());
  for (const Block& b : rowBlocks(T))
    blasBmmInto(a.narrow(1, b.s, T - b.s).narrow(2, b.s, b.len()).transpose(1, 2),
                g.narrow(1, b.s, T - b.s), x.narrow(1, b.s, b.len()));
  return x;
}

class CausalScoresFn : public torch::autograd::Function<CausalScoresFn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k) {
    ctx->save_for_backward({q, k});
    return scoresForward(q, k);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1];
    torch::Tensor gs = grads[0].contiguous(), gq, gk;
    if (ctx->needs_input_grad(0)) gq = weightedForward(gs, k);  // gs · k, block rows
    if (ctx->needs_input_grad(1)) gk = keyGradient(gs, q);      // gsᵀ · q
    return {gq, gk};
  }
};

class CausalWeightedFn : public torch::autograd::Function<CausalWeightedFn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& p,
                               const torch::Tensor& v) {
    ctx->save_for_backward({p, v});
    return weightedForward(p, v);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &p = saved[0], &v = saved[1];
    torch::Tensor g = grads[0].contiguous(), gp, gv;
    if (ctx->needs_input_grad(0)) gp = scoresForward(g, v);  // g · vᵀ, block rows
    if (ctx->needs_input_grad(1)) gv = keyGradient(p, g);    // pᵀ · g
    return {gp, gv};
  }
};

bool onBlas(const torch::Tensor& a, const torch::Tensor& b) {
  return fp32OnOpenBlas(a, b) && a.dim() >= 3 && a.dim() == b.dim() &&
         a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2);
}

// x [..., r, c] as [n, r, c] (a view for contiguous heads; reshape copies any other layout).
torch::Tensor fold(const torch::Tensor& x) { return x.reshape({-1, x.size(-2), x.size(-1)}); }

torch::Tensor unfold(const torch::Tensor& y, const torch::Tensor& like, int64_t last) {
  std::vector<int64_t> shape = like.sizes().vec();
  shape.back() = last;
  return y.view(shape);
}

}  // namespace

torch::Tensor causalScores(const torch::Tensor& q, const torch::Tensor& k) {
  if (!onBlas(q, k)) return torch::matmul(q, k.transpose(-2, -1));
  return unfold(CausalScoresFn::apply(fold(q), fold(k)), q, k.size(-2));
}

torch::Tensor causalWeighted(const torch::Tensor& p, const torch::Tensor& v) {
  if (!onBlas(p, v)) return torch::matmul(p, v);
  return unfold(CausalWeightedFn::apply(fold(p), fold(v)), p, v.size(-1));
}

}  // namespace ftb
