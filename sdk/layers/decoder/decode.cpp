// Loom layer library, generation: a KV cache per layer and incremental decoding.
//
// decode_slots(tokens(B,n)) runs the n new tokens of each listed cache slot at positions
// [len, len+n) of that slot through the stack; each layer appends their k/v to the slot's
// cache row and the queries attend causally to it (the attention plugin with T = n,
// S = len + n). Only the last position's hidden state goes through the LM head. Slots have
// their own lengths, so sequences join and leave a running batch (continuous batching);
// decode is decode_slots over every slot.
#include <algorithm>
#include <string>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

void DecoderModel::kv_reset(int64_t batch, int64_t max_len) {
  loom::require(opt_.stages == 1 && !ctx_.tp.sequence_parallel,
                who_ + ": generation runs on one pipeline stage without sequence parallelism; " +
                    "this instance has " + std::to_string(opt_.stages) + " stages" +
                    (ctx_.tp.sequence_parallel ? ", sequence parallelism" : ""),
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(batch > 0 && max_len > 0, who_ + ": kv_reset needs batch and max_len > 0");
  loom::require(!opt_.learned_positions() || max_len <= opt_.max_seq_len,
                who_ + ": kv_reset max_len " + std::to_string(max_len) + " exceeds max_seq_len " +
                    std::to_string(opt_.max_seq_len) + " (the learned position table)");
  if (batch != (int64_t)slot_len_.size() || max_len != cache_max_) {
    cache_.clear();
    cache_.resize(opt_.n_layer);
    for (int64_t l = 0; l < opt_.n_layer; ++l) {
      LayerCache& c = cache_[(size_t)l];
      const char kind = opt_.layer_kind(l);
      if (kind == '-' || kind == 'E') continue;  // nothing carried from step to step
      if (kind == 'M') {  // the convolution's last inputs and the scan's state, per row
        const int64_t K1 = opt_.mamba_conv - 1, P = opt_.mamba_head_dim, S = opt_.mamba_state;
        if (K1 > 0) c.k = ctx_.alloc({batch, K1, opt_.m_conv_dim()});
        c.v = ctx_.alloc(ctx_.stat_dtype(), {batch, opt_.m_heads(), P, S});
        continue;
      }
      if (opt_.mla) {  // the compressed cache: each position's latent and rotated key part
        c.k = ctx_.alloc({batch, max_len, opt_.kv_lora_rank + opt_.qk_pos_dim});
        continue;
      }
      c.k = ctx_.alloc({batch, max_len, opt_.hkv(), opt_.head_dim});  // this rank's heads
      c.v = ctx_.alloc({batch, max_len, opt_.hkv(), opt_.head_dim});
    }
    cache_max_ = max_len;
  }
  slot_len_.assign(batch, 0);
}

void DecoderModel::kv_clear(int64_t slot) {
  loom::require(slot >= 0 && slot < (int64_t)slot_len_.size(),
                who_ + ": kv_clear of slot " + std::to_string(slot) + "; kv_reset made " +
                    std::to_string(slot_len_.size()));
  slot_len_[slot] = 0;
}

void DecoderModel::decode(const int32_t* tokens, int64_t n, float* logits) {
  loom::require(!slot_len_.empty(), who_ + ": decode before kv_reset");
  std::vector<int64_t> all(slot_len_.size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = (int64_t)b;
  decode_slots(all.data(), (int64_t)all.size(), tokens, n, logits);
}

// tokens(B,n) of sequences in cache rows slots[b], each appended at its own length.
void DecoderModel::decode_slots(const int64_t* slots, int64_t num, const int32_t* tokens, int64_t n,
                                float* logits) {
  loom::require(!slot_len_.empty(), who_ + ": decode before kv_reset");
  loom::require(tokens && logits && slots && n > 0 && num > 0,
                who_ + ": decode needs n > 0 tokens of num > 0 slots and logits");
  dec_start_.resize(num);
  std::vector<bool> seen(slot_len_.size());
  for (int64_t b = 0; b < num; ++b) {
    const int64_t r = slots[b];
    loom::require(r >= 0 && r < (int64_t)slot_len_.size() && !seen[r],
                  who_ + ": decode of slot " + std::to_string(r) + ": slots must be distinct and " +
                      "below kv_reset's batch " + std::to_string(slot_len_.size()));
    seen[r] = true;
    loom::require(slot_len_[r] + n <= cache_max_,
                  who_ + ": decode of " + std::to_string(n) + " tokens overflows the KV cache (" +
                      std::to_string(slot_len_[r]) + " of " + std::to_string(cache_max_) +
                      " used); call kv_reset with a larger max_len");
    dec_start_[b] = slot_len_[r];
  }
  Step s{num, n, 0};
  s.pos = dec_start_.data();
  s.rows = slots;
  const int64_t N = s.N(), B = s.B, C = opt_.n_embd;
  const loom::tp::Group& g = ctx_.tp;
  if (N > dec_rows_) {
    for (auto& r : dec_res_) r = ctx_.alloc({N, C});
    dec_tokens_ = ctx_.alloc(loom_i32(), {N});
    dec_positions_ = ctx_.alloc(loom_i32(), {N});
    if (g.active()) {
      dec_emb_ids_ = ctx_.alloc(loom_i32(), {N});
      dec_emb_rows_ = ctx_.alloc(loom_i32(), {N});
      dec_picked_ = ctx_.alloc({N, C});
    }
    dec_rows_ = N;
  }
  dec_acts_.ensure(ctx_, opt_, N);
  View out = dec_out_.ensure(ctx_, head_, B);
  upload_ids(dec_tokens_, nullptr, tokens, N, false);
  if (opt_.learned_positions()) upload_positions(dec_positions_, s);
  View tok = view(dec_tokens_, {N}), pos = view(dec_positions_, {N});

  int cur = 0;
  View x0 = view(dec_res_[0], {N, C});
  if (!g.active()) {
    emb_.forward(ctx_, x0, tok, pos);
  } else {  // the vocabulary-parallel lookup, reduced over the group (no sequence split)
    const int64_t count = emb_.vp.stage(ctx_.be, tokens, N, dec_emb_ids_, dec_emb_rows_);
    emb_.vp.forward(ctx_.be, g, emb_.wte, dec_emb_ids_, dec_emb_rows_, count, dec_picked_, nullptr,
                    x0);
    if (emb_.wpe) loom::embedding_forward(ctx_.be, x0.get(), pos, emb_.wpe, true);
  }
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
  if (head_.vocab > 0) head_.forward(ctx_, out, head_.vocab, y, B, n * C, (n - 1) * C);
  dec_out_.to_host(ctx_, head_, B, opt_.vocab, logits);
  for (int64_t b = 0; b < num; ++b) slot_len_[slots[b]] += n;
}

View LogitsOut::ensure(const Ctx& c, const LmHead& head, int64_t B) {
  const loom::tp::Group& g = c.tp;
  const int64_t W = g.active() ? head.shard.rows : head.vocab;
  if (!logits || logits.numel() < B * W) {
    logits = c.alloc({B, W});
    if (c.dtype.bits != 32 || g.active()) f32 = c.alloc(loom_f32(), {B, W});
    if (g.active()) gathered = c.alloc(loom_f32(), {g.size * B * W});
  }
  return view(logits, {B, head.vocab});
}

void LogitsOut::to_host(const Ctx& c, const LmHead& head, int64_t B, int64_t V, float* out) {
  const loom::tp::Group& g = c.tp;
  // the head's columns here: all V, or under tensor parallelism this rank's Vl real ones of
  // its W = padded/tp (gathered from every rank below)
  const int64_t Vl = head.vocab, W = g.active() ? head.shard.rows : Vl;
  View o = view(logits, {B, Vl});
  if (!g.active() && c.dtype.bits == 32) {
    loom::check(c.host,
                c.be.api()->to_host(c.be.self(), o.get(), out, (size_t)(B * Vl) * sizeof(float)));
    return;
  }
  if (!g.active()) {
    View o32 = view(f32, {B, Vl});
    c.call(&loom_ops::copy, o32.get(), (const DLTensor*)o);
    loom::check(c.host,
                c.be.api()->to_host(c.be.self(), o32.get(), out, (size_t)(B * Vl) * sizeof(float)));
    return;
  }
  // every rank's (B, Vl_r) block, each in a (B*W) stretch, gathered rank by rank; on the
  // host, rank r's columns go to [r*W, r*W + Vl_r) of each row
  if (Vl > 0) {
    View o32 = view(f32, {B, Vl});
    c.call(&loom_ops::copy, o32.get(), (const DLTensor*)o);
  }
  View mine = view(f32, {B * W}), all = view(gathered, {g.size * B * W});
  g.all_gather(mine, all);
  host.resize((size_t)(g.size * B * W));
  loom::check(c.host, c.be.api()->to_host(c.be.self(), all.get(), host.data(),
                                          host.size() * sizeof(float)));
  for (int r = 0; r < g.size; ++r) {
    const int64_t real = std::max<int64_t>(0, std::min(W, V - r * W));
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(host.data() + (r * B * W + b * real), real, out + b * V + r * W);
  }
}

}  // namespace loom::layers
