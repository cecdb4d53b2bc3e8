// CPU twins of softmax, log-softmax and the fused softmax cross-entropy; the formulas are
// kernels/softmax_math.h's. Exponentials are taken in the input's precision (expf for float, as
// the CUDA kernels do: a double exp costs several times more and buys nothing a float result
// keeps); row sums accumulate in double.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/softmax.h"

namespace ember::kernels::cpu {
namespace {

// A row's maximum and Σ exp(x − max), the sum in double.
template <class T>
struct RowStats {
  T max;
  double sum;
  T inv_sum() const { return static_cast<T>(1.0 / sum); }
  T log_sum() const { return static_cast<T>(std::log(sum)); }
};

template <class T>
RowStats<T> row_stats(const T* row, std::size_t cols) {
  T max = -std::numeric_limits<T>::infinity();
  for (std::size_t c = 0; c < cols; ++c) max = row[c] > max ? row[c] : max;
  double sum = 0;
  for (std::size_t c = 0; c < cols; ++c) sum += softmax_numerator(row[c], max);
  return {max, sum};
}

template <class T>
void write(T* dst, T value, WriteMode mode) {
  if (mode == WriteMode::overwrite)
    *dst = value;
  else
    *dst += value;
}

template <class Target>
bool valid_target(Target t, std::size_t cols) {
  return static_cast<long long>(t) >= 0 && static_cast<long long>(t) < static_cast<long long>(cols);
}

void raise_target_error(DeviceErrorRecord* error, long long target, std::size_t row, std::size_t cols) {
  raise_error_on_host(error, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, static_cast<long long>(row),
                      target, static_cast<long long>(cols));
}

}  // namespace

template <class T>
void softmax_forward(SoftmaxKind kind, const T* x, T* y, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    if (kind == SoftmaxKind::log_softmax) {
      const RowStats<T> s = row_stats(xr, cols);
      for (std::size_t c = 0; c < cols; ++c) yr[c] = log_softmax_formula(xr[c], s.max, s.log_sum());
      continue;
    }
    // One exponential per element: the numerators are kept in y while summing, then scaled.
    T max = -std::numeric_limits<T>::infinity();
    for (std::size_t c = 0; c < cols; ++c) max = xr[c] > max ? xr[c] : max;
    double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      yr[c] = softmax_numerator(xr[c], max);
      sum += yr[c];
    }
    const T inv = RowStats<T>{max, sum}.inv_sum();
    for (std::size_t c = 0; c < cols; ++c) yr[c] = softmax_formula(yr[c], inv);
  }
}

template <class T>
void softmax_backward(SoftmaxKind kind, const T* dy, const T* y, T* dx, std::size_t rows, std::size_t cols,
                      WriteMode mode) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    T* dxr = dx + r * cols;
    double dot = 0;
    if (kind == SoftmaxKind::softmax) {
      for (std::size_t c = 0; c < cols; ++c) dot += static_cast<double>(dyr[c]) * yr[c];
      for (std::size_t c = 0; c < cols; ++c)
        write(dxr + c, softmax_backward_formula(dyr[c], yr[c], static_cast<T>(dot)), mode);
    } else {
      for (std::size_t c = 0; c < cols; ++c) dot += dyr[c];
      for (std::size_t c = 0; c < cols; ++c)
        write(dxr + c, log_softmax_backward_formula(dyr[c], yr[c], static_cast<T>(dot)), mode);
    }
  }
}

template <class T, class Target>
void cross_entropy_forward(const T* logits, const Target* targets, T* loss, T* row_max, T* row_sum, std::size_t rows,
                           std::size_t cols, DeviceErrorRecord* error) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    const RowStats<T> s = row_stats(row, cols);
    row_max[r] = s.max;
    row_sum[r] = static_cast<T>(s.sum);
    if (!valid_target(targets[r], cols)) {
      loss[r] = T(0);
      raise_target_error(error, static_cast<long long>(targets[r]), r, cols);
      continue;
    }
    loss[r] = cross_entropy_loss_formula(row[targets[r]], s.max, s.log_sum());
  }
}

template <class T, class Target>
void cross_entropy_backward(const T* logits, const Target* targets, const T* row_max, const T* row_sum,
                            const T* grad_scale, T row_scale, T* dlogits, std::size_t rows, std::size_t cols,
                            WriteMode mode) {
  const T scale = *grad_scale * row_scale;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T* drow = dlogits + r * cols;
    const long long target = static_cast<long long>(targets[r]);
    const T inv = RowStats<T>{row_max[r], static_cast<double>(row_sum[r])}.inv_sum();
    for (std::size_t c = 0; c < cols; ++c)
      write(drow + c,
            cross_entropy_grad_formula(softmax_numerator(row[c], row_max[r]), inv, static_cast<long long>(c) == target,
                                       scale),
            mode);
  }
}

template <class T, class Target>
void cross_entropy_fused(const T* logits, const Target* targets, T* dlogits, T* row_loss, T* batch_loss, T* loss_sum,
                         std::size_t rows, std::size_t cols, T row_scale, DeviceErrorRecord* error) {
  double total = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T* drow = dlogits + r * cols;
    if (!valid_target(targets[r], cols)) {
      row_loss[r] = T(0);
      for (std::size_t c = 0; c < cols; ++c) drow[c] = T(0);
      raise_target_error(error, static_cast<long long>(targets[r]), r, cols);
      continue;
    }
    const std::size_t target = static_cast<std::size_t>(targets[r]);
    // One exp per element: the numerators go into the gradient row while summing.
    T max = -std::numeric_limits<T>::infinity();
    for (std::size_t c = 0; c < cols; ++c) max = row[c] > max ? row[c] : max;
    double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      drow[c] = softmax_numerator(row[c], max);
      sum += static_cast<double>(drow[c]);
    }
    const RowStats<T> s{max, sum};
    const T inv = s.inv_sum();
    for (std::size_t c = 0; c < cols; ++c) drow[c] = cross_entropy_grad_formula(drow[c], inv, c == target, row_scale);
    row_loss[r] = cross_entropy_loss_formula(row[target], max, s.log_sum());
    total += static_cast<double>(row_loss[r]);
  }
  if (batch_loss) *batch_loss = static_cast<T>(total * static_cast<double>(row_scale));
  if (loss_sum) *loss_sum += static_cast<T>(total);
  if (!std::isfinite(total)) raise_error_on_host(error, DeviceErrorCode::non_finite, OpTag::loss_check, 0, 0, 0);
}

#define EMBER_INSTANTIATE(T)                                                                                         \
  template void softmax_forward<T>(SoftmaxKind, const T*, T*, std::size_t, std::size_t);                             \
  template void softmax_backward<T>(SoftmaxKind, const T*, const T*, T*, std::size_t, std::size_t, WriteMode);       \
  template void cross_entropy_forward<T, std::int32_t>(const T*, const std::int32_t*, T*, T*, T*, std::size_t,       \
                                                       std::size_t, DeviceErrorRecord*);                             \
  template void cross_entropy_forward<T, std::int64_t>(const T*, const std::int64_t*, T*, T*, T*, std::size_t,       \
                                                       std::size_t, DeviceErrorRecord*);                             \
  template void cross_entropy_backward<T, std::int32_t>(const T*, const std::int32_t*, const T*, const T*, const T*, \
                                                        T, T*, std::size_t, std::size_t, WriteMode);                 \
  template void cross_entropy_backward<T, std::int64_t>(const T*, const std::int64_t*, const T*, const T*, const T*, \
                                                        T, T*, std::size_t, std::size_t, WriteMode);                 \
  template void cross_entropy_fused<T, std::int32_t>(const T*, const std::int32_t*, T*, T*, T*, T*, std::size_t,     \
                                                     std::size_t, T, DeviceErrorRecord*);                            \
  template void cross_entropy_fused<T, std::int64_t>(const T*, const std::int64_t*, T*, T*, T*, T*, std::size_t,     \
                                                     std::size_t, T, DeviceErrorRecord*);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
