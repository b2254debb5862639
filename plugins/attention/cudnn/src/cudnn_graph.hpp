// attention/cudnn: a thin C++ layer over cuDNN 9's backend descriptor API (cudnn_graph.h):
// RAII descriptors, every call checked with cuDNN's status string and the op that failed,
// and builders for the few node kinds an attention graph needs (tensor, matmul, pointwise,
// reduction, reshape). No cudnn_frontend: the frontend's SDPA node lowers to exactly these
// backend descriptors, and this file does the same by hand.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace cudnn_attn {

// Throws a loom::Error naming the failed op, with cuDNN's status name and its last message.
inline void check(cudnnStatus_t st, const std::string& what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string msg = "attention/cudnn: " + what + ": " + cudnnGetErrorString(st);
  if (last[0]) msg += std::string(" (") + last + ")";
  const bool unsupported = st == CUDNN_STATUS_NOT_SUPPORTED;
  throw loom::Error(unsupported ? LOOM_ERR_UNIMPLEMENTED : LOOM_ERR_INTERNAL, msg);
}

// One backend descriptor, destroyed with its owner. Moves only.
class Desc {
 public:
  Desc() = default;
  Desc(cudnnBackendDescriptorType_t type, std::string name) : name_(std::move(name)) {
    check(cudnnBackendCreateDescriptor(type, &d_), "create " + name_);
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)), name_(std::move(o.name_)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    std::swap(name_, o.name_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  const std::string& name() const { return name_; }

  template <class T>
  Desc& set(cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type, const T* v,
            int64_t n = 1) {
    check(cudnnBackendSetAttribute(d_, attr, type, n, v),
          "set attribute " + std::to_string(static_cast<int>(attr)) + " of " + name_);
    return *this;
  }
  Desc& set_i64(cudnnBackendAttributeName_t attr, int64_t v) {
    return set(attr, CUDNN_TYPE_INT64, &v);
  }
  Desc& set_i64s(cudnnBackendAttributeName_t attr, const std::vector<int64_t>& v) {
    return set(attr, CUDNN_TYPE_INT64, v.data(), static_cast<int64_t>(v.size()));
  }
  Desc& set_dtype(cudnnBackendAttributeName_t attr, cudnnDataType_t v) {
    return set(attr, CUDNN_TYPE_DATA_TYPE, &v);
  }
  Desc& set_bool(cudnnBackendAttributeName_t attr, bool b) {
    const bool v = b;
    return set(attr, CUDNN_TYPE_BOOLEAN, &v);
  }
  Desc& set_desc(cudnnBackendAttributeName_t attr, const Desc& d) {
    cudnnBackendDescriptor_t v = d.get();
    return set(attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, &v);
  }
  Desc& finalize() {
    check(cudnnBackendFinalize(d_), "finalize " + name_);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string name_;
};

// Tensor kinds: a caller buffer (in the variant pack), a virtual intermediate that lives
// only inside the fused kernel, or a scalar passed by value at execution.
enum class Kind { Buffer, Virtual, ByValue };

inline Desc tensor(const std::string& name, int64_t uid, cudnnDataType_t dt,
                   const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                   Kind kind) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor " + name);
  t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dt)
      .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  if (kind == Kind::Virtual) t.set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
  if (kind == Kind::ByValue) t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  return std::move(t.finalize());
}

// C = A @ B over the last two dims, batched over the first two; f32 accumulation.
inline Desc matmul(const std::string& name, const Desc& a, const Desc& b, const Desc& c) {
  Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, name + " matmul");
  mm.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize();
  Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  return std::move(op.finalize());
}

// y = mode(x[, b[, t]]); `axis` only for GEN_INDEX. `prec` is the math precision.
inline Desc pointwise(const std::string& name, cudnnPointwiseMode_t mode, const Desc& x,
                      const Desc* b, const Desc* t, const Desc& y,
                      cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name + " pointwise");
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
      .set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
  if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize();
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  return std::move(op.finalize());
}

// y = reduce(x) over the dims where y has extent 1.
inline Desc reduction(const std::string& name, cudnnReduceTensorOp_t red, const Desc& x,
                      const Desc& y) {
  Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name + " reduction");
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &red)
      .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .finalize();
  Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
  return std::move(op.finalize());
}

// y = x seen through other dims/strides (used for transposes of virtual tensors).
inline Desc reshape(const std::string& name, const Desc& x, const Desc& y) {
  Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  return std::move(op.finalize());
}

// An operation graph, finalized into the first execution plan cuDNN's heuristics offer
// that finalizes on this device. Owns every descriptor it was built from.
struct Plan {
  Desc graph, config, plan;  // the plan refers to its config and graph: all kept together
  int64_t workspace = 0;
};

inline Plan make_plan(cudnnHandle_t handle, const std::vector<const Desc*>& ops,
                      const std::string& what) {
  Plan p;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc* o : ops) raw.push_back(o->get());
  p.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what + " operation graph");
  p.graph
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(),
           static_cast<int64_t>(raw.size()))
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle)
      .finalize();

  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what + " heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p.graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode)
      .finalize();
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        what + ": count engine configs");
  // No engine for a graph this plugin built for a case it accepts is its own fault (a graph
  // the engines do not recognise), never a limit to refuse by name: INTERNAL, not UNIMPLEMENTED.
  if (count <= 0)
    throw loom::Error(LOOM_ERR_INTERNAL,
                      "attention/cudnn: " + what + ": cuDNN offers no engine for this graph");
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw_cfgs;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what + " engine config");
    raw_cfgs.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw_cfgs.data()),
        what + ": get engine configs");

  // The first config that finalizes wins; keep the last failure for the message.
  std::string last = "no engine config";
  if (got == 0) {  // cuDNN's own reason for offering none, when it gives one
    char msg[512] = {0};
    cudnnGetLastErrorString(msg, sizeof(msg));
    if (msg[0]) last += std::string(": ") + msg;
  }
  for (int64_t i = 0; i < got; ++i) {
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what + " execution plan");
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
        .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[static_cast<size_t>(i)]);
    const cudnnStatus_t st = cudnnBackendFinalize(plan.get());
    if (st != CUDNN_STATUS_SUCCESS) {
      char msg[512] = {0};
      cudnnGetLastErrorString(msg, sizeof(msg));
      last = std::string(cudnnGetErrorString(st)) + (msg[0] ? std::string(": ") + msg : "");
      continue;
    }
    int64_t ws = 0, n = 0;
    check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &ws),
          what + ": workspace size");
    p.config = std::move(cfgs[static_cast<size_t>(i)]);
    p.plan = std::move(plan);
    p.workspace = ws;
    return p;
  }
  throw loom::Error(LOOM_ERR_INTERNAL, "attention/cudnn: " + what + ": none of " +
                                           std::to_string(got) +
                                           " engine configs finalized (last: " + last + ")");
}

// Runs a plan with (uid, pointer) pairs and the workspace.
inline void execute(cudnnHandle_t handle, const Plan& p, const std::vector<int64_t>& uids,
                    const std::vector<void*>& ptrs, void* workspace, const std::string& what) {
  Desc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what + " variant pack");
  vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(),
         static_cast<int64_t>(uids.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(),
           static_cast<int64_t>(ptrs.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
      .finalize();
  check(cudnnBackendExecute(handle, p.plan.get(), vp.get()), what + ": execute");
}

}  // namespace cudnn_attn
