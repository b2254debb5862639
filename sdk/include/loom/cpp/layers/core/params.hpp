// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): parameters in one flat
// buffer, their declaration with the tensor-parallel conventions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/fp8_linear.hpp"
#include "loom/cpp/layers/core/options.hpp"
#include "loom/cpp/lora.hpp"

namespace loom::layers {

// ----- parameters (params.cpp) -------------------------------------------------------------
// kNormal: normal(0, std); kUniform: uniform(-std, std) (a convolution's, PyTorch's default
// bound 1/sqrt(fan_in)); kMambaA: log of uniform(1, 16) (Mamba-2's A_log); kMambaDt: the
// softplus inverse of a step drawn log-uniform in [1e-3, 1e-1] (Mamba-2's dt_bias).
enum class Init { kNormal, kZeros, kOnes, kUniform, kMambaA, kMambaDt };

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int weight_decay = 0;
  int32_t tp_split_dim = -1;
  Init init = Init::kZeros;
  double std = 0.0;    // for kNormal
  int64_t offset = 0;  // elements into the flat buffers
  View value, grad;    // views into the flat buffers
  // Global extents of the blocks along tp_split_dim (q|k|v, gate;up); empty = one block.
  std::vector<int64_t> blocks;
  int32_t pipeline_duplicate = 0;  // the last stage's copy of the tied wte
  bool sp_partial = false;         // gradient partial per rank under sequence parallelism
  bool tp_partial = false;         // gradient partial per tensor rank in any case (QK-norm)
  // An expert parameter (> 0): dimension 0 holds this expert rank's slab (ep_rank of
  // ep_size) of the experts; its gradient is averaged over the expert-data group.
  int32_t ep_size = 0, ep_rank = 0;
  // A buffer (loom_model_param.buffer): state the model updates itself, with no gradient
  // (the router's expert bias); laid out after every parameter.
  bool buffer = false;
  // A buffer kept in f32 whatever the compute dtype (delayed FP8 scaling's histories and
  // scales, which the casts read as f32), in a flat buffer of its own (f32_state()).
  bool f32 = false;
  // Residency unit (loom_model_param.unit, ABI 2.13): -1 for a buffer
  int32_t unit = -1;
  // Parameter-efficient finetuning (loom_model_param.frozen and adapter, ABI 2.25): a frozen
  // parameter is not trained; a frozen matrix (weight decay 1) has no gradient at all
  // (no_grad: grad is an empty view, and the ops that would write it skip it), a frozen vector
  // keeps one that nothing reads (the norm kernels always write theirs). An adapter is a
  // LoRA matrix; `lora` is the adapter pair on this weight, linked after allocation.
  bool frozen = false, adapter = false, no_grad = false;
  std::shared_ptr<const loom::tp::LoraAdapter> lora;
  // A linear layer's weight (the declarer's column, row, MLA's down-projections, the
  // experts' and the shared expert's): the matrices FP8 may take (link_fp8), where a router,
  // a gate or a convolution's taps never go.
  bool linear = false;
  // FP8 GEMMs on this weight's linear layer (options' fp8), linked after allocation; an
  // expert weight (E/EP, out, in) has one per local expert instead (its own delayed state).
  std::shared_ptr<const loom::tp::Fp8Linear> fp8;
  std::vector<std::shared_ptr<const loom::tp::Fp8Linear>> fp8_experts;
  DLTensor* grad_or_null() { return no_grad ? nullptr : grad.get(); }
  int64_t numel() const;
};

// Every parameter lives in one flat buffer and every gradient in another (one fill zeroes
// all gradients; an optimizer can treat adjacent views as one tensor). Matrices and
// embeddings (weight decay 1) come first in memory, then biases and norm weights, each
// parameter aligned to 16 elements; the list order (get_param) is the HF GPT-2 order.
class ParamStore {
 public:
  // shape: this rank's local shard; blocks: global block extents along tp_split_dim.
  Param& add(std::string name, std::vector<int64_t> shape, int weight_decay, int32_t tp_split_dim,
             Init init, double std = 0.0, std::vector<int64_t> blocks = {});
  void allocate(const Ctx& ctx);  // after the last add
  Param& operator[](size_t i) { return params_[i]; }
  Param& at(const std::string& name);
  size_t size() const { return params_.size(); }
  DLTensor* grads() const { return grad_flat_.get(); }
  // GPT-2 init from `seed`, defined per element on the full tensor (see params.cpp).
  void init(const Ctx& ctx, uint64_t seed);
  // LoRA (options' lora): freeze_base, after the last add, marks every parameter but the
  // adapters frozen; link_lora, after allocate, gives each adapted weight its adapter pair.
  void freeze_base();
  void link_lora(const LoraConfig& c);
  // FP8 (options' fp8): every linear weight of transformer layer l ("h.<l>.") with
  // fp8.first <= l < fp8.end, not an adapter, gets the GEMMs (an expert weight one set per
  // local expert).
  void link_fp8(const Fp8Config& c);
  // Delayed scaling (fp8.delayed()): declares, before allocate, each FP8 weight's history
  // "<base>.fp8_amax_history" (3, len) and scales "<base>.fp8_scale" (3), f32 buffers, where
  // <base> is the weight's name without ".weight" (an expert weight's: (E/EP, 3, len) and
  // (E/EP, 3), expert parameters split like it); link_fp8 hands them to its GEMMs, whose
  // casts record while `*recording`.
  void add_fp8_state(const Fp8Config& c);
  std::shared_ptr<bool> fp8_recording() const { return fp8_recording_; }
  // The f32 buffers (every FP8 history and scale, padded with zeros): the dense weights'
  // (replicated over data x context), then the experts' (over the expert-data group), each a
  // view of one flat buffer, or NULL where there are none.
  DLTensor* f32_state(bool experts) const {
    View& v = experts ? f32_experts_ : f32_dense_;
    return v.get()->ndim > 0 ? v.get() : nullptr;  // an empty View has no dimension
  }
  std::vector<Param>& all() { return params_; }
  // loom_model_api's get_param for parameter i (`who` prefixes the errors); `tie_group`: the
  // tie group to name (the tied embedding's "embedding"), or NULL.
  void describe(size_t i, loom_model_param* out, const std::string& who, const char* tie_group);

  // ----- residency (FSDP, loom_model_create_args ABI 2.13) -----------------------------------
  // Under a residency that moves memory (GRADS, PARAMS) allocate() lays each unit out in
  // buffers of its own (every parameter's `unit` set before), allocated at first; a unit's
  // values and gradients are then freed and allocated again one by one, and its views follow
  // (data NULL while freed). Buffers stay in a flat buffer of their own.
  void set_residency(int32_t residency) { residency_ = residency; }
  int32_t residency() const { return residency_; }
  size_t num_units() const { return num_units_; }
  bool has_values(size_t u) const { return !moves() || units_[u].value.get() != nullptr; }
  bool has_grads(size_t u) const { return !moves() || units_[u].grad.get() != nullptr; }
  void alloc_values(const Ctx& ctx, size_t u);
  void alloc_grads(const Ctx& ctx, size_t u);  // zeroed
  void free_values(size_t u);
  void free_grads(size_t u);
  void zero_grads(const Ctx& ctx);  // every gradient allocated now

 private:
  struct Unit {
    std::vector<size_t> members;  // parameter indices
    int64_t size = 0;             // elements, each member aligned
    Tensor value, grad;
  };
  bool moves() const { return residency_ >= LOOM_RESIDENCY_GRADS; }
  void allocate_units(const Ctx& ctx);
  void point(size_t u);               // the members' views at the unit's buffers (or at nothing)
  void allocate_f32(const Ctx& ctx);  // the f32 buffers' flat buffer and views
  std::vector<Param> params_;
  Tensor value_flat_, grad_flat_, f32_flat_;
  mutable View f32_dense_, f32_experts_;  // f32_flat_'s two parts
  std::shared_ptr<bool> fp8_recording_ = std::make_shared<bool>(true);
  int32_t residency_ = LOOM_RESIDENCY_NONE;
  std::vector<Unit> units_;
  size_t num_units_ = 0;
  DLTensor value_none_{}, grad_none_{};  // dtype and device of a freed unit's views
};

// Delayed FP8 scaling's step end (core/fp8.cpp): the step's amaxes reduced with MAX over the
// tensor group and `batch` (data x context; the experts' over `expert_batch`, the ranks that
// hold the same experts), then each FP8 weight's next scales from its histories (loom.fp8/1's
// delayed_update) and the roll.
void update_fp8_scales(const Ctx& c, ParamStore& ps, const Fp8Config& f, const ProcessGroup& batch,
                       const ProcessGroup& expert_batch);

// Declares parameters with the tensor-parallel conventions the slots expect.
class ParamDeclarer {
 public:
  ParamDeclarer(const Options& o, ParamStore& ps, bool sequence_parallel);
  // p.weight (and p.bias): replicated; under sequence parallelism a per-rank partial gradient
  void norm(const std::string& p);
  // column-parallel: output rows split (dim 0) by blocks, bias (when `bias`) split alike
  void column(const std::string& p, std::vector<int64_t> blocks, int64_t in, double std, bool bias);
  // row-parallel: input columns split (dim 1), bias replicated (added after the reduction)
  void row(const std::string& p, int64_t out, int64_t in_global, double std);
  // p.c_attn (q|k|v rows), p.c_proj, and with QK-norm p.q_norm, p.k_norm: AttentionBlock's;
  // with multi-head latent attention mla's below
  void attention(const std::string& p);
  // p.q_a, p.q_a_norm, p.q_b (or p.q without a query latent), p.kv_a, p.kv_a_norm, p.kv_b,
  // p.c_proj: MlaProjections' and AttentionBlock's output projection
  void mla(const std::string& p);
  void mlp(const std::string& p);  // p.c_fc (gate;up with SwiGLU), p.c_proj: Mlp's
  // p.router (E, C) and p.experts.c_fc (E, fc_out, C), p.experts.c_proj (E, C, F) with their
  // biases: MoeMlp's, whole on every tensor rank; the experts' E / EP of this expert rank
  void moe(const std::string& p);
  // p.in_proj (z|x|B|C|dt rows, each block split by heads or groups), p.conv1d (x|B|C
  // channels, K taps), p.dt_bias, p.A_log, p.D (heads), p.norm (the gated norm's, d_inner),
  // p.out_proj (row-parallel): MambaMixer's (ssm/mamba.hpp)
  void mamba(const std::string& p);
  // LoRA's p.lora_A and p.lora_B beside a column-parallel projection p (A whole, B split by
  // p's row blocks) or a row-parallel one (A split by p's input columns, B whole); A drawn
  // as PEFT's kaiming_uniform(a = sqrt(5)), B zeros, so that training starts at the base.
  void lora_column(const std::string& p, const std::vector<int64_t>& blocks, int64_t in);
  void lora_row(const std::string& p, int64_t out, int64_t in_global);

  const Options& o;
  const double std, proj_std;  // init std of matrices, and of the residual projections

 private:
  ParamStore& ps_;
  bool sp_;
};

}  // namespace loom::layers
