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

// Throws FormatError naming the file for a JPEG whose markers do not reach its end-of-image marker
// (truncated: stb would invent the missing blocks) or that holds more scans than any encoder
// writes (each is a pass over the whole image).
void check_jpeg(std::span<const std::uint8_t> bytes, const std::string& name);

// Throws FormatError naming the file for an uncompressed BMP that ends before its pixel rows do
// (stb would read the missing rows as zeros). `height` is the number of rows.
void check_bmp(std::span<const std::uint8_t> bytes, const std::string& name, int width, int height);

}  // namespace ember::apps
