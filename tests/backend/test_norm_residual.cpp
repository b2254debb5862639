// loom.norm-residual/1 (ABI 2.29) on backend/cpu: a norm carrying the residual add gives, to
// the bit, what the add op and the plain norm give (forward: the sum and its norm; backward:
// the residual plus the plain input gradient, the weight and bias gradients), for LayerNorm
// with and without bias and RMSNorm in f64, f32, bf16 and f16, with the aliasing a block uses
// (the sum over inp, dinp over the residual). The instance lends it; bad extensions are
// refused with the reason.
#include "loom/cpp/norm_residual.hpp"
#include "ops_support.hpp"

using namespace opstest;

namespace {

constexpr double kEps = 1e-5;

struct Case {
  DLDataType dt;
  loom_norm_kind kind;
  bool bias;
};
std::string name(const Case& k) {
  return loom::dtype_str(k.dt) + (k.kind == LOOM_NORM_RMS ? " rmsnorm" : " layernorm") +
         (k.bias ? " with bias" : "");
}
// Statistics and parameter gradients: f64 in an f64 run, else f32 (backend.h).
DLDataType wide(DLDataType dt) { return loom_dtype_eq(dt, loom_f64()) ? dt : loom_f32(); }

loom_norm_fwd_args fwd(const Case& k, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                       const DLTensor* inp, const DLTensor* w, const DLTensor* b) {
  return {LOOM_NORM_FWD_ARGS_SIZE_V2,
          k.kind,
          out,
          k.kind == LOOM_NORM_LAYER ? mean : nullptr,
          rstd,
          inp,
          w,
          k.bias ? b : nullptr,
          kEps,
          nullptr};
}

void check_same(const Vec& got, const Vec& want, const std::string& what) {
  check_close(got, want, 0.0, 0.0, what);
}

// sum = inp + residual written over inp, then the norm: against the add op and the plain call.
void check_forward(const Case& k, int64_t N, int64_t C) {
  const Vec x = random_vec(N * C, 1, -2, 2), r = random_vec(N * C, 2), w = random_vec(C, 3),
            b = random_vec(C, 4);
  const DLDataType s = wide(k.dt);
  auto W = make_as(k.dt, {C}, w), Bb = make_as(k.dt, {C}, b);
  auto X1 = make_as(k.dt, {N, C}, x), R1 = make_as(k.dt, {N, C}, r);
  loom::Tensor O1(B(), k.dt, {N, C}), M1(B(), s, {N}), S1(B(), s, {N});
  B().call(&loom_ops::add, X1.get(), (const DLTensor*)X1.get(), (const DLTensor*)R1.get());
  const loom_norm_fwd_args a1 = fwd(k, O1.get(), M1.get(), S1.get(), X1.get(), W.get(), Bb.get());
  B().call(&loom_ops::norm_forward, &a1);

  auto X2 = make_as(k.dt, {N, C}, x), R2 = make_as(k.dt, {N, C}, r);
  loom::Tensor O2(B(), k.dt, {N, C}), M2(B(), s, {N}), S2(B(), s, {N});
  const loom_norm_residual e = loom::norm_residual(R2.get(), X2.get());
  loom_norm_fwd_args a2 = fwd(k, O2.get(), M2.get(), S2.get(), X2.get(), W.get(), Bb.get());
  a2.ext = &e.base;
  B().call(&loom_ops::norm_forward, &a2);
  check_same(get_as(X2), get_as(X1), name(k) + ": sum");
  check_same(get_as(O2), get_as(O1), name(k) + ": out");
  check_same(get(S2), get(S1), name(k) + ": rstd");
  if (k.kind == LOOM_NORM_LAYER) check_same(get(M2), get(M1), name(k) + ": mean");
  if (loom_dtype_eq(k.dt, loom_f64())) {  // the sum is the exact double sum
    Vec want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] + r[i];
    check_same(get(X2), want, name(k) + ": sum in f64");
  }
}

// dres += the norm's input gradient, written over dres: against the plain call into a
// scratch and the add op; dweight and dbias accumulate the same.
void check_backward(const Case& k, int64_t N, int64_t C) {
  const Vec x = random_vec(N * C, 5, -2, 2), g = random_vec(N * C, 6), d = random_vec(N * C, 7),
            w = random_vec(C, 8), b = random_vec(C, 9), gw0 = random_vec(C, 10),
            gb0 = random_vec(C, 11);
  const DLDataType s = wide(k.dt);
  auto X = make_as(k.dt, {N, C}, x), G = make_as(k.dt, {N, C}, g);
  auto W = make_as(k.dt, {C}, w), Bb = make_as(k.dt, {C}, b);
  loom::Tensor O(B(), k.dt, {N, C}), M(B(), s, {N}), S(B(), s, {N});
  const loom_norm_fwd_args f = fwd(k, O.get(), M.get(), S.get(), X.get(), W.get(), Bb.get());
  B().call(&loom_ops::norm_forward, &f);
  auto run = [&](bool fused, Vec& dres, Vec& dw, Vec& db) {
    auto D = make_as(k.dt, {N, C}, d), GW = make_as(s, {C}, gw0), GB = make_as(s, {C}, gb0);
    loom::Tensor scratch(B(), k.dt, {N, C});
    const loom_norm_residual e = loom::norm_residual(D.get(), nullptr);
    const loom_norm_bwd_args a{LOOM_NORM_BWD_ARGS_SIZE_V2,
                               k.kind,
                               fused ? D.get() : scratch.get(),
                               GW.get(),
                               k.bias ? GB.get() : nullptr,
                               G.get(),
                               X.get(),
                               W.get(),
                               k.kind == LOOM_NORM_LAYER ? M.get() : nullptr,
                               S.get(),
                               fused ? &e.base : nullptr};
    B().call(&loom_ops::norm_backward, &a);
    if (!fused)
      B().call(&loom_ops::add, D.get(), (const DLTensor*)D.get(), (const DLTensor*)scratch.get());
    dres = get_as(D);
    dw = get_as(GW);
    db = get_as(GB);
  };
  Vec d1, w1, b1, d2, w2, b2;
  run(false, d1, w1, b1);
  run(true, d2, w2, b2);
  check_same(d2, d1, name(k) + ": dinp over the residual");
  check_same(w2, w1, name(k) + ": dweight");
  check_same(b2, b1, name(k) + ": dbias");
  CHECK_MESSAGE(d2 != get_as(make_as(k.dt, {N, C}, d)), name(k) << ": dres was not written");
}

}  // namespace

TEST_CASE("loom.norm-residual/1: the add op and the plain norm, to the bit, in every dtype") {
  CHECK(loom::lends_norm_residual(B()));
  for (DLDataType dt : {loom_f64(), loom_f32(), loom_bf16(), loom_f16()})
    for (const Case& k : {Case{dt, LOOM_NORM_LAYER, true}, Case{dt, LOOM_NORM_LAYER, false},
                          Case{dt, LOOM_NORM_RMS, false}}) {
      check_forward(k, 5, 48);
      check_backward(k, 5, 48);
    }
}

TEST_CASE("loom.norm-residual/1: a bad extension is refused with the reason") {
  const int64_t N = 2, C = 4;
  auto X = make(loom_f32(), {N, C}, Vec(N * C, 0.5)), W = make(loom_f32(), {C}, Vec(C, 1.0));
  auto R = make(loom_f32(), {N, C}, Vec(N * C, 0.25)), R3 = make(loom_f32(), {N, 3}, Vec(6, 0));
  auto R64 = make64({N, C}, Vec(N * C, 0.25));
  loom::Tensor O(B(), loom_f32(), {N, C}), Sum(B(), loom_f32(), {N, C}), Rs(B(), loom_f32(), {N});
  const Case rms{loom_f32(), LOOM_NORM_RMS, false};
  loom_norm_fwd_args a = fwd(rms, O.get(), nullptr, Rs.get(), X.get(), W.get(), nullptr);
  loom_norm_residual e = loom::norm_residual(R.get(), nullptr);
  a.ext = &e.base;
  const auto refused = [&](const std::string& why) {
    expect_error([&] { B().call(&loom_ops::norm_forward, &a); }, LOOM_ERR_INVALID_ARGUMENT,
                 "norm_forward: " + why);
  };
  refused("sum is NULL, expected inp's (2,4)");
  e.sum = Sum.get();
  e.residual = R3.get();
  refused("residual has shape (2,3), expected inp's (2,4)");
  e.residual = R64.get();
  refused("residual is f64, expected inp's f32");
  e.residual = R.get();
  e.base.struct_size = offsetof(loom_norm_residual, sum);
  refused("the " LOOM_EXT_NORM_RESIDUAL " extension is smaller than its version 1");
  e.base.struct_size = sizeof(loom_norm_residual);
  const loom_norm_gate gate{
      {sizeof(loom_norm_gate), LOOM_EXT_NORM_GATE, LOOM_EXT_REQUIRED, nullptr},
      R.get(),
      nullptr,
      C};
  e.base.next = &gate.base;
  refused("unknown required extension " LOOM_EXT_NORM_GATE);
  e.base.next = nullptr;
  a.kind = 7;
  refused("args of an unknown kind (7)");
  a.kind = LOOM_NORM_RMS;
  B().call(&loom_ops::norm_forward, &a);  // now valid
  check_close(get(Sum), Vec(N * C, 0.75), 0, 0, "the sum");
  auto GW = make(loom_f32(), {C}, Vec(C, 0));
  const loom_norm_bwd_args bwd{LOOM_NORM_BWD_ARGS_SIZE_V2,
                               LOOM_NORM_RMS,
                               O.get(),
                               GW.get(),
                               nullptr,
                               X.get(),
                               Sum.get(),
                               W.get(),
                               nullptr,
                               Rs.get(),
                               &e.base};
  expect_error([&] { B().call(&loom_ops::norm_backward, &bwd); }, LOOM_ERR_INVALID_ARGUMENT,
               "norm_backward: " LOOM_EXT_NORM_RESIDUAL "'s sum is forward only");
}
