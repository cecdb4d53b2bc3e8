// libFuzzer target for the checkpoint loader: any byte string must give either a checkpoint or
// an ember::Error — never a crash, an out-of-bounds read (AddressSanitizer watches), undefined
// behaviour, or another exception type.
#include <cstddef>
#include <cstdint>

#include "core/io/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    ember::parse_safetensors({data, size}, "fuzz-input");
  } catch (const ember::Error&) {
    // Rejecting malformed input with ember's typed error is the expected outcome.
  }
  return 0;
}
