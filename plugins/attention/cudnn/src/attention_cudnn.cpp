// attention/cudnn: fused flash attention (forward saving the softmax statistics, backward)
// through cuDNN 9's backend graph API. Each pass is one operation graph of matmul,
// pointwise, reduction and reshape nodes in the shape cudnn_frontend's SDPA node lowers to,
// which cuDNN's runtime-fusion engine recognises and compiles into one flash-attention
// kernel. Plans are built once per shape key and cached; the workspace is grown, never freed
// until destroy.
//
// Layouts (attention.h): q(B,T,Hq,D), k/v(B,S,Hkv,D), out(B,T,Hq,D), lse(B,Hq,T) f32.
// cuDNN works in (b,h,s,d) dims with arbitrary strides, so loom's BTHD buffers are handed
// over as they are: dims (B,H,T,D), strides (T*H*D, D, H*D, 1); K^T is K's buffer seen with
// its last two strides swapped. lse is cuDNN's "stats" (max + log sum exp of the scaled
// scores, per row), dims (B,H,T,1).
//
// Grouped-query attention (Hq a multiple of Hkv): the graphs stay MHA; K and V are repeated
// to Hq heads around them and dK, dV summed back over each group (gqa.hpp).
//
// Limits, refused with a message: bf16/f16 only; causal only with T == S (cuDNN's GEN_INDEX
// mask here is row >= col, top-left aligned; loom's is bottom-right, equal only when T == S).
//
// Stream: cuDNN runs on the backend's own stream, lent through loom.device-stream/1
// (backend.h), so the backend's ops and attention stay in order with no synchronisation.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cudnn_graph.hpp"
#include "gqa.hpp"
#include "loom/cpp/cuda_device.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace {

using cudnn_attn::Desc;
using cudnn_attn::Kind;
using cudnn_attn::Plan;

void cuda_check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  throw loom::Error(
      e == cudaErrorMemoryAllocation ? LOOM_ERR_OUT_OF_MEMORY : LOOM_ERR_INTERNAL,
      "attention/cudnn: " + what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

// What masked scores become: -inf, as cudnn_frontend gives cuDNN >= 9.10 (no row is fully
// masked: causal here keeps the diagonal, so every row's max is finite).
constexpr float kMaskValue = -std::numeric_limits<float>::infinity();

// Unique ids of the buffers and by-value scalars in the variant pack.

enum Uid : int64_t {
  kQ = 1,
  kKT,
  kVT,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSum,
  kOne,
  kDQAccum,
  kV,
  kVirtual = 100  // virtual intermediates count up from here
};

struct Shape {
  int64_t B, T, S, H, D;
  bool f16, causal;
  int64_t Hkv;  // H / Hkv query heads share each K/V head; the graphs see H heads of both
  auto key() const { return std::tuple(B, T, S, H, D, f16, causal); }
  int64_t group() const { return H / Hkv; }
};

// A cached pass: every descriptor the plan was built from (kept alive with it) and the plan.
struct Graph {
  std::vector<std::unique_ptr<Desc>> descs;
  Plan plan;
  int64_t next_virtual = kVirtual;

  const Desc& add(Desc d) {
    descs.push_back(std::make_unique<Desc>(std::move(d)));
    return *descs.back();
  }
  const Desc& buffer(const char* name, int64_t uid, cudnnDataType_t dt, std::vector<int64_t> dims,
                     std::vector<int64_t> strides) {
    return add(cudnn_attn::tensor(name, uid, dt, dims, strides, Kind::Buffer));
  }
  const Desc& scalar(const char* name, int64_t uid) {
    return add(
        cudnn_attn::tensor(name, uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, Kind::ByValue));
  }
  const Desc& virt(const char* name, std::vector<int64_t> dims,
                   cudnnDataType_t dt = CUDNN_DATA_FLOAT) {
    std::vector<int64_t> strides(dims.size(), 1);  // compact row-major
    for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
    return add(cudnn_attn::tensor(name, next_virtual++, dt, dims, strides, Kind::Virtual));
  }
};

// Dims/strides of a BTHD buffer seen as (b,h,rows,d), and of its transpose (b,h,d,rows).
std::vector<int64_t> bhsd_dims(const Shape& s, int64_t rows) { return {s.B, s.H, rows, s.D}; }
std::vector<int64_t> bhsd_strides(const Shape& s, int64_t rows) {
  return {rows * s.H * s.D, s.D, s.H * s.D, 1};
}
std::vector<int64_t> bhds_dims(const Shape& s, int64_t rows) { return {s.B, s.H, s.D, rows}; }
std::vector<int64_t> bhds_strides(const Shape& s, int64_t rows) {
  return {rows * s.H * s.D, s.D, 1, s.H * s.D};
}

// Scores (b,h,T,S) = scale * Q K^T, in f32: the shared front of both passes.
const Desc& scaled_scores(Graph& g, std::vector<const Desc*>& ops, const Shape& s, const Desc& q,
                          const Desc& kt, const Desc& scale) {
  const std::vector<int64_t> sdims{s.B, s.H, s.T, s.S};
  const Desc& raw = g.virt("qk", sdims);
  ops.push_back(&g.add(cudnn_attn::matmul("bmm q@k^T", q, kt, raw)));
  const Desc& scaled = g.virt("qk_scaled", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("scale", CUDNN_POINTWISE_MUL, raw, &scale, nullptr, scaled)));
  return scaled;
}

// The causal mask of `x` (T == S here): row >= col keeps x, the rest becomes -inf. The index
// and comparison nodes are those cudnn_frontend's diagonal band mask lowers to (index
// generation in f32 math with int32 outputs), which the fusion engine pattern-matches.
const Desc& causal_mask(Graph& g, std::vector<const Desc*>& ops, const Shape& s, const Desc& x) {
  const std::vector<int64_t> sdims{s.B, s.H, s.T, s.S};
  const Desc& row = g.virt("row_index", sdims, CUDNN_DATA_INT32);
  ops.push_back(&g.add(cudnn_attn::pointwise("gen row index", CUDNN_POINTWISE_GEN_INDEX, x, nullptr,
                                             nullptr, row, CUDNN_DATA_FLOAT, 2)));
  const Desc& col = g.virt("col_index", sdims, CUDNN_DATA_INT32);
  ops.push_back(&g.add(cudnn_attn::pointwise("gen col index", CUDNN_POINTWISE_GEN_INDEX, x, nullptr,
                                             nullptr, col, CUDNN_DATA_FLOAT, 3)));
  const Desc& mask = g.virt("causal_mask", sdims, CUDNN_DATA_BOOLEAN);
  ops.push_back(&g.add(cudnn_attn::pointwise("row >= col", CUDNN_POINTWISE_CMP_GE, row, &col,
                                             nullptr, mask, CUDNN_DATA_BOOLEAN)));
  const Desc& neg_inf = g.scalar("neg_inf", kNegInf);
  const Desc& masked = g.virt("masked", sdims);
  ops.push_back(&g.add(cudnn_attn::pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, x,
                                             &neg_inf, &mask, masked)));
  return masked;
}

// Forward: stats = max + log(sum exp(x - max)), P = exp(x - max) / sum, O = P V. P enters
// the second matmul in the i/o dtype: cuDNN's fused engine takes that matmul's A operand only
// so (cudnn_frontend casts it the same way), with f32 accumulation.
void build_forward(Graph& g, cudnnHandle_t h, const Shape& s) {
  const cudnnDataType_t io = s.f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  const std::vector<int64_t> sdims{s.B, s.H, s.T, s.S}, rdims{s.B, s.H, s.T, 1};
  std::vector<const Desc*> ops;
  const Desc& q = g.buffer("q", kQ, io, bhsd_dims(s, s.T), bhsd_strides(s, s.T));
  const Desc& kt = g.buffer("k^T", kKT, io, bhds_dims(s, s.S), bhds_strides(s, s.S));
  const Desc& v = g.buffer("v", kV, io, bhsd_dims(s, s.S), bhsd_strides(s, s.S));
  const Desc& o = g.buffer("o", kO, io, bhsd_dims(s, s.T), bhsd_strides(s, s.T));
  const Desc& stats = g.buffer("stats", kStats, CUDNN_DATA_FLOAT, rdims, {s.H * s.T, s.T, 1, 1});
  const Desc& scale = g.scalar("attn_scale", kScale);
  const Desc* x = &scaled_scores(g, ops, s, q, kt, scale);
  if (s.causal) x = &causal_mask(g, ops, s, *x);
  const Desc& mx = g.virt("row_max", rdims);
  ops.push_back(&g.add(cudnn_attn::reduction("row max", CUDNN_REDUCE_TENSOR_MAX, *x, mx)));
  const Desc& xm = g.virt("x_minus_max", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("x - max", CUDNN_POINTWISE_SUB, *x, &mx, nullptr, xm)));
  const Desc& e = g.virt("exp", sdims);
  ops.push_back(&g.add(cudnn_attn::pointwise("exp", CUDNN_POINTWISE_EXP, xm, nullptr, nullptr, e)));
  const Desc& sum = g.virt("row_sum", rdims);
  ops.push_back(&g.add(cudnn_attn::reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, e, sum)));
  const Desc& lg = g.virt("log_sum", rdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("log", CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, lg)));
  ops.push_back(
      &g.add(cudnn_attn::pointwise("stats", CUDNN_POINTWISE_ADD, mx, &lg, nullptr, stats)));
  const Desc& p = g.virt("probs", sdims, io);
  ops.push_back(&g.add(cudnn_attn::pointwise("softmax", CUDNN_POINTWISE_DIV, e, &sum, nullptr, p)));
  ops.push_back(&g.add(cudnn_attn::matmul("bmm p@v", p, v, o)));
  g.plan = cudnn_attn::make_plan(h, ops, "forward");
}

// Backward (FlashAttention-2), node for node as cudnn_frontend's composite SDPA backward
// lowers it for cuDNN >= 9.6 without dropout or dP workspace:
//   softmax_sum = rowsum(dO * O) * 1        (f32 buffer of ours)
//   P = exp(mask(scale * Q K^T - stats))    (f32)
//   dV = P^T dO                              (P^T a reshape, in the i/o dtype)
//   dS = (dO V^T - softmax_sum) * P * scale  (f32)
//   dK = dS^T Q                              (dS^T a reshape, in the i/o dtype)
//   dQ_accum = dS K, dQ = identity(dQ_accum) (K a reshape of the K^T buffer; dQ_accum an f32
//                                             buffer of ours)
// `deterministic`: dQ = dS K straight into dQ, with no accumulator, as the frontend lowers
// its deterministic algorithm on Hopper (its "dP workspace" form: the engine then keeps dP
// in its own workspace and sums dQ in a fixed order, where the accumulator form adds the key
// tiles' parts into dQ_accum atomically, in whatever order they finish).
void build_backward(Graph& g, cudnnHandle_t h, const Shape& s, bool deterministic) {
  const cudnnDataType_t io = s.f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  const std::vector<int64_t> sdims{s.B, s.H, s.T, s.S}, rdims{s.B, s.H, s.T, 1};
  const std::vector<int64_t> rstrides{s.H * s.T, s.T, 1, 1};
  std::vector<const Desc*> ops;
  const Desc& q = g.buffer("q", kQ, io, bhsd_dims(s, s.T), bhsd_strides(s, s.T));
  const Desc& kt = g.buffer("k^T", kKT, io, bhds_dims(s, s.S), bhds_strides(s, s.S));
  const Desc& vt = g.buffer("v^T", kVT, io, bhds_dims(s, s.S), bhds_strides(s, s.S));
  const Desc& o = g.buffer("o", kO, io, bhsd_dims(s, s.T), bhsd_strides(s, s.T));
  const Desc& dout = g.buffer("dO", kDO, io, bhsd_dims(s, s.T), bhsd_strides(s, s.T));
  const Desc& stats = g.buffer("stats", kStats, CUDNN_DATA_FLOAT, rdims, rstrides);
  const Desc& rowsum = g.buffer("softmax_sum", kSum, CUDNN_DATA_FLOAT, rdims, rstrides);
  const Desc& dq = g.buffer("dQ", kDQ, io, bhsd_dims(s, s.T), bhsd_strides(s, s.T));
  const Desc& dk = g.buffer("dK", kDK, io, bhsd_dims(s, s.S), bhsd_strides(s, s.S));
  const Desc& dv = g.buffer("dV", kDV, io, bhsd_dims(s, s.S), bhsd_strides(s, s.S));
  const Desc& scale = g.scalar("attn_scale", kScale);
  const Desc& one = g.scalar("one", kOne);

  // softmax_sum. The product's strides are the frontend's (virtual: layout is the engine's).
  const Desc& dot =
      g.add(cudnn_attn::tensor("dO*O", g.next_virtual++, CUDNN_DATA_FLOAT, bhsd_dims(s, s.T),
                               {s.H * s.T * s.D, s.T * s.D, s.H * s.D, 1}, Kind::Virtual));
  ops.push_back(
      &g.add(cudnn_attn::pointwise("dO * O", CUDNN_POINTWISE_MUL, dout, &o, nullptr, dot)));
  const Desc& red = g.virt("rowsum(dO*O)", rdims);
  ops.push_back(&g.add(cudnn_attn::reduction("rowsum(dO*O)", CUDNN_REDUCE_TENSOR_ADD, dot, red)));
  ops.push_back(&g.add(
      cudnn_attn::pointwise("softmax_sum", CUDNN_POINTWISE_MUL, red, &one, nullptr, rowsum)));

  // P
  const Desc& x = scaled_scores(g, ops, s, q, kt, scale);
  const Desc* xs = &g.virt("x_minus_stats", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("x - stats", CUDNN_POINTWISE_SUB, x, &stats, nullptr, *xs)));
  if (s.causal) xs = &causal_mask(g, ops, s, *xs);
  const Desc& p = g.virt("probs", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("exp", CUDNN_POINTWISE_EXP, *xs, nullptr, nullptr, p)));

  // (b,h,S,T) views of (b,h,T,S) virtuals, in the i/o dtype: last two strides swapped.
  auto transposed = [&](const char* name, const Desc& src) -> const Desc& {
    const Desc& t = g.add(cudnn_attn::tensor(name, g.next_virtual++, io, {s.B, s.H, s.S, s.T},
                                             {s.H * s.T * s.S, s.T * s.S, 1, s.S}, Kind::Virtual));
    ops.push_back(&g.add(cudnn_attn::reshape(std::string("reshape ") + name, src, t)));
    return t;
  };
  ops.push_back(&g.add(cudnn_attn::matmul("bmm p^T@dO", transposed("p^T", p), dout, dv)));

  // dS
  const Desc& dp = g.virt("dP", sdims);
  ops.push_back(&g.add(cudnn_attn::matmul("bmm dO@v^T", dout, vt, dp)));
  const Desc& dpm = g.virt("dP-sum", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("dP - sum", CUDNN_POINTWISE_SUB, dp, &rowsum, nullptr, dpm)));
  const Desc& ds = g.virt("dS_unscaled", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("(dP - sum) * P", CUDNN_POINTWISE_MUL, dpm, &p, nullptr, ds)));
  const Desc& dss = g.virt("dS", sdims);
  ops.push_back(
      &g.add(cudnn_attn::pointwise("dS * scale", CUDNN_POINTWISE_MUL, ds, &scale, nullptr, dss)));
  ops.push_back(&g.add(cudnn_attn::matmul("bmm dS^T@q", transposed("dS^T", dss), q, dk)));

  // dQ, through the f32 accumulator unless deterministic.
  const Desc& k = g.add(cudnn_attn::tensor("k", g.next_virtual++, io, bhsd_dims(s, s.S),
                                           bhsd_strides(s, s.S), Kind::Virtual));
  ops.push_back(&g.add(cudnn_attn::reshape("reshape k^T -> k", kt, k)));
  if (deterministic) {
    ops.push_back(&g.add(cudnn_attn::matmul("bmm dS@k", dss, k, dq)));
  } else {
    const Desc& dq_acc = g.buffer("dQ_accum", kDQAccum, CUDNN_DATA_FLOAT, bhsd_dims(s, s.T),
                                  {s.H * s.T * s.D, s.T * s.D, s.D, 1});
    ops.push_back(&g.add(cudnn_attn::matmul("bmm dS@k", dss, k, dq_acc)));
    ops.push_back(&g.add(
        cudnn_attn::pointwise("dQ", CUDNN_POINTWISE_IDENTITY, dq_acc, nullptr, nullptr, dq)));
  }
  g.plan = cudnn_attn::make_plan(h, ops, "backward");
}

void* data(const DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; }

bool compact(const DLTensor* t) {
  if (!t->strides) return true;
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

// Checks one tensor operand: on a CUDA device, compact, 16-byte aligned, of the dtype.
void check_operand(const DLTensor* t, const char* name, DLDataType dt, std::vector<int64_t> shape) {
  const std::string n = std::string("attention/cudnn: ") + name;
  loom::require(t != nullptr, n + " is required");
  loom::require(t->device.device_type == kDLCUDA || t->device.device_type == kDLCUDAManaged,
                n + " is not in CUDA memory (use backend/cuda)");
  loom::require(loom_dtype_eq(t->dtype, dt), n + " has the wrong dtype");
  loom::require(t->ndim == static_cast<int>(shape.size()), n + " has the wrong number of dims");
  for (size_t i = 0; i < shape.size(); ++i)
    loom::require(t->shape[i] == shape[i], n + " has the wrong shape");
  loom::require(compact(t), n + " must be compact (row-major)");
  loom::require(reinterpret_cast<uintptr_t>(data(t)) % 16 == 0, n + " must be 16-byte aligned");
}

class CudnnAttention {
 public:
  CudnnAttention(const loom_host* host, bool deterministic)
      : host_(host), deterministic_(deterministic) {
    if (const std::string why = loom::cuda_unavailable(); !why.empty())
      throw loom::Error(LOOM_ERR_UNIMPLEMENTED, "attention/cudnn: " + why);
    const size_t version = cudnnGetVersion();
    loom::require(version >= 90000,
                  "attention/cudnn: needs cuDNN 9 or newer, found " + std::to_string(version),
                  LOOM_ERR_UNIMPLEMENTED);
    stream_ = loom::backend_cuda_stream(host, "attention/cudnn").stream;
    cudnn_attn::check(cudnnCreate(&handle_), "cudnnCreate");
    cudnn_attn::check(cudnnSetStream(handle_, stream_), "cudnnSetStream");
  }
  ~CudnnAttention() {
    graphs_.clear();                     // plans before the handle
    if (handle_) cudnnDestroy(handle_);  // the stream is the backend's
    for (void* p : {workspace_, rowsum_, lse_, dq_acc_, k_rep_, v_rep_, dk_rep_, dv_rep_})
      cudaFree(p);
  }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  const loom_host* host() const { return host_; }

  void forward(const loom_attention_fwd_args& a) {
    // No masks beyond causal yet: a required one (a sliding window) is refused by name.
    loom::require_known_exts(a.ext, {}, "attention/cudnn");
    const Shape s = shape(a.q, a.k, a.v, a.out, a.causal);
    if (a.lse) check_operand(a.lse, "lse", loom_f32(), {s.B, s.H, s.T});
    Graph& g = graph(s, /*backward=*/false);
    void* lse = a.lse ? data(a.lse) : grow(lse_, lse_bytes_, s.B * s.H * s.T * 4, "lse scratch");
    float scale = static_cast<float>(a.scale), neg_inf = kMaskValue;
    const auto [k, v] = kv_heads(s, a.k, a.v);
    std::vector<int64_t> uids{kQ, kKT, kV, kO, kStats, kScale};
    std::vector<void*> ptrs{data(a.q), k, v, data(a.out), lse, &scale};
    if (s.causal) uids.push_back(kNegInf), ptrs.push_back(&neg_inf);
    run(g, uids, ptrs, "forward");
  }

  void backward(const loom_attention_bwd_args& a) {
    // No masks beyond causal yet: a required one (a sliding window) is refused by name.
    loom::require_known_exts(a.ext, {}, "attention/cudnn");
    const Shape s = shape(a.q, a.k, a.v, a.out, a.causal);
    const DLDataType dt = a.q->dtype;
    check_operand(a.dout, "dout", dt, {s.B, s.T, s.H, s.D});
    check_operand(a.lse, "lse", loom_f32(), {s.B, s.H, s.T});
    check_operand(a.dq, "dq", dt, {s.B, s.T, s.H, s.D});
    check_operand(a.dk, "dk", dt, {s.B, s.S, s.Hkv, s.D});
    check_operand(a.dv, "dv", dt, {s.B, s.S, s.Hkv, s.D});
    Graph& plan = graph(s, /*backward=*/true);
    void* rowsum = grow(rowsum_, rowsum_bytes_, s.B * s.H * s.T * 4, "softmax_sum");
    void* dq_acc = nullptr;
    if (!deterministic_) {
      const int64_t acc_bytes = s.B * s.H * s.T * s.D * 4;
      dq_acc = grow(dq_acc_, dq_acc_bytes_, acc_bytes, "dQ accumulator");
      // cuDNN >= 9.6 initialises the accumulator itself; zeroing it keeps older 9.x right too.
      cuda_check(cudaMemsetAsync(dq_acc, 0, static_cast<size_t>(acc_bytes), stream_),
                 "zero the dQ accumulator");
    }
    float scale = static_cast<float>(a.scale), one = 1.0f, neg_inf = kMaskValue;
    const auto [k, v] = kv_heads(s, a.k, a.v);
    // Grouped: the graph writes every query head's dK and dV, summed into the caller's after.
    const int64_t g = s.group(), kv_bytes = s.B * s.S * s.H * s.D * 2;
    void* dk = g == 1 ? data(a.dk) : grow(dk_rep_, dk_rep_bytes_, kv_bytes, "repeated dK");
    void* dv = g == 1 ? data(a.dv) : grow(dv_rep_, dv_rep_bytes_, kv_bytes, "repeated dV");
    std::vector<int64_t> uids{kQ, kKT, kVT, kO, kDO, kStats, kSum, kDQ, kDK, kDV, kScale, kOne};
    std::vector<void*> ptrs{data(a.q), k,          v,  data(a.out), data(a.dout), data(a.lse),
                            rowsum,    data(a.dq), dk, dv,          &scale,       &one};
    if (dq_acc) uids.push_back(kDQAccum), ptrs.push_back(dq_acc);
    if (s.causal) uids.push_back(kNegInf), ptrs.push_back(&neg_inf);
    run(plan, uids, ptrs, "backward");
    if (g == 1) return;
    const int64_t rows = s.B * s.S * s.Hkv;
    cudnn_attn::sum_head_groups(dk, data(a.dk), rows, g, s.D, s.f16, stream_);
    cudnn_attn::sum_head_groups(dv, data(a.dv), rows, g, s.D, s.f16, stream_);
  }

 private:
  Shape shape(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
              int causal) {
    loom::require(q && k && v && o, "attention/cudnn: q, k, v and out are required");
    loom::require(q->ndim == 4 && k->ndim == 4, "attention/cudnn: q and k must be 4-d (B,T,H,D)");
    const bool f16 = loom_dtype_eq(q->dtype, loom_f16());
    loom::require(f16 || loom_dtype_eq(q->dtype, loom_bf16()),
                  "attention/cudnn: q/k/v must be bf16 or fp16 (cuDNN's fused attention)",
                  LOOM_ERR_UNIMPLEMENTED);
    Shape s{q->shape[0], q->shape[1], k->shape[1], q->shape[2],
            q->shape[3], f16,         causal != 0, k->shape[2]};
    loom::require(s.Hkv > 0 && s.H % s.Hkv == 0,
                  "attention/cudnn: query heads (" + std::to_string(s.H) +
                      ") must be a multiple of K/V heads (" + std::to_string(s.Hkv) + ")");
    check_operand(q, "q", q->dtype, {s.B, s.T, s.H, s.D});
    check_operand(k, "k", q->dtype, {s.B, s.S, s.Hkv, s.D});
    check_operand(v, "v", q->dtype, {s.B, s.S, s.Hkv, s.D});
    check_operand(o, "out", q->dtype, {s.B, s.T, s.H, s.D});
    loom::require(s.T <= s.S, "attention/cudnn: more queries than keys (T > S)");
    loom::require(s.D % 8 == 0, "attention/cudnn: head dim must be a multiple of 8 (16-byte rows)",
                  LOOM_ERR_UNIMPLEMENTED);
    loom::require(!s.causal || s.T == s.S,
                  "attention/cudnn: causal attention with T (" + std::to_string(s.T) + ") != S (" +
                      std::to_string(s.S) +
                      ") is not supported (needs a bottom-right aligned mask); use "
                      "attention/reference",
                  LOOM_ERR_UNIMPLEMENTED);
    return s;
  }

  // K and V as the graphs take them: the caller's, or (grouped) repeated to H heads.
  std::pair<void*, void*> kv_heads(const Shape& s, const DLTensor* k, const DLTensor* v) {
    if (s.group() == 1) return {data(k), data(v)};
    const int64_t bytes = s.B * s.S * s.H * s.D * 2, rows = s.B * s.S * s.Hkv;
    void* kr = grow(k_rep_, k_rep_bytes_, bytes, "repeated K");
    void* vr = grow(v_rep_, v_rep_bytes_, bytes, "repeated V");
    cudnn_attn::repeat_heads(data(k), kr, rows, s.group(), s.D, stream_);
    cudnn_attn::repeat_heads(data(v), vr, rows, s.group(), s.D, stream_);
    return {kr, vr};
  }

  Graph& graph(const Shape& s, bool backward) {
    const auto key = std::tuple_cat(s.key(), std::tuple(backward));
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return *it->second;
    auto g = std::make_unique<Graph>();
    if (backward)
      build_backward(*g, handle_, s, deterministic_);
    else
      build_forward(*g, handle_, s);
    grow(workspace_, workspace_bytes_, g->plan.workspace, "workspace");
    return *graphs_.emplace(key, std::move(g)).first->second;
  }

  // Grows a device buffer to at least `bytes` (never shrinks); returns it.
  static void* grow(void*& p, int64_t& have, int64_t bytes, const char* what) {
    if (bytes <= have) return p;
    cuda_check(cudaFree(p), std::string("cudaFree ") + what);
    p = nullptr;
    have = 0;
    cuda_check(cudaMalloc(&p, static_cast<size_t>(bytes)), std::string("cudaMalloc ") + what);
    have = bytes;
    return p;
  }

  void run(const Graph& g, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
           const char* what) {
    cudnn_attn::execute(handle_, g.plan, uids, ptrs, workspace_, what);  // on the backend's stream
  }

  using Key = decltype(std::tuple_cat(std::declval<Shape>().key(), std::tuple(false)));
  const loom_host* host_;
  bool deterministic_ = false;     // recipe: attention.deterministic (train.deterministic)
  cudaStream_t stream_ = nullptr;  // the backend's (loom.device-stream/1)
  cudnnHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Graph>> graphs_;
  void* workspace_ = nullptr;
  void* rowsum_ = nullptr;
  void* lse_ = nullptr;
  void* dq_acc_ = nullptr;
  int64_t workspace_bytes_ = 0, rowsum_bytes_ = 0, lse_bytes_ = 0, dq_acc_bytes_ = 0;
  // Grouped-query attention's repeated K, V and their gradients (gqa.hpp).
  void *k_rep_ = nullptr, *v_rep_ = nullptr, *dk_rep_ = nullptr, *dv_rep_ = nullptr;
  int64_t k_rep_bytes_ = 0, v_rep_bytes_ = 0, dk_rep_bytes_ = 0, dv_rep_bytes_ = 0;
};

CudnnAttention* cast(loom_attention* a) { return reinterpret_cast<CudnnAttention*>(a); }

loom_error* create(const loom_host* host, const loom_config* cfg, loom_attention** out) {
  return loom::guard(host, [&] {
    const bool deterministic = loom::Config(host, cfg).get_bool("deterministic");
    *out = reinterpret_cast<loom_attention*>(new CudnnAttention(host, deterministic));
  });
}
void destroy(loom_attention* a) { delete cast(a); }
loom_error* forward(loom_attention* a, const loom_attention_fwd_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->forward(*args); });
}
loom_error* backward(loom_attention* a, const loom_attention_bwd_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->backward(*args); });
}

const loom_attention_api kApi = {LOOM_ATTENTION_API_SIZE_V2,
                                 create,
                                 destroy,
                                 forward,
                                 backward,
                                 nullptr};  // merge: no partial attention (ABI 2.7) yet

const loom_param_spec kParams[] = {
    loom::param("deterministic", LOOM_PARAM_BOOL, "false",
                "the same bits on every run (train.deterministic sets it): the backward writes dQ "
                "without the atomic f32 accumulator (cuDNN's dP-workspace form)"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "cuDNN 9 fused flash attention (bf16/fp16, CUDA tensors; MHA and GQA, causal with "
                "T == S)",
            .params = kParams, .api = &kApi)
