// Mixed precision on the CPU (backend.h, ABI 1.1): a call whose activations or parameter
// values are bf16 or f16 runs the op's own f32 kernel on f32 stand-ins of those tensors and
// rounds the outputs back to their dtype (round to nearest even, loom/cpp/half.hpp). Arithmetic is
// f32 whatever the storage dtype, exactly as the contract asks, and every op keeps one
// kernel per dtype instead of a third instantiation per storage format. f32 tensors of the
// call (parameter gradients, statistics, losses) are used in place; i32 ids pass through.
//
// Correctness first: a stand-in is a converted copy of the whole tensor. That costs a
// conversion pass per call, nothing next to the f32 kernel on the sizes the CPU backend
// trains; gemm stages only the matrices it touches (kernels_linear.cpp).
#pragma once

#include <deque>
#include <initializer_list>
#include <vector>

#include "cpu_backend.hpp"

namespace loom_cpu {

inline bool is_half(DLDataType d) { return is_bf16(d) || is_f16(d); }

// dst[i] = conv(src[i]) over n elements: the one flat conversion pass, shared by copy's
// casts and the staging conversions below so that both round the same way.
template <class D, class S, class Conv>
void convert(D* dst, const S* src, int64_t n, int nt, Conv conv) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = conv(src[i]);
}

// dst(n) f32 = src(n) bf16/f16 of dtype dt, and back (rounding to nearest even).
void half_to_f32(DLDataType dt, const uint16_t* src, float* dst, int64_t n, int nt);
void f32_to_half(DLDataType dt, const float* src, uint16_t* dst, int64_t n, int nt);

// The f32 stand-ins of one mixed-precision call. Every 16-bit tensor of the call must have
// the same dtype (the compute dtype); the others must be f32 (or i32 for ids/targets).
// Passing one tensor twice (an in-place op: dlogits aliasing logits, dinp aliasing dout)
// gives one stand-in, so the f32 kernel sees the aliasing it expects.
class Staging {
 public:
  Staging(const Check& ck, int threads) : ck_(ck), nt_(threads) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // True when a tensor (NULLs skipped) is bf16 or f16: the call is a mixed-precision one.
  static bool any_half(std::initializer_list<const DLTensor*> ts) {
    for (const DLTensor* t : ts)
      if (t && is_half(t->dtype)) return true;
    return false;
  }
  // An input's f32 stand-in (t itself when it is f32 or i32; NULL stays NULL).
  const DLTensor* in(const char* name, const DLTensor* t) { return stage(name, t, false); }
  // An output's (loaded too: += outputs and in-place ops read it), written back by store().
  DLTensor* out(const char* name, DLTensor* t) { return stage(name, t, true); }
  // Saved statistics and losses are f32 in a mixed-precision call (backend.h).
  void f32_only(const char* name, const DLTensor* t) const;
  // Runs the f32 op on the stand-ins (an op entry point: its error is rethrown), then
  // rounds the outputs back into their tensors.
  template <class Call>
  void run(loom_backend& b, Call&& call) {
    loom::check(b.host, call());
    store();
  }

 private:
  struct Entry {
    DLTensor* orig = nullptr;
    std::vector<float> data;
    std::vector<int64_t> shape;
    DLTensor view{};
    bool write = false;
  };
  DLTensor* stage(const char* name, const DLTensor* t, bool write);
  void store();

  const Check& ck_;
  int nt_;
  std::deque<Entry> entries_;  // stable addresses: the views point into them
  const char* half_name_ = nullptr;
  DLDataType half_{};
};

}  // namespace loom_cpu
