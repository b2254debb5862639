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
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::engine {

class Recipe;

// precision.dtype -> the model's compute dtype: fp32, bf16, fp16, fp64.
DLDataType compute_dtype(const std::string& dtype);
// f32 or f64: a dtype that needs no f32 main copy (and is stored as it is in checkpoints).
bool is_wide(DLDataType dt);

// f32 main copies of the parameters whose values are not f32 (or f64); for the others the
// main tensor is the value itself.
class MainParams {
 public:
  MainParams(const loom_backend_ref& be, const std::vector<DLTensor*>& values);
  ~MainParams();
  MainParams(const MainParams&) = delete;
  MainParams& operator=(const MainParams&) = delete;

  DLTensor* main(size_t i) const { return main_[i]; }
  const std::vector<DLTensor*>& all() const { return main_; }
  bool mixed() const { return mixed_; }
  void from_model();     // main <- value (after init)
  void to_model();       // value <- main (after a step or a load)
  double bytes() const;  // of the f32 copies this class allocated

 private:
  loom_backend_ref be_;
  std::vector<DLTensor*> values_, main_, owned_;
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

}  // namespace loom::engine
