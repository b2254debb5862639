// `loom parity`'s comparison of two runs (parity_compare.hpp).
#include "eval/parity_compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine::parity {

namespace {

// The relative difference of a value of the layout's run from the single rank's; infinite
// when one is not finite and they differ.
double relative(double a, double b) {
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
  return std::fabs(a - b) / std::max(std::fabs(a), 1e-12);
}

// The two runs' metrics, line by line: every loss term and the gradient norm.
void compare_metrics(const fs::path& one, const fs::path& par, Outcome& r) {
  const std::vector<MetricsLine> a = read_metrics(one), b = read_metrics(par);
  if (a.size() != b.size()) {
    r.problem = "the metrics files hold " + std::to_string(a.size()) + " and " +
                std::to_string(b.size()) + " lines";
    return;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].iter != b[i].iter || a[i].eval != b[i].eval) {
      r.problem = "metrics line " + std::to_string(i + 1) + " is iteration " +
                  std::to_string(a[i].iter) + " on 1 rank but " + std::to_string(b[i].iter);
      return;
    }
    for (const auto& [key, x] : a[i].values) {
      const bool loss = is_loss_metric(key);
      if (!loss && key != "grad_norm") continue;
      auto it = b[i].values.find(key);
      if (it == b[i].values.end()) {
        r.problem = "iteration " + std::to_string(a[i].iter) + ": no " + key + " in the layout's";
        return;
      }
      (loss ? r.loss : r.grad).see(relative(x, it->second), a[i].iter, key, x, it->second);
    }
  }
}

// Parameter differences in model order (names the model does not list last, by name).
std::vector<TensorDiff> in_model_order(std::vector<TensorDiff> diffs,
                                       const std::vector<std::string>& order) {
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank.emplace(order[i], i);
  std::stable_sort(diffs.begin(), diffs.end(), [&](const TensorDiff& x, const TensorDiff& y) {
    auto rx = rank.find(x.name), ry = rank.find(y.name);
    const size_t a = rx == rank.end() ? order.size() : rx->second;
    const size_t b = ry == rank.end() ? order.size() : ry->second;
    return a < b;
  });
  return diffs;
}

void judge(Outcome& r, const Tolerances& tol) {
  auto over = [](double v, double t) { return !(v <= t); };
  if (over(r.loss.rel, tol.loss))
    r.reasons.push_back(r.loss.key + " at iteration " + std::to_string(r.loss.iter) + ": 1 rank " +
                        fmt::format("{:.9g}", r.loss.a) + ", layout " +
                        fmt::format("{:.9g}", r.loss.b) + " (relative " + num(r.loss.rel) + " > " +
                        num(tol.loss) + ")");
  if (over(r.grad.rel, tol.grad))
    r.reasons.push_back("grad_norm at iteration " + std::to_string(r.grad.iter) + ": 1 rank " +
                        fmt::format("{:.9g}", r.grad.a) + ", layout " +
                        fmt::format("{:.9g}", r.grad.b) + " (relative " + num(r.grad.rel) + " > " +
                        num(tol.grad) + ")");
  const TensorDiff* first = nullptr;
  const TensorDiff* largest = nullptr;
  size_t bad = 0;
  for (const TensorDiff& d : r.params) {
    if (d.within(tol.params)) continue;
    ++bad;
    if (!first) first = &d;
    if (d.problem.empty() && (!largest || !(d.rel <= largest->rel))) largest = &d;
  }
  if (first) {
    r.first_bad = first->name;
    const std::string what = tol.norm ? "||a-b||/||a||" : "max|a-b|/max|a|";
    auto say = [&](const TensorDiff& d) {
      return d.name + " (" + (d.problem.empty() ? what + " " + num(d.rel) : d.problem) + ")";
    };
    std::string line = "parameters: " + std::to_string(bad) + " of " +
                       std::to_string(r.params.size()) + " tensors beyond " + num(tol.params) +
                       "; first in model order " + say(*first);
    if (largest && largest != first) line += "; largest " + say(*largest);
    r.reasons.push_back(line);
  }
}

}  // namespace

void compare_runs(const fs::path& one_dir, const fs::path& dir,
                  const std::vector<std::string>& order, const Tolerances& tol, Outcome& r) {
  try {
    compare_metrics(one_dir / "metrics.jsonl", dir / "metrics.jsonl", r);
    r.params =
        in_model_order(compare_models(one_dir / "checkpoint", dir / "checkpoint", tol.norm), order);
  } catch (const std::exception& e) {
    r.problem = e.what();
  }
  if (r.problem.empty()) judge(r, tol);
}

std::string likely_cause(const Outcome& r, const Tolerances& tol, const std::string& dtype) {
  const bool loss = !(r.loss.rel <= tol.loss), grad = !(r.grad.rel <= tol.grad);
  if (loss && r.loss.iter <= 1)
    return "the first iteration's loss already differs: the layout computes a different forward "
           "pass or reads different samples (a split that changes the model, a batch drawn "
           "otherwise)";
  if (loss || grad)
    return "the losses or gradient norms drift apart after the first step: gradients reduced "
           "over the wrong group or not at all, or a different optimizer step (learning rate, "
           "schedule, clipping)";
  std::string why =
      "the losses and gradient norms agree but parameters do not: the step of these tensors "
      "differs (a gradient missing from a reduction, an optimizer setting or state sharded "
      "wrongly)";
  if (dtype == "fp32")
    why +=
        "; in fp32 it can also be rounding: a tensor whose gradient is exactly zero (an "
        "attention key bias) turns noise of the size of Adam's eps into steps of the size "
        "of the learning rate; rerun with --dtype fp64 (the default), which leaves only "
        "rounding at 1e-9";
  return why;
}

const TensorDiff* worst_tensor(const Outcome& r) {
  const TensorDiff* w = nullptr;
  for (const TensorDiff& d : r.params)
    if (d.problem.empty() && (!w || d.rel > w->rel)) w = &d;
  return w;
}

std::string num(double v) {
  if (v == 0) return "0";
  if (std::isinf(v)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace loom::engine::parity
