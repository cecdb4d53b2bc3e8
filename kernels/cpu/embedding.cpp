// The CPU's embedding lookup and its gradient (kernels/embedding.h): rows copied in parallel; the
// gradient's columns split across threads, each summing the positions in order.
#include "kernels/embedding.h"

#include <algorithm>
#include <cstdint>

#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

template <class Index>
bool valid_index(Index i, std::size_t rows) {
  return static_cast<long long>(i) >= 0 && static_cast<unsigned long long>(i) < rows;
}

}  // namespace

template <class T, class Index>
void embedding_forward(const T* weight, const Index* index, T* out, std::size_t n, std::size_t rows, std::size_t width,
                       DeviceErrorRecord* error) {
  parallel_for(
      n, items_per_piece(width),
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          T* row = out + i * width;
          if (valid_index(index[i], rows))
            std::copy_n(weight + static_cast<std::size_t>(index[i]) * width, width, row);
          else
            std::fill_n(row, width, T{0});
        }
      },
      1);
  // The record is filled serially, in position order: the lowest bad position is reported.
  for (std::size_t i = 0; i < n; ++i)
    if (!valid_index(index[i], rows)) {
      raise_error_on_host(error, DeviceErrorCode::index_out_of_range, OpTag::embedding, static_cast<long long>(i),
                          static_cast<long long>(index[i]), static_cast<long long>(rows));
      break;
    }
}

// Note [deterministic embedding gradient]: every column's sums walk the positions in order, so
// cutting the columns differently never changes a bit.
template <class T, class Index>
void embedding_backward(const T* dy, const Index* index, T* dweight, std::size_t n, std::size_t rows, std::size_t width,
                        long long padding) {
  std::fill_n(dweight, rows * width, T{0});
  const std::size_t grain = n == 0 ? width : std::max<std::size_t>(1, kElementsPerPiece / n);
  parallel_for(
      width, grain,
      [&](std::size_t first, std::size_t last) {
        for (std::size_t i = 0; i < n; ++i) {
          if (!valid_index(index[i], rows) || static_cast<long long>(index[i]) == padding) continue;
          T* to = dweight + static_cast<std::size_t>(index[i]) * width;
          const T* from = dy + i * width;
          for (std::size_t c = first; c < last; ++c) to[c] += from[c];
        }
      },
      1);
}

#define EMBER_INSTANTIATE(T, Index)                                                                             \
  template void embedding_forward<T, Index>(const T*, const Index*, T*, std::size_t, std::size_t, std::size_t,  \
                                            DeviceErrorRecord*);                                                \
  template void embedding_backward<T, Index>(const T*, const Index*, T*, std::size_t, std::size_t, std::size_t, \
                                             long long);
EMBER_INSTANTIATE(float, std::int32_t)
EMBER_INSTANTIATE(float, std::int64_t)
EMBER_INSTANTIATE(double, std::int32_t)
EMBER_INSTANTIATE(double, std::int64_t)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
