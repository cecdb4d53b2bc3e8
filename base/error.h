// The error types every part of ember throws, and the check macros that build them.
// This is the one core/ header that kernels/ may include: it depends on nothing but the
// standard library, and compiles with or without the CUDA toolkit.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ember {

// Base of every ember exception. Library code throws these and never exits or aborts.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DeviceError : public Error {  // tensors on the wrong device, no usable CUDA device
  using Error::Error;
};
class ShapeError : public Error {  // incompatible shapes
  using Error::Error;
};
class DTypeError : public Error {  // wrong or unsupported element type
  using Error::Error;
};
class ValueError : public Error {  // an argument outside its allowed range
  using Error::Error;
};
class IndexError : public ValueError {  // an index (label, target, dim) out of range
  using ValueError::ValueError;
};
class NonFiniteError : public ValueError {  // a loss or value that became NaN or infinite
  using ValueError::ValueError;
};
class AutogradError : public Error {  // misuse of the autograd graph
  using Error::Error;
};
class IoError : public Error {  // a file that cannot be opened, read or written
  using Error::Error;
};
class FormatError : public Error {  // a file whose contents are malformed
  using Error::Error;
};
class CudaError : public Error {  // a failed CUDA runtime, cuBLAS or cuDNN call
  using Error::Error;
};
class OutOfMemoryError : public CudaError {  // device memory exhausted
  using CudaError::CudaError;
};
class NotImplementedError : public Error {  // a combination ember does not support (yet)
  using Error::Error;
};

namespace detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

// Out-of-line throwers keep the macros small and let CUDA-free code use them. The CUDA ones
// are defined in core/cuda/runtime.cpp (cuDNN's in kernels/cuda/cudnn_conv.cpp), where the libraries' error
// strings are available.
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(int status, const char* call, const char* file, int line);
// For destructors, which must not throw: prints the failure to stderr instead.
void log_cuda_error(int code, const char* call, const char* file, int line) noexcept;

}  // namespace detail
}  // namespace ember

// EMBER_CHECK(cond, ErrorType, message parts...): throws ErrorType(message) when cond is false.
#define EMBER_CHECK(cond, ErrorType, ...)                               \
  do {                                                                  \
    if (!(cond)) throw ErrorType(::ember::detail::concat(__VA_ARGS__)); \
  } while (0)

// The checked calls: each captures the call's text, file:line and the library's error string.
// Success is 0 for the CUDA runtime, cuBLAS and cuDNN alike.
#define CUDA_CHECK(call)                                                                                       \
  do {                                                                                                         \
    const int ember_cuda_code_ = static_cast<int>(call);                                                       \
    if (ember_cuda_code_ != 0) ::ember::detail::throw_cuda_error(ember_cuda_code_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK_NOTHROW(call)                                                                             \
  do {                                                                                                       \
    const int ember_cuda_code_ = static_cast<int>(call);                                                     \
    if (ember_cuda_code_ != 0) ::ember::detail::log_cuda_error(ember_cuda_code_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    const int ember_cublas_status_ = static_cast<int>(call);                                \
    if (ember_cublas_status_ != 0)                                                          \
      ::ember::detail::throw_cublas_error(ember_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(call)                                                                                             \
  do {                                                                                                                \
    const int ember_cudnn_status_ = static_cast<int>(call);                                                           \
    if (ember_cudnn_status_ != 0) ::ember::detail::throw_cudnn_error(ember_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)
