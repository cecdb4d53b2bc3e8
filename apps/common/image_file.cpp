// stb_image behind checks of its own: the formats a digit classifier needs, the claimed size before
// the pixels, a memory budget for the decoder, and the truncations stb would fill with zeros.
#include "apps/common/image_file.h"

#include "apps/common/image_checks.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>

#include "base/error.h"

namespace ember::apps {
namespace {

// The decoder's allocations go through a budget: a file's header may claim 28×28 pixels while its
// compressed stream inflates without end (stb grows its buffers until 4 GiB), or a 1-pixel-wide
// JPEG may be padded to whole blocks. An allocation over the budget fails, and stb reports it.
struct Budget {
  std::size_t limit = SIZE_MAX, used = 0;
  bool refused = false;
};
thread_local Budget t_budget;

// Sets the budget for one call into stb; the budget ends with the scope, even when stb's caller
// throws.
class BudgetScope {
 public:
  explicit BudgetScope(std::size_t limit) { t_budget = Budget{limit, 0, false}; }
  ~BudgetScope() { t_budget = Budget{}; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;
  bool refused() const { return t_budget.refused; }
};

// Each block carries its size in front (16 bytes keep malloc's alignment), for realloc and free.
constexpr std::size_t kHeader = 16;

void* budget_malloc(std::size_t n) {
  if (n > t_budget.limit - std::min(t_budget.used, t_budget.limit) || n > SIZE_MAX - kHeader) {
    t_budget.refused = true;
    return nullptr;
  }
  auto* block = static_cast<unsigned char*>(std::malloc(n + kHeader));
  if (!block) return nullptr;
  std::memcpy(block, &n, sizeof n);
  t_budget.used += n;
  return block + kHeader;
}

void budget_free(void* p) {
  if (!p) return;
  unsigned char* block = static_cast<unsigned char*>(p) - kHeader;
  std::size_t n = 0;
  std::memcpy(&n, block, sizeof n);
  t_budget.used -= std::min(n, t_budget.used);
  std::free(block);
}

void* budget_realloc(void* p, std::size_t n) {
  if (!p) return budget_malloc(n);
  void* q = budget_malloc(n);
  if (!q) return nullptr;  // p stays valid, as realloc leaves it
  std::size_t old = 0;
  std::memcpy(&old, static_cast<unsigned char*>(p) - kHeader, sizeof old);
  std::memcpy(q, p, std::min(old, n));
  budget_free(p);
  return q;
}

}  // namespace
}  // namespace ember::apps

// Only the formats a user of a digit classifier has: stb's GIF, PSD, HDR, PIC, PNM and TGA readers
// are where its open memory-safety reports are, and are not compiled at all.
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO  // files are read here, within a size bound
#define STBI_NO_LINEAR
#define STBI_MALLOC(n) ::ember::apps::budget_malloc(n)
#define STBI_REALLOC(p, n) ::ember::apps::budget_realloc(p, n)
#define STBI_FREE(p) ::ember::apps::budget_free(p)
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
// GCC 12 finds v2.30's invalid_chunk set but unused. v2.30, not Debian's v2.27: third_party/README.md.
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#include "third_party/stb/stb_image.h"
#pragma GCC diagnostic pop

namespace ember::apps {
namespace {

// stb's reason for its last failure, as " (reason)". Each call into stb starts with none (stb has no
// call that clears it), and the "Not a PNG" its format probe leaves when another format's decoder
// then fails without a reason of its own is dropped: the format was checked here first.
std::string why_not() {
  const char* reason = stbi_failure_reason();
  if (!reason || !*reason || std::string_view(reason).starts_with("Not a")) return "";
  return detail::concat(" (", reason, ")");
}

}  // namespace

GrayImage decode_gray_image(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels) {
  if (bytes.empty()) throw FormatError(detail::concat(name, ": the file is empty (0 bytes), not an image"));
  if (const char* other = refused_format(bytes))
    throw FormatError(detail::concat(name, " is a ", other, " image; mnist_predict reads ", kImageFormats,
                                     ": convert it to PNG first"));
  const char* format = read_format(bytes);
  if (!format)
    throw FormatError(detail::concat(name, ": not an image mnist_predict reads (", kImageFormats,
                                     "): its first bytes are those of none of them"));
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))  // stb's lengths are ints
    throw FormatError(detail::concat(name, ": the file is larger than 2 GiB"));
  const int len = static_cast<int>(bytes.size());
  if (std::string_view(format) == "JPEG") check_jpeg(bytes, name);
  auto refuse_size = [&](std::uint64_t w, std::uint64_t h) {
    throw FormatError(detail::concat(name, ": the ", format, " claims ", w, "×", h, " pixels (", w * h,
                                     "), more than the limit of ", max_pixels,
                                     "; refused before decoding (shrink it, or raise the limit with --max-pixels)"));
  };
  // A PNG's size is read here first: stb's header reader calls some sizes under its own limits a
  // corrupt header (see png_dimensions).
  std::uint32_t png_w = 0, png_h = 0;
  if (std::string_view(format) == "PNG" && png_dimensions(bytes, png_w, png_h) &&
      std::uint64_t{png_w} * png_h > static_cast<std::uint64_t>(std::max<std::int64_t>(max_pixels, 0)))
    refuse_size(png_w, png_h);

  // The dimensions, from the header alone (stb's header readers allocate a few KiB).
  int w = 0, h = 0, channels = 0;
  {
    BudgetScope scope(std::size_t{1} << 20);
    stbi__g_failure_reason = nullptr;
    if (!stbi_info_from_memory(bytes.data(), len, &w, &h, &channels))
      throw FormatError(detail::concat(name, ": cannot read the image: corrupt ", format, " header", why_not()));
  }
  // stb gives a top-down BMP's height as it is stored, negative.
  if (std::string_view(format) == "BMP" && h < 0 && h != INT_MIN) h = -h;
  const std::int64_t pixels = static_cast<std::int64_t>(w) * h;
  if (w <= 0 || h <= 0) throw FormatError(detail::concat(name, ": the image is empty (", w, "×", h, " pixels)"));
  if (pixels > max_pixels) refuse_size(w, h);
  if (std::string_view(format) == "BMP") check_bmp(bytes, name, w, h);

  // PNG keeps its compressed stream (its buffer up to twice the file) and at most 17 bytes a pixel
  // (16-bit RGBA and its 8-bit copy); JPEG 3 bytes a pixel and component; 1 MiB for the tables.
  const std::size_t limit = 2 * bytes.size() + 32 * static_cast<std::size_t>(pixels) + (std::size_t{1} << 20);
  int dw = 0, dh = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> data(nullptr, stbi_image_free);
  {
    BudgetScope scope(limit);
    stbi__g_failure_reason = nullptr;
    data.reset(stbi_load_from_memory(bytes.data(), len, &dw, &dh, &channels, 1));
    if (!data && scope.refused())
      throw FormatError(detail::concat(name, ": decoding the ", w, "×", h, " ", format, " would take more than ",
                                       limit >> 20, " MiB, more than such an image needs: the file is corrupt or ",
                                       "a decompression bomb"));
  }
  if (!data) throw FormatError(detail::concat(name, ": cannot read the image: corrupt ", format, " data", why_not()));
  // The decoder read the header again; what it found must be what was checked.
  if (dw != w || dh != h)
    throw FormatError(
        detail::concat(name, ": the ", format, " header says ", w, "×", h, " pixels but decodes to ", dw, "×", dh));
  return GrayImage{w, h, std::vector<std::uint8_t>(data.get(), data.get() + static_cast<std::size_t>(w) * h)};
}

GrayImage read_gray_image(const std::string& path, std::int64_t max_pixels) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw IoError(detail::concat(path, ": no such file"));
  if (fs::is_directory(status)) throw IoError(detail::concat(path, ": is a folder, not an image file"));
  // No PNG, JPEG or BMP of at most max_pixels pixels needs more than 8 bytes a pixel (16-bit RGBA
  // stored uncompressed) and 1 MiB of metadata; a larger file is read no further.
  const std::uint64_t cap = std::min<std::uint64_t>(
      static_cast<std::uint64_t>(std::clamp<std::int64_t>(max_pixels, 0, INT_MAX)) * 8 + (1u << 20), INT_MAX);
  auto too_large = [&] {
    return IoError(detail::concat(path, ": the file is larger than ", cap, " bytes, more than any ", kImageFormats,
                                  " image of at most ", max_pixels,
                                  " pixels needs (raise the limit with --max-pixels)"));
  };
  if (fs::is_regular_file(status) && fs::file_size(path, ec) > cap && !ec) throw too_large();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(detail::concat(path, ": cannot open for reading: ", std::strerror(errno)));
  std::vector<std::uint8_t> bytes;
  std::array<char, 1 << 16> chunk;
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + in.gcount());
    if (bytes.size() > cap) throw too_large();  // a device or a pipe, whose size was not known
  }
  if (in.bad()) throw IoError(detail::concat(path, ": cannot read: ", std::strerror(errno)));
  if (bytes.empty()) throw IoError(detail::concat(path, ": the file is empty (0 bytes), not an image"));
  return decode_gray_image(bytes, path, max_pixels);
}

}  // namespace ember::apps
