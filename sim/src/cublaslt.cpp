// cuBLASLt on the software GPU, written from the documentation in cublasLt.h: matrix
// multiplication D = α·op(A)·op(B) + β·C with f32 compute, column-major — A and B in f32, bf16 or
// f16, C and D in f32 or the 16-bit operands' type (the bias and its gradient in D's type; the
// products exact in f32, the sums f32, each result rounded once) — with the epilogues BIAS, RELU_BIAS,
// RELU_AUX_BIAS, DRELU_BGRAD and BGRADB, their argument rules and status codes, a heuristic that
// offers one algorithm (or none, with EMBER_SIM_LT_ALGOS=0, so a caller's fallback runs), and the
// work computed in stream order (by the reference loops of lt_matmul.cpp) and checked against the
// other streams like any kernel.
//
// Stricter than cuBLASLt where its documentation leaves room:
// - The heuristic derives the alignments an algorithm may assume from what it is told (the
//   preference's minimum alignments of A, B, C, D) and from the epilogue pointers' values, as the
//   header says it does; a matmul whose pointers are less aligned than that is refused
//   (CUBLAS_STATUS_INVALID_VALUE), where a GPU might read out of alignment or pick another path.
// - The ReLU bit-mask's layout is not documented beyond its leading dimension (in bits, a multiple
//   of 128). Here the bits of each 128-row group of a column are permuted, by a permutation drawn
//   per process from EMBER_SIM_SEED: only DRELU_BGRAD can read what RELU_AUX_BIAS wrote, and code
//   that decodes the mask itself gets nonsense.
// - The heuristic's algorithm splits k, as a GPU with many multiprocessors does for the long sums
//   of a weight or bias gradient: it needs a workspace of one f32 partial per element of D. Told
//   a smaller maximum it offers a plain algorithm, except for the bias-gradient epilogues
//   (DRELU_BGRAD, BGRADB), for which it then offers none. The workspace passed to the matmul must
//   hold what the algorithm needs, and is written there (checked against the other streams).
// - A 16-bit D whose preference allows the split's partials to be summed in D's type or in place
//   in D (the default reduction-scheme mask) is a failure: such a sum rounds more than once.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "executor.h"
#include "lt_matmul.h"
#include "numerics.h"
#include "runtime.h"
#include "state.h"

struct cublasLtContext {
  int device = 0;
};

namespace {

// The model's state, kept inside cuBLASLt's own opaque structures (their size is public).
struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  const void* aux = nullptr;
  std::int64_t aux_ld = 0;
};
struct Layout {
  cudaDataType type = CUDA_R_32F;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
};
struct Preference {
  std::uint64_t max_workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};                     // A, B, C, D: cuBLASLt's default assumption
  std::uint32_t reduction_schemes = CUBLASLT_REDUCTION_SCHEME_MASK;  // the default: all allowed
};
// What the heuristic decided, carried in cublasLtMatmulAlgo_t.
struct Algo {
  std::uint64_t magic = 0;
  std::uint32_t align[4] = {};  // A, B, C, D
  std::uint32_t bias_align = 0, aux_align = 0;
  std::int32_t epilogue = 0;
  std::uint64_t workspace = 0;  // bytes the split-k algorithm needs; 0 for the plain one
};
constexpr std::uint64_t kAlgoMagic = 0x656d6265724c7431ULL;  // "emberLt1"
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Preference) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

Desc& desc_of(cublasLtMatmulDesc_t d) { return *std::launder(reinterpret_cast<Desc*>(d)); }
const Layout& layout_of(cublasLtMatrixLayout_t l) { return *std::launder(reinterpret_cast<const Layout*>(l)); }
Preference& preference_of(cublasLtMatmulPreference_t p) { return *std::launder(reinterpret_cast<Preference*>(p)); }

std::mutex handles_mutex;
std::set<cublasLtHandle_t>& live_handles() {
  static auto* handles = new std::set<cublasLtHandle_t>;
  return *handles;
}
bool known(cublasLtHandle_t h) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  return live_handles().count(h) != 0;
}

bool offers_algorithms() { return ember_sim::rt::env_number("EMBER_SIM_LT_ALGOS", 1) != 0; }

std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

bool uses_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}
bool modelled(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU || uses_bias(e);
}

// The shapes of one multiplication, checked as cuBLASLt documents them.
struct Shape {
  std::uint64_t m = 0, n = 0, k = 0;
};
bool is_16_bit(cudaDataType t) { return t == CUDA_R_16BF || t == CUDA_R_16F; }
ember_sim::Format format_of(cudaDataType t) {
  return t == CUDA_R_16BF ? ember_sim::Format::bf16
                          : (t == CUDA_R_16F ? ember_sim::Format::f16 : ember_sim::Format::f32);
}
std::size_t element_bytes(cudaDataType t) { return is_16_bit(t) ? 2 : 4; }

// The type combinations cuBLASLt lists for f32 compute (scale type f32): A and B of one type — f32,
// bf16 or f16 — and C and D of one type: f32, or the 16-bit operands' own; FAST_TF32 for f32 only.
bool listed(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl) {
  const bool operands_ok = a.type == b.type && (a.type == CUDA_R_32F || is_16_bit(a.type));
  const bool result_ok = c.type == dl.type && (dl.type == CUDA_R_32F || dl.type == a.type);
  const bool compute_ok =
      d.compute == CUBLAS_COMPUTE_32F || (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type == CUDA_R_32F);
  return operands_ok && result_ok && compute_ok && d.scale == CUDA_R_32F;
}

cublasStatus_t check(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl, Shape& s) {
  if (!listed(d, a, b, c, dl)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!modelled(d.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  // op(A) is [m, k], op(B) [k, n], C and D [m, n] (column-major, as stored).
  s.m = dl.rows;
  s.n = dl.cols;
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  s.k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != s.m) return CUBLAS_STATUS_INVALID_VALUE;
  if ((tb ? b.cols : b.rows) != s.k || (tb ? b.rows : b.cols) != s.n) return CUBLAS_STATUS_INVALID_VALUE;
  if (c.rows != s.m || c.cols != s.n) return CUBLAS_STATUS_INVALID_VALUE;
  // A leading dimension below the number of rows (column-major) is invalid.
  for (const Layout* l : {&a, &b, &c, &dl})
    if (l->ld < static_cast<std::int64_t>(std::max<std::uint64_t>(l->rows, 1))) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_bias(d.epilogue) && !d.bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_aux(d.epilogue)) {
    // The ReLU mask's leading dimension is in bits: a multiple of 128, no less than D's rows.
    if (!d.aux || d.aux_ld % 128 != 0 || d.aux_ld < static_cast<std::int64_t>(s.m)) return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

std::size_t matrix_bytes(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return ((l.cols - 1) * static_cast<std::uint64_t>(l.ld) + l.rows) * element_bytes(l.type);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{ember_sim::rt::current_device()};
  std::lock_guard<std::mutex> lock(handles_mutex);
  live_handles().insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  {
    std::lock_guard<std::mutex> lock(handles_mutex);
    if (!live_handles().erase(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* storage = new cublasLtMatmulDescOpaque_t{};
  Desc* d = new (storage) Desc{};
  d->compute = compute;
  d->scale = scale;
  *desc = storage;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = desc_of(desc);
  const auto take = [&](auto& field) {
    if (size != sizeof(field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(d.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(d.transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(d.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(d.bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return take(d.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return take(d.aux_ld);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // not modelled
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  auto* storage = new cublasLtMatmulPreferenceOpaque_t{};
  new (storage) Preference{};
  *pref = storage;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  Preference& p = preference_of(pref);
  const auto align = [&](int which) {
    if (size != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&p.align[which], buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (size != sizeof(std::uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&p.max_workspace, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      if (size != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&p.reduction_schemes, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return align(0);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return align(1);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return align(2);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return align(3);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // not modelled
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  auto* storage = new cublasLtMatrixLayoutOpaque_t{};
  new (storage) Layout{type, rows, cols, ld};
  *layout = storage;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !pref || !count || !results || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *count = 0;
  const Desc& dd = desc_of(desc);
  Shape s;
  if (const cublasStatus_t st = check(dd, layout_of(a), layout_of(b), layout_of(c), layout_of(d), s);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  const Preference& p = preference_of(pref);
  // One algorithm, needing no workspace and its elements' alignment at least; none when told to offer none.
  const Layout* layouts[4] = {&layout_of(a), &layout_of(b), &layout_of(c), &layout_of(d)};
  for (int i = 0; i < 4; ++i)
    if (p.align[i] < element_bytes(layouts[i]->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!offers_algorithms()) return CUBLAS_STATUS_NOT_SUPPORTED;
  const std::uint32_t in_d_type = CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  if (is_16_bit(layout_of(d).type) && (p.reduction_schemes & in_d_type) != 0)
    ember_sim::fail(
        "cublasLtMatmulAlgoGetHeuristic: a 16-bit D with a reduction-scheme mask that lets a split-K "
        "algorithm sum its partials in D's type or in place (set CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK "
        "to CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: each element must be rounded once)");
  const std::uint64_t split_workspace = s.m * s.n * sizeof(float);
  const bool split = s.k > 1 && p.max_workspace >= split_workspace;
  const bool bias_gradient = dd.epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD || dd.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if (!split && bias_gradient && s.k > 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  Algo algo;
  algo.workspace = split ? split_workspace : 0;
  algo.magic = kAlgoMagic;
  std::copy(std::begin(p.align), std::end(p.align), algo.align);
  algo.bias_align = uses_bias(dd.epilogue) ? alignment_of(dd.bias) : 0;
  algo.aux_align = uses_aux(dd.epilogue) ? alignment_of(dd.aux) : 0;
  algo.epilogue = static_cast<std::int32_t>(dd.epilogue);
  results[0] = cublasLtMatmulHeuristicResult_t{};
  std::memcpy(&results[0].algo, &algo, sizeof(algo));
  results[0].workspaceSize = algo.workspace;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_layout, const void* B, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo_in, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !alpha || !beta || !a_layout || !b_layout || !c_layout || !d_layout || !algo_in)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (handle->device != ember_sim::rt::current_device())
    ember_sim::fail("cublasLtMatmul: the handle was created on cuda:" + std::to_string(handle->device) +
                    " but cuda:" + std::to_string(ember_sim::rt::current_device()) + " is current");
  const Desc d = desc_of(desc);
  const Layout la = layout_of(a_layout), lb = layout_of(b_layout), lc = layout_of(c_layout), ld = layout_of(d_layout);
  Shape s;
  if (const cublasStatus_t st = check(d, la, lb, lc, ld, s); st != CUBLAS_STATUS_SUCCESS) return st;
  Algo algo;
  std::memcpy(&algo, algo_in, sizeof(algo));
  if (algo.magic != kAlgoMagic || algo.epilogue != static_cast<std::int32_t>(d.epilogue))
    return CUBLAS_STATUS_INVALID_VALUE;  // not an algorithm the heuristic offered for this epilogue
  if (algo.workspace > 0 && (!workspace || workspace_bytes < algo.workspace)) return CUBLAS_STATUS_INVALID_VALUE;
  // Pointers less aligned than the algorithm was chosen for.
  const void* operands[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if (alignment_of(operands[i]) < algo.align[i]) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_bias(d.epilogue) && alignment_of(d.bias) < algo.bias_align) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_aux(d.epilogue) && alignment_of(d.aux) < algo.aux_align) return CUBLAS_STATUS_INVALID_VALUE;
  if (s.m == 0 || s.n == 0) return CUBLAS_STATUS_SUCCESS;

  const float a_scale = *static_cast<const float*>(alpha), b_scale = *static_cast<const float*>(beta);
  std::vector<ember_sim::rt::Access> accesses;
  if (s.k > 0) {
    accesses.push_back({A, matrix_bytes(la), false, "matrix A of cublasLtMatmul"});
    accesses.push_back({B, matrix_bytes(lb), false, "matrix B of cublasLtMatmul"});
  }
  if (b_scale != 0.0f && C != D) accesses.push_back({C, matrix_bytes(lc), false, "matrix C of cublasLtMatmul"});
  accesses.push_back({D, matrix_bytes(ld), true, "matrix D of cublasLtMatmul"});
  if (algo.workspace > 0) accesses.push_back({workspace, algo.workspace, true, "the workspace of cublasLtMatmul"});
  const cublasLtEpilogue_t e = d.epilogue;
  const std::uint64_t bias_length = e == CUBLASLT_EPILOGUE_BGRADB ? s.n : s.m;
  const bool bias_written = e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADB;
  if (uses_bias(e))
    accesses.push_back(
        {d.bias, bias_length * element_bytes(ld.type), bias_written, "the bias vector of cublasLtMatmul"});
  const std::size_t aux_bytes = static_cast<std::size_t>(d.aux_ld) / 8 * s.n;
  if (uses_aux(e))
    accesses.push_back({d.aux, aux_bytes, e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS, "the ReLU bit-mask of cublasLtMatmul"});
  // The bias and its gradient are in D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
  // CUBLAS_COMPUTE_32F_FAST_TF32 rounds the products' inputs to TF32 (numerics.h).
  const ember_sim::cublaslt_model::Matmul call{.m = s.m,
                                               .n = s.n,
                                               .k = s.k,
                                               .ta = d.transa != CUBLAS_OP_N,
                                               .tb = d.transb != CUBLAS_OP_N,
                                               .A = A,
                                               .B = B,
                                               .C = C,
                                               .D = D,
                                               .lda = la.ld,
                                               .ldb = lb.ld,
                                               .ldc = lc.ld,
                                               .ldd = ld.ld,
                                               .in = format_of(la.type),
                                               .out_format = format_of(ld.type),
                                               .a_scale = a_scale,
                                               .b_scale = b_scale,
                                               .e = e,
                                               .bias_written = bias_written,
                                               .bias = const_cast<void*>(d.bias),
                                               .aux = static_cast<std::uint8_t*>(const_cast<void*>(d.aux)),
                                               .aux_ld = d.aux_ld,
                                               .tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32};
  const cudaError_t status =
      ember_sim::rt::enqueue_work(stream, "cublasLtMatmul", std::move(accesses), [call] { call.run(); });
  return status == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
