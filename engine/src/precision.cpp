// Mixed precision: main parameters and loss scaling (see precision.hpp).
#include "precision.hpp"

#include <algorithm>

#include "errors.hpp"
#include "recipe.hpp"

namespace loom::engine {

DLDataType compute_dtype(const std::string& dtype) {
  if (dtype == "fp32") return loom_f32();
  if (dtype == "bf16") return loom_bf16();
  if (dtype == "fp16") return loom_f16();
  if (dtype == "fp64") return loom_f64();
  throw UsageError("precision.dtype = \"" + dtype + "\": not one of fp32, bf16, fp16, fp64");
}

bool is_wide(DLDataType dt) {
  return loom_dtype_eq(dt, loom_f32()) || loom_dtype_eq(dt, loom_f64());
}

MainParams::MainParams(const loom_backend_ref& be, const std::vector<DLTensor*>& values)
    : be_(be), values_(values) {
  for (DLTensor* v : values) {
    if (is_wide(v->dtype) || loom_tensor_numel(v) == 0) {  // f32 already, or an empty shard
      main_.push_back(v);
      continue;
    }
    DLTensor* m = nullptr;
    check(be.api->alloc_tensor(be.self, loom_f32(), v->ndim, v->shape, &m),
          "allocating f32 main parameters");
    owned_.push_back(m);
    main_.push_back(m);
    mixed_ = true;
  }
}

MainParams::~MainParams() {
  for (DLTensor* t : owned_) be_.api->free_tensor(be_.self, t);
}

void MainParams::from_model() {
  for (size_t i = 0; i < values_.size(); ++i)
    if (main_[i] != values_[i])
      check(be_.api->ops->copy(be_.self, main_[i], values_[i]), "casting parameters to f32");
}

void MainParams::to_model() {
  for (size_t i = 0; i < values_.size(); ++i)
    if (main_[i] != values_[i])
      check(be_.api->ops->copy(be_.self, values_[i], main_[i]), "casting main parameters");
}

double MainParams::bytes() const {
  double total = 0;
  for (size_t i = 0; i < values_.size(); ++i)
    if (main_[i] != values_[i]) total += 4.0 * (double)loom_tensor_numel(main_[i]);
  return total;
}

LossScaler LossScaler::from_recipe(const Recipe& recipe) {
  LossScaler s;
  const double fixed = recipe.get_float("precision", "loss_scale");
  const bool fp16 = recipe.get_string("precision", "dtype") == "fp16";
  s.dynamic = fp16 && fixed == 0;
  s.scale = fixed > 0 ? fixed : (fp16 ? recipe.get_float("precision", "initial_loss_scale") : 1.0);
  s.min_scale = recipe.get_float("precision", "min_loss_scale");
  s.window = recipe.get_int("precision", "loss_scale_window");
  s.hysteresis = recipe.get_int("precision", "hysteresis");
  s.hysteresis_left = s.hysteresis;
  return s;
}

bool LossScaler::update(bool finite) {
  if (!dynamic) return finite;
  if (!finite) {
    clean_steps = 0;
    if (--hysteresis_left <= 0) {
      scale = std::max(scale / 2, min_scale);
      hysteresis_left = hysteresis;
    }
    return false;
  }
  if (++clean_steps == window) {
    clean_steps = 0;
    hysteresis_left = hysteresis;
    scale *= 2;
  }
  return true;
}

std::map<std::string, double> LossScaler::state() const {
  return {{"loss_scale", scale},
          {"loss_scale_clean_steps", (double)clean_steps},
          {"loss_scale_hysteresis_left", (double)hysteresis_left}};
}

void LossScaler::load(const std::map<std::string, double>& state) {
  if (!dynamic) return;
  auto get = [&](const char* k, double fallback) {
    auto it = state.find(k);
    return it == state.end() ? fallback : it->second;
  };
  scale = get("loss_scale", scale);
  clean_steps = (int64_t)get("loss_scale_clean_steps", 0);
  hysteresis_left = (int64_t)get("loss_scale_hysteresis_left", (double)hysteresis);
}

}  // namespace loom::engine
