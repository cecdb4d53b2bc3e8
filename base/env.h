// The EMBER_* environment variables, read here and nowhere else.
//
// Note [environment flags]
//   EMBER_DEVICE=cpu|cuda|cuda:N  the device Device::best() picks (core/tensor/device.h)
//   EMBER_FUSION=0                the plain paths instead of the fused ones (base/fusion.h)
//   EMBER_SYNC_DEBUG=1            synchronize after every CUDA launch, so an error is reported at
//                                 its cause (core/cuda/runtime.h)
//   EMBER_DETERMINISTIC=1         cuDNN restricted to deterministic algorithms (core/cuda/runtime.h)
//   EMBER_ALLOW_TF32=1            f32 products and convolutions on CUDA may round their inputs to
//                                 TF32 on tensor cores (core/cuda/runtime.h)
//   EMBER_NO_AVX512_BF16=1        bf16 on the CPU as where AVX512-BF16 is missing: products and
//                                 convolutions widened to f32 (ext::cpu_bf16_kernels in
//                                 core/ops/op_helpers.h, Note [half precision])
//   EMBER_NO_AVX512=1             the CPU kernels' plain loops instead of their AVX-512 forms, and
//                                 no AVX512-BF16 (Note [CPU dispatch] in kernels/cpu_features.h)
//   EMBER_NUM_THREADS=N           CPU compute threads when set_num_threads was not called (1 if
//                                 unset; Note [CPU threads] in kernels/parallel.h)
//   EMBER_FAULT_AT=N[:enospc]     kill the process (or fail with ENOSPC) at its N-th file operation,
//   EMBER_FILE_TRACE=PATH         and trace them: Note [file fault hook] in core/io/durable_file.h
// A flag is off when unset, empty or "0" (EMBER_FUSION: on unless "0"). Each is read once, when
// first needed, and a setter in the header named beside it overrides it. kernels/ reads none of
// them but EMBER_NO_AVX512, read where cpuid is, and EMBER_NUM_THREADS, read where the pool is
// (any kernel may ask first); core hands the others
// down (kernels::cuda::set_sync_debug, set_deterministic, set_allow_tf32) before its first CUDA work.
#pragma once

#include <optional>
#include <string>

namespace ember {

// The variable's value; nothing when it is unset or empty.
std::optional<std::string> env_value(const char* name);
// A boolean flag: `fallback` when unset or empty, false for "0", true otherwise.
bool env_flag(const char* name, bool fallback);

}  // namespace ember
