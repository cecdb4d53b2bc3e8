// libFuzzer target for mnist_predict's image path, from the file's bytes to the 28×28 sample: any
// byte string must give a sample or an ember::Error — never a crash, an out-of-bounds access
// (AddressSanitizer watches stb_image as well), undefined behaviour, another exception type, or an
// allocation past libFuzzer's limit.
#include <cstddef>
#include <cstdint>

#include "apps/common/image_file.h"
#include "apps/common/images.h"
#include "base/error.h"

namespace {

// Below mnist_predict's 4096×4096: the checks are the same at any limit, and an input that claims
// millions of pixels would spend the fuzzer's time decoding instead of exploring.
constexpr std::int64_t kMaxPixels = 512 * 512;

// Each of the three ways a photo is prepared, chosen by the input's length.
constexpr const char* kPreparations[] = {"digit", "article", "plain"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const ember::apps::GrayImage image = ember::apps::decode_gray_image({data, size}, "fuzz-input", kMaxPixels);
    ember::apps::prepare_image(image, kPreparations[size % 3], 28, 28);
  } catch (const ember::Error&) {
    // Refusing a malformed, hostile or blank image with ember's typed error is the expected outcome.
  }
  return 0;
}
