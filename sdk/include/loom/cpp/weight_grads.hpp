// A split backward's weight half (loom.split-backward/1, model.h). While a stage's B runs, the
// computations that only add to parameter gradients are recorded instead of run, with copies
// of the scratch tensors they read (a later layer's backward overwrites those); the stage's W
// runs them in the order B met them, so each gradient adds its terms in the same order as
// the whole backward: bitwise the same result. The layers reach the recording through the
// backend handle they are given (loom::Backend::weight_grads), so that every linear layer
// (loom::tp::LocalLinear) defers without a new argument, and separate model instances (each
// with its own handle) never share a recording. No thread-local storage: LeakSanitizer's
// exit-time scan faulted on a dlclosed plugin's.
// C++17 (nvcc reads tensor_parallel.hpp).
#pragma once

#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/cpp/tensor.hpp"

namespace loom {

class WeightGrads {
 public:
  // A copy of t's whole extent, kept until run(): what a deferred computation reads instead
  // of scratch that changes before the W.
  const DLTensor* keep(const Backend& be, const DLTensor* t) {
    kept_.emplace_back(be, t->dtype, std::vector<int64_t>(t->shape, t->shape + t->ndim));
    be.call(&loom_ops::copy, kept_.back().get(), t);
    return kept_.back().get();
  }
  void defer(std::function<void()> fn) { fns_.push_back(std::move(fn)); }
  // W: everything recorded, in order; then the copies go.
  void run() {
    for (auto& f : fns_) f();
    fns_.clear();
    kept_.clear();
  }
  bool empty() const { return fns_.empty(); }

 private:
  std::vector<std::function<void()>> fns_;
  std::vector<Tensor> kept_;
};

// Sets `be`'s recording for one B (and restores the previous one, NULL, after it, even on a
// throw). `be` is the model instance's own handle (its Ctx's), which its layers are given.
class RecordWeightGrads {
 public:
  RecordWeightGrads(const Backend& be, WeightGrads* w) : be_(be), prev_(be.weight_grads()) {
    be.set_weight_grads(w);
  }
  ~RecordWeightGrads() { be_.set_weight_grads(prev_); }
  RecordWeightGrads(const RecordWeightGrads&) = delete;
  RecordWeightGrads& operator=(const RecordWeightGrads&) = delete;

 private:
  const Backend& be_;
  WeightGrads* prev_;
};

// Runs fn now, or records it where a B is recording on `be`.
template <class Fn>
void weight_grad(const Backend& be, Fn&& fn) {
  if (WeightGrads* w = be.weight_grads())
    w->defer(std::function<void()>(std::forward<Fn>(fn)));
  else
    fn();
}

// A copy of `be` that computes at once: what a deferred computation runs on at W.
inline Backend computing(const Backend& be) {
  Backend b = be;
  b.set_weight_grads(nullptr);
  return b;
}

// fn(b, in...) for tensors `in` (const DLTensor*) that the next backward passes overwrite:
// now, on `be`; or where a B is recording on `be`, at its W, on a computing copy of `be` and
// with copies of the tensors (WeightGrads::keep). How every layer defers a weight gradient.
template <class Fn, class... In>
void weight_grad_reading(const Backend& be, Fn fn, In... in) {
  WeightGrads* w = be.weight_grads();
  if (w == nullptr) return fn(be, in...);
  w->defer([fn, b = computing(be), kept = std::make_tuple(w->keep(be, in)...)] {
    std::apply([&](auto... t) { fn(b, t...); }, kept);
  });
}

}  // namespace loom
