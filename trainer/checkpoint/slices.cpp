#include "trainer/checkpoint/slices.h"

#include <algorithm>

namespace ftb::ckpt {
namespace {

int64_t product(const std::vector<int64_t>& v, size_t from) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// Boxes of [begin, end) within the sub-tensor shape[dim:], prefixed by `lead`
// (offsets of the leading dimensions, each of size 1); `base` = flat index of the
// sub-tensor's first element.
void split(const std::vector<int64_t>& shape, size_t dim, int64_t begin, int64_t end,
           std::vector<int64_t> lead, int64_t base, std::vector<FlatBox>& out) {
  if (begin >= end) return;
  auto emit = [&](int64_t first, int64_t count, int64_t flat) {
    FlatBox fb;
    fb.box.offset = lead;
    fb.box.size.assign(lead.size(), 1);
    fb.box.offset.push_back(first);
    fb.box.size.push_back(count);
    for (size_t d = dim + 1; d < shape.size(); ++d) {
      fb.box.offset.push_back(0);
      fb.box.size.push_back(shape[d]);
    }
    fb.flat_begin = flat;
    out.push_back(std::move(fb));
  };
  if (dim + 1 == shape.size()) {
    emit(begin, end - begin, base + begin);
    return;
  }
  const int64_t inner = product(shape, dim + 1);
  int64_t row = begin / inner;
  if (begin % inner != 0) {  // partial first row
    int64_t stop = std::min(end, (row + 1) * inner);
    std::vector<int64_t> l = lead;
    l.push_back(row);
    split(shape, dim + 1, begin - row * inner, stop - row * inner, l, base + row * inner, out);
    begin = stop;
    row += 1;
  }
  if (begin >= end) return;
  int64_t full_rows = end / inner - row;
  if (full_rows > 0) {
    emit(row, full_rows, base + row * inner);
    row += full_rows;
  }
  if (end > row * inner) {  // partial last row
    std::vector<int64_t> l = lead;
    l.push_back(row);
    split(shape, dim + 1, 0, end - row * inner, l, base + row * inner, out);
  }
}

}  // namespace

int64_t Box::numel() const { return product(size, 0); }

std::vector<FlatBox> flatRangeBoxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  std::vector<FlatBox> out;
  if (shape.empty()) {
    if (begin < end) out.push_back({Box{}, 0});
    return out;
  }
  split(shape, 0, begin, end, {}, 0, out);
  return out;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box r;
  for (size_t d = 0; d < a.offset.size(); ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.size[d], b.offset[d] + b.size[d]);
    if (hi <= lo) return std::nullopt;
    r.offset.push_back(lo);
    r.size.push_back(hi - lo);
  }
  return r;
}

Box relativeTo(const Box& inner, const Box& outer) {
  Box r = inner;
  for (size_t d = 0; d < r.offset.size(); ++d) r.offset[d] -= outer.offset[d];
  return r;
}

}  // namespace ftb::ckpt
