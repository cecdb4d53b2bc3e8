// A layer of one's own, written outside ember's tree from existing ops (route 1 of
// docs/writing-a-layer.md): autograd comes for free. It trains a few steps on a toy problem and
// exits non-zero if the loss does not fall.
#include <ember/ember.h>

#include <cmath>
#include <cstdio>

using namespace ember;

// A residual block with a GELU inside: y = x + W2·gelu(W1·x + b1) + b2.
class ResidualGelu : public nn::Module {
 public:
  ResidualGelu(std::int64_t width, std::int64_t hidden) {
    up = register_module("up", std::make_shared<nn::Linear>(width, hidden));
    down = register_module("down", std::make_shared<nn::Linear>(hidden, width));
  }
  Tensor forward(const Tensor& x) override { return x + (*down)(gelu((*up)(x))); }
  std::string type_name() const override { return "ResidualGelu"; }

 private:
  static Tensor gelu(const Tensor& x) {  // the tanh approximation, from ember's ops
    const double c = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * pow(x, 3.0))));
  }
  std::shared_ptr<nn::Linear> up, down;
};

int main() {
  manual_seed(0);
  const Device device = Device::best();
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<ResidualGelu>(16, 32), std::make_shared<nn::Linear>(16, 4)});
  model->to(device);
  std::printf("device: %s\n%s\nparameters: %lld\n", Device::best_reason().c_str(), model->repr().c_str(),
              static_cast<long long>(model->parameter_count()));
  // The toy task: which of four fixed directions a random point is closest to.
  const Tensor directions = randn({16, 4});
  const Tensor x = randn({256, 16});
  const Tensor y = argmax(matmul(x, directions));
  const Tensor xd = x.to(device), yd = y.to(device);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    sgd.zero_grad();
    Tensor loss = cross_entropy((*model)(xd), yd);
    loss.backward();
    sgd.step();
    last = loss.item<double>();
    if (step == 0) first = last;
  }
  std::printf("loss: %.4f -> %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
}
