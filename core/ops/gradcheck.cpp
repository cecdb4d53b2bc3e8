// Finite-difference gradient checking.
#include "core/ops/gradcheck.h"

#include <cmath>
#include <sstream>

#include "base/error.h"
#include "core/tensor/autograd.h"

namespace ember {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined() && inputs[i].dtype() == DType::f64 && inputs[i].device().is_cpu(), DTypeError,
                "gradcheck: input ", i, " must be an f64 CPU tensor (finite differences need double precision)");
  }
  // Analytical Jacobian rows: one backward pass per output element, with a one-hot gradient.
  Tensor output = fn(inputs);
  EMBER_CHECK(output.dtype() == DType::f64, DTypeError, "gradcheck: the function must return an f64 tensor");
  const std::size_t n_out = static_cast<std::size_t>(output.numel());
  std::vector<std::vector<double>> analytical(inputs.size());  // [input][out * n_in + in]
  for (std::size_t i = 0; i < inputs.size(); ++i)
    analytical[i].assign(n_out * static_cast<std::size_t>(inputs[i].numel()), 0.0);
  for (std::size_t j = 0; j < n_out; ++j) {
    std::vector<Tensor> fresh;
    for (const Tensor& t : inputs) {
      Tensor copy = t.detach().clone();
      if (t.requires_grad()) copy.set_requires_grad(true);
      fresh.push_back(copy);
    }
    Tensor out = fn(fresh);
    if (!out.requires_grad()) break;  // nothing depends on the inputs: the Jacobian is zero
    std::vector<double> onehot(n_out, 0.0);
    onehot[j] = 1.0;
    out.backward(from_vector(onehot, out.shape()));
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const Tensor g = fresh[i].grad();
      if (!g.defined()) continue;
      const double* gp = g.data<double>();
      const std::size_t n_in = static_cast<std::size_t>(inputs[i].numel());
      for (std::size_t k = 0; k < n_in; ++k) analytical[i][j * n_in + k] = gp[k];
    }
  }

  GradcheckResult result;
  result.max_abs_error.assign(inputs.size(), 0.0);
  result.max_rel_error.assign(inputs.size(), 0.0);
  std::ostringstream report;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    std::vector<Tensor> work;
    for (const Tensor& t : inputs) work.push_back(t.detach().clone());
    double* x = work[i].data<double>();
    const std::size_t n_in = static_cast<std::size_t>(inputs[i].numel());
    double worst_excess = 0;
    std::string worst;
    for (std::size_t k = 0; k < n_in; ++k) {
      const double original = x[k];
      std::vector<double> plus, minus;
      {
        NoGradGuard no_grad;
        x[k] = original + eps;
        plus = fn(work).to_vector<double>();
        x[k] = original - eps;
        minus = fn(work).to_vector<double>();
        x[k] = original;
      }
      for (std::size_t j = 0; j < n_out; ++j) {
        const double numerical = (plus[j] - minus[j]) / (2 * eps);
        const double a = analytical[i][j * n_in + k];
        const double abs_err = std::abs(a - numerical);
        result.max_abs_error[i] = std::max(result.max_abs_error[i], abs_err);
        if (numerical != 0) result.max_rel_error[i] = std::max(result.max_rel_error[i], abs_err / std::abs(numerical));
        const double excess = abs_err - (atol + rtol * std::abs(numerical));
        if (!(excess <= 0)) {  // also catches NaN
          result.passed = false;
          if (!(excess <= worst_excess)) {
            worst_excess = std::isnan(excess) ? INFINITY : excess;
            std::ostringstream w;
            w << "input " << i << ", element " << k << ", output " << j << ": analytical " << a << " vs numerical "
              << numerical;
            worst = w.str();
          }
        }
      }
    }
    if (!worst.empty()) report << worst << "\n";
  }
  result.report = report.str();
  return result;
}

}  // namespace ember
