// `loom parity`'s comparison of a layout's run with its one-rank reference (parity_compare.cpp):
// the metrics files (every loss term and the gradient norm of every iteration) and the final
// checkpoints (every parameter, merged from the ranks' shards), judged against tolerances.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_tools.hpp"

namespace loom::engine::parity {

// What a layout is held to.
struct Tolerances {
  double loss = 1e-5, grad = 1e-5, params = 1e-5;
  bool norm = true;  // parameters by ||a-b|| / ||a||, else max |a-b| / max |a|
};

// The largest relative difference of one kind of metric over the iterations, and where.
struct Worst {
  double rel = 0;
  int64_t iter = 0;
  std::string key;
  double a = 0, b = 0;
  void see(double r, int64_t i, const std::string& k, double x, double y) {
    if (r > rel || (std::isnan(r) && !std::isnan(rel))) rel = r, iter = i, key = k, a = x, b = y;
  }
};

// One layout's run against its reference.
struct Outcome {
  std::string token;
  int world = 1, exit_code = 0;
  int64_t micro = 0;  // the micro-batch size, that of the one-rank run it is compared with
  double seconds = 0;
  Worst loss, grad;
  std::vector<TensorDiff> params;    // model order
  std::string problem;               // the run failed, or its files do not compare
  std::vector<std::string> reasons;  // what is beyond the tolerances
  std::string first_bad;             // the first tensor beyond it, in model order
};

// Compares the run in `dir` with the reference's in `one_dir` (each holds metrics.jsonl and
// checkpoint/), parameters named in model `order`, and judges it: fills r's differences and
// either r.problem (the files do not compare) or r.reasons (beyond the tolerances).
void compare_runs(const std::filesystem::path& one_dir, const std::filesystem::path& dir,
                  const std::vector<std::string>& order, const Tolerances& tol, Outcome& r);

// What a failure likely means, from where it shows: the first iteration's loss (the forward
// pass or the data), a later loss or the gradient norm (the backward pass, a reduction, the
// step), or only the final parameters (the step of a few tensors, or fp32 rounding).
std::string likely_cause(const Outcome& r, const Tolerances& tol, const std::string& dtype);

// The parameter tensor with the largest difference that compared; null when none did.
const TensorDiff* worst_tensor(const Outcome& r);

// A difference as the table prints it ("0", "inf", "1.6e-16"), and seconds ("1.3 s").
std::string num(double v);
std::string seconds_str(double s);

}  // namespace loom::engine::parity
