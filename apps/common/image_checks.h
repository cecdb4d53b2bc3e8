// What image_file.cpp checks in a file's bytes before stb_image sees them: the format its first
// bytes announce, and the JPEG and BMP structures that stb would mishandle.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ember::apps {

// "PNG", "JPEG" or "BMP" when the bytes start as one does, else nullptr.
const char* read_format(std::span<const std::uint8_t> bytes);

// The name of the format the bytes announce when it is one mnist_predict does not read but a user
// may have ("GIF", "PNM (Netpbm)", "WebP", ...), else nullptr.
const char* refused_format(std::span<const std::uint8_t> bytes);

// The width and height a PNG's IHDR chunk claims, read from the bytes alone; false when the file
// ends within it, its first chunk is not an IHDR, or a side is over PNG's limit of 2^31 - 1. stb
// refuses some large sizes itself (more than 2^30 bytes of decoded pixels: a 20000×20000 RGB PNG)
// as a corrupt header, before the pixel limit could name them; this lets the limit be checked first.
bool png_dimensions(std::span<const std::uint8_t> bytes, std::uint32_t& width, std::uint32_t& height);

// Throws FormatError naming the file for a JPEG whose markers do not reach its end-of-image marker
// (truncated: stb would invent the missing blocks) or that holds more scans than any encoder
// writes (each is a pass over the whole image).
void check_jpeg(std::span<const std::uint8_t> bytes, const std::string& name);

// Throws FormatError naming the file for an uncompressed BMP that ends before its pixel rows do
// (stb would read the missing rows as zeros). `height` is the number of rows.
void check_bmp(std::span<const std::uint8_t> bytes, const std::string& name, int width, int height);

}  // namespace ember::apps
