// The fused attention's exponentials and online softmax on the CPU (kernels/cpu/attention.cpp):
// f32 16 lanes at a time where the CPU has AVX-512, by one formula (exp_of_difference: e^(x − m) as
// 2^((x − m)·log₂e), exp2_avx512), else std::exp in loops. Each path is fixed for the machine, so
// the bits do not depend on threads.
#pragma once

#include <cstddef>

namespace ember::kernels::cpu {

// out[c] = e^(in[c] − shift) for c < n (in and out may be the same).
template <class T>
void exp_shifted(const T* in, T shift, T* out, std::size_t n);

// The most queries softmax_tile takes: the fused attention's query tile.
constexpr std::size_t kSoftmaxTileRows = 128;

// One key tile of the forward's online softmax, on its transposed scores sᵀ (`cols` keys by `rows`
// ≤ kSoftmaxTileRows queries, key c's row at st + c·ld). For each query r: m_new = max(m[r], its
// largest score here); its scores become e^(s − m_new); rescale[r] = e^(m[r] − m_new), what the
// output's running sums are multiplied by; l[r] = l[r]·rescale[r] + the sum of its new values, in
// key order; m[r] = m_new. A query with nothing to attend yet (m_new = −∞) takes its exponentials
// from 0 instead: they are e^−∞ = 0, its rescale 0, and its l stays 0.
template <class C>
void softmax_tile(C* st, std::size_t ld, std::size_t cols, std::size_t rows, C* m, C* l, C* rescale);

}  // namespace ember::kernels::cpu
