// Autocast's scopes, its cast cache and the policy table (the per-thread switch:
// core/tensor/autocast_state.cpp).
#include "core/ops/autocast.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "core/tensor/autograd.h"

namespace ember {
namespace {

using enum CastPolicy;

thread_local int t_open_scopes = 0;  // enabled scopes open on this thread; the cache lives while > 0
// Parameters' lower-precision casts: the source (kept alive, so its address is not reused) and
// the cast, by the source's impl and the target dtype.
struct CachedCast {
  Tensor source, cast;
};
thread_local std::unordered_map<const TensorImpl*, std::array<CachedCast, 2>> t_cache;

Tensor lower(const Tensor& t, DType dtype) {
  if (!(t.is_leaf() && t.requires_grad() && autograd::is_grad_enabled())) return t.to(dtype);
  CachedCast& slot = t_cache[t.impl()][dtype == DType::bf16 ? 0 : 1];
  if (!slot.cast.defined() || !slot.source.is_same(t)) slot = {t, t.to(dtype)};
  return slot.cast;
}

int width(DType d) { return d == DType::f64 ? 3 : d == DType::f32 ? 2 : 1; }

}  // namespace

std::string_view cast_policy_name(CastPolicy policy) {
  switch (policy) {
    case none:
      return "none";
    case lower_precision:
      return "lower_precision";
    case fp32:
      return "fp32";
    case promote:
      return "promote";
  }
  return "?";
}

CastPolicy autocast_policy(OpKey op, Device device) {
  const OpPolicy& policy = op_entry(op).policy;
  return device.is_cuda() ? policy.cuda : policy.cpu;
}

AutocastScope::AutocastScope(Device device, DType dtype, bool enabled) : type_(device.type) {
  EMBER_CHECK(dtype == DType::bf16 || dtype == DType::f16, ValueError, "autocast: dtype must be bf16 or f16, got ",
              dtype, " (autocast lowers products to a 16-bit type; for f32 leave it off)");
  AutocastState& s = autocast_state(type_);
  was_enabled_ = s.enabled;
  was_dtype_ = s.dtype;
  s = {enabled, dtype};
  if (enabled) ++t_open_scopes;
  counted_ = enabled;
}

AutocastScope::~AutocastScope() {
  if (counted_ && --t_open_scopes == 0) t_cache.clear();
  autocast_state(type_) = {was_enabled_, was_dtype_};
}

namespace ext {

// With autocast off on every device (the common case) an op's check copies and allocates nothing.
bool any_enabled() { return autocast_state(DeviceType::cpu).enabled || autocast_state(DeviceType::cuda).enabled; }

AutocastInputs::AutocastInputs(OpPolicy policy, std::initializer_list<const Tensor*> inputs) {
  if (!any_enabled()) return;
  for (const Tensor* t : inputs) cast_.push_back(*t);
  apply(policy);
}

AutocastInputs::AutocastInputs(OpPolicy policy, std::span<const Tensor> inputs) {
  if (!any_enabled()) return;
  cast_.assign(inputs.begin(), inputs.end());
  apply(policy);
}

void AutocastInputs::apply(OpPolicy op_policy) {
  const auto first = std::find_if(cast_.begin(), cast_.end(), [](const Tensor& t) { return t.defined(); });
  if (first == cast_.end()) return;
  const Device device = first->device();
  if (!autocast_enabled(device)) return;
  const CastPolicy policy = device.is_cuda() ? op_policy.cuda : op_policy.cpu;
  if (policy == none) return;
  DType widest = DType::bf16;
  bool any_bf16 = false, any_f16 = false;
  for (const Tensor& t : cast_) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    if (width(t.dtype()) > width(widest)) widest = t.dtype();
    any_bf16 |= t.dtype() == DType::bf16;
    any_f16 |= t.dtype() == DType::f16;
  }
  if (widest == DType::bf16 && any_f16) widest = any_bf16 ? DType::f32 : DType::f16;  // bf16 with f16: f32
  const DType lowered = autocast_dtype(device);
  for (Tensor& t : cast_) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    Tensor cast = t;
    if (policy == lower_precision && t.dtype() != DType::f64 && t.dtype() != lowered) cast = lower(t, lowered);
    if (policy == fp32 && is_half(t.dtype())) cast = t.to(DType::f32);
    if (policy == promote && t.dtype() != widest) cast = t.to(widest);
    changed_ |= !cast.is_same(t);
    t = cast;
  }
}

}  // namespace ext
}  // namespace ember
