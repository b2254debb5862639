// Loads the out-of-tree example model named by $LOOM_EXAMPLE_PLUGIN (docs/examples/gptj-model,
// built by run.sh against the installed SDK and its layer library) and checks it on the
// in-tree backend/cpu and attention/reference in float64:
//   - its descriptor: model/gptj, the transformer keys, loom.decode/1;
//   - its parameters: GPT-2's less ln_2 (one norm per layer feeds both branches);
//   - its forward is GPT-J's out = x + attn(ln_1(x)) + mlp(ln_1(x)), against model/gpt (itself
//     checked against PyTorch in tests/model), which is out = r + mlp(ln_2(r)), r = x +
//     attn(ln_1(x)): with every MLP output projection zeroed both are x + attn(ln_1(x)); with
//     every attention output projection zeroed both are x + mlp(norm(x)) (ln_1 and ln_2 start
//     equal); with neither zeroed they differ;
//   - its gradients against central finite differences of its own loss.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>

#include "model_test_util.hpp"

namespace {

using modeltest::download;
using modeltest::Gpt;
using modeltest::Host;
using modeltest::Overrides;
using modeltest::upload;

constexpr int64_t kVocab = 40, kB = 2, kT = 8;

const loom_plugin_descriptor* example() {
  static const loom_plugin_descriptor* desc = [] {
    const char* path = std::getenv("LOOM_EXAMPLE_PLUGIN");
    REQUIRE_MESSAGE(path != nullptr, "set LOOM_EXAMPLE_PLUGIN to the example .so (run.sh does)");
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(h != nullptr, dlerror());
    auto entry = reinterpret_cast<loom_plugin_entry_fn>(dlsym(h, LOOM_PLUGIN_ENTRY_NAME));
    const bool has_entry = entry != nullptr;
    REQUIRE(has_entry);
    return entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  }();
  REQUIRE(desc != nullptr);
  return desc;
}

const Overrides kShape = {{"n_layer", "2"}, {"n_head", "2"}, {"n_embd", "16"}};

// One instance of a model plugin (f64, one micro-batch of kB x kT) on a Host, initialised
// from one seed, its parameters by name.
class Model {
 public:
  Model(Host& h, const loom_plugin_descriptor* d)
      : h_(h), m_(h, kShape, kVocab, kB, kT, loom_f64(), d) {
    m_.check(m_.api()->init_params(m_.self(), 1234));
    for (const loom_model_param& p : m_.params) params[p.name] = p;
  }

  // Sum of token losses of a fixed micro-batch; with `grad`, gradients = d(sum)/dθ.
  double loss(bool grad) {
    std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
    for (int64_t i = 0; i < kB * kT; ++i) {
      tok[i] = (int32_t)((i * 7 + 3) % kVocab);
      tgt[i] = i % 5 == 4 ? -1 : (int32_t)((i * 11 + 1) % kVocab);
    }
    if (grad) m_.check(m_.api()->zero_grad(m_.self()));
    return m_.run(tok, tgt, kB, kT, 1.0, grad).first;
  }
  void zero(const std::string& suffix) {  // every parameter whose name ends so
    for (auto& [name, p] : params)
      if (name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        upload(h_.be, p.value, std::vector<double>(loom_tensor_numel(p.value), 0.0));
  }
  std::map<std::string, loom_model_param> params;

 private:
  Host& h_;
  Gpt m_;
};

}  // namespace

TEST_CASE("model/gptj: descriptor and parameters") {
  const loom_plugin_descriptor* d = example();
  CHECK(d->kind == LOOM_KIND_MODEL);
  CHECK(std::string(d->name) == "gptj");
  CHECK(loom_ext_find(d->ext, LOOM_EXT_DECODE) != nullptr);
  Host h;
  Model gptj(h, d);
  Model gpt(h, loomtest::load_descriptor("model", "gpt"));
  for (auto& [name, p] : gpt.params) {
    CAPTURE(name);
    CHECK((gptj.params.count(name) == 1) == (name.find(".ln_2.") == std::string::npos));
  }
  CHECK(gptj.params.size() + 2 * 2 == gpt.params.size());  // ln_2 weight and bias, 2 layers
}

TEST_CASE("model/gptj's forward is the parallel block: against model/gpt") {
  Host h;
  const auto* gpt_desc = loomtest::load_descriptor("model", "gpt");
  for (const char* zeroed : {".mlp.c_proj.weight", ".attn.c_proj.weight", ""}) {
    CAPTURE(zeroed);
    Model gptj(h, example()), gpt(h, gpt_desc);
    if (*zeroed) {
      gptj.zero(zeroed);
      gpt.zero(zeroed);
    }
    const double a = gptj.loss(false), b = gpt.loss(false);
    if (*zeroed)
      CHECK(std::fabs(a - b) <= 1e-12 * std::fabs(b));
    else
      CHECK(std::fabs(a - b) > 1e-6 * std::fabs(b));  // the blocks differ
  }
}

TEST_CASE("model/gptj's gradients match finite differences") {
  Host h;
  Model m(h, example());
  m.loss(true);
  for (const char* name :
       {"h.0.ln_1.weight", "h.1.ln_1.bias", "h.0.attn.c_attn.weight", "h.1.attn.c_proj.weight",
        "h.0.mlp.c_fc.weight", "h.1.mlp.c_proj.bias", "wte", "ln_f.weight"}) {
    CAPTURE(name);
    REQUIRE(m.params.count(name) == 1);
    const loom_model_param& p = m.params.at(name);
    std::vector<double> v = download(h.be, p.value), g = download(h.be, p.grad);
    const int64_t n = (int64_t)v.size();
    for (int64_t i : {int64_t(0), n / 3, n - 1}) {
      const double eps = 1e-5, keep = v[i];
      v[i] = keep + eps;
      upload(h.be, p.value, v);
      const double up = m.loss(false);
      v[i] = keep - eps;
      upload(h.be, p.value, v);
      const double down = m.loss(false);
      v[i] = keep;
      upload(h.be, p.value, v);
      const double fd = (up - down) / (2 * eps);
      CHECK(std::fabs(g[i] - fd) <= 1e-6 * std::max(1.0, std::fabs(fd)));
    }
  }
}
