// The no-framework reference for scripts/compare_pytorch.py: an MLP trained with SGD by a plain
// loop over OpenBLAS — preallocated buffers, hand-written backward, no autograd, no allocation.
// It is the floor a framework's overhead is measured against. Prints one line per epoch:
// "epoch <k> <seconds> <mean loss> <seconds in GEMMs>".
//   bare_mlp DATA_DIR N HIDDEN(comma list) EPOCHS BATCH LR THREADS
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {
double gemm_seconds = 0;  // timed as ember times its own (kernels/cpu/gemm.cpp)

void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  const auto start = std::chrono::steady_clock::now();
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  gemm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Layer {
  int in, out;
  std::vector<float> w, b, dw, db, y, dy;  // y: this layer's output (after ReLU for hidden layers)
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: bare_mlp DATA_DIR N HIDDEN EPOCHS BATCH LR THREADS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int n = std::stoi(argv[2]);
  std::vector<int> widths{784};
  std::stringstream list(argv[3]);
  for (std::string item; std::getline(list, item, ',');) widths.push_back(std::stoi(item));
  widths.push_back(10);
  const int epochs = std::stoi(argv[4]), batch = std::stoi(argv[5]);
  const float lr = std::stof(argv[6]);
  openblas_set_num_threads(std::stoi(argv[7]));

  std::vector<float> images(static_cast<std::size_t>(n) * 784);
  std::vector<long> labels(static_cast<std::size_t>(n));
  std::ifstream(dir + "/images.f32", std::ios::binary).read(reinterpret_cast<char*>(images.data()), images.size() * 4);
  std::ifstream(dir + "/labels.i64", std::ios::binary).read(reinterpret_cast<char*>(labels.data()), labels.size() * 8);

  std::mt19937 rng(0);
  std::vector<Layer> layers;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    Layer L{widths[l], widths[l + 1]};
    const float bound = 1.0f / std::sqrt(static_cast<float>(L.in));
    std::uniform_real_distribution<float> u(-bound, bound);
    L.w.resize(static_cast<std::size_t>(L.in) * L.out);
    for (float& v : L.w) v = u(rng);
    L.b.resize(static_cast<std::size_t>(L.out));
    for (float& v : L.b) v = u(rng);
    L.dw.resize(L.w.size());
    L.db.resize(L.b.size());
    L.y.resize(static_cast<std::size_t>(batch) * L.out);
    L.dy.resize(L.y.size());
    layers.push_back(std::move(L));
  }
  std::vector<float> xb(static_cast<std::size_t>(batch) * 784);
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);

  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const double gemm_s0 = gemm_seconds;
    std::shuffle(order.begin(), order.end(), rng);
    double total = 0;
    for (int start = 0; start < n; start += batch) {
      const int m = std::min(batch, n - start);
      for (int r = 0; r < m; ++r)
        std::copy_n(&images[static_cast<std::size_t>(order[static_cast<std::size_t>(start + r)]) * 784], 784,
                    &xb[static_cast<std::size_t>(r) * 784]);
      // forward
      const float* in = xb.data();
      for (std::size_t l = 0; l < layers.size(); ++l) {
        Layer& L = layers[l];
        for (int r = 0; r < m; ++r) std::copy(L.b.begin(), L.b.end(), &L.y[static_cast<std::size_t>(r) * L.out]);
        sgemm(CblasNoTrans, CblasTrans, m, L.out, L.in, in, L.in, L.w.data(), L.in, 1.0f, L.y.data(), L.out);
        if (l + 1 < layers.size())
          for (int i = 0; i < m * L.out; ++i)
            L.y[static_cast<std::size_t>(i)] = std::max(L.y[static_cast<std::size_t>(i)], 0.0f);
        in = L.y.data();
      }
      // softmax cross-entropy and its gradient
      Layer& last = layers.back();
      for (int r = 0; r < m; ++r) {
        float* z = &last.y[static_cast<std::size_t>(r) * 10];
        float* dz = &last.dy[static_cast<std::size_t>(r) * 10];
        const float mx = *std::max_element(z, z + 10);
        float s = 0;
        for (int c = 0; c < 10; ++c) s += std::exp(z[c] - mx);
        const long t = labels[static_cast<std::size_t>(order[static_cast<std::size_t>(start + r)])];
        total += std::log(s) + mx - z[t];
        for (int c = 0; c < 10; ++c) dz[c] = (std::exp(z[c] - mx) / s - (c == t)) / m;
      }
      // backward and update
      for (std::size_t l = layers.size(); l-- > 0;) {
        Layer& L = layers[l];
        const float* x = l == 0 ? xb.data() : layers[l - 1].y.data();
        sgemm(CblasTrans, CblasNoTrans, L.out, L.in, m, L.dy.data(), L.out, x, L.in, 0.0f, L.dw.data(), L.in);
        std::fill(L.db.begin(), L.db.end(), 0.0f);
        for (int r = 0; r < m; ++r)
          for (int c = 0; c < L.out; ++c)
            L.db[static_cast<std::size_t>(c)] += L.dy[static_cast<std::size_t>(r) * L.out + c];
        if (l > 0) {
          Layer& P = layers[l - 1];
          sgemm(CblasNoTrans, CblasNoTrans, m, L.in, L.out, L.dy.data(), L.out, L.w.data(), L.in, 0.0f, P.dy.data(),
                L.in);
          for (int i = 0; i < m * L.in; ++i)
            if (P.y[static_cast<std::size_t>(i)] <= 0) P.dy[static_cast<std::size_t>(i)] = 0;
        }
        for (std::size_t i = 0; i < L.w.size(); ++i) L.w[i] -= lr * L.dw[i];
        for (std::size_t i = 0; i < L.b.size(); ++i) L.b[i] -= lr * L.db[i];
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %d %.6f %.6f %.6f\n", epoch, s, total / n, gemm_seconds - gemm_s0);
  }
  return 0;
}
