// Loom layer library (Loom::layers, a static library shipped with the SDK): a decoder-only
// transformer built from slots, the way Megatron-Core fills TransformerLayerSubmodules from a
// spec. Explicit forward/backward per layer (no autograd), with tensor, sequence and pipeline
// parallelism, mixed precision and a KV cache for generation.
//   Options        the transformer's shape (kTransformerSchema's recipe keys, parse_options)
//   ParamStore     every parameter in one flat buffer, initialised per element from a seed
//   Norm, AttentionBlock, Mlp, Embedding, LmHead   the layer families
//   Block          one transformer layer: a slot; BlockSpec declares and builds it
//                  (kPreNormBlock: GPT-2/Llama's x + attn(ln_1(x)), then + mlp(ln_2(.)))
//   DecoderModel   the stages, the loss, decode; model plugins wrap it with
//                  loom/cpp/layers/model_plugin.hpp (model/gpt is kPreNormBlock)
//
// Accumulation rule (loom_ops): parameter gradients +=, activation gradients =.
// Linear layers: weight (out, in), y = x W^T + b.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/layers/context.hpp"

namespace loom::layers {

// ----- options (options.cpp) --------------------------------------------------------------
struct Options {
  int64_t n_layer = 12, n_head = 12, n_kv_head = 12, n_embd = 768, ffn_hidden = 3072;
  int64_t max_seq_len = 1024, pad_vocab_to = 128;
  bool rmsnorm = false, swiglu = false, rope = false, bias = true, tie_embeddings = true;
  double rope_theta = 10000.0, norm_eps = 1e-5, init_std = 0.02;
  int64_t attention_window = 0;  // > 0: sliding-window attention over this many positions
  // derived from the options and the create args
  int64_t head_dim = 64, vocab = 0, padded_vocab = 0;
  // Tensor parallelism: heads and MLP columns split over tp ranks. The accessors below give
  // this rank's local extents (the whole model's at tp = 1).
  int64_t tp = 1;
  int64_t hq() const { return n_head / tp; }
  int64_t hkv() const { return n_kv_head / tp; }
  int64_t ffn() const { return ffn_hidden / tp; }
  int64_t fc_out() const { return swiglu ? 2 * ffn() : ffn(); }  // local c_fc rows
  int64_t q_dim() const { return hq() * head_dim; }
  int64_t kv_dim() const { return hkv() * head_dim; }
  // Pipeline: this model holds stage `stage` of `stages`, layers [layer0, layer1).
  int64_t stage = 0, stages = 1, layer0 = 0, layer1 = 0;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};
// The recipe keys of Options (model/gpt's [model] section); a plugin may use them as its
// schema, or add its own.
extern const loom_param_spec kTransformerSchema[];
extern const size_t kTransformerSchemaSize;

// The micro-batch arrays GPT reads (tokens on the first stage, targets on the last) and its
// one loss term, next-token cross-entropy.
inline constexpr int64_t kBatchShape[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
inline constexpr loom_array_spec kBatchSpec[2] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, {kDLInt, 32, 1}, 2, kBatchShape}};
inline constexpr const char* kLossNames[1] = {"lm"};
// `who` ("model/gpt") prefixes every error.
Options parse_options(const loom::Config& cfg, const loom_model_create_args& args,
                      const loom::tp::Group& tp, const std::string& who);

// ----- parameters (params.cpp) -------------------------------------------------------------
enum class Init { kNormal, kZeros, kOnes };

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
  std::vector<Param>& all() { return params_; }

 private:
  std::vector<Param> params_;
  Tensor value_flat_, grad_flat_;
};

// ----- slots -------------------------------------------------------------------------------
// linear.cpp. Rows [row0, row0 + out) of a local (rows, in) weight: a whole layer, or the
// local q, k or v part of the fused c_attn (loom::tp::LocalLinear does the gemms).
using Linear = loom::tp::LocalLinear;
Linear make_linear(Param& w, Param* b, int64_t row0, int64_t out);

// norm.cpp
struct Norm {
  bool rms = false;
  double eps = 1e-5;
  DLTensor *w = nullptr, *dw = nullptr, *b = nullptr, *db = nullptr;  // b null: no bias

  static Norm make(const Options& o, ParamStore& ps, const std::string& prefix);
  void forward(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd,
               const DLTensor* inp) const;
  // dinp = (written); dw, db +=
  void backward(const Ctx& c, DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                const DLTensor* mean, const DLTensor* rstd) const;
};

// Activations of one layer, saved by forward for backward. Capacity `rows` tokens; with
// sequence parallelism the norms and residuals hold this rank's N/tp rows and ln1_full,
// ln2_full the gathered (N,C) inputs of the column-parallel projections. Heads and MLP
// columns are this rank's (local extents).
struct LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // (Nl,C), (Nl), (Nl)
  Tensor ln1_full, ln2_full;       // (N,C), sequence parallelism only
  Tensor q, k, v;                  // (B,T,Hq,D), (B,T,Hkv,D) x2, after RoPE
  Tensor att, lse;                 // (B,T,Hq,D) attention output, (B,Hq,T) f32
  Tensor res2;                     // (N,C) residual after the attention half
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor h, a;  // (N, fc_out) MLP pre-activation, (N, F) post-activation
  int64_t rows = 0;
  void ensure(const Ctx& c, const Options& o, int64_t rows);
};

// Gradient scratch shared by all layers during backward.
struct GradScratch {
  Tensor dres;  // (Nl,C) gradient of the residual stream, flows down the stack
  Tensor dtmp;  // (N,C) a norm's input gradient, before it joins dres
  Tensor dln;   // (N,C) gradient of a norm's output; also the attention output's
  Tensor dq, dk, dv;
  Tensor dh, da;  // (N, fc_out), (N, F)
  int64_t rows = 0;
  void ensure(const Ctx& c, const Options& o, int64_t rows);
};

// The shape of one forward call: B sequences of T new tokens at positions [pos0, pos0 + T).
struct Step {
  int64_t B = 0, T = 0, pos0 = 0;
  int64_t N() const { return B * T; }
};

// KV cache of one layer for generation: (B, max_len, Hkv, D) each.
struct LayerCache {
  Tensor k, v;
};

// attention_block.cpp
struct AttentionBlock {
  loom::tp::ColumnParallelLinear qkv;  // parts q, k, v: this rank's heads
  loom::tp::RowParallelLinear o;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;  // local heads
  bool rope = false;
  double rope_theta = 10000.0;
  // Sliding window, asked of the attention plugin as a required extension (0 = none).
  loom_attention_window window{};

  static AttentionBlock make(const Options& o, ParamStore& ps, const std::string& prefix);
  // y(Nl,C) = attention block of x(Nl,C) (the ln_1 output); saves q, k, v, att, lse in a.
  // With a cache, the new k/v are appended at positions [pos0, pos0+T) and the queries
  // attend to the cache (generation; no lse saved).
  void forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a, DLTensor* y,
               LayerCache* cache, int64_t cache_max) const;
  // dx (=) from dy; parameter gradients +=. Uses g.dln as scratch for d(att).
  void backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                const DLTensor* dy, DLTensor* dx, GradScratch& g) const;
};

// mlp.cpp
struct Mlp {
  loom::tp::ColumnParallelLinear fc;
  loom::tp::RowParallelLinear proj;
  bool swiglu = false;

  static Mlp make(const Options& o, ParamStore& ps, const std::string& prefix);
  void forward(const Ctx& c, int64_t n, const DLTensor* x, LayerActs& a, DLTensor* y) const;
  void backward(const Ctx& c, int64_t n, const DLTensor* x, const LayerActs& a, const DLTensor* dy,
                DLTensor* dx, GradScratch& g) const;
};

// ----- blocks: one transformer layer, a slot of the decoder --------------------------------
class Block {
 public:
  virtual ~Block() = default;
  // out(Nl,C) = the layer of x(Nl,C); saves in `a` what backward needs. With a cache, the
  // new keys and values are appended (generation).
  virtual void forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                       DLTensor* out, LayerActs& a, LayerCache* cache, int64_t cache_max) const = 0;
  // g.dres holds d(out) on entry and d(x) on return; parameter gradients +=. Scratch: g.dln
  // and g.dtmp (the attention and MLP backwards use neither's contents on entry).
  virtual void backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                        const LayerActs& a, GradScratch& g) const = 0;
};

// Declares parameters with the tensor-parallel conventions the slots expect.
class ParamDeclarer {
 public:
  ParamDeclarer(const Options& o, ParamStore& ps, bool sequence_parallel);
  // p.weight (and p.bias): replicated; under sequence parallelism a per-rank partial gradient
  void norm(const std::string& p);
  // column-parallel: output rows split (dim 0) by blocks, bias split alike
  void column(const std::string& p, std::vector<int64_t> blocks, int64_t in, double std);
  // row-parallel: input columns split (dim 1), bias replicated (added after the reduction)
  void row(const std::string& p, int64_t out, int64_t in_global, double std);
  void attention(const std::string& p);  // p.c_attn (q|k|v rows), p.c_proj: AttentionBlock's
  void mlp(const std::string& p);        // p.c_fc (gate;up with SwiGLU), p.c_proj: Mlp's

  const Options& o;
  const double std, proj_std;  // init std of matrices, and of the residual projections

 private:
  ParamStore& ps_;
  bool sp_;
};

// A layer kind: its parameters (declared under "h.<l>" in checkpoint order) and its build.
struct BlockSpec {
  const char* name;
  void (*declare)(ParamDeclarer& d, const std::string& prefix);
  std::unique_ptr<Block> (*make)(const Options& o, ParamStore& ps, const std::string& prefix);
};

// GPT-2 and Llama: out = x + attn(ln_1(x)); out += mlp(ln_2(out)).
extern const BlockSpec kPreNormBlock;

// embedding.cpp: tokens (and learned positions) into the residual stream. With tensor
// parallelism wte holds this rank's vocabulary rows (loom::tp::VocabParallelEmbedding);
// learned positions are added after the reduction, to this rank's token rows.
struct Embedding {
  DLTensor *wte = nullptr, *dwte = nullptr, *wpe = nullptr, *dwpe = nullptr;  // wpe: learned
  loom::tp::VocabParallelEmbedding vp;

  static Embedding make(const Options& o, ParamStore& ps, const Ctx& c);
  // Single-rank (and generation) lookup: out(N,C) = wte[tokens] + wpe[positions].
  void forward(const Ctx& c, DLTensor* out, const DLTensor* tokens,
               const DLTensor* positions) const;
  void backward(const Ctx& c, const DLTensor* dout, const DLTensor* tokens,
                const DLTensor* positions) const;
};

// loss.cpp: the LM head over the real vocabulary and the fused softmax cross-entropy.
// Padding: only the real rows of the (padded_vocab, C) head (of this rank's shard) are
// multiplied, so the padded logits never exist and cannot affect the loss; their rows get
// zero gradient.
struct LmHead {
  const DLTensor* w = nullptr;  // wte (tied) or lm_head.weight, (padded_vocab/tp, C)
  DLTensor* dw = nullptr;
  int64_t vocab = 0, C = 0;  // vocab: the real rows of this rank's shard
  loom::tp::VocabShard shard;

  static LmHead make(const Options& o, ParamStore& ps, const Ctx& c);
  // logits(n, vocab) = x(n,C) W[:vocab]^T; x rows `row_pitch` elements apart from `x_off`
  void forward(const Ctx& c, DLTensor* logits, const DLTensor* x, int64_t n, int64_t row_pitch,
               int64_t x_off) const;
  // dx(n,C) = dlogits W[:vocab]; dW[:vocab] += dlogits^T x
  void backward(const Ctx& c, DLTensor* dx, const DLTensor* dlogits, const DLTensor* x,
                int64_t n) const;
};

// One micro-batch in flight through this stage (stage.cpp): its activations from forward
// to backward. Slots are allocated on first use and reused after their backward.
struct Slot {
  Step s;
  int64_t n = 0, nl = 0;  // tokens; this rank's rows (n/tp with sequence parallelism)
  bool pending = false;   // forward with gradients done, backward not yet
  double loss_scale = 0.0;
  std::vector<Tensor> res;  // (Nl,C) x layers+1: the input of each layer, then ln_f's
  std::vector<LayerActs> acts;
  Tensor lnf, lnf_mean, lnf_rstd, lnf_full, logits, losses, lse, stats, gathered;
  Tensor tokens, targets, positions, emb_ids, emb_rows;  // i32 (N)
  int64_t emb_count = 0;  // this rank's tokens of the vocabulary-parallel embedding
  View out;               // the stage's output handed to the caller
  DLTensor* out_ptr = nullptr;
};

// ----- the model (decoder.cpp, stage.cpp, decode.cpp) --------------------------------------
// Stages of a decoder-only LM whose layers are `spec`'s blocks; `who` ("model/gpt") prefixes
// every error.
class DecoderModel {
 public:
  DecoderModel(const loom_host* host, const loom_config* cfg, const loom_model_create_args& args,
               const BlockSpec& spec, std::string who);

  size_t num_params() const { return params_.size(); }
  void get_param(size_t i, loom_model_param* out);
  void init_params(uint64_t seed) { params_.init(ctx_, seed); }
  void zero_grad();
  void stage_info(loom_stage_info* out);
  void stage_forward(loom_stage_forward_args& args);
  void stage_backward(loom_stage_backward_args& args);
  void finish_grads();
  double flops_per_token() const;
  // Learned positions bound the context; RoPE does not (quality beyond training aside).
  int64_t max_context() const { return opt_.rope ? 0 : opt_.max_seq_len; }
  void kv_reset(int64_t batch, int64_t max_len);
  void decode(const int32_t* tokens, int64_t n, float* logits);
  const loom_host* host() const { return ctx_.host; }

 private:
  void build();
  Slot& slot(int64_t i);
  std::string who_;
  const BlockSpec& spec_;
  void embed_forward(Slot& S, const int32_t* tokens);
  void embed_backward(Slot& S);
  double head_forward(Slot& S, const int32_t* targets, bool grad);
  void head_backward(Slot& S);
  void upload_ids(Tensor& dst, const int32_t* src, int64_t n, bool allow_ignore);
  void upload_positions(Tensor& dst, const Step& s);

  Ctx ctx_;
  Options opt_;
  loom_model_create_args args_{};
  ParamStore params_;
  Embedding emb_;
  std::vector<std::unique_ptr<Block>> layers_;  // this stage's layers
  Norm ln_f_;
  LmHead head_;
  loom::tp::VocabParallelCrossEntropy ce_;
  loom_comm_ref comm_{nullptr, nullptr};
  loom_comm_group* embedding_group_ = nullptr;  // tied wte across first and last stage

  // training: activations per slot, gradient scratch shared by the backwards
  std::vector<std::unique_ptr<Slot>> slots_;
  GradScratch grads_;
  SpScratch sp_;
  View dinput_;
  DLTensor* dinput_ptr_ = nullptr;  // what stage_backward hands out
  // what stage_info and stage_forward hand out
  std::vector<const char*> reads_;
  loom_stage_tensor hidden_io_{};
  int64_t hidden_shape_[2] = {0, 0};
  loom_loss loss_{};
  std::vector<float> host_losses_;
  std::vector<double> host_losses_f64_;
  std::vector<int32_t> pos_host_;

  // generation
  std::vector<LayerCache> cache_;
  int64_t cache_batch_ = 0, cache_max_ = 0, cache_len_ = 0;
  LayerActs dec_acts_;
  int64_t dec_rows_ = 0;
  Tensor dec_res_[2], dec_tokens_, dec_positions_, dec_logits_, dec_logits_f32_;
};

}  // namespace loom::layers
