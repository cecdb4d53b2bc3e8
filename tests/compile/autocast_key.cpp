// Built only by the autocast_key tests (tests/support/op_table.cmake), never linked: an op's
// autocast key is an OpKey, so a misspelt one does not compile (EMBER_KEY=lienar:
// autocast_key_misspelt, expected to fail), while the same file with the key spelt right does
// (autocast_key_spelt_right), so that the failure is the spelling's.
#include "core/ops/autocast.h"

namespace ember {

Tensor autocast_key_probe(const Tensor& input, const Tensor& weight) {
  if (const ext::AutocastInputs cast{OpKey::EMBER_KEY, {&input, &weight}}) return cast[0];
  return input;
}

}  // namespace ember
