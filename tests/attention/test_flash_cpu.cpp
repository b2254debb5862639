// attention/flash-cpu against attention/reference (which materialises the probabilities
// through backend/cpu's gemm and softmax): forward out and lse, backward dq, dk, dv on random
// inputs, causal and not, sliding windows, T < S and T = S, odd sizes, GQA, several tile
// sizes; the backward
// against central finite differences in f64; memory (nothing allocated through the backend,
// so a 4096 x 4096 forward leaves mem_peak where it was); bf16 and f16 storage; errors.
#include <algorithm>
#include <chrono>

#include "loom/cpp/half.hpp"  // the bf16/f16 rounding backend/cpu and flash-cpu use
#include "ops_support.hpp"

using namespace opstest;

namespace {

struct Att {
  const loom_attention_api* api;
  loom_attention* self;
};

Att reference() {
  static Att a = [] {
    auto r = env().host.load_attention("reference");
    return Att{r.api, r.self};
  }();
  return a;
}

// A flash-cpu instance per tile shape.
Att flash(int64_t bq = 64, int64_t bk = 64) {
  const AttentionInstance a = attention_instance(
      "flash-cpu", {{"block_q", std::to_string(bq)}, {"block_k", std::to_string(bk)}});
  return Att{a.api, a.self};
}

struct Case {
  int64_t B, T, S, Hq, Hkv, D;
  bool causal;
  int64_t window = 0;  // > 0: loom.attention-window/1 on the args' ext chain
};

struct Result {
  Vec out, lse, dq, dk, dv;
};

// Runs forward (and backward with dout) of `att` on the given values.
Result run(Att att, DLDataType dt, DLDataType lse_dt, const Case& c, const Vec& q, const Vec& k,
           const Vec& v, const Vec& dout, bool with_lse = true) {
  const double scale = 1.0 / std::sqrt((double)c.D);
  auto Q = make(dt, {c.B, c.T, c.Hq, c.D}, q), K = make(dt, {c.B, c.S, c.Hkv, c.D}, k);
  auto V = make(dt, {c.B, c.S, c.Hkv, c.D}, v),
       dO = make(dt, {c.B, c.T, c.Hq, c.D}, dout.empty() ? Vec(q.size()) : dout);
  loom::Tensor O(B(), dt, {c.B, c.T, c.Hq, c.D}), L(B(), lse_dt, {c.B, c.Hq, c.T});
  loom::Tensor dQ(B(), dt, {c.B, c.T, c.Hq, c.D}), dK(B(), dt, {c.B, c.S, c.Hkv, c.D});
  loom::Tensor dV(B(), dt, {c.B, c.S, c.Hkv, c.D});
  const loom_attention_window w{
      {sizeof(loom_attention_window), LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_REQUIRED, nullptr},
      c.window};
  const loom_ext* ext = c.window > 0 ? &w.base : nullptr;
  loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2, Q,     K,        V,  O,
                            with_lse ? L.get() : nullptr,    scale, c.causal, ext};
  env().host.check(att.api->forward(att.self, &f));
  Result r{get(O), with_lse ? get(L) : Vec{}, {}, {}, {}};
  if (dout.empty()) return r;
  loom_attention_bwd_args b{
      LOOM_ATTENTION_BWD_ARGS_SIZE_V2, dO, Q, K, V, O, L, dQ, dK, dV, scale, c.causal, ext};
  env().host.check(att.api->backward(att.self, &b));
  r.dq = get(dQ);
  r.dk = get(dK);
  r.dv = get(dV);
  return r;
}

void compare(DLDataType dt, DLDataType lse_dt, const Case& c, double tol, Att fl,
             bool with_lse = true) {
  CAPTURE(c.B);
  CAPTURE(c.T);
  CAPTURE(c.S);
  CAPTURE(c.Hq);
  CAPTURE(c.Hkv);
  CAPTURE(c.D);
  CAPTURE(c.causal);
  CAPTURE(c.window);
  const uint64_t seed = c.T * 131 + c.S * 7 + c.D + c.Hq;
  Vec q = random_vec(c.B * c.T * c.Hq * c.D, seed, -2, 2);
  Vec k = random_vec(c.B * c.S * c.Hkv * c.D, seed + 1, -2, 2);
  Vec v = random_vec(c.B * c.S * c.Hkv * c.D, seed + 2);
  Vec dout = random_vec(c.B * c.T * c.Hq * c.D, seed + 3);
  Result want = run(reference(), dt, lse_dt, c, q, k, v, dout);
  Result got = run(fl, dt, lse_dt, c, q, k, v, dout, with_lse);
  check_rel(got.out, want.out, tol, "out");
  if (with_lse) check_rel(got.lse, want.lse, loom_dtype_eq(lse_dt, loom_f32()) ? 1e-6 : tol, "lse");
  check_rel(got.dq, want.dq, tol, "dq");
  check_rel(got.dk, want.dk, tol, "dk");
  check_rel(got.dv, want.dv, tol, "dv");
}

const Case kCases[] = {
    {2, 16, 16, 4, 4, 8, true},
    {2, 16, 16, 4, 4, 8, false},  // T = S
    {1, 5, 40, 2, 2, 16, true},
    {1, 5, 40, 2, 2, 16, false},  // T < S (decode-like)
    {1, 1, 33, 2, 1, 8, true},    // one new token
    {2, 37, 53, 2, 2, 6, true},
    {2, 37, 53, 2, 2, 6, false},  // odd sizes
    {1, 37, 53, 2, 1, 64, true},
    {1, 37, 53, 2, 1, 64, false},
    {2, 24, 24, 8, 2, 8, true},
    {1, 19, 30, 8, 2, 8, false},    // GQA
    {1, 150, 150, 2, 1, 16, true},  // several 64-tiles
    // Sliding windows: of two keys, inside a tile, across tiles, T < S, GQA.
    {1, 20, 20, 2, 2, 8, true, 2},
    {2, 37, 53, 2, 2, 6, true, 4},
    {1, 150, 150, 2, 1, 16, true, 70},
    {1, 5, 40, 2, 2, 16, true, 9},
    {2, 24, 24, 8, 2, 8, true, 7},
};

}  // namespace

TEST_CASE("flash-cpu f64 matches attention/reference to 1e-12 (several tile shapes)") {
  for (auto [bq, bk] : {std::pair<int64_t, int64_t>{64, 64}, {7, 5}, {1, 16}, {16, 1}}) {
    CAPTURE(bq);
    CAPTURE(bk);
    Att fl = flash(bq, bk);
    for (const Case& c : kCases) compare(loom_f64(), loom_f64(), c, 1e-12, fl);
  }
}

TEST_CASE("flash-cpu f32 matches attention/reference to 1e-5") {
  Att fl = flash(), small = flash(8, 8);
  for (const Case& c : kCases) {
    compare(loom_f32(), loom_f32(), c, 1e-5, fl);
    compare(loom_f32(), loom_f32(), c, 1e-5, small);
  }
}

TEST_CASE("flash-cpu: f64 data with the model's f32 lse; forward with lse NULL") {
  Att fl = flash(8, 8);
  // Backward recomputes the lse in f64 rather than cap the gradients at f32 accuracy.
  for (const Case& c : kCases) compare(loom_f64(), loom_f32(), c, 1e-12, fl);
  const Case c{1, 9, 21, 4, 2, 8, true};
  Vec q = random_vec(9 * 4 * 8, 1), k = random_vec(21 * 2 * 8, 2), v = random_vec(21 * 2 * 8, 3);
  Result want = run(reference(), loom_f64(), loom_f64(), c, q, k, v, {});
  Result got = run(fl, loom_f64(), loom_f64(), c, q, k, v, {}, /*with_lse=*/false);
  check_rel(got.out, want.out, 1e-12, "out without lse");
}

TEST_CASE("flash-cpu backward matches central finite differences (f64)") {
  for (const Case& c : {Case{1, 3, 5, 4, 2, 4, true}, Case{1, 3, 5, 4, 2, 4, false},
                        Case{1, 3, 5, 4, 2, 4, true, 2}}) {
    CAPTURE(c.window);
    Att fl = flash(2, 2);
    Vec q = random_vec(3 * 4 * 4, 11, -2, 2), k = random_vec(5 * 2 * 4, 12, -2, 2);
    Vec v = random_vec(5 * 2 * 4, 13), w = random_vec(3 * 4 * 4, 14);
    Result r = run(fl, loom_f64(), loom_f64(), c, q, k, v, w);
    auto loss = [&] { return dot(run(fl, loom_f64(), loom_f64(), c, q, k, v, {}).out, w); };
    check_close(r.dq, fd_grad(q, loss), kFdRtol, kFdAtol, "dq vs finite differences");
    check_close(r.dk, fd_grad(k, loss), kFdRtol, kFdAtol, "dk vs finite differences");
    check_close(r.dv, fd_grad(v, loss), kFdRtol, kFdAtol, "dv vs finite differences");
  }
}

TEST_CASE("flash-cpu: a 4096 x 4096 forward allocates nothing through the backend") {
  const int64_t T = 4096, D = 64;
  auto Q = make(loom_f32(), {1, T, 1, D}, random_vec(T * D, 21));
  auto K = make(loom_f32(), {1, T, 1, D}, random_vec(T * D, 22));
  auto V = make(loom_f32(), {1, T, 1, D}, random_vec(T * D, 23));
  loom::Tensor O(B(), loom_f32(), {1, T, 1, D}), L(B(), loom_f32(), {1, 1, T});
  auto peak = [] {
    loom_backend_info info{};
    info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
    env().host.check(B().api()->get_info(B().self(), &info));
    return info.mem_peak;
  };
  const size_t before = peak();
  Att fl = flash();
  loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2, Q, K, V, O, L, 0.125, 1, nullptr};
  env().host.check(fl.api->forward(fl.self, &f));
  CHECK(peak() - before < (size_t)(T * T * 4));
  CHECK(peak() == before);
  // Row 0 sees only key 0: its output is v[0] exactly, its lse scale * q0.k0.
  Vec o = get(O), v = get(V), q = get(Q), k = get(K), l = get(L);
  for (int64_t d = 0; d < D; ++d) CHECK(o[d] == doctest::Approx(v[d]).epsilon(1e-6));
  CHECK(l[0] ==
        doctest::Approx(0.125 * dot(Vec(q.begin(), q.begin() + D), Vec(k.begin(), k.begin() + D)))
            .epsilon(1e-5));
  for (double x : o) REQUIRE(std::isfinite(x));
}

TEST_CASE("flash-cpu bf16 / f16 storage: f32 math on the rounded values") {
  // Round inputs through the 16-bit type, run flash-cpu on the 16-bit tensors and the
  // reference in f32 on the rounded values; the 16-bit output is within its own rounding.
  const Case c{2, 13, 21, 4, 2, 16, true};
  for (DLDataType dt : {loom_bf16(), loom_f16()}) {
    const bool bf = dt.code == kDLBfloat;
    auto rnd = [&](const Vec& x, std::vector<uint16_t>& bits) {
      Vec y(x.size());
      bits.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        bits[i] = bf ? loom::f32_to_bf16((float)x[i]) : loom::f32_to_f16((float)x[i]);
        y[i] = bf ? loom::bf16_to_f32(bits[i]) : loom::f16_to_f32(bits[i]);
      }
      return y;
    };
    std::vector<uint16_t> qb, kb, vb;
    Vec q = rnd(random_vec(2 * 13 * 4 * 16, 31), qb), k = rnd(random_vec(2 * 21 * 2 * 16, 32), kb);
    Vec v = rnd(random_vec(2 * 21 * 2 * 16, 33), vb);
    Result want = run(reference(), loom_f32(), loom_f32(), c, q, k, v, {});
    std::vector<uint16_t> ob(qb.size());
    std::vector<float> lse(2 * 4 * 13);
    int64_t qs[4] = {2, 13, 4, 16}, ks[4] = {2, 21, 2, 16}, ls[3] = {2, 4, 13};
    DLDevice cpu{kDLCPU, 0};
    DLTensor Q{qb.data(), cpu, 4, dt, qs, nullptr, 0}, K{kb.data(), cpu, 4, dt, ks, nullptr, 0};
    DLTensor V{vb.data(), cpu, 4, dt, ks, nullptr, 0}, O{ob.data(), cpu, 4, dt, qs, nullptr, 0};
    DLTensor L{lse.data(), cpu, 3, loom_f32(), ls, nullptr, 0};
    Att fl = flash(8, 8);
    loom_attention_fwd_args f{
        LOOM_ATTENTION_FWD_ARGS_SIZE_V2, &Q, &K, &V, &O, &L, 0.25, 1, nullptr};
    env().host.check(fl.api->forward(fl.self, &f));
    Vec got(ob.size());
    for (size_t i = 0; i < ob.size(); ++i)
      got[i] = bf ? loom::bf16_to_f32(ob[i]) : loom::f16_to_f32(ob[i]);
    check_rel(got, want.out, bf ? 8e-3 : 1e-3, bf ? "bf16 out" : "f16 out");
    check_rel(Vec(lse.begin(), lse.end()), want.lse, 1e-5, "lse");
  }
}

TEST_CASE("flash-cpu refuses tensors that are not on host memory, naming the device") {
  int64_t s[4] = {1, 2, 1, 4};
  float buf[8] = {};
  DLTensor q{buf, {kDLCPU, 0}, 4, loom_f32(), s, nullptr, 0};
  DLTensor gpu = q;
  gpu.device = {kDLCUDA, 0};
  Att fl = flash();
  loom_attention_fwd_args f{
      LOOM_ATTENTION_FWD_ARGS_SIZE_V2, &q, &gpu, &q, &q, nullptr, 1.0, 1, nullptr};
  loom_error* e = fl.api->forward(fl.self, &f);
  REQUIRE(e != nullptr);
  const std::string m = e->message;
  delete e;
  CHECK(m.find("k lives on cuda memory") != std::string::npos);
}

// Timing only (not run by ctest): loom-test-attention -ts='*bench*' -nv.
TEST_CASE("bench: flash-cpu vs reference, forward + backward" * doctest::skip()) {
  for (const Case& c : {Case{16, 128, 128, 6, 6, 32, true}, Case{4, 512, 512, 6, 6, 32, true}}) {
    Vec q = random_vec(c.B * c.T * c.Hq * c.D, 1), k = random_vec(c.B * c.S * c.Hkv * c.D, 2);
    Vec v = random_vec(c.B * c.S * c.Hkv * c.D, 3), w = random_vec(c.B * c.T * c.Hq * c.D, 4);
    for (Att a : {reference(), flash()}) {
      run(a, loom_f32(), loom_f32(), c, q, k, v, w);  // warm-up
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 5; ++i) run(a, loom_f32(), loom_f32(), c, q, k, v, w);
      std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
      MESSAGE((a.api == reference().api ? "reference" : "flash-cpu")
              << " T=" << c.T << ": " << dt.count() / 5 << " ms");
    }
  }
}
