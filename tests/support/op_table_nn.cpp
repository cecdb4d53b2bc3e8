// The op table's network ops: products, convolutions and the fused ops, pooling, batch and layer
// normalization, dropout, and the data pipeline's normalize_u8 and gather_batch.
#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "support/op_samples.h"

namespace ember::testing {
namespace {

// The convolutions' geometries: im2col (fewer than 8 channels) at stride 1 and at stride 2 with
// padding, without a bias, and Winograd F(4×4, 3×3) on the CPU (3×3, stride 1, 8 channels in and
// out), where its rounding is the tolerance's reason. `wrap` turns the conv2d expression of each
// into the op's: the fused ops append their ReLU (and pooling).
std::vector<Sample> conv_samples(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, int, int)>& op,
                                 const std::function<std::string(const std::string&)>& wrap) {
  auto apply = [op](int stride, int padding) {
    return
        [=](const std::vector<Tensor>& x) { return op(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding); };
  };
  return {
      call("[2, 3, 6, 6] * [4, 3, 3, 3]",
           {random_input({2, 3, 6, 6}, 1), random_input({4, 3, 3, 3}, 2, -0.5, 0.5), random_input({4}, 3, -0.3, 0.3)},
           apply(1, 0), wrap("F.conv2d(x0, x1, x2)")),
      call("stride 2, padding 1",
           {random_input({2, 3, 7, 7}, 4), random_input({4, 3, 3, 3}, 5, -0.5, 0.5), random_input({4}, 6, -0.3, 0.3)},
           apply(2, 1), wrap("F.conv2d(x0, x1, x2, stride=2, padding=1)")),
      call("1×1, no bias", {random_input({2, 3, 4, 4}, 7), random_input({5, 3, 1, 1}, 8)}, apply(1, 0),
           wrap("F.conv2d(x0, x1)")),
      call("Winograd's geometry: [2, 8, 8, 8] * [8, 8, 3, 3], padding 1",
           {random_input({2, 8, 8, 8}, 9), random_input({8, 8, 3, 3}, 10, -0.3, 0.3), random_input({8}, 11, -0.3, 0.3)},
           apply(1, 1), wrap("F.conv2d(x0, x1, x2, padding=1)")),
  };
}

std::vector<Sample> pooled_conv_samples() {
  auto apply = [](int padding, int kernel, int stride) {
    return [=](const std::vector<Tensor>& x) {
      return fused::conv2d_relu_max_pool2d(x[0], x[1], x[2], 1, padding, kernel, stride);
    };
  };
  return {
      call(
          "[2, 3, 6, 6] * [4, 3, 3, 3], 2×2 pool",
          {random_input({2, 3, 6, 6}, 12), random_input({4, 3, 3, 3}, 13, -0.5, 0.5), random_input({4}, 14, -0.3, 0.3)},
          apply(0, 2, 0), "F.max_pool2d(F.relu(F.conv2d(x0, x1, x2)), 2)"),
      call(
          "3×3 pool, stride 2",
          {random_input({1, 3, 9, 9}, 15), random_input({4, 3, 3, 3}, 16, -0.5, 0.5), random_input({4}, 17, -0.3, 0.3)},
          apply(0, 3, 2), "F.max_pool2d(F.relu(F.conv2d(x0, x1, x2)), 3, 2)"),
      // On the CPU each 2×2 window is pooled inside its Winograd tile.
      call(
          "Winograd's geometry, 2×2 pool",
          {random_input({2, 8, 8, 8}, 18), random_input({8, 8, 3, 3}, 19, -0.3, 0.3), random_input({8}, 20, -0.3, 0.3)},
          apply(1, 2, 0), "F.max_pool2d(F.relu(F.conv2d(x0, x1, x2, padding=1)), 2)"),
  };
}

std::vector<Sample> max_pool_samples() {
  return {
      call("[2, 3, 6, 6], 2×2", {random_input({2, 3, 6, 6}, 21)}, EMBER_APPLY(max_pool2d(x[0], 2)),
           "F.max_pool2d(x0, 2)"),
      call("[1, 2, 7, 7], 3×3 stride 2", {random_input({1, 2, 7, 7}, 22)}, EMBER_APPLY(max_pool2d(x[0], 3, 2)),
           "F.max_pool2d(x0, 3, 2)"),
      call("overlapping: 2×2 stride 1", {random_input({1, 1, 5, 5}, 23)}, EMBER_APPLY(max_pool2d(x[0], 2, 1)),
           "F.max_pool2d(x0, 2, 1)"),
      // Ties go to the window's first maximum.
      at_kink(call("ties", {values_input({1, 1, 0, 2, 1, 1, 2, 2, 3, 0, 0, 0, 0, 3, 0, 0}, {1, 1, 4, 4})},
                   EMBER_APPLY(max_pool2d(x[0], 2)), "F.max_pool2d(x0, 2)")),
      call("[3, 5, 12, 12], 2×2", {random_input({3, 5, 12, 12}, 24)}, EMBER_APPLY(max_pool2d(x[0], 2)),
           "F.max_pool2d(x0, 2)"),
  };
}

// Inputs: x, then weight and bias where the sample has them.
std::vector<Sample> layer_norm_samples() {
  return {
      call("[4, 6] over [6]", {random_input({4, 6}, 150), random_input({6}, 151, 0.5, 1.5), random_input({6}, 152)},
           EMBER_APPLY(layer_norm(x[0], {6}, x[1], x[2])), "F.layer_norm(x0, [6], x1, x2)"),
      call("[2, 3, 4, 5] over [4, 5]",
           {random_input({2, 3, 4, 5}, 153), random_input({4, 5}, 154, 0.5, 1.5), random_input({4, 5}, 155)},
           EMBER_APPLY(layer_norm(x[0], {4, 5}, x[1], x[2])), "F.layer_norm(x0, [4, 5], x1, x2)"),
      call("no weight or bias, eps 1e-3", {random_input({3, 7}, 156)}, EMBER_APPLY(layer_norm(x[0], {7}, {}, {}, 1e-3)),
           "F.layer_norm(x0, [7], eps=1e-3)"),
      call("one value per row: output β, gradient 0",
           {random_input({5, 1}, 157), random_input({1}, 158, 0.5, 1.5), random_input({1}, 159)},
           EMBER_APPLY(layer_norm(x[0], {1}, x[1], x[2])), "F.layer_norm(x0, [1], x1, x2)"),
      call("[37, 45] over [45], rows across threads",
           {random_input(kLarge, 160), random_input({45}, 161, 0.5, 1.5), random_input({45}, 162)},
           EMBER_APPLY(layer_norm(x[0], {45}, x[1], x[2])), "F.layer_norm(x0, [45], x1, x2)"),
  };
}

// Inputs: the indices, then the table. Repeated indices sum their rows of the gradient.
std::vector<Sample> embedding_samples() {
  auto indices = [](std::int64_t rows, const Shape& shape, std::uint64_t seed, DType dtype) {
    Generator generator(seed);
    return randint(0, rows, shape, {.dtype = dtype}, &generator);
  };
  const std::string torch = "F.embedding(x0.long(), x1";
  return {
      call("[6] into [5, 3], repeated indices",
           {values_input({0, 2, 2, 4, 0, 2}, {6}).to(DType::i64), random_input({5, 3}, 170)},
           EMBER_APPLY(embedding(x[0], x[1])), torch + ")"),
      call("[2, 3] i32 into [4, 6]", {indices(4, {2, 3}, 171, DType::i32), random_input({4, 6}, 172)},
           EMBER_APPLY(embedding(x[0], x[1])), torch + ")"),
      // The padding row's gradient is zero by definition, not the derivative: gradcheck leaves these
      // out, and the devices and PyTorch check the rule.
      {.label = "padding_idx 2: its row gets no gradient",
       .inputs = {values_input({2, 1, 2, 0, 3}, {5}).to(DType::i64), random_input({4, 3}, 173)},
       .apply = EMBER_APPLY(embedding(x[0], x[1], 2)),
       .torch = torch + ", padding_idx=2)",
       .gradcheck = false},
      {.label = "padding_idx -1, from the end",
       .inputs = {indices(5, {3, 4}, 174, DType::i64), random_input({5, 2}, 175)},
       .apply = EMBER_APPLY(embedding(x[0], x[1], -1)),
       .torch = torch + ", padding_idx=-1)",
       .gradcheck = false},
      call("no indices: [0] into [3, 4]", {zeros({0}, {.dtype = DType::i64}), random_input({3, 4}, 176)},
           EMBER_APPLY(embedding(x[0], x[1])), torch + ")"),
      {.label = "[37, 45] into [50, 96], columns across threads",
       .inputs = {indices(50, kLarge, 177, DType::i64), random_input({50, 96}, 178)},
       .apply = EMBER_APPLY(embedding(x[0], x[1])),
       .torch = torch + ")",
       .gradcheck = false},
  };
}

// Inputs: x, weight, bias, running mean, running variance. The running statistics are copied (the
// op updates them in place, outside autograd).
Tensor batch_norm_train(const std::vector<Tensor>& x) {
  Tensor mean = x[3].clone(), var = x[4].clone();
  return batch_norm(x[0], x[1], x[2], mean, var, true);
}
// The running statistics a training step leaves, mean then variance.
Tensor batch_norm_running(const std::vector<Tensor>& x) {
  Tensor mean = x[3].clone(), var = x[4].clone();
  batch_norm(x[0], x[1], x[2], mean, var, true);
  return cat({mean, var});
}
Tensor batch_norm_eval(const std::vector<Tensor>& x) {
  Tensor mean = x[3].clone(), var = x[4].clone();
  return batch_norm(x[0], x[1], x[2], mean, var, false);
}
std::vector<Sample> batch_norm_samples() {
  const std::string train = "F.batch_norm(x0, x3.clone(), x4.clone(), x1, x2, training=True)";
  const std::vector<std::size_t> parameters = {0, 1, 2};  // not the running statistics
  auto inputs = [](Shape shape, std::uint64_t seed) {
    return std::vector<Tensor>{random_input(shape, seed, -2, 2), random_input({3}, seed + 1, 0.5, 1.5),
                               random_input({3}, seed + 2), random_input({3}, seed + 3),
                               random_input({3}, seed + 4, 0.5, 2)};
  };
  return {{.label = "training, [4, 3, 2, 2]",
           .inputs = inputs({4, 3, 2, 2}, 30),
           .apply = batch_norm_train,
           .grad_inputs = parameters,
           .torch = train},
          {.label = "training, [6, 3]",
           .inputs = inputs({6, 3}, 35),
           .apply = batch_norm_train,
           .grad_inputs = parameters,
           .torch = train},
          {.label = "the running statistics after training, [4, 3, 2, 2]",
           .inputs = inputs({4, 3, 2, 2}, 30),
           .apply = batch_norm_running,
           .no_grad = true,
           .torch = "(F.batch_norm(x0, (m := x3.clone()), (v := x4.clone()), x1, x2, training=True), "
                    "torch.cat([m, v]))[1]"},
          {.label = "evaluation, [4, 3, 2, 2]",
           .inputs = inputs({4, 3, 2, 2}, 40),
           .apply = batch_norm_eval,
           .grad_inputs = parameters,
           .torch = "F.batch_norm(x0, x3, x4, x1, x2, training=False)"},
          {.label = "training, [16, 3, 7, 5]",
           .inputs = inputs({16, 3, 7, 5}, 45),
           .apply = batch_norm_train,
           .grad_inputs = parameters,
           .torch = train,
           .gradcheck = false}};
}

Tensor pixels(const Shape& shape, std::uint64_t seed) {
  Generator generator(seed);
  return randint(0, 256, shape, {.dtype = DType::u8}, &generator);
}

// MNIST's mean and standard deviation, as the data pipeline uses them.
constexpr float kMean = 0.1307f, kStd = 0.3081f;

Tensor normalize_into(const std::vector<Tensor>& x) {
  const Tensor out = empty(x[0].shape(), {.device = x[0].device()});
  normalize_u8(x[0], out, kMean, kStd);
  return out;
}
std::vector<Sample> normalize_samples() {
  const OpFn reference = EMBER_APPLY((x[0].to(DType::f64) / 255.0 - kMean) / kStd);
  return {
      {.label = "[2, 5]",
       .inputs = {pixels({2, 5}, 50)},
       .apply = EMBER_APPLY(normalize_u8(x[0], kMean, kStd)),
       .reference = reference},
      {.label = "0 and 255, mean 0, std 1",
       .inputs = {values_input({0, 255, 1, 254}, {4}).to(DType::u8)},
       .apply = EMBER_APPLY(normalize_u8(x[0])),
       .reference = EMBER_APPLY(x[0].to(DType::f64) / 255.0)},
      {.label = "into a given tensor, [37, 45]",
       .inputs = {pixels(kLarge, 51)},
       .apply = normalize_into,
       .reference = reference},
  };
}

// gather_batch's two outputs in one result: the images x flattened, then the labels y as floats.
Tensor gather(const std::vector<Tensor>& in) {
  Shape x_shape = in[0].shape();
  x_shape[0] = in[2].numel();
  Tensor x = empty(x_shape, {.device = in[0].device()});
  Tensor y = empty({in[2].numel()}, {.dtype = DType::i32, .device = in[0].device()});
  gather_batch(in[0], in[1], in[2], x, y, kMean, kStd);
  return cat({x.flatten(), y.to(DType::f32)});
}
// The same, from the images and labels row by row.
Tensor gather_reference(const std::vector<Tensor>& in) {
  const std::vector<double> images = in[0].to_vector<double>(), labels = in[1].to_vector<double>();
  const std::size_t row = static_cast<std::size_t>(in[0].numel() / in[0].size(0));
  std::vector<double> x, y;
  for (std::int64_t index : in[2].to_vector<std::int64_t>()) {
    const auto i = static_cast<std::size_t>(index);
    for (std::size_t k = 0; k < row; ++k) x.push_back((images[i * row + k] / 255.0 - kMean) / kStd);
    y.push_back(labels[i]);
  }
  x.insert(x.end(), y.begin(), y.end());
  return values_input(x, {static_cast<std::int64_t>(x.size())});
}
std::vector<Sample> gather_samples() {
  auto batch = [](std::int64_t n, Shape image, std::vector<std::int32_t> index, std::uint64_t seed) {
    Shape shape{n};
    shape.insert(shape.end(), image.begin(), image.end());
    Generator generator(seed);
    const Tensor labels = randint(0, 10, {n}, {.dtype = DType::i32}, &generator);
    return std::vector<Tensor>{pixels(shape, seed + 1), labels,
                               from_vector(index, {static_cast<std::int64_t>(index.size())})};
  };
  std::vector<std::int32_t> many;
  for (std::int32_t i = 0; i < 37; ++i) many.push_back((i * 7) % 50);
  return {
      {.label = "4 rows of [10, 2, 3], one repeated",
       .inputs = batch(10, {2, 3}, {3, 0, 9, 3}, 60),
       .apply = gather,
       .reference = gather_reference},
      {.label = "37 rows of [50, 28, 28]",
       .inputs = batch(50, {28, 28}, many, 62),
       .apply = gather,
       .reference = gather_reference},
  };
}

}  // namespace

std::vector<OpInfo> network_ops() {
  return {
      {"matmul", true, true, false, kProduct,
       [] {
         return std::vector<Sample>{
             call("[3, 4]·[4, 2]", {random_input({3, 4}, 70), random_input({4, 2}, 71)},
                  EMBER_APPLY(matmul(x[0], x[1])), "x0 @ x1"),
             call("[1, 5]·[5, 1]", {random_input({1, 5}, 72), random_input({5, 1}, 73)},
                  EMBER_APPLY(matmul(x[0], x[1])), "x0 @ x1"),
             call("[37, 45]·[45, 11]", {random_input(kLarge, 74), random_input({45, 11}, 75)},
                  EMBER_APPLY(matmul(x[0], x[1])), "x0 @ x1"),
             call("batched [2, 3, 4]·[2, 4, 5]", {random_input({2, 3, 4}, 76), random_input({2, 4, 5}, 77)},
                  EMBER_APPLY(matmul(x[0], x[1])), "x0 @ x1"),
             call("batch dims broadcast: [2, 1, 3, 4]·[3, 4, 2]",
                  {random_input({2, 1, 3, 4}, 78), random_input({3, 4, 2}, 79)}, EMBER_APPLY(matmul(x[0], x[1])),
                  "x0 @ x1"),
             call("a vector times a batch: [4]·[2, 4, 3]", {random_input({4}, 170), random_input({2, 4, 3}, 171)},
                  EMBER_APPLY(matmul(x[0], x[1])), "x0 @ x1"),
             call("a matrix times a vector: [3, 4]·[4]", {random_input({3, 4}, 172), random_input({4}, 173)},
                  EMBER_APPLY(matmul(x[0], x[1])), "x0 @ x1")};
       },
       kProduct, kBf16Product},
      {"linear", true, true, false, kProduct,
       [] {
         return std::vector<Sample>{
             call("[3, 4], [2, 4], [2]", {random_input({3, 4}, 80), random_input({2, 4}, 81), random_input({2}, 82)},
                  EMBER_APPLY(linear(x[0], x[1], x[2])), "F.linear(x0, x1, x2)"),
             call("a 3-d input, no bias", {random_input({2, 3, 4}, 83), random_input({2, 4}, 84)},
                  EMBER_APPLY(linear(x[0], x[1])), "F.linear(x0, x1)"),
             call("[37, 45], [11, 45], [11]",
                  {random_input(kLarge, 85), random_input({11, 45}, 86), random_input({11}, 87)},
                  EMBER_APPLY(linear(x[0], x[1], x[2])), "F.linear(x0, x1, x2)")};
       },
       kProduct, kBf16Product},
      {"fused::linear_relu", true, true, false, kProduct,
       [] {
         return std::vector<Sample>{
             call("[5, 4], [3, 4], [3]", {random_input({5, 4}, 90), random_input({3, 4}, 91), random_input({3}, 92)},
                  EMBER_APPLY(fused::linear_relu(x[0], x[1], x[2])), "F.relu(F.linear(x0, x1, x2))"),
             call("[37, 45], [11, 45], [11]",
                  {random_input(kLarge, 93), random_input({11, 45}, 94), random_input({11}, 95)},
                  EMBER_APPLY(fused::linear_relu(x[0], x[1], x[2])), "F.relu(F.linear(x0, x1, x2))")};
       },
       kProduct, kBf16Product},
      // The CPU's Winograd rounds to about 2.5e-5 of an output's size in float, some 10× the direct
      // sum (docs/architecture.md, "Convolutions"), and cuDNN sums in its own order: 5e-4 absolute
      // for outputs and gradients of size up to ~5, as tests/cuda/test_cuda_conv.cpp allows. In bf16 on
      // the CPU the convolutions run the bf16 GEMM (Note [bf16 convolution]): kBf16Product.
      {"conv2d",
       true,
       true,
       true,
       {5e-4, 2e-4},
       [] {
         return conv_samples(
             [](const Tensor& x, const Tensor& w, const Tensor& b, int s, int p) { return conv2d(x, w, b, s, p); },
             [](const std::string& c) { return c; });
       },
       {5e-4, 2e-4},
       kBf16Product},
      {"fused::conv2d_relu",
       true,
       true,
       true,
       {5e-4, 2e-4},
       [] {
         return conv_samples([](const Tensor& x, const Tensor& w, const Tensor& b, int s,
                                int p) { return fused::conv2d_relu(x, w, b, s, p); },
                             [](const std::string& c) { return "F.relu(" + c + ")"; });
       },
       {5e-4, 2e-4},
       kBf16Product},
      // In bf16 the gradient that overlapping windows sum is rounded to bf16 before the convolution's
      // backward (as PyTorch's bf16 max_pool2d backward rounds it): through the filter's sums an
      // error of about 2^-8 of the terms, |w·dz| up to ~0.25 here, where the result may be small.
      {"fused::conv2d_relu_max_pool2d",
       true,
       true,
       true,
       {5e-4, 2e-4},
       pooled_conv_samples,
       {5e-4, 2e-4},
       {2e-3, kBf16Product.rtol}},
      // Overlapping windows add their gradients where they share a maximum.
      {"max_pool2d", true, true, false, kExact, max_pool_samples, kArithmetic},
      // Batch statistics: the GPU sums N·H·W values in a tree, the CPU in double; the gradients of
      // γ and β are sums of as many products.
      {"batch_norm", true, true, false, kProduct, batch_norm_samples},
      // Row statistics: the GPU sums a row in a warp's tree in f32, the CPU in order in f64; the
      // gradients of γ and β are sums over the rows.
      {"layer_norm", true, true, false, kProduct, layer_norm_samples},
      // Rows copied; the gradient's rows are sums over repeated indices, in the same order on every
      // device (the same bits), f32 against f64 rounding each addition.
      {"embedding", true, true, false, kExact, embedding_samples, kReduction},
      // The same mask on every device (a hash of seed and position); x·mask·1/(1 − p) rounds once.
      // No torch: PyTorch draws its mask from another generator.
      {"dropout", true, true, false, kArithmetic,
       [] {
         return std::vector<Sample>{
             call("[3, 4], p = 0.3", {random_input({3, 4}, 100)}, EMBER_APPLY(dropout(x[0], 0.3, 7, 100)), ""),
             call("[37, 45], p = 0.5, another offset", {random_input(kLarge, 101)},
                  EMBER_APPLY(dropout(x[0], 0.5, 7, 12345)), "")};
       }},
      // (x/255 − mean)/std in float: a few roundings against the reference's double. No torch:
      // PyTorch has no such op (torchvision's ToTensor and Normalize are two).
      {"normalize_u8", false, true, false, kArithmetic, normalize_samples},
      {"gather_batch", false, true, false, kArithmetic, gather_samples},
  };
}

}  // namespace ember::testing
