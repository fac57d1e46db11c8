#include "trainer/checkpoint/shard_io.h"

#include <filesystem>

#include "common/error.h"
#include "trainer/checkpoint/state.h"

namespace ftb::ckpt {
namespace {

hid_t memType(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return H5T_NATIVE_FLOAT;
    case torch::kFloat64:
      return H5T_NATIVE_DOUBLE;
    case torch::kInt64:
      return H5T_NATIVE_INT64;
    case torch::kUInt8:
      return H5T_NATIVE_UINT8;
    default:
      throw IoError(std::string("checkpoint: unsupported dtype ") + c10::toString(t));
  }
}

std::vector<hsize_t> dims(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

void writeIntArrayAttr(hid_t obj, const std::string& name, const std::vector<int64_t>& v) {
  hsize_t n = v.size();
  h5::H5Handle space(h5::check(H5Screate_simple(1, &n, nullptr), obj, "H5Screate_simple"),
                     h5::Kind::kDataspace);
  h5::H5Handle a(
      h5::check(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), obj,
                "H5Acreate2 " + name),
      h5::Kind::kAttribute);
  h5::checkStatus(H5Awrite(a, H5T_NATIVE_INT64, v.data()), obj, "H5Awrite " + name);
}

// 0-D boxes are stored as 1-element 1-D datasets.
std::vector<hsize_t> storedDims(const std::vector<int64_t>& size) {
  return size.empty() ? std::vector<hsize_t>{1} : dims(size);
}

std::string dimsText(const std::vector<hsize_t>& d) {
  std::string t = "[";
  for (size_t i = 0; i < d.size(); ++i) t += (i ? ", " : "") + std::to_string(d[i]);
  return t + "]";
}

// The stored dataset is the slice the manifest describes: its dimensions are the
// slice's size and its `offset` attribute the slice's offset (a manifest edited to
// point at another dataset, or a shard file swapped, is refused before reading).
void checkStoredSlice(hid_t dset, hid_t fspace, const CkptSlice& s) {
  std::vector<hsize_t> have(size_t(std::max(H5Sget_simple_extent_ndims(fspace), 0)));
  H5Sget_simple_extent_dims(fspace, have.data(), nullptr);
  const std::vector<hsize_t> want = storedDims(s.size);
  if (have != want)
    throw IoError("checkpoint dataset " + h5::describe(dset) + " holds " + dimsText(have) +
                  " elements, the manifest's slice is " + dimsText(want));
  if (!s.offset.empty() && h5::hasAttr(dset, "offset") &&
      h5::readAttrInts(dset, "offset") != s.offset)
    throw IoError("checkpoint dataset " + h5::describe(dset) +
                  " has another offset attribute than the manifest's slice (" +
                  dimsText(dims(s.offset)) + ")");
}

}  // namespace

std::vector<std::pair<std::string, CkptSlice>> writeShardFile(
    const std::string& path, const std::vector<SliceToWrite>& slices, int rank, int64_t step) {
  std::vector<std::pair<std::string, CkptSlice>> out;
  {
    h5::H5Handle f = h5::createFile(path, /*file_locking=*/false);
    h5::writeAttrString(f, "format", "ftbench-checkpoint-shard");
    h5::writeAttrInt(f, "rank", rank);
    h5::writeAttrInt(f, "step", step);
    std::map<std::string, int> count;
    const std::string file = std::filesystem::path(path).filename().string();
    for (const SliceToWrite& s : slices) {
      int k = count[s.name]++;
      if (k == 0) h5::createGroup(f, s.name);
      const std::string ds = s.name + "/" + std::to_string(k);
      torch::Tensor data = s.data.to(torch::kCPU).contiguous();  // a GPU tensor is copied out
      if (data.scalar_type() == torch::kBFloat16) data = data.to(torch::kFloat32);  // exact
      std::vector<hsize_t> d = storedDims(s.box.size);
      h5::H5Handle space(h5::check(H5Screate_simple(int(d.size()), d.data(), nullptr), f,
                                   "H5Screate_simple " + ds),
                         h5::Kind::kDataspace);
      hid_t mt = memType(data.scalar_type());
      h5::H5Handle dset(
          h5::check(H5Dcreate2(f, ds.c_str(), mt, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), f,
                    "H5Dcreate2 " + ds),
          h5::Kind::kDataset);
      if (data.numel() > 0)
        h5::checkStatus(H5Dwrite(dset, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data_ptr()), dset,
                        "H5Dwrite " + ds);
      writeIntArrayAttr(dset, "offset", s.box.offset);
      writeIntArrayAttr(dset, "global_shape", s.global_shape);
      out.push_back({s.name, CkptSlice{file, "/" + ds, s.box.offset, s.box.size}});
    }
    f.close();
  }
  return out;
}

void checkShardFile(const std::string& dir, const Manifest& m, const std::string& file) {
  const std::string path = (std::filesystem::path(dir) / file).string();
  try {
    h5::H5Handle f = h5::openFile(path, false, /*file_locking=*/false);
    for (const auto& [name, t] : m.tensors)
      for (const CkptSlice& s : t.slices) {
        if (s.file != file) continue;
        h5::H5Handle dset = h5::openDataset(f, s.dataset);
        h5::H5Handle fspace(h5::check(H5Dget_space(dset), dset, "H5Dget_space"),
                            h5::Kind::kDataspace);
        checkStoredSlice(dset, fspace, s);
      }
  } catch (const FtbError& e) {
    throw CheckpointError(path, e.what());
  }
}

void ShardReader::read(const CkptSlice& s, const Box& part, torch::Tensor& dst) {
  if (dst.scalar_type() == torch::kBFloat16) {  // stored widened to float32 (exact)
    torch::Tensor wide = torch::empty(dst.sizes(), dst.options().dtype(torch::kFloat32));
    read(s, part, wide);
    dst.copy_(wide);
    return;
  }
  auto it = files_.find(s.file);
  if (it == files_.end()) {
    const std::string p = (std::filesystem::path(dir_) / s.file).string();
    it = files_.emplace(s.file, h5::openFile(p, false, /*file_locking=*/false)).first;
  }
  h5::H5Handle dset = h5::openDataset(it->second, s.dataset);
  h5::H5Handle fspace(h5::check(H5Dget_space(dset), dset, "H5Dget_space"), h5::Kind::kDataspace);
  const int nd = H5Sget_simple_extent_ndims(fspace);
  if (nd != int(std::max<size_t>(1, s.size.size())))
    throw IoError("checkpoint dataset " + h5::describe(dset) + " has " + std::to_string(nd) +
                  " dimensions, the manifest says " + std::to_string(s.size.size()));
  checkStoredSlice(dset, fspace, s);
  std::vector<hsize_t> start(nd, 0), count(nd, 1);
  for (size_t d = 0; d < part.offset.size(); ++d) {
    start[d] = hsize_t(part.offset[d] - s.offset[d]);
    count[d] = hsize_t(part.size[d]);
  }
  h5::checkStatus(
      H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
      dset, "H5Sselect_hyperslab");
  h5::H5Handle mspace(
      h5::check(H5Screate_simple(nd, count.data(), nullptr), dset, "H5Screate_simple"),
      h5::Kind::kDataspace);
  if (dst.numel() == 0) return;
  h5::checkStatus(
      H5Dread(dset, memType(dst.scalar_type()), mspace, fspace, H5P_DEFAULT, dst.data_ptr()), dset,
      "H5Dread " + s.dataset);
}

}  // namespace ftb::ckpt
