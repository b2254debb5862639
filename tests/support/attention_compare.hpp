// Helpers of the attention suites that compare a plugin on its device with
// attention/reference on backend/cpu (tests/attention/conformance.cpp,
// tests/attention): both sides' host and plugins, f32 values rounded to and moved in
// the tested dtype, NaN-poisoned outputs, and a comparison relative to the reference's
// largest magnitude.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/cpp/half.hpp"
#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace attntest {

struct Side {
  loomtest::TestHost host;
  loom::Backend be;
  loom_attention_ref att{};
};

using Vec = std::vector<float>;

// v as the tested dtype holds it (f32 unchanged).
inline Vec rounded(DLDataType dt, Vec v) {
  for (float& x : v) {
    if (loom_dtype_eq(dt, loom_bf16())) x = loom::bf16_to_f32(loom::f32_to_bf16(x));
    if (loom_dtype_eq(dt, loom_f16())) x = loom::f16_to_f32(loom::f32_to_f16(x));
  }
  return v;
}

inline void upload(loom::Tensor& t, const Vec& v) {
  const DLDataType dt = t.get()->dtype;
  if (loom_dtype_eq(dt, loom_f32())) return t.upload(v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = loom_dtype_eq(dt, loom_bf16()) ? loom::f32_to_bf16(v[i]) : loom::f32_to_f16(v[i]);
  t.upload(h);
}

inline Vec download(const loom::Tensor& t) {
  const DLDataType dt = t.get()->dtype;
  if (loom_dtype_eq(dt, loom_f32())) return t.download<float>();
  auto h = t.download<uint16_t>();
  Vec v(h.size());
  for (size_t i = 0; i < h.size(); ++i)
    v[i] = loom_dtype_eq(dt, loom_bf16()) ? loom::bf16_to_f32(h[i]) : loom::f16_to_f32(h[i]);
  return v;
}

// NaN everywhere: anything the plugin fails to write shows up as a mismatch.
inline loom::Tensor poisoned(const loom::Backend& be, DLDataType dt,
                             const std::vector<int64_t>& shape) {
  loom::Tensor t(be, dt, shape);
  upload(t, Vec(static_cast<size_t>(t.numel()), NAN));
  return t;
}

// max |got - want| <= tol * max |want|; a non-finite value in got always fails.
inline void expect_close(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double scale = 0, worst = 0;
  size_t at = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(double(got[i]) - want[i]) : INFINITY;
    if (!(e <= worst)) worst = e, at = i;
  }
  INFO(what << ": worst |err| " << worst << " at " << at << " (got " << got[at] << ", want "
            << want[at] << "), max |ref| " << scale << ", tol " << tol);
  CHECK(worst <= tol * std::max(scale, 1e-30));
}

}  // namespace attntest
