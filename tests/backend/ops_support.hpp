// Shared helpers for the op tests: the backend under test (backend/cpu through the test host,
// created once per process), host<->tensor conversion in double, random data, a central
// finite-difference gradient, and closeness checks that name the first bad element.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace opstest {

using Vec = std::vector<double>;

struct Env {
  loomtest::TestHost host;
  loom::Backend be;
};

// measure_gemm=false keeps create() quick; everything else at its default.
inline Env& env() {
  static Env* e = [] {
    auto* p = new Env;  // lives to process exit, so no destruction-order surprises
    p->host.load_backend("cpu", {{"measure_gemm", "false"}});
    p->be = loom::Backend(p->host.host());
    return p;
  }();
  return *e;
}
inline const loom::Backend& B() { return env().be; }

// An instance of attention plugin `name` with `cfg` over the backend above, kept to process
// exit like the backend and destroyed then, before the host (LeakSanitizer checks the
// sanitizer build).
struct AttentionInstance {
  const loom_attention_api* api;
  loom_attention* self;
};
inline AttentionInstance attention_instance(const std::string& name,
                                            const std::map<std::string, std::string>& cfg = {}) {
  auto* d = loomtest::load_descriptor("attention", name);
  static std::deque<loom_config> cfgs;  // stable addresses
  cfgs.push_back(loomtest::TestHost::config(d, cfg));
  AttentionInstance a{static_cast<const loom_attention_api*>(d->api), nullptr};
  env().host.check(a.api->create(env().host.host(), &cfgs.back(), &a.self));
  struct Owned {
    std::vector<AttentionInstance> all;
    ~Owned() {
      for (AttentionInstance& x : all) x.api->destroy(x.self);
    }
  };
  static Owned owned;  // constructed after env(), so destroyed before it
  owned.all.push_back(a);
  return a;
}

inline Vec random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A tensor of dtype f32 or f64 holding `vals` (converted).
inline loom::Tensor make(DLDataType dt, const std::vector<int64_t>& shape, const Vec& vals) {
  loom::Tensor t(B(), dt, shape);
  REQUIRE(static_cast<size_t>(t.numel()) == vals.size());
  if (loom_dtype_eq(dt, loom_f64())) {
    t.upload(vals);
  } else {
    REQUIRE(loom_dtype_eq(dt, loom_f32()));
    t.upload(std::vector<float>(vals.begin(), vals.end()));
  }
  return t;
}
// A tensor of any floating dtype holding `vals`: f32 and f64 as make(), bf16 and f16 uploaded
// as f32 and cast by `copy` (rounding to nearest even).
inline loom::Tensor make_as(DLDataType dt, const std::vector<int64_t>& shape, const Vec& vals) {
  if (dt.bits != 16) return make(dt, shape, vals);
  loom::Tensor f = make(loom_f32(), shape, vals);
  loom::Tensor t(B(), dt, shape);
  B().call(&loom_ops::copy, t.get(), (const DLTensor*)f.get());
  return t;
}
inline loom::Tensor make64(const std::vector<int64_t>& shape, const Vec& vals) {
  return make(loom_f64(), shape, vals);
}
inline loom::Tensor make_i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& vals) {
  loom::Tensor t(B(), loom_i32(), shape);
  t.upload(vals);
  return t;
}
inline void set(loom::Tensor& t, const Vec& vals) {
  if (loom_dtype_eq(t.get()->dtype, loom_f64()))
    t.upload(vals);
  else
    t.upload(std::vector<float>(vals.begin(), vals.end()));
}
inline Vec get(const loom::Tensor& t) {
  if (loom_dtype_eq(t.get()->dtype, loom_f64())) return t.download<double>();
  auto f = t.download<float>();
  return Vec(f.begin(), f.end());
}

// Values of a tensor of any floating dtype (16-bit ones cast to f32 by `copy`: exact).
inline Vec get_as(const loom::Tensor& t) {
  if (t.get()->dtype.bits != 16) return get(t);
  loom::Tensor f(B(), loom_f32(),
                 std::vector<int64_t>(t.get()->shape, t.get()->shape + t.get()->ndim));
  B().call(&loom_ops::copy, f.get(), (const DLTensor*)t.get());
  return get(f);
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of the scalar L at x: L reads x (by reference) every call.
inline Vec fd_grad(Vec& x, const std::function<double()>& L, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + h;
    double lp = L();
    x[i] = keep - h;
    double lm = L();
    x[i] = keep;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// |got - want| <= atol + rtol * |want| for every element; reports the first failure.
inline void check_close(const Vec& got, const Vec& want, double rtol, double atol,
                        const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(),
                  what << ": size " << got.size() << " vs " << want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected " << want[i]
                      << " (|err| " << err << ")");
      return;
    }
  }
}

// Tolerances for an f64 analytic gradient against f64 central differences (h = 1e-6).
constexpr double kFdRtol = 1e-6, kFdAtol = 1e-7;

// max |got - want| <= tol * max |want| (a NaN in got fails: an element left unwritten shows).
inline void check_rel(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double mx = 0, err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    mx = std::max(mx, std::fabs(want[i]));
    err = std::max(err, std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - want[i]));
  }
  CHECK_MESSAGE(err <= tol * mx, what << ": max error " << err << " vs max " << mx);
}

// Runs fn, which must throw loom::Error with `code` and a message containing `needle`.
inline void expect_error(const std::function<void()>& fn, loom_status code,
                         const std::string& needle) {
  try {
    fn();
    FAIL_CHECK("expected an error containing \"" << needle << "\", got success");
  } catch (const loom::Error& e) {
    CHECK_MESSAGE(e.code() == code, "code " << e.code() << " for: " << e.what());
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos,
                  "message \"" << e.what() << "\" lacks \"" << needle << "\"");
  }
}

}  // namespace opstest
