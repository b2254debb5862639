// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): Megatron's T5, an
// encoder and a decoder built from the same layers as GPT and BERT, plus the decoder's
// cross-attention.
//
//   encoder:  e = wte[tokens] + wpe[0..T)  ->  n_layer pre-norm layers, bidirectional within
//             each row's real tokens (padding_mask)  ->  enc.ln_f  =  mem (B*T, C)
//   decoder:  d = wte[dec_tokens] + wpe[0..K)  ->  dec_layers layers of
//                 h = x + self_attn(ln_1(x))            causal
//                 h = h + cross_attn(ln_x(h), mem)      keys: each row's real encoder tokens
//                 out = h + mlp(ln_2(h))
//             ->  dec.ln_f  ->  logits = y wte^T + lm_head.bias  ->  cross-entropy on dec_targets
// The embedding (words and positions) is shared by encoder and decoder, and tied to the
// output layer, as in Megatron's T5Model; the loss is the mean over the decoder's real
// targets (Megatron's loss_mask). With position = "relative" there is no wpe: each stack's
// self-attention gets T5's relative position bias instead (t5/bias.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

// T5's micro-batch arrays: dataset/t5's names. The decoder's are (B, decoder_seq_len).
#define LOOM_ARRAY_DEC_TOKENS "dec_tokens"             /* int32 (B, K): [BOS], spans */
#define LOOM_ARRAY_DEC_PADDING_MASK "dec_padding_mask" /* int32 (B, K): 1 real, 0 padding */
#define LOOM_ARRAY_DEC_TARGETS "dec_targets"           /* int32 (B, K): -1 on padding */
inline constexpr const char* kT5LossNames[1] = {"lm"};

// What the cross-attention of one decoder layer saves for its backward: Nd decoder rows, Ne
// encoder rows, this rank's heads.
struct CrossActs {
  Tensor ln, mean, rstd;  // (Nd,C) ln_x's output, (Nd), (Nd)
  Tensor q, att, lse;     // (Nd, q_dim), (Nd, q_dim), f32 (B, Hq, K)
  Tensor k, v;            // (Ne, kv_dim): the encoder output's keys and values
  Tensor res;             // (Nd,C) the residual after the cross-attention
  int64_t nd = 0, ne = 0;
  void ensure(const Ctx& c, const Options& o, int64_t nd, int64_t ne);
};

// The shape of one cross-attention call: B rows of K decoder queries, each attending to the
// first enc_len[b] of its row's T encoder keys. `rows` (generation): row b's keys are cache
// row rows[b] of width T; NULL: the compact (B*T) keys of a training micro-batch.
struct CrossStep {
  int64_t B = 0, K = 0, T = 0;
  const int32_t* enc_len = nullptr;  // (B) host
  const int64_t* rows = nullptr;     // (B) host, generation
};

// cross_attention.cpp. q from the decoder stream (column-parallel), k and v from the encoder
// output (column-parallel: this rank's heads), the output projection row-parallel.
struct CrossAttention {
  loom::tp::LocalLinear q, k, v;
  loom::tp::RowParallelLinear o;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;  // local heads

  static CrossAttention make(const Options& o, ParamStore& ps, const std::string& prefix);
  // k, v (ne, kv_dim) of the encoder output mem (ne, C).
  void project_memory(const Ctx& c, const DLTensor* mem, int64_t ne, DLTensor* k,
                      DLTensor* v) const;
  // y(Nd,C) = the cross-attention of x(Nd,C) to the keys and values k, v; saves q, att, lse.
  void forward(const Ctx& c, const CrossStep& s, const DLTensor* x, const DLTensor* k,
               const DLTensor* v, CrossActs& a, DLTensor* y, bool save_lse) const;
  // dx (=) from dy; dmem += this rank's part of d(mem) (the caller sums it over the tensor
  // group); parameter gradients +=. g.dln is d(att)'s scratch, g.dq, g.dk, g.dv the rest.
  void backward(const Ctx& c, const CrossStep& s, const DLTensor* x, const DLTensor* mem,
                const CrossActs& a, const DLTensor* dy, DLTensor* dx, DLTensor* dmem,
                GradScratch& g) const;
};

// t5/bias.cpp: the relative position bias of one stack (position = "relative").
int32_t relative_bucket(int64_t rel, bool bidirectional, int64_t num_buckets, int64_t max_distance);
struct RelativeBias {
  const DLTensor* table = nullptr;  // (heads, buckets): this rank's heads
  DLTensor* dtable = nullptr;
  int64_t heads = 0, buckets = 0, max_distance = 0;
  bool bidirectional = false;

  static RelativeBias make(const Options& o, ParamStore& ps, const std::string& name,
                           bool bidirectional);
  // bias (heads, T, S) of queries at positions [p, p+T) over keys [0, S); ids: the (T*S)
  // buckets, kept for backward.
  void forward(const Ctx& c, DLTensor* bias, Tensor& ids, int64_t p, int64_t T, int64_t S) const;
  // dtable += the gradient of the bias, dbias (heads, T, S).
  void backward(const Ctx& c, const DLTensor* dbias, const Tensor& ids, int64_t T, int64_t S) const;
};

// t5_layer.cpp: one decoder layer (see above).
class T5DecoderLayer {
 public:
  T5DecoderLayer(const Options& o, ParamStore& ps, const std::string& prefix);
  static void declare(ParamDeclarer& d, const std::string& prefix);
  // out(Nd,C) from x(Nd,C); with a cache, self-attention appends to it (generation) and the
  // cross-attention reads keys and values from xk, xv.
  void forward(const Ctx& c, const Options& o, const Step& s, const CrossStep& cs,
               const DLTensor* x, const DLTensor* xk, const DLTensor* xv, DLTensor* out,
               LayerActs& a, CrossActs& xa, LayerCache* cache, int64_t cache_max) const;
  // g.dres: d(out) in, d(x) out; dmem += this rank's part of d(mem).
  void backward(const Ctx& c, const Options& o, const Step& s, const CrossStep& cs,
                const DLTensor* x, const DLTensor* mem, const LayerActs& a, const CrossActs& xa,
                DLTensor* dmem, GradScratch& g) const;
  const CrossAttention& cross() const { return xattn_; }

 private:
  Norm ln_1_;
  AttentionBlock attn_;
  Norm ln_x_;
  CrossAttention xattn_;
  Norm ln_2_;
  Mlp mlp_;
};

// One micro-batch in flight (t5/stage.cpp): encoder rows ne = B*T, decoder rows nd = B*K.
struct T5Slot {
  Step es, ds;  // encoder (B, T, its padding as sequences), decoder (B, K)
  CrossStep cs;
  int64_t ne = 0, nd = 0;
  bool pending = false;
  double loss_scale = 0.0, lm_weight = 1.0;
  std::vector<Tensor> eres, dres;  // residual streams: each layer's input, then the last output
  std::vector<LayerActs> eacts, dacts;
  std::vector<CrossActs> xacts;
  Tensor mem, mem_mean, mem_rstd;  // enc.ln_f: the encoder output and its statistics
  Tensor lnf, lnf_mean, lnf_rstd, logits, losses, lse, stats, gathered;
  Tensor etok, epos, dtok, dpos, targets;  // i32
  Tensor eids, erows, dids, drows;         // vocabulary-parallel staging
  int64_t ecount = 0, dcount = 0;
  std::vector<int32_t> enc_len, cu_enc, at_enc;  // the encoder's padding
  loom_attention_seqlens enc_docs{};
  // position = "relative": each stack's bias (heads, T, T) and (heads, K, K), its buckets
  Tensor ebias, dbias, ebucket, dbucket;
  View ebias_v, dbias_v, debias_v, ddbias_v;
  AttentionBias eab, dab;
};

// The model (t5/model.cpp, stage.cpp, decode.cpp), on one pipeline stage with tensor
// (not sequence) parallelism.
class T5Model {
 public:
  T5Model(const loom_host* host, const loom_config* cfg, const loom_model_create_args& args,
          std::string who);

  size_t num_params() const { return params_.size(); }
  void get_param(size_t i, loom_model_param* out);
  void init_params(uint64_t seed) { params_.init(ctx_, seed); }
  void zero_grad();
  void stage_info(loom_stage_info* out);
  void stage_forward(loom_stage_forward_args& args);
  void stage_backward(loom_stage_backward_args& args);
  // No sequence parallelism, one stage: nothing is left partial; delayed FP8 scaling's step
  // end (update_fp8_scales).
  void finish_grads();
  double flops_per_token() const;
  int64_t max_context() const { return opt_.max_seq_len; }
  // Generation (loom.decode/1, loom.decode-slots/1, loom.encoder-decoder/1): encode runs the
  // encoder once per slot; decode runs the decoder with its KV cache over that encoding.
  void kv_reset(int64_t batch, int64_t max_len);
  void kv_clear(int64_t slot);
  void encode(int64_t slot, const int32_t* tokens, int64_t n);
  void decode(const int32_t* tokens, int64_t n, float* logits);
  void decode_slots(const int64_t* slots, int64_t num, const int32_t* tokens, int64_t n,
                    float* logits);
  const loom_host* host() const { return ctx_.host; }

 private:
  void build();
  void ensure_gen(int64_t n);
  T5Slot& slot(int64_t i);
  void upload(Tensor& dst, const int32_t* src, int64_t n, bool ids, bool allow_ignore);
  void read_padding(T5Slot& S, const loom_microbatch& mb);
  void relative_bias(T5Slot& S);
  // x(n,C) = wte[tokens] + wpe[positions] (ids, rows, count: vocabulary-parallel staging)
  void embed(DLTensor* x, const int32_t* host_tokens, Tensor& tok, Tensor& pos, Tensor& ids,
             Tensor& rows, int64_t& count, int64_t n);
  void embed_backward(const DLTensor* dx, Tensor& tok, Tensor& pos, Tensor& ids, Tensor& rows,
                      int64_t count, int64_t n);
  double head_forward(T5Slot& S, const int32_t* targets, bool grad);
  void head_backward(T5Slot& S);
  void final_norm(const Norm& n, const DLTensor* x, Tensor& y, Tensor& mean, Tensor& rstd,
                  int64_t rows);

  std::string who_;
  Ctx ctx_;
  Options opt_, enc_opt_;  // enc_opt_: the encoder's (bidirectional) copy
  loom_model_create_args args_{};
  ParamStore params_;
  Embedding emb_;
  std::vector<std::unique_ptr<Block>> enc_;
  std::vector<T5DecoderLayer> dec_;
  Norm enc_ln_f_, dec_ln_f_;
  RelativeBias enc_rel_, dec_rel_;  // position = "relative"
  Tensor debias_, ddbias_;          // their gradients (grad dtype), shared by the slots
  LmHead head_;
  View bias_, dbias_;  // lm_head.bias over this rank's real vocabulary rows
  loom::tp::VocabParallelCrossEntropy ce_;

  std::vector<std::unique_ptr<T5Slot>> slots_;
  GradScratch grads_;
  Tensor dmem_, picked_;      // (Ne,C) d(encoder output); (max(Ne,Nd),C) embedding scratch (tp)
  ProcessGroup batch_group_;  // data: the ranks that split the global batch (delayed FP8)
  std::vector<const char*> reads_;
  loom_loss losses_[1]{};
  std::vector<double> host_losses_;
  std::vector<int32_t> pos_host_;

  // generation
  std::vector<LayerCache> cache_,
      xcache_;  // self-attention (B, max_len) and cross (B, max_seq_len)
  int64_t cache_max_ = 0;
  std::vector<int64_t> slot_len_, dec_start_;
  std::vector<int32_t> enc_len_;  // each slot's encoded tokens (0: not encoded)
  LayerActs gen_acts_;
  CrossActs gen_xacts_;
  int64_t gen_rows_ = 0;
  Tensor gen_res_[2], gen_tok_, gen_pos_, gen_ids_, gen_rows_t_, gen_mem_, gen_mean_, gen_rstd_;
  LogitsOut gen_out_;
  std::vector<Tensor> gen_bias_, gen_bucket_;  // position = "relative": per sequence
  std::vector<AttentionBias> gen_ab_;
};

}  // namespace loom::layers
