// Fuzzes the YAML readers of pgq's own files: the first byte picks the reader (profile,
// recipe, hardware model, policy), the rest is the file. A parsed file or a pgq::Error
// is fine; a crash, a sanitizer report, an uncaught YAML exception or an internal
// assertion is a bug.
#include <cstdint>
#include <string>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/profile.h"
#include "plan/recipe.h"
#include "support/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: pgq::parseProfile(text, "fuzz.yaml"); break;
      case 1: pgq::parseRecipe(text, "fuzz.yaml"); break;
      case 2: pgq::parseHardwareModel(text, "fuzz.yaml"); break;
      default: pgq::parsePolicy(text, "fuzz.yaml"); break;
    }
  } catch (const pgq::Error&) {
    // refused with a message naming the field: fine
  }
  return 0;
}
