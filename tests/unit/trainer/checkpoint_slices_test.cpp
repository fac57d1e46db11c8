// Tests for trainer/checkpoint/slices.h: flat ZeRO ranges map onto contiguous boxes
// that cover exactly the range, and box intersection.
#include "trainer/checkpoint/slices.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ftb::ckpt {
namespace {

// Row-major flat index of every element of every box, in order.
std::vector<int64_t> flatten(const std::vector<int64_t>& shape, const std::vector<FlatBox>& boxes) {
  std::vector<int64_t> out;
  for (const FlatBox& fb : boxes) {
    int64_t expect = fb.flat_begin;
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t n = 0; n < fb.box.numel(); ++n) {
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + fb.box.offset[d] + idx[d];
      EXPECT_EQ(flat, expect++) << "box not contiguous in row-major order";
      out.push_back(flat);
      for (int d = int(shape.size()) - 1; d >= 0; --d) {
        if (++idx[d] < fb.box.size[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

TEST(CheckpointSlices, EveryFlatRangeOfA3dTensorIsCoveredExactly) {
  const std::vector<int64_t> shape{3, 4, 5};
  for (int64_t b = 0; b <= 60; ++b)
    for (int64_t e = b; e <= 60; ++e) {
      std::vector<FlatBox> boxes = flatRangeBoxes(shape, b, e);
      std::vector<int64_t> want(e - b);
      std::iota(want.begin(), want.end(), b);
      ASSERT_EQ(flatten(shape, boxes), want) << b << ".." << e;
      EXPECT_LE(boxes.size(), 5u);
    }
}

TEST(CheckpointSlices, TwoDRangeSplitsIntoPartialFullPartialRows) {
  std::vector<FlatBox> boxes = flatRangeBoxes({4, 10}, 7, 33);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_EQ(boxes[0].box.offset, (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(boxes[0].box.size, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(boxes[1].box.offset, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(boxes[1].box.size, (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(boxes[2].box.offset, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(boxes[2].box.size, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(boxes[2].flat_begin, 30);
}

TEST(CheckpointSlices, IntersectAndRelative) {
  Box a{{0, 4}, {8, 4}}, b{{2, 0}, {4, 6}};
  std::optional<Box> c = intersect(a, b);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->offset, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(c->size, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(relativeTo(*c, a).offset, (std::vector<int64_t>{2, 0}));
  EXPECT_FALSE(intersect(a, Box{{0, 0}, {8, 4}}));
}

}  // namespace
}  // namespace ftb::ckpt
