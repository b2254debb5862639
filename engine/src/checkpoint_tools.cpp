// `loom checkpoint merge` and `loom checkpoint diff`: a checkpoint of any parallel layout as
// full tensors, and the largest difference between two checkpoints' models (how the
// equivalence tests compare a parallel run with a single-rank one).
#include "checkpoint_tools.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "checkpoint.hpp"
#include "errors.hpp"
#include "safetensors.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

std::vector<double> as_f64(const StTensor& t) {
  std::vector<double> v;
  if (t.dtype == "F32") {
    v.resize(t.data.size() / 4);
    for (size_t i = 0; i < v.size(); ++i) {
      float f;
      std::memcpy(&f, t.data.data() + 4 * i, 4);
      v[i] = f;
    }
  } else if (t.dtype == "F64") {
    v.resize(t.data.size() / 8);
    std::memcpy(v.data(), t.data.data(), t.data.size());
  } else {
    throw RunError("checkpoint diff: tensors of dtype " + t.dtype + " are not compared");
  }
  return v;
}

}  // namespace

void checkpoint_merge(const fs::path& dir, const fs::path& out) {
  StFile full = merge_model(dir);
  write_safetensors(out, full);
  std::cout << "wrote " << full.size() << " tensors to " << out.string() << "\n";
}

int checkpoint_diff(const fs::path& a, const fs::path& b, double rtol, bool norm) {
  StFile x = merge_model(a), y = merge_model(b);
  double worst = 0;
  std::string worst_name;
  int bad = 0;
  for (auto& [name, tx] : x) {
    auto it = y.find(name);
    if (it == y.end()) {
      std::cout << name << ": only in " << a.string() << "\n";
      ++bad;
      continue;
    }
    const StTensor& ty = it->second;
    // Vocabulary padding may differ with the tensor-parallel size (a multiple of pad x TP):
    // compare the rows both have when the trailing dimensions agree.
    const bool same_rows = tx.shape.size() == ty.shape.size() && tx.shape.size() >= 1 &&
                           std::equal(tx.shape.begin() + 1, tx.shape.end(), ty.shape.begin() + 1);
    if (!same_rows) {
      std::cout << name << ": shapes differ\n";
      ++bad;
      continue;
    }
    std::vector<double> u = as_f64(tx), v = as_f64(ty);
    const size_t n = std::min(u.size(), v.size());
    double scale = 0, diff = 0;
    if (norm) {  // ||a - b||_2 / ||a||_2
      for (size_t i = 0; i < n; ++i) scale += u[i] * u[i], diff += (u[i] - v[i]) * (u[i] - v[i]);
      scale = std::sqrt(scale), diff = std::sqrt(diff);
    } else {  // max |a - b| / max |a|
      for (size_t i = 0; i < n; ++i) scale = std::max({scale, std::fabs(u[i]), std::fabs(v[i])});
      for (size_t i = 0; i < n; ++i) diff = std::max(diff, std::fabs(u[i] - v[i]));
    }
    const double rel = scale > 0 ? diff / scale : diff;
    if (rel > worst) worst = rel, worst_name = name;
    if (!(rel <= rtol)) {
      std::cout << name << (norm ? ": ||a-b|| / ||a|| = " : ": max |a-b| / max |a| = ") << rel
                << " > " << rtol << "\n";
      ++bad;
    }
  }
  for (auto& [name, t] : y)
    if (!x.count(name)) std::cout << name << ": only in " << b.string() << "\n", ++bad;
  std::cout << (bad ? "differ" : "match") << ": " << x.size() << " tensors, worst relative "
            << "difference " << worst << (worst_name.empty() ? "" : " (" + worst_name + ")")
            << ", tolerance " << rtol << "\n";
  return bad ? 1 : 0;
}

}  // namespace loom::engine
