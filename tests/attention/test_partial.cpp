// Partial attention (ABI 2.7, context parallelism's ring): the keys of the queries split over
// two calls whose (out, lse) the plugin's merge combines, and the backward of each call given
// the merged out and lse (loom.attention-partial/1), through attention/reference and
// attention/flash-cpu, against a float64 recomputation of the whole attention written here.
// As in the ring, the second call covers only the last Tp queries (merge's row0): query t sees
// the first block of keys, and the second too when t >= T - Tp. The gradients of the two
// calls put together (dq summed, dk and dv side by side) must be the whole attention's.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops_support.hpp"

using namespace opstest;

namespace {

struct Case {
  const char* what;
  int64_t B, T, Tp, S1, S2, Hq, Hkv, D;
};

struct Grads {
  Vec out, lse, dq, dk, dv;  // dk, dv over all S1 + S2 keys, block 1 first
};

// The whole attention in float64 with the mask above.
Grads expected(const Case& c, const Vec& q, const Vec& k, const Vec& v, const Vec& dout) {
  const int64_t S = c.S1 + c.S2, G = c.Hq / c.Hkv, D = c.D;
  const double scale = 1.0 / std::sqrt((double)D);
  Grads r{Vec(q.size()), Vec(c.B * c.Hq * c.T), Vec(q.size()), Vec(k.size()), Vec(k.size())};
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t t = 0; t < c.T; ++t) {
        const int64_t g = h / G, last = t >= c.T - c.Tp ? S : c.S1;
        const double* Q = &q[((b * c.T + t) * c.Hq + h) * D];
        const double* dO = &dout[((b * c.T + t) * c.Hq + h) * D];
        auto K = [&](int64_t s) { return &k[((b * S + s) * c.Hkv + g) * D]; };
        auto V = [&](int64_t s) { return &v[((b * S + s) * c.Hkv + g) * D]; };
        std::vector<double> p(S), dp(S);
        double mx = -std::numeric_limits<double>::infinity(), sum = 0, di = 0;
        for (int64_t s = 0; s < last; ++s) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += Q[d] * K(s)[d];
          mx = std::max(mx, p[s] = scale * x);
        }
        for (int64_t s = 0; s < last; ++s) sum += std::exp(p[s] - mx);
        const double lse = mx + std::log(sum);
        r.lse[(b * c.Hq + h) * c.T + t] = lse;
        for (int64_t s = 0; s < last; ++s) {
          p[s] = std::exp(p[s] - lse);
          for (int64_t d = 0; d < D; ++d) {
            r.out[((b * c.T + t) * c.Hq + h) * D + d] += p[s] * V(s)[d];
            dp[s] += dO[d] * V(s)[d];
          }
          di += p[s] * dp[s];
        }
        for (int64_t s = 0; s < last; ++s) {
          const double ds = scale * p[s] * (dp[s] - di);
          for (int64_t d = 0; d < D; ++d) {
            r.dq[((b * c.T + t) * c.Hq + h) * D + d] += ds * K(s)[d];
            r.dk[((b * S + s) * c.Hkv + g) * D + d] += ds * Q[d];
            r.dv[((b * S + s) * c.Hkv + g) * D + d] += p[s] * dO[d];
          }
        }
      }
  return r;
}

// Rows [r0, r0 + n) of each of the B blocks of `rows` rows of `width` values.
Vec rows_of(const Vec& x, int64_t B, int64_t rows, int64_t r0, int64_t n, int64_t width) {
  Vec out;
  for (int64_t b = 0; b < B; ++b)
    out.insert(out.end(), x.begin() + (b * rows + r0) * width,
               x.begin() + (b * rows + r0 + n) * width);
  return out;
}

// The two calls, the merge and the two partial backwards; returns the whole attention's
// results put together.
Grads run(const AttentionInstance& att, DLDataType dt, const Case& c, const Vec& q, const Vec& k,
          const Vec& v, const Vec& dout) {
  const int64_t S = c.S1 + c.S2, qw = c.Hq * c.D, kw = c.Hkv * c.D, r0 = c.T - c.Tp;
  const double scale = 1.0 / std::sqrt((double)c.D);
  const DLDataType ldt = dt.bits == 64 ? loom_f64() : loom_f32();
  const Vec k1 = rows_of(k, c.B, S, 0, c.S1, kw), k2 = rows_of(k, c.B, S, c.S1, c.S2, kw);
  const Vec v1 = rows_of(v, c.B, S, 0, c.S1, kw), v2 = rows_of(v, c.B, S, c.S1, c.S2, kw);
  const Vec q2 = rows_of(q, c.B, c.T, r0, c.Tp, qw), do2 = rows_of(dout, c.B, c.T, r0, c.Tp, qw);
  auto Q = make(dt, {c.B, c.T, c.Hq, c.D}, q), Q2 = make(dt, {c.B, c.Tp, c.Hq, c.D}, q2);
  auto K1 = make(dt, {c.B, c.S1, c.Hkv, c.D}, k1), K2 = make(dt, {c.B, c.S2, c.Hkv, c.D}, k2);
  auto V1 = make(dt, {c.B, c.S1, c.Hkv, c.D}, v1), V2 = make(dt, {c.B, c.S2, c.Hkv, c.D}, v2);
  auto O = make(dt, {c.B, c.T, c.Hq, c.D}, Vec(q.size())),
       L = make(ldt, {c.B, c.Hq, c.T}, Vec(c.B * c.Hq * c.T));
  auto O2 = make(dt, {c.B, c.Tp, c.Hq, c.D}, Vec(q2.size()));
  auto L2 = make(ldt, {c.B, c.Hq, c.Tp}, Vec(c.B * c.Hq * c.Tp));
  loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2, Q, K1, V1, O, L, scale, 0, nullptr};
  env().host.check(att.api->forward(att.self, &f));
  f = {LOOM_ATTENTION_FWD_ARGS_SIZE_V2, Q2, K2, V2, O2, L2, scale, 0, nullptr};
  env().host.check(att.api->forward(att.self, &f));
  loom_attention_merge_args m{LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7, O, L, O2, L2, r0, nullptr};
  env().host.check(att.api->merge(att.self, &m));
  Grads r{get(O), get(L), {}, Vec(k.size()), Vec(k.size())};
  // backward: call 1 over every query, call 2 over the last Tp, with the merged out and lse
  const Vec o2 = rows_of(r.out, c.B, c.T, r0, c.Tp, qw);
  const Vec l2 = rows_of(r.lse, c.B * c.Hq, c.T, r0, c.Tp, 1);
  auto dO = make(dt, {c.B, c.T, c.Hq, c.D}, dout), dO2 = make(dt, {c.B, c.Tp, c.Hq, c.D}, do2);
  auto Om2 = make(dt, {c.B, c.Tp, c.Hq, c.D}, o2), Lm2 = make(ldt, {c.B, c.Hq, c.Tp}, l2);
  auto dQ = make(dt, {c.B, c.T, c.Hq, c.D}, Vec(q.size())),
       dQ2 = make(dt, {c.B, c.Tp, c.Hq, c.D}, Vec(q2.size()));
  auto dK1 = make(dt, {c.B, c.S1, c.Hkv, c.D}, Vec(k1.size())),
       dV1 = make(dt, {c.B, c.S1, c.Hkv, c.D}, Vec(k1.size()));
  auto dK2 = make(dt, {c.B, c.S2, c.Hkv, c.D}, Vec(k2.size())),
       dV2 = make(dt, {c.B, c.S2, c.Hkv, c.D}, Vec(k2.size()));
  const loom_attention_partial partial{
      {sizeof(loom_attention_partial), LOOM_EXT_ATTENTION_PARTIAL, LOOM_EXT_REQUIRED, nullptr}};
  loom_attention_bwd_args b{
      LOOM_ATTENTION_BWD_ARGS_SIZE_V2, dO, Q, K1, V1, O, L, dQ, dK1, dV1, scale, 0, &partial.base};
  env().host.check(att.api->backward(att.self, &b));
  b = {LOOM_ATTENTION_BWD_ARGS_SIZE_V2,
       dO2,
       Q2,
       K2,
       V2,
       Om2,
       Lm2,
       dQ2,
       dK2,
       dV2,
       scale,
       0,
       &partial.base};
  env().host.check(att.api->backward(att.self, &b));
  r.dq = get(dQ);
  const Vec dq2 = get(dQ2);
  for (int64_t bb = 0; bb < c.B; ++bb)
    for (int64_t i = 0; i < c.Tp * qw; ++i)
      r.dq[(bb * c.T + r0) * qw + i] += dq2[bb * c.Tp * qw + i];
  const Vec dk1 = get(dK1), dk2 = get(dK2), dv1 = get(dV1), dv2 = get(dV2);
  for (int64_t bb = 0; bb < c.B; ++bb) {
    std::copy_n(&dk1[bb * c.S1 * kw], c.S1 * kw, &r.dk[bb * S * kw]);
    std::copy_n(&dv1[bb * c.S1 * kw], c.S1 * kw, &r.dv[bb * S * kw]);
    std::copy_n(&dk2[bb * c.S2 * kw], c.S2 * kw, &r.dk[(bb * S + c.S1) * kw]);
    std::copy_n(&dv2[bb * c.S2 * kw], c.S2 * kw, &r.dv[(bb * S + c.S1) * kw]);
  }
  return r;
}

const Case kCases[] = {
    {"second call over every query", 2, 8, 8, 6, 5, 4, 4, 8},
    {"second call over the last 3 queries, GQA", 2, 8, 3, 8, 7, 4, 2, 8},
};

}  // namespace

TEST_CASE("partial attention: two calls merged equal the whole, forward and backward") {
  for (const char* name : {"reference", "flash-cpu"}) {
    const AttentionInstance att = attention_instance(name);
    REQUIRE(att.api->struct_size >= LOOM_ATTENTION_API_SIZE_V2_7);
    const bool has_merge = att.api->merge != nullptr;
    REQUIRE(has_merge);
    for (const Case& c : kCases)
      for (DLDataType dt : {loom_f64(), loom_f32()}) {
        const std::string plugin = name, what = c.what;
        CAPTURE(plugin);
        CAPTURE(what);
        CAPTURE(dt.bits);
        const int64_t S = c.S1 + c.S2;
        const Vec q = random_vec(c.B * c.T * c.Hq * c.D, 1), dout = random_vec(q.size(), 4);
        const Vec k = random_vec(c.B * S * c.Hkv * c.D, 2), v = random_vec(k.size(), 3);
        const Grads want = expected(c, q, k, v, dout), got = run(att, dt, c, q, k, v, dout);
        const double tol = dt.bits == 64 ? 1e-12 : 2e-5;
        check_rel(got.out, want.out, tol, "out");
        check_rel(got.lse, want.lse, tol, "lse");
        check_rel(got.dq, want.dq, tol, "dq");
        check_rel(got.dk, want.dk, tol, "dk");
        check_rel(got.dv, want.dv, tol, "dv");
      }
  }
}

TEST_CASE("partial attention: refusals name what is wrong") {
  const AttentionInstance flash = attention_instance("flash-cpu");
  const double scale = 0.5;
  auto Q = make(loom_f64(), {1, 4, 1, 4}, random_vec(16, 1));
  auto K = make(loom_f64(), {1, 4, 1, 4}, random_vec(16, 2));
  auto O = make(loom_f64(), {1, 4, 1, 4}, Vec(16)), dQ = make(loom_f64(), {1, 4, 1, 4}, Vec(16));
  auto dK = make(loom_f64(), {1, 4, 1, 4}, Vec(16)), dV = make(loom_f64(), {1, 4, 1, 4}, Vec(16));
  auto L32 = make(loom_f32(), {1, 1, 4}, Vec(4));
  const loom_attention_partial partial{
      {sizeof(loom_attention_partial), LOOM_EXT_ATTENTION_PARTIAL, LOOM_EXT_REQUIRED, nullptr}};
  // f64 data with an f32 lse: the merged lse cannot be recomputed, and f32 is too coarse
  loom_attention_bwd_args b{
      LOOM_ATTENTION_BWD_ARGS_SIZE_V2, O, Q, K, K, O, L32, dQ, dK, dV, scale, 0, &partial.base};
  const std::string why = loomtest::outcome(flash.api->backward(flash.self, &b)).message;
  CHECK(why.find("needs the merged lse, in f64 for f64 data") != std::string::npos);
  // merge: the part's rows must lie within out's
  auto P = make(loom_f64(), {1, 3, 1, 4}, Vec(12)), PL = make(loom_f32(), {1, 1, 3}, Vec(3));
  for (const char* name : {"reference", "flash-cpu"}) {
    const AttentionInstance att = attention_instance(name);
    loom_attention_merge_args m{LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7, O, L32, P, PL, 2, nullptr};
    const std::string w = loomtest::outcome(att.api->merge(att.self, &m)).message;
    CHECK_MESSAGE(w.find("rows [2, 5) outside out's 4") != std::string::npos, w);
  }
}
