// Declarations for ProcessGroupGloo.hpp only; see ../README.md.
#pragma once

#include <chrono>

namespace gloo {
// Held by shared_ptr in ProcessGroupGloo; setTimeout is named by an inline member there.
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo
