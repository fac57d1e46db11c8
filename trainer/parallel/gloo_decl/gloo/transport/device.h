// Declarations for ProcessGroupGloo.hpp only; see ../../README.md.
#pragma once

namespace gloo {
namespace transport {
class Device;         // held by shared_ptr (ProcessGroupGloo::Options::devices)
class UnboundBuffer;  // held by unique_ptr (send/recv work)
}  // namespace transport
}  // namespace gloo
