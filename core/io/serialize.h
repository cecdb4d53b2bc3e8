// Checkpoints in the safetensors format: an 8-byte little-endian header length, a JSON header
// giving each tensor's dtype, shape and data_offsets (plus "__metadata__", string values only),
// then the raw little-endian data. A PyTorch user opens ember's files with the `safetensors`
// package (or a few lines of Python), and ember opens a PyTorch state_dict saved that way.
//
// Saving is atomic and durable (io::write_file_atomically: a temporary file in the same folder,
// fsync, rename over the old file, fsync of the folder) — a crash mid-save never destroys the
// previous file.
// Loading treats the file as untrusted input: every header field is checked against the file's
// real size before anything is allocated, and each problem is a FormatError naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/io/durable_file.h"
#include "core/tensor/tensor.h"

namespace ember {

// Named tensors in order, like PyTorch's state_dict (an OrderedDict).
using StateDict = std::vector<std::pair<std::string, Tensor>>;
const Tensor* find_tensor(const StateDict& dict, const std::string& name);

struct Checkpoint {
  StateDict tensors;
  std::map<std::string, std::string> metadata;  // safetensors' "__metadata__"
};

// Writes the tensors (copied to the host as needed) and metadata to `path` atomically.
// Throws IoError naming the path when it cannot be written.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The bytes of that file, for callers that hash or combine them before writing.
std::vector<std::uint8_t> encode_safetensors(const StateDict& tensors,
                                             const std::map<std::string, std::string>& metadata = {});

// Reads a checkpoint and puts every tensor on `map_location`, whatever device it was saved from.
Checkpoint load_safetensors(const std::string& path, Device map_location = Device::cpu());

// The same parser over bytes in memory (`name` is used in messages). The fuzz target uses this.
Checkpoint parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& name,
                             Device map_location = Device::cpu());

using io::write_file_atomically;

}  // namespace ember
