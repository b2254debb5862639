// Variable-length sequences (loom.attention-seqlens/1): padded batches (BERT), packed
// documents (GPT's packed sequences) and cross-attention with padding (T5, T != S, also
// T > S), causal or not, with GQA and a sliding window, through attention/reference and
// attention/flash-cpu (two tile shapes), against a float64 recomputation written here from
// attention.h's definition, one sequence at a time: out, lse, dq, dk, dv, with the rows of
// no sequence at 0. With a bias (loom.attention-bias/1, T5's relative position bias) also
// dbias, with and without sequences. Then the contract's refusals, each naming the sequence.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "ops_support.hpp"

using namespace opstest;

namespace {

struct Att {
  const loom_attention_api* api;
  loom_attention* self;
  std::string name;
};

Att load(const std::string& name, const std::map<std::string, std::string>& cfg = {}) {
  const AttentionInstance a = attention_instance(name, cfg);
  return Att{a.api, a.self, name};
}

struct Case {
  const char* what;
  int64_t B, T, S, Hq, Hkv, D;
  bool causal;
  int64_t window;
  std::vector<int32_t> cu_q, cu_k, pad_q, pad_k;  // pad_*: empty = NULL; cu_q empty: whole rows
  bool bias = false;                              // a (Hq, T, S) bias and its gradient
};

struct Result {
  Vec out, lse, dq, dk, dv, dbias;
};

// Whole rows as sequences, for a case without loom.attention-seqlens/1.
Case rows_as_seqs(Case c) {
  if (!c.cu_q.empty()) return c;
  for (int64_t b = 0; b <= c.B; ++b) {
    c.cu_q.push_back((int32_t)(b * c.T));
    c.cu_k.push_back((int32_t)(b * c.S));
  }
  return c;
}

// attention.h's definition in float64, one sequence at a time.
Result expected(const Case& rows, const Vec& q, const Vec& k, const Vec& v, const Vec& dout,
                const Vec& bias) {
  const Case c = rows_as_seqs(rows);
  const int64_t G = c.Hq / c.Hkv, D = c.D;
  const double scale = 1.0 / std::sqrt((double)D);
  Result r{Vec(q.size()), Vec(c.B * c.Hq * c.T), Vec(q.size()),
           Vec(k.size()), Vec(k.size()),         Vec(bias.size())};
  auto B = [&](int64_t h, int64_t t, int64_t s) { return (h * c.T + t) * c.S + s; };
  for (size_t i = 0; i + 1 < c.cu_q.size(); ++i) {
    const int64_t nq = c.cu_q[i + 1] - c.cu_q[i], nk = c.cu_k[i + 1] - c.cu_k[i];
    const int64_t q0 = c.pad_q.empty() ? c.cu_q[i] : c.pad_q[i];
    const int64_t k0 = c.pad_k.empty() ? c.cu_k[i] : c.pad_k[i];
    const int64_t b = q0 / c.T, t0 = q0 % c.T;
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / G;
      auto Q = [&](int64_t t) { return &q[((q0 + t) * c.Hq + h) * D]; };
      auto K = [&](int64_t s) { return &k[((k0 + s) * c.Hkv + g) * D]; };
      auto V = [&](int64_t s) { return &v[((k0 + s) * c.Hkv + g) * D]; };
      auto dO = [&](int64_t t) { return &dout[((q0 + t) * c.Hq + h) * D]; };
      for (int64_t t = 0; t < nq; ++t) {
        const int64_t last = c.causal ? t + nk - nq : nk - 1;
        const int64_t first = c.window > 0 ? std::max<int64_t>(0, last - c.window + 1) : 0;
        std::vector<double> p(nk, 0.0);
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t s = first; s <= last; ++s) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += Q(t)[d] * K(s)[d];
          p[s] = scale * x + (c.bias ? bias[B(h, t, s)] : 0.0);
          mx = std::max(mx, p[s]);
        }
        for (int64_t s = first; s <= last; ++s) sum += std::exp(p[s] - mx);
        const double lse = mx + std::log(sum);
        r.lse[(b * c.Hq + h) * c.T + t0 + t] = lse;
        double di = 0;  // rowsum(P * dP)
        std::vector<double> dp(nk, 0.0);
        for (int64_t s = first; s <= last; ++s) {
          p[s] = std::exp(p[s] - lse);
          for (int64_t d = 0; d < D; ++d) {
            r.out[((q0 + t) * c.Hq + h) * D + d] += p[s] * V(s)[d];
            dp[s] += dO(t)[d] * V(s)[d];
          }
          di += p[s] * dp[s];
        }
        for (int64_t s = first; s <= last; ++s) {
          if (c.bias) r.dbias[B(h, t, s)] += p[s] * (dp[s] - di);
          const double ds = scale * p[s] * (dp[s] - di);
          for (int64_t d = 0; d < D; ++d) {
            r.dq[((q0 + t) * c.Hq + h) * D + d] += ds * K(s)[d];
            r.dk[((k0 + s) * c.Hkv + g) * D + d] += ds * Q(t)[d];
            r.dv[((k0 + s) * c.Hkv + g) * D + d] += p[s] * dO(t)[d];
          }
        }
      }
    }
  }
  return r;
}

loom_attention_seqlens seqlens(const Case& c) {
  loom_attention_seqlens x{};
  x.base = {sizeof(loom_attention_seqlens), LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_REQUIRED, nullptr};
  x.num_seqs = (int64_t)c.cu_q.size() - 1;
  x.cu_seqlens_q = c.cu_q.data();
  x.cu_seqlens_k = c.cu_k.data();
  x.cu_seqlens_q_padded = c.pad_q.empty() ? nullptr : c.pad_q.data();
  x.cu_seqlens_k_padded = c.pad_k.empty() ? nullptr : c.pad_k.data();
  return x;
}

// Forward and backward of `att` on poisoned outputs (NaN: a row left unwritten shows).
Result run(const Att& att, DLDataType dt, const Case& c, const Vec& q, const Vec& k, const Vec& v,
           const Vec& dout, const Vec& bias) {
  const double scale = 1.0 / std::sqrt((double)c.D);
  const int64_t nq = (int64_t)q.size(), nk = (int64_t)k.size();
  auto Q = make(dt, {c.B, c.T, c.Hq, c.D}, q), K = make(dt, {c.B, c.S, c.Hkv, c.D}, k);
  auto V = make(dt, {c.B, c.S, c.Hkv, c.D}, v), dO = make(dt, {c.B, c.T, c.Hq, c.D}, dout);
  const double nan = std::nan("");
  auto O = make(dt, {c.B, c.T, c.Hq, c.D}, Vec(nq, nan));
  auto L = make(loom_f32(), {c.B, c.Hq, c.T}, Vec(c.B * c.Hq * c.T, nan));
  auto dQ = make(dt, {c.B, c.T, c.Hq, c.D}, Vec(nq, nan));
  auto dK = make(dt, {c.B, c.S, c.Hkv, c.D}, Vec(nk, nan));
  auto dV = make(dt, {c.B, c.S, c.Hkv, c.D}, Vec(nk, nan));
  const DLDataType gdt = dt.bits == 64 ? loom_f64() : loom_f32();
  auto Bias = make(dt, {c.Hq, c.T, c.S}, bias);
  auto dBias = make(gdt, {c.Hq, c.T, c.S}, Vec(bias.size(), 0.0));
  loom_attention_seqlens x = seqlens(c);
  const loom_ext* chain = c.cu_q.empty() ? nullptr : &x.base;
  loom_attention_bias xb{
      {sizeof(loom_attention_bias), LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_REQUIRED, chain},
      Bias,
      nullptr};
  if (c.bias) chain = &xb.base;
  loom_attention_window w{
      {sizeof(loom_attention_window), LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_REQUIRED, chain},
      c.window};
  const loom_ext* ext = c.window > 0 ? &w.base : chain;
  loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2, Q, K, V, O, L, scale, c.causal, ext};
  env().host.check(att.api->forward(att.self, &f));
  xb.dbias = dBias;  // backward adds to it
  loom_attention_bwd_args b{
      LOOM_ATTENTION_BWD_ARGS_SIZE_V2, dO, Q, K, V, O, L, dQ, dK, dV, scale, c.causal, ext};
  env().host.check(att.api->backward(att.self, &b));
  return {get(O), get(L), get(dQ), get(dK), get(dV), get(dBias)};
}

const Case kCases[] = {
    // BERT: three padded rows of 12, lengths 12, 7, 1; bidirectional.
    {"padding",
     3,
     12,
     12,
     4,
     4,
     8,
     false,
     0,
     {0, 12, 19, 20},
     {0, 12, 19, 20},
     {0, 12, 24},
     {0, 12, 24}},
    // GPT packed: documents 5, 9, 6 in row 0 and one of 20 in row 1; causal.
    {"packed", 2, 20, 20, 2, 2, 8, true, 0, {0, 5, 14, 20, 40}, {0, 5, 14, 20, 40}, {}, {}},
    // Packed documents with padding after them and an empty sequence between.
    {"packed+padding",
     2,
     16,
     16,
     4,
     2,
     8,
     true,
     0,
     {0, 6, 11, 11, 20},
     {0, 6, 11, 11, 20},
     {0, 6, 16, 16},
     {0, 6, 16, 16}},
    // T5 cross-attention: decoder queries 10 (4 real in row 1), encoder keys 14 (9 real).
    {"cross", 2, 10, 14, 2, 1, 8, false, 0, {0, 10, 14}, {0, 14, 23}, {0, 10}, {0, 14}},
    // More queries than keys (T > S), not causal.
    {"cross T>S", 2, 14, 6, 2, 2, 8, false, 0, {0, 14, 17}, {0, 6, 8}, {0, 14}, {0, 6}},
    // Several tiles, GQA 2:1, documents of 70 and 80 with a sliding window of 20.
    {"packed+window", 1, 150, 150, 4, 2, 16, true, 20, {0, 70, 150}, {0, 70, 150}, {}, {}},
    // T5's encoder: padded rows with a relative position bias.
    {"padding+bias",
     3,
     12,
     12,
     4,
     4,
     8,
     false,
     0,
     {0, 12, 19, 20},
     {0, 12, 19, 20},
     {0, 12, 24},
     {0, 12, 24},
     true},
    // T5's decoder: whole causal rows (no sequences) with a bias; several tiles, GQA.
    {"causal+bias", 2, 70, 70, 4, 2, 8, true, 0, {}, {}, {}, {}, true},
    // Generation: the last 3 queries of 9 keys, bidirectional rows, with a bias.
    {"decode+bias", 2, 3, 9, 2, 2, 8, true, 0, {}, {}, {}, {}, true},
};

void run_all(const Att& att, DLDataType dt, double tol) {
  for (const Case& c : kCases) {
    INFO(att.name << " " << c.what);
    const uint64_t seed = c.T * 131 + c.S * 7 + c.D + c.Hq;
    const Vec q = random_vec(c.B * c.T * c.Hq * c.D, seed, -2, 2);
    const Vec k = random_vec(c.B * c.S * c.Hkv * c.D, seed + 1, -2, 2);
    const Vec v = random_vec(c.B * c.S * c.Hkv * c.D, seed + 2);
    const Vec dout = random_vec(c.B * c.T * c.Hq * c.D, seed + 3);
    const Vec bias = random_vec(c.Hq * c.T * c.S, seed + 4, -1, 1);
    const Result want = expected(c, q, k, v, dout, bias);
    const Result got = run(att, dt, c, q, k, v, dout, bias);
    check_rel(got.out, want.out, tol, "out");
    check_rel(got.lse, want.lse, 1e-6, "lse (f32)");
    check_rel(got.dq, want.dq, tol, "dq");
    check_rel(got.dk, want.dk, tol, "dk");
    check_rel(got.dv, want.dv, tol, "dv");
    if (c.bias) check_rel(got.dbias, want.dbias, tol, "dbias");
  }
}

}  // namespace

TEST_CASE("seqlens: reference and flash-cpu match a float64 recomputation, f64 and f32") {
  for (const Att& att : {load("reference"), load("flash-cpu"),
                         load("flash-cpu", {{"block_q", "4"}, {"block_k", "3"}})}) {
    run_all(att, loom_f64(), 1e-12);
    run_all(att, loom_f32(), 2e-6);
  }
}

TEST_CASE("seqlens: a malformed list is refused, naming the sequence") {
  auto refusal = [](const Att& att, Case c) -> std::string {
    const Vec q(c.B * c.T * c.Hq * c.D, 0.1), k(c.B * c.S * c.Hkv * c.D, 0.1);
    try {
      run(att, loom_f64(), c, q, k, k, q, Vec(c.Hq * c.T * c.S, 0.0));
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  for (const Att& att : {load("reference"), load("flash-cpu")}) {
    INFO(att.name);
    const Case base{"", 2, 8, 8, 2, 2, 4, true, 0, {0, 8, 16}, {0, 8, 16}, {}, {}};
    Case crosses = base;  // 6 + 10: the second sequence runs from row 0 into row 1
    crosses.cu_q = crosses.cu_k = {0, 6, 16};
    CHECK(refusal(att, crosses).find("sequence 1: its queries cross a batch row") !=
          std::string::npos);
    Case causal = base;  // 8 queries over 4 keys, causal
    causal.cu_k = {0, 4, 12};
    CHECK(refusal(att, causal).find("sequence 0: 8 queries but 4 keys with causal attention") !=
          std::string::npos);
    Case past = base;
    past.cu_q = past.cu_k = {0, 8, 17};
    CHECK(refusal(att, past).find("sequence 1: ends past the 16 query or 16 key rows") !=
          std::string::npos);
    Case overlap = base;
    overlap.pad_q = overlap.pad_k = {0, 4};
    CHECK(refusal(att, overlap).find("sequence 1: starts before the previous sequence ends") !=
          std::string::npos);
    Case other_row = base;  // queries in row 0, keys in row 1
    other_row.cu_q = {0, 4, 8};
    other_row.cu_k = {0, 8, 12};
    other_row.pad_q = {0, 8};
    other_row.pad_k = {8, 12};
    other_row.causal = false;
    CHECK(refusal(att, other_row)
              .find("sequence 0: its keys must be at least one, in the same "
                    "batch row as its queries") != std::string::npos);
  }
}

TEST_CASE("bias: a bias of the wrong shape or dtype is refused, naming the extension") {
  for (const Att& att : {load("reference"), load("flash-cpu")}) {
    INFO(att.name);
    const Case c{"", 1, 4, 4, 2, 2, 4, false, 0, {}, {}, {}, {}, true};
    const Vec q(c.B * c.T * c.Hq * c.D, 0.1);
    auto Q = make(loom_f64(), {c.B, c.T, c.Hq, c.D}, q);
    auto O = make(loom_f64(), {c.B, c.T, c.Hq, c.D}, q);
    auto L = make(loom_f32(), {c.B, c.Hq, c.T}, Vec(c.B * c.Hq * c.T, 0.0));
    auto wrong_shape = make(loom_f64(), {c.Hq, c.T, c.S + 1}, Vec(c.Hq * c.T * (c.S + 1), 0.0));
    auto wrong_dtype = make(loom_f32(), {c.Hq, c.T, c.S}, Vec(c.Hq * c.T * c.S, 0.0));
    for (const DLTensor* bias : {(const DLTensor*)wrong_shape, (const DLTensor*)wrong_dtype}) {
      loom_attention_bias xb{
          {sizeof(loom_attention_bias), LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_REQUIRED, nullptr},
          bias,
          nullptr};
      loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2, Q, Q, Q, O, L, 0.5, 0, &xb.base};
      loom_error* e = att.api->forward(att.self, &f);
      REQUIRE(e != nullptr);
      CHECK(std::string(e->message)
                .find("loom.attention-bias/1: bias must be (Hq, T, S) = (2, 4, 4)") !=
            std::string::npos);
      delete e;
    }
  }
}
