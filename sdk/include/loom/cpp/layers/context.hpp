// Loom layer library, internals: the context every layer runs in (backend, attention plugin, dtype)
// and the small helpers around loom_ops that the layer files share.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/cpp/tensor_parallel.hpp"

namespace loom::layers {

using loom::Tensor;
using loom::View;

// A matrix operand of gemm: tensor, row pitch (elements) and offset of element (0,0).
struct Mat {
  const DLTensor* t;
  int64_t ld;
  int64_t off = 0;
};

// Sequence-parallel scratch: (N, C) full-token buffers around the gathers and
// reduce-scatters, shared by every layer (only allocated with sequence parallelism).
struct SpScratch {
  Tensor y_full, dy_full, dx_full;
  Tensor picked;  // (N,C) the vocabulary-parallel embedding's looked-up rows (tp > 1)
};

// The expert-parallel group (host's LOOM_GROUP_EXPERT): size 1 = no expert parallelism.
struct ExpertGroup {
  loom_comm_ref comm{nullptr, nullptr};
  loom_comm_group* group = nullptr;
  int size = 1, rank = 0;
  void* stream = nullptr;  // the backend's (loom_comm_args.stream)
};

struct Ctx {
  const loom_host* host = nullptr;
  loom::Backend be;
  loom_attention_ref attn{nullptr, nullptr};
  // Compute dtype of parameter values and activations: f32, bf16 or f16 (mixed precision),
  // or f64 in tests.
  DLDataType dtype{};
  loom::tp::Group tp;  // the tensor-parallel group (size 1 = no tensor parallelism)
  ExpertGroup ep;      // the expert-parallel group
  SpScratch* sp = nullptr;

  template <class Fn, class... Args>
  void call(Fn loom_ops::*op, Args&&... args) const {
    be.call(op, std::forward<Args>(args)...);
  }
  // c(m,n) = op(a)(m,k) @ op(b)(k,n) + beta * c
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, Mat a, Mat b, DLTensor* c,
            int64_t ldc, int64_t offc, double beta) const {
    loom::gemm(be, ta, tb, m, n, k, a.t, a.ld, a.off, b.t, b.ld, b.off, c, ldc, offc, beta);
  }
  // Saved normalisation statistics: f32, or f64 in f64 runs so that finite-difference
  // tests see exact values (backend/cpu accepts both). The attention lse is always f32.
  // Losses and the vocab-parallel loss statistics use the same rule.
  DLDataType stat_dtype() const { return dtype.bits == 64 ? loom_f64() : loom_f32(); }
  // Parameter gradients: Megatron's main_grad, f32 under mixed precision (accumulated in f32
  // across micro-batches, what the optimizer steps from), f64 in f64 runs.
  DLDataType grad_dtype() const { return dtype.bits == 64 ? loom_f64() : loom_f32(); }
  Tensor alloc(DLDataType dt, std::vector<int64_t> shape) const { return Tensor(be, dt, shape); }
  Tensor alloc(std::vector<int64_t> shape) const { return Tensor(be, dtype, shape); }
};

// A view of the first rows of a compact buffer, reshaped: view(t, {B, T, H, D}). An
// unallocated buffer (e.g. the mean of an RMSNorm) gives an empty view.
inline View view(const DLTensor* t, std::vector<int64_t> shape, int64_t elem_offset = 0) {
  if (!t) return View();
  return View(t, std::move(shape), elem_offset);
}

}  // namespace loom::layers
