// ember's CPU thread pool (Note [CPU threads] in kernels/parallel.h): every parallel kernel gives
// the same bits at 1, 2 and 3 threads (shapes large enough to be cut into several parts), the pool
// runs each part once and passes on exceptions, and the threads that compute are the ones asked
// for — counted from /proc, with OpenBLAS's own pool idle.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gather.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layer_norm.h"
#include "kernels/optim.h"
#include "kernels/parallel.h"
#include "kernels/reduce.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::kernels::cpu;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<bfloat16> random_bf16(std::size_t n, unsigned seed) {
  const std::vector<float> f = random_floats(n, seed);
  return {f.begin(), f.end()};
}

// The bytes of every output a kernel run produced, to compare runs bit for bit.
using Bytes = std::vector<unsigned char>;
template <class T>
void append(Bytes& out, const std::vector<T>& v) {
  const std::size_t at = out.size(), bytes = v.size() * sizeof(T);
  out.resize(at + bytes);
  if (bytes > 0) std::memcpy(out.data() + at, v.data(), bytes);
}

// Runs `kernel` (which returns its outputs' bytes) at 1, 2 and 3 threads: the same bytes each time.
void same_bits_at_any_thread_count(const std::function<Bytes()>& kernel) {
  set_compute_threads(1);
  const Bytes one = kernel();
  REQUIRE_FALSE(one.empty());
  for (int threads : {2, 3}) {
    INFO(threads << " threads");
    set_compute_threads(threads);
    const Bytes many = kernel();
    CHECK(many.size() == one.size());
    CHECK(std::memcmp(many.data(), one.data(), std::min(many.size(), one.size())) == 0);
  }
  set_compute_threads(1);
}

// The thread ids of this process and each one's name and CPU ticks (user + system), from /proc.
struct TaskInfo {
  int tid;
  std::string name;
  long ticks;
};
std::vector<TaskInfo> tasks() {
  std::vector<TaskInfo> out;
  DIR* dir = opendir("/proc/self/task");
  REQUIRE(dir != nullptr);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + entry->d_name;
    std::ifstream comm(base + "/comm"), stat(base + "/stat");
    TaskInfo info{std::stoi(entry->d_name), "", 0};
    std::getline(comm, info.name);
    std::string line;
    std::getline(stat, line);
    // Fields after the name's closing parenthesis: state is field 3; utime and stime are 14 and 15.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 15 && rest >> field; ++i)
      if (i == 14 || i == 15) info.ticks += std::stol(field);
    out.push_back(info);
  }
  closedir(dir);
  return out;
}

}  // namespace

TEST_CASE("parallel: the pool runs every part once, in contiguous runs, and passes exceptions on") {
  for (int threads : {1, 2, 3, 5}) {
    set_compute_threads(threads);
    for (std::size_t parts : {0, 1, 2, 3, 7, 64}) {
      std::vector<std::atomic<int>> runs(parts);
      std::atomic<int> calls{0};
      parallel_parts(parts, [&](std::size_t first, std::size_t last) {
        ++calls;
        for (std::size_t p = first; p < last; ++p) ++runs[p];
      });
      for (std::size_t p = 0; p < parts; ++p) CHECK(runs[p] == 1);
      CHECK(calls <= std::max(1, threads));
    }
    // A part that throws: the exception reaches the caller, and the pool still works after it.
    CHECK_THROWS_AS(parallel_parts(4,
                                   [](std::size_t first, std::size_t) {
                                     if (first > 0 || compute_threads() == 1) throw std::runtime_error("part failed");
                                   }),
                    std::runtime_error);
    std::atomic<int> after{0};
    parallel_parts(4, [&](std::size_t first, std::size_t last) { after += static_cast<int>(last - first); });
    CHECK(after == 4);
  }
  // Nested loops run on the thread that calls them.
  set_compute_threads(2);
  // (Catch's assertions are not thread-safe: the parts only count, and the test checks after.)
  std::atomic<int> inner{0}, inside{0};
  parallel_parts(2, [&](std::size_t, std::size_t) {
    inside += in_parallel_region() ? 1 : 0;
    parallel_parts(3, [&](std::size_t first, std::size_t last) { inner += static_cast<int>(last - first); });
  });
  CHECK(inside == 2);
  CHECK(inner == 6);
  CHECK_FALSE(in_parallel_region());
  set_compute_threads(1);
}

TEST_CASE("parallel: the threads that compute are the ones asked for, OpenBLAS's own pool idle") {
  // Large GEMMs cut into blocks on ember's pool, at 3 threads: two workers named ember-cpu-N,
  // and no other thread but this one spends CPU time (a second OpenBLAS pool would show here).
  // OpenBLAS's threads poll for a while after the library starts (its THREAD_TIMEOUT) before they
  // sleep: wait until the other threads' CPU time stands still, then count from there.
  auto others_ticks = [] {
    long sum = 0;
    for (const TaskInfo& t : tasks()) sum += t.tid != getpid() ? t.ticks : 0;
    return sum;
  };
  for (long last = -1, now = others_ticks(); now != last; last = now, now = others_ticks())
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto before = tasks();
  set_compute_threads(3);
  const std::size_t n = 384;
  const auto a = random_floats(n * n, 1), b = random_floats(n * n, 2);
  std::vector<float> c(n * n);
  // gemm() in ember's kernel where the CPU has AVX512F, and OpenBLAS's blocks, whose pool must idle.
  for (int i = 0; i < 75; ++i)
    for (auto* product : {&gemm<float>, &gemm_library<float>})
      product(Transpose::no, Transpose::no, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  const auto after = tasks();
  int workers = 0;
  long worker_ticks = 0, others = 0;
  for (const TaskInfo& t : after) {
    long earlier = 0;
    for (const TaskInfo& b0 : before)
      if (b0.tid == t.tid) earlier = b0.ticks;
    if (t.name.rfind("ember-cpu-", 0) == 0) {
      ++workers;
      worker_ticks += t.ticks - earlier;
    } else if (t.tid != getpid()) {
      others += t.ticks - earlier;
    }
  }
  CHECK(workers == 2);
  CHECK(compute_threads() == 3);
  CHECK(worker_ticks > 0);  // the workers did compute
  // Nothing else did: a tick of slack for the clock's granularity, and a tenth of the workers'
  // time for a sanitizer's own background thread (an OpenBLAS pool would take about as much as
  // the workers).
  CHECK(others <= std::max(1L, worker_ticks / 10));
  set_compute_threads(1);
  int left = 0;
  for (const TaskInfo& t : tasks()) left += t.name.rfind("ember-cpu-", 0) == 0 ? 1 : 0;
  CHECK(left == 0);
}

TEST_CASE("parallel: GEMMs (gemm(), and the library's cut into blocks) give the bits of one call") {
  struct Shape {
    std::size_t m, n, k;
    Transpose ta, tb;
  };
  const Shape shapes[] = {{128, 512, 784, Transpose::no, Transpose::yes},  // a wide layer's forward
                          {512, 784, 128, Transpose::yes, Transpose::no},  // its weight gradient
                          {128, 784, 512, Transpose::no, Transpose::no},   // its input gradient
                          {64, 128, 9216, Transpose::no, Transpose::yes},  // the CNN's dense layer
                          {1000, 40, 300, Transpose::no, Transpose::no}};  // tall: cut by rows
  for (const Shape& s : shapes) {
    INFO("m=" << s.m << " n=" << s.n << " k=" << s.k);
    const std::size_t lda = s.ta == Transpose::no ? s.k : s.m, ldb = s.tb == Transpose::no ? s.n : s.k;
    const auto a = random_floats(s.m * s.k, 3), b = random_floats(s.k * s.n, 4), c0 = random_floats(s.m * s.n, 5);
    same_bits_at_any_thread_count([&] {
      Bytes out;
      for (auto* product : {&gemm<float>, &gemm_library<float>}) {
        std::vector<float> c = c0;
        product(s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), s.n);
        append(out, c);
      }
      return out;
    });
  }
  const bool has_bf16 = bf16_gemm_paths().back() == Bf16GemmPath::avx512_bf16;
  // 130 rows: B packed; 64 rows: B read as stored where it is not transposed (Note [bf16 GEMM paths]).
  for (const auto& shape : {std::array<std::size_t, 3>{130, 512, 784}, std::array<std::size_t, 3>{64, 576, 288}})
    for (Transpose tb : {Transpose::no, Transpose::yes}) {
      const std::size_t m = shape[0], n = shape[1], k = shape[2];  // named copies: lambdas capture them
      const auto a = random_bf16(m * k, 6), b = random_bf16(k * n, 7);
      same_bits_at_any_thread_count([&] {
        std::vector<float> c(m * n);
        std::vector<bfloat16> rounded(m * n);
        gemm_bf16(tb, m, n, k, a.data(), k, b.data(), tb == Transpose::no ? n : k, c.data(), n, false);
        gemm_bf16_rounded(tb, m, n, k, a.data(), k, b.data(), tb == Transpose::no ? n : k, rounded.data(), n);
        Bytes out;
        append(out, c);
        append(out, rounded);
        return out;
      });
    }
  if (!has_bf16) WARN("no AVX512-BF16 here: the bf16 GEMM ran its scalar path, which is serial");
}

TEST_CASE("parallel: convolutions (Winograd, im2col, bf16) give the same bits at any thread count") {
  const ConvGeometry geometries[] = {
      {70, 8, 14, 14, 12, 3, 3, 1, 0},  // Winograd: 5 chunks of up to 16 images, backward filter in groups
      {20, 1, 28, 28, 8, 3, 3, 1, 0},   // im2col + GEMM (one input channel)
      {11, 3, 12, 12, 5, 5, 5, 2, 2},   // im2col with stride and padding
  };
  for (const ConvGeometry& g : geometries) {
    INFO("n=" << g.n << " c=" << g.c << " k=" << g.k << " kernel " << g.kh);
    const std::size_t xs = g.n * g.c * g.h * g.w, ws = g.k * g.c * g.kh * g.kw, ys = g.n * g.k * g.oh() * g.ow();
    const auto x = random_floats(xs, 8), w = random_floats(ws, 9), bias = random_floats(g.k, 10),
               dy = random_floats(ys, 11);
    same_bits_at_any_thread_count([&] {
      std::vector<float> workspace(conv2d_workspace_elements(g)), y(ys), dx(xs), dw(ws);
      conv2d_forward(x.data(), w.data(), bias.data(), y.data(), g, workspace.data(), true);
      conv2d_backward_data(dy.data(), w.data(), dx.data(), g, workspace.data());
      conv2d_backward_filter(x.data(), dy.data(), dw.data(), g, workspace.data());
      Bytes out;
      append(out, y);
      append(out, dx);
      append(out, dw);
      return out;
    });
    const auto xb = random_bf16(xs, 12), wb = random_bf16(ws, 13), dyb = random_bf16(ys, 14);
    same_bits_at_any_thread_count([&] {
      std::vector<std::byte> workspace(conv2d_bf16_workspace_bytes(g));
      std::vector<float> y(ys), dx(xs), dw(ws);
      conv2d_forward_bf16(xb.data(), wb.data(), bias.data(), y.data(), g, workspace.data());
      conv2d_backward_data_bf16(dyb.data(), wb.data(), dx.data(), g, workspace.data());
      conv2d_backward_filter_bf16(xb.data(), dyb.data(), dw.data(), g, workspace.data());
      Bytes out;
      append(out, y);
      append(out, dx);
      append(out, dw);
      return out;
    });
  }
  // The fused convolution → ReLU → pooling, in the tiles.
  const ConvGeometry g{20, 16, 14, 14, 24, 3, 3, 1, 1};
  const PoolGeometry p{g.n, g.k, g.oh(), g.ow(), 2, 2};
  const auto x = random_floats(g.n * g.c * g.h * g.w, 15), w = random_floats(g.k * g.c * 9, 16),
             bias = random_floats(g.k, 17);
  same_bits_at_any_thread_count([&] {
    std::vector<float> workspace(conv2d_relu_max_pool2d_workspace_elements(g, p)), pooled(p.n * p.c * p.oh() * p.ow());
    std::vector<std::int32_t> argmax(pooled.size());
    conv2d_relu_max_pool2d_forward(x.data(), w.data(), bias.data(), pooled.data(), argmax.data(), g, p,
                                   workspace.data());
    Bytes out;
    append(out, pooled);
    append(out, argmax);
    return out;
  });
}

TEST_CASE("parallel: pooling, bias, activations, casts, dropout and the optimizers at any thread count") {
  const PoolGeometry p{16, 32, 24, 24, 2, 2};
  const std::size_t in = p.n * p.c * p.h * p.w, out = p.n * p.c * p.oh() * p.ow();
  const auto x = random_floats(in, 20), dy = random_floats(out, 21), bias = random_floats(p.c, 22);
  same_bits_at_any_thread_count([&] {
    std::vector<float> y(out), dx(in), biased = x, dbias(p.c);
    std::vector<std::int32_t> argmax(out);
    max_pool2d_forward(x.data(), y.data(), argmax.data(), p);
    max_pool2d_backward(dy.data(), argmax.data(), dx.data(), p);
    channel_bias_add(biased.data(), bias.data(), p.n, p.c, p.h * p.w);
    channel_bias_grad(x.data(), dbias.data(), p.n, p.c, p.h * p.w);
    Bytes bytes;
    append(bytes, y);
    append(bytes, argmax);
    append(bytes, dx);
    append(bytes, biased);
    append(bytes, dbias);
    return bytes;
  });

  const std::size_t rows = 300, cols = 512, n = rows * cols;
  const auto a = random_floats(n, 23), b = random_floats(n, 24), row_bias = random_floats(cols, 25);
  same_bits_at_any_thread_count([&] {
    std::vector<float> relu(n), sum(n), grad(n), fwd = a, fwd_relu = a, dx(n), dbias(cols), widened(n);
    std::vector<std::uint8_t> mask(n);
    std::vector<float> dropped(n), dropped_back(n);
    std::vector<bfloat16> narrow(n), dnarrow(n), masked_narrow(n), dbias_narrow(cols);
    unary<float>(UnaryOp::relu, a.data(), relu.data(), n);
    binary<float>(BinaryOp::add, a.data(), b.data(), sum.data(), n);
    std::vector<float> column_sums(cols);  // blocks of columns in parallel
    kernels::cpu::sum<float>(a.data(), column_sums.data(), 1, rows, cols, 1.0f);
    activation_grad<float>(ActivationGrad::relu, b.data(), a.data(), grad.data(), n, WriteMode::overwrite, {});
    // GELU on 16 lanes where the CPU has them, pieces cut anywhere (Note [formulas on lanes]).
    std::vector<float> gelu(n), gelu_grad = b;
    unary<float>(UnaryOp::gelu, a.data(), gelu.data(), n);
    activation_grad<float>(ActivationGrad::gelu, b.data(), a.data(), gelu_grad.data(), n, WriteMode::accumulate, {});
    // Layer norm over rows of 512 (Note [layer norm's sums]), with and without γ and β.
    std::vector<float> normed(n), normed_plain(n), mean(rows), invstd(rows), dnormed(n), dy_xhat(n);
    layer_norm_forward(a.data(), row_bias.data(), row_bias.data(), normed.data(), mean.data(), invstd.data(), rows,
                       cols, 1e-5);
    layer_norm_backward(b.data(), a.data(), row_bias.data(), mean.data(), invstd.data(), dnormed.data(), dy_xhat.data(),
                        rows, cols);
    layer_norm_forward<float>(a.data(), nullptr, nullptr, normed_plain.data(), mean.data(), invstd.data(), rows, cols,
                              1e-5);
    bias_forward(fwd.data(), row_bias.data(), rows, cols);
    bias_relu_forward(fwd_relu.data(), row_bias.data(), rows, cols);
    bias_relu_backward(b.data(), fwd_relu.data(), dx.data(), dbias.data(), rows, cols);
    cast(DType::f32, a.data(), DType::bf16, narrow.data(), n);
    cast(DType::bf16, narrow.data(), DType::f32, widened.data(), n);
    activation_grad_bf16(ActivationGrad::relu, narrow.data(), narrow.data(), dnarrow.data(), n, {});
    bias_relu_backward(dnarrow.data(), narrow.data(), masked_narrow.data(), dbias_narrow.data(), rows, cols);
    dropout_forward(a.data(), dropped.data(), mask.data(), n, 0.25f, 1234, 99);
    dropout_backward(b.data(), mask.data(), dropped_back.data(), n, 0.25f);
    // A batch of rows × cols pixels gathered from 2·rows images in a shuffled order.
    std::vector<std::uint8_t> pixels(2 * n);
    std::vector<std::int32_t> labels(2 * rows), order(rows), gathered_labels(rows);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7 % 251);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
    for (std::size_t r = 0; r < rows; ++r) order[r] = static_cast<std::int32_t>(r * 37 % (2 * rows));
    std::vector<float> gathered(n);
    gather_batch(pixels.data(), labels.data(), order.data(), gathered.data(), gathered_labels.data(), rows, cols, 0.13f,
                 0.31f);
    Bytes bytes;
    for (const auto* v : {&relu, &sum, &grad, &fwd, &fwd_relu, &dx, &dbias, &widened, &dropped, &dropped_back, &gelu,
                          &gelu_grad, &normed, &normed_plain, &mean, &invstd, &dnormed, &dy_xhat, &column_sums})
      append(bytes, *v);
    append(bytes, narrow);
    append(bytes, dnarrow);
    append(bytes, gathered);
    append(bytes, gathered_labels);
    append(bytes, masked_narrow);
    append(bytes, dbias_narrow);
    append(bytes, mask);
    return bytes;
  });

  // Two parameters, one large and one small: the update cut within the first and across both.
  const std::size_t sizes[] = {200000, 77};
  same_bits_at_any_thread_count([&] {
    Bytes bytes;
    for (bool adam : {false, true}) {
      std::vector<std::vector<float>> params, grads, m, v;
      std::vector<float> steps(2, 3.0f);
      std::vector<ParamSlot> slots;
      for (std::size_t i = 0; i < 2; ++i) {
        params.push_back(random_floats(sizes[i], 30 + static_cast<unsigned>(i)));
        grads.push_back(random_floats(sizes[i], 40 + static_cast<unsigned>(i)));
        m.push_back(random_floats(sizes[i], 50 + static_cast<unsigned>(i)));
        v.push_back(std::vector<float>(sizes[i], 0.5f));
      }
      for (std::size_t i = 0; i < 2; ++i)
        slots.push_back({params[i].data(), grads[i].data(), m[i].data(), v[i].data(), &steps[i], sizes[i]});
      const float lr = 0.01f;
      if (adam)
        adam_step(slots.data(), slots.size(), AdamConfig{}, &lr);
      else
        sgd_step(slots.data(), slots.size(), SgdConfig{0.9f, 0, 0.01f, false}, &lr);
      for (std::size_t i = 0; i < 2; ++i) {
        append(bytes, params[i]);
        append(bytes, m[i]);
        append(bytes, v[i]);
      }
    }
    return bytes;
  });
}

TEST_CASE("parallel: expand (permutes, broadcasts) at any thread count, rows copied or strided") {
  // [64, 50, 4, 16] → [64, 4, 50, 16] (the attention heads' permute: rows of 16 copied whole) and
  // its last two dims swapped as well (strided rows), and a scaled broadcast of [50, 1] to [50, 300].
  const auto x = random_floats(64 * 50 * 4 * 16, 70), column = random_floats(50, 71);
  BroadcastLayout heads{4, {64, 4, 50, 16}, {50 * 64, 16, 64, 1}, {}};
  BroadcastLayout swapped{4, {64, 4, 16, 50}, {50 * 64, 16, 1, 64}, {}};
  BroadcastLayout widened{2, {50, 300}, {1, 0}, {}};
  same_bits_at_any_thread_count([&] {
    std::vector<float> a(x.size()), b(x.size()), c(50 * 300);
    expand(x.data(), a.data(), heads, 1.0f);
    expand(x.data(), b.data(), swapped, 1.0f);
    expand(column.data(), c.data(), widened, 0.5f);
    Bytes bytes;
    append(bytes, a);
    append(bytes, b);
    append(bytes, c);
    return bytes;
  });
}

TEST_CASE("parallel: the embedding's lookup and gradient at any thread count") {
  // 4,000 indices into 50 rows of 256: the lookup cut by rows of the output, the gradient by columns.
  const std::size_t n = 4000, rows = 50, width = 256;
  std::vector<std::int64_t> index(n);
  for (std::size_t i = 0; i < n; ++i) index[i] = static_cast<std::int64_t>((i * i + 3 * i) % rows);
  const auto weight = random_floats(rows * width, 60), dy = random_floats(n * width, 61);
  same_bits_at_any_thread_count([&] {
    std::vector<float> out(n * width), dweight(rows * width);
    embedding_forward(weight.data(), index.data(), out.data(), n, rows, width, nullptr);
    embedding_backward(dy.data(), index.data(), dweight.data(), n, rows, width, 3);
    Bytes bytes;
    append(bytes, out);
    append(bytes, dweight);
    return bytes;
  });
}
