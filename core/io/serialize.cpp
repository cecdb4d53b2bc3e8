// safetensors reading and writing, and atomic file replacement.
#include "core/io/serialize.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"

namespace ember {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; ember reads and writes it as raw host memory");

namespace {

using json = nlohmann::json;

// safetensors' own reader refuses headers above 100 MB; so does ember, before allocating them.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

const char* safetensors_dtype(DType d) {
  switch (d) {
#define EMBER_SAFETENSORS_NAME(name, type, floating, safetensors, ...) \
  case DType::name:                                                    \
    return #safetensors;
    EMBER_FORALL_DTYPES(EMBER_SAFETENSORS_NAME)
#undef EMBER_SAFETENSORS_NAME
  }
  return "?";
}

[[noreturn]] void bad(const std::string& name, const std::string& problem) {
  throw FormatError(detail::concat(name, ": not a valid safetensors checkpoint: ", problem));
}

DType parse_dtype_field(const std::string& file, const std::string& tensor, const json& value) {
  if (!value.is_string()) bad(file, detail::concat("tensor '", tensor, "': dtype must be a string"));
  const std::string s = value.get<std::string>();
#define EMBER_SAFETENSORS_PARSE(name, type, floating, safetensors, ...) \
  if (s == #safetensors) return DType::name;
  EMBER_FORALL_DTYPES(EMBER_SAFETENSORS_PARSE)
#undef EMBER_SAFETENSORS_PARSE
  static const std::set<std::string> known{"BOOL", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "C64"};
  std::string readable;
#define EMBER_SAFETENSORS_LIST(name, type, floating, safetensors, ...) readable += std::string(" ") + #safetensors;
  EMBER_FORALL_DTYPES(EMBER_SAFETENSORS_LIST)
#undef EMBER_SAFETENSORS_LIST
  if (known.count(s))
    bad(file, detail::concat("tensor '", tensor, "' has dtype ", s, ", which ember does not support (it reads",
                             readable, "); convert it before saving"));
  bad(file, detail::concat("tensor '", tensor, "' has an unknown dtype '", s.substr(0, 32), "'"));
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
};

Entry parse_entry(const std::string& file, const std::string& name, const json& value, std::uint64_t data_size) {
  if (name.empty()) bad(file, "a tensor has an empty name");
  if (!value.is_object())
    bad(file, detail::concat("tensor '", name, "': expected an object with dtype, shape and data_offsets"));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) bad(file, detail::concat("tensor '", name, "' has no '", key, "'"));
  Entry e{name, parse_dtype_field(file, name, value["dtype"]), {}, 0, 0};
  const json& shape = value["shape"];
  if (!shape.is_array()) bad(file, detail::concat("tensor '", name, "': shape must be an array"));
  if (shape.size() > 64) bad(file, detail::concat("tensor '", name, "' has ", shape.size(), " dimensions"));
  // The element count is bounded by what the data section can hold, so the product of the dims
  // is checked against that bound as it grows: no overflow, whatever the header claims.
  const std::uint64_t max_elems = data_size / dtype_size(e.dtype);
  std::uint64_t elems = 1;
  bool empty = false;
  for (const json& d : shape) {
    if (!d.is_number_unsigned())
      bad(file, detail::concat("tensor '", name, "': shape entries must be non-negative integers"));
    const std::uint64_t v = d.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      bad(file, detail::concat("tensor '", name, "': dimension ", v, " is too large"));
    e.shape.push_back(static_cast<std::int64_t>(v));
    if (v == 0) empty = true;
    if (!empty && v > 0 && elems > max_elems / v)
      bad(file, detail::concat("tensor '", name, "': shape ", shape.dump().substr(0, 80), " needs more data than the ",
                               data_size, "-byte data section holds"));
    if (!empty) elems *= v;
  }
  if (empty) elems = 0;
  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad(file, detail::concat("tensor '", name, "': data_offsets must be two non-negative integers [begin, end]"));
  e.begin = offsets[0].get<std::uint64_t>();
  e.end = offsets[1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > data_size)
    bad(file, detail::concat("tensor '", name, "': data_offsets [", e.begin, ", ", e.end,
                             "] are outside the data section of ", data_size, " bytes"));
  if (e.end - e.begin != elems * dtype_size(e.dtype))
    bad(file, detail::concat("tensor '", name, "' has ", e.end - e.begin, " bytes of data, but dtype ",
                             safetensors_dtype(e.dtype), " and shape ", shape_str(e.shape), " need ",
                             elems * dtype_size(e.dtype)));
  return e;
}

json parse_header_json(const std::string& file, std::string_view text) {
  // nlohmann keeps the last of duplicate keys silently; a checkpoint with two tensors of one
  // name is ambiguous, so the parser callback refuses duplicates among the top-level keys.
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    bad(file, detail::concat("the header is not valid JSON (", e.what(), ")"));
  }
  if (!duplicate.empty()) bad(file, detail::concat("the tensor name '", duplicate.substr(0, 100), "' appears twice"));
  if (!header.is_object()) bad(file, "the header must be a JSON object");
  return header;
}

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const Tensor* find_tensor(const StateDict& dict, const std::string& name) {
  for (const auto& [key, tensor] : dict)
    if (key == name) return &tensor;
  return nullptr;
}

Checkpoint parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& name, Device map_location) {
  if (bytes.empty()) bad(name, "the file is empty");
  if (bytes.size() < 8)
    bad(name, detail::concat("the file is truncated: ", bytes.size(), " bytes, shorter than the 8-byte header length"));
  const std::uint64_t header_len = read_u64_le(bytes.data());
  if (header_len > kMaxHeaderBytes)
    bad(name, detail::concat("the header claims ", header_len, " bytes, more than the 100 MB safetensors allows"));
  if (header_len > bytes.size() - 8)
    bad(name, detail::concat("the header claims ", header_len, " bytes but only ", bytes.size() - 8,
                             " follow the length field (truncated file?)"));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  const json header = parse_header_json(name, text);
  const std::uint64_t data_offset = 8 + header_len;
  const std::uint64_t data_size = bytes.size() - data_offset;

  Checkpoint checkpoint;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) bad(name, "__metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          bad(name, detail::concat("__metadata__ value of '", m.key().substr(0, 100), "' is not a string"));
        checkpoint.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, it.key(), it.value(), data_size));
  }
  // The tensors must tile the data section exactly: no overlap, no hole, nothing left over.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t expected = 0;
  for (const Entry* e : by_offset) {
    if (e->begin < expected)
      bad(name, detail::concat("tensor '", e->name, "' overlaps the data of another tensor (starts at ", e->begin,
                               ", before ", expected, ")"));
    if (e->begin > expected)
      bad(name, detail::concat("the data section has a gap of ", e->begin - expected, " bytes before tensor '", e->name,
                               "'"));
    expected = e->end;
  }
  if (expected != data_size)
    bad(name, detail::concat("the data section has ", data_size - expected, " bytes that belong to no tensor"));

  // Header order is alphabetical in files from the safetensors library; keep file (offset) order,
  // which is the order tensors were saved in.
  for (const Entry* e : by_offset) {
    Tensor t = empty(e->shape, {.dtype = e->dtype});
    if (e->end > e->begin) std::memcpy(t.raw_bytes(), bytes.data() + data_offset + e->begin, e->end - e->begin);
    checkpoint.tensors.emplace_back(e->name, t.to(map_location));
  }
  return checkpoint;
}

Checkpoint load_safetensors(const std::string& path, Device map_location) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(detail::concat(path, ": no such checkpoint file"));
  if (std::filesystem::is_directory(path, ec))
    throw IoError(detail::concat(path, ": is a folder, not a checkpoint file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(detail::concat(path, ": cannot open for reading: ", std::strerror(errno)));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(detail::concat(path, ": cannot read its size: ", ec.message()));
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
    throw IoError(detail::concat(path, ": read failed"));
  return parse_safetensors(bytes, path, map_location);
}

std::vector<std::uint8_t> encode_safetensors(const StateDict& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::vector<Tensor> host;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    EMBER_CHECK(!name.empty() && name != "__metadata__", ValueError, "safetensors: invalid tensor name '", name, "'");
    EMBER_CHECK(names.insert(name).second, ValueError, "safetensors: the name '", name, "' appears twice");
    const Tensor h = tensor.detach().cpu();
    const std::uint64_t n = h.nbytes();
    header[name] = {
        {"dtype", safetensors_dtype(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    host.push_back(h);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned, as safetensors does
  std::vector<std::uint8_t> bytes(8 + text.size() + offset);
  const std::uint64_t header_len = text.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(header_len >> (8 * i));
  std::memcpy(bytes.data() + 8, text.data(), text.size());
  std::size_t at = 8 + text.size();
  for (const Tensor& h : host) {
    if (h.nbytes()) std::memcpy(bytes.data() + at, h.raw_bytes(), h.nbytes());
    at += h.nbytes();
  }
  return bytes;
}

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, encode_safetensors(tensors, metadata));
}

}  // namespace ember
