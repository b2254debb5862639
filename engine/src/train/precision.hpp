// Mixed precision in the training loop, as Megatron does it:
//  - the model computes in bf16 or fp16 (its parameter values in that dtype) and accumulates
//    parameter gradients in f32 (main grads);
//  - the engine keeps an f32 main copy of every parameter; the optimizer (and a sharding
//    gradient strategy) step the main copies, which are cast into the model after each
//    step; checkpoints store the main copies;
//  - fp16 scales the loss (dynamic loss scaling): a step whose gradients overflow is
//    skipped and the scale backs off; after a clean window the scale grows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "recipe/dtype.hpp"

namespace loom::engine {

class Recipe;

// f32 main copies of the parameters whose values are not f32 (or f64); for the others the
// main tensor is the value itself. Values that lie back to back in one allocation (a model's
// flat parameter buffer) get main copies back to back in one f32 allocation, so the cast
// after each step is one copy per run, not one launch per tensor (148 for gpt2-124m, short
// launches the device waited for; docs/performance.md, change 5).
class MainParams {
 public:
  MainParams(const loom_backend_ref& be, const std::vector<DLTensor*>& values);
  ~MainParams();
  MainParams(const MainParams&) = delete;
  MainParams& operator=(const MainParams&) = delete;

  DLTensor* main(size_t i) const { return main_[i]; }
  const std::vector<DLTensor*>& all() const { return main_; }
  bool mixed() const { return mixed_; }
  void from_model();                            // main <- value (after init)
  void to_model();                              // value <- main (after a step or a load)
  double bytes() const;                         // of the f32 copies this class allocated
  size_t runs() const { return runs_.size(); }  // copies per cast

 private:
  // A run of adjacent values (one 1-D view of them) and its f32 main allocation.
  struct Run {
    DLTensor values{};
    int64_t numel = 0;
    DLTensor* main = nullptr;
  };
  // A main tensor that views a run's allocation (its shape kept alive here).
  struct MainView {
    DLTensor t{};
    std::vector<int64_t> shape;
  };
  void group_runs(const std::vector<DLTensor*>& values, std::vector<size_t> order);

  loom_backend_ref be_;
  std::vector<DLTensor*> main_;
  std::vector<Run> runs_;
  std::vector<std::unique_ptr<MainView>> views_;
  bool mixed_ = false;
};

// Megatron's DynamicGradScaler (fp16): scale the loss by `scale`; on overflow skip the step,
// and after `hysteresis` overflows in a row halve the scale (not below min); after `window`
// clean steps in a row double it.
struct LossScaler {
  bool dynamic = false;
  double scale = 1.0, min_scale = 1.0;
  int64_t window = 1000, hysteresis = 2;
  int64_t clean_steps = 0, hysteresis_left = 2;

  static LossScaler from_recipe(const Recipe& recipe);
  // After a step's gradients are reduced: `finite` says whether they are. Returns whether
  // the optimizer may step.
  bool update(bool finite);
  std::map<std::string, double> state() const;
  void load(const std::map<std::string, double>& state);
};

// precision.fp8 may change at a resume, as Megatron's may (Transformer Engine's extra state
// is optional in its checkpoints): of delayed scaling's state (loom::is_fp8_state's names),
// what the checkpoint (`have`) lacks leaves `need` and starts fresh, and what it holds that
// the run does not use (not in `need`) leaves `have` and is not loaded; each logged, naming
// `where`.
void relax_fp8_state(std::set<std::string>& need, std::set<std::string>& have,
                     const std::string& where);

}  // namespace loom::engine
