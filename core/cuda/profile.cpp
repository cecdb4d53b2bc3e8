// NVTX ranges (header-only NVTX 3 from the CUDA toolkit), or nothing without CUDA.
#include "core/cuda/profile.h"

#include "base/config.h"

#if EMBER_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace ember {

#if EMBER_WITH_CUDA
ProfileRange::ProfileRange(const char* name) { nvtxRangePushA(name); }
ProfileRange::~ProfileRange() { nvtxRangePop(); }
#else
ProfileRange::ProfileRange(const char*) {}
ProfileRange::~ProfileRange() = default;
#endif

}  // namespace ember
