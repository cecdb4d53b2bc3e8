// The fused optimizer updates over one parameter of n elements.
#include <cstring>

#include "apps/bench/case.h"
#include "kernels/optim.h"

namespace ember::apps::bench {

void add_optimizers(std::vector<Case>& cases, const Arena& arena, std::size_t n) {
  namespace kc = kernels::cpu;
  const Device d = arena.device();
  const Shape shape{static_cast<std::int64_t>(n)};
  const auto ph = random_vector(n, 11), gh = random_vector(n, 12), mh = random_vector(n, 13),
             vh = random_vector(n, 14, 0.0f, 1.0f);
  const kernels::SgdConfig sgd{0.9f, 0.0f, 1e-4f, false};
  const kernels::AdamConfig adam_config{0.9f, 0.999f, 1e-8f, 1e-2f, true};
  for (bool adam : {false, true}) {
    const int rot = arena.rotations((adam ? 28 : 20) * n);
    auto p = std::make_shared<std::vector<Tensor>>(arena.copies(ph, shape, rot));
    auto g = std::make_shared<std::vector<Tensor>>(arena.copies(gh, shape, rot));
    auto m = std::make_shared<std::vector<Tensor>>(arena.copies(mh, shape, rot));
    auto v = std::make_shared<std::vector<Tensor>>(arena.copies(vh, shape, rot));
    auto lr = std::make_shared<Tensor>(full({1}, 0.01, {.device = d}));
    // The step count stays at 5 (advance_steps is not part of the update's timing).
    auto step = std::make_shared<Tensor>(full({1}, 5.0, {.device = d}));
    // Each set's slot table, in the device's memory (what the kernels read) and on the host.
    auto slots = std::make_shared<std::vector<Tensor>>();
    auto host_slots = std::make_shared<std::vector<kernels::ParamSlot>>();
    for (int r = 0; r < rot; ++r) {
      kernels::ParamSlot slot{f32((*p)[r]), f32((*g)[r]), f32((*m)[r]), f32((*v)[r]), f32(*step), n};
      host_slots->push_back(slot);
      std::vector<std::uint8_t> bytes(sizeof slot);
      std::memcpy(bytes.data(), &slot, sizeof slot);
      slots->push_back(from_vector(bytes, {static_cast<std::int64_t>(bytes.size())}).to(d));
    }
    // Captures everything the slots point into (p, g, m, v and step) so that it outlives the case.
    auto run = [=](int r) {
      (void)p, (void)g, (void)m, (void)v, (void)step;
      const auto* s = static_cast<const kernels::ParamSlot*>((*slots)[r].raw_bytes());
      ext::dispatch_device(
          d,
          [&] {
            if (adam)
              kc::adam_step(s, 1, adam_config, f32(*lr));
            else
              kc::sgd_step(s, 1, sgd, f32(*lr));
          },
          [&](auto stream) {
            if (adam)
              kernels::cuda::adam_step({s, &(*host_slots)[r], 1}, n, adam_config, f32(*lr), nullptr, stream);
            else
              kernels::cuda::sgd_step({s, &(*host_slots)[r], 1}, n, sgd, f32(*lr), nullptr, stream);
          });
    };
    Case c{adam ? "adamw_step" : "sgd_momentum_step",
           "v1",
           true,
           d,
           "n=" + std::to_string(n),
           (adam ? 28.0 : 20.0) * n,
           0,
           rot,
           run,
           nullptr};
    if (d.is_cuda()) {
      // Check one update from fresh copies of the host state against the CPU twin (the update
      // is in place: a poisoned output would be its input).
      c.check = [=]() {
        (*p)[0].copy_(from_vector(ph, shape));
        (*m)[0].copy_(from_vector(mh, shape));
        (*v)[0].copy_(from_vector(vh, shape));
        run(0);
        std::vector<float> pw = ph, mw = mh, vw = vh;
        float step_host = 5.0f, lr_host = 0.01f;
        const kernels::ParamSlot slot{pw.data(), gh.data(), mw.data(), vw.data(), &step_host, n};
        if (adam)
          kc::adam_step(&slot, 1, adam_config, &lr_host);
        else
          kc::sgd_step(&slot, 1, sgd, &lr_host);
        return compare((*p)[0].to_vector<float>(), pw, 1e-6, 1e-5);
      };
    }
    cases.push_back(std::move(c));
  }
}

}  // namespace ember::apps::bench
