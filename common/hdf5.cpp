#include "common/hdf5.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>

#include "common/error.h"

namespace ftb::h5 {
namespace {

herr_t closeId(hid_t id, Kind kind) {
  // Indexed by Kind (same order as the enum).
  static herr_t (*const kClose[])(hid_t) = {H5Fclose, H5Gclose, H5Dclose, H5Sclose,
                                            H5Tclose, H5Aclose, H5Pclose};
  return kClose[static_cast<int>(kind)](id);
}

// Innermost (first pushed) description on the default error stack; clears it.
std::string lastErrorText() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
        auto* s = static_cast<std::string*>(out);
        if (n == 0 && err->desc != nullptr) *s = err->desc;
        return 0;
      },
      &text);
  H5Eclear2(H5E_DEFAULT);
  if (text.empty()) return "no HDF5 error detail";
  // The POSIX driver's "file write failed: time = ..., filename = ..., errno = 28, error
  // message = 'No space left on device', buf = ..." (several lines): its first words and the
  // OS error are what a user needs; the caller names the file.
  const size_t m = text.find("error message = '");
  const size_t colon = text.find(": time = ");
  if (m != std::string::npos && colon != std::string::npos) {
    const size_t from = m + 17, to = text.find('\'', from);
    return text.substr(0, colon) + ": " + text.substr(from, to - from);
  }
  return text;
}

std::string nameOf(hid_t id, ssize_t (*get)(hid_t, char*, size_t)) {
  ssize_t n = get(id, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  get(id, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

H5Handle utf8StringType(size_t fixed_size, hid_t loc) {
  H5Handle t(check(H5Tcopy(H5T_C_S1), loc, "H5Tcopy"), Kind::kDatatype);
  checkStatus(H5Tset_size(t, fixed_size == 0 ? H5T_VARIABLE : fixed_size), loc, "H5Tset_size");
  checkStatus(H5Tset_cset(t, H5T_CSET_UTF8), loc, "H5Tset_cset");
  if (fixed_size != 0) checkStatus(H5Tset_strpad(t, H5T_STR_NULLPAD), loc, "H5Tset_strpad");
  return t;
}

H5Handle scalarSpace(hid_t loc) {
  return H5Handle(check(H5Screate(H5S_SCALAR), loc, "H5Screate"), Kind::kDataspace);
}

void writeAttr(hid_t obj, const std::string& name, hid_t type, const void* buf) {
  std::string what = "attribute '" + name + "'";
  if (hasAttr(obj, name)) checkStatus(H5Adelete(obj, name.c_str()), obj, "H5Adelete " + what);
  H5Handle space = scalarSpace(obj);
  H5Handle attr(check(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), obj,
                      "H5Acreate2 " + what),
                Kind::kAttribute);
  checkStatus(H5Awrite(attr, type, buf), obj, "H5Awrite " + what);
}

H5Handle openAttr(hid_t obj, const std::string& name) {
  return H5Handle(
      check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), obj, "H5Aopen attribute '" + name + "'"),
      Kind::kAttribute);
}

// Reads a scalar string from an attribute (is_attr) or a dataset, variable or fixed.
std::string readString(hid_t id, bool is_attr, hid_t loc, const std::string& what) {
  H5Handle ftype(check(is_attr ? H5Aget_type(id) : H5Dget_type(id), loc, "get type of " + what),
                 Kind::kDatatype);
  if (H5Tget_class(ftype) != H5T_STRING) {
    throw IoError("HDF5 " + what + " in " + describe(loc) + " is not a string");
  }
  htri_t is_var = check(H5Tis_variable_str(ftype), loc, "H5Tis_variable_str " + what);
  auto read = [&](hid_t mtype, void* buf) {
    checkStatus(
        is_attr ? H5Aread(id, mtype, buf) : H5Dread(id, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf),
        loc, "read " + what);
  };
  if (is_var > 0) {
    H5Handle mtype = utf8StringType(0, loc);
    checkStatus(H5Tset_cset(mtype, H5Tget_cset(ftype)), loc, "H5Tset_cset");
    char* p = nullptr;
    read(mtype, &p);
    std::string out = p != nullptr ? p : "";
    H5free_memory(p);
    return out;
  }
  size_t size = H5Tget_size(ftype);
  std::string out(size, '\0');
  read(ftype, out.data());
  size_t end = out.find('\0');
  if (end != std::string::npos) out.resize(end);
  if (H5Tget_strpad(ftype) == H5T_STR_SPACEPAD) out.erase(out.find_last_not_of(' ') + 1);
  return out;
}

// File access property list; locking off needs libhdf5 >= 1.10.7 (else ignored).
// The raw-data chunk cache of every dataset of the file holds 16 KiB (two of the /steps
// columns' 8 KiB chunks), not HDF5's default 1 MiB, and evicts fully written chunks first
// (w0 = 1): the appendable columns are written only at their last chunk, and with the default
// each column kept up to 128 of its completed chunks in memory, so a run's RSS grew by 8 KiB
// per column every 1024 steps (about 0.4 KB per step with 50 columns) for 131,072 steps.
// Larger chunks bypass the cache; whole-dataset reads do not use it.
H5Handle accessPlist(bool file_locking) {
  H5Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), -1, "H5Pcreate"), Kind::kPropList);
  checkStatus(H5Pset_cache(fapl, 0, 521, 16 * 1024, 1.0), -1, "H5Pset_cache");
#if H5_VERSION_GE(1, 10, 7)
  if (!file_locking) checkStatus(H5Pset_file_locking(fapl, false, true), -1, "H5Pset_file_locking");
#endif
  return fapl;
}

template <typename T>
std::vector<T> readAll(hid_t loc, const std::string& name, hid_t mem_type) {
  H5Handle dset = openDataset(loc, name);
  std::vector<T> out(datasetLength(dset));
  if (!out.empty()) {
    checkStatus(H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), loc,
                "H5Dread '" + name + "'");
  }
  return out;
}

void appendRaw(hid_t dset, hid_t mem_type, const void* values, size_t n) {
  if (n == 0) return;
  hsize_t old_len = datasetLength(dset);
  hsize_t new_len = old_len + n, count = n;
  checkStatus(H5Dset_extent(dset, &new_len), dset, "H5Dset_extent");
  H5Handle fspace(check(H5Dget_space(dset), dset, "H5Dget_space"), Kind::kDataspace);
  checkStatus(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &old_len, nullptr, &count, nullptr), dset,
              "H5Sselect_hyperslab");
  H5Handle mspace(check(H5Screate_simple(1, &count, nullptr), dset, "H5Screate_simple"),
                  Kind::kDataspace);
  checkStatus(H5Dwrite(dset, mem_type, mspace, fspace, H5P_DEFAULT, values), dset, "H5Dwrite");
}

}  // namespace

H5Handle::~H5Handle() {
  if (valid()) closeId(id_, kind_);
}

H5Handle::H5Handle(H5Handle&& other) noexcept : id_(other.id_), kind_(other.kind_) {
  other.id_ = H5I_INVALID_HID;
}

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    if (valid()) closeId(id_, kind_);
    id_ = other.id_;
    kind_ = other.kind_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void H5Handle::close() {
  if (!valid()) return;
  hid_t id = release();
  std::string where = describe(id);
  if (closeId(id, kind_) < 0)
    throw IoError("HDF5 close failed (" + where + "): " + lastErrorText());
}

hid_t H5Handle::release() {
  hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return id;
}

std::string describe(hid_t loc) {
  if (loc < 0 || H5Iis_valid(loc) <= 0) return "?";
  std::string file = nameOf(loc, H5Fget_name);
  H5I_type_t type = H5Iget_type(loc);
  bool named = type == H5I_GROUP || type == H5I_DATASET || type == H5I_DATATYPE;
  std::string out = named ? file + ":" + nameOf(loc, H5Iget_name) : file;
  H5Eclear2(H5E_DEFAULT);
  return out;
}

hid_t check(hid_t id, hid_t loc, const std::string& what) {
  if (id >= 0) return id;
  std::string detail = lastErrorText();  // before describe(): API calls clear the stack
  throw IoError("HDF5 " + what + " failed (" + describe(loc) + "): " + detail);
}

void checkStatus(herr_t status, hid_t loc, const std::string& what) {
  check(static_cast<hid_t>(status), loc, what);
}

void silenceErrorPrinting() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Before the library initialises (this is the first HDF5 call of every file opened
    // or created here): no shutdown at exit. After a failed H5Fclose (ENOSPC while it
    // flushed), libhdf5 1.10 keeps the file's id while freeing what it points to, and its
    // exit-time shutdown then crashed on it (SIGSEGV in H5F__close_cb, exit 139 instead
    // of the IoError's 4). Every handle here is closed by its owner and every write is
    // flushed by the call that makes it, so the shutdown has nothing left to write.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

H5Handle createFile(const std::string& path, bool file_locking) {
  silenceErrorPrinting();
  H5Handle fapl = accessPlist(file_locking);
  // 1.8+ object headers, B-trees and superblock carry checksums: corrupt metadata
  // (attributes, the chunk index) fails on read instead of returning garbage.
  checkStatus(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST), -1,
              "H5Pset_libver_bounds");
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (id < 0) throw IoError("HDF5 cannot create '" + path + "': " + lastErrorText());
  return H5Handle(id, Kind::kFile);
}

H5Handle openFile(const std::string& path, bool writable, bool file_locking) {
  silenceErrorPrinting();
  H5Handle fapl = accessPlist(file_locking);
  hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
  if (id < 0) throw IoError("HDF5 cannot open '" + path + "': " + lastErrorText());
  return H5Handle(id, Kind::kFile);
}

void flushFile(hid_t loc) { checkStatus(H5Fflush(loc, H5F_SCOPE_GLOBAL), loc, "H5Fflush"); }

void reserveSpace(hid_t file, uint64_t headroom) {
  void* handle = nullptr;
  checkStatus(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), file, "H5Fget_vfd_handle");
  const int fd = handle != nullptr ? *static_cast<int*>(handle) : -1;
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return;  // not the POSIX driver: nothing to reserve on
  if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, st.st_size + off_t(headroom)) == 0) return;
  const int err = errno;
  if (err == EOPNOTSUPP || err == ENOSYS) return;  // a file system without fallocate
  throw IoError("cannot reserve " + std::to_string(headroom >> 10) + " KiB beyond the " +
                std::to_string(st.st_size >> 10) + " KiB of '" + describe(file) +
                "' before writing to it: " + std::strerror(err) +
                " (nothing was written; the file holds what it held)");
}

H5Handle createGroup(hid_t loc, const std::string& name) {
  return H5Handle(check(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), loc,
                        "H5Gcreate2 '" + name + "'"),
                  Kind::kGroup);
}

H5Handle openGroup(hid_t loc, const std::string& name) {
  return H5Handle(check(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), loc, "H5Gopen2 '" + name + "'"),
                  Kind::kGroup);
}

H5Handle openDataset(hid_t loc, const std::string& name) {
  return H5Handle(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), loc, "H5Dopen2 '" + name + "'"),
                  Kind::kDataset);
}

bool exists(hid_t loc, const std::string& name) {
  return check(H5Lexists(loc, name.c_str(), H5P_DEFAULT), loc, "H5Lexists '" + name + "'") > 0;
}

std::vector<std::string> listMembers(hid_t group) {
  std::vector<std::string> names;
  checkStatus(H5Literate(
                  group, H5_INDEX_NAME, H5_ITER_INC, nullptr,
                  [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
                    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
                    return 0;
                  },
                  &names),
              group, "H5Literate");
  return names;
}

void writeAttrInt(hid_t obj, const std::string& name, int64_t value) {
  writeAttr(obj, name, H5T_NATIVE_INT64, &value);
}

void writeAttrDouble(hid_t obj, const std::string& name, double value) {
  writeAttr(obj, name, H5T_NATIVE_DOUBLE, &value);
}

void writeAttrString(hid_t obj, const std::string& name, const std::string& value,
                     bool fixed_length) {
  if (fixed_length) {
    H5Handle type = utf8StringType(value.empty() ? 1 : value.size(), obj);
    std::string padded = value.empty() ? std::string(1, '\0') : value;
    writeAttr(obj, name, type, padded.data());
  } else {
    H5Handle type = utf8StringType(0, obj);
    const char* p = value.c_str();
    writeAttr(obj, name, type, &p);
  }
}

void writeAttrInts(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  std::string what = "attribute '" + name + "'";
  if (hasAttr(obj, name)) checkStatus(H5Adelete(obj, name.c_str()), obj, "H5Adelete " + what);
  hsize_t n = values.size();
  H5Handle space(check(H5Screate_simple(1, &n, nullptr), obj, "H5Screate_simple " + what),
                 Kind::kDataspace);
  H5Handle attr(check(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                      obj, "H5Acreate2 " + what),
                Kind::kAttribute);
  if (n > 0) checkStatus(H5Awrite(attr, H5T_NATIVE_INT64, values.data()), obj, "H5Awrite " + what);
}

std::vector<int64_t> readAttrInts(hid_t obj, const std::string& name) {
  H5Handle attr = openAttr(obj, name);
  H5Handle space(check(H5Aget_space(attr), obj, "H5Aget_space " + name), Kind::kDataspace);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<int64_t> v(static_cast<size_t>(std::max<hssize_t>(n, 0)));
  if (!v.empty()) checkStatus(H5Aread(attr, H5T_NATIVE_INT64, v.data()), obj, "H5Aread " + name);
  return v;
}

bool hasAttr(hid_t obj, const std::string& name) {
  return check(H5Aexists(obj, name.c_str()), obj, "H5Aexists '" + name + "'") > 0;
}

AttrType attrType(hid_t obj, const std::string& name) {
  H5Handle attr = openAttr(obj, name);
  H5Handle type(check(H5Aget_type(attr), obj, "H5Aget_type '" + name + "'"), Kind::kDatatype);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return AttrType::kInt;
    case H5T_FLOAT:
      return AttrType::kFloat;
    case H5T_STRING:
      return AttrType::kString;
    default:
      return AttrType::kOther;
  }
}

int64_t attrElements(hid_t obj, const std::string& name) {
  H5Handle attr = openAttr(obj, name);
  H5Handle space(check(H5Aget_space(attr), obj, "H5Aget_space " + name), Kind::kDataspace);
  return static_cast<int64_t>(H5Sget_simple_extent_npoints(space));
}

namespace {
// A scalar read of an array attribute would write past the one value it is given.
void requireOneElement(hid_t obj, const std::string& name) {
  const int64_t n = attrElements(obj, name);
  if (n != 1)
    throw IoError("attribute '" + name + "' holds " + std::to_string(n) +
                  " elements, expected one");
}
}  // namespace

int64_t readAttrInt(hid_t obj, const std::string& name) {
  requireOneElement(obj, name);
  H5Handle attr = openAttr(obj, name);
  int64_t v = 0;
  checkStatus(H5Aread(attr, H5T_NATIVE_INT64, &v), obj, "H5Aread '" + name + "' as int64");
  return v;
}

double readAttrDouble(hid_t obj, const std::string& name) {
  requireOneElement(obj, name);
  H5Handle attr = openAttr(obj, name);
  double v = 0;
  checkStatus(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), obj, "H5Aread '" + name + "' as double");
  return v;
}

std::string readAttrString(hid_t obj, const std::string& name) {
  H5Handle attr = openAttr(obj, name);
  return readString(attr, true, obj, "attribute '" + name + "'");
}

std::vector<std::string> listAttrs(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  checkStatus(H5Aiterate2(
                  obj, H5_INDEX_NAME, H5_ITER_INC, &idx,
                  [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
                    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
                    return 0;
                  },
                  &names),
              obj, "H5Aiterate2");
  return names;
}

void writeStringDataset(hid_t loc, const std::string& name, const std::string& value) {
  H5Handle type = utf8StringType(0, loc);
  H5Handle space = scalarSpace(loc);
  H5Handle dset(
      check(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), loc,
            "H5Dcreate2 '" + name + "'"),
      Kind::kDataset);
  const char* p = value.c_str();
  checkStatus(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), loc,
              "H5Dwrite '" + name + "'");
}

std::string readStringDataset(hid_t loc, const std::string& name) {
  H5Handle dset = openDataset(loc, name);
  return readString(dset, false, loc, "dataset '" + name + "'");
}

H5Handle createAppendable(hid_t loc, const std::string& name, ElemType type, hsize_t chunk) {
  hsize_t dims = 0, maxdims = H5S_UNLIMITED;
  H5Handle space(check(H5Screate_simple(1, &dims, &maxdims), loc, "H5Screate_simple"),
                 Kind::kDataspace);
  H5Handle dcpl(check(H5Pcreate(H5P_DATASET_CREATE), loc, "H5Pcreate"), Kind::kPropList);
  checkStatus(H5Pset_chunk(dcpl, 1, &chunk), loc, "H5Pset_chunk");
  // Fletcher-32 per chunk: a corrupt chunk fails H5Dread ("data error detected by
  // fletcher32 checksum") instead of returning plausible numbers.
  checkStatus(H5Pset_fletcher32(dcpl), loc, "H5Pset_fletcher32");
  // Elements never written (a chunk whose write failed) read as NaN or -1, not as zeros.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t minus_one = -1;
  checkStatus(type == ElemType::kInt64 ? H5Pset_fill_value(dcpl, H5T_NATIVE_INT64, &minus_one)
                                       : H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan),
              loc, "H5Pset_fill_value");
  hid_t ftype = type == ElemType::kInt64 ? H5T_STD_I64LE : H5T_IEEE_F64LE;
  return H5Handle(check(H5Dcreate2(loc, name.c_str(), ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                        loc, "H5Dcreate2 '" + name + "'"),
                  Kind::kDataset);
}

void appendValues(hid_t dset, const double* values, size_t n) {
  appendRaw(dset, H5T_NATIVE_DOUBLE, values, n);
}

void appendValues(hid_t dset, const int64_t* values, size_t n) {
  appendRaw(dset, H5T_NATIVE_INT64, values, n);
}

hsize_t datasetLength(hid_t dset) {
  H5Handle space(check(H5Dget_space(dset), dset, "H5Dget_space"), Kind::kDataspace);
  int rank = static_cast<int>(check(H5Sget_simple_extent_ndims(space), dset, "get rank"));
  if (rank != 1) {
    throw IoError("HDF5 dataset " + describe(dset) + " has rank " + std::to_string(rank) +
                  ", expected 1");
  }
  hsize_t len = 0;
  checkStatus(H5Sget_simple_extent_dims(space, &len, nullptr), dset, "get extent");
  return len;
}

void truncateDataset(hid_t dset, hsize_t length) {
  checkStatus(H5Dset_extent(dset, &length), dset, "H5Dset_extent to " + std::to_string(length));
}

bool isIntDataset(hid_t dset) {
  H5Handle type(check(H5Dget_type(dset), dset, "H5Dget_type"), Kind::kDatatype);
  return H5Tget_class(type) == H5T_INTEGER;
}

std::vector<double> readDoubles(hid_t loc, const std::string& name) {
  return readAll<double>(loc, name, H5T_NATIVE_DOUBLE);
}

std::vector<int64_t> readInts(hid_t loc, const std::string& name) {
  return readAll<int64_t>(loc, name, H5T_NATIVE_INT64);
}

}  // namespace ftb::h5
