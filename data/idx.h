// The IDX format of MNIST and Fashion-MNIST: a big-endian header (two zero bytes, a type code,
// the number of dimensions, one 32-bit size per dimension) followed by the payload, optionally
// gzip-compressed (detected by its magic bytes, not by the file name).
//
// Reading streams into one uint8 tensor of the header's shape: peak memory is about the payload.
// Every header field is checked before anything is allocated: the payload a header declares must
// fit what the file can hold (exactly, for a raw file; at most 1032× the compressed size, the
// largest ratio deflate reaches, for a gzip file), and inflating stops with an error as soon as
// the output passes the declared size.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/tensor/tensor.h"

namespace ember::data {

// Reads an IDX file of unsigned bytes (type code 0x08). Throws IoError for a missing or
// unreadable file and FormatError naming the file and the problem for a malformed one.
Tensor read_idx(const std::string& path);

// The same reader over bytes in memory (`name` is used in messages). The fuzz target uses this.
Tensor parse_idx(std::span<const std::uint8_t> bytes, const std::string& name);

// Writes a u8 tensor (at least one dimension) as IDX, gzip-compressed when asked. Atomic.
void write_idx(const std::string& path, const Tensor& tensor, bool gzip = false);

}  // namespace ember::data
