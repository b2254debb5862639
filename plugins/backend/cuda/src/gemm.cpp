// Linear algebra: loom_ops gemm through cuBLASLt, with its epilogues (bias, bias+GELU, the
// GELU gradient, bias gradient): loom.gemm-epilogue/1's; and loom.fp8/1's scaled GEMM, the
// FP8 matmul with its scale pointers (ABI 2.32; compiled, not yet run on a GPU).
//   gemm: C(m,n) = alpha * op(A)(m,k) @ op(B)(k,n) + beta * C, row-major, `batch` times
//
// cuBLASLt is column-major. A row-major matrix with pitch ld read column-major is its
// transpose with the same ld, so the row-major product C = op(A) op(B) is computed as the
// column-major product C^T(n,m) = op(B)^T(n,k) op(A)^T(k,m): cuBLAS's "A" is our B (op
// transposed iff trans_b), its "B" is our A (transposed iff trans_a), and its (m, n) is our
// (n, m). No data moves.
//
// Each distinct problem (shape, pitches, strides, dtypes, pointer alignment, epilogue) gets a
// plan: the matmul descriptor, the four layouts and the heuristic's algorithm, built once and
// kept for the life of the instance (a training step repeats the same few dozen shapes).
//
// With backend.gemm_autotune (a run of one process), a plan keeps the heuristic's first
// kCandidates algorithms until its first call, which times each on that call's own operands
// and keeps the fastest: the heuristic ranks its list by a model of the GPU, not by a clock,
// and a step repeats each shape thousands of times. docs/performance.md has what it gained.
#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "allocator.hpp"
#include "cuda_backend.hpp"
#include "loom/cpp/gemm_args.hpp"
#include "loom/cpp/gemm_epilogue.hpp"
#include "ops.hpp"

namespace loom_cuda {

namespace {

void check_lt(cublasStatus_t s, const char* op, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(op,
         std::string(call) + " failed: " + cublasLtGetStatusName(s) + " (" +
             cublasLtGetStatusString(s) + ")",
         s == CUBLAS_STATUS_ALLOC_FAILED    ? LOOM_ERR_OUT_OF_MEMORY
         : s == CUBLAS_STATUS_NOT_SUPPORTED ? LOOM_ERR_UNIMPLEMENTED
                                            : LOOM_ERR_INTERNAL);
}
#define LT_CHECK(op, call) check_lt((call), (op), #call)

// Everything a plan depends on. Pointer alignments are part of it: cuBLASLt's heuristic
// assumes 256-byte-aligned operands unless told otherwise, and offsets (one head's slice of
// a (T, H*D) tensor) routinely break that.
struct Key {
  int trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
  int ab_type, c_type, compute, epilogue, bias_type;
  uint32_t align_a, align_b, align_c, align_aux;
  int b_type;  // B's type where it differs from A's (FP8: e5m2 x e4m3), else ab_type
  auto tie() const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                    ab_type, c_type, compute, epilogue, bias_type, align_a, align_b, align_c,
                    align_aux, b_type);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;  // cuBLAS's A, B, C(=D)
  cublasLtMatmulAlgo_t algo{};
  // The heuristic's candidates, best-ranked first, until the plan's first call has timed them
  // (gemm_autotune); empty once timed or when not tuning.
  std::vector<cublasLtMatmulAlgo_t> candidates;
  void destroy() noexcept {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (desc) cublasLtMatmulDescDestroy(desc);
    la = lb = lc = nullptr;
    desc = nullptr;
  }
};

// The largest power of two (at most 256) dividing the byte address of every matrix of a batch.
uint32_t alignment(const void* p, int64_t stride_elems, size_t elem_bytes, int64_t batch) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p);
  if (batch > 1) bits |= static_cast<uint64_t>(stride_elems) * elem_bytes;
  uint32_t a = 256;
  while (a > 1 && (bits & (a - 1)) != 0) a >>= 1;
  return a;
}

cudaDataType_t cuda_type(DLDataType d) {
  if (d.code == LOOM_DL_FLOAT8_E4M3FN && d.bits == 8) return CUDA_R_8F_E4M3;
  if (d.code == LOOM_DL_FLOAT8_E5M2 && d.bits == 8) return CUDA_R_8F_E5M2;
  if (is_bf16(d)) return CUDA_R_16BF;
  if (is_f16(d)) return CUDA_R_16F;
  return CUDA_R_32F;
}

// Elements from the first of `batch` matrices of rows x cols (pitch ld, stride) to the last's
// end: what an operand spans in memory.
int64_t span_elems(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// The stored matrix of one operand: rows x cols with row pitch ld, `batch` of them, inside t.
void check_operand(const char* op, const char* name, const DLTensor* t, int64_t rows, int64_t cols,
                   int64_t ld, int64_t stride, int64_t offset, int64_t batch) {
  std::string n(name);
  if (ld < std::max<int64_t>(1, cols))
    fail(op, "ld" + n + " = " + std::to_string(ld) + " is less than the " + std::to_string(cols) +
                 " columns " + n + " has as stored");
  if (offset < 0 || stride < 0) fail(op, "offset_" + n + " and stride_" + n + " must be >= 0");
  if (rows == 0 || cols == 0) return;
  int64_t end = offset + span_elems(rows, cols, ld, stride, batch);
  int64_t have = numel(t);
  if (end > have)
    fail(op, n + " needs " + std::to_string(end) + " elements (offset " + std::to_string(offset) +
                 ", " + std::to_string(batch) + " x " + std::to_string(rows) + "x" +
                 std::to_string(cols) + " with ld " + std::to_string(ld) + ", stride " +
                 std::to_string(stride) + ") but has " + std::to_string(have));
}

}  // namespace

struct Blas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, Plan> plans;
  std::set<Key> no_plan;  // epilogue problems cuBLASLt has no algorithm for: run unfused
  // backend.gemm_autotune: 0 off, 1 on, -1 on if the run has one process (asked of the host
  // at the first plan). Timing picks by the clock, so ranks could pick different kernels for
  // the same product: a replicated result (a router's logits on every tensor-parallel rank)
  // would then differ in its last bits between ranks. Tuning is for runs of one process.
  int autotune = -1;
};

Blas* blas_create(size_t workspace_bytes, bool autotune) {
  auto* b = new Blas;
  b->autotune = autotune ? -1 : 0;
  try {
    LT_CHECK("create", cublasLtCreate(&b->handle));
    if (workspace_bytes) LOOM_CUDA_CHECK("create", device_malloc(&b->workspace, workspace_bytes));
    b->workspace_bytes = workspace_bytes;
  } catch (...) {
    blas_destroy(b);
    throw;
  }
  return b;
}

void blas_destroy(Blas* b) noexcept {
  if (b == nullptr) return;
  for (auto& [key, plan] : b->plans) plan.destroy();
  if (b->workspace) cudaFree(b->workspace);
  if (b->handle) cublasLtDestroy(b->handle);
  delete b;
}

namespace {

// cuBLASLt's layout of one row-major operand: (rows x cols, pitch ld) read column-major.
cublasLtMatrixLayout_t make_layout(const char* op, cudaDataType_t type, int64_t rows, int64_t cols,
                                   int64_t ld, int64_t stride, int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  // Column-major (cols x rows): the row-major matrix's transpose.
  LT_CHECK(op, cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(cols),
                                          static_cast<uint64_t>(rows), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    LT_CHECK(op, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                  sizeof(count)));
    LT_CHECK(op, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &stride, sizeof(stride)));
  }
  return l;
}

bool has_aux(Epilogue e) {
  return e == Epilogue::kGeluAux || e == Epilogue::kGeluAuxBias || e == Epilogue::kDgelu;
}
bool has_bias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kGeluAuxBias || e == Epilogue::kBgrad;
}

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kBgrad:  // cuBLAS's B is our A (see the top): its sum over k
      return CUBLASLT_EPILOGUE_BGRADB;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// The heuristic's list is asked for this many algorithms when tuning.
constexpr int kCandidates = 8;

// Whether plans are tuned: backend.gemm_autotune, and for "on if one process" the host's
// world size, asked once.
bool tuning(loom_backend& be) {
  Blas& blas = *be.blas;
  if (blas.autotune < 0) {
    loom_parallel_layout l{};
    l.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2;
    const loom_host* h = be.host;
    const bool known = h->struct_size >= LOOM_HOST_SIZE_V2 && h->get_layout != nullptr;
    loom_error* e = known ? h->get_layout(h->ctx, &l) : nullptr;
    if (e) h->error_free(e);
    blas.autotune = (!known || e != nullptr || l.world <= 1) ? 1 : 0;
    if (blas.autotune == 0)
      loom::log(be.host, LOOM_LOG_INFO,
                "backend/cuda: gemm_autotune is off in a run of " + std::to_string(l.world) +
                    " processes (ranks must pick the same kernels); cuBLASLt's heuristic "
                    "picks");
  }
  return blas.autotune == 1;
}

Plan& get_plan(loom_backend& be, const Key& key, const char* op) {
  Blas& blas = *be.blas;
  auto it = blas.plans.find(key);
  if (it != blas.plans.end()) return it->second;
  if (blas.no_plan.count(key))
    fail(op, "cuBLASLt has no algorithm for this epilogue", LOOM_ERR_UNIMPLEMENTED);

  Plan p;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    auto ab = static_cast<cudaDataType_t>(key.ab_type);
    auto ct = static_cast<cudaDataType_t>(key.c_type);
    LT_CHECK(op, cublasLtMatmulDescCreate(&p.desc, static_cast<cublasComputeType_t>(key.compute),
                                          CUDA_R_32F));
    // cuBLAS's op(A) is our op(B)^T, its op(B) our op(A)^T (see the top of the file).
    cublasOperation_t ta = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(op,
             cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_CHECK(op,
             cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    auto epi = lt_epilogue(static_cast<Epilogue>(key.epilogue));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
      LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof(epi)));
      const auto e = static_cast<Epilogue>(key.epilogue);
      if (has_bias(e)) {
        int32_t bt = key.bias_type;
        LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bt, sizeof(bt)));
      }
      if (has_aux(e)) {
        int64_t aux_ld = key.ldc;
        int32_t aux_t = key.c_type;
        LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &aux_ld, sizeof(aux_ld)));
        LT_CHECK(op,
                 cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                &aux_t, sizeof(aux_t)));
      }
    }
    // Stored shapes: our B is (trans_b ? n x k : k x n), our A (trans_a ? k x m : m x k).
    p.la = make_layout(op, static_cast<cudaDataType_t>(key.b_type), key.trans_b ? key.n : key.k,
                       key.trans_b ? key.k : key.n, key.ldb, key.stride_b, key.batch);
    p.lb = make_layout(op, ab, key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda,
                       key.stride_a, key.batch);
    p.lc = make_layout(op, ct, key.m, key.n, key.ldc, key.stride_c, key.batch);

    LT_CHECK(op, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = blas.workspace_bytes;
    LT_CHECK(op, cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // cuBLAS's A is our B and vice versa.
    uint32_t al_a = key.align_b, al_b = key.align_a, al_c = key.align_c;
    LT_CHECK(op, cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    LT_CHECK(op, cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    LT_CHECK(op, cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
    LT_CHECK(op, cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));

    cublasLtMatmulHeuristicResult_t results[kCandidates]{};
    int found = 0;
    LT_CHECK(op, cublasLtMatmulAlgoGetHeuristic(blas.handle, p.desc, p.la, p.lb, p.lc, p.lc, pref,
                                                tuning(be) ? kCandidates : 1, results, &found));
    if (found == 0)
      fail(op,
           "cuBLASLt has no algorithm for m=" + std::to_string(key.m) +
               " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) + " (lda/ldb/ldc " +
               std::to_string(key.lda) + "/" + std::to_string(key.ldb) + "/" +
               std::to_string(key.ldc) + ", alignment " + std::to_string(key.align_a) + "/" +
               std::to_string(key.align_b) + "/" + std::to_string(key.align_c) + " bytes)",
           LOOM_ERR_UNIMPLEMENTED);
    p.algo = results[0].algo;
    for (int i = 0; found > 1 && i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(results[i].algo);
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (const loom::Error& e) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p.destroy();
    if (key.epilogue == static_cast<int>(Epilogue::kNone)) throw;
    // Whatever cuBLASLt refused about an epilogue (no algorithm, an attribute it does not
    // take) means: not fused here. The caller runs the plain GEMM and the bias op instead,
    // for this problem from now on; said once, since the saving is then not made.
    blas.no_plan.insert(key);
    loom::log(be.host, LOOM_LOG_INFO,
              std::string("backend/cuda: ") + op + ": m=" + std::to_string(key.m) +
                  " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) +
                  ": cuBLASLt cannot fuse this epilogue (" + e.what() +
                  "); it runs as a second pass");
    throw loom::Error(LOOM_ERR_UNIMPLEMENTED, e.what());
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p.destroy();
    throw;
  }
  return blas.plans.emplace(key, p).first->second;
}

// One cuBLASLt call of the plan with algorithm `algo` (its pointers set by the caller).
struct Call {
  const Plan* plan;
  const float *alpha, *beta;
  const void *a, *b;
  void* c;
  cublasStatus_t operator()(loom_backend& be, const cublasLtMatmulAlgo_t& algo) const {
    g_counters.launches.fetch_add(1, std::memory_order_relaxed);  // one library call
    return cublasLtMatmul(be.blas->handle, plan->desc, alpha, b, plan->la, a, plan->lb, beta, c,
                          plan->lc, c, plan->lc, &algo, be.blas->workspace,
                          be.blas->workspace_bytes, be.stream);
  }
};

// The plan's first call under gemm_autotune: times each candidate on this call's operands
// (a warm-up, then enough calls for ~0.2 ms) and keeps the fastest in p.algo. The trials write
// C, the aux matrix and the bias-gradient sums, which the real call then writes again; with
// beta != 0 they would also add into C, so C (its `c_span` bytes) is kept and put back. A
// candidate cuBLASLt refuses at run time is passed over. Not while the stream is captured
// into a graph (the timing waits for the device).
void tune(loom_backend& be, Plan& p, const Call& call, const Key& key, size_t c_span) {
  const std::vector<cublasLtMatmulAlgo_t> cands = std::move(p.candidates);
  p.candidates.clear();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK("gemm", cudaStreamIsCapturing(be.stream, &capture));
  if (cands.size() < 2 || capture != cudaStreamCaptureStatusNone) return;
  const bool keep_c = *call.beta != 0.0f;
  StreamScratch saved(keep_c ? c_span : 0, *be.alloc);
  if (keep_c)
    LOOM_CUDA_CHECK("gemm", cudaMemcpyAsync(saved.at<char>(0), call.c, c_span,
                                            cudaMemcpyDeviceToDevice, be.stream));
  cudaEvent_t ev[2] = {nullptr, nullptr};
  auto time_calls = [&](const cublasLtMatmulAlgo_t& algo, int reps) {
    LOOM_CUDA_CHECK("gemm", cudaEventRecord(ev[0], be.stream));
    for (int r = 0; r < reps; ++r) LT_CHECK("gemm", call(be, algo));
    LOOM_CUDA_CHECK("gemm", cudaEventRecord(ev[1], be.stream));
    LOOM_CUDA_CHECK("gemm", event_sync(ev[1]));
    float ms = 0;
    LOOM_CUDA_CHECK("gemm", cudaEventElapsedTime(&ms, ev[0], ev[1]));
    return ms / static_cast<float>(reps);
  };
  size_t best = cands.size();
  float best_ms = 0, first_ms = -1;
  try {
    LOOM_CUDA_CHECK("gemm", cudaEventCreate(&ev[0]));
    LOOM_CUDA_CHECK("gemm", cudaEventCreate(&ev[1]));
    for (size_t i = 0; i < cands.size(); ++i) {
      if (call(be, cands[i]) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up, or refused
      const float once = time_calls(cands[i], 1);
      const int reps = std::clamp(static_cast<int>(0.2f / std::max(once, 1e-4f)), 2, 50);
      const float ms = time_calls(cands[i], reps);
      if (i == 0) first_ms = ms;
      if (best == cands.size() || ms < best_ms) best = i, best_ms = ms;
    }
  } catch (...) {
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
    throw;
  }
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  if (keep_c)
    LOOM_CUDA_CHECK("gemm", cudaMemcpyAsync(call.c, saved.at<char>(0), c_span,
                                            cudaMemcpyDeviceToDevice, be.stream));
  if (best == cands.size()) return;  // none ran: the heuristic's first stays
  p.algo = cands[best];
  if (best > 0 && first_ms > 0) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "backend/cuda: gemm m=%lld n=%lld k=%lld batch=%lld epilogue %d: cuBLASLt's "
                  "candidate %zu of %zu, %.1f us (its first: %.1f us)",
                  static_cast<long long>(key.m), static_cast<long long>(key.n),
                  static_cast<long long>(key.k), static_cast<long long>(key.batch), key.epilogue,
                  best + 1, cands.size(), best_ms * 1e3, first_ms * 1e3);
    loom::log(be.host, LOOM_LOG_INFO, line);
  }
}

// Checks the arguments and runs the product (all `batch` matrices in one cuBLASLt call).
// kBgrad writes its sums into `bgrad` (f32, m).
// With `fp8` (loom.fp8/1, its types and scale grids checked by loom::gemm_fp8_refusal): A and
// B FP8, scaled by their scale inverses (cuBLASLt's A/B_SCALE_POINTER, cuBLAS's A being our B),
// in the layout Hopper's FP8 kernels take (cuBLAS's "TN": our trans_a = 0, trans_b = 1).
void run_gemm(loom_backend& be, const char* op, const loom_gemm_args* args, Epilogue epi,
              const DLTensor* bias, DLTensor* aux, float* bgrad = nullptr,
              const loom_gemm_fp8* fp8 = nullptr) {
  const loom_gemm_args& g = *args;
  char* a = static_cast<char*>(device_ptr(be, g.a, op, "a"));
  char* b = static_cast<char*>(device_ptr(be, g.b, op, "b"));
  char* c = static_cast<char*>(device_ptr(be, g.c, op, "c"));
  const DLDataType at = g.a->dtype, bt = g.b->dtype, ct = g.c->dtype;
  // f32 x f32 -> f32; bf16 x bf16 -> bf16 or f32; f16 x f16 -> f16 or f32; FP8 (with fp8).
  const bool ok_types =
      fp8 != nullptr || (loom_dtype_eq(at, bt) &&
                         ((is_f32(at) && is_f32(ct)) ||
                          ((is_bf16(at) || is_f16(at)) && (loom_dtype_eq(ct, at) || is_f32(ct)))));
  if (fp8 != nullptr && (g.trans_a || !g.trans_b))
    fail(op,
         "backend/cuda's FP8 GEMM takes A (m, k) and B (n, k), k contiguous in both "
         "(trans_a = 0, trans_b = 1: cuBLASLt's FP8 layout), not trans_a = " +
             std::to_string(g.trans_a) + ", trans_b = " + std::to_string(g.trans_b),
         LOOM_ERR_UNIMPLEMENTED);
  if (!ok_types)
    fail(op,
         "a, b, c are " + dtype_str(at) + ", " + dtype_str(bt) + ", " + dtype_str(ct) +
             "; backend/cuda multiplies f32 x f32 -> f32, bf16 x bf16 -> bf16/f32 and "
             "f16 x f16 -> f16/f32",
         LOOM_ERR_UNIMPLEMENTED);
  if (std::string why = loom::gemm_sizes_refusal(g); !why.empty()) fail(op, why);
  if (g.batch > INT32_MAX) fail(op, "batch = " + std::to_string(g.batch) + " is too large");
  check_operand(op, "a", g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.stride_a,
                g.offset_a, g.batch);
  check_operand(op, "b", g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.stride_b,
                g.offset_b, g.batch);
  check_operand(op, "c", g.c, g.m, g.n, g.ldc, g.stride_c, g.offset_c, g.batch);
  if (std::string why = loom::gemm_overlap_refusal(g); !why.empty()) fail(op, why);
  if (g.m == 0 || g.n == 0) return;

  const size_t ab_bytes = loom_dtype_bytes(at), b_bytes = loom_dtype_bytes(bt);
  const size_t c_bytes = loom_dtype_bytes(ct);
  a += g.offset_a * static_cast<int64_t>(ab_bytes);
  b += g.offset_b * static_cast<int64_t>(b_bytes);
  c += g.offset_c * static_cast<int64_t>(c_bytes);
  if (g.k == 0) {  // C = beta * C (an empty sum); cuBLASLt takes no k = 0
    if (epi != Epilogue::kNone) fail(op, "k = 0 with a fused epilogue");
    scale_matrices(be, ct, c, g.m, g.n, g.ldc, g.stride_c, g.batch, g.beta);
    return;
  }

  Key key{};
  key.trans_a = g.trans_a ? 1 : 0;
  key.trans_b = g.trans_b ? 1 : 0;
  key.m = g.m, key.n = g.n, key.k = g.k;
  key.lda = g.lda, key.ldb = g.ldb, key.ldc = g.ldc;
  key.stride_a = g.batch > 1 ? g.stride_a : 0;
  key.stride_b = g.batch > 1 ? g.stride_b : 0;
  key.stride_c = g.batch > 1 ? g.stride_c : 0;
  key.batch = g.batch;
  key.ab_type = cuda_type(at);
  key.b_type = cuda_type(bt);
  key.c_type = cuda_type(ct);
  key.compute = is_f32(at) && be.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  key.epilogue = static_cast<int>(epi);
  key.align_a = alignment(a, key.stride_a, ab_bytes, g.batch);
  key.align_b = alignment(b, key.stride_b, b_bytes, g.batch);
  key.align_c = alignment(c, key.stride_c, c_bytes, g.batch);

  void* bias_ptr = nullptr;
  void* aux_ptr = nullptr;
  if (epi != Epilogue::kNone && g.batch != 1) fail(op, "a fused epilogue takes batch = 1");
  if (epi == Epilogue::kBgrad) {
    bias_ptr = bgrad;
    key.bias_type = CUDA_R_32F;
  } else if (has_bias(epi)) {
    bias_ptr = device_ptr(be, bias, op, "bias", g.n);
    if (!(loom_dtype_eq(bias->dtype, ct) || (is_f32(bias->dtype) && !is_f32(ct))))
      fail(op, "bias is " + dtype_str(bias->dtype) + ", expected " + dtype_str(ct) + " or f32");
    key.bias_type = cuda_type(bias->dtype);
  }
  if (has_aux(epi)) {
    aux_ptr = device_ptr(be, aux, op, "aux", g.m * g.ldc);
    if (!loom_dtype_eq(aux->dtype, ct))
      fail(op, "aux is " + dtype_str(aux->dtype) + ", expected " + dtype_str(ct));
    key.align_aux = alignment(aux_ptr, 0, c_bytes, 1);
    // cuBLASLt's aux matrix: a pitch of a multiple of 8 elements, 16-byte aligned rows.
    if (key.align_aux < 16 || g.ldc % 8 != 0)
      fail(op, "the epilogue's aux matrix is not 16-byte aligned in every row",
           LOOM_ERR_UNIMPLEMENTED);
  }

  // cuBLASLt reads the bias vector in 16-byte pieces; a slice that does not start on one
  // (a row offset of an odd width) runs unfused (gemm_epilogue falls back on UNIMPLEMENTED).
  if (bias_ptr && (reinterpret_cast<uintptr_t>(bias_ptr) & 15u) != 0)
    fail(op, "the epilogue's bias vector is not 16-byte aligned", LOOM_ERR_UNIMPLEMENTED);
  Plan& p = get_plan(be, key, op);
  if (bias_ptr)
    LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &bias_ptr, sizeof(bias_ptr)));
  if (aux_ptr)
    LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &aux_ptr, sizeof(aux_ptr)));
  if (fp8 != nullptr) {  // cuBLAS's A is our B (see the top of the file)
    const void* sa = device_ptr(be, fp8->b_scale_inv, op, "b_scale_inv", 1);
    const void* sb = device_ptr(be, fp8->a_scale_inv, op, "a_scale_inv", 1);
    LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
                                                sizeof(sa)));
    LT_CHECK(op, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
                                                sizeof(sb)));
  }
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  const Call call{&p, &alpha, &beta, a, b, c};
  if (!p.candidates.empty()) {
    const int64_t c_elems = span_elems(g.m, g.n, g.ldc, g.stride_c, g.batch);
    tune(be, p, call, key, static_cast<size_t>(c_elems) * c_bytes);
  }
  LT_CHECK(op, call(be, p.algo));
}

}  // namespace

loom_error* gemm_fp8(loom_backend* be, const loom_gemm_args* args,
                     const loom_gemm_fp8* fp8) noexcept {
  return run_op(be, "gemm", [&](loom_backend& b) {
    run_gemm(b, "gemm", args, Epilogue::kNone, nullptr, nullptr, nullptr, fp8);
  });
}

loom_error* gemm(loom_backend* be, const loom_gemm_args* args) noexcept {
  return run_op(be, "gemm", [&](loom_backend& b) {
    run_gemm(b, "gemm", args, Epilogue::kNone, nullptr, nullptr);
  });
}

// loom.gemm-epilogue/1. Fused when cuBLASLt has an algorithm for the problem with that
// epilogue (a problem it has none for is remembered, so the heuristic is asked once), else
// the plain GEMM and bias_add / bias_backward / the GELU kernels after it: the same result,
// one more pass. The bias gradient comes out of cuBLASLt written, not added, so it goes
// through an f32 scratch that is then added to dbias. cuBLASLt's GELU is the tanh form
// (GPT-2's, LOOM_ACT_GELU_TANH), checked against backend/cpu's by gpu.ops_vs_cpu.
loom_error* gemm_epilogue(loom_backend* be, const loom_gemm_args* args,
                          const loom_gemm_epilogue* e) noexcept {
  const loom_gemm_args& g = *args;  // run_gemm reads no extension
  bool fused = false;
  loom_error* err = run_op(be, "gemm", [&](loom_backend& b) {
    if (g.k <= 0 || g.m <= 0 || g.n <= 0) return;  // nothing for an epilogue
    try {
      if (e->kind == LOOM_EPILOGUE_BIAS) {
        run_gemm(b, "gemm", &g, Epilogue::kBias, e->bias, nullptr);
      } else if (e->kind == LOOM_EPILOGUE_BIAS_GELU) {
        run_gemm(b, "gemm", &g, e->bias ? Epilogue::kGeluAuxBias : Epilogue::kGeluAux, e->bias,
                 e->aux);
      } else if (e->kind == LOOM_EPILOGUE_DGELU) {
        run_gemm(b, "gemm", &g, Epilogue::kDgelu, nullptr, e->aux);
      } else {
        device_ptr(b, e->dbias, "gemm", "dbias", g.m);
        StreamScratch sums(sizeof(float) * static_cast<size_t>(g.m), *b.alloc);
        run_gemm(b, "gemm", &g, Epilogue::kBgrad, nullptr, nullptr, sums.at<float>(0));
        add_column_sums(b, e->dbias, sums.at<float>(0), 1, g.m);
      }
      fused = true;
    } catch (const loom::Error& x) {
      if (x.code() != LOOM_ERR_UNIMPLEMENTED) throw;  // a bad argument stays an error
    }
  });
  if (err != nullptr || fused) return err;
  return loom::gemm_epilogue_two_passes(
      be, *args, *e,
      loom::EpiloguePasses{gemm, bias_add, bias_backward, gelu_forward, gelu_backward});
}

}  // namespace loom_cuda
