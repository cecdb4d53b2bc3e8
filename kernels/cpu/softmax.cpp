// CPU twins of softmax, log-softmax and the fused softmax cross-entropy. Exponentials are taken in
// the input's precision (expf for float, as the CUDA kernels do: a double exp costs several times
// more and buys nothing a float result keeps); row sums accumulate in double.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/softmax.h"

namespace ember::kernels::cpu {
namespace {

// max and log Σ exp(x − max) of one row: the stable log-sum-exp.
template <class T>
double row_logsumexp(const T* row, std::size_t cols) {
  T max = -std::numeric_limits<T>::infinity();
  for (std::size_t c = 0; c < cols; ++c) max = row[c] > max ? row[c] : max;
  if (std::isinf(max)) return static_cast<double>(max);  // all −inf (or +inf present)
  double sum = 0;
  for (std::size_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
  return static_cast<double>(max) + std::log(sum);
}

template <class T>
void write(T* dst, T value, WriteMode mode) {
  if (mode == WriteMode::overwrite) *dst = value;
  else *dst += value;
}

}  // namespace

template <class T>
void softmax_forward(SoftmaxKind kind, const T* x, T* y, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    if (kind == SoftmaxKind::log_softmax) {
      const T lse = static_cast<T>(row_logsumexp(xr, cols));
      for (std::size_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
      continue;
    }
    // One exponential per element: exp(x − max) kept in y, then scaled by 1/Σ.
    T max = -std::numeric_limits<T>::infinity();
    for (std::size_t c = 0; c < cols; ++c) max = xr[c] > max ? xr[c] : max;
    if (std::isinf(max)) {  // all −inf (or +inf present): the log-sum-exp form gives the limits
      const T lse = static_cast<T>(row_logsumexp(xr, cols));
      for (std::size_t c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - lse);
      continue;
    }
    double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - max);
      sum += yr[c];
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (std::size_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
}

template <class T>
void softmax_backward(SoftmaxKind kind, const T* dy, const T* y, T* dx, std::size_t rows,
                      std::size_t cols, WriteMode mode) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    T* dxr = dx + r * cols;
    double dot = 0;
    if (kind == SoftmaxKind::softmax) {
      for (std::size_t c = 0; c < cols; ++c) dot += static_cast<double>(dyr[c]) * yr[c];
      for (std::size_t c = 0; c < cols; ++c) write(dxr + c, static_cast<T>(yr[c] * (dyr[c] - dot)), mode);
    } else {
      for (std::size_t c = 0; c < cols; ++c) dot += dyr[c];
      for (std::size_t c = 0; c < cols; ++c)
        write(dxr + c, static_cast<T>(dyr[c] - std::exp(yr[c]) * static_cast<T>(dot)), mode);
    }
  }
}

template <class T, class Target>
void cross_entropy_forward(const T* logits, const Target* targets, T* loss, T* lse,
                           std::size_t rows, std::size_t cols, DeviceErrorRecord* error) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    const long long target = static_cast<long long>(targets[r]);
    const double row_lse = row_logsumexp(row, cols);
    lse[r] = static_cast<T>(row_lse);
    if (target < 0 || target >= static_cast<long long>(cols)) {
      loss[r] = T(0);
      if (error && error->code == 0)
        *error = {static_cast<int>(DeviceErrorCode::target_out_of_range),
                  static_cast<int>(OpTag::cross_entropy), target, static_cast<long long>(r),
                  static_cast<long long>(cols)};
      continue;
    }
    loss[r] = static_cast<T>(row_lse - static_cast<double>(row[target]));
  }
}

template <class T, class Target>
void cross_entropy_backward(const T* logits, const Target* targets, const T* lse,
                            const T* grad_scale, T row_scale, T* dlogits, std::size_t rows,
                            std::size_t cols, WriteMode mode) {
  const T scale = *grad_scale * row_scale;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T* drow = dlogits + r * cols;
    const long long target = static_cast<long long>(targets[r]);
    for (std::size_t c = 0; c < cols; ++c) {
      const T p = std::exp(row[c] - lse[r]);
      const T onehot = static_cast<long long>(c) == target ? T(1) : T(0);
      write(drow + c, (p - onehot) * scale, mode);
    }
  }
}

template <class T, class Target>
void cross_entropy_fused(const T* logits, const Target* targets, T* dlogits, T* row_loss, T* batch_loss,
                         T* loss_sum, std::size_t rows, std::size_t cols, T row_scale,
                         DeviceErrorRecord* error) {
  double total = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T* drow = dlogits + r * cols;
    const long long target = static_cast<long long>(targets[r]);
    if (target < 0 || target >= static_cast<long long>(cols)) {
      row_loss[r] = T(0);
      for (std::size_t c = 0; c < cols; ++c) drow[c] = T(0);
      if (error && error->code == 0)
        *error = {static_cast<int>(DeviceErrorCode::target_out_of_range),
                  static_cast<int>(OpTag::cross_entropy), target, static_cast<long long>(r),
                  static_cast<long long>(cols)};
      continue;
    }
    // One exp per element: e = exp(x − max) goes into the gradient row, then is scaled by 1/Σe.
    T max = -std::numeric_limits<T>::infinity();
    for (std::size_t c = 0; c < cols; ++c) max = row[c] > max ? row[c] : max;
    double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      drow[c] = std::exp(row[c] - max);
      sum += static_cast<double>(drow[c]);
    }
    const T to_grad = static_cast<T>(static_cast<double>(row_scale) / sum);
    for (std::size_t c = 0; c < cols; ++c) drow[c] *= to_grad;
    drow[target] -= row_scale;
    row_loss[r] = static_cast<T>(static_cast<double>(max) + std::log(sum) - static_cast<double>(row[target]));
    total += static_cast<double>(row_loss[r]);
  }
  if (batch_loss) *batch_loss = static_cast<T>(total * static_cast<double>(row_scale));
  if (loss_sum) *loss_sum += static_cast<T>(total);
  if (!std::isfinite(total) && error && error->code == 0)
    *error = {static_cast<int>(DeviceErrorCode::non_finite), static_cast<int>(OpTag::loss_check), 0, 0, 0};
}

#define EMBER_INSTANTIATE(T)                                                                  \
  template void softmax_forward<T>(SoftmaxKind, const T*, T*, std::size_t, std::size_t);      \
  template void softmax_backward<T>(SoftmaxKind, const T*, const T*, T*, std::size_t,         \
                                    std::size_t, WriteMode);                                  \
  template void cross_entropy_forward<T, std::int32_t>(const T*, const std::int32_t*, T*, T*, \
                                                       std::size_t, std::size_t,              \
                                                       DeviceErrorRecord*);                   \
  template void cross_entropy_forward<T, std::int64_t>(const T*, const std::int64_t*, T*, T*, \
                                                       std::size_t, std::size_t,              \
                                                       DeviceErrorRecord*);                   \
  template void cross_entropy_backward<T, std::int32_t>(const T*, const std::int32_t*,        \
                                                        const T*, const T*, T, T*,            \
                                                        std::size_t, std::size_t, WriteMode); \
  template void cross_entropy_backward<T, std::int64_t>(const T*, const std::int64_t*,        \
                                                        const T*, const T*, T, T*,            \
                                                        std::size_t, std::size_t, WriteMode);   \
  template void cross_entropy_fused<T, std::int32_t>(const T*, const std::int32_t*, T*, T*, T*, T*, \
                                                     std::size_t, std::size_t, T, DeviceErrorRecord*); \
  template void cross_entropy_fused<T, std::int64_t>(const T*, const std::int64_t*, T*, T*, T*, T*, \
                                                     std::size_t, std::size_t, T, DeviceErrorRecord*);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
