// The whole-model check: model/gpt against an independent PyTorch float64 implementation
// (tests/model/make_reference.py; data in tests/model/data, no Python at test time). Loads
// the reference parameters, fills the padded vocabulary rows with junk, runs one
// forward and backward and compares the loss and every parameter gradient.
#include <fstream>
#include <sstream>

#include "model_test_util.hpp"

using namespace modeltest;

namespace {

struct Reference {
  Overrides options;
  int64_t vocab = 0, batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets;
  double loss_sum = 0, loss_scale = 0;
  std::map<std::string, std::vector<double>> params, grads;
};

Reference load(const std::string& name) {
  const std::string path = std::string(LOOM_MODEL_TEST_DATA) + "/" + name + ".txt";
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(),
                  "missing reference data " << path << " (run tests/model/make_reference.py)");
  Reference r;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "option") {
      std::string k, v;
      in >> k >> v;
      r.options[k] = v;
    } else if (kind == "create") {
      in >> r.vocab >> r.batch >> r.seq;
    } else if (kind == "tokens" || kind == "targets") {
      auto& dst = kind == "tokens" ? r.tokens : r.targets;
      int32_t t;
      while (in >> t) dst.push_back(t);
    } else if (kind == "loss_sum") {
      in >> r.loss_sum;
    } else if (kind == "loss_scale") {
      in >> r.loss_scale;
    } else if (kind == "param" || kind == "grad") {
      std::string pname;
      size_t n = 0;
      in >> pname >> n;
      std::vector<double> v(n);
      for (auto& x : v) in >> x;
      // parameters are float32 numbers printed with 9 digits: round back to exactly them
      if (kind == "param")
        for (auto& x : v) x = (double)(float)x;
      REQUIRE_MESSAGE(!in.fail(), "truncated " << kind << " " << pname << " in " << path);
      (kind == "param" ? r.params : r.grads)[pname] = std::move(v);
    }
  }
  REQUIRE(r.tokens.size() == size_t(r.batch * r.seq));
  return r;
}

struct Errors {
  double loss_rel = 0, worst_grad = 0;
  std::string worst_name;
};

Errors compare(const std::string& name, DLDataType dt, double loss_tol, double grad_tol) {
  const Reference r = load(name);
  Host h;
  Gpt m(h, r.options, r.vocab, r.batch, r.seq, dt);
  REQUIRE(m.params.size() == r.params.size());
  for (auto& p : m.params) {
    const std::string pname = p.name;
    INFO("parameter " << pname);
    REQUIRE(r.params.count(p.name) == 1);
    const auto& ref = r.params.at(p.name);
    std::vector<double> v(loom_tensor_numel(p.value), 0.0);
    REQUIRE(ref.size() <= v.size());
    // vocabulary padding (wte, lm_head): junk in the padded rows must not matter
    if (ref.size() < v.size()) REQUIRE(p.value->shape[0] > r.vocab);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = i < ref.size() ? ref[i] : 40.0 + 0.01 * (double)(i % 97);
    upload(h.be, p.value, v);
  }
  m.check(m.api()->zero_grad(m.self()));
  auto [loss, count] = m.run(r.tokens, r.targets, r.batch, r.seq, r.loss_scale, true);
  int64_t expect_count = 0;
  for (int32_t t : r.targets) expect_count += t != -1;
  CHECK(count == expect_count);
  Errors e;
  e.loss_rel = std::fabs(loss - r.loss_sum) / std::fabs(r.loss_sum);
  INFO(name << ": loss " << loss << " vs reference " << r.loss_sum);
  CHECK(e.loss_rel < loss_tol);
  for (auto& p : m.params) {
    const std::string pname = p.name;
    const auto g = download(h.be, p.grad);
    const auto& ref = r.grads.at(p.name);
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::fabs(g[i] - ref[i]));
    for (size_t i = ref.size(); i < g.size(); ++i) CHECK(g[i] == 0.0);  // padded rows
    const double rel = diff / std::max(max_abs(ref), 1e-30);
    INFO("gradient " << pname << ": max |diff| " << diff << ", max |ref| " << max_abs(ref));
    CHECK(rel < grad_tol);
    if (rel > e.worst_grad) {
      e.worst_grad = rel;
      e.worst_name = p.name;
    }
  }
  // forward() alone gives the same loss
  auto [loss2, count2] = m.run(r.tokens, r.targets, r.batch, r.seq, r.loss_scale, false);
  CHECK(loss2 == doctest::Approx(loss).epsilon(1e-12));
  CHECK(count2 == count);
  MESSAGE(name << (dt.bits == 64 ? " f64" : " f32") << ": loss rel err " << e.loss_rel
               << ", worst gradient max|diff|/max|ref| " << e.worst_grad << " (" << e.worst_name
               << ")");
  return e;
}

}  // namespace

TEST_CASE("model/gpt GPT-2 (layernorm, gelu, learned positions, tied, padded vocab) = PyTorch") {
  compare("gpt2_tiny", loom_f32(), 1e-5, 1e-4);
  compare("gpt2_tiny", loom_f64(), 1e-12, 1e-9);
}

TEST_CASE("model/gpt Llama (rmsnorm, swiglu, rope, GQA, no bias, untied) = PyTorch") {
  compare("llama_tiny", loom_f32(), 1e-5, 1e-4);
  compare("llama_tiny", loom_f64(), 1e-12, 1e-9);
}
