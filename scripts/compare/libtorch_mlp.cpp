// The libtorch (PyTorch C++ frontend) reference for scripts/compare_pytorch.py: trains an MLP on
// preloaded MNIST (raw float32 images and int64 labels written by the script) with SGD, shuffling
// each epoch, and prints one line per epoch: "epoch <k> <seconds> <mean loss>".
//   libtorch_mlp DATA_DIR N HIDDEN(comma list) EPOCHS BATCH LR THREADS
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: libtorch_mlp DATA_DIR N HIDDEN EPOCHS BATCH LR THREADS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const long n = std::stol(argv[2]);
  std::vector<long> hidden;
  std::stringstream list(argv[3]);
  for (std::string item; std::getline(list, item, ',');) hidden.push_back(std::stol(item));
  const int epochs = std::stoi(argv[4]);
  const long batch = std::stol(argv[5]);
  const double lr = std::stod(argv[6]);
  torch::set_num_threads(std::stoi(argv[7]));
  torch::manual_seed(0);

  std::vector<float> images(static_cast<std::size_t>(n) * 784);
  std::vector<long> labels(static_cast<std::size_t>(n));
  std::ifstream(dir + "/images.f32", std::ios::binary).read(reinterpret_cast<char*>(images.data()), images.size() * 4);
  std::ifstream(dir + "/labels.i64", std::ios::binary).read(reinterpret_cast<char*>(labels.data()), labels.size() * 8);
  const torch::Tensor x = torch::from_blob(images.data(), {n, 784}, torch::kFloat32);
  const torch::Tensor y = torch::from_blob(labels.data(), {n}, torch::kInt64);

  torch::nn::Sequential model;
  long width = 784;
  for (long h : hidden) {
    model->push_back(torch::nn::Linear(width, h));
    model->push_back(torch::nn::ReLU());
    width = h;
  }
  model->push_back(torch::nn::Linear(width, 10));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(lr));

  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const torch::Tensor order = torch::randperm(n, torch::kInt64);
    double total = 0;
    for (long start = 0; start < n; start += batch) {
      const torch::Tensor idx = order.slice(0, start, std::min(start + batch, n));
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(x.index_select(0, idx)), y.index_select(0, idx));
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      total += loss.item<double>() * static_cast<double>(idx.size(0));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %d %.6f %.6f\n", epoch, s, total / static_cast<double>(n));
  }
  return 0;
}
