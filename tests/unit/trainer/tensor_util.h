// Tensor helpers shared by the trainer's unit tests.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ftb {

// max |a - b| in float64.
inline double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// One backward of sum(k * p) over the given parameters: gradient k in every element.
inline void backwardOfScaledSum(const std::vector<torch::Tensor>& params, double k) {
  torch::Tensor loss = torch::zeros({});
  for (const torch::Tensor& p : params) loss = loss + (p * k).sum();
  loss.backward();
}

// A file of little-endian int64 token ids (what the Python references write) as a
// [batch, n / batch] tensor.
inline torch::Tensor readTokens(const std::string& path, int64_t batch) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const int64_t n = int64_t(in.tellg()) / 8;
  torch::Tensor t = torch::empty({n}, torch::kInt64);
  in.seekg(0);
  in.read(static_cast<char*>(t.data_ptr()), n * 8);
  return t.view({batch, n / batch});
}

}  // namespace ftb
