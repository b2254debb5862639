// Loom layer library, T5 generation: the encoder runs once per sequence (encode), the decoder
// token by token with a KV cache (decode, decode_slots).
//
// Each cache slot holds, per decoder layer, the self-attention's keys and values (max_len
// decoder positions, as the decoder-only model's cache) and the cross-attention's keys and
// values of the slot's encoder output (max_seq_len positions). encode(slot, tokens) fills the
// latter and empties the former; decode then appends decoder tokens.
#include <algorithm>
#include <string>

#include "loom/cpp/layers/t5/t5.hpp"

namespace loom::layers {

namespace {
std::string s(int64_t v) { return std::to_string(v); }
}  // namespace

void T5Model::kv_reset(int64_t batch, int64_t max_len) {
  loom::require(batch > 0 && max_len > 0, who_ + ": kv_reset needs batch and max_len > 0");
  loom::require(max_len <= opt_.max_seq_len, who_ + ": kv_reset max_len " + s(max_len) +
                                                 " exceeds max_seq_len " + s(opt_.max_seq_len) +
                                                 " (the learned position table)");
  if (batch != (int64_t)slot_len_.size() || max_len != cache_max_) {
    const int64_t Hkv = opt_.hkv(), D = opt_.head_dim, E = opt_.max_seq_len;
    cache_.clear();
    xcache_.clear();
    cache_.resize(opt_.dec_layers);
    xcache_.resize(opt_.dec_layers);
    for (int64_t l = 0; l < opt_.dec_layers; ++l) {
      cache_[l].k = ctx_.alloc({batch, max_len, Hkv, D});
      cache_[l].v = ctx_.alloc({batch, max_len, Hkv, D});
      xcache_[l].k = ctx_.alloc({batch, E, Hkv, D});
      xcache_[l].v = ctx_.alloc({batch, E, Hkv, D});
    }
    cache_max_ = max_len;
  }
  slot_len_.assign(batch, 0);
  enc_len_.assign(batch, 0);
}

// Generation's buffers for n tokens: the residual stream, ids and positions.
void T5Model::ensure_gen(int64_t n) {
  if (n <= gen_rows_) return;
  const int64_t C = opt_.n_embd;
  for (auto& r : gen_res_) r = ctx_.alloc({n, C});
  gen_tok_ = ctx_.alloc(loom_i32(), {n});
  gen_pos_ = ctx_.alloc(loom_i32(), {n});
  gen_ids_ = ctx_.alloc(loom_i32(), {n});
  gen_rows_t_ = ctx_.alloc(loom_i32(), {n});
  if (ctx_.tp.active() && picked_.numel() < n * C) picked_ = ctx_.alloc({n, C});
  gen_rows_ = n;
}

void T5Model::kv_clear(int64_t slot) {
  loom::require(
      slot >= 0 && slot < (int64_t)slot_len_.size(),
      who_ + ": kv_clear of slot " + s(slot) + "; kv_reset made " + s((int64_t)slot_len_.size()));
  slot_len_[slot] = 0;
  enc_len_[slot] = 0;
}

// The encoder over one sequence of n tokens (positions 0..n-1, no padding), then each decoder
// layer's cross-attention keys and values of its output into the slot's cache row.
void T5Model::encode(int64_t slot, const int32_t* tokens, int64_t n) {
  loom::require(slot >= 0 && slot < (int64_t)slot_len_.size(),
                who_ + ": encode of slot " + s(slot) + " before a kv_reset that makes it");
  loom::require(
      tokens && n > 0 && n <= opt_.max_seq_len,
      who_ + ": encode needs 1 to max_seq_len (" + s(opt_.max_seq_len) + ") tokens, got " + s(n));
  const int64_t C = opt_.n_embd, kvd = opt_.kv_dim();
  ensure_gen(n);
  if (!gen_mem_ || gen_mem_.numel() < n * C) {
    gen_mem_ = ctx_.alloc({n, C});
    gen_mean_ = ctx_.alloc(ctx_.stat_dtype(), {n});
    gen_rstd_ = ctx_.alloc(ctx_.stat_dtype(), {n});
  }
  gen_acts_.ensure(ctx_, enc_opt_, n);
  pos_host_.resize(n);
  for (int64_t i = 0; i < n; ++i) pos_host_[i] = (int32_t)i;
  upload(gen_tok_, tokens, n, true, false);
  upload(gen_pos_, pos_host_.data(), n, false, false);
  int64_t count = 0;
  embed(gen_res_[0], tokens, gen_tok_, gen_pos_, gen_ids_, gen_rows_t_, count, n);
  Step st{1, n, 0};
  if (opt_.relative) {  // the encoder's bias over the n tokens
    gen_bias_.resize(1);
    gen_bucket_.resize(1);
    gen_ab_.resize(1);
    gen_bias_[0] = ctx_.alloc({opt_.hq(), n, n});
    enc_rel_.forward(ctx_, gen_bias_[0], gen_bucket_[0], 0, n, n);
    gen_ab_[0] = {gen_bias_[0].get(), nullptr};
    st.bias = gen_ab_.data();
  }
  int cur = 0;
  for (int64_t l = 0; l < opt_.n_layer; ++l) {
    enc_[l]->forward(ctx_, enc_opt_, st, gen_res_[cur], gen_res_[1 - cur], gen_acts_, nullptr, 0);
    cur = 1 - cur;
  }
  final_norm(enc_ln_f_, gen_res_[cur], gen_mem_, gen_mean_, gen_rstd_, n);
  View mem = view(gen_mem_, {n, C});
  const int64_t row = slot * opt_.max_seq_len * kvd;
  for (int64_t l = 0; l < opt_.dec_layers; ++l) {
    View k = view(xcache_[l].k, {n, kvd}, row), v = view(xcache_[l].v, {n, kvd}, row);
    dec_[l].cross().project_memory(ctx_, mem, n, k, v);
  }
  enc_len_[slot] = (int32_t)n;
  slot_len_[slot] = 0;
}

void T5Model::decode(const int32_t* tokens, int64_t n, float* logits) {
  loom::require(!slot_len_.empty(), who_ + ": decode before kv_reset");
  std::vector<int64_t> all(slot_len_.size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = (int64_t)b;
  decode_slots(all.data(), (int64_t)all.size(), tokens, n, logits);
}

// tokens(B,n) appended to the decoder sequences of cache slots[b], each attending to its own
// encoding; the logits of each sequence's last new position.
void T5Model::decode_slots(const int64_t* slots, int64_t num, const int32_t* tokens, int64_t n,
                           float* logits) {
  loom::require(!slot_len_.empty(), who_ + ": decode before kv_reset");
  loom::require(tokens && logits && slots && n > 0 && num > 0,
                who_ + ": decode needs n > 0 tokens of num > 0 slots and logits");
  dec_start_.resize(num);
  std::vector<int32_t> enc(num);
  std::vector<bool> seen(slot_len_.size());
  for (int64_t b = 0; b < num; ++b) {
    const int64_t r = slots[b];
    loom::require(r >= 0 && r < (int64_t)slot_len_.size() && !seen[r],
                  who_ + ": decode of slot " + s(r) + ": slots must be distinct and below " +
                      "kv_reset's batch " + s((int64_t)slot_len_.size()));
    seen[r] = true;
    loom::require(enc_len_[r] > 0,
                  who_ + ": decode of slot " + s(r) + ", which has no encoding: call encode first");
    loom::require(slot_len_[r] + n <= cache_max_,
                  who_ + ": decode of " + s(n) + " tokens overflows the KV cache (" +
                      s(slot_len_[r]) + " of " + s(cache_max_) + " used)");
    dec_start_[b] = slot_len_[r];
    enc[b] = enc_len_[r];
  }
  Step st{num, n, 0};
  st.pos = dec_start_.data();
  st.rows = slots;
  const CrossStep cs{num, n, opt_.max_seq_len, enc.data(), slots};
  const int64_t N = st.N(), B = num, C = opt_.n_embd;
  ensure_gen(N);
  gen_acts_.ensure(ctx_, opt_, N);
  gen_xacts_.ensure(ctx_, opt_, N, 1);
  View out = gen_out_.ensure(ctx_, head_, B);
  pos_host_.resize(N);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t) pos_host_[b * n + t] = (int32_t)(dec_start_[b] + t);
  upload(gen_tok_, tokens, N, true, false);
  upload(gen_pos_, pos_host_.data(), N, false, false);
  int64_t count = 0;
  embed(gen_res_[0], tokens, gen_tok_, gen_pos_, gen_ids_, gen_rows_t_, count, N);
  if (opt_.relative) {  // each sequence's decoder bias: its n new queries over its keys
    gen_bias_.resize(B);
    gen_bucket_.resize(B);
    gen_ab_.resize(B);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t S = dec_start_[b] + n;
      gen_bias_[b] = ctx_.alloc({opt_.hq(), n, S});
      dec_rel_.forward(ctx_, gen_bias_[b], gen_bucket_[b], dec_start_[b], n, S);
      gen_ab_[b] = {gen_bias_[b].get(), nullptr};
    }
    st.bias = gen_ab_.data();
  }
  int cur = 0;
  for (int64_t l = 0; l < opt_.dec_layers; ++l) {
    dec_[l].forward(ctx_, opt_, st, cs, gen_res_[cur], xcache_[l].k, xcache_[l].v,
                    gen_res_[1 - cur], gen_acts_, gen_xacts_, &cache_[l], cache_max_);
    cur = 1 - cur;
  }
  // dec.ln_f over all rows (ln1 as scratch), then the head and its bias on each sequence's
  // last row: rows b*n + n-1 are n*C elements apart.
  View x = view(gen_res_[cur], {N, C}), y = view(gen_acts_.ln1, {N, C});
  dec_ln_f_.forward(ctx_, y, view(gen_acts_.ln1_mean, {N}), view(gen_acts_.ln1_rstd, {N}), x);
  if (head_.vocab > 0) {
    head_.forward(ctx_, out, head_.vocab, y, B, n * C, (n - 1) * C);
    loom::bias_add(ctx_.be, out.get(), bias_);
  }
  gen_out_.to_host(ctx_, head_, B, opt_.vocab, logits);
  for (int64_t b = 0; b < num; ++b) slot_len_[slots[b]] += n;
}

}  // namespace loom::layers
