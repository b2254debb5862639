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
struct MlaScratch;  // ops/mla.hpp

struct SpScratch {
  Tensor y_full, dy_full, dx_full;
  Tensor x_full;  // (N,C) a column-parallel projection's gathered input (LayerActs::ln*_full)
  Tensor picked;  // (N,C) the vocabulary-parallel embedding's looked-up rows (tp > 1)
};

// A process group of the run beside the tensor group: the expert-parallel group (host's
// LOOM_GROUP_EXPERT) or the context-parallel one (LOOM_GROUP_CONTEXT). Size 1 = none.
struct ProcessGroup {
  loom_comm_ref comm{nullptr, nullptr};
  loom_comm_group* group = nullptr;
  int size = 1, rank = 0;
  void* stream = nullptr;  // the backend's (loom_comm_args.stream)
};
using ExpertGroup = ProcessGroup;
using ContextGroup = ProcessGroup;

// The host's parallel layout; one rank's (every degree 1) from a host older than ABI 1.1.
inline loom_parallel_layout host_layout(const loom_host* host) {
  loom_parallel_layout l{};
  l.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2_9;
  l.tensor = l.context = l.data = l.pipeline = l.expert = l.virtual_stages = l.world = 1;
  l.expert_tensor = 1;
  if (host->struct_size >= LOOM_HOST_SIZE_V2 && host->get_layout)
    check(host, host->get_layout(host->ctx, &l));
  return l;
}

// This rank's group of `kind`, `size` ranks, its collectives on `be`'s stream.
inline ProcessGroup join_group(const loom_host* host, const Backend& be, loom_group_kind kind,
                               int size) {
  ProcessGroup g;
  g.size = size;
  check(host, host->get_comm(host->ctx, &g.comm));
  check(host, host->get_group(host->ctx, kind, &g.group));
  g.rank = g.comm.api->group_rank(g.comm.self, g.group);
  g.stream = be.stream();
  return g;
}

struct Ctx {
  const loom_host* host = nullptr;
  loom::Backend be;
  loom_attention_ref attn{nullptr, nullptr};
  // Compute dtype of parameter values and activations: f32, bf16 or f16 (mixed precision),
  // or f64 in tests.
  DLDataType dtype{};
  loom::tp::Group tp;   // the tensor-parallel group (size 1 = no tensor parallelism)
  ExpertGroup ep;       // the expert-parallel group
  ContextGroup cp;      // the context-parallel group (context_parallel.hpp)
  bool cp_a2a = false;  // its attention: all-to-all (Ulysses) rather than the ring
  SpScratch* sp = nullptr;
  // Multi-head latent attention's scratch, shared by the layers (DecoderModel's), or NULL.
  MlaScratch* mla = nullptr;

  template <class Fn, class... Args>
  void call(Fn loom_ops::*op, Args&&... args) const {
    be.call(op, std::forward<Args>(args)...);
  }
  // c(m,n) = op(a)(m,k) @ op(b)(k,n) + beta * c
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, Mat a, Mat b, DLTensor* c,
            int64_t ldc, int64_t offc, double beta, const loom_ext* ext = nullptr) const {
    loom::gemm(be, ta, tb, m, n, k, a.t, a.ld, a.off, b.t, b.ld, b.off, c, ldc, offc, beta, ext);
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

// Host doubles summed over group g (each rank contributes its own), through a tensor of the
// backend's: a comm reduces the memory of the backends it pairs with.
inline void sum_over(const Ctx& c, const ProcessGroup& g, std::vector<double>& v) {
  const int64_t n = (int64_t)v.size();
  if (g.size == 1 || n == 0) return;
  Tensor t = c.alloc(loom_f64(), {n});
  check(c.host, c.be.api()->from_host(c.be.self(), t.get(), v.data(), (size_t)n * 8));
  check(c.host, comm_all_reduce(g.comm, g.group, t.get(), LOOM_REDUCE_SUM, g.stream));
  check(c.host, c.be.api()->to_host(c.be.self(), t.get(), v.data(), (size_t)n * 8));
}

}  // namespace loom::layers
