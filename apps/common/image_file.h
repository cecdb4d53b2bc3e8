// Reading the image files mnist_predict classifies, as hostile input: PNG, JPEG and BMP only; the
// size a file claims is checked before any pixel is decoded, and the decoder's memory is held to
// what that size needs, so a small file cannot make the program allocate gigabytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "apps/common/images.h"

namespace ember::apps {

// 4096×4096: more than any photo of a digit needs, and a bound on what one image costs: the file
// (at most 8 bytes a pixel and 1 MiB: 129 MiB), then a decoder held to twice the file, 32 bytes a
// pixel (512 MiB) and 1 MiB.
inline constexpr std::int64_t kDefaultMaxPixels = 4096LL * 4096;

// The formats read, for --help and for the messages that refuse the others.
inline constexpr const char* kImageFormats = "PNG, JPEG and BMP";

// Decodes the bytes of a PNG, JPEG or BMP file as grayscale; `name` is the file's name for the
// messages. Throws FormatError naming the file when the bytes are another format (named when it is
// a known one: "x.gif is a GIF image ..."), when the header claims more than `max_pixels` pixels
// (before decoding), when a JPEG holds more scans than any encoder writes or a file ends before its
// pixel data does, when decoding would need more memory than the claimed size justifies (a
// decompression bomb), and when the data are corrupt.
GrayImage decode_gray_image(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels);

// Reads the file (at most what an image of `max_pixels` pixels can need) and decodes it. Throws
// IoError naming the file when it is missing, a folder, empty, unreadable or larger than that,
// and decode_gray_image's FormatErrors.
GrayImage read_gray_image(const std::string& path, std::int64_t max_pixels = kDefaultMaxPixels);

}  // namespace ember::apps
