// CPU twins of the fused bias+ReLU kernels.
#include <algorithm>

#include "kernels/bias_activation.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels::cpu {

template <class T>
void bias_relu_forward(T* __restrict y, const T* __restrict bias, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = y + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      row[c] = unary_formula<UnaryOp::relu>(row[c] + bias[c], {});
    }
  }
}

template <class T>
void bias_forward(T* __restrict y, const T* __restrict bias, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = y + r * cols;
    for (std::size_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

template <class T>
void bias_relu_backward(const T* dy, const T* __restrict y, T* dx, T* __restrict dbias, std::size_t rows,
                        std::size_t cols) {
  std::fill(dbias, dbias + cols, T(0));
  // dx may be dy (the gradient masked in place), so those two are not __restrict.
  // Row by row, so both passes stream through memory; each column still adds its rows in order.
  for (std::size_t r = 0; r < rows; ++r) {
    const T* g = dy + r * cols;
    const T* out = y + r * cols;
    T* d = dx + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      const T gradient = g[c];  // loaded unconditionally, so the select below vectorizes
      const T v = activation_grad_formula<ActivationGrad::relu>(gradient, out[c], {});
      d[c] = v;
      dbias[c] += v;
    }
  }
}

template void bias_relu_forward<float>(float*, const float*, std::size_t, std::size_t);
template void bias_relu_forward<double>(double*, const double*, std::size_t, std::size_t);
template void bias_forward<float>(float*, const float*, std::size_t, std::size_t);
template void bias_forward<double>(double*, const double*, std::size_t, std::size_t);
template void bias_relu_backward<float>(const float*, const float*, float*, float*, std::size_t, std::size_t);
template void bias_relu_backward<double>(const double*, const double*, double*, double*, std::size_t, std::size_t);

}  // namespace ember::kernels::cpu
