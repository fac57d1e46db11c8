// libftb_spm.so: a C interface to libsentencepiece, loaded by trainer/data/tokenizer.cpp
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why a separate object: Debian's libsentencepiece.so carries its own copy of
// protobuf-lite and exports its google::protobuf symbols (1,600 of them), while
// libtorch links libprotobuf.so.32. Linked into the trainer, the two copies interpose
// each other's symbols and the process crashes at start. Loaded RTLD_LOCAL the
// library stays out of the global scope, and RTLD_DEEPBIND makes it resolve its
// own symbols first, so each side keeps its own protobuf.
//
// Contract: no C++ object or heap block crosses this interface. Errors are copied into
// the caller's buffer; ids are written into the caller's array.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

void copyError(const std::string& msg, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, msg.c_str(), err_len - 1);
  err[err_len - 1] = '\0';
}

}  // namespace

extern "C" {

// Returns a handle, or null with the reason in `err`.
__attribute__((visibility("default"))) void* ftb_spm_load(const char* path, char* err,
                                                          size_t err_len) {
  try {
    auto* sp = new sentencepiece::SentencePieceProcessor();
    auto st = sp->Load(path);
    if (!st.ok()) {
      copyError(st.ToString(), err, err_len);
      delete sp;
      return nullptr;
    }
    return sp;
  } catch (const std::exception& e) {
    copyError(e.what(), err, err_len);
    return nullptr;
  }
}

__attribute__((visibility("default"))) void ftb_spm_free(void* h) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

// what: 0 piece count, 1 bos id, 2 eos id, 3 unk id, 4 pad id (-1 when undefined).
__attribute__((visibility("default"))) int32_t ftb_spm_info(void* h, int what) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  switch (what) {
    case 0:
      return sp->GetPieceSize();
    case 1:
      return sp->bos_id();
    case 2:
      return sp->eos_id();
    case 3:
      return sp->unk_id();
    case 4:
      return sp->pad_id();
    default:
      return -1;
  }
}

// Encodes text[0, len) into ids. Returns the number of ids (written to out only when
// it is <= cap: call again with a larger array otherwise), or -1 with `err` set.
__attribute__((visibility("default"))) int64_t ftb_spm_encode(void* h, const char* text, size_t len,
                                                              int32_t* out, int64_t cap, char* err,
                                                              size_t err_len) {
  try {
    auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
    std::vector<int> ids;
    auto st = sp->Encode(std::string_view(text, len), &ids);
    if (!st.ok()) {
      copyError(st.ToString(), err, err_len);
      return -1;
    }
    const auto n = static_cast<int64_t>(ids.size());
    if (n <= cap)
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(ids[size_t(i)]);
    return n;
  } catch (const std::exception& e) {
    copyError(e.what(), err, err_len);
    return -1;
  }
}

}  // extern "C"
