// A split backward's weight half (loom.split-backward/1, model.h). While a stage's B runs, the
// computations that only add to parameter gradients are recorded instead of run, with copies
// of the scratch tensors they read (a later layer's backward overwrites those); the stage's W
// runs them in the order B met them, so each gradient adds its terms in the same order as
// the whole backward: bitwise the same result. The layers reach the recording through one
// per-thread sink, so that every linear layer (loom::tp::LocalLinear) defers without a new
// argument: a model calls stage backwards from one thread at a time (the ABI's "owner").
// C++17 (nvcc reads tensor_parallel.hpp).
#pragma once

#include <functional>
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

// The recording of the B running on this thread, or NULL: compute at once.
inline WeightGrads*& weight_grads_sink() {
  thread_local WeightGrads* sink = nullptr;
  return sink;
}

// Sets the sink for one B (and restores the previous one, NULL, after it, even on a throw).
class RecordWeightGrads {
 public:
  explicit RecordWeightGrads(WeightGrads* w) : prev_(weight_grads_sink()) {
    weight_grads_sink() = w;
  }
  ~RecordWeightGrads() { weight_grads_sink() = prev_; }
  RecordWeightGrads(const RecordWeightGrads&) = delete;
  RecordWeightGrads& operator=(const RecordWeightGrads&) = delete;

 private:
  WeightGrads* prev_;
};

// Runs fn now, or records it where a B is recording.
template <class Fn>
void weight_grad(Fn&& fn) {
  if (WeightGrads* w = weight_grads_sink())
    w->defer(std::function<void()>(std::forward<Fn>(fn)));
  else
    fn();
}

}  // namespace loom
