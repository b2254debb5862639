// Optimizer steps against scalar double re-implementations: AdamW as PyTorch defines it
// (decoupled decay first, bias-corrected moments) over 3 steps with grad_scale, and SGD with
// momentum as backend.h defines it.
#include <limits>

#include "ops_support.hpp"

using namespace opstest;

namespace {

// torch.optim.AdamW, one element, written from the documented algorithm.
struct AdamRef {
  double p, m = 0, v = 0;
  void step(double grad, int64_t t, double lr, double b1, double b2, double eps, double wd,
            double gs) {
    double g = grad * gs;
    p = p - lr * wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double mhat = m / (1 - std::pow(b1, static_cast<double>(t)));
    double vhat = v / (1 - std::pow(b2, static_cast<double>(t)));
    p = p - lr * mhat / (std::sqrt(vhat) + eps);
  }
};

}  // namespace

TEST_CASE("adamw_step: 3 steps match PyTorch's AdamW formula (f64 exactly, f32 closely)") {
  const int64_t n = 1000;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
  Vec p0 = random_vec(n, 1), grads[3] = {random_vec(n, 2), random_vec(n, 3), random_vec(n, 4)};
  std::vector<AdamRef> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i].p = p0[i];
  for (int64_t t = 1; t <= 3; ++t)
    for (int64_t i = 0; i < n; ++i) ref[i].step(grads[t - 1][i], t, lr, b1, b2, eps, wd, gs);
  Vec want_p(n), want_m(n), want_v(n);
  for (int64_t i = 0; i < n; ++i) {
    want_p[i] = ref[i].p;
    want_m[i] = ref[i].m;
    want_v[i] = ref[i].v;
  }

  for (auto dt : {loom_f64(), loom_f32()}) {
    bool f64 = loom_dtype_eq(dt, loom_f64());
    auto P = make(dt, {n}, p0);
    loom::Tensor M(B(), dt, {n}), Vv(B(), dt, {n});
    for (int64_t t = 1; t <= 3; ++t) {
      auto G = make(dt, {n}, grads[t - 1]);
      loom_adamw_args a{};
      a.struct_size = LOOM_ADAMW_ARGS_SIZE_V2;
      a.param = P;
      a.grad = G;
      a.m = M;
      a.v = Vv;
      a.lr = lr;
      a.beta1 = b1;
      a.beta2 = b2;
      a.eps = eps;
      a.weight_decay = wd;
      a.grad_scale = gs;
      a.step = t;
      B().call(&loom_ops::adamw_step, &a);
    }
    double tol = f64 ? 1e-13 : 1e-5;
    check_close(get(P), want_p, tol, tol, f64 ? "adamw param f64" : "adamw param f32");
    check_close(get(M), want_m, tol, tol, "adamw m");
    check_close(get(Vv), want_v, tol, 1e-10, "adamw v");
  }
}

TEST_CASE("adamw_step: argument errors") {
  auto P = make64({4}, Vec(4, 1.0));
  auto G = make64({4}, Vec(4, 1.0));
  loom::Tensor M(B(), loom_f64(), {4}), V3(B(), loom_f64(), {3}), M32(B(), loom_f32(), {4});
  loom_adamw_args a{};
  a.struct_size = LOOM_ADAMW_ARGS_SIZE_V2;
  a.param = P;
  a.grad = G;
  a.m = M;
  a.v = V3;
  a.lr = 1e-3;
  a.beta1 = 0.9;
  a.beta2 = 0.999;
  a.eps = 1e-8;
  a.grad_scale = 1;
  a.step = 1;
  expect_error([&] { B().call(&loom_ops::adamw_step, &a); }, LOOM_ERR_INVALID_ARGUMENT,
               "adamw_step: v has 3 elements, expected 4");
  a.v = M32;
  expect_error([&] { B().call(&loom_ops::adamw_step, &a); }, LOOM_ERR_INVALID_ARGUMENT,
               "adamw_step: v is f32, expected f64 (the dtype of param)");
  a.v = M;
  a.step = 0;
  expect_error([&] { B().call(&loom_ops::adamw_step, &a); }, LOOM_ERR_INVALID_ARGUMENT,
               "step = 0 must be >= 1");
}

TEST_CASE("sgd_step: momentum and weight decay over 3 steps; no buffer without momentum") {
  const int64_t n = 300;
  const double lr = 0.05, mom = 0.9, wd = 0.01, gs = 2.0;
  Vec p = random_vec(n, 10), buf(n, 0.0);
  Vec grads[3] = {random_vec(n, 11), random_vec(n, 12), random_vec(n, 13)};
  auto P = make64({n}, p);
  auto Bf = make64({n}, buf);
  for (int t = 0; t < 3; ++t) {
    B().call(&loom_ops::sgd_step, P.get(), make64({n}, grads[t]).get(), Bf.get(), lr, mom, wd, gs);
    for (int64_t i = 0; i < n; ++i) {
      buf[i] = mom * buf[i] + gs * grads[t][i] + wd * p[i];  // torch.optim.SGD
      p[i] -= lr * buf[i];
    }
  }
  check_close(get(P), p, 1e-14, 1e-14, "sgd param");
  check_close(get(Bf), buf, 1e-14, 1e-14, "sgd momentum buffer");

  Vec q = random_vec(n, 14);
  auto Q = make64({n}, q);
  B().call(&loom_ops::sgd_step, Q.get(), make64({n}, grads[0]).get(),
           static_cast<DLTensor*>(nullptr), lr, 0.0, wd, gs);
  for (int64_t i = 0; i < n; ++i) q[i] -= lr * (gs * grads[0][i] + wd * q[i]);
  check_close(get(Q), q, 1e-14, 1e-14, "sgd without momentum");

  expect_error(
      [&] {
        B().call(&loom_ops::sgd_step, Q.get(), make64({n}, grads[0]).get(),
                 static_cast<DLTensor*>(nullptr), lr, 0.9, wd, gs);
      },
      LOOM_ERR_INVALID_ARGUMENT, "sgd_step: buf is NULL but momentum = 0.9");
}
