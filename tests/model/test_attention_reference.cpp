// attention/reference against a naive float64 attention written here (forward, lse), and its
// backward against central finite differences of its own forward; MHA and GQA, causal and
// not, T < S (queries are the last T of S positions).
#include <cmath>
#include <random>

#include "model_test_util.hpp"

using namespace modeltest;

namespace {

struct Dims {
  int64_t B, T, S, Hq, Hkv, D;
};

// out(B,T,Hq,D) and lse(B,Hq,T) in double, straight from the definition.
void naive_attention(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, double scale, bool causal,
                     std::vector<double>& out, std::vector<double>& lse) {
  out.assign(d.B * d.T * d.Hq * d.D, 0.0);
  lse.assign(d.B * d.Hq * d.T, 0.0);
  const int64_t G = d.Hq / d.Hkv;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hq; ++h)
      for (int64_t t = 0; t < d.T; ++t) {
        const int64_t g = h / G;
        std::vector<double> s(d.S, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < d.S; ++j) {
          if (causal && j > t + d.S - d.T) continue;
          double acc = 0;
          for (int64_t e = 0; e < d.D; ++e)
            acc +=
                q[((b * d.T + t) * d.Hq + h) * d.D + e] * k[((b * d.S + j) * d.Hkv + g) * d.D + e];
          s[j] = acc * scale;
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < d.S; ++j) z += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
        lse[(b * d.Hq + h) * d.T + t] = mx + std::log(z);
        for (int64_t j = 0; j < d.S; ++j) {
          if (std::isinf(s[j])) continue;
          const double p = std::exp(s[j] - mx) / z;
          for (int64_t e = 0; e < d.D; ++e)
            out[((b * d.T + t) * d.Hq + h) * d.D + e] +=
                p * v[((b * d.S + j) * d.Hkv + g) * d.D + e];
        }
      }
}

std::vector<double> randn(int64_t n, std::mt19937& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// The forward arguments of out = attention(q, k, v) scaled by `scale` (lse may be nullptr).
loom_attention_fwd_args fwd_args(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                 DLTensor* out, DLTensor* lse, double scale, int causal) {
  loom_attention_fwd_args f{};
  f.struct_size = LOOM_ATTENTION_FWD_ARGS_SIZE_V2;
  f.q = q, f.k = k, f.v = v, f.out = out, f.lse = lse;
  f.scale = scale, f.causal = causal;
  return f;
}

struct Case {
  Dims d;
  bool causal;
};

void run_case(Host& h, const Case& c, DLDataType dt, double fwd_tol, bool finite_diff) {
  const Dims& d = c.d;
  CAPTURE(d.B);
  CAPTURE(d.T);
  CAPTURE(d.S);
  CAPTURE(d.Hq);
  CAPTURE(d.Hkv);
  CAPTURE(c.causal);
  std::mt19937 rng(42);
  const auto qh = randn(d.B * d.T * d.Hq * d.D, rng), kh = randn(d.B * d.S * d.Hkv * d.D, rng);
  const auto vh = randn(d.B * d.S * d.Hkv * d.D, rng), wh = randn(d.B * d.T * d.Hq * d.D, rng);
  DevTensor q(h.be, dt, {d.B, d.T, d.Hq, d.D}), k(h.be, dt, {d.B, d.S, d.Hkv, d.D});
  DevTensor v(h.be, dt, {d.B, d.S, d.Hkv, d.D}), out(h.be, dt, {d.B, d.T, d.Hq, d.D});
  DevTensor lse(h.be, loom_f32(), {d.B, d.Hq, d.T});
  q.set_host(qh);
  k.set_host(kh);
  v.set_host(vh);
  const double scale = 1.0 / std::sqrt((double)d.D);

  loom_attention_fwd_args f = fwd_args(q, k, v, out, lse, scale, c.causal);
  h.th.check(h.attn.api->forward(h.attn.self, &f));
  std::vector<double> ref_out, ref_lse;
  naive_attention(d, qh, kh, vh, scale, c.causal, ref_out, ref_lse);
  const auto got = out.get_host(), got_lse = lse.get_host();
  double err = 0, lerr = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(got[i] - ref_out[i]));
  for (size_t i = 0; i < got_lse.size(); ++i)
    lerr = std::max(lerr, std::fabs(got_lse[i] - ref_lse[i]));
  CHECK(err < fwd_tol);
  CHECK(lerr < 1e-5);  // lse is f32

  // backward with dout = w: the gradient of L = sum(out * w)
  DevTensor dout(h.be, dt, {d.B, d.T, d.Hq, d.D}), dq(h.be, dt, {d.B, d.T, d.Hq, d.D});
  DevTensor dk(h.be, dt, {d.B, d.S, d.Hkv, d.D}), dv(h.be, dt, {d.B, d.S, d.Hkv, d.D});
  dout.set_host(wh);
  dk.set_host(std::vector<double>(loom_tensor_numel(dk), 7.0));  // must be overwritten (=)
  loom_attention_bwd_args b{};
  b.struct_size = LOOM_ATTENTION_BWD_ARGS_SIZE_V2;
  b.dout = dout;
  b.q = q;
  b.k = k;
  b.v = v;
  b.out = out;
  b.lse = lse;
  b.dq = dq;
  b.dk = dk;
  b.dv = dv;
  b.scale = scale;
  b.causal = c.causal;
  h.th.check(h.attn.api->backward(h.attn.self, &b));
  const std::vector<double> grads[3] = {dq.get_host(), dk.get_host(), dv.get_host()};

  // L(q,k,v) with the naive forward, for finite differences in double
  auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk,
                  const std::vector<double>& vv) {
    std::vector<double> o, l;
    naive_attention(d, qq, kk, vv, scale, c.causal, o, l);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * wh[i];
    return s;
  };
  const double eps = 1e-5;
  const double tol = finite_diff ? 1e-7 : 2e-4;  // f64 vs central differences; f32 looser
  const char* names[3] = {"dq", "dk", "dv"};
  for (int which = 0; which < 3; ++which) {
    std::vector<double> in[3] = {qh, kh, vh};
    double worst = 0, scale_g = max_abs(grads[which]);
    for (size_t i = 0; i < in[which].size(); ++i) {
      const double x0 = in[which][i];
      in[which][i] = x0 + eps;
      const double lp = loss(in[0], in[1], in[2]);
      in[which][i] = x0 - eps;
      const double lm = loss(in[0], in[1], in[2]);
      in[which][i] = x0;
      worst = std::max(worst, std::fabs((lp - lm) / (2 * eps) - grads[which][i]));
    }
    INFO(names[which] << " max |analytic - numeric| = " << worst << " (max |g| " << scale_g << ")");
    CHECK(worst <= tol * std::max(1.0, scale_g));
  }
}

const Case kCases[] = {
    {{2, 5, 5, 2, 2, 8}, true},    // MHA, causal, T = S
    {{2, 3, 6, 4, 2, 8}, true},    // GQA 4/2, causal, queries are the last 3 of 6
    {{2, 3, 6, 4, 2, 8}, false},   // GQA, no mask
    {{1, 4, 7, 4, 1, 4}, true},    // MQA (one kv head)
    {{2, 6, 6, 3, 3, 16}, false},  // MHA, no mask
};

}  // namespace

TEST_CASE("attention/reference f64: forward = naive attention, backward = finite differences") {
  Host h;
  for (const Case& c : kCases) run_case(h, c, loom_f64(), 1e-12, true);
}

TEST_CASE("attention/reference f32: forward and backward within f32 tolerance") {
  Host h;
  for (const Case& c : kCases) run_case(h, c, loom_f32(), 2e-6, false);
}

TEST_CASE("attention/reference: generation call without lse, then a larger batch") {
  Host h;
  // lse = NULL (generation) uses the plugin's own workspace; the workspace then grows.
  Case small{{1, 1, 9, 2, 1, 4}, true}, big{{3, 8, 8, 4, 4, 8}, true};
  for (const Case* c : {&small, &big}) {
    const Dims& d = c->d;
    std::mt19937 rng(7);
    const auto qh = randn(d.B * d.T * d.Hq * d.D, rng), kh = randn(d.B * d.S * d.Hkv * d.D, rng);
    const auto vh = randn(d.B * d.S * d.Hkv * d.D, rng);
    DevTensor q(h.be, loom_f64(), {d.B, d.T, d.Hq, d.D}),
        k(h.be, loom_f64(), {d.B, d.S, d.Hkv, d.D});
    DevTensor v(h.be, loom_f64(), {d.B, d.S, d.Hkv, d.D}),
        out(h.be, loom_f64(), {d.B, d.T, d.Hq, d.D});
    q.set_host(qh);
    k.set_host(kh);
    v.set_host(vh);
    loom_attention_fwd_args f = fwd_args(q, k, v, out, nullptr, 0.3, 1);
    h.th.check(h.attn.api->forward(h.attn.self, &f));
    std::vector<double> ro, rl;
    naive_attention(d, qh, kh, vh, 0.3, true, ro, rl);
    const auto got = out.get_host();
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(ro[i]).epsilon(1e-12));
  }
}

TEST_CASE("attention/reference: bad shapes are refused with a message") {
  Host h;
  DevTensor q(h.be, loom_f32(), {1, 2, 3, 4}), k(h.be, loom_f32(), {1, 2, 2, 4});
  DevTensor out(h.be, loom_f32(), {1, 2, 3, 4});
  loom_attention_fwd_args f = fwd_args(q, k, k, out, nullptr, 1, 0);
  loom_error* e = h.attn.api->forward(h.attn.self, &f);
  REQUIRE(e != nullptr);
  CHECK(std::string(e->message).find("multiple of Hkv") != std::string::npos);
  delete e;
}
