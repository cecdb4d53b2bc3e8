// The README's example, as a program: the lines of the README's first code block appear here in
// the same order (scripts/check_docs.py checks it), then the trained model is scored on the test
// images. The tests build it and run it from a folder whose data/mnist is the MNIST files
// (tests/CMakeLists.txt: mnist_mlp_example); it trains 5 epochs of the tutorials' MLP, about a
// second on one CPU core with the 10,000-image training prefix. Its include is an installed
// ember's (<prefix>/include/ember/...); install_example builds it against a moved installation.
#include <cstdio>

#include <ember/ember.h>
using namespace ember;

int main() {
  const Device device = Device::best();  // cuda:0 if usable, else the CPU
  auto model = nn::mlp(784, {32}, 10);   // Sequential(Linear, ReLU, Linear)
  model->to(device);                     // once
  optim::SGD sgd(model->parameters(), {.lr = 0.5});
  data::DataLoader loader(std::make_shared<data::IdxDataset>("data/mnist", data::Split::train),
                          {.batch_size = 128, .pin_memory = device.is_cuda()});
  data::DeviceLoader batches(loader, device);  // inputs and labels to the device, prefetched
  for (int epoch = 0; epoch < 5; ++epoch) {
    batches.start_epoch(epoch);
    while (auto b = batches.next()) {
      Tensor loss = cross_entropy((*model)(b->x), b->y);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    }
  }
  nn::save(*model, "mnist.safetensors");  // opens in PyTorch too

  // Not in the README: the test images' accuracy (the training library's evaluate, train/loop.h),
  // which the test requires to be above 85%.
  data::DataLoader test_loader(std::make_shared<data::IdxDataset>("data/mnist", data::Split::test),
                               {.batch_size = 1000, .shuffle = false});
  data::DeviceLoader test_batches(test_loader, device);
  const auto result = train::evaluate(*model, test_batches, test_loader.samples_per_epoch());
  std::printf("test accuracy: %.4f on %zu images (device %s)\n", result.accuracy, test_loader.samples_per_epoch(),
              device.str().c_str());
  return 0;
}
