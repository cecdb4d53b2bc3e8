// safetensors checkpoints: round trips, atomic saves, and every malformed file rejected with a
// message naming the file and the problem.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/io/serialize.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> file_with_header(const std::string& header, std::size_t data_bytes,
                                           std::uint64_t claimed_length = UINT64_MAX) {
  const std::uint64_t len = claimed_length == UINT64_MAX ? header.size() : claimed_length;
  // Sized once and filled in place (GCC 12 warns falsely about vector::insert here).
  std::vector<std::uint8_t> bytes(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(len >> (8 * i));
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

std::string parse_error(const std::vector<std::uint8_t>& bytes) {
  return message_of<FormatError>([&] { parse_safetensors(bytes, "bad.safetensors"); });
}

}  // namespace

TEST_CASE("tensors of every dtype and their metadata survive a save and load") {
  const fs::path path = ember::testing::process_dir("serialize") / "all.safetensors";
  StateDict tensors{{"weights", from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f}, {2, 2})},
                    {"doubles", from_vector<double>({1e-300, 2.0}, {2})},
                    {"ints", from_vector<std::int32_t>({-7, 8, 9}, {3})},
                    {"longs", from_vector<std::int64_t>({1LL << 40}, {1})},
                    {"bytes", from_vector<std::uint8_t>({0, 255}, {2, 1, 1})},
                    {"empty", zeros({0, 3})},
                    {"scalar", scalar_tensor(4.0)}};
  save_safetensors(path.string(), tensors, {{"epoch", "7"}, {"note", "a \"quoted\" value"}});
  const Checkpoint loaded = load_safetensors(path.string());
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(loaded.tensors[i].first == tensors[i].first);  // saved order is kept
    const Tensor& a = loaded.tensors[i].second;
    const Tensor& b = tensors[i].second;
    CHECK(a.shape() == b.shape());
    CHECK(a.dtype() == b.dtype());
    if (b.nbytes() > 0) CHECK(std::memcmp(a.raw_bytes(), b.raw_bytes(), b.nbytes()) == 0);  // (memcmp of null is UB)
  }
  CHECK(loaded.metadata.at("epoch") == "7");
  CHECK(loaded.metadata.at("note") == "a \"quoted\" value");
  // The header is padded so the data starts 8-byte aligned, as the safetensors library does.
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  CHECK((8 + header_len) % 8 == 0);
}

TEST_CASE("a save replaces the old file atomically and leaves no temporary file") {
  const fs::path dir = ember::testing::process_dir("serialize") / "atomic";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "ckpt.safetensors";
  save_safetensors(path.string(), {{"a", ones({3})}});
  save_safetensors(path.string(), {{"a", zeros({5})}});
  CHECK(load_safetensors(path.string()).tensors[0].second.numel() == 5);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);
  // A save that fails leaves the previous checkpoint as it was.
  CHECK_THROWS_AS(save_safetensors(path.string(), {{"a", ones({1})}, {"a", ones({1})}}), ValueError);
  CHECK_THROWS_AS(save_safetensors((dir / "missing_folder" / "x.safetensors").string(), {{"a", ones({1})}}), IoError);
  CHECK(load_safetensors(path.string()).tensors[0].second.numel() == 5);
}

TEST_CASE("missing, empty and folder paths are I/O errors naming the path") {
  CHECK_THAT(message_of<IoError>([] { load_safetensors("/nonexistent/ckpt.safetensors"); }),
             Contains("/nonexistent/ckpt.safetensors: no such checkpoint file"));
  CHECK_THAT(message_of<IoError>([] { load_safetensors(ember::testing::process_dir("serialize").string()); }),
             Contains("is a folder"));
  const fs::path empty = ember::testing::process_dir("serialize") / "empty.safetensors";
  std::ofstream(empty).close();
  CHECK_THAT(message_of<FormatError>([&] { load_safetensors(empty.string()); }), Contains("the file is empty"));
}

TEST_CASE("malformed checkpoints are rejected with the problem named") {
  const std::string f32_2 = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  CHECK_THAT(parse_error({1, 2, 3}),
             Contains("bad.safetensors: not a valid safetensors checkpoint: the file is truncated"));
  CHECK_THAT(parse_error(file_with_header("{" + f32_2 + "}", 8, 1000)),
             Contains("the header claims 1000 bytes but only"));
  CHECK_THAT(parse_error(file_with_header("{}", 0, 1ULL << 40)), Contains("more than the 100 MB"));
  CHECK_THAT(parse_error(file_with_header("{\"t\": [1, 2", 0)), Contains("the header is not valid JSON"));
  CHECK_THAT(parse_error(file_with_header("[1, 2]", 0)), Contains("the header must be a JSON object"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1)),
             Contains("tensor 't' has an unknown dtype 'Q7'"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1)),
             Contains("has dtype F8_E4M3, which ember does not support (it reads F32 F64 I32 I64 U8 BF16 F16)"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8)),
             Contains("data_offsets [0, 16] are outside the data section of 8 bytes"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16)),
             Contains("has 8 bytes of data, but dtype F32 and shape [3] need 12"));
  CHECK_THAT(
      parse_error(file_with_header("{" + f32_2 + R"(,"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
      Contains("overlaps the data of another tensor"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
             Contains("the data section has a gap of 4 bytes before tensor 't'"));
  CHECK_THAT(parse_error(file_with_header("{" + f32_2 + "}", 12)), Contains("4 bytes that belong to no tensor"));
  CHECK_THAT(parse_error(file_with_header("{" + f32_2 + "," + f32_2 + "}", 8)),
             Contains("the tensor name 't' appears twice"));
  CHECK_THAT(parse_error(file_with_header(R"({"__metadata__":{"epoch":3}})", 0)), Contains("is not a string"));
  CHECK_THAT(parse_error(file_with_header(
                 R"({"t":{"dtype":"U8","shape":[4294967295,4294967295,4294967295],"data_offsets":[0,1]}})", 1)),
             Contains("needs more data than the 1-byte data section holds"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
             Contains("shape entries must be non-negative integers"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F32","shape":[2]}})", 8)),
             Contains("has no 'data_offsets'"));
  CHECK_THAT(parse_error(file_with_header(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
             Contains("are outside the data section"));
  // A valid file parses.
  CHECK(parse_safetensors(file_with_header("{" + f32_2 + "}", 8), "ok").tensors.size() == 1);
}
