// cuBLASLt GEMMs with fused epilogues. As in gemm.cpp, the row-major product C = op(A)·op(B) is
// the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's A is our B and its B is our A, its D is
// [n rows, m columns]. So "one bias per column of C" is cuBLASLt's per-row bias, and the
// gradient of op(A) summed over k is its BGRADB (over the columns of its B).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "kernels/cuda/cublas_workspace.h"
#include "kernels/cuda/library_types.h"
#include "kernels/gemm_epilogue.h"

namespace ember::kernels::cuda {
namespace {

cublasLtEpilogue_t to_lt(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::relu_aux_bias:
      return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case GemmEpilogue::drelu_bgrad:
      return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case GemmEpilogue::bgrad_a:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}
bool uses_aux(GemmEpilogue e) { return e == GemmEpilogue::relu_aux_bias || e == GemmEpilogue::drelu_bgrad; }
cublasOperation_t to_op(Transpose t) { return t == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T; }

using Key = std::tuple<int, int, int, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,
                       unsigned, bool, int, int>;

// The largest power of two, up to 256, that divides the address: cuBLASLt's heuristic picks
// algorithms for the alignments it is told (256 bytes unless told otherwise), and a tensor
// viewed at an offset may be aligned to less (2 bytes for a 16-bit one).
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 2 && address % align != 0) align /= 2;
  return align;
}

// The descriptors and the chosen algorithm of one GEMM shape: built once, reused every call.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLASLt's A (our B), B (our A), D
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct ThreadState {
  cublasLtHandle_t handle = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans;
};

// Handles and plans per thread and device, kept for the process (as cuBLAS handles are).
ThreadState& state_for_current_device() {
  thread_local std::map<int, ThreadState> states;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  ThreadState& st = states[device];
  if (!st.handle) CUBLAS_CHECK(cublasLtCreate(&st.handle));
  return st;
}

void set_epilogue_pointers(Plan& p, const EpilogueGemm& g) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.vec, sizeof(g.vec)));
  if (uses_aux(g.epilogue))
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
}

// Alignments of a, b, c, vec and aux packed in one number (log2 of each, 4 bits apiece).
unsigned alignment_key(const EpilogueGemm& g) {
  unsigned key = 0;
  for (const void* p : {static_cast<const void*>(g.a), static_cast<const void*>(g.b), static_cast<const void*>(g.c),
                        static_cast<const void*>(g.vec), static_cast<const void*>(g.aux)})
    key = key * 16 + static_cast<unsigned>(__builtin_ctz(p ? alignment_of(p) : 256u));
  return key;
}

Plan& plan_for(const EpilogueGemm& g, std::uint64_t workspace_bytes) {
  const GemmEpilogue e = g.epilogue;
  const Transpose ta = g.ta, tb = g.tb;
  const std::size_t m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  ThreadState& st = state_for_current_device();
  const bool tf32 = allow_tf32() && g.ab == DType::f32;  // TF32 concerns f32 operands only
  const Key key{static_cast<int>(e),
                static_cast<int>(ta),
                static_cast<int>(tb),
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                alignment_key(g),
                tf32,
                static_cast<int>(g.ab),
                static_cast<int>(g.out)};
  auto& slot = st.plans[key];
  if (slot) return *slot;
  slot = std::make_unique<Plan>();
  Plan& p = *slot;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = to_op(tb), op_b = to_op(ta);  // swapped: see the file comment
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epilogue = to_lt(e);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (uses_aux(e)) {
    const std::int64_t aux_ld = static_cast<std::int64_t>(relu_mask_ld(n));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // Stored shapes, column-major: our row-major [r, c] with row stride ld is column-major [c, r].
  const auto u = [](std::size_t v) { return static_cast<std::uint64_t>(v); };
  const auto ld = [](std::size_t v) { return static_cast<std::int64_t>(v > 0 ? v : 1); };
  const std::size_t b_rows = tb == Transpose::no ? k : n, b_cols = tb == Transpose::no ? n : k;
  const std::size_t a_rows = ta == Transpose::no ? m : k, a_cols = ta == Transpose::no ? k : m;
  const cudaDataType operands = library_type(g.ab), results = library_type(g.out);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, operands, u(b_cols), u(b_rows), ld(ldb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, operands, u(a_cols), u(a_rows), ld(lda)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, results, u(n), u(m), ld(ldc)));

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  // The stream's GEMM workspace, which every call passes: with none, Hopper's split-K and stream-K
  // algorithms are ruled out, and some bias-gradient epilogues find no algorithm at all.
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes, sizeof(workspace_bytes)));
  if (g.out != DType::f32) {
    // Split-K partials summed in f32 only, never in D's 16-bit type or in place in D: each
    // element is rounded once, as cuBLAS's CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
    // asks there (gemm.cpp); cuBLASLt does not read that handle setting.
    const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof(schemes)));
  }
  // The operands' real alignments (cuBLASLt's A is our B, its B our A, C and D are our C).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.c}};
  for (const auto& [attribute, pointer] : alignments) {
    const std::uint32_t align = alignment_of(pointer);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &align, sizeof(align)));
  }
  // The heuristic reads the epilogue pointers' values for their alignment, so set them first.
  set_epilogue_pointers(p, g);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(st.handle, p.desc, p.a, p.b, p.d, p.d, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  p.supported = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.supported) p.algo = result.algo;
  return p;
}

}  // namespace

bool gemm_epilogue_supported(const EpilogueGemm& g) {
  if (g.m == 0 || g.n == 0 || g.k == 0) return false;
  return plan_for(g, gemm_workspace_bytes()).supported;
}

void gemm_epilogue(const EpilogueGemm& g, cudaStream_t stream) {
  const GemmWorkspace workspace = gemm_workspace(stream);
  Plan& p = plan_for(g, workspace.bytes);
  EMBER_CHECK(p.supported, NotImplementedError, "cuBLASLt has no ", g.ab, " algorithm for this GEMM epilogue (", g.m,
              "x", g.n, "x", g.k, "): check gemm_epilogue_supported() and use gemm() with separate kernels");
  // The pointers change between calls; the descriptor is this thread's, so setting them is safe
  // (cublasLtMatmul reads them when it enqueues the work, and a graph capture keeps the values).
  set_epilogue_pointers(p, g);
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtHandle_t handle = state_for_current_device().handle;
  CUBLAS_CHECK(cublasLtMatmul(handle, p.desc, &alpha, g.b, p.a, g.a, p.b, &beta, g.c, p.d, g.c, p.d, &p.algo,
                              workspace.data, workspace.bytes, stream));
  count_library_call();
}

}  // namespace ember::kernels::cuda
