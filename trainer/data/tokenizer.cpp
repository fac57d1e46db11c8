#include "trainer/data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "common/error.h"
#include "common/files.h"
#include "trainer/data/tokenizer_json.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;

struct ShimApi {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int32_t (*info)(void*, int) = nullptr;
  int64_t (*encode)(void*, const char*, size_t, int32_t*, int64_t, char*, size_t) = nullptr;
  std::string path;
};

// Beside the running executable first (a relocated build), then where CMake built it.
std::vector<std::string> shimCandidates() {
  std::vector<std::string> out;
  if (const std::string dir = ownExecutableDir(); !dir.empty())
    out.push_back(dir + "/libftb_spm.so");
  out.push_back(FTB_SPM_SHIM_PATH);
  return out;
}

template <typename F>
void bind(void* lib, const char* name, F& fn, const std::string& path) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) throw IoError(path + ": no symbol " + name + " (stale build? rebuild)");
}

// Loaded once per process and never unloaded.
const ShimApi& shim() {
  static ShimApi api;
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__SANITIZE_ADDRESS__)
    throw IoError(
        "sentencepiece text datasets are not available in AddressSanitizer builds: "
        "ASan refuses dlopen(RTLD_DEEPBIND), which keeps sentencepiece's protobuf "
        "apart from libtorch's; use the release build");
#endif
    std::string tried;
    for (const std::string& p : shimCandidates()) {
      if (!fs::exists(p)) {
        tried += "\n  " + p + ": not found";
        continue;
      }
      // RTLD_LOCAL | RTLD_DEEPBIND: sentencepiece keeps its own protobuf (spm_shim.cpp).
      void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (lib == nullptr) {
        tried += "\n  " + p + ": " + dlerror();
        continue;
      }
      bind(lib, "ftb_spm_load", api.load, p);
      bind(lib, "ftb_spm_free", api.free, p);
      bind(lib, "ftb_spm_info", api.info, p);
      bind(lib, "ftb_spm_encode", api.encode, p);
      api.path = p;
      return;
    }
    throw IoError("cannot load the sentencepiece shim libftb_spm.so; tried:" + tried +
                  "\n  hint: build the ftb_spm target (scripts/build.sh) and install "
                  "libsentencepiece-dev (scripts/setup.sh)");
  });
  if (api.load == nullptr) throw IoError("the sentencepiece shim failed to load earlier");
  return api;
}

}  // namespace

std::string spmShimPath() { return shim().path; }

bool isTokenizerJson(const std::string& path) {
  if (fs::path(path).extension() == ".json") return true;
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c) && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
  }
  return in && c == '{';  // a sentencepiece model is a protobuf, never a JSON object
}

std::unique_ptr<TextTokenizer> loadTextTokenizer(const std::string& path, const std::string& key) {
  if (isTokenizerJson(path)) return TokenizerJson::load(path, key);
  return SpmTokenizer::load(path, key);
}

std::unique_ptr<SpmTokenizer> SpmTokenizer::load(const std::string& model_path,
                                                 const std::string& key) {
  if (!fs::is_regular_file(model_path))
    throw ConfigError(key, model_path, "sentencepiece model file not found",
                      "set data.tokenizer to a tokenizer.model, or model.from_pretrained to a "
                      "directory holding one");
  const ShimApi& api = shim();
  char err[512] = {0};
  void* h = api.load(model_path.c_str(), err, sizeof(err));
  if (h == nullptr)
    throw ConfigError(key, model_path, std::string("not a sentencepiece model: ") + err,
                      "point it at the tokenizer.model of a Llama/Mistral model directory");
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer());
  t->handle_ = h;
  t->path_ = model_path;
  t->pieces_ = api.info(h, 0);
  t->bos_ = api.info(h, 1);
  t->eos_ = api.info(h, 2);
  return t;
}

SpmTokenizer::~SpmTokenizer() {
  if (handle_ != nullptr) shim().free(handle_);
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text) const {
  const ShimApi& api = shim();
  char err[512] = {0};
  // Usually fewer ids than bytes + 2; retried once with the exact size otherwise.
  std::vector<int32_t> ids(text.size() + 2);
  for (int attempt = 0; attempt < 2; ++attempt) {
    int64_t n = api.encode(handle_, text.data(), text.size(), ids.data(),
                           static_cast<int64_t>(ids.size()), err, sizeof(err));
    if (n < 0) throw IoError(path_ + ": sentencepiece could not encode a text: " + err);
    const bool fits = n <= static_cast<int64_t>(ids.size());
    ids.resize(static_cast<size_t>(n));
    if (fits) return ids;
  }
  throw IoError(path_ + ": sentencepiece returned a different id count on a second call");
}

}  // namespace ftb
