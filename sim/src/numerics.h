// Number formats the library models share: TF32 (f32's range, 10 mantissa bits), which cuBLAS,
// cuBLASLt and cuDNN may round f32 inputs to on tensor cores when the caller allows it, and the
// 16-bit types as f32. The rounding of f32 to TF32 is the PTX instruction cvt.rna.tf32.f32's: to
// nearest, ties away from zero. Which rounding (or truncation) a library's kernels use is theirs
// to choose; the model takes one, so that a caller who allowed TF32 sees its effect and one who
// did not sees exact f32. Also the element formats' loads and stores, one place for every model.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember_sim {

inline float tf32_round(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // ±∞ and NaN as they are
  u = (u + 0x1000u) & 0xffffe000u;                 // half of the 13 dropped bits' unit, then drop them
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The element formats the models read and write: f32 values as they are, 16-bit ones widened
// exactly and stored rounded to nearest even.
enum class Format { f32, bf16, f16 };

inline float load(const void* data, std::size_t i, Format format) {
  switch (format) {
    case Format::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case Format::f16:
      return __half2float(static_cast<const __half*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

inline void store(void* data, std::size_t i, Format format, float value) {
  switch (format) {
    case Format::bf16:
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(value);
      break;
    case Format::f16:
      static_cast<__half*>(data)[i] = __float2half_rn(value);
      break;
    default:
      static_cast<float*>(data)[i] = value;
  }
}

}  // namespace ember_sim
