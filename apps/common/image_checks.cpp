// Reading just enough of a file's structure to refuse what stb_image would decode wrongly or
// unsafely; everything else about the format is stb's to check.
#include "apps/common/image_checks.h"

#include <array>
#include <cctype>
#include <cstring>
#include <string_view>
#include <utility>

#include "base/error.h"

namespace ember::apps {
namespace {

// Progressive JPEG decoding passes over the whole image once per scan, so a small file of many
// scans is a bomb of time; encoders write at most a few dozen (libjpeg's progressive script: 10).
constexpr int kMaxJpegScans = 100;

bool starts_with(std::span<const std::uint8_t> bytes, std::string_view magic) {
  return bytes.size() >= magic.size() && std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
}

// A byte of the file, or 0 past its end (as stb reads it).
std::uint8_t at(std::span<const std::uint8_t> b, std::size_t i) { return i < b.size() ? b[i] : 0; }

std::uint32_t be32(std::span<const std::uint8_t> b, std::size_t i) {
  return static_cast<std::uint32_t>(at(b, i)) << 24 | static_cast<std::uint32_t>(at(b, i + 1)) << 16 |
         static_cast<std::uint32_t>(at(b, i + 2)) << 8 | static_cast<std::uint32_t>(at(b, i + 3));
}

std::uint32_t le32(std::span<const std::uint8_t> b, std::size_t i) {
  return static_cast<std::uint32_t>(at(b, i)) | static_cast<std::uint32_t>(at(b, i + 1)) << 8 |
         static_cast<std::uint32_t>(at(b, i + 2)) << 16 | static_cast<std::uint32_t>(at(b, i + 3)) << 24;
}

// What the markers of a JPEG say, walked from the start-of-image marker as stb walks them (a file
// that stb would read differently, with bytes between segments, is incomplete here).
struct JpegMarkers {
  int scans = 0;
  bool complete = false;  // reaches the end-of-image marker
};

JpegMarkers walk_jpeg(std::span<const std::uint8_t> b) {
  JpegMarkers found;
  std::size_t i = 2;
  while (i + 2 <= b.size()) {
    if (b[i] != 0xFF) return found;
    const std::uint8_t m = b[i + 1];
    if (m == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (m == 0xD9) {
      found.complete = true;
      return found;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // markers without a length
      i += 2;
      continue;
    }
    if (i + 4 > b.size()) return found;
    i += 2 + (static_cast<std::size_t>(b[i + 2]) << 8 | b[i + 3]);
    if (m != 0xDA) continue;
    ++found.scans;
    // A scan's entropy-coded data end at the first marker other than a stuffed zero or a restart.
    while (i + 1 < b.size() && !(b[i] == 0xFF && b[i + 1] != 0 && (b[i + 1] < 0xD0 || b[i + 1] > 0xD7))) ++i;
  }
  return found;
}

}  // namespace

const char* read_format(std::span<const std::uint8_t> bytes) {
  if (starts_with(bytes, "\x89PNG\r\n\x1A\n")) return "PNG";
  if (starts_with(bytes, "\xFF\xD8")) return "JPEG";
  if (starts_with(bytes, "BM")) return "BMP";
  return nullptr;
}

const char* refused_format(std::span<const std::uint8_t> bytes) {
  using namespace std::string_view_literals;
  static constexpr std::array<std::pair<std::string_view, const char*>, 9> kKnown{{
      {"GIF87a"sv, "GIF"},
      {"GIF89a"sv, "GIF"},
      {"8BPS"sv, "PSD (Photoshop)"},
      {"#?RADIANCE"sv, "HDR (Radiance)"},
      {"#?RGBE"sv, "HDR (Radiance)"},
      {"\x53\x80\xF6\x34"sv, "PIC (Softimage)"},
      {"II*\0"sv, "TIFF"},
      {"MM\0*"sv, "TIFF"},
      {"\0\0\0\x0CjP  "sv, "JPEG 2000"},
  }};
  for (const auto& [magic, format] : kKnown)
    if (starts_with(bytes, magic)) return format;
  if (bytes.size() >= 12 && starts_with(bytes, "RIFF") && starts_with(bytes.subspan(8), "WEBP")) return "WebP";
  if (bytes.size() >= 12 && starts_with(bytes.subspan(4), "ftyp")) return "HEIC or AVIF";
  // Netpbm: P1 to P7 and a blank.
  if (bytes.size() >= 3 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '7' && std::isspace(bytes[2]))
    return "PNM (Netpbm)";
  return nullptr;
}

bool png_dimensions(std::span<const std::uint8_t> bytes, std::uint32_t& width, std::uint32_t& height) {
  // The 8-byte signature, then the first chunk: its length (13 for IHDR), "IHDR", and 13 bytes that
  // start with the width and the height. A truncated chunk, or a side over PNG's 2^31 - 1, is left
  // for stb to call corrupt.
  constexpr std::uint32_t kMaxSide = 0x7FFFFFFF;
  if (bytes.size() < 8 + 8 + 13 || !starts_with(bytes, "\x89PNG\r\n\x1A\n") || be32(bytes, 8) != 13 ||
      !starts_with(bytes.subspan(12), "IHDR") || be32(bytes, 16) > kMaxSide || be32(bytes, 20) > kMaxSide)
    return false;
  width = be32(bytes, 16);
  height = be32(bytes, 20);
  return true;
}

void check_jpeg(std::span<const std::uint8_t> bytes, const std::string& name) {
  const JpegMarkers jpeg = walk_jpeg(bytes);
  if (jpeg.scans > kMaxJpegScans)
    throw FormatError(detail::concat(name, ": the JPEG holds ", jpeg.scans, " scans, more than any encoder writes (",
                                     kMaxJpegScans, " at most here): each costs a pass over the whole image"));
  if (!jpeg.complete)
    throw FormatError(detail::concat(name, ": the JPEG ends before its end-of-image marker: the file is truncated"));
}

void check_bmp(std::span<const std::uint8_t> bytes, const std::string& name, int width, int height) {
  const std::uint32_t header = le32(bytes, 14);
  const std::uint32_t bits = header == 12 ? (at(bytes, 24) | at(bytes, 25) << 8) : (at(bytes, 28) | at(bytes, 29) << 8);
  const std::uint32_t compression = header == 12 ? 0 : le32(bytes, 30);
  if (compression != 0 && compression != 3) return;  // stb reads only plain and bit-field BMPs
  const std::uint64_t row = (static_cast<std::uint64_t>(width) * bits + 31) / 32 * 4;
  const std::uint64_t end = le32(bytes, 10) + row * static_cast<std::uint64_t>(height);
  if (end > bytes.size())
    throw FormatError(detail::concat(name, ": the BMP's pixels end at byte ", end, " but the file has ", bytes.size(),
                                     ": the file is truncated"));
}

}  // namespace ember::apps
