// libFuzzer target for the IDX reader, raw and gzip: any byte string must give a tensor or an
// ember::Error — never a crash, an out-of-bounds access, or an allocation the file cannot back.
#include <cstddef>
#include <cstdint>

#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    ember::data::parse_idx({data, size}, "fuzz-input");
  } catch (const ember::Error&) {
    // Rejecting malformed input with ember's typed error is the expected outcome.
  }
  return 0;
}
