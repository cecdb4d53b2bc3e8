// CPU twins of the layout kernels.
#include <cstdint>
#include <cstring>

#include "base/dtype.h"
#include "kernels/layout.h"

namespace ember::kernels::cpu {

template <class T>
void transpose_last2(const T* x, T* y, std::size_t batch, std::size_t rows, std::size_t cols) {
  // Tiles keep both the reads and the writes within a few cache lines.
  constexpr std::size_t tile = 32;
  for (std::size_t b = 0; b < batch; ++b) {
    const T* xb = x + b * rows * cols;
    T* yb = y + b * rows * cols;
    for (std::size_t i0 = 0; i0 < rows; i0 += tile)
      for (std::size_t j0 = 0; j0 < cols; j0 += tile)
        for (std::size_t i = i0; i < rows && i < i0 + tile; ++i)
          for (std::size_t j = j0; j < cols && j < j0 + tile; ++j) yb[j * rows + i] = xb[i * cols + j];
  }
}

template <class T>
void copy_2d(const T* src, std::size_t src_ld, T* dst, std::size_t dst_ld, std::size_t rows, std::size_t cols) {
  if (cols == 0) return;
  for (std::size_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, cols * sizeof(T));
}

#define EMBER_INSTANTIATE(T)                                                             \
  template void transpose_last2<T>(const T*, T*, std::size_t, std::size_t, std::size_t); \
  template void copy_2d<T>(const T*, std::size_t, T*, std::size_t, std::size_t, std::size_t);
#define EMBER_INSTANTIATE_DTYPE(name, type, ...) EMBER_INSTANTIATE(type)
EMBER_FORALL_DTYPES(EMBER_INSTANTIATE_DTYPE)  // Note [the dtype list]
#undef EMBER_INSTANTIATE_DTYPE
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
