// Tests for trainer/checkpoint/slices.h: flat ZeRO ranges map onto contiguous boxes
// that cover exactly the range, and box intersection; and that ShardReader
// (trainer/checkpoint/shard_io.h) reads only the dataset a manifest slice describes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <numeric>

#include "common/error.h"
#include "trainer/checkpoint/shard_io.h"
#include "trainer/checkpoint/slices.h"

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

// A manifest slice pointing at another tensor's dataset, or at the right dataset with
// another box, loaded silently before the reader compared the stored dataset with it.
TEST(ShardReader, ReadsOnlyTheDatasetTheSliceDescribes) {
  std::string dir = ::testing::TempDir() + "ftb_shard_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  torch::Tensor a = torch::arange(4, torch::kFloat32), b = torch::arange(10, 12, torch::kFloat32);
  writeShardFile(dir + "/rank_00000.h5",
                 {{"model.a", {6}, Box{{0}, {4}}, a}, {"model.b", {6}, Box{{4}, {2}}, b}}, 0, 3);
  ShardReader reader(dir);
  torch::Tensor out = torch::zeros({4});
  reader.read(CkptSlice{"rank_00000.h5", "/model.a/0", {0}, {4}}, Box{{0}, {4}}, out);
  EXPECT_TRUE(torch::equal(out, a));
  try {  // model.b's dataset (2 elements) as if it were model.a's slice
    reader.read(CkptSlice{"rank_00000.h5", "/model.b/0", {0}, {4}}, Box{{0}, {4}}, out);
    FAIL() << "a 2-element dataset was read as a 4-element slice";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("holds [2] elements, the manifest's slice is [4]"),
              std::string::npos)
        << e.what();
  }
  torch::Tensor two = torch::zeros({2});
  try {  // the right size, but the dataset was saved at offset 4, not 0
    reader.read(CkptSlice{"rank_00000.h5", "/model.b/0", {0}, {2}}, Box{{0}, {2}}, two);
    FAIL() << "a slice saved at offset 4 was read as offset 0";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("another offset attribute"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ftb::ckpt
