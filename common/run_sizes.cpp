// checkSizes(): see run_config.h. Every product of config values the trainer forms
// is computed here once with overflow checks, before anything uses it.
#include <string>
#include <utility>

#include "common/checked_math.h"
#include "common/pipeline_limits.h"
#include "common/run_config.h"

namespace ftb {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

void checkSizes(const Config& cfg, const TrainConfig& c) {
  const ModelArgs& m = c.model;
  const int64_t hd = m.dim / m.n_heads;
  // blockMatrixParams: dim*n_heads*hd + 2*dim*n_kv*hd + n_heads*hd*dim + 3*dim*ffn;
  // numParams: vocab*dim*(tied ? 1 : 2) + n_layers*(block + 2*dim) + dim.
  auto attn_q = checkedProduct({m.dim, m.n_heads, hd, 2});
  auto attn_kv = checkedProduct({m.dim, m.n_kv_heads, hd, 2});
  auto mlp = checkedProduct({m.dim, m.ffn_dim, 3});
  auto block =
      attn_q && attn_kv && mlp ? checkedSum({*attn_q, *attn_kv, *mlp, 2 * m.dim}) : std::nullopt;
  auto embed = checkedProduct({m.vocab_size, m.dim, m.tie_embeddings ? 1 : 2});
  auto blocks = block ? checkedProduct({m.n_layers, *block}) : std::nullopt;
  auto params = blocks && embed ? checkedSum({*blocks, *embed, m.dim}) : std::nullopt;
  if (!params) {
    // Blame the key whose value is furthest out of the usual range.
    const char* key = m.n_layers > m.dim ? "model.n_layers" : "model.dim";
    if (m.ffn_dim > m.dim && m.ffn_dim > m.n_layers) key = "model.ffn_dim";
    if (m.vocab_size > m.dim && m.vocab_size > m.ffn_dim && m.vocab_size > m.n_layers)
      key = "model.vocab_size";
    cfg.fail(key,
             "the parameter count of dim(" + num(m.dim) + "), n_layers(" + num(m.n_layers) +
                 "), ffn_dim(" + num(m.ffn_dim) + "), vocab_size(" + num(m.vocab_size) +
                 ") overflows a 64-bit integer",
             "no machine holds this model; check the value");
  }
  // Global batch and tokens of the run; blame the largest factor the user set.
  const std::pair<const char*, int64_t> factors[] = {
      {"training.micro_batch_size", c.training.micro_batch_size},
      {"training.grad_accum_steps", c.training.grad_accum_steps},
      {"data.seq_len", c.data.seq_len},
      {"training.max_steps", c.training.max_steps}};
  auto largest = [&factors] {
    const auto* best = &factors[0];
    for (const auto& f : factors)
      if (f.second > best->second) best = &f;
    return best->first;
  };
  auto global = checkedProduct({c.training.micro_batch_size, c.training.grad_accum_steps,
                                c.layout.dp_replicate, c.layout.dp_shard});
  if (!global)
    cfg.fail(largest(),
             "global batch = micro_batch_size(" + num(c.training.micro_batch_size) +
                 ") * grad_accum_steps(" + num(c.training.grad_accum_steps) +
                 ") * data-parallel size(" + num(c.layout.dpSize()) +
                 ") overflows a 64-bit integer",
             "lower training.micro_batch_size or training.grad_accum_steps");
  if (!checkedProduct({*global, c.data.seq_len, c.training.max_steps}))
    cfg.fail(largest(),
             "tokens of the run = global batch(" + num(*global) + ") * seq_len(" +
                 num(c.data.seq_len) + ") * max_steps(" + num(c.training.max_steps) +
                 ") overflows a 64-bit integer",
             "lower training.max_steps, data.seq_len or the global batch");
  checkPipeMicrobatchBound(cfg, c);  // m x micro-batch x dp against the samples (pipeline_limits.h)
}

}  // namespace ftb
