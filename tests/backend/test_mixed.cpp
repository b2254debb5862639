// Mixed precision (backend.h, ABI 1.1): every op with bf16 (and, for a few, f16) activations
// and parameter values, f32 parameter gradients, statistics and losses, against the same op
// in f32 on the same inputs. The inputs are rounded to the 16-bit dtype first, so both runs
// see identical numbers: the f32 path (tested against float64 and finite differences in the
// other files) is the independent reference.
//
// Tolerances: a 16-bit output is the f32 result rounded once (half an ulp: 2^-9 relative in
// bf16, 2^-12 in f16), so 1e-2 of the tensor's max |value| passes with margin yet catches
// a wrong dtype, scale, or a kernel that rounds intermediates. An f32 output of a mixed call
// (dweight, mean/rstd, losses) is the f32 computation itself: it must agree to 1e-5.
#include <algorithm>

#include "gemm_args.hpp"
#include "ops_support.hpp"

using namespace opstest;

namespace {

const DLDataType kF32 = loom_f32();

// The shared helpers under this file's short names (f32, bf16, f16 here).
loom::Tensor T(DLDataType dt, const std::vector<int64_t>& shape, const Vec& vals) {
  return make_as(dt, shape, vals);
}
Vec G(const loom::Tensor& t) { return get_as(t); }
// vals rounded to dt (to nearest even): the numbers both runs of a comparison share.
Vec R(DLDataType dt, const Vec& vals) {
  return G(T(dt, {static_cast<int64_t>(vals.size())}, vals));
}
Vec rnd(DLDataType dt, size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return R(dt, random_vec(n, seed, lo, hi));
}

// max |got - want| <= rel * max |want|, naming the worst element when it fails.
void check_rel_at(const Vec& got, const Vec& want, double rel, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(),
                  what << ": size " << got.size() << " vs " << want.size());
  double scale = 0, err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    double e = std::fabs(got[i] - want[i]);
    if (!(e <= err)) {  // also catches NaN
      err = e;
      worst = i;
    }
  }
  CHECK_MESSAGE(err <= rel * scale, what << ": element " << worst << " is " << got[worst]
                                         << ", expected " << want[worst] << " (max |want| " << scale
                                         << ")");
}
constexpr double kHalfRel = 1e-2, kF32Rel = 1e-5;

const DLDataType kHalves[] = {loom_bf16(), loom_f16()};
const char* name_of(DLDataType dt) { return dt.code == kDLBfloat ? "bf16" : "f16"; }

using loomtest::gemm_args;

}  // namespace

TEST_CASE("mixed gemm: bf16/f16 operands, C in the same dtype or f32 (main grad, beta = 1)") {
  const int64_t m = 7, n = 9, k = 11;
  for (DLDataType h : kHalves) {
    CAPTURE(name_of(h));
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Vec a = rnd(h, m * k, 1), b = rnd(h, k * n, 2), c0 = rnd(h, m * n, 3);
        // the f32 reference: C = A B + beta C0
        auto run = [&](DLDataType ab, DLDataType cd, double beta) {
          auto A = T(ab, {m * k}, a), Bm = T(ab, {k * n}, b), C = T(cd, {m, n}, c0);
          loom_gemm_args g = gemm_args(ta, tb, m, n, k, beta, A.get(), Bm.get(), C.get());
          B().call(&loom_ops::gemm, &g);
          return G(C);
        };
        for (double beta : {0.0, 1.0}) {
          Vec ref = run(kF32, kF32, beta);
          check_rel_at(run(h, h, beta), ref, kHalfRel, "gemm, C 16-bit");
          check_rel_at(run(h, kF32, beta), ref, kF32Rel, "gemm, C f32");
        }
      }
  }
}

TEST_CASE("mixed gemm: batched per-head slices with offsets (the attention plugin's calls)") {
  // q (T, H*D) and k (S, H*D) heads: S_h = q_h k_h^T for h = 1 of 2, 3 batch items
  const int64_t Bt = 3, Tn = 4, H = 2, D = 5;
  const DLDataType h = loom_bf16();
  Vec q = rnd(h, Bt * Tn * H * D, 4), kk = rnd(h, Bt * Tn * H * D, 5);
  auto run = [&](DLDataType dt) {
    auto Q = T(dt, {Bt * Tn * H * D}, q), K = T(dt, {Bt * Tn * H * D}, kk);
    auto P = T(dt, {Bt, Tn, Tn}, Vec(Bt * Tn * Tn, 0.5));
    loom_gemm_args g = gemm_args(false, true, Tn, Tn, D, 0.0, Q.get(), K.get(), P.get());
    g.lda = g.ldb = H * D;
    g.offset_a = g.offset_b = D;  // head 1
    g.stride_a = g.stride_b = Tn * H * D;
    g.stride_c = Tn * Tn;
    g.batch = Bt;
    B().call(&loom_ops::gemm, &g);
    return G(P);
  };
  check_rel_at(run(h), run(kF32), kHalfRel, "batched gemm");
}

TEST_CASE("mixed bias_add (bf16) and bias_backward (f32 dbias += bf16 dout)") {
  const int64_t N = 6, C = 70;  // C > one 64-column block
  const DLDataType h = loom_bf16();
  Vec x = rnd(h, N * C, 6), bias = rnd(h, C, 7), db0 = random_vec(C, 8);
  auto add = [&](DLDataType dt) {
    auto X = T(dt, {N, C}, x), Bb = T(dt, {C}, bias);
    loom::bias_add(B(), X.get(), (const DLTensor*)Bb.get());
    return G(X);
  };
  check_rel_at(add(h), add(kF32), kHalfRel, "bias_add");
  auto back = [&](DLDataType dt) {
    auto D = T(dt, {N, C}, x), Db = T(kF32, {C}, db0);
    loom::bias_backward(B(), Db.get(), (const DLTensor*)D.get());
    return G(Db);
  };
  check_rel_at(back(h), back(kF32), kF32Rel, "bias_backward");
}

TEST_CASE("mixed add, axpby, sum_squares on bf16") {
  const int64_t n = 1000;
  const DLDataType h = loom_bf16();
  Vec a = rnd(h, n, 9), b = rnd(h, n, 10);
  auto add = [&](DLDataType dt) {
    auto A = T(dt, {n}, a), Bb = T(dt, {n}, b);
    B().call(&loom_ops::add, A.get(), (const DLTensor*)A.get(), (const DLTensor*)Bb.get());
    return G(A);
  };
  check_rel_at(add(h), add(kF32), kHalfRel, "add in place");
  auto axpby = [&](DLDataType dt) {
    auto X = T(dt, {n}, a), Y = T(dt, {n}, b);
    B().call(&loom_ops::axpby, Y.get(), 0.5, (const DLTensor*)X.get(), -2.0);
    return G(Y);
  };
  check_rel_at(axpby(h), axpby(kF32), kHalfRel, "axpby");
  double ss = 0, want = 0;
  auto X = T(h, {n}, a);
  ss = loom::sum_squares(B(), (const DLTensor*)X.get());
  for (double v : a) want += v * v;
  CHECK(ss == doctest::Approx(want).epsilon(1e-6));
}

TEST_CASE("mixed embedding: bf16 table -> bf16 rows; f32 dtable += bf16 dout") {
  const int64_t V = 10, C = 12, N = 7;
  const DLDataType h = loom_bf16();
  std::vector<int32_t> ids = {3, 1, 3, 9, 0, 3, 1};  // repeats accumulate
  Vec table = rnd(h, V * C, 11), out0 = rnd(h, N * C, 12), dt0 = random_vec(V * C, 13);
  auto I = make_i32({N}, ids);
  for (int acc = 0; acc < 2; ++acc) {
    auto fwd = [&](DLDataType dt) {
      auto Tb = T(dt, {V, C}, table), O = T(dt, {N, C}, out0);
      loom::embedding_forward(B(), O.get(), (const DLTensor*)I.get(), (const DLTensor*)Tb.get(),
                              acc);
      return G(O);
    };
    check_rel_at(fwd(h), fwd(kF32), kHalfRel, "embedding_forward");
  }
  auto bwd = [&](DLDataType dt) {
    auto D = T(dt, {N, C}, out0), Dt = T(kF32, {V, C}, dt0);
    loom::embedding_backward(B(), Dt.get(), (const DLTensor*)I.get(), (const DLTensor*)D.get());
    return G(Dt);
  };
  check_rel_at(bwd(h), bwd(kF32), kF32Rel, "embedding_backward");
}

TEST_CASE("mixed layernorm: out/dinp 16-bit, mean/rstd f32, dweight/dbias f32 +=") {
  const int64_t N = 5, C = 80;
  for (DLDataType h : kHalves) {
    CAPTURE(name_of(h));
    Vec x = rnd(h, N * C, 14, -2, 3), w = rnd(h, C, 15), b = rnd(h, C, 16);
    Vec g = rnd(h, N * C, 17), dw0 = random_vec(C, 18), db0 = random_vec(C, 19);
    struct Out {
      Vec y, mean, rstd, dx, dw, db;
    };
    auto run = [&](DLDataType dt) {
      auto X = T(dt, {N, C}, x), W = T(dt, {C}, w), Bb = T(dt, {C}, b), Gd = T(dt, {N, C}, g);
      loom::Tensor Y(B(), dt, {N, C}), M(B(), kF32, {N}), Rs(B(), kF32, {N});
      loom::layernorm_forward(B(), Y.get(), M.get(), Rs.get(), (const DLTensor*)X.get(),
                              (const DLTensor*)W.get(), (const DLTensor*)Bb.get(), 1e-5);
      auto Dw = T(kF32, {C}, dw0), Db = T(kF32, {C}, db0);
      // dinp written over dout (aliasing allowed)
      loom::layernorm_backward(B(), Gd.get(), Dw.get(), Db.get(), (const DLTensor*)Gd.get(),
                               (const DLTensor*)X.get(), (const DLTensor*)W.get(),
                               (const DLTensor*)M.get(), (const DLTensor*)Rs.get());
      return Out{G(Y), G(M), G(Rs), G(Gd), G(Dw), G(Db)};
    };
    Out got = run(h), ref = run(kF32);
    check_rel_at(got.y, ref.y, kHalfRel, "layernorm out");
    check_rel_at(got.mean, ref.mean, kF32Rel, "layernorm mean");
    check_rel_at(got.rstd, ref.rstd, kF32Rel, "layernorm rstd");
    check_rel_at(got.dx, ref.dx, kHalfRel, "layernorm dinp");
    check_rel_at(got.dw, ref.dw, kF32Rel, "layernorm dweight");
    check_rel_at(got.db, ref.db, kF32Rel, "layernorm dbias");
  }
}

TEST_CASE("mixed rmsnorm: bf16 out/dinp, f32 rstd and dweight +=") {
  const int64_t N = 4, C = 33;
  const DLDataType h = loom_bf16();
  Vec x = rnd(h, N * C, 20), w = rnd(h, C, 21), g = rnd(h, N * C, 22), dw0 = random_vec(C, 23);
  auto run = [&](DLDataType dt, Vec* rstd, Vec* dx, Vec* dw) {
    auto X = T(dt, {N, C}, x), W = T(dt, {C}, w), Gd = T(dt, {N, C}, g);
    loom::Tensor Y(B(), dt, {N, C}), Rs(B(), kF32, {N}), Dx(B(), dt, {N, C});
    loom::rmsnorm_forward(B(), Y.get(), Rs.get(), (const DLTensor*)X.get(),
                          (const DLTensor*)W.get(), 1e-5);
    auto Dw = T(kF32, {C}, dw0);
    loom::rmsnorm_backward(B(), Dx.get(), Dw.get(), (const DLTensor*)Gd.get(),
                           (const DLTensor*)X.get(), (const DLTensor*)W.get(),
                           (const DLTensor*)Rs.get());
    *rstd = G(Rs);
    *dx = G(Dx);
    *dw = G(Dw);
    return G(Y);
  };
  Vec r1, r2, dx1, dx2, dw1, dw2;
  check_rel_at(run(h, &r1, &dx1, &dw1), run(kF32, &r2, &dx2, &dw2), kHalfRel, "rmsnorm out");
  check_rel_at(r1, r2, kF32Rel, "rmsnorm rstd");
  check_rel_at(dx1, dx2, kHalfRel, "rmsnorm dinp");
  check_rel_at(dw1, dw2, kF32Rel, "rmsnorm dweight");
}

TEST_CASE("mixed GELU and SwiGLU forward/backward") {
  const int64_t N = 6, H = 20;
  for (DLDataType h : kHalves) {
    CAPTURE(name_of(h));
    Vec x = rnd(h, N * 2 * H, 24, -4, 4), d = rnd(h, N * 2 * H, 25), dh = rnd(h, N * H, 26);
    auto gelu = [&](DLDataType dt, Vec* dx) {
      auto X = T(dt, {N, 2 * H}, x), D = T(dt, {N, 2 * H}, d);
      loom::Tensor Y(B(), dt, {N, 2 * H});
      loom::act_forward(B(), LOOM_ACT_GELU_TANH, Y.get(), (const DLTensor*)X.get());
      loom::act_backward(B(), LOOM_ACT_GELU_TANH, D.get(), (const DLTensor*)X.get(),
                         (const DLTensor*)D.get());
      *dx = G(D);
      return G(Y);
    };
    Vec dx1, dx2;
    check_rel_at(gelu(h, &dx1), gelu(kF32, &dx2), kHalfRel, "gelu out");
    check_rel_at(dx1, dx2, kHalfRel, "gelu dinp");
    auto swiglu = [&](DLDataType dt, Vec* dx) {
      auto X = T(dt, {N, 2 * H}, x), D = T(dt, {N, H}, dh);
      loom::Tensor Y(B(), dt, {N, H}), Dx(B(), dt, {N, 2 * H});
      loom::act_forward(B(), LOOM_ACT_SWIGLU, Y.get(), (const DLTensor*)X.get());
      loom::act_backward(B(), LOOM_ACT_SWIGLU, Dx.get(), (const DLTensor*)X.get(),
                         (const DLTensor*)D.get());
      *dx = G(Dx);
      return G(Y);
    };
    check_rel_at(swiglu(h, &dx1), swiglu(kF32, &dx2), kHalfRel, "swiglu out");
    check_rel_at(dx1, dx2, kHalfRel, "swiglu dinp");
  }
}

TEST_CASE("mixed softmax (bf16 scores, f32 lse, causal) and its backward; RoPE") {
  const int64_t Bt = 3, Tq = 4, Tk = 6;
  const DLDataType h = loom_bf16();
  Vec s = rnd(h, Bt * Tq * Tk, 27, -3, 3), dp = rnd(h, Bt * Tq * Tk, 28);
  auto run = [&](DLDataType dt, Vec* lse, Vec* ds) {
    auto S = T(dt, {Bt, Tq, Tk}, s), Dp = T(dt, {Bt, Tq, Tk}, dp);
    loom::Tensor L(B(), kF32, {Bt, Tq});
    loom::softmax_forward(B(), S.get(), L.get(), 0.7, 1);
    loom::softmax_backward(B(), Dp.get(), (const DLTensor*)S.get(), (const DLTensor*)Dp.get(), 0.7);
    *lse = G(L);
    *ds = G(Dp);
    return G(S);
  };
  Vec l1, l2, d1, d2;
  check_rel_at(run(h, &l1, &d1), run(kF32, &l2, &d2), kHalfRel, "softmax probabilities");
  check_rel_at(l1, l2, kF32Rel, "softmax lse");
  check_rel_at(d1, d2, kHalfRel, "softmax_backward");

  const int64_t Bs = 2, Tn = 5, H = 3, D = 8;
  Vec x = rnd(h, Bs * Tn * H * D, 29);
  for (int back = 0; back < 2; ++back) {
    auto rope = [&](DLDataType dt) {
      auto X = T(dt, {Bs, Tn, H, D}, x);
      (back ? loom::rope_backward : loom::rope_forward)(B(), X.get(), int64_t{3}, 10000.0, nullptr);
      return G(X);
    };
    check_rel_at(rope(h), rope(kF32), kHalfRel, back ? "rope_backward" : "rope_forward");
  }
}

TEST_CASE("mixed softmax_cross_entropy: bf16 logits, f32 losses, bf16 dlogits in place") {
  const int64_t N = 5, V = 50;
  for (DLDataType h : kHalves) {
    CAPTURE(name_of(h));
    Vec x = rnd(h, N * V, 30, -4, 4);
    std::vector<int32_t> t = {3, -1, 49, 0, 17};
    auto Tg = make_i32({N}, t);
    auto run = [&](DLDataType dt, Vec* dl) {
      auto X = T(dt, {N, V}, x);
      loom::Tensor L(B(), kF32, {N});
      loom::softmax_cross_entropy(B(), L.get(), X.get(), (const DLTensor*)X.get(),
                                  (const DLTensor*)Tg.get(), 0.25);
      *dl = G(X);
      return G(L);
    };
    Vec d1, d2;
    check_rel_at(run(h, &d1), run(kF32, &d2), kF32Rel, "cross-entropy losses");
    check_rel_at(d1, d2, kHalfRel, "cross-entropy dlogits");
  }
}

TEST_CASE("mixed vocab_ce_stats (f32 stats) and vocab_ce_backward (f32 lse, bf16 dlogits)") {
  const int64_t N = 4, V = 30, start = 20;
  const DLDataType h = loom_bf16();
  Vec x = rnd(h, N * V, 31, -3, 3), lse = random_vec(N, 32, 3, 4);
  std::vector<int32_t> t = {25, 5, -1, 49};  // in this slice, before it, ignored, in it
  auto Tg = make_i32({N}, t);
  auto run = [&](DLDataType dt, Vec* dl) {
    auto X = T(dt, {N, V}, x), L = T(kF32, {N}, lse);
    loom::Tensor S(B(), kF32, {N, 3});
    loom::vocab_ce_stats(B(), S.get(), (const DLTensor*)X.get(), (const DLTensor*)Tg.get(), start);
    loom::vocab_ce_backward(B(), X.get(), (const DLTensor*)X.get(), (const DLTensor*)Tg.get(),
                            start, (const DLTensor*)L.get(), 0.5);
    *dl = G(X);
    return G(S);
  };
  Vec d1, d2;
  check_rel_at(run(h, &d1), run(kF32, &d2), kF32Rel, "vocab_ce_stats");
  check_rel_at(d1, d2, kHalfRel, "vocab_ce_backward");
}

TEST_CASE("mixed precision: unsupported dtype combinations are refused, naming the dtypes") {
  const DLDataType bf = loom_bf16(), f16 = loom_f16();
  auto X = T(bf, {2, 4}, Vec(8, 0.5)), Y = T(f16, {2, 4}, Vec(8, 0.5));
  auto X64 = make64({2, 4}, Vec(8, 0.5));
  expect_error([&] { B().call(&loom_ops::add, X.get(), (const DLTensor*)X.get(), Y.get()); },
               LOOM_ERR_INVALID_ARGUMENT, "is f16 but");
  expect_error([&] { B().call(&loom_ops::add, X.get(), (const DLTensor*)X.get(), X64.get()); },
               LOOM_ERR_INVALID_ARGUMENT, "is f64");
  auto W = T(bf, {4}, Vec(4, 1.0));
  loom::Tensor M(B(), bf, {2}), Rs(B(), kF32, {2}), O(B(), bf, {2, 4});
  expect_error(
      [&] {
        loom::layernorm_forward(B(), O.get(), M.get(), Rs.get(), (const DLTensor*)X.get(),
                                (const DLTensor*)W.get(), nullptr, 1e-5);
      },
      LOOM_ERR_INVALID_ARGUMENT, "mean is bf16");
  auto F = T(kF32, {4, 2}, Vec(8, 0.5));
  loom::Tensor C(B(), bf, {2, 2});
  loom_gemm_args g = gemm_args(false, false, 2, 2, 4, 0.0, X.get(), F.get(), C.get());
  expect_error([&] { B().call(&loom_ops::gemm, &g); }, LOOM_ERR_INVALID_ARGUMENT,
               "a is bf16, b f32, c bf16");
}
