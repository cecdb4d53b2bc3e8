// Matrix products: GEMMs and convolutions.
#include "apps/bench/case.h"
#include "core/ops/dispatch.h"
#include "kernels/conv.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

namespace ember::apps::bench {
namespace {

namespace kc = kernels::cpu;
using kernels::Transpose;

// One input set: c = a·b with a [m, k] and b [k, n], either transposed.
struct Gemm {
  Transpose ta, tb;
  std::size_t m, n, k, lda, ldb;
  Tensor a, b, c;
  std::vector<Tensor*> per_set() { return {&a, &b, &c}; }
};

Tensor on_host(const std::vector<float>& v) { return from_vector(v, {static_cast<std::int64_t>(v.size())}); }

// The bf16 GEMM's input set: c (f32) = a·op(b), a and b in bf16.
struct GemmBf16 {
  Transpose tb;
  std::size_t m, n, k, ldb;
  Tensor a, b, c;
  std::vector<Tensor*> per_set() { return {&a, &b, &c}; }
};

// The same shapes in bf16 with f32 accumulation (kernels/gemm_bf16.h): the best path this CPU has,
// and, at the MLP's smaller shapes, the scalar one checked against it bit for bit (at ~2 GFLOP/s
// the larger ones would take seconds a call, minutes under the sanitizers). Compare with the gemm
// family's f32 rates.
void add_bf16_gemm(std::vector<Case>& cases, const Arena& arena, std::size_t m, std::size_t n, std::size_t k,
                   Transpose tb, const std::string& label) {
  const GemmBf16 host{tb,
                      m,
                      n,
                      k,
                      tb == Transpose::no ? n : k,
                      on_host(random_vector(m * k, m)).to(DType::bf16),
                      on_host(random_vector(k * n, n)).to(DType::bf16),
                      zeros({static_cast<std::int64_t>(m * n)})};
  const double flops = 2.0 * m * n * k, bytes = 2.0 * (m * k + k * n) + 4.0 * m * n;
  auto run_with = [](kc::Bf16GemmPath path) {
    return [path](Device, const GemmBf16& g) {
      kc::gemm_bf16(g.tb, g.m, g.n, g.k, g.a.raw<bfloat16>(), g.k, g.b.raw<bfloat16>(), g.ldb, g.c.raw<float>(), g.n,
                    false, path);
    };
  };
  const Entry<GemmBf16> best{.family = "gemm_bf16",
                             .bytes = bytes,
                             .output = &GemmBf16::c,
                             .atol = 0.0,  // the paths agree bit for bit (Note [bf16 GEMM paths])
                             .rtol = 0.0,
                             .run = run_with(kc::best_bf16_gemm_path()),
                             .version = std::string(kc::bf16_gemm_path_name(kc::best_bf16_gemm_path())),
                             .flops = flops};
  std::vector<Entry<GemmBf16>> table{best};
  if (kc::best_bf16_gemm_path() != kc::Bf16GemmPath::scalar && m * n * k <= (std::size_t{1} << 24)) {
    Entry<GemmBf16> scalar = best;
    scalar.version = "scalar";
    scalar.in_use = false;
    scalar.run = run_with(kc::Bf16GemmPath::scalar);
    table.push_back(scalar);
  }
  add_table(cases, arena, host, arena.rotations(static_cast<std::size_t>(bytes)), label, table);
}

// The same passes in bf16 (family conv_bf16, Note [bf16 convolution]): bf16 inputs, f32 results,
// im2col + the bf16 GEMM, where the CPU has AVX512-BF16 (elsewhere bf16 convolutions widen to f32,
// the conv family's figures). Bytes count the 16-bit inputs and the f32 results.
void add_bf16_convolutions(std::vector<Case>& cases, const Arena& arena, const std::string& label,
                           const kernels::ConvGeometry& g, bool data_gradient, const std::vector<float>& x,
                           const std::vector<float>& w, const std::vector<float>& b, const std::vector<float>& dy) {
  if (kc::best_bf16_gemm_path() == kc::Bf16GemmPath::scalar) return;
  auto narrow = [](const std::vector<float>& v) {
    auto out = std::make_shared<std::vector<bfloat16>>(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) (*out)[i] = bfloat16(v[i]);
    return out;
  };
  const auto xb = narrow(x), wb = narrow(w), dyb = narrow(dy);
  const auto bias = std::make_shared<std::vector<float>>(b);
  const auto y = std::make_shared<std::vector<float>>(dy.size()), dx = std::make_shared<std::vector<float>>(x.size());
  const auto dw = std::make_shared<std::vector<float>>(w.size());
  // Floats, so that the workspace's f32 part (on a cache line from its start) is aligned.
  const auto workspace = std::make_shared<std::vector<float>>(kc::conv2d_bf16_workspace_bytes(g) / sizeof(float) + 1);
  const double flops = 2.0 * g.n * g.k * g.c * g.kh * g.kw * g.oh() * g.ow();
  const auto xs = static_cast<double>(x.size()), ws = static_cast<double>(w.size()),
             ys = static_cast<double>(dy.size());
  auto add = [&](const char* what, double bytes, std::function<void(int)> run) {
    cases.push_back({"conv_bf16", what, true, arena.device(), label, bytes, flops, 1, std::move(run), nullptr});
  };
  add("forward im2col+gemm_bf16", 2 * (xs + ws) + 4 * ys,
      [=](int) { kc::conv2d_forward_bf16(xb->data(), wb->data(), bias->data(), y->data(), g, workspace->data()); });
  if (data_gradient)
    add("backward_data im2col+gemm_bf16", 2 * (ys + ws) + 4 * xs,
        [=](int) { kc::conv2d_backward_data_bf16(dyb->data(), wb->data(), dx->data(), g, workspace->data()); });
  add("backward_filter im2col+gemm_bf16", 2 * (xs + ys) + 4 * ws,
      [=](int) { kc::conv2d_backward_filter_bf16(xb->data(), dyb->data(), dw->data(), g, workspace->data()); });
}

// The CNN's convolutions on a GPU through cuDNN (family conv_cudnn), in f32 and in bf16 and f16
// (Note [cuDNN math]: 16-bit data, f32 compute, tensor cores), at batch 256 so that a large GPU has
// work. The version names the precision; f32 is exact (no TF32 unless EMBER_ALLOW_TF32=1).
void add_cudnn_convolutions(std::vector<Case>& cases, const Arena& arena) {
  const Device device = arena.device();
  const bool usable = ext::dispatch_device(
      device, [] { return false; }, [](auto) { return kernels::cuda::cudnn_available(); });
  if (!usable) return;
  struct Layer {
    const char* name;
    kernels::ConvGeometry g;
  };
  for (const Layer& l : {Layer{"conv1 1→32 28² ×256", {256, 1, 28, 28, 32, 3, 3, 1, 0}},
                         Layer{"conv2 32→64 26² ×256", {256, 32, 26, 26, 64, 3, 3, 1, 0}}})
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const kernels::ConvGeometry g = l.g;
      const auto tensor = [&](std::size_t n, std::uint64_t seed) {
        return on_host(random_vector(n, seed)).to(dtype).to(device);
      };
      const std::size_t xs = g.n * g.c * g.h * g.w, ws = g.k * g.c * g.kh * g.kw, ys = g.n * g.k * g.oh() * g.ow();
      const Tensor x = tensor(xs, 1), w = tensor(ws, 2), dy = tensor(ys, 3), y = tensor(ys, 4), dx = tensor(xs, 5),
                   dw = tensor(ws, 6);
      const double flops = 2.0 * static_cast<double>(g.n * g.k * g.oh() * g.ow() * g.c * g.kh * g.kw);
      const double element = static_cast<double>(dtype_size(dtype));
      const std::string precision(dtype_name(dtype));
      const auto add = [&](const char* what, double elements, auto call) {
        auto run = [=](int) {
          visit_dtype(dtype, [&](auto zero) {
            using T = decltype(zero);
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>)
              ext::dispatch_device(
                  device, [] {}, [&](auto stream) { call(T{}, stream); });
          });
        };
        cases.push_back({"conv_cudnn", std::string(what) + " " + precision, true, device, l.name, element * elements,
                         flops, 1, std::move(run), nullptr});
      };
      add("forward", xs + ws + ys, [=](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::conv2d_forward(x.raw<T>(), w.raw<T>(), y.raw<T>(), g, stream);
      });
      add("backward_data", ys + ws + xs, [=](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::conv2d_backward_data(dy.raw<T>(), w.raw<T>(), dx.raw<T>(), g, stream);
      });
      add("backward_filter", xs + ys + ws, [=](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::conv2d_backward_filter(x.raw<T>(), dy.raw<T>(), dw.raw<T>(), g, stream);
      });
    }
}

}  // namespace

// GEMMs of the MLP's shapes and a large square one; on the CPU, the kernel in use (ember's on a CPU
// with AVX512F: Note [f32 GEMM on AVX-512]), the library's (OpenBLAS) beside it, and the builtin.
void add_gemms(std::vector<Case>& cases, const Arena& arena, bool quick) {
  const bool gpu = arena.device().is_cuda();
  struct Shape3 {
    std::size_t m, n, k;
    Transpose ta, tb;
    const char* name;
  };
  std::vector<Shape3> shapes{{128, 32, 784, Transpose::no, Transpose::yes, "x·W1ᵀ 784-32"},
                             {32, 784, 128, Transpose::yes, Transpose::no, "gᵀ·x 784-32"},
                             {128, 128, 784, Transpose::no, Transpose::yes, "x·W1ᵀ 784-128"},
                             {128, 512, 784, Transpose::no, Transpose::yes, "x·W1ᵀ 784-512"}};
  if (!quick)  // the wide MLP's backward products, and a large square one
    shapes.insert(shapes.end(), {{512, 784, 128, Transpose::yes, Transpose::no, "gᵀ·x 784-512"},
                                 {128, 512, 256, Transpose::no, Transpose::no, "g·W2 512-256"},
                                 {1024, 1024, 1024, Transpose::no, Transpose::no, "square"},
                                 // the ViT's (batch 64 × 50 tokens, width 64, MLP 128): forward,
                                 // input gradient and weight gradient of its qkv and MLP layers
                                 {3200, 192, 64, Transpose::no, Transpose::yes, "ViT x·Wqkvᵀ"},
                                 {3200, 64, 128, Transpose::no, Transpose::yes, "ViT x·W2ᵀ"},
                                 {3200, 64, 192, Transpose::no, Transpose::no, "ViT g·Wqkv"},
                                 {3200, 128, 64, Transpose::no, Transpose::no, "ViT g·W2"},
                                 {192, 64, 3200, Transpose::yes, Transpose::no, "ViT gᵀ·x qkv"},
                                 {64, 128, 3200, Transpose::yes, Transpose::no, "ViT gᵀ·x W2"}});
  for (const Shape3& s : shapes) {
    const Gemm host{s.ta,
                    s.tb,
                    s.m,
                    s.n,
                    s.k,
                    s.ta == Transpose::no ? s.k : s.m,
                    s.tb == Transpose::no ? s.n : s.k,
                    on_host(random_vector(s.m * s.k, s.m)),
                    on_host(random_vector(s.k * s.n, s.n)),
                    zeros({static_cast<std::int64_t>(s.m * s.n)})};
    const std::string label =
        std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " + s.name;
    const double flops = 2.0 * s.m * s.n * s.k, bytes = 4.0 * (s.m * s.k + s.k * s.n + s.m * s.n);
    // A length-k dot product of values in [−2, 2] may round differently by k·ε·Σ|a·b| ≤ k²·4ε.
    const double tol = 4.0 * static_cast<double>(s.k * s.k) * std::numeric_limits<float>::epsilon();
    const Entry<Gemm> in_use{.family = "gemm",
                             .bytes = bytes,
                             .output = &Gemm::c,
                             .atol = tol,
                             .rtol = 0.0,
                             .run =
                                 [](Device d, const Gemm& g) {
                                   EMBER_BENCH_CALL(d, gemm, g.ta, g.tb, g.m, g.n, g.k, 1.0f, f32(g.a), g.lda, f32(g.b),
                                                    g.ldb, 0.0f, f32(g.c), g.n);
                                 },
                             .version = gpu                     ? "cublas"
                                        : kc::cpu_has_avx512f() ? "ember_avx512"
                                                                : kc::blas_name(),
                             .flops = flops};
    std::vector<Entry<Gemm>> table{in_use};
    if (!gpu && kc::cpu_has_avx512f()) {
      Entry<Gemm> library = in_use;
      library.version = kc::blas_name();
      library.in_use = false;
      library.run = [](Device, const Gemm& g) {
        kc::gemm_library(g.ta, g.tb, g.m, g.n, g.k, 1.0f, f32(g.a), g.lda, f32(g.b), g.ldb, 0.0f, f32(g.c), g.n);
      };
      table.push_back(library);
    }
    if (!gpu && std::string(kc::blas_name()) != "builtin") {
      Entry<Gemm> builtin = in_use;
      builtin.version = "builtin";
      builtin.in_use = false;
      builtin.run = [](Device, const Gemm& g) {
        kc::gemm_builtin(g.ta, g.tb, g.m, g.n, g.k, 1.0f, f32(g.a), g.lda, f32(g.b), g.ldb, 0.0f, f32(g.c), g.n);
      };
      table.push_back(builtin);
    }
    add_table(cases, arena, host, arena.rotations(4 * (s.m * s.k + s.k * s.n + s.m * s.n)), label, table);
    if (!gpu && s.ta == Transpose::no) add_bf16_gemm(cases, arena, s.m, s.n, s.k, s.tb, label);
  }
}

// The MNIST CNN's convolutions at batch 64 (CPU): forward, backward data and backward filter as
// the framework runs them (kernels/conv.h: im2col + GEMM image by image for conv1, Winograd
// F(4×4, 3×3) for conv2, whose forward also runs fused with its ReLU and pooling), each next to
// the bare GEMMs that im2col would need (family conv_gemm): FLOPs are the direct algorithm's, so
// a rate above the GEMMs' is work saved. The first convolution's input gradient is never needed
// (the images need none).
void add_convolutions(std::vector<Case>& cases, const Arena& arena) {
  if (arena.device().is_cuda()) return add_cudnn_convolutions(cases, arena);
  struct Layer {
    const char* name;
    kernels::ConvGeometry g;
    bool data_gradient;
  };
  for (const Layer& l : {Layer{"conv1 1→32 28²", {64, 1, 28, 28, 32, 3, 3, 1, 0}, false},
                         Layer{"conv2 32→64 26²", {64, 32, 26, 26, 64, 3, 3, 1, 0}, true}}) {
    const kernels::ConvGeometry g = l.g;
    const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow(), image = g.c * g.h * g.w;
    auto x = std::make_shared<std::vector<float>>(random_vector(g.n * image, 1));
    auto w = std::make_shared<std::vector<float>>(random_vector(g.k * patch, 2));
    auto b = std::make_shared<std::vector<float>>(random_vector(g.k, 3));
    auto dy = std::make_shared<std::vector<float>>(random_vector(g.n * g.k * out, 4));
    auto y = std::make_shared<std::vector<float>>(g.n * g.k * out);
    auto dx = std::make_shared<std::vector<float>>(g.n * image);
    auto dw = std::make_shared<std::vector<float>>(g.k * patch);
    const kernels::PoolGeometry pool{g.n, g.k, g.oh(), g.ow(), 2, 2};
    auto pooled = std::make_shared<std::vector<float>>(g.n * g.k * pool.oh() * pool.ow());
    auto argmax = std::make_shared<std::vector<std::int32_t>>(pooled->size());
    auto columns = std::make_shared<std::vector<float>>(std::max(
        {kc::conv2d_workspace_elements(g), patch * out, kc::conv2d_relu_max_pool2d_workspace_elements(g, pool)}));
    const std::string algorithm = kc::winograd_applies(g) ? " winograd" : " im2col+gemm";
    const double flops = 2.0 * g.n * g.k * patch * out;
    const std::string label = l.name;
    // Bytes: the tensors each pass reads and writes once (the columns stay in cache, or not).
    auto add = [&](const char* what, double tensors, std::function<void(int)> conv, std::function<void(int)> bare) {
      const double bytes = 4.0 * tensors;
      cases.push_back({"conv", std::string(what) + algorithm, true, arena.device(), label, bytes, flops, 1,
                       std::move(conv), nullptr});
      if (bare)
        cases.push_back({"conv_gemm", std::string(what) + " gemm only", false, arena.device(), label, bytes, flops, 1,
                         std::move(bare), nullptr});
    };
    const double x_size = static_cast<double>(g.n * image), w_size = static_cast<double>(g.k * patch),
                 y_size = static_cast<double>(g.n * g.k * out);
    add(
        "forward", x_size + w_size + y_size,
        [=](int) { kc::conv2d_forward(x->data(), w->data(), b->data(), y->data(), g, columns->data()); },
        [=](int) {
          for (std::size_t i = 0; i < g.n; ++i)
            kc::gemm(Transpose::no, Transpose::no, g.k, out, patch, 1.0f, w->data(), patch, columns->data(), out, 0.0f,
                     y->data() + i * g.k * out, out);
        });
    if (kc::winograd_pools_tiles(g, pool))
      add(
          "forward+relu+pool", x_size + w_size + y_size / 2,  // pooled values and their int32 positions
          [=](int) {
            kc::conv2d_relu_max_pool2d_forward(x->data(), w->data(), b->data(), pooled->data(), argmax->data(), g, pool,
                                               columns->data());
          },
          nullptr);
    if (l.data_gradient)
      add(
          "backward_data", y_size + w_size + x_size,
          [=](int) { kc::conv2d_backward_data(dy->data(), w->data(), dx->data(), g, columns->data()); },
          [=](int) {
            for (std::size_t i = 0; i < g.n; ++i)
              kc::gemm(Transpose::yes, Transpose::no, patch, out, g.k, 1.0f, w->data(), patch,
                       dy->data() + i * g.k * out, out, 0.0f, columns->data(), out);
          });
    add(
        "backward_filter", x_size + y_size + w_size,
        [=](int) { kc::conv2d_backward_filter(x->data(), dy->data(), dw->data(), g, columns->data()); },
        [=](int) {
          for (std::size_t i = 0; i < g.n; ++i)
            kc::gemm(Transpose::no, Transpose::yes, g.k, patch, out, 1.0f, dy->data() + i * g.k * out, out,
                     columns->data(), out, i == 0 ? 0.0f : 1.0f, dw->data(), patch);
        });
    add_bf16_convolutions(cases, arena, label, g, l.data_gradient, *x, *w, *b, *dy);
  }
}

}  // namespace ember::apps::bench
