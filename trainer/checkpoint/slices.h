// Boxes (hyperslabs) of global tensors: what a rank holds and what it wants.
//
// Contracts:
// - A Box is [offset[d], offset[d] + size[d]) in every dimension d of a tensor.
// - flatRangeBoxes(shape, begin, end) splits the row-major flat range [begin, end) of
//   a tensor of `shape` into at most 2·(rank-1)+1 boxes, in order, each of which is
//   contiguous in row-major memory, so `flat.narrow(0, flat_begin, numel).view(size)`
//   aliases it. Used to map ZeRO's flat shards onto per-tensor slices.
// - intersect(a, b) is the common box, or nullopt when it is empty.
// No libtorch.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ftb::ckpt {

struct Box {
  std::vector<int64_t> offset, size;
  int64_t numel() const;
};

struct FlatBox {
  Box box;
  int64_t flat_begin = 0;  // row-major index of the box's first element
};

// REQUIRES: 0 <= begin <= end <= numel(shape).
std::vector<FlatBox> flatRangeBoxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

std::optional<Box> intersect(const Box& a, const Box& b);

// `inner` shifted into the coordinates of `outer` (inner.offset - outer.offset).
// REQUIRES: inner lies inside outer.
Box relativeTo(const Box& inner, const Box& outer);

}  // namespace ftb::ckpt
