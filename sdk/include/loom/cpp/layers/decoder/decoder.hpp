// Loom layer library (Loom::layers, a static library shipped with the SDK): a decoder-only
// transformer built from slots, the way Megatron-Core fills TransformerLayerSubmodules from a
// spec. Explicit forward/backward per layer (no autograd), with tensor, sequence and pipeline
// parallelism, mixed precision and a KV cache for generation.
// Folders (sources in sdk/layers/<folder>/, headers here under loom/cpp/layers/<folder>/),
// lowest level first; a folder includes only its own and those below it:
//   core/     options.hpp (Options, the transformer's shape: kTransformerSchema,
//             parse_options), context.hpp (Ctx, the backend and process groups), params.hpp
//             (ParamStore: one flat buffer, per-element seeded init; ParamDeclarer), acts.hpp
//             (what a layer saves for its backward, the gradient scratch, Step, the KV cache)
//   ops/      linear, norm, attention_block (with context_parallel's ring), mlp, embedding,
//             head (the LM head and its loss): the layer families
//   moe/      moe_router (the host router), moe (MoeMlp: grouped-GEMM experts, all-to-all)
//   blocks/   block.hpp: Block, one transformer layer as a slot; BlockSpec declares and builds
//             it (kPreNormBlock: GPT-2/Llama's x + attn(ln_1(x)), then + mlp(ln_2(.));
//             kPostNormBlock, BERT's; kMoeBlock)
//   bert/     BERT's heads
//   decoder/  decoder.hpp (this header, which includes the families): DecoderModel, the
//             stages, the named batch and loss, decode; model_plugin.hpp, the C table around it
//             (model/gpt is kPreNormBlock over it)
//   t5/       the encoder-decoder (T5Model) and its C table's parts
//
// Accumulation rule (loom_ops): parameter gradients +=, activation gradients =.
// Linear layers: weight (out, in), y = x W^T + b.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/layers/blocks/block.hpp"
#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/options.hpp"
#include "loom/cpp/layers/core/params.hpp"
#include "loom/cpp/layers/decoder/family.hpp"
#include "loom/cpp/layers/ops/attention_block.hpp"
#include "loom/cpp/layers/ops/embedding.hpp"
#include "loom/cpp/layers/ops/head.hpp"
#include "loom/cpp/layers/ops/linear.hpp"
#include "loom/cpp/layers/ops/mla.hpp"
#include "loom/cpp/layers/ops/mlp.hpp"
#include "loom/cpp/layers/ops/norm.hpp"
#include "loom/cpp/weight_grads.hpp"

namespace loom::layers {

// The micro-batch arrays GPT needs (tokens on the first stage, targets on the last; every
// stage also reads packed documents' positions when the data has them) and its one loss
// term, next-token cross-entropy.
inline constexpr int64_t kBatchShape[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
inline constexpr loom_array_spec kBatchSpec[2] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, {kDLInt, 32, 1}, 2, kBatchShape}};
inline constexpr const char* kLossNames[1] = {"lm"};
// DPO's terms (loom.preference/1): the loss, then TRL's reward statistics (weight 0)
inline constexpr const char* kPreferenceLossNames[5] = {"dpo", "rewards.chosen", "rewards.rejected",
                                                        "rewards.margin", "rewards.accuracy"};
// A mixture of experts adds its balancing and z losses, each summed over the MoE layers of
// the micro-batch (weight B T: the host's mean over micro-batches, Megatron's scaling).
inline constexpr const char* kMoeLossNames[3] = {"lm", "moe_aux", "moe_z"};
// Token types (BERT's segments A and B), read by the first stage when the model has them,
// and the padding mask of BERT's and T5's batches.
#define LOOM_ARRAY_TOKEN_TYPES "token_types"   /* int32 (B, T): segment A 0, B 1 */
#define LOOM_ARRAY_PADDING_MASK "padding_mask" /* int32 (B, T): 1 real token, 0 padding */

// One multi-token prediction depth's activations (mtp.cpp), Megatron's MTP layer k: the
// tokens k ahead embedded and normalised (en), the previous depth's output normalised (hn),
// both side by side (cat, (N, 2C)), projected (x), one transformer layer (acts, out), its
// final norm and the head's logits against the targets k + 1 ahead.
struct MtpSlot {
  Tensor ids, labels;        // i32 (N): the tokens k ahead (0 past the row's end), their targets
  Tensor emb_ids, emb_rows;  // vocabulary-parallel staging
  int64_t emb_count = 0;
  Tensor emb, en, en_mean, en_rstd, hn, hn_mean, hn_rstd, cat, x, out;
  LayerActs acts;
  Tensor lnf, lnf_mean, lnf_rstd, logits, losses, lse, stats, gathered;
};

// One micro-batch in flight through this stage (stage.cpp): its activations from forward
// to backward. Slots are allocated on first use and reused after their backward.
struct Slot {
  Step s;
  int64_t n = 0, nl = 0;  // tokens; this rank's rows (n/tp with sequence parallelism)
  bool pending = false;   // forward with gradients done, backward not yet
  // A split backward's B ran and its W has not (loom.split-backward/1): what W computes.
  bool weights_pending = false;
  WeightGrads weights;
  double loss_scale = 0.0;
  double lm_weight = 1.0;   // the lm term's weight in the objective (BERT: B T / masked tokens)
  std::vector<Tensor> res;  // (Nl,C) x layers+1: the input of each layer, then ln_f's
  std::vector<LayerActs> acts;
  Tensor lnf, lnf_mean, lnf_rstd, lnf_full, logits, losses, lse, stats, gathered;
  Tensor tokens, targets, positions, emb_ids, emb_rows;  // i32 (N)
  std::vector<int32_t> positions_sent;  // what `positions` holds (upload_positions: no repeat)
  int64_t emb_count = 0;                // this rank's tokens of the vocabulary-parallel embedding
  // Packed documents, from the micro-batch's positions: each token's position in its
  // document and the documents' cumulative lengths, which s.docs points at.
  std::vector<int32_t> doc_pos, cu_docs, doc_at;  // doc_at: padded starts (BERT)
  loom_attention_seqlens docs{};
  Tensor types;                        // i32 (N): token types
  Tensor emb_in, emb_mean, emb_rstd;   // post-LN: the embeddings' sum and its norm stats
  std::unique_ptr<FamilyActs> family;  // the family's heads' (last stage)
  std::vector<MtpSlot> mtp;            // multi-token prediction's depths (last stage)
  View out;                            // the stage's output handed to the caller
  DLTensor* out_ptr = nullptr;
};

// ----- the model (decoder/: decoder.cpp, stage.cpp, layer_loop.cpp, decode.cpp, ...) ----------
// ----------------------------------- Stages of a decoder-only LM whose layers are `spec`'s blocks;
// `who` ("model/gpt") prefixes every error.
class DecoderModel {
 public:
  // `family`: its options (kBert: BERT's embedding and heads around the same layers), and
  // `hooks` what it adds at the stage's fixed points (family.hpp; none: GPT's LM head).
  DecoderModel(const loom_host* host, const loom_config* cfg, const loom_model_create_args& args,
               const BlockSpec& spec, std::string who, Family family = Family::kGpt,
               std::unique_ptr<FamilyHooks> hooks = nullptr);

  size_t num_params() const { return params_.size(); }
  void get_param(size_t i, loom_model_param* out);
  void init_params(uint64_t seed) { params_.init(ctx_, seed); }
  void zero_grad();
  void stage_info(loom_stage_info* out);
  void stage_forward(loom_stage_forward_args& args);
  void stage_backward(loom_stage_backward_args& args);
  // W of a split backward (loom.split-backward/1): the parameter gradients its B deferred.
  void weight_backward(const loom_stage_weight_args& args);
  void finish_grads();
  void hold_params(bool hold);
  double flops_per_token() const;
  // Learned positions bound the context; RoPE does not (quality beyond training aside).
  int64_t max_context() const { return opt_.learned_positions() ? opt_.max_seq_len : 0; }
  void kv_reset(int64_t batch, int64_t max_len);
  void decode(const int32_t* tokens, int64_t n, float* logits);
  void kv_clear(int64_t slot);
  void decode_slots(const int64_t* slots, int64_t num, const int32_t* tokens, int64_t n,
                    float* logits);
  const loom_host* host() const { return ctx_.host; }

 private:
  void build();
  void join_expert_group(const loom_host* host);
  void join_context_group(const loom_host* host);
  // A (B, T) array of the micro-batch, or under context parallelism this rank's (B, T/CP)
  // rows of it (in `buf`).
  const int32_t* local_ids(const loom_microbatch& mb, const char* name, std::vector<int32_t>& buf);
  std::vector<const LayerActs*> moe_acts(const Slot& S) const;
  size_t moe_terms(const Slot& S, bool last);
  // Aux-loss-free balancing: the step's kept choices per expert of each MoE layer of this
  // stage (accumulated by training forwards), and the bias update that consumes them.
  void count_expert_loads(const Slot& S);
  void update_expert_biases();
  const BlockSpec& layer_spec(int64_t l) const;
  Slot& slot(int64_t i);
  // Activation recompute (recompute.cpp): the create args' setting checked against this
  // stage, the activations of layer l of slot S (a recomputed layer's live in the shared
  // group scratch). The layer loop (layer_loop.cpp) runs this stage's layers forward and
  // backward, the forward of a recomputed group again before its last layer's backward.
  void setup_recompute();
  void allocate_acts(Slot& S, int64_t tokens);
  LayerActs& layer_acts(Slot& S, size_t l);
  void layers_forward(Slot& S);
  void layers_backward(Slot& S);
  int64_t group_first(size_t l) const;  // -1: l keeps its activations
  // ABI 2.12 gradient readiness (create args' grad_ready): the runs of parameter indices of
  // each layer of this stage, planned once, announced after the layer's backward.
  void plan_grad_ready();
  void announce_layer(size_t l) const;
  // Residency (FSDP, ABI 2.13; residency.cpp): unit 0 is the embedding, final norm and head,
  // unit 1 + l layer l of this stage. need makes a unit's values resident (gathered by the
  // host) and, for a backward, its gradients (zeroed); done hands a backward's gradients to
  // the host and frees what the residency lets go. The modules holding a unit's views are
  // made again whenever its memory moves.
  void setup_residency();
  void assign_units();
  void make_unit(size_t u);
  void unit_need(size_t u, bool backward);
  void unit_done(size_t u, bool backward);
  // The parameters whose gradients this rank holds only part of (sequence-parallel
  // replicated ones, QK-norm's under TP): the tensor group sums them.
  bool tp_summed(const Param& p) const {  // a frozen one's gradient is never read
    return !p.frozen && (p.tp_partial || (p.sp_partial && ctx_.tp.sequence_parallel));
  }
  // Under NOTIFY only: unit 0 (embedding and head) again, when the head's forward or the
  // embedding's backward starts after the layers, so the host can tell them from the last
  // layer (the step profile's per-layer times). The strategies that move memory are not
  // told twice.
  void announce_head(bool backward);
  int64_t group_last(size_t l) const;
  std::string who_;
  const BlockSpec* spec_;  // the plugin's, or kPostNormBlock for BERT's norm_position = post
  void embed_forward(Slot& S, const int32_t* tokens, const int32_t* types);
  void embed_backward(Slot& S, const DLTensor* dres);
  double head_forward(Slot& S, const int32_t* targets, bool grad,
                      const loom_token_stats* per_token = nullptr);
  void head_backward(Slot& S);
  void head_input_grad(const DLTensor* logits, const DLTensor* x, DLTensor* dx, DLTensor* dln,
                       int64_t N);
  // The cross-entropy part of a head's forward (stage.cpp), over the buffers `b` holds; the
  // sum of term `term` of the loss list, or 0 where it went to the device (device_sums_).
  struct LossBufs {
    DLTensor *logits, *losses, *stats, *gathered, *lse;
  };
  double lm_loss(const LossBufs& b, const DLTensor* tgt, const int32_t* targets, int64_t N,
                 bool grad, double dscale, const loom_token_stats* per_token, int64_t term);
  // Multi-token prediction (mtp.cpp, mtp_num_layers > 0, last stage): the parameters, the
  // modules over them, a slot's buffers, the depths' forward (returns the term's sum, count
  // in `count`) and backward (grads_.dres += their gradient of the last layer's output).
  void mtp_declare(ParamDeclarer& d);
  void mtp_make();
  void mtp_alloc(Slot& S, int64_t N);
  double mtp_forward(Slot& S, const int32_t* targets, bool grad, double& count);
  void mtp_backward(Slot& S);
  const DLTensor* mtp_input(const Slot& S, int64_t k) const;
  struct MtpDepth {
    Norm enorm, hnorm, final_norm;
    Linear eh;  // (C, 2C): [en | hn] -> C
    std::unique_ptr<Block> layer;
  };
  std::vector<MtpDepth> mtp_;
  Embedding mtp_emb_;  // the last stage's view of wte for the tokens ahead
  Tensor mtp_carry_, mtp_dcat_, mtp_den_, mtp_demb_;  // backward scratch
  // The micro-batch's ids into dst: copied from its array `name` on the device where the
  // micro-batch carries loom.microbatch-device/1 (bind_device_batch), else from the host's
  // `src` after checking them (`allow_ignore`: -1 is a valid target).
  void upload_ids(Tensor& dst, const char* name, const int32_t* src, int64_t n, bool allow_ignore);
  // `sent` (NULL: always upload) holds what dst holds already; equal positions are not sent
  // again, so a step's micro-batches after the first copy nothing (a replayed step copies none).
  void upload_positions(Tensor& dst, const Step& s, std::vector<int32_t>* sent = nullptr);
  // loom.microbatch-device/1 of this stage_forward's micro-batch (ABI 2.31), or NULL; refuses
  // what would make the step's device work depend on the host's arrays.
  void bind_device_batch(const loom_microbatch& mb, bool per_token);
  void read_documents(Slot& S, const loom_microbatch& mb);
  const DLTensor* final_norm(Slot& S);
  void emb_norm_forward(Slot& S);
  void emb_norm_backward(Slot& S);
  void last_forward(Slot& S, const loom_microbatch& mb, loom_stage_forward_args& a,
                    const loom_token_stats* per_token);
  // DPO's loss in place of the LM loss (preference.cpp): the terms into losses_, returns their
  // count; with grad, the rows' weighted dlogits in S.logits.
  size_t preference_forward(Slot& S, const loom_microbatch& mb, const int32_t* targets, bool grad);
  std::vector<double> pref_token_loss_;

  Ctx ctx_;
  Options opt_;
  loom_model_create_args args_{};
  ParamStore params_;
  Embedding emb_;
  std::vector<std::unique_ptr<Block>> layers_;  // this stage's layers
  Norm ln_f_, emb_ln_;  // emb_ln_: the post-LN embedding norm (first stage; BERT's)
  LmHead head_;
  std::unique_ptr<FamilyHooks> family_;  // null: GPT's
  loom::tp::VocabParallelCrossEntropy ce_;
  loom_comm_ref comm_{nullptr, nullptr};
  loom_comm_group* embedding_group_ = nullptr;  // tied wte across first and last stage
  // Recompute: granularity, method, layers and modules from the create args (ABI 2.10).
  int32_t rc_granularity_ = LOOM_RECOMPUTE_NONE, rc_method_ = LOOM_RECOMPUTE_UNIFORM;
  int64_t rc_layers_ = 1;
  uint32_t rc_modules_ = 0;
  LayerActs rc_shared_;               // selective: the recomputed modules' one scratch set
  std::vector<LayerActs> rc_group_;   // full: the activations of one recomputed group
  std::vector<double> expert_loads_;  // (MoE layers of this stage, E) this step's, this rank's
  ProcessGroup batch_group_;          // data x context: the ranks that split the global batch
  ProcessGroup expert_batch_group_;   // the ranks that hold this rank's experts: the same or
                                      // (expert parallelism) the expert-data group
  // per layer of this stage, the (first, count) get_param index runs its backward completes
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ready_runs_;
  bool held_ = true;  // residency: every unit's values kept (hold_params)

  // training: activations per slot, gradient scratch shared by the backwards
  std::vector<std::unique_ptr<Slot>> slots_;
  GradScratch grads_;
  SpScratch sp_;
  MlaScratch mla_;  // multi-head latent attention's, grown on use (Ctx::mla)
  View dinput_;
  DLTensor* dinput_ptr_ = nullptr;  // what stage_backward hands out
  // what stage_info and stage_forward hand out
  std::vector<const char*> reads_;
  loom_stage_tensor hidden_io_{};
  int64_t hidden_shape_[2] = {0, 0};
  std::vector<loom_loss> losses_ = std::vector<loom_loss>(3);
  // A mixture of experts' terms: lm, moe_aux, moe_z, then the statistics moe_load.hL.eE
  // (weight 0: the share of layer L's routed tokens that expert E took).
  std::vector<std::string> moe_load_names_;
  // The loss terms when more than GPT's "lm": a mixture of experts' (lm, moe_aux, moe_z, then
  // the expert loads), then multi-token prediction's "mtp".
  std::vector<const char*> loss_names_;
  std::vector<float> host_losses_;
  std::vector<double> host_losses_f64_;
  // loom.device-losses/1 on this stage_forward (ABI 2.28): the host's (n) f64 sums, where the
  // plain cross-entropy adds its terms' sums instead of reading them back; NULL otherwise.
  DLTensor* device_sums_ = nullptr;
  int64_t device_terms_ = 0;
  std::vector<int32_t> pos_host_;
  const loom_microbatch* device_mb_ = nullptr;  // with loom.microbatch-device/1, while it runs
  const loom_microbatch_device* device_arrays_ = nullptr;
  std::vector<int32_t> cp_tokens_, cp_targets_;  // this rank's rows under context parallelism

  // generation
  std::vector<LayerCache> cache_;
  int64_t cache_max_ = 0;
  std::vector<int64_t> slot_len_;   // tokens cached per slot (kv_reset's batch of them)
  std::vector<int64_t> dec_start_;  // the decoded slots' lengths before this call
  LayerActs dec_acts_;
  int64_t dec_rows_ = 0;
  Tensor dec_res_[2], dec_tokens_, dec_positions_;
  Tensor dec_emb_ids_, dec_emb_rows_, dec_picked_;  // tensor parallelism
  LogitsOut dec_out_;
};

}  // namespace loom::layers
