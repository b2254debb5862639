// Megatron-LM's tensor-parallel building blocks as header-only C++ helpers over loom::Backend
// and the run's comm (plugin side). Megatron-Core `tensor_parallel/mappings.py` and
// `layers.py`, with the same names:
//
//   copy_to_tensor_region              identity forward       all-reduce backward
//   reduce_from_tensor_region          all-reduce forward     identity backward
//   gather_from_sequence_region        all-gather forward     reduce-scatter backward
//   reduce_scatter_to_sequence_region  reduce-scatter forward all-gather backward
//
// Activations are (N, channels) row-major, N = tokens. Sequence parallelism shards the
// flattened token dimension into `size` contiguous chunks of N/size rows (norms, residual
// adds and dropout act per token, so any token partition is exact). Linear weights are
// (out, in), y = x W^T + b. Tensors must be memory the comm can reach (backend/cpu with
// comm/mpi; a GPU backend with comm/nccl).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/fp8_linear.hpp"
#include "loom/cpp/gemm_epilogue.hpp"
#include "loom/cpp/lora.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/cpp/weight_grads.hpp"

namespace loom::tp {

// The tensor-parallel group of this rank as the host lays it out. size 1: every mapping is
// the identity and no comm is needed (a host older than ABI 1.1 gives size 1).
struct Group {
  const loom_host* host = nullptr;
  loom_comm_ref comm{nullptr, nullptr};
  loom_comm_group* group = nullptr;
  int size = 1, rank = 0;
  bool sequence_parallel = false;
  void* stream = nullptr;  // the backend's (loom_comm_args.stream): collectives enqueue on it

  static Group from_host(const loom_host* host) {
    Group g;
    g.host = host;
    if (host->struct_size < LOOM_HOST_SIZE_V2 || !host->get_layout) return g;
    loom_parallel_layout l{};
    l.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2;
    check(host, host->get_layout(host->ctx, &l));
    g.size = l.tensor > 0 ? l.tensor : 1;
    g.rank = l.tensor_rank;
    g.sequence_parallel = l.sequence_parallel != 0 && g.size > 1;
    if (g.size > 1) {
      check(host, host->get_comm(host->ctx, &g.comm));
      check(host, host->get_group(host->ctx, LOOM_GROUP_TENSOR, &g.group));
      g.stream = Backend(host).stream();
    }
    return g;
  }
  bool active() const { return size > 1; }
  // Rows of this rank's sequence shard of n tokens (n itself without sequence parallelism).
  int64_t local_rows(int64_t n) const {
    if (!sequence_parallel) return n;
    require(n % size == 0, "sequence parallelism: the micro-batch's " + std::to_string(n) +
                               " tokens (batch x seq_len) are not divisible by tensor = " +
                               std::to_string(size) + "; pick a batch or seq_len that is");
    return n / size;
  }
  void all_reduce(DLTensor* t) const {
    if (active()) check(host, loom::comm_all_reduce(comm, group, t, LOOM_REDUCE_SUM, stream));
  }
  void all_gather(const DLTensor* in, DLTensor* out) const {
    check(host, loom::comm_all_gather(comm, group, in, out, stream));
  }
  void reduce_scatter(const DLTensor* in, DLTensor* out) const {
    check(host, loom::comm_reduce_scatter(comm, group, in, out, LOOM_REDUCE_SUM, stream));
  }
};

// ----- the communication pairs ---------------------------------------------------------
// Entering a tensor-parallel region whose input is replicated: each rank's backward holds
// a partial input gradient, summed over the group.
struct CopyToTensorRegion {
  static void forward(const Group&, const DLTensor*) {}
  static void backward(const Group& g, DLTensor* dx) { g.all_reduce(dx); }
};
// Leaving a region with partial sums (a row-parallel output): sum them; the gradient of a
// sum is replicated.
struct ReduceFromTensorRegion {
  static void forward(const Group& g, DLTensor* y) { g.all_reduce(y); }
  static void backward(const Group&, const DLTensor*) {}
};
// Sequence parallelism: the full (N, C) from every rank's (N/size, C) shard; backward sums
// the ranks' full gradients and keeps this rank's rows.
struct GatherFromSequenceRegion {
  static void forward(const Group& g, const DLTensor* shard, DLTensor* full) {
    g.all_gather(shard, full);
  }
  static void backward(const Group& g, const DLTensor* dfull, DLTensor* dshard) {
    g.reduce_scatter(dfull, dshard);
  }
};
// Sequence parallelism: partial sums (N, C) reduced and scattered to (N/size, C) shards.
struct ReduceScatterToSequenceRegion {
  static void forward(const Group& g, const DLTensor* full, DLTensor* shard) {
    g.reduce_scatter(full, shard);
  }
  static void backward(const Group& g, const DLTensor* dshard, DLTensor* dfull) {
    g.all_gather(dshard, dfull);
  }
};

// Rows [row0, row0 + out) of a local (rows, in) weight: the shard of one block of a fused
// projection (q, k or v of c_attn) or a whole column-parallel shard.
struct LocalLinear {
  const DLTensor* w = nullptr;
  DLTensor* dw = nullptr;  // NULL: W (and its bias) frozen, no weight gradient
  mutable View b, db;      // (out); empty without bias
  bool has_bias = false;
  int64_t row0 = 0, out = 0, in = 0;
  // A LoRA adapter on these rows (loom/cpp/lora.hpp), or NULL. With one, the GELU never rides
  // on this projection's GEMMs (gelu_fusable's callers check `lora`).
  std::shared_ptr<const LoraAdapter> lora;
  // FP8 GEMMs (loom/cpp/fp8_linear.hpp), or NULL. With them no epilogue rides on the GEMMs
  // (the bias and the GELU are passes of their own).
  std::shared_ptr<const Fp8Linear> fp8;

  // y(n,out) = x(n,in) W^T (+ b when add_bias). The bias goes into the GEMM's epilogue where
  // the backend instance lends loom.gemm-epilogue/1 (loom/cpp/gemm_epilogue.hpp), else a
  // bias_add pass follows; the same holds for the bias gradient in backward. With `gelu_aux`
  // (n, out), aux = x W^T + b and y = gelu_tanh(aux), in one GEMM where the backend lends
  // LOOM_EPILOGUE_BIAS_GELU (callers check gelu_fusable first).
  void forward(const Backend& be, DLTensor* y, const DLTensor* x, int64_t n, bool add_bias = true,
               DLTensor* gelu_aux = nullptr) const {
    const bool bias = has_bias && add_bias;
    const uint32_t kinds = gemm_epilogue_kinds(be);
    if (gelu_aux != nullptr && (kinds & LOOM_EPILOGUE_BIAS_GELU) && !lora && !fp8) {
      loom_gemm_epilogue e =
          gemm_epilogue(LOOM_EPILOGUE_BIAS_GELU, bias ? b.get() : nullptr, nullptr, gelu_aux);
      gemm(be, false, true, n, out, in, x, in, 0, w, in, row0 * in, y, out, 0, 0.0, &e.base);
      return;
    }
    DLTensor* z = gelu_aux != nullptr ? gelu_aux : y;  // the GEMM's own output
    if (fp8) {
      fp8->forward(be, z, x, n, w, row0, out, in);
      if (bias) {
        View zv(z, {n, out});
        loom::bias_add(be, zv.get(), b);
      }
    } else if (bias && (kinds & LOOM_EPILOGUE_BIAS)) {
      const loom_gemm_epilogue e = gemm_epilogue(LOOM_EPILOGUE_BIAS, b, nullptr);
      gemm(be, false, true, n, out, in, x, in, 0, w, in, row0 * in, z, out, 0, 0.0, &e.base);
    } else {
      gemm(be, false, true, n, out, in, x, in, 0, w, in, row0 * in, z, out, 0, 0.0);
      if (bias) {
        View zv(z, {n, out});
        loom::bias_add(be, zv.get(), b);
      }
    }
    if (lora) lora->forward(be, z, x, n, in, row0, out);
    if (gelu_aux != nullptr) loom::act_forward(be, LOOM_ACT_GELU_TANH, y, gelu_aux);
  }
  // Whether the GELU that follows this projection (forward) or whose gradient its input
  // gradient feeds (backward) can ride on the GEMMs: the backend lends both GELU kinds. Both
  // or neither, so that a step's forward and backward agree on what `aux` holds.
  static bool gelu_fusable(const Backend& be) {
    const uint32_t both = LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU;
    return (gemm_epilogue_kinds(be) & both) == both;
  }
  // dW += dy^T x; db += colsum(dy) (when with_bias); dx (=, or += when accumulate) dy W.
  // Within a split backward's B (weight_grads.hpp) the dW and db part waits for its W, with
  // copies of dy and x. With `dgelu_aux` (the GELU's input, n x in; not with accumulate),
  // dx = (dy W) * gelu_tanh'(aux) in one GEMM (LOOM_EPILOGUE_DGELU; gelu_fusable).
  void backward(const Backend& be, DLTensor* dx, bool accumulate, const DLTensor* dy,
                const DLTensor* x, int64_t n, bool with_bias = true,
                DLTensor* dgelu_aux = nullptr) const {
    if (dw)
      weight_grad_reading(
          be,
          [this, n, with_bias](const Backend& b, const DLTensor* d, const DLTensor* xi) {
            weight_backward(b, d, xi, n, with_bias);
          },
          dy, x);
    if (dgelu_aux != nullptr) {
      if (!dx || accumulate || !gelu_fusable(be) || lora || fp8)
        throw Error(LOOM_ERR_INVALID_ARGUMENT,
                    "LocalLinear::backward: the GELU gradient rides only on a written input "
                    "gradient, on a backend lending LOOM_EPILOGUE_DGELU (gelu_fusable), with "
                    "no LoRA adapter and no FP8");
      loom_gemm_epilogue e = gemm_epilogue(LOOM_EPILOGUE_DGELU, nullptr, nullptr, dgelu_aux);
      gemm(be, false, false, n, in, out, dy, out, 0, w, in, row0 * in, dx, in, 0, 0.0, &e.base);
      return;
    }
    if (dx && fp8)
      fp8->backward_data(be, dx, accumulate, dy, n, w, row0, out, in);
    else if (dx)
      gemm(be, false, false, n, in, out, dy, out, 0, w, in, row0 * in, dx, in, 0,
           accumulate ? 1.0 : 0.0);
    // The adapter's gradients now, not at a split backward's W: they are small, and u is
    // recomputed from x, which a W-time call would need a copy of.
    if (lora) lora->backward(be, dx, dy, x, n, in, row0, out);
  }
  // dW += dy^T x; db += colsum(dy) (when with_bias).
  void weight_backward(const Backend& be, const DLTensor* dy, const DLTensor* x, int64_t n,
                       bool with_bias) const {
    const bool bias = has_bias && with_bias;
    if (fp8) {
      fp8->backward_weight(be, dw, dy, x, n, row0, out, in);
      if (bias) {
        View dyv(dy, {n, out});
        loom::bias_backward(be, db.get(), dyv);
      }
    } else if (bias && (gemm_epilogue_kinds(be) & LOOM_EPILOGUE_BGRAD)) {
      const loom_gemm_epilogue e = gemm_epilogue(LOOM_EPILOGUE_BGRAD, nullptr, db.get());
      gemm(be, true, false, out, in, n, dy, out, 0, x, in, 0, dw, in, row0 * in, 1.0, &e.base);
    } else {
      gemm(be, true, false, out, in, n, dy, out, 0, x, in, 0, dw, in, row0 * in, 1.0);
      if (bias) {
        View dyv(dy, {n, out});
        loom::bias_backward(be, db.get(), dyv);
      }
    }
  }
};

// Output columns split over the group: y_local = x W_local^T + b_local. The input arrives
// replicated (copy_to_tensor_region), or as this rank's sequence shard that is gathered
// first. `parts` are the local blocks (q, k, v), each written to its own output, so one
// gather serves a fused projection.
struct ColumnParallelLinear {
  std::vector<LocalLinear> parts;

  // x: (n, in) replicated, or (n/size, in) with sequence parallelism, gathered into
  // x_full (n, in), which backward needs again. Without sequence parallelism x_full may
  // be x itself.
  // With `gelu_aux` (one part only): ys[0] = gelu_tanh(aux), LocalLinear::forward's.
  void forward(const Backend& be, const Group& g, const DLTensor* x, DLTensor* x_full, int64_t n,
               const std::vector<DLTensor*>& ys, DLTensor* gelu_aux = nullptr) const {
    if (g.sequence_parallel) GatherFromSequenceRegion::forward(g, x, x_full);
    const DLTensor* xin = g.sequence_parallel ? x_full : x;
    for (size_t i = 0; i < parts.size(); ++i)
      parts[i].forward(be, ys[i], xin, n, true, parts.size() == 1 ? gelu_aux : nullptr);
  }
  // dx: (n, in) or the (n/size, in) shard; dx_full (n, in) scratch (may be dx without
  // sequence parallelism). x_full is the forward's (gathered) input.
  void backward(const Backend& be, const Group& g, const std::vector<const DLTensor*>& dys,
                const DLTensor* x_full, int64_t n, DLTensor* dx, DLTensor* dx_full) const {
    DLTensor* acc = g.sequence_parallel ? dx_full : dx;
    for (size_t i = 0; i < parts.size(); ++i) parts[i].backward(be, acc, i > 0, dys[i], x_full, n);
    if (g.sequence_parallel)
      GatherFromSequenceRegion::backward(g, acc, dx);
    else
      CopyToTensorRegion::backward(g, acc);
  }
};

// Input columns split over the group: y = sum over ranks of x_local W_local^T, then + b
// (replicated, added once after the reduction). The output leaves replicated
// (reduce_from_tensor_region) or as this rank's sequence shard (reduce-scatter).
struct RowParallelLinear {
  LocalLinear lin;  // (out, in_local); the bias is the full replicated one

  // x (n, in_local); y_full (n, out) scratch for the partial sums (may be y without
  // sequence parallelism); y (n, out) or (n/size, out).
  void forward(const Backend& be, const Group& g, const DLTensor* x, int64_t n, DLTensor* y_full,
               DLTensor* y) const {
    DLTensor* part = g.sequence_parallel ? y_full : y;
    // One rank holds the whole sum: its bias may ride on the GEMM (an epilogue).
    lin.forward(be, part, x, n, !g.active());
    if (g.sequence_parallel)
      ReduceScatterToSequenceRegion::forward(g, part, y);
    else
      ReduceFromTensorRegion::forward(g, part);
    if (lin.has_bias && g.active()) {
      View yv(y, {g.local_rows(n), lin.out});
      loom::bias_add(be, yv.get(), lin.b);
    }
  }
  // dy (n, out) or its (n/size, out) shard; dy_full (n, out) scratch; dx (n, in_local) =,
  // times gelu_tanh'(dgelu_aux) when given (LocalLinear::backward's). With sequence
  // parallelism the bias gradient is partial (this rank's tokens): the caller sums it over
  // the group once per step, as Megatron does for such parameters.
  void backward(const Backend& be, const Group& g, const DLTensor* dy, DLTensor* dy_full,
                const DLTensor* x, int64_t n, DLTensor* dx, DLTensor* dgelu_aux = nullptr) const {
    // Without sequence parallelism the weight gradient's dy is this one, whose column sums
    // are the bias gradient: it may ride on that GEMM (an epilogue).
    if (lin.has_bias && g.sequence_parallel && lin.dw) {
      const int64_t rows = g.local_rows(n), out = lin.out;
      const LocalLinear* l = &lin;
      weight_grad_reading(
          be,
          [l, rows, out](const Backend& b, const DLTensor* d) {
            View dyv(d, {rows, out});
            loom::bias_backward(b, l->db.get(), dyv);
          },
          dy);
    }
    const DLTensor* dfull = dy;
    if (g.sequence_parallel) {
      ReduceScatterToSequenceRegion::backward(g, dy, dy_full);
      dfull = dy_full;
    }
    lin.backward(be, dx, false, dfull, x, n, !g.sequence_parallel, dgelu_aux);
  }
};

// The vocabulary rows [start, start + rows) of this rank, of a table padded to a multiple
// of pad x size (Megatron's make-vocab-size-divisible-by x TP); `real` of them (a prefix)
// are real vocabulary entries, the rest padding that no token or logit ever touches.
struct VocabShard {
  int64_t padded = 0, rows = 0, start = 0, real = 0;
  static VocabShard make(int64_t vocab, int64_t pad, const Group& g) {
    VocabShard s;
    const int64_t m = pad * g.size;
    s.padded = (vocab + m - 1) / m * m;
    s.rows = s.padded / g.size;
    s.start = s.rows * g.rank;
    s.real = std::max<int64_t>(0, std::min(s.rows, vocab - s.start));
    return s;
  }
};

// Embedding with the vocabulary split over the group: each rank looks up the tokens in its
// rows, the others give zero rows, and the sum over the group is the full lookup
// (all-reduce, or reduce-scatter into sequence shards). Tokens are staged on the host: the
// in-range tokens' local ids and their row positions; the zero rows come from scattering
// the looked-up rows into a zeroed (n, C) buffer with embedding_backward.
struct VocabParallelEmbedding {
  VocabShard shard;

  // Host-side: which of the n tokens this rank holds. Uploads their local ids and their
  // row numbers into ids and rows (i32, >= n entries) and returns how many there are.
  int64_t stage(const Backend& be, const int32_t* tokens, int64_t n, DLTensor* ids,
                DLTensor* rows) const {
    std::vector<int32_t> id, row;
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] >= shard.start && tokens[i] < shard.start + shard.rows) {
        id.push_back(tokens[i] - (int32_t)shard.start);
        row.push_back((int32_t)i);
      }
    const int64_t count = (int64_t)id.size();
    if (count > 0) {
      View iv(ids, {count}), rv(rows, {count});
      const size_t bytes = (size_t)count * sizeof(int32_t);
      check(be.host(), be.api()->from_host(be.self(), iv.get(), id.data(), bytes));
      check(be.host(), be.api()->from_host(be.self(), rv.get(), row.data(), bytes));
    }
    return count;
  }

  // out_full (n, C) = this rank's rows of table[tokens] (zeros elsewhere), reduced over
  // the group into out ((n, C), or the (n/size, C) shard; out_full is scratch used only
  // with sequence parallelism). picked: (>= count, C) scratch.
  void forward(const Backend& be, const Group& g, const DLTensor* table, const DLTensor* ids,
               const DLTensor* rows, int64_t count, DLTensor* picked, DLTensor* out_full,
               DLTensor* out) const {
    const int64_t C = table->shape[1];
    DLTensor* part = g.sequence_parallel ? out_full : out;
    be.call(&loom_ops::fill, part, 0.0);
    if (count > 0) {
      View iv(ids, {count}), rv(rows, {count}), pv(picked, {count, C});
      loom::embedding_forward(be, pv.get(), iv, table, false);
      loom::embedding_backward(be, part, rv, pv);
    }
    if (g.sequence_parallel)
      ReduceScatterToSequenceRegion::forward(g, part, out);
    else
      ReduceFromTensorRegion::forward(g, part);
  }
  // dtable[ids] += this rank's tokens' rows of dout (n, C); with sequence parallelism dout
  // is the (n/size, C) shard, gathered into dout_full first.
  void backward(const Backend& be, const Group& g, DLTensor* dtable, const DLTensor* ids,
                const DLTensor* rows, int64_t count, DLTensor* picked, const DLTensor* dout,
                DLTensor* dout_full) const {
    const int64_t C = dtable->shape[1];
    const DLTensor* full = dout;
    if (g.sequence_parallel) {
      ReduceScatterToSequenceRegion::backward(g, dout, dout_full);
      full = dout_full;
    }
    if (count == 0) return;
    View iv(ids, {count}), rv(rows, {count}), pv(picked, {count, C});
    loom::embedding_forward(be, pv.get(), rv, full, false);
    loom::embedding_backward(be, dtable, iv, pv);
  }
};

// Cross-entropy over logits whose vocabulary is split over the group. logits (n, width) are
// this rank's vocabulary columns [shard.start, shard.start + width): the real ones, or (the
// LM head's aligned buffer) the whole shard with its padding columns at -inf, which cannot
// enter the loss. Each rank's (n, 3) statistics (row max,
// sum of exponentials, target logit) are gathered and combined on the host into the global
// log-sum-exp and the token losses; backward is vocab_ce_backward with that lse.
class VocabParallelCrossEntropy {
 public:
  VocabShard shard;

  // stats (n,3), gathered (size*n, 3), lse (n): scratch of the logits' dtype. targets (n)
  // i32 on the device, host_targets the same on the host. Returns the sum of token losses
  // and writes lse. logits may be NULL on a rank whose slice is all padding (real = 0).
  // With token_loss and top1 (host, n), also each target's loss and whether it is the most
  // likely token (0 and 0 where the target is -1).
  double forward(const Backend& be, const Group& g, const DLTensor* logits, const DLTensor* targets,
                 const int32_t* host_targets, int64_t n, DLTensor* stats, DLTensor* gathered,
                 DLTensor* lse, double* token_loss = nullptr, int32_t* top1 = nullptr) {
    const bool f64 = stats->dtype.bits == 64;
    View sv(stats, {n, 3}), gv(gathered, {(int64_t)g.size * n, 3}), lv(lse, {n});
    if (shard.real > 0) {
      View lg(logits, {n, width(logits)});
      View tg(targets, {n});
      loom::vocab_ce_stats(be, sv.get(), lg, tg, shard.start);
    } else {  // all padding: contributes exp(-inf) = 0
      std::vector<double> zero(3 * (size_t)n, 0.0);
      for (int64_t i = 0; i < n; ++i) zero[3 * i] = -std::numeric_limits<double>::infinity();
      upload(be, sv.get(), zero, f64);
    }
    std::vector<double> all;
    if (g.active()) {
      g.all_gather(sv, gv);
      all = download(be, gv.get(), f64);
    } else {
      all = download(be, sv.get(), f64);
    }
    std::vector<double> l(n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double m = -std::numeric_limits<double>::infinity(), tgt = 0.0;
      for (int r = 0; r < g.size; ++r) m = std::max(m, all[3 * (r * n + i)]);
      double s = 0.0;
      for (int r = 0; r < g.size; ++r) {
        const double* st = &all[3 * (r * n + i)];
        if (st[1] > 0.0) s += st[1] * std::exp(st[0] - m);
        tgt += st[2];  // only the rank holding the target has a non-zero entry
      }
      l[i] = m + std::log(s);
      const bool counted = host_targets[i] != -1;
      if (counted) sum += l[i] - tgt;
      if (token_loss) token_loss[i] = counted ? l[i] - tgt : 0.0;
      if (top1) top1[i] = counted && tgt >= m ? 1 : 0;
    }
    upload(be, lv.get(), l, f64);
    return sum;
  }
  // The row width of a logits buffer: its columns, which may include the padding at -inf.
  int64_t width(const DLTensor* logits) const {
    return logits && logits->ndim == 2 ? logits->shape[1] : shard.real;
  }
  // dlogits (n, width) = dloss * (softmax - onehot), in place over the logits when aliased.
  void backward(const Backend& be, DLTensor* dlogits, const DLTensor* logits,
                const DLTensor* targets, const DLTensor* lse, int64_t n, double dloss) const {
    if (shard.real == 0) return;
    const int64_t w = width(logits);
    View dv(dlogits, {n, w}), lg(logits, {n, w}), tg(targets, {n}), lv(lse, {n});
    loom::vocab_ce_backward(be, dv.get(), lg, tg, shard.start, lv, dloss);
  }

 private:
  static std::vector<double> download(const Backend& be, const DLTensor* t, bool f64) {
    const int64_t n = loom_tensor_numel(t);
    std::vector<double> out(n);
    if (f64) {
      check(be.host(), be.api()->to_host(be.self(), t, out.data(), n * sizeof(double)));
    } else {
      std::vector<float> f(n);
      check(be.host(), be.api()->to_host(be.self(), t, f.data(), n * sizeof(float)));
      for (int64_t i = 0; i < n; ++i) out[i] = f[i];
    }
    return out;
  }
  static void upload(const Backend& be, DLTensor* t, const std::vector<double>& v, bool f64) {
    if (f64) {
      check(be.host(), be.api()->from_host(be.self(), t, v.data(), v.size() * sizeof(double)));
    } else {
      std::vector<float> f(v.begin(), v.end());
      check(be.host(), be.api()->from_host(be.self(), t, f.data(), f.size() * sizeof(float)));
    }
  }
};

}  // namespace loom::tp
