// ember's dtypes as the CUDA libraries name them (cudaDataType), for the GEMMs' wrappers.
#pragma once

#include <library_types.h>

#include "base/dtype.h"
#include "base/error.h"

namespace ember::kernels::cuda {

inline cudaDataType library_type(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::f32:
      return CUDA_R_32F;
    default:
      throw DTypeError(detail::concat("no cuBLAS data type for ", dtype, ": products take f32, bf16 or f16"));
  }
}

}  // namespace ember::kernels::cuda
