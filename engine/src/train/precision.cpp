// Mixed precision: main parameters and loss scaling (see precision.hpp).
#include "train/precision.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "base/errors.hpp"
#include "loom/cpp/fp8_args.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {

MainParams::MainParams(const loom_backend_ref& be, const std::vector<DLTensor*>& values)
    : be_(be), main_(values.size(), nullptr) {
  std::vector<size_t> narrow;  // the values that need an f32 copy
  for (size_t i = 0; i < values.size(); ++i) {
    DLTensor* v = values[i];
    if (is_wide(v->dtype) || loom_tensor_numel(v) == 0)  // f32 already, or an empty shard
      main_[i] = v;
    else
      narrow.push_back(i);
  }
  mixed_ = !narrow.empty();
  group_runs(values, std::move(narrow));
}

// Sorted by address, values of one allocation and dtype whose bytes follow each other exactly
// form a run (no gap: a gap may hold something that is not a parameter, which a cast over the
// run would overwrite). Each run gets one f32 allocation; its values' main tensors view it at
// the same element offsets.
void MainParams::group_runs(const std::vector<DLTensor*>& values, std::vector<size_t> order) {
  auto end_byte = [&](size_t i) {
    return values[i]->byte_offset +
           (uint64_t)loom_tensor_numel(values[i]) * (uint64_t)loom_dtype_bytes(values[i]->dtype);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const DLTensor *x = values[a], *y = values[b];
    return x->data != y->data ? std::less<void*>()(x->data, y->data)
                              : x->byte_offset < y->byte_offset;
  });
  for (size_t k = 0; k < order.size();) {
    size_t e = k + 1;
    const DLTensor* first = values[order[k]];
    while (e < order.size() && values[order[e]]->data == first->data &&
           loom_dtype_eq(values[order[e]]->dtype, first->dtype) &&
           values[order[e]]->byte_offset == end_byte(order[e - 1]))
      ++e;
    Run run;
    for (size_t m = k; m < e; ++m) run.numel += loom_tensor_numel(values[order[m]]);
    check(be_.api->alloc_tensor(be_.self, loom_f32(), 1, &run.numel, &run.main),
          "allocating f32 main parameters");
    run.values = *first;
    run.values.ndim = 1;
    run.values.strides = nullptr;
    int64_t at = 0;
    for (size_t m = k; m < e; ++m) {
      const DLTensor* v = values[order[m]];
      auto view = std::make_unique<MainView>();
      view->shape.assign(v->shape, v->shape + v->ndim);
      view->t = *run.main;
      view->t.ndim = v->ndim;
      view->t.shape = view->shape.data();
      view->t.strides = nullptr;
      view->t.byte_offset = run.main->byte_offset + (uint64_t)at * 4;
      at += loom_tensor_numel(v);
      main_[order[m]] = &view->t;
      views_.push_back(std::move(view));
    }
    runs_.push_back(run);
    k = e;
  }
  // DLTensor::shape of each run's value view: its numel, kept in the run itself.
  for (Run& r : runs_) r.values.shape = &r.numel;
}

MainParams::~MainParams() {
  for (const Run& r : runs_) be_.api->free_tensor(be_.self, r.main);
}

void MainParams::from_model() {
  for (Run& r : runs_)
    check(be_.api->ops->copy(be_.self, r.main, &r.values), "casting parameters to f32");
}

void MainParams::to_model() {
  for (Run& r : runs_)
    check(be_.api->ops->copy(be_.self, &r.values, r.main), "casting main parameters");
}

double MainParams::bytes() const {
  double total = 0;
  for (const Run& r : runs_) total += 4.0 * (double)r.numel;
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

void relax_fp8_state(std::set<std::string>& need, std::set<std::string>& have,
                     const std::string& where) {
  // the FP8 state names of `from` that `other` lacks, removed; how many
  auto drop = [](std::set<std::string>& from, const std::set<std::string>& other) {
    return std::erase_if(
        from, [&](const std::string& n) { return loom::is_fp8_state(n) && !other.count(n); });
  };
  const size_t fresh = drop(need, have);
  const size_t left = drop(have, need);
  if (fresh > 0)
    spdlog::info(
        "checkpoint.load: {} holds no FP8 scaling state for {} of this run's amax histories "
        "and scales (saved without precision.fp8 = \"delayed\"): they start fresh",
        where, fresh);
  if (left > 0)
    spdlog::info(
        "checkpoint.load: {} holds {} FP8 amax histories and scales (precision.fp8 = "
        "\"delayed\") that this run does not use: not loaded",
        where, left);
}

}  // namespace loom::engine
