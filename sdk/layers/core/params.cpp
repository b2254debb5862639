// Loom layer library, parameters: the flat value/gradient buffers, per-parameter views, and the
// layout-independent GPT-2 initialisation.
#include "loom/cpp/layers/core/params.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace loom::layers {

namespace {

constexpr int64_t kAlign = 16;  // elements; every view 64-byte aligned in f32, 32 in bf16

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Standard normal numbers of the stream `key`, as a pure function of (key, element): any
// slice of a tensor (a tensor- or pipeline-parallel shard) draws exactly the values the full
// tensor has there. Box-Muller on two counter-hashed uniforms per pair of elements:
// element 2k takes the cosine branch and 2k+1 the sine branch of pair k.
struct NormalPair {
  double even, odd;
};
NormalPair normal_pair(uint64_t key, uint64_t k) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  const uint64_t x = mix64(key + (2 * k + 1) * kGolden);
  const uint64_t y = mix64(key + (2 * k + 2) * kGolden);
  const double u1 = (double)((x >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = (double)(y >> 11) * 0x1.0p-53;        // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
  return {r * std::cos(a), r * std::sin(a)};
}

// out[i] = std * normal(element first + i), for n elements.
template <class T>
void fill_normal(T* out, int64_t first, int64_t n, uint64_t key, double std) {
  int64_t i = 0;
  if (first % 2 == 1 && n > 0) out[i++] = (T)(std * normal_pair(key, (uint64_t)first / 2).odd);
  for (; i + 1 < n; i += 2) {
    const NormalPair p = normal_pair(key, (uint64_t)(first + i) / 2);
    out[i] = (T)(std * p.even);
    out[i + 1] = (T)(std * p.odd);
  }
  if (i < n) out[i] = (T)(std * normal_pair(key, (uint64_t)(first + i) / 2).even);
}

// A uniform number in [0, 1) of the stream `key` at element i: a pure function, as above.
double uniform_at(uint64_t key, uint64_t i) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  return (double)(mix64(key + (i + 1) * kGolden) >> 11) * 0x1.0p-53;
}

// out[i] = the init's value at element first + i, for the kinds drawn from one uniform.
template <class T>
void fill_uniform_kind(T* out, int64_t first, int64_t n, uint64_t key, Init init, double bound) {
  for (int64_t i = 0; i < n; ++i) {
    const double u = uniform_at(key, (uint64_t)(first + i));
    double v = 0.0;
    if (init == Init::kUniform) {
      v = (2.0 * u - 1.0) * bound;
    } else if (init == Init::kMambaA) {
      v = std::log(1.0 + 15.0 * u);
    } else {  // kMambaDt: dt + log(-expm1(-dt)) is softplus's inverse at dt
      const double lo = std::log(1e-3), hi = std::log(1e-1);
      const double dt = std::max(std::exp(lo + u * (hi - lo)), 1e-4);
      v = dt + std::log(-std::expm1(-dt));
    }
    out[i] = (T)v;
  }
}

}  // namespace

int64_t Param::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

Param& ParamStore::add(std::string name, std::vector<int64_t> shape, int weight_decay,
                       int32_t tp_split_dim, Init init, double std, std::vector<int64_t> blocks) {
  Param p;
  p.blocks = std::move(blocks);
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.weight_decay = weight_decay;
  p.tp_split_dim = tp_split_dim;
  p.init = init;
  p.std = std;
  params_.push_back(std::move(p));
  return params_.back();
}

Param& ParamStore::at(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return p;
  throw loom::Error(LOOM_ERR_INTERNAL, "loom layers: no parameter named " + name);
}

void ParamStore::allocate(const Ctx& ctx) {
  for (const Param& p : params_) num_units_ = std::max(num_units_, (size_t)(p.unit + 1));
  allocate_f32(ctx);
  if (moves()) return allocate_units(ctx);
  // The trained parameters weight-decayed first, then the rest, so that they stay one run of
  // adjacent tensors; then the frozen vectors, the buffers (which no optimizer sees) and last
  // the frozen matrices, the only ones past the end of the gradients.
  auto group = [](const Param& p) {
    if (p.f32) return -1;  // allocate_f32's
    if (p.buffer) return 3;
    if (p.frozen) return p.weight_decay ? 4 : 2;
    return p.weight_decay ? 0 : 1;
  };
  int64_t total = 0, with_grads = 0;
  for (int g = 0; g <= 4; ++g) {
    if (g == 4) with_grads = total;
    for (auto& p : params_)
      if (group(p) == g) {
        p.offset = total;
        p.no_grad = g == 4;
        total += (p.numel() + kAlign - 1) / kAlign * kAlign;
      }
  }
  value_flat_ = ctx.alloc({total});
  grad_flat_ = ctx.alloc(ctx.grad_dtype(), {std::max<int64_t>(with_grads, 1)});
  for (auto& p : params_) {
    if (p.f32) continue;  // allocate_f32's
    p.value = View(value_flat_.get(), p.shape, p.offset);
    p.grad = p.no_grad ? View() : View(grad_flat_.get(), p.shape, p.offset);
  }
}

// The dense weights' state first, then the experts': each part is reduced over its own group.
void ParamStore::allocate_f32(const Ctx& ctx) {
  int64_t total = 0, dense = 0;
  for (const bool experts : {false, true}) {
    for (Param& p : params_)
      if (p.f32 && (p.ep_size > 0) == experts) {
        loom::require(p.buffer, "loom layers: f32 parameter " + p.name + " is not a buffer");
        p.offset = total;
        total += (p.numel() + kAlign - 1) / kAlign * kAlign;
      }
    if (!experts) dense = total;
  }
  if (total == 0) return;
  f32_flat_ = ctx.alloc(loom_f32(), {total});
  ctx.call(&loom_ops::fill, f32_flat_.get(), 0.0);  // the padding too: reductions cover it
  for (Param& p : params_)
    if (p.f32) p.value = View(f32_flat_.get(), p.shape, p.offset);
  if (dense > 0) f32_dense_ = View(f32_flat_.get(), {dense});
  if (total > dense) f32_experts_ = View(f32_flat_.get(), {total - dense}, dense);
}

void ParamStore::freeze_base() {
  for (Param& p : params_) p.frozen = !p.adapter && !p.buffer;
}

void ParamStore::link_lora(const LoraConfig& c) {
  if (!c.on()) return;
  std::map<std::string, Param*> by_name;
  for (Param& p : params_) by_name[p.name] = &p;
  auto scratch = std::make_shared<loom::tp::LoraScratch>();
  const std::string w = ".weight";
  for (Param& p : params_) {
    if (p.adapter || p.name.size() <= w.size()) continue;
    const std::string base = p.name.substr(0, p.name.size() - w.size());
    auto a = by_name.find(base + ".lora_A.weight"), b = by_name.find(base + ".lora_B.weight");
    if (a == by_name.end() || b == by_name.end()) continue;
    auto l = std::make_shared<loom::tp::LoraAdapter>();
    l->a = a->second->value.get();
    l->da = a->second->grad.get();
    l->b = b->second->value.get();
    l->db = b->second->grad.get();
    l->rank = c.rank;
    l->scale = c.scale();
    l->scratch = scratch;
    p.lora = l;
  }
}

// Each unit's members back to back (aligned), then the buffers in a flat buffer of their own
// (no gradient). Every unit's values start allocated: the model initialises them and the host
// shards them before it lets go (hold_params).
void ParamStore::allocate_units(const Ctx& ctx) {
  int64_t buffers = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const int64_t n = (p.numel() + kAlign - 1) / kAlign * kAlign;
    if (p.f32) continue;  // allocate_f32's
    if (p.buffer || p.unit < 0) {
      loom::require(p.buffer, "loom layers: parameter " + p.name + " has no residency unit");
      p.offset = buffers;
      buffers += n;
      continue;
    }
    if (units_.size() <= (size_t)p.unit) units_.resize((size_t)p.unit + 1);
    Unit& u = units_[(size_t)p.unit];
    u.members.push_back(i);
    p.offset = u.size;
    u.size += n;
  }
  value_flat_ = ctx.alloc({std::max<int64_t>(buffers, 1)});
  for (Param& p : params_)
    if (p.buffer && !p.f32) p.value = View(value_flat_.get(), p.shape, p.offset);
  value_none_ = *value_flat_.get();
  value_none_.data = nullptr;
  value_none_.byte_offset = 0;
  value_none_.ndim = 0;
  grad_none_ = value_none_;
  grad_none_.dtype = ctx.grad_dtype();
  // Values only: a unit's gradients appear with its first backward. (The values are whole
  // until the host has taken its shards: the start-up peak is the model's values once.)
  for (size_t u = 0; u < units_.size(); ++u) alloc_values(ctx, u);
}

void ParamStore::point(size_t u) {
  const Unit& unit = units_[u];
  for (size_t i : unit.members) {
    Param& p = params_[i];
    // A freed unit's views keep their shape, dtype and device, with no data.
    p.value = unit.value.get() ? View(unit.value.get(), p.shape, p.offset)
                               : View(&value_none_, p.shape, 0);
    p.grad =
        unit.grad.get() ? View(unit.grad.get(), p.shape, p.offset) : View(&grad_none_, p.shape, 0);
  }
}

void ParamStore::alloc_values(const Ctx& ctx, size_t u) {
  if (has_values(u)) return;
  units_[u].value = ctx.alloc({std::max<int64_t>(units_[u].size, 1)});
  point(u);
}
void ParamStore::alloc_grads(const Ctx& ctx, size_t u) {
  if (has_grads(u)) return;
  units_[u].grad = ctx.alloc(ctx.grad_dtype(), {std::max<int64_t>(units_[u].size, 1)});
  ctx.call(&loom_ops::fill, units_[u].grad.get(), 0.0);
  point(u);
}
void ParamStore::free_values(size_t u) {
  if (!moves()) return;
  units_[u].value = Tensor();
  point(u);
}
void ParamStore::free_grads(size_t u) {
  if (!moves()) return;
  units_[u].grad = Tensor();
  point(u);
}
void ParamStore::zero_grads(const Ctx& ctx) {
  if (!moves()) return ctx.call(&loom_ops::fill, grad_flat_.get(), 0.0);
  for (Unit& u : units_)
    if (u.grad.get()) ctx.call(&loom_ops::fill, u.grad.get(), 0.0);
}

namespace {

// Runs of a local shard in the full tensor's flat element order: local row r (of `cols`
// elements) is global elements [first(r), first(r) + cols). Split dim 0: the row sits in
// one block, at this rank's slice of that block; split dim 1: the rows are the full
// tensor's rows and this rank's columns a contiguous slice of each.
int64_t global_first(const Param& p, int64_t r, int64_t cols, int tp, int rank) {
  if (tp == 1 || p.tp_split_dim < 0) tp = 1;
  // An expert parameter (E_local, ...): local expert e is expert ep_rank * E_local + e of the
  // full tensor, and within it the tensor-parallel rule applies to the expert's own matrix
  // (expert tensor parallelism splits dimension 1 or 2 of the whole).
  if (p.ep_size > 0) {
    Param one = p;
    one.ep_size = 0;
    one.shape.erase(one.shape.begin());
    one.tp_split_dim = tp > 1 ? p.tp_split_dim - 1 : -1;
    const int64_t local = one.numel(), rows_per = local / cols;
    const int64_t e = p.ep_rank * p.shape[0] + r / rows_per;
    return e * local * tp + global_first(one, r % rows_per, cols, tp, rank);
  }
  if (tp == 1) return r * cols;
  if (p.tp_split_dim == 1) return r * cols * tp + rank * cols;
  const std::vector<int64_t> blocks =
      p.blocks.empty() ? std::vector<int64_t>{p.shape[0] * tp} : p.blocks;
  int64_t local0 = 0, global0 = 0;
  for (int64_t b : blocks) {
    const int64_t lb = b / tp;
    if (r < local0 + lb) return (global0 + rank * lb + (r - local0)) * cols;
    local0 += lb;
    global0 += b;
  }
  throw loom::Error(LOOM_ERR_INTERNAL, "loom layers: row outside the blocks of " + p.name);
}

// The run length init draws at once: elements contiguous in the local and in the full
// tensor. A split on the last dimension keeps its rows whole unless it has blocks (b1 of a
// SwiGLU expert: gate and up slices sit apart); a split elsewhere keeps what lies after it.
int64_t init_cols(const Param& p, int tp) {
  const int d = tp > 1 ? p.tp_split_dim : -1, last = (int)p.shape.size() - 1;
  if (p.shape.size() < 2) return 1;
  if (d < 0 || (d == last && p.blocks.size() <= 1)) return p.shape.back();
  int64_t inner = 1;
  for (int i = d + 1; i <= last; ++i) inner *= p.shape[(size_t)i];
  return inner;
}

}  // namespace

// GPT-2 init: normal(0, std) for matrices and embeddings (std already holds the
// 1/sqrt(2*n_layer) scale of residual projections), zeros for biases, ones for norm
// weights. Each parameter's stream is keyed by (seed, name) and drawn per element of the
// full tensor, so a model holding a subset of the layers (a pipeline stage) or a tensor-
// parallel shard draws the values the full tensor has there.
void ParamStore::init(const Ctx& ctx, uint64_t seed) {
  const bool f64 = ctx.dtype.bits == 64;
  std::vector<float> buf32;
  std::vector<double> buf64;
  for (auto& p : params_) {
    if (p.init == Init::kZeros || p.init == Init::kOnes) {
      ctx.call(&loom_ops::fill, p.value.get(), p.init == Init::kOnes ? 1.0 : 0.0);
      continue;
    }
    const int64_t n = p.numel();
    const uint64_t key = mix64(seed ^ mix64(fnv1a(p.name)));
    const int64_t cols = init_cols(p, ctx.tp.size), rows = n / cols;
    if (f64)
      buf64.resize(n);
    else
      buf32.resize(n);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t first = global_first(p, r, cols, ctx.tp.size, ctx.tp.rank);
      if (p.init != Init::kNormal && f64)
        fill_uniform_kind(buf64.data() + r * cols, first, cols, key, p.init, p.std);
      else if (p.init != Init::kNormal)
        fill_uniform_kind(buf32.data() + r * cols, first, cols, key, p.init, p.std);
      else if (f64)
        fill_normal(buf64.data() + r * cols, first, cols, key, p.std);
      else
        fill_normal(buf32.data() + r * cols, first, cols, key, p.std);
    }
    const void* src = f64 ? (const void*)buf64.data() : (const void*)buf32.data();
    if (f64 || loom_dtype_eq(ctx.dtype, loom_f32())) {
      loom::check(ctx.host, ctx.be.api()->from_host(ctx.be.self(), p.value.get(), src,
                                                    (size_t)n * loom_dtype_bytes(ctx.dtype)));
    } else {  // bf16/f16: drawn in f32, rounded to nearest even by the backend's cast
      Tensor tmp = ctx.alloc(loom_f32(), p.shape);
      loom::check(ctx.host, ctx.be.api()->from_host(ctx.be.self(), tmp.get(), src,
                                                    (size_t)n * sizeof(float)));
      ctx.call(&loom_ops::copy, p.value.get(), (const DLTensor*)tmp.get());
    }
  }
}

void ParamStore::describe(size_t i, loom_model_param* out, const std::string& who,
                          const char* tie_group) {
  loom::require(i < params_.size(), who + ": parameter index " + std::to_string(i) +
                                        " out of range (" + std::to_string(params_.size()) +
                                        " parameters)");
  loom::require(out && out->struct_size >= LOOM_MODEL_PARAM_SIZE_V2,
                who + ": get_param needs out->struct_size >= LOOM_MODEL_PARAM_SIZE_V2");
  Param& p = params_[i];
  out->name = p.name.c_str();
  out->value = p.value.get();
  out->grad = p.grad.get();
  out->weight_decay = p.weight_decay;
  out->tp_split_dim = p.tp_split_dim;
  const bool blocked = p.tp_split_dim >= 0 && p.blocks.size() > 1;
  out->tp_num_blocks = blocked ? (int32_t)p.blocks.size() : 0;
  out->tp_block_sizes = blocked ? p.blocks.data() : nullptr;
  out->pipeline_duplicate = p.pipeline_duplicate;
  out->reduce_group = p.ep_size > 0 ? LOOM_GROUP_EXPERT_DATA : LOOM_GROUP_DATA_CONTEXT;
  out->tie_group = tie_group;
  // A frozen parameter is a buffer to a host of any version (never trained, saved).
  const bool buffer = p.buffer || p.frozen;
  if (out->struct_size >= LOOM_MODEL_PARAM_SIZE_V2_9) out->buffer = buffer ? 1 : 0;
  if (out->struct_size >= LOOM_MODEL_PARAM_SIZE_V2_13) out->unit = buffer ? -1 : p.unit;
  if (out->struct_size >= LOOM_MODEL_PARAM_SIZE_V2_25) {
    out->frozen = p.frozen ? 1 : 0;
    out->adapter = p.adapter ? 1 : 0;
  }
  if (buffer) out->grad = nullptr;
}

// ----- declaring them with the tensor-parallel conventions
// --------------------------------------------------------------------------
ParamDeclarer::ParamDeclarer(const Options& o, ParamStore& ps, bool sequence_parallel)
    : o(o),
      std(o.init_std),
      proj_std(o.init_std / std::sqrt(2.0 * (double)o.n_layer)),
      ps_(ps),
      sp_(sequence_parallel) {}

void ParamDeclarer::norm(const std::string& p) {
  ps_.add(p + ".weight", {o.n_embd}, 0, -1, Init::kOnes).sp_partial = sp_;
  if (o.norm_mean() && o.bias)
    ps_.add(p + ".bias", {o.n_embd}, 0, -1, Init::kZeros).sp_partial = sp_;
}

void ParamDeclarer::column(const std::string& p, std::vector<int64_t> blocks, int64_t in, double sd,
                           bool bias) {
  int64_t rows = 0;
  for (int64_t b : blocks) rows += b / o.tp;
  ps_.add(p + ".weight", {rows, in}, 1, 0, Init::kNormal, sd, blocks).linear = true;
  if (bias) ps_.add(p + ".bias", {rows}, 0, 0, Init::kZeros, 0.0, blocks);
}

void ParamDeclarer::row(const std::string& p, int64_t out, int64_t in_global, double sd) {
  ps_.add(p + ".weight", {out, in_global / o.tp}, 1, 1, Init::kNormal, sd).linear = true;
  if (o.bias) ps_.add(p + ".bias", {out}, 0, -1, Init::kZeros).sp_partial = sp_;
}

// Multi-head latent attention (ops/mla.hpp): the down-projections and their norms whole on
// every tensor rank (their gradients come out whole: the column-parallel halves' input
// gradients are summed first), the up-projections column-parallel by heads, c_proj
// row-parallel over the heads' values.
void ParamDeclarer::mla(const std::string& p) {
  const int64_t C = o.n_embd, H = o.n_head, dq = o.head_dim, dv = o.v_head_dim;
  const int64_t r = o.kv_lora_rank, qr = o.q_lora_rank;
  auto latent_norm = [&](const std::string& n, int64_t dim) {
    ps_.add(n + ".weight", {dim}, 0, -1, Init::kOnes);
    if (o.norm_mean() && o.bias) ps_.add(n + ".bias", {dim}, 0, -1, Init::kZeros);
  };
  if (qr > 0) {
    ps_.add(p + ".q_a.weight", {qr, C}, 1, -1, Init::kNormal, std).linear = true;
    latent_norm(p + ".q_a_norm", qr);
    column(p + ".q_b", {H * dq}, qr, std, false);
  } else {
    column(p + ".q", {H * dq}, C, std, false);
  }
  ps_.add(p + ".kv_a.weight", {r + o.qk_pos_dim, C}, 1, -1, Init::kNormal, std).linear = true;
  latent_norm(p + ".kv_a_norm", r);
  column(p + ".kv_b", {H * (o.qk_head_dim + dv)}, r, std, false);
  row(p + ".c_proj", C, H * dv, proj_std);
}

void ParamDeclarer::attention(const std::string& p) {
  if (o.mla) return mla(p);
  const int64_t D = o.head_dim;
  const std::vector<int64_t> qkv = {o.n_head * D, o.n_kv_head * D, o.n_kv_head * D};
  column(p + ".c_attn", qkv, o.n_embd, std, o.qkv_bias);
  if (o.lora.targets_any(LoraConfig::kQkv)) lora_column(p + ".c_attn", qkv, o.n_embd);
  row(p + ".c_proj", o.n_embd, o.n_head * D, proj_std);
  if (o.lora.targets_any(LoraConfig::kProj)) lora_row(p + ".c_proj", o.n_embd, o.n_head * D);
  if (!o.qk_norm) return;
  // One (D) weight for all heads, whole on every tensor rank, each of which normalises only
  // its own heads: the gradient is partial per rank (Megatron sums q_layernorm's and
  // k_layernorm's over the tensor group, as the sequence-parallel norms').
  for (const char* n : {".q_norm", ".k_norm"}) {
    ps_.add(p + n + ".weight", {D}, 0, -1, Init::kOnes).tp_partial = o.tp > 1;
    if (o.norm_mean() && o.bias)
      ps_.add(p + n + ".bias", {D}, 0, -1, Init::kZeros).tp_partial = o.tp > 1;
  }
}

void ParamDeclarer::mlp(const std::string& p) {
  const std::vector<int64_t> fc = o.gated() ? std::vector<int64_t>{o.ffn_hidden, o.ffn_hidden}
                                            : std::vector<int64_t>{o.ffn_hidden};
  column(p + ".c_fc", fc, o.n_embd, std, o.bias);
  if (o.lora.targets_any(LoraConfig::kFc1)) lora_column(p + ".c_fc", fc, o.n_embd);
  row(p + ".c_proj", o.n_embd, o.ffn_hidden, proj_std);
  if (o.lora.targets_any(LoraConfig::kFc2)) lora_row(p + ".c_proj", o.n_embd, o.ffn_hidden);
}

void ParamDeclarer::lora_column(const std::string& p, const std::vector<int64_t>& blocks,
                                int64_t in) {
  const int64_t r = o.lora.rank;
  int64_t rows = 0;
  for (int64_t b : blocks) rows += b / o.tp;
  Param& a =
      ps_.add(p + ".lora_A.weight", {r, in}, 1, -1, Init::kUniform, 1.0 / std::sqrt((double)in));
  a.adapter = true;
  a.tp_partial = o.tp > 1;  // every rank's rows of B reach it
  ps_.add(p + ".lora_B.weight", {rows, r}, 1, 0, Init::kZeros, 0.0, blocks).adapter = true;
}

void ParamDeclarer::lora_row(const std::string& p, int64_t out, int64_t in_global) {
  const int64_t r = o.lora.rank;
  ps_.add(p + ".lora_A.weight", {r, in_global / o.tp}, 1, 1, Init::kUniform,
          1.0 / std::sqrt((double)in_global))
      .adapter = true;
  Param& b = ps_.add(p + ".lora_B.weight", {out, r}, 1, -1, Init::kZeros);
  b.adapter = true;
  b.tp_partial = o.tp > 1;  // from this rank's partial x A^T
}

void ParamDeclarer::moe(const std::string& p) {
  const int64_t E = o.num_experts, C = o.n_embd, F = o.moe_ffn_hidden;
  const int64_t fc_out = o.gated() ? 2 * F : F;
  ps_.add(p + ".router.weight", {E, C}, 1, -1, Init::kNormal, std);
  if (o.moe_expert_bias) ps_.add(p + ".router.expert_bias", {E}, 0, -1, Init::kZeros).buffer = true;
  const int64_t El = E / o.ep;  // this expert rank's slab
  auto expert = [&](Param& q) -> Param& {
    q.ep_size = (int32_t)o.ep;
    q.ep_rank = (int32_t)o.ep_rank;
    return q;
  };
  // Expert tensor parallelism: c_fc's (gate;up) rows and c_proj's columns split as the dense
  // MLP's; c_proj's bias whole (added once, by tensor rank 0).
  const int64_t t = o.etp, split = t > 1 ? 1 : -1;
  const std::vector<int64_t> blocks =
      o.gated() ? std::vector<int64_t>{F, F} : std::vector<int64_t>{};
  expert(ps_.add(p + ".experts.c_fc.weight", {El, fc_out / t, C}, 1, split, Init::kNormal, std,
                 blocks))
      .linear = true;
  if (o.bias)
    expert(
        ps_.add(p + ".experts.c_fc.bias", {El, fc_out / t}, 0, split, Init::kZeros, 0.0, blocks));
  expert(ps_.add(p + ".experts.c_proj.weight", {El, C, F / t}, 1, t > 1 ? 2 : -1, Init::kNormal,
                 proj_std))
      .linear = true;
  if (o.bias) expert(ps_.add(p + ".experts.c_proj.bias", {El, C}, 0, -1, Init::kZeros));
  if (o.moe_shared_hidden > 0) {
    // the shared expert: whole on every rank like the others, or split over the tensor group
    // with them (expert tensor parallelism) as a dense MLP is; c_proj's bias whole
    const int64_t S = o.moe_shared_hidden, s_out = o.gated() ? 2 * S : S;
    const std::vector<int64_t> s_blocks =
        o.gated() ? std::vector<int64_t>{S, S} : std::vector<int64_t>{};
    ps_.add(p + ".shared.c_fc.weight", {s_out / t, C}, 1, t > 1 ? 0 : -1, Init::kNormal, std,
            s_blocks)
        .linear = true;
    if (o.bias)
      ps_.add(p + ".shared.c_fc.bias", {s_out / t}, 0, t > 1 ? 0 : -1, Init::kZeros, 0.0, s_blocks);
    ps_.add(p + ".shared.c_proj.weight", {C, S / t}, 1, t > 1 ? 1 : -1, Init::kNormal, proj_std)
        .linear = true;
    if (o.bias) ps_.add(p + ".shared.c_proj.bias", {C}, 0, -1, Init::kZeros);
    if (o.moe_shared_gate) ps_.add(p + ".shared.gate.weight", {1, C}, 1, -1, Init::kNormal, std);
  }
}

// Mamba-2's mixer (ssm/mamba.hpp), Megatron's MambaMixer under tensor parallelism: in_proj's
// z, x, B, C and dt blocks each split by this rank's heads or groups (so its local rows are
// again z|x|B|C|dt), the convolution's x, B and C channels alike, the per-head parameters and
// the norm's channels by heads, out_proj row-parallel. One-dimensional parameters take no
// weight decay (Megatron's rule, which covers A_log, D and dt_bias).
void ParamDeclarer::mamba(const std::string& p) {
  const int64_t C = o.n_embd, H = o.mamba_heads, di = H * o.mamba_head_dim;
  const int64_t gn = o.mamba_groups * o.mamba_state, K = o.mamba_conv;
  column(p + ".in_proj", {di, di, gn, gn, H}, C, std, o.bias);
  const std::vector<int64_t> xbc = {di, gn, gn};
  const double bound = 1.0 / std::sqrt((double)K);  // PyTorch's Conv1d init: fan_in = K
  ps_.add(p + ".conv1d.weight", {o.m_conv_dim(), K}, 1, 0, Init::kUniform, bound, xbc);
  ps_.add(p + ".conv1d.bias", {o.m_conv_dim()}, 0, 0, Init::kUniform, bound, xbc);
  ps_.add(p + ".dt_bias", {o.m_heads()}, 0, 0, Init::kMambaDt);
  ps_.add(p + ".A_log", {o.m_heads()}, 0, 0, Init::kMambaA);
  ps_.add(p + ".D", {o.m_heads()}, 0, 0, Init::kOnes);
  ps_.add(p + ".norm.weight", {o.m_inner()}, 0, 0, Init::kOnes);
  row(p + ".out_proj", C, di, proj_std);
}

}  // namespace loom::layers
