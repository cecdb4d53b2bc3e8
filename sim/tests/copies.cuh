// Copies between host vectors and device memory for the simulator's Catch tests (each copy
// REQUIREd to succeed).
#pragma once

#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

template <class T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

template <class T>
void to_device(T* device, const std::vector<T>& host) {
  REQUIRE(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
}
