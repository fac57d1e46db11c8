// RAII over the HDF5 C API (serial libhdf5 1.10+) and the few helpers ftbench needs.
//
// Contract: every HDF5 call whose result is negative becomes ftb::IoError naming the
// file path, the object, what failed and the innermost HDF5 error description.
// HDF5's automatic error-stack printing, and its shutdown at exit, are switched off the
// first time any helper here opens or creates a file (silenceErrorPrinting() does it
// explicitly): a failed close on a full disk left libhdf5 1.10 a dangling id that its
// shutdown crashed on.
// Strings are UTF-8. h5py 3 returns `str` for variable-length string attributes (the
// default here) and numpy.bytes_ for fixed-length ones; string datasets are
// variable-length (h5py: `ds.asstr()[()]`).
// Not thread-safe (neither is serial libhdf5).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ftb::h5 {

// Which H5*close() releases a handle (hdf5.cpp indexes a table by it: append only).
enum class Kind { kFile, kGroup, kDataset, kDataspace, kDatatype, kAttribute, kPropList };

// Owns one hid_t. Move-only. Invariant: valid() <=> id_ >= 0 and this object must
// close it; a moved-from handle is invalid and its destructor does nothing.
class H5Handle {
 public:
  H5Handle() = default;
  // Takes ownership of `id` (REQUIRES: id >= 0, opened as `kind`).
  H5Handle(hid_t id, Kind kind) : id_(id), kind_(kind) {}
  ~H5Handle();  // closes; never throws (a failed close is ignored)
  H5Handle(H5Handle&& other) noexcept;
  H5Handle& operator=(H5Handle&& other) noexcept;  // closes the current id first
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }    // NOLINT: lets handles go straight to H5* calls
  explicit operator bool() const = delete;  // `if (h)` would be true for -1: use valid()
  bool valid() const { return id_ >= 0; }
  Kind kind() const { return kind_; }
  // Closes now; throws IoError if HDF5 reports a failure. No-op when invalid.
  void close();
  // Gives up ownership; the caller must close the returned id.
  hid_t release();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Kind kind_ = Kind::kFile;
};

// Returns `id` if >= 0, else throws IoError "HDF5 <what> failed (<file>:<object>): <hdf5 msg>".
// `loc` (any id inside the file, or H5I_INVALID_HID) only serves to name the file.
hid_t check(hid_t id, hid_t loc, const std::string& what);
void checkStatus(herr_t status, hid_t loc, const std::string& what);
// "<file path>:<object path>" of an open id, "?" parts when unknown.
std::string describe(hid_t loc);

// Once: H5dont_atexit() and H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr). REQUIRES: before
// any other HDF5 call of the process, for the first to take effect.
void silenceErrorPrinting();

// ---- Files and groups --------------------------------------------------------
// `file_locking` false: no flock(2) on the file, so other processes may open it while
// it is open here (HDF5's default takes an exclusive lock for writers and a shared one
// for readers; the env HDF5_USE_FILE_LOCKING overrides both).
// Truncates. Object headers, B-trees and the superblock use the 1.8+ formats, which
// carry checksums (readable by HDF5 >= 1.8 and h5py).
H5Handle createFile(const std::string& path, bool file_locking = true);
H5Handle openFile(const std::string& path, bool writable = false, bool file_locking = true);
// Writes every dirty buffer of the file containing `loc` to the OS (H5F_SCOPE_GLOBAL).
void flushFile(hid_t loc);
// Allocates disk blocks for `headroom` bytes past the end of the file (fallocate,
// FALLOC_FL_KEEP_SIZE: the size is unchanged), so that the writes that follow cannot
// fail half-done for want of space: on a full disk libhdf5 wrote part of its metadata
// and left the file unreadable. Throws IoError naming the file (ENOSPC, ...) before
// anything is written; a no-op where the file system has no fallocate.
void reserveSpace(hid_t file, uint64_t headroom);
H5Handle createGroup(hid_t loc, const std::string& name);
H5Handle openGroup(hid_t loc, const std::string& name);
H5Handle openDataset(hid_t loc, const std::string& name);
// True iff link `name` (one path component, or a path whose parents exist) exists.
bool exists(hid_t loc, const std::string& name);
// Names of the links in a group, in name order.
std::vector<std::string> listMembers(hid_t group);

// ---- Scalar attributes (an existing attribute of that name is replaced) ------
void writeAttrInt(hid_t obj, const std::string& name, int64_t value);
void writeAttrDouble(hid_t obj, const std::string& name, double value);
// Variable-length UTF-8 (h5py: str) unless `fixed_length`, then a fixed-size
// null-padded UTF-8 string of max(1, bytes) bytes (h5py: numpy.bytes_).
void writeAttrString(hid_t obj, const std::string& name, const std::string& value,
                     bool fixed_length = false);

// 1-D int64 array attribute (h5py: numpy int64 array); readAttrInts also accepts a
// scalar integer attribute (one element).
void writeAttrInts(hid_t obj, const std::string& name, const std::vector<int64_t>& values);
std::vector<int64_t> readAttrInts(hid_t obj, const std::string& name);

enum class AttrType { kInt, kFloat, kString, kOther };
bool hasAttr(hid_t obj, const std::string& name);
AttrType attrType(hid_t obj, const std::string& name);
// Number of elements of an attribute (1 for a scalar).
int64_t attrElements(hid_t obj, const std::string& name);
// Readers convert between integer and float classes; a string read of a
// non-string attribute (or vice versa) throws IoError. REQUIRES for readAttrInt and
// readAttrDouble: the attribute holds one element (else IoError, not a read past the value).
int64_t readAttrInt(hid_t obj, const std::string& name);
double readAttrDouble(hid_t obj, const std::string& name);
std::string readAttrString(hid_t obj, const std::string& name);  // variable or fixed
std::vector<std::string> listAttrs(hid_t obj);                   // name order

// ---- Datasets ----------------------------------------------------------------
// Scalar variable-length UTF-8 string dataset.
void writeStringDataset(hid_t loc, const std::string& name, const std::string& value);
std::string readStringDataset(hid_t loc, const std::string& name);

enum class ElemType { kFloat64, kInt64 };
// 1-D dataset of length 0, max length unlimited, chunked by `chunk` elements, each
// chunk with a Fletcher-32 checksum (H5Dread fails on a corrupt chunk). Elements never
// written (a chunk whose write failed on a full disk) read as NaN (float64) or -1 (int64).
H5Handle createAppendable(hid_t loc, const std::string& name, ElemType type, hsize_t chunk = 1024);
// Extends a 1-D dataset by n and writes values at its old end. The values are
// converted to the dataset's element type by HDF5.
void appendValues(hid_t dset, const double* values, size_t n);
void appendValues(hid_t dset, const int64_t* values, size_t n);
hsize_t datasetLength(hid_t dset);                 // REQUIRES: 1-D dataset
void truncateDataset(hid_t dset, hsize_t length);  // REQUIRES: 1-D chunked, length <= current
bool isIntDataset(hid_t dset);                     // H5T_INTEGER class
// Whole 1-D numeric dataset, converted to the requested type.
std::vector<double> readDoubles(hid_t loc, const std::string& name);
std::vector<int64_t> readInts(hid_t loc, const std::string& name);

}  // namespace ftb::h5
