// Declarations for ProcessGroupGloo.hpp only; see ../../README.md.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo {
namespace rendezvous {
// The base of ProcessGroupGloo::GlooStore, which overrides these. GlooStore is constructed
// only inside libtorch, against Gloo's real definition.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) = 0;
};
}  // namespace rendezvous
}  // namespace gloo
