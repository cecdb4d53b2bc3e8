// IDX reading (raw or gzip, streaming, every header field checked) and writing.
#include "data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "base/error.h"
#include "core/io/serialize.h"

namespace ember::data {
namespace {

constexpr std::uint64_t kMaxDeflateRatio = 1032;  // deflate's largest possible expansion
constexpr std::size_t kChunk = 1 << 16;

[[noreturn]] void bad(const std::string& name, const std::string& problem) {
  throw FormatError(detail::concat(name, ": not a valid IDX file: ", problem));
}

// Where the bytes come from: a file read in chunks, or memory.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::size_t read(std::uint8_t* dst, std::size_t n) = 0;  // 0 at the end
  virtual std::uint64_t size() const = 0;
};

class FileSource : public Source {
 public:
  FileSource(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "rb")) {
    if (!file_) throw IoError(detail::concat(path, ": cannot open: ", std::strerror(errno)));
    std::error_code ec;
    size_ = std::filesystem::file_size(path, ec);
    if (ec) throw IoError(detail::concat(path, ": cannot read its size: ", ec.message()));
  }
  ~FileSource() override { std::fclose(file_); }
  std::size_t read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_)) throw IoError(detail::concat(path_, ": read failed: ", std::strerror(errno)));
    return got;
  }
  std::uint64_t size() const override { return size_; }

 private:
  std::string path_;
  std::FILE* file_;
  std::uint64_t size_ = 0;
};

class MemorySource : public Source {
 public:
  explicit MemorySource(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::size_t read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t got = std::min(n, bytes_.size() - at_);
    if (got) std::memcpy(dst, bytes_.data() + at_, got);
    at_ += got;
    return got;
  }
  std::uint64_t size() const override { return bytes_.size(); }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

// The decompressed byte stream: the source as it is, or inflated through zlib chunk by chunk.
class Stream {
 public:
  Stream(Source& source, const std::string& name) : source_(source), name_(name), in_(kChunk) {
    in_len_ = source_.read(in_.data(), 2);
    gzip_ = in_len_ == 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      std::memset(&z_, 0, sizeof(z_));
      if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw Error(detail::concat(name, ": zlib initialization failed"));
      z_open_ = true;
    }
  }
  ~Stream() {
    if (z_open_) inflateEnd(&z_);
  }
  bool gzip() const { return gzip_; }

  // Fills up to n bytes; returns how many (fewer only at the end of the stream).
  std::size_t read(std::uint8_t* dst, std::size_t n) {
    if (!gzip_) {
      std::size_t got = 0;
      while (in_at_ < in_len_ && got < n) dst[got++] = in_[in_at_++];  // the two sniffed bytes
      while (got < n) {
        const std::size_t r = source_.read(dst + got, n - got);
        if (r == 0) break;
        got += r;
      }
      return got;
    }
    z_.next_out = dst;
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out > 0 && !finished_) {
      if (z_.avail_in == 0) {
        if (in_at_ < in_len_) {  // bytes already read but not yet given to zlib
          z_.next_in = in_.data() + in_at_;
          z_.avail_in = static_cast<uInt>(in_len_ - in_at_);
          in_at_ = in_len_;
        } else {
          in_len_ = source_.read(in_.data(), in_.size());
          in_at_ = in_len_;
          if (in_len_ == 0) bad(name_, "corrupt gzip stream: the compressed data ends early (truncated file?)");
          z_.next_in = in_.data();
          z_.avail_in = static_cast<uInt>(in_len_);
        }
      }
      const int status = inflate(&z_, Z_NO_FLUSH);
      if (status == Z_STREAM_END) {
        // Another gzip member may follow (gzip allows concatenation); anything else is garbage.
        if (z_.avail_in == 0) {
          in_len_ = source_.read(in_.data(), in_.size());
          in_at_ = in_len_;
          z_.next_in = in_.data();
          z_.avail_in = static_cast<uInt>(in_len_);
        }
        if (z_.avail_in == 0) {
          finished_ = true;
        } else if (z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b) {
          inflateReset(&z_);
        } else {
          bad(name_, "corrupt gzip stream: bytes after the end of the compressed data");
        }
      } else if (status != Z_OK) {
        bad(name_, detail::concat("corrupt gzip stream (", z_.msg ? z_.msg : zError(status), ")"));
      }
    }
    return n - z_.avail_out;
  }

 private:
  Source& source_;
  std::string name_;
  std::vector<std::uint8_t> in_;
  std::size_t in_len_ = 0, in_at_ = 0;
  bool gzip_ = false, z_open_ = false, finished_ = false;
  z_stream z_{};
};

const char* type_name(std::uint8_t code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
  }
  return nullptr;
}

Tensor read_stream(Source& source, const std::string& name) {
  if (source.size() == 0) bad(name, "the file is empty");
  Stream stream(source, name);
  std::uint8_t magic[4];
  if (stream.read(magic, 4) != 4) bad(name, "the file is too short for the 4-byte IDX magic number");
  if (magic[0] != 0 || magic[1] != 0)
    bad(name, detail::concat("wrong magic number (the first two bytes must be zero, found ", int(magic[0]), " and ",
                             int(magic[1]), "): not an IDX file"));
  if (magic[2] != 0x08) {
    if (const char* t = type_name(magic[2]))
      bad(name, detail::concat("unsupported type code 0x0", std::hex, int(magic[2]), " (", t,
                               "); ember reads IDX files of unsigned bytes (0x08), as MNIST's are"));
    bad(name, detail::concat("unknown type code 0x", std::hex, int(magic[2])));
  }
  const int ndim = magic[3];
  if (ndim == 0) bad(name, "zero dimensions in the header");
  if (ndim > 8) bad(name, detail::concat(ndim, " dimensions in the header (at most 8 are supported)"));
  std::uint8_t dims_raw[32];
  if (stream.read(dims_raw, 4 * static_cast<std::size_t>(ndim)) != 4 * static_cast<std::size_t>(ndim))
    bad(name, "the header is truncated (fewer dimension sizes than it declares)");
  // The largest payload the file could hold: what follows the header in a raw file, or what the
  // compressed bytes can inflate to at deflate's maximum ratio.
  const std::uint64_t header_bytes = 4 + 4 * static_cast<std::uint64_t>(ndim);
  const std::uint64_t capacity = stream.gzip() ? source.size() * kMaxDeflateRatio
                                               : (source.size() > header_bytes ? source.size() - header_bytes : 0);
  Shape shape;
  for (int d = 0; d < ndim; ++d) {
    const std::uint8_t* p = dims_raw + 4 * d;
    const std::uint64_t size = (std::uint64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    if (size == 0) bad(name, detail::concat("dimension ", d, " has size zero"));
    shape.push_back(static_cast<std::int64_t>(size));
  }
  // Each size is below 2^32 and the running product stays at most `capacity` (< 2^63) before
  // each multiplication, so the check itself cannot overflow.
  std::uint64_t payload = 1;
  bool too_big = false;
  for (std::int64_t size : shape) {
    if (payload > capacity / static_cast<std::uint64_t>(size)) {
      too_big = true;
      break;
    }
    payload *= static_cast<std::uint64_t>(size);
  }
  if (too_big) {
    if (stream.gzip())
      bad(name, detail::concat("the header declares more data (shape ", shape_str(shape), ") than a ", source.size(),
                               "-byte gzip file can hold"));
    bad(name, detail::concat("truncated payload: the header declares shape ", shape_str(shape), ", more than the ",
                             capacity, " bytes the file holds"));
  }
  if (!stream.gzip() && payload != capacity) {
    if (payload > capacity)
      bad(name,
          detail::concat("truncated payload: the header declares ", payload, " bytes, the file holds ", capacity));
    bad(name, detail::concat(capacity - payload, " trailing bytes after the ", payload, "-byte payload"));
  }
  Tensor out = empty(shape, {.dtype = DType::u8});
  std::uint8_t* dst = out.data<std::uint8_t>();
  std::uint64_t done = 0;
  while (done < payload) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, payload - done));
    const std::size_t got = stream.read(dst + done, want);
    done += got;
    if (got < want)
      bad(name, detail::concat("truncated payload: the header declares ", payload, " bytes, the file holds ", done));
  }
  std::uint8_t extra;
  if (stream.read(&extra, 1) != 0) bad(name, detail::concat("trailing bytes after the ", payload, "-byte payload"));
  return out;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(detail::concat(path, ": no such file"));
  if (std::filesystem::is_directory(path, ec)) throw IoError(detail::concat(path, ": is a folder, not an IDX file"));
  FileSource source(path);
  return read_stream(source, path);
}

Tensor parse_idx(std::span<const std::uint8_t> bytes, const std::string& name) {
  MemorySource source(bytes);
  return read_stream(source, name);
}

void write_idx(const std::string& path, const Tensor& tensor, bool gzip) {
  EMBER_CHECK(tensor.dtype() == DType::u8 && tensor.dim() >= 1 && tensor.dim() <= 8, ValueError,
              "write_idx: needs a u8 tensor of 1 to 8 dimensions, got ", tensor.dtype(), " of shape ",
              shape_str(tensor.shape()));
  const Tensor host = tensor.cpu();
  std::vector<std::uint8_t> raw{0, 0, 0x08, static_cast<std::uint8_t>(tensor.dim())};
  for (std::int64_t d : tensor.shape()) {
    EMBER_CHECK(d > 0 && d <= 0xffffffffLL, ValueError, "write_idx: dimension sizes must be in [1, 2^32), got ", d);
    for (int shift = 24; shift >= 0; shift -= 8) raw.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  const std::size_t header = raw.size();
  raw.resize(header + host.nbytes());
  std::memcpy(raw.data() + header, host.data<std::uint8_t>(), host.nbytes());
  if (!gzip) return write_file_atomically(path, raw);
  z_stream z{};
  EMBER_CHECK(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, Error,
              "write_idx: zlib initialization failed");
  std::vector<std::uint8_t> packed(deflateBound(&z, raw.size()) + 32);
  z.next_in = raw.data();
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = packed.data();
  z.avail_out = static_cast<uInt>(packed.size());
  const int status = deflate(&z, Z_FINISH);
  const std::size_t packed_size = packed.size() - z.avail_out;
  deflateEnd(&z);
  EMBER_CHECK(status == Z_STREAM_END, Error, "write_idx: gzip compression failed");
  packed.resize(packed_size);
  write_file_atomically(path, packed);
}

}  // namespace ember::data
