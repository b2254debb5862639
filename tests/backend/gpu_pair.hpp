// Harness of the cross-backend op tests: backend/cpu (the reference, always f32) and a device
// backend (backend/cuda; LOOM_GPU_TEST_DEVICE=cpu runs the harness against a second CPU
// instance, to check the tests themselves on a machine without a GPU) loaded side by side,
// each through its own test host. A Pair is one logical tensor on both: the CPU copy is f32,
// the device copy in the dtype under test, and both hold the same numbers (inputs are
// rounded to the device dtype first), so any difference is the device's arithmetic.
#pragma once

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace gputest {

using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;

// ---- the two sides ----------------------------------------------------------------------
struct Side {
  loomtest::TestHost host;
  loom::Backend be;
};

// Name of the backend under test: "cuda", or LOOM_GPU_TEST_DEVICE to self-check the harness.
std::string device_name();
// Whether the shapes of a real model (GPT-2's) run too: on a device, for its libraries'
// choices at those sizes (cuBLASLt's algorithms and epilogues, the kernels' grid shapes).
// Not in a self-check against a second CPU backend, where both sides run the same code and
// those shapes only cost time (the sanitizer build's longest test was this one, 100 s).
bool model_shapes();
// Creates the device backend once; "" when it works, else the reason (main() skips on a
// "no CUDA device" reason and fails on any other).
std::string try_open_device();

const loom::Backend& cpu();
const loom::Backend& dev();        // fp32 GEMMs in full f32 (tf32 = false)
const loom::Backend& dev_tf32();   // a second device instance with tf32 = true
const loom::Backend& side(int s);  // 0 = cpu, 1 = dev

// ---- dtypes --------------------------------------------------------------------------------
inline DLDataType f32() { return loom_f32(); }
inline DLDataType bf16() { return loom_bf16(); }
inline DLDataType f16() { return loom_f16(); }
inline DLDataType i32() { return loom_i32(); }
std::string dtype_name(DLDataType d);

// Round-to-nearest-even f32 -> bf16 (independent of any backend's own conversion).
inline uint16_t to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16_bits(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }
inline uint16_t to_f16_bits(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline float from_f16_bits(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

// The value `x` becomes when stored as `dt` (f32, bf16 or f16).
double round_to(DLDataType dt, double x);
Vec round_to(DLDataType dt, Vec v);

// Tolerances, relative to the reference's largest magnitude.
constexpr double kTolF32 = 1e-5, kTolTf32 = 1e-3, kTolBf16 = 1e-2;
inline double tol_for(DLDataType dt) { return loom_dtype_eq(dt, loom_f32()) ? kTolF32 : kTolBf16; }

// ---- tensors -----------------------------------------------------------------------------
// Host <-> tensor in any of f32/bf16/f16/i32 (values as doubles).
void upload(loom::Tensor& t, const Vec& vals);
Vec download(const loom::Tensor& t);
// Fills with NaN (floating) or 0x7fffffff (i32): anything an op should write but does not
// shows up as a mismatch.
void poison(loom::Tensor& t);

// Uniform in [lo, hi) (seeded; a range excluding 0 gives values that are never zero).
Vec random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
std::vector<int32_t> random_ids(size_t n, uint64_t seed, int32_t lo, int32_t hi);

// One logical tensor on the cpu (f32, or i32) and on the device (dtype `dt`).
class Pair {
 public:
  Pair() = default;
  // Holds `vals` rounded to dt on both sides.
  Pair(DLDataType dt, const Shape& shape, const Vec& vals, const loom::Backend* device = nullptr);
  // Poisoned on both sides: an output.
  Pair(DLDataType dt, const Shape& shape, const loom::Backend* device = nullptr);
  static Pair ids(const Shape& shape, const std::vector<int32_t>& vals,
                  const loom::Backend* device = nullptr);

  DLTensor* operator[](int s) const { return s == 0 ? c_.get() : g_.get(); }
  loom::Tensor& cpu_side() { return c_; }
  loom::Tensor& dev_side() { return g_; }
  DLDataType dtype() const { return dt_; }
  void set(const Vec& vals);  // rounded to dt on both sides
  void poison_both();

 private:
  DLDataType dt_{};
  loom::Tensor c_, g_;
};

// Runs fn(backend, side) on the cpu (side 0) then the device (side 1), so one lambda states
// the call for both: run_both([&](auto& B, int s) { B.call(&loom_ops::add, out[s], ...); }).
void run_both(const std::function<void(const loom::Backend&, int)>& fn,
              const loom::Backend* device = nullptr);

// The device result against the cpu's: max |dev - cpu| <= tol * max |cpu| over all elements,
// every element finite where the reference is (equal infinities match). Names the worst
// element on failure.
void expect_close(const Pair& t, double tol, const std::string& what);
void expect_close(const Vec& got, const Vec& want, double tol, const std::string& what);
// The device tensor bit for bit equal to itself after a rerun (determinism checks).
void expect_same(const Vec& a, const Vec& b, const std::string& what);

// The extension table `find` (loom::find_fp8, loom::find_graph) finds on backend B, or a
// failed REQUIRE saying that the backend under test does not lend `ext`.
template <class Api>
const Api& lent(const loom::Backend& B, const Api* (*find)(const loom_backend_ref&),
                const char* ext) {
  const Api* t = find(loom_backend_ref{B.api(), B.self()});
  REQUIRE_MESSAGE(t != nullptr, "backend/" << device_name() << " lends no " << ext);
  return *t;
}

}  // namespace gputest
