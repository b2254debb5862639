// GELU (tanh form), SwiGLU, GELU (erf) and tanh: forward against naive formulas, backward
// against central finite differences in f64, f32 (vectorised exp/tanh) against f64.
#include "ops_support.hpp"

using namespace opstest;

namespace {

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

Vec run_gelu(DLDataType dt, const Vec& x) {
  auto X = make(dt, {static_cast<int64_t>(x.size())}, x);
  loom::Tensor O(B(), dt, {static_cast<int64_t>(x.size())});
  loom::act_forward(B(), LOOM_ACT_GELU_TANH, O.get(), X.get());
  return get(O);
}
Vec run_swiglu(DLDataType dt, const Vec& x, int64_t N, int64_t H) {
  auto X = make(dt, {N, 2 * H}, x);
  loom::Tensor O(B(), dt, {N, H});
  loom::act_forward(B(), LOOM_ACT_SWIGLU, O.get(), X.get());
  return get(O);
}

}  // namespace

TEST_CASE("gelu forward and backward") {
  Vec x = random_vec(40, 1, -5, 5);
  x.push_back(0.0);
  Vec want(x.size());
  for (size_t k = 0; k < x.size(); ++k) want[k] = gelu_ref(x[k]);
  check_close(run_gelu(loom_f64(), x), want, 1e-14, 1e-15, "gelu_forward");

  Vec R = random_vec(x.size(), 2);
  auto L = [&] { return dot(run_gelu(loom_f64(), x), R); };
  Vec fd = fd_grad(x, L);
  int64_t n = static_cast<int64_t>(x.size());
  auto dX = make64({n}, Vec(n, 7.0));  // written, not accumulated
  loom::act_backward(B(), LOOM_ACT_GELU_TANH, dX.get(), make64({n}, x).get(), make64({n}, R).get());
  check_close(get(dX), fd, kFdRtol, kFdAtol, "gelu_backward vs FD");

  // In place: dinp aliasing dout.
  auto dO = make64({n}, R);
  loom::act_backward(B(), LOOM_ACT_GELU_TANH, dO.get(), make64({n}, x).get(), dO.get());
  check_close(get(dO), fd, kFdRtol, kFdAtol, "gelu_backward in place");
}

TEST_CASE("gelu: f32 matches f64 across the range, incl. saturation") {
  Vec x = random_vec(100000, 3, -12, 12);  // parallel, vectorised path
  for (double v : {-100.0, -20.0, -1e-4, 0.0, 1e-4, 20.0, 100.0}) x.push_back(v);
  check_close(run_gelu(loom_f32(), x), run_gelu(loom_f64(), x), 1e-5, 1e-6, "gelu f32 vs f64");

  int64_t n = static_cast<int64_t>(x.size());
  Vec R = random_vec(x.size(), 4);
  Vec g[2];
  DLDataType dts[2] = {loom_f32(), loom_f64()};
  for (int k = 0; k < 2; ++k) {
    loom::Tensor dX(B(), dts[k], {n});
    loom::act_backward(B(), LOOM_ACT_GELU_TANH, dX.get(), make(dts[k], {n}, x).get(),
                       make(dts[k], {n}, R).get());
    g[k] = get(dX);
  }
  check_close(g[0], g[1], 1e-5, 1e-6, "gelu_backward f32 vs f64");
}

TEST_CASE("swiglu forward and backward") {
  const int64_t N = 3, H = 6;
  Vec x = random_vec(N * 2 * H, 10, -4, 4), R = random_vec(N * H, 11);
  Vec want(N * H);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      want[n * H + h] = silu_ref(x[n * 2 * H + h]) * x[n * 2 * H + H + h];
  check_close(run_swiglu(loom_f64(), x, N, H), want, 1e-14, 1e-15, "swiglu_forward");

  auto L = [&] { return dot(run_swiglu(loom_f64(), x, N, H), R); };
  Vec fd = fd_grad(x, L);
  auto dX = make64({N, 2 * H}, Vec(N * 2 * H, -3.0));
  loom::act_backward(B(), LOOM_ACT_SWIGLU, dX.get(), make64({N, 2 * H}, x).get(),
                     make64({N, H}, R).get());
  check_close(get(dX), fd, kFdRtol, kFdAtol, "swiglu_backward vs FD");

  Vec big = random_vec(64 * 2 * 512, 12, -10, 10);
  check_close(run_swiglu(loom_f32(), big, 64, 512), run_swiglu(loom_f64(), big, 64, 512), 1e-5,
              1e-6, "swiglu f32 vs f64");
}

TEST_CASE("activations: shape errors") {
  loom::Tensor a(B(), loom_f32(), {4, 6}), b(B(), loom_f32(), {4, 4}), c(B(), loom_f32(), {4, 5});
  expect_error([&] { loom::act_forward(B(), LOOM_ACT_GELU_TANH, b.get(), a.get()); },
               LOOM_ERR_INVALID_ARGUMENT, "gelu_forward: out has 16 elements, expected 24");
  expect_error([&] { loom::act_forward(B(), LOOM_ACT_SWIGLU, b.get(), a.get()); },
               LOOM_ERR_INVALID_ARGUMENT, "swiglu_forward: out has 16 elements, expected 12");
  expect_error([&] { loom::act_forward(B(), LOOM_ACT_SWIGLU, b.get(), c.get()); },
               LOOM_ERR_INVALID_ARGUMENT, "inp's last dimension is 5, expected an even 2H");
}

// ABI 2.3's elementwise kinds, BERT's exact GELU (erf) and the pooler's tanh, and ABI 2.24's
// squared ReLU (Nemotron-H's MLP), each against its float64 formula, its backward against
// central finite differences in f64 (also in place), and f32 against f64.
TEST_CASE("gelu (erf), tanh and squared ReLU forward and backward") {
  struct Kind {
    loom_act_kind kind;
    const char* name;
    double (*ref)(double);
  };
  const Kind kinds[] = {
      {LOOM_ACT_GELU, "gelu (erf)",
       [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
      {LOOM_ACT_TANH, "tanh", [](double x) { return std::tanh(x); }},
      {LOOM_ACT_SQUARED_RELU, "squared relu", [](double x) { return x > 0 ? x * x : 0.0; }}};
  for (const Kind& k : kinds) {
    INFO(k.name);
    auto run = [&](DLDataType dt, const Vec& x) {
      auto X = make(dt, {(int64_t)x.size()}, x);
      loom::Tensor O(B(), dt, {(int64_t)x.size()});
      loom::act_forward(B(), k.kind, O.get(), X.get());
      return get(O);
    };
    Vec x = random_vec(40, 3, -5, 5);
    Vec want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = k.ref(x[i]);
    check_close(run(loom_f64(), x), want, 1e-14, 1e-15, "forward");
    const int64_t n = (int64_t)x.size();
    Vec R = random_vec(x.size(), 4);
    auto L = [&] { return dot(run(loom_f64(), x), R); };
    Vec fd = fd_grad(x, L);
    loom::Tensor dX(B(), loom_f64(), {n});
    loom::act_backward(B(), k.kind, dX.get(), make64({n}, x).get(), make64({n}, R).get());
    check_close(get(dX), fd, kFdRtol, kFdAtol, "backward vs FD");
    auto dO = make64({n}, R);
    loom::act_backward(B(), k.kind, dO.get(), make64({n}, x).get(), dO.get());
    check_close(get(dO), fd, kFdRtol, kFdAtol, "backward in place");
    Vec big = random_vec(3000, 5, -12, 12);
    check_close(run(loom_f32(), big), run(loom_f64(), big), 1e-5, 1e-6, "f32 vs f64");
  }
  loom::Tensor a(B(), loom_f32(), {4});
  expect_error([&] { loom::act_forward(B(), (loom_act_kind)7, a.get(), a.get()); },
               LOOM_ERR_INVALID_ARGUMENT, "act_forward: args of an unknown kind (7)");
}
