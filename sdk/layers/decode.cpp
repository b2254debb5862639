// Loom layer library, generation: a KV cache per layer and incremental decoding.
//
// decode(tokens(B,n)) runs the n new tokens of every sequence at positions [cur, cur+n)
// through the stack; each layer appends their k/v to its cache and the queries attend
// causally to the cache (the attention plugin with T = n, S = cur + n). Only the last
// position's hidden state goes through the LM head.
#include <string>

#include "loom/cpp/layers/decoder.hpp"

namespace loom::layers {

void DecoderModel::kv_reset(int64_t batch, int64_t max_len) {
  loom::require(opt_.tp == 1 && opt_.stages == 1,
                who_ + ": generation runs at tensor = pipeline = 1; this instance has tensor = " +
                    std::to_string(opt_.tp) + ", pipeline stages = " + std::to_string(opt_.stages),
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(batch > 0 && max_len > 0, who_ + ": kv_reset needs batch and max_len > 0");
  loom::require(opt_.rope || max_len <= opt_.max_seq_len,
                who_ + ": kv_reset max_len " + std::to_string(max_len) + " exceeds max_seq_len " +
                    std::to_string(opt_.max_seq_len) + " (the learned position table)");
  if (batch != cache_batch_ || max_len != cache_max_) {
    cache_.clear();
    cache_.resize(opt_.n_layer);
    for (auto& c : cache_) {
      c.k = ctx_.alloc({batch, max_len, opt_.n_kv_head, opt_.head_dim});
      c.v = ctx_.alloc({batch, max_len, opt_.n_kv_head, opt_.head_dim});
    }
    cache_batch_ = batch;
    cache_max_ = max_len;
  }
  cache_len_ = 0;
}

void DecoderModel::decode(const int32_t* tokens, int64_t n, float* logits) {
  loom::require(cache_batch_ > 0, who_ + ": decode before kv_reset");
  loom::require(tokens && logits && n > 0, who_ + ": decode needs n > 0 tokens and logits");
  loom::require(cache_len_ + n <= cache_max_,
                who_ + ": decode of " + std::to_string(n) + " tokens overflows the KV cache (" +
                    std::to_string(cache_len_) + " of " + std::to_string(cache_max_) +
                    " used); call kv_reset with a larger max_len");
  const Step s{cache_batch_, n, cache_len_};
  const int64_t N = s.N(), B = s.B, C = opt_.n_embd, V = opt_.vocab;
  if (N > dec_rows_) {
    for (auto& r : dec_res_) r = ctx_.alloc({N, C});
    dec_tokens_ = ctx_.alloc(loom_i32(), {N});
    dec_positions_ = ctx_.alloc(loom_i32(), {N});
    dec_rows_ = N;
  }
  dec_acts_.ensure(ctx_, opt_, N);
  if (!dec_logits_ || dec_logits_.numel() < B * V) {
    dec_logits_ = ctx_.alloc({B, V});
    if (ctx_.dtype.bits != 32) dec_logits_f32_ = ctx_.alloc(loom_f32(), {B, V});
  }
  upload_ids(dec_tokens_, tokens, N, false);
  if (!opt_.rope) upload_positions(dec_positions_, s);
  View tok = view(dec_tokens_, {N}), pos = view(dec_positions_, {N});

  int cur = 0;
  View x0 = view(dec_res_[0], {N, C});
  emb_.forward(ctx_, x0, tok, pos);
  for (int64_t l = 0; l < opt_.n_layer; ++l) {
    layers_[l]->forward(ctx_, opt_, s, dec_res_[cur], dec_res_[1 - cur], dec_acts_, &cache_[l],
                        cache_max_);
    cur = 1 - cur;
  }
  // ln_f over all rows (ln1 as scratch), then the head on each sequence's last row:
  // rows b*n + n-1 are n*C elements apart.
  View x = view(dec_res_[cur], {N, C}), y = view(dec_acts_.ln1, {N, C});
  View mean = view(dec_acts_.ln1_mean, {N}), rstd = view(dec_acts_.ln1_rstd, {N});
  ln_f_.forward(ctx_, y, mean, rstd, x);
  View out = view(dec_logits_, {B, V});
  head_.forward(ctx_, out, y, B, n * C, (n - 1) * C);
  const size_t bytes = (size_t)(B * V) * sizeof(float);
  if (ctx_.dtype.bits == 32) {
    loom::check(ctx_.host, ctx_.be.api()->to_host(ctx_.be.self(), out.get(), logits, bytes));
  } else {
    View o32 = view(dec_logits_f32_, {B, V});
    ctx_.call(&loom_ops::copy, o32.get(), (const DLTensor*)out);
    loom::check(ctx_.host, ctx_.be.api()->to_host(ctx_.be.self(), o32.get(), logits, bytes));
  }
  cache_len_ += n;
}

}  // namespace loom::layers
