// Image files as hostile input: PNG, JPEG and BMP decode, other formats are refused by name, the
// claimed size is checked against the limit before decoding, and decompression bombs, truncated
// files and the inputs rebuilt from stb_image's reports (tests/fuzz/seeds/image) are refused.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "apps/common/image_file.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> seed(const std::string& name) {
  std::ifstream in(fs::path(EMBER_IMAGE_SEEDS) / name, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

apps::GrayImage decode(const std::vector<std::uint8_t>& bytes, std::int64_t max_pixels = apps::kDefaultMaxPixels) {
  return apps::decode_gray_image(bytes, "x", max_pixels);
}

std::string refusal(const std::string& name, std::int64_t max_pixels = apps::kDefaultMaxPixels) {
  return message_of<FormatError>([&] { apps::decode_gray_image(seed(name), name, max_pixels); });
}

}  // namespace

TEST_CASE("image files: PNG, JPEG and BMP in their variants decode; the same digit to the same pixels") {
  const apps::GrayImage png = decode(seed("png_gray8.png"));
  CHECK((png.width == 28 && png.height == 28));
  for (const char* same : {"png_gray16.png", "png_interlaced.png", "png_gray_alpha8.png"})
    CHECK(decode(seed(same)).pixels == png.pixels);
  for (const char* name : {"png_rgb8.png", "png_rgba8.png", "png_palette4.png", "jpeg_gray.jpg",
                           "jpeg_gray_progressive.jpg", "jpeg_gray_restart.jpg", "jpeg_color_420.jpg",
                           "jpeg_color_444.jpg", "jpeg_color_progressive.jpg", "jpeg_color_422_restart.jpg"}) {
    INFO(name);
    CHECK(decode(seed(name)).pixels.size() >= 28 * 28);
  }
  const apps::GrayImage bmp = decode(seed("bmp_gray8.bmp"));
  CHECK((bmp.width == 28 && bmp.height == 28));
  for (const char* same : {"bmp_rgb24.bmp", "bmp_top_down.bmp", "bmp_bitfields32.bmp"}) {
    INFO(same);
    CHECK(decode(seed(same)).pixels == bmp.pixels);
  }
  // stb reads an OS/2 BMP's palette short by four entries, so only its size is compared.
  CHECK(decode(seed("bmp_os2.bmp")).pixels.size() == bmp.pixels.size());
}

TEST_CASE("image files: other formats are refused by name, before any decoder sees them") {
  for (const char* gif : {"poc_gif_bomb_16384x16448.gif", "poc_stb2001_gif_buffers.gif",
                          "poc_stb1538_ghsl_2023_145.gif", "poc_stb1916_gif_two_back.gif"})
    CHECK_THAT(refusal(gif), Contains(std::string(gif) + " is a GIF image; mnist_predict reads PNG, JPEG and BMP"));
  const std::string pgm("P5\n2 2\n255\n\x00\xff\xff\x00", 15);
  CHECK_THAT(message_of<FormatError>([&] {
               decode({pgm.begin(), pgm.end()});
             }),
             Contains("x is a PNM (Netpbm) image; mnist_predict reads PNG, JPEG and BMP"));
  const std::string text = "hello, world";
  CHECK_THAT(message_of<FormatError>([&] {
               decode({text.begin(), text.end()});
             }),
             Contains("x: not an image mnist_predict reads (PNG, JPEG and BMP)"));
  CHECK_THAT(message_of<FormatError>([&] { decode({}); }), Contains("x: the file is empty"));
}

TEST_CASE("image files: the size the header claims is checked against the limit before decoding") {
  CHECK_THAT(refusal("poc_png_30000x30000.png"),
             Contains("poc_png_30000x30000.png: the PNG claims 30000×30000 pixels (900000000), more than the "
                      "limit of 16777216; refused before decoding"));
  // stb's header reader refuses a 20000×20000 RGB or palette PNG itself (over 2^30 bytes of pixels)
  // as a corrupt header; the size is read first, so the limit names it as it names 30000×30000.
  // (IHDR's CRC is left stale: neither stb nor the check reads it.)
  for (const int color_type : {2, 3}) {
    std::vector<std::uint8_t> big = seed("png_rgb8.png");
    const std::uint8_t side[4] = {0x00, 0x00, 0x4E, 0x20};  // 20000, big-endian
    std::copy(side, side + 4, big.begin() + 16);
    std::copy(side, side + 4, big.begin() + 20);
    big[25] = static_cast<std::uint8_t>(color_type);
    INFO("colour type " << color_type);
    CHECK_THAT(message_of<FormatError>([&] { decode(big); }),
               Contains("x: the PNG claims 20000×20000 pixels (400000000), more than the limit of 16777216; "
                        "refused before decoding"));
  }
  // The limit is inclusive, and it is the caller's.
  CHECK_THAT(refusal("png_gray8.png", 783), Contains("claims 28×28 pixels (784), more than the limit of 783"));
  CHECK(decode(seed("png_gray8.png"), 784).pixels.size() == 784);
  CHECK_THAT(refusal("jpeg_gray.jpg", 100), Contains("the JPEG claims 56×56 pixels"));
  CHECK_THAT(refusal("bmp_rgb24.bmp", 100), Contains("the BMP claims 28×28 pixels"));
}

TEST_CASE("image files: decompression bombs, truncated files and stb_image's reported inputs are refused") {
  // A 28×28 PNG whose data inflate to 3 MiB: the decoder's memory budget stops it.
  CHECK_THAT(refusal("poc_png_zlib_bomb.png"),
             Contains("decoding the 28×28 PNG would take more than 1 MiB, more than such an image needs: the file "
                      "is corrupt or a decompression bomb"));
  // stb fills what a truncated JPEG or BMP lacks with zeros; these are refused instead.
  for (const char* name :
       {"jpeg_gray_truncated_end.jpg", "jpeg_gray_truncated_half.jpg", "jpeg_color_progressive_truncated_end.jpg",
        "bmp_gray8_truncated_end.bmp", "bmp_rgb24_truncated_half.bmp", "poc_bmp_1x16777216.bmp"})
    CHECK_THAT(refusal(name), Contains(std::string(name) + ": the ") && Contains("the file is truncated"));
  CHECK_THAT(refusal("png_rgb8_truncated_half.png"), Contains("cannot read the image: corrupt PNG data"));
  CHECK_THAT(refusal("poc_jpeg_150_scans.jpg"), Contains("the JPEG holds 150 scans, more than any encoder writes"));
  CHECK_THAT(refusal("poc_stb1108_jpeg_dc_symbol.jpg"), Contains("cannot read the image: corrupt JPEG data"));
}

TEST_CASE("image files: a missing file, a folder, an empty file and an oversized one name the file") {
  const fs::path dir = fs::temp_directory_path() / ("ember_image_file_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "folder.png");
  const std::string missing = (dir / "missing.png").string(), folder = (dir / "folder.png").string();
  const std::string empty = (dir / "empty.png").string(), big = (dir / "big.png").string();
  std::ofstream(empty).close();
  std::vector<std::uint8_t> bytes = seed("png_gray8.png");
  bytes.resize((1 << 20) + 9);  // over the cap for a limit of one pixel: 8 bytes and 1 MiB
  std::ofstream(big, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  CHECK_THAT(message_of<IoError>([&] { apps::read_gray_image(missing); }), Contains(missing + ": no such file"));
  CHECK_THAT(message_of<IoError>([&] { apps::read_gray_image(folder); }), Contains(folder + ": is a folder"));
  CHECK_THAT(message_of<IoError>([&] { apps::read_gray_image(empty); }), Contains(empty + ": the file is empty"));
  CHECK_THAT(message_of<IoError>([&] { apps::read_gray_image(big, 1); }),
             Contains(big + ": the file is larger than 1048584 bytes"));
  CHECK(apps::read_gray_image(big, 784).width == 28);  // the same file under the default cap
  fs::remove_all(dir);
}
