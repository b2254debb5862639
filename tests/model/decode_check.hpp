// Shared by the model tests: generation through the decode extensions against the training
// forward — incremental decoding against each full prefix, and continuous batching against
// each sequence decoded alone.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "model_test_util.hpp"

namespace modeltest {

// Incremental decoding (one token, then chunks) must reproduce decoding each full prefix at
// once, and the prefix logits must give the loss the training forward computes.
inline void check_decode(const Overrides& o, DLDataType dt = loom_f32()) {
  Host h;
  const int64_t B = 2, T = 8, V = 50;
  Gpt m(h, o, V, B, T, dt);
  m.check(m.api()->init_params(m.self(), 3));
  perturb_lora_b(h.be, m.params);  // LoRA: nonzero adapters take part
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = (int32_t)((i * 7 + 3) % V);
    tgt[i] = (int32_t)((i * 11 + 5) % V);
  }
  auto prefix = [&](int64_t from, int64_t n) {  // tokens[:, from:from+n], (B, n)
    std::vector<int32_t> p(B * n);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < n; ++t) p[b * n + t] = tok[b * T + from + t];
    return p;
  };
  // full[t]: logits (B, V) after decoding tokens [0, t] in one call
  std::vector<std::vector<float>> full(T, std::vector<float>(B * V));
  for (int64_t t = 0; t < T; ++t) {
    m.check(m.decode_ext()->kv_reset(m.self(), B, T));
    m.check(m.decode_ext()->decode(m.self(), prefix(0, t + 1).data(), t + 1, full[t].data()));
  }
  // token by token
  m.check(m.decode_ext()->kv_reset(m.self(), B, T + 4));
  std::vector<float> out(B * V);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    m.check(m.decode_ext()->decode(m.self(), prefix(t, 1).data(), 1, out.data()));
    for (int64_t i = 0; i < B * V; ++i)
      worst = std::max(worst, (double)std::fabs(out[i] - full[t][i]));
  }
  CHECK(worst < 1e-5);
  // chunks of 3, 2, 3
  m.check(m.decode_ext()->kv_reset(m.self(), B, T));
  int64_t at = 0;
  for (int64_t n : {3, 2, 3}) {
    m.check(m.decode_ext()->decode(m.self(), prefix(at, n).data(), n, out.data()));
    at += n;
    for (int64_t i = 0; i < B * V; ++i)
      CHECK(out[i] == doctest::Approx(full[at - 1][i]).epsilon(1e-4));
  }
  // overflow of the cache is an error, not a crash
  loom_error* e = m.decode_ext()->decode(m.self(), prefix(0, 1).data(), 1, out.data());
  REQUIRE(e != nullptr);
  CHECK(std::string(e->message).find("KV cache") != std::string::npos);
  delete e;
  // cross-entropy of the decode logits = the training forward's loss
  double ce = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const float* lg = full[t].data() + b * V;
      double mx = lg[0], z = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, (double)lg[v]);
      for (int64_t v = 0; v < V; ++v) z += std::exp(lg[v] - mx);
      ce += mx + std::log(z) - lg[tgt[b * T + t]];
    }
  auto [loss, count] = m.run(tok, tgt, B, T, 1.0, false);
  CHECK(count == B * T);
  CHECK(loss == doctest::Approx(ce).epsilon(1e-5));
  MESSAGE("decode max |incremental - full prefix| = " << worst);
}

// Continuous batching: sequences that join and leave a running batch of cache slots, each
// at its own length, get the logits each gets decoded alone, token by token.
inline void check_decode_slots(const Overrides& o) {
  Host h;
  const int64_t V = 50, L = 12;
  Gpt m(h, o, V, 1, L);
  m.check(m.api()->init_params(m.self(), 4));
  const auto* dec = m.decode_ext();
  const auto* sl = m.slots_ext();
  std::vector<std::vector<int32_t>> seqs(4);
  for (size_t q = 0; q < seqs.size(); ++q)
    for (int64_t t = 0; t < 7 + (int64_t)q; ++t)
      seqs[q].push_back((int32_t)((q * 13 + t * 7 + 1) % V));
  // alone[q][t]: logits after tokens [0, t] of sequence q, decoded alone
  std::vector<std::vector<std::vector<float>>> alone(seqs.size());
  for (size_t q = 0; q < seqs.size(); ++q) {
    m.check(dec->kv_reset(m.self(), 1, L));
    for (int32_t t : seqs[q]) {
      alone[q].emplace_back(V);
      m.check(dec->decode(m.self(), &t, 1, alone[q].back().data()));
    }
  }
  // Three slots. Sequence 0 takes slot 1 with a 4-token prompt, sequence 1 slot 0 with 2;
  // both step; sequence 2 joins in slot 2 with 3 tokens; all step twice; sequence 0 leaves
  // and sequence 3 takes its slot (kv_clear) with 5 tokens; the rest step to their ends.
  m.check(dec->kv_reset(m.self(), 3, L));
  std::vector<int64_t> at(seqs.size(), 0), slot_of = {1, 0, 2, 1};
  double worst = 0;
  int64_t compared = 0;
  auto step = [&](std::vector<int64_t> qs, int64_t n) {
    std::vector<int64_t> slots;
    std::vector<int32_t> toks;
    for (int64_t q : qs) {
      slots.push_back(slot_of[q]);
      for (int64_t i = 0; i < n; ++i) toks.push_back(seqs[q][at[q] + i]);
    }
    std::vector<float> out(qs.size() * V);
    m.check(
        sl->decode_slots(m.self(), slots.data(), (int64_t)qs.size(), toks.data(), n, out.data()));
    for (size_t i = 0; i < qs.size(); ++i) {
      const int64_t q = qs[i];
      at[q] += n;
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, (double)std::fabs(out[i * V + v] - alone[q][at[q] - 1][v]));
      ++compared;
    }
  };
  step({0}, 4);
  step({1}, 2);
  step({1, 0}, 1);
  step({2}, 3);
  step({0, 2, 1}, 1);
  step({2, 1, 0}, 1);
  m.check(sl->kv_clear(m.self(), 1));  // sequence 0 leaves
  step({3}, 5);
  step({1, 2, 3}, 1);
  step({3, 1}, 1);
  CHECK(compared == 17);
  CHECK(worst < 1e-5);
  MESSAGE("decode_slots max |batched - alone| = " << worst);
  // the same slot twice, or one beyond the batch, is an error naming it
  const int64_t twice[] = {0, 0}, beyond[] = {3};
  std::vector<float> out(2 * V);
  const int32_t toks[] = {1, 2};
  for (auto [slots, num] : {std::pair{twice, 2}, std::pair{beyond, 1}}) {
    loom_error* e = sl->decode_slots(m.self(), slots, num, toks, 1, out.data());
    REQUIRE(e != nullptr);
    CHECK(std::string(e->message).find("distinct") != std::string::npos);
    delete e;
  }
}

}  // namespace modeltest
