// SentencePiece tokenizer, through libftb_spm.so (trainer/data/spm_shim.cpp says why
// libsentencepiece is not linked into the trainer).
//
// Contract: encode() returns exactly the ids of sentencepiece's own Encode() (what
// `spm_encode --output_format=id` prints for a one-line text), without BOS/EOS. Errors
// are ConfigError naming `key` and the model file (exit 2); a missing or unloadable
// shim is an IoError naming every path tried.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ftb {

class SpmTokenizer {
 public:
  // REQUIRES: `key` is the config key that named `model_path` (for messages).
  static std::unique_ptr<SpmTokenizer> load(const std::string& model_path, const std::string& key);
  ~SpmTokenizer();
  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const;
  int32_t pieces() const { return pieces_; }  // vocabulary size of the model
  int32_t bos() const { return bos_; }        // -1 when the model has none
  int32_t eos() const { return eos_; }

 private:
  SpmTokenizer() = default;
  void* handle_ = nullptr;
  std::string path_;
  int32_t pieces_ = 0, bos_ = -1, eos_ = -1;
};

// Path of libftb_spm.so this process loads (for messages and tests).
std::string spmShimPath();

}  // namespace ftb
