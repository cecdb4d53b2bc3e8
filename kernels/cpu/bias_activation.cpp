// CPU twins of the fused bias+ReLU kernels.
#include <algorithm>

#include "kernels/bias_activation.h"
#include "kernels/elementwise_math.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {

// y[r, c] += bias[c] for every row, then ReLU where asked.
template <bool Relu, class T>
void add_bias_to_rows(T* __restrict y, const T* __restrict bias, std::size_t rows, std::size_t cols) {
  parallel_for(
      rows, items_per_piece(cols),
      [&](std::size_t first, std::size_t last) {
        for (std::size_t r = first; r < last; ++r) {
          T* row = y + r * cols;
          for (std::size_t c = 0; c < cols; ++c) {
            const T sum = row[c] + bias[c];
            row[c] = Relu ? unary_formula<UnaryOp::relu>(sum, {}) : sum;
          }
        }
      },
      1);
}

template <class T>
void bias_relu_forward(T* __restrict y, const T* __restrict bias, std::size_t rows, std::size_t cols) {
  add_bias_to_rows<true>(y, bias, rows, cols);
}

template <class T>
void bias_forward(T* __restrict y, const T* __restrict bias, std::size_t rows, std::size_t cols) {
  add_bias_to_rows<false>(y, bias, rows, cols);
}

template <class T>
void bias_relu_backward(const T* dy, const T* __restrict y, T* dx, T* __restrict dbias, std::size_t rows,
                        std::size_t cols) {
  // dx may be dy (the gradient masked in place), so those two are not __restrict.
  // Row by row, so both passes stream through memory; each column still adds its rows in order.
  // The parallel pieces are blocks of columns, each summed over all rows.
  parallel_for(cols, std::max<std::size_t>(16, items_per_piece(rows)), [&](std::size_t first, std::size_t last) {
    std::fill(dbias + first, dbias + last, T(0));
    for (std::size_t r = 0; r < rows; ++r) {
      const T* g = dy + r * cols;
      const T* out = y + r * cols;
      T* d = dx + r * cols;
      for (std::size_t c = first; c < last; ++c) {
        const T gradient = g[c];  // loaded unconditionally, so the select below vectorizes
        const T v = activation_grad_formula<ActivationGrad::relu>(gradient, out[c], {});
        d[c] = v;
        dbias[c] += v;
      }
    }
  });
}

// bf16 gradients (autocast's linear_relu): the mask is exact in bf16; each column's bias gradient
// adds its rows in order in f32, as the f32 kernel does, and is rounded once: the bits of the f32
// kernel on widened copies, without the copies.
template <>
void bias_relu_backward<bfloat16>(const bfloat16* dy, const bfloat16* __restrict y, bfloat16* dx,
                                  bfloat16* __restrict dbias, std::size_t rows, std::size_t cols) {
  constexpr std::size_t kChunk = 256;  // columns whose f32 sums live on the stack
  parallel_for(cols, std::max<std::size_t>(16, items_per_piece(rows)), [&](std::size_t first, std::size_t last) {
    for (std::size_t c0 = first; c0 < last; c0 += kChunk) {
      const std::size_t width = std::min(kChunk, last - c0);
      float sums[kChunk] = {};
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t row = r * cols + c0;
        for (std::size_t c = 0; c < width; ++c) {
          const float v = activation_grad_formula<ActivationGrad::relu>(static_cast<float>(dy[row + c]),
                                                                        static_cast<float>(y[row + c]), {});
          dx[row + c] = bfloat16(v);
          sums[c] += v;
        }
      }
      for (std::size_t c = 0; c < width; ++c) dbias[c0 + c] = bfloat16(sums[c]);
    }
  });
}

template void bias_relu_forward<float>(float*, const float*, std::size_t, std::size_t);
template void bias_relu_forward<double>(double*, const double*, std::size_t, std::size_t);
template void bias_forward<float>(float*, const float*, std::size_t, std::size_t);
template void bias_forward<double>(double*, const double*, std::size_t, std::size_t);
template void bias_relu_backward<float>(const float*, const float*, float*, float*, std::size_t, std::size_t);
template void bias_relu_backward<double>(const double*, const double*, double*, double*, std::size_t, std::size_t);

}  // namespace ember::kernels::cpu
