// cuBLASLt GEMMs with fused epilogues. As in gemm.cpp, the row-major product C = op(A)·op(B) is
// the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's A is our B and its B is our A, its D is
// [n rows, m columns]. So "one bias per column of C" is cuBLASLt's per-row bias, and the
// gradient of op(A) summed over k is its BGRADB (over the columns of its B).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "kernels/gemm_epilogue.h"

namespace ember::kernels::cuda {
namespace {

cublasLtEpilogue_t to_lt(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::relu_aux_bias: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case GemmEpilogue::drelu_bgrad: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case GemmEpilogue::bgrad_a: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}
bool uses_aux(GemmEpilogue e) { return e == GemmEpilogue::relu_aux_bias || e == GemmEpilogue::drelu_bgrad; }
cublasOperation_t to_op(Transpose t) { return t == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T; }

using Key = std::tuple<int, int, int, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t>;

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

Plan& plan_for(GemmEpilogue e, Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k,
               std::size_t lda, std::size_t ldb, std::size_t ldc) {
  ThreadState& st = state_for_current_device();
  const Key key{static_cast<int>(e), static_cast<int>(ta), static_cast<int>(tb), m, n, k, lda, ldb, ldc};
  auto& slot = st.plans[key];
  if (slot) return *slot;
  slot = std::make_unique<Plan>();
  Plan& p = *slot;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = to_op(tb), op_b = to_op(ta);  // swapped: see the file comment
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epilogue = to_lt(e);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (uses_aux(e)) {
    const std::int64_t aux_ld = static_cast<std::int64_t>(relu_mask_ld(n));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // Stored shapes, column-major: our row-major [r, c] with row stride ld is column-major [c, r].
  const auto u = [](std::size_t v) { return static_cast<std::uint64_t>(v); };
  const auto ld = [](std::size_t v) { return static_cast<std::int64_t>(v > 0 ? v : 1); };
  const std::size_t b_rows = tb == Transpose::no ? k : n, b_cols = tb == Transpose::no ? n : k;
  const std::size_t a_rows = ta == Transpose::no ? m : k, a_cols = ta == Transpose::no ? k : m;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, u(b_cols), u(b_rows), ld(ldb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, u(a_cols), u(a_rows), ld(lda)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, u(n), u(m), ld(ldc)));

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const std::size_t no_workspace = 0;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &no_workspace, sizeof(no_workspace)));
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

bool gemm_epilogue_supported(GemmEpilogue epilogue, Transpose ta, Transpose tb, std::size_t m, std::size_t n,
                             std::size_t k, std::size_t lda, std::size_t ldb, std::size_t ldc) {
  if (m == 0 || n == 0 || k == 0) return false;
  return plan_for(epilogue, ta, tb, m, n, k, lda, ldb, ldc).supported;
}

void gemm_epilogue(GemmEpilogue epilogue, Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k,
                   const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                   float* vec, void* aux, cudaStream_t stream) {
  Plan& p = plan_for(epilogue, ta, tb, m, n, k, lda, ldb, ldc);
  EMBER_CHECK(p.supported, NotImplementedError, "cuBLASLt has no fp32 algorithm for this GEMM epilogue (", m, "x", n,
              "x", k, "): check gemm_epilogue_supported() and use gemm() with separate kernels");
  // The pointers change between calls; the descriptor is this thread's, so setting them is safe.
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
  if (uses_aux(epilogue))
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtHandle_t handle = state_for_current_device().handle;
  CUBLAS_CHECK(cublasLtMatmul(handle, p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.d, c, p.d, &p.algo, nullptr, 0,
                              stream));
}

}  // namespace ember::kernels::cuda
