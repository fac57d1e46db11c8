// libFuzzer target: checkpoint manifests (common/checkpoint_manifest.h) as untrusted input.
//
// Input: the text of a manifest.json.
// Contract checked: parseManifest and checkManifestStructure either succeed or throw
// CheckpointError (anything else escapes and libFuzzer reports it; signed overflow in
// the layout or slice arithmetic is caught by UBSan); a manifest that passes both
// round-trips through manifestToJson to the same serialization and passes again. The
// step directory named does not exist, so the structure check touches no file.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ftb;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string dir = "/nonexistent-ftb-fuzz/step_00000004";
  try {
    Manifest m = parseManifest(text, "fuzz/manifest.json");
    checkManifestStructure(m, dir, "fuzz/manifest.json");
    const std::string once = manifestToJson(m);
    Manifest again = parseManifest(once, "fuzz/roundtrip.json");
    checkManifestStructure(again, dir, "fuzz/roundtrip.json");
    if (manifestToJson(again) != once) std::abort();  // serialization must round-trip
  } catch (const CheckpointError&) {
  }
  return 0;
}
