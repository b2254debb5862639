// model/gpt's DPO objective (loom.preference/1, issue 38): the loss and every gradient against
// an independent PyTorch float64 model (tests/model/make_reference.py's *_dpo_* cases, TRL's
// sigmoid loss); in float64, each row's log-probability against the same model's plain LM
// loss of that row alone (a separate instance, one row per micro-batch), the terms against the
// loss computed here from them, and the gradient of the mean pair loss against central finite
// differences of the terms the model reports. Also what DPO refuses.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model_terms.hpp"
#include "model_test_util.hpp"
#include "reference_file.hpp"

using namespace modeltest;

namespace {

constexpr int64_t kB = 4, kT = 8, kV = 40;  // two pairs
constexpr double kBeta = 0.5;

struct PairBatch {
  std::vector<int32_t> tok, tgt;
  std::vector<double> reference = {-41.0, -39.5, -44.25, -36.0};
};

// Rows 0, 2 chosen, 1, 3 rejected; each row's first targets are the prompt's (-1: not trained)
// and the last padding (-1), as the chat data gives them.
PairBatch pairs() {
  PairBatch p;
  p.tok.resize(kB * kT);
  p.tgt.resize(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    p.tok[i] = (int32_t)((i * 7 + 3) % kV);
    p.tgt[i] = (int32_t)((i * 11 + 5) % kV);
    const int64_t t = i % kT, b = i / kT;
    if (t < 2 + b % 2 || t >= kT - b) p.tgt[i] = -1;
  }
  return p;
}

double log_sigmoid(double z) { return -std::log1p(std::exp(-z)); }

void check_dpo(const Overrides& o) {
  Host h;
  const loom_preference_objective obj{
      {sizeof(loom_preference_objective), LOOM_EXT_PREFERENCE, LOOM_EXT_REQUIRED, nullptr}, kBeta};
  Gpt m(h, o, kV, kB, kT, loom_f64(), nullptr, &obj.base);
  Gpt plain(h, o, kV, 1, kT, loom_f64());
  m.check(m.api()->init_params(m.self(), 4));
  plain.check(plain.api()->init_params(plain.self(), 4));
  perturb_lora_b(h.be, m.params);  // LoRA's B off zero (nothing without LoRA), alike in both
  perturb_lora_b(h.be, plain.params);
  PairBatch p = pairs();
  std::vector<double> policy(kB, 0.0);
  loom_preference_rows rows{
      {sizeof(loom_preference_rows), LOOM_EXT_PREFERENCE_ROWS, LOOM_EXT_REQUIRED, nullptr},
      p.reference.data(),
      policy.data()};

  const double ls = 1.0 / (double)(kB * kT);
  m.check(m.api()->zero_grad(m.self()));
  const Terms t = step(m, p.tok, p.tgt, kB, kT, ls, true, &rows.base);
  REQUIRE(t.names.size() == 5);
  CHECK(t.names[0] == "dpo");
  CHECK(t.weight[0] == 1.0);
  for (size_t i = 1; i < 5; ++i) CHECK(t.weight[i] == 0.0);

  // each row's log-probability: minus the plain model's summed token loss of that row alone
  double loss = 0, margin = 0, right = 0;
  std::vector<double> logp(kB);
  for (int64_t b = 0; b < kB; ++b) {
    const std::vector<int32_t> tok(p.tok.begin() + b * kT, p.tok.begin() + (b + 1) * kT);
    const std::vector<int32_t> tgt(p.tgt.begin() + b * kT, p.tgt.begin() + (b + 1) * kT);
    logp[b] = -plain.run(tok, tgt, 1, kT, 1.0, false).first;
    CHECK(std::fabs(policy[b] - logp[b]) <= 1e-12 * std::fabs(logp[b]));
  }
  for (int64_t k = 0; k < kB / 2; ++k) {
    const double z =
        kBeta * ((logp[2 * k] - p.reference[2 * k]) - (logp[2 * k + 1] - p.reference[2 * k + 1]));
    loss -= log_sigmoid(z);
    margin += z;
    right += z > 0;
  }
  CHECK(t.count[0] == 2.0);
  CHECK(std::fabs(t.sum[0] - loss) <= 1e-12 * loss);
  CHECK(std::fabs(t.sum[3] - margin) <= 1e-12 * std::fabs(margin) + 1e-15);
  CHECK(t.sum[4] == right);
  MESSAGE("DPO: loss " << loss / 2 << ", margin " << margin / 2 << ", accuracy " << right / 2);

  // The gradient follows loss_scale * B * T / (B / 2) * (summed pair loss) = the mean pair loss
  std::vector<std::string> names;
  for (auto& q : m.params)
    if (q.grad) names.push_back(q.name);
  const FdResult r = finite_differences(h, m, names, [&] {
    const Terms u = step(m, p.tok, p.tgt, kB, kT, ls, false, &rows.base);
    return u.sum[0] / u.count[0];
  });
  MESSAGE("DPO: max |fd - analytic| " << r.worst << " over gradients up to " << r.scale);
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
}

// The stored reference's batch through a DPO model holding its parameters: the loss against
// its summed pair loss, every trained parameter's gradient against autograd's.
void check_pytorch(const std::string& name, DLDataType dt, double loss_tol, double grad_tol) {
  const Reference r = load(name);
  REQUIRE(r.dpo_reference.size() == (size_t)r.batch);
  Host h;
  const loom_preference_objective obj{
      {sizeof(loom_preference_objective), LOOM_EXT_PREFERENCE, LOOM_EXT_REQUIRED, nullptr},
      r.dpo_beta};
  Gpt m(h, r.options, r.vocab, r.batch, r.seq, dt, nullptr, &obj.base);
  for (auto& p : m.params) {
    const auto& ref = r.params.at(p.name);
    std::vector<double> v((size_t)loom_tensor_numel(p.value), 0.0);
    std::copy(ref.begin(), ref.end(), v.begin());  // the padded vocabulary rows stay 0
    upload(h.be, p.value, v);
  }
  m.check(m.api()->zero_grad(m.self()));
  std::vector<double> policy((size_t)r.batch);
  loom_preference_rows rows{
      {sizeof(loom_preference_rows), LOOM_EXT_PREFERENCE_ROWS, LOOM_EXT_REQUIRED, nullptr},
      r.dpo_reference.data(),
      policy.data()};
  const Terms t = step(m, r.tokens, r.targets, r.batch, r.seq, r.loss_scale, true, &rows.base);
  const double loss_rel = std::fabs(t.sum[0] - r.loss_sum) / r.loss_sum;
  CHECK(loss_rel < loss_tol);
  double worst = 0;
  for (auto& p : m.params) {
    if (!p.grad) {
      CHECK(r.grads.count(p.name) == 0);  // LoRA's frozen base
      continue;
    }
    const std::vector<double> g = download(h.be, p.grad), &ref = r.grads.at(p.name);
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::fabs(g[i] - ref[i]));
    const double rel = diff / std::max(max_abs(ref), 1e-30);
    INFO("gradient " << p.name);
    CHECK(rel < grad_tol);
    worst = std::max(worst, rel);
  }
  MESSAGE(name << (dt.bits == 64 ? " f64" : " f32") << ": DPO loss rel err " << loss_rel
               << ", worst gradient max|diff|/max|ref| " << worst);
}

}  // namespace

TEST_CASE("model/gpt DPO = PyTorch float64 (GPT-2; Llama with LoRA)") {
  check_pytorch("gpt2_dpo_tiny", loom_f64(), 1e-12, 1e-9);
  check_pytorch("gpt2_dpo_tiny", loom_f32(), 1e-5, 1e-4);
  check_pytorch("llama_lora_dpo_tiny", loom_f64(), 1e-12, 1e-9);
  check_pytorch("llama_lora_dpo_tiny", loom_f32(), 1e-5, 1e-4);
}

TEST_CASE("model/gpt DPO: log-probabilities, loss and gradients (f64, GPT-2)") {
  check_dpo(tiny_gpt2());
}

TEST_CASE("model/gpt DPO: log-probabilities, loss and gradients (f64, Llama with LoRA)") {
  Overrides o = tiny_llama();
  o.emplace("peft", "lora");
  o.emplace("peft_rank", "2");
  check_dpo(o);
}

TEST_CASE("model/gpt DPO: what it does not cover is refused by name") {
  Host h;
  const loom_preference_objective obj{
      {sizeof(loom_preference_objective), LOOM_EXT_PREFERENCE, LOOM_EXT_REQUIRED, nullptr}, kBeta};
  const loom_plugin_descriptor* d = loomtest::load_descriptor("model", "gpt");
  const auto* api = static_cast<const loom_model_api*>(d->api);
  auto refused = [&](const Overrides& o, int64_t mbs, double beta, const std::string& needle) {
    loom_config cfg = loomtest::TestHost::config(d, o);
    loom_preference_objective e = obj;
    e.beta = beta;
    loom_model_create_args a{};
    a.struct_size = LOOM_MODEL_CREATE_ARGS_SIZE_V2_18;
    a.vocab_size = 50, a.micro_batch = mbs, a.seq_len = 8, a.dtype = loom_f32();
    a.recompute_num_layers = 1;
    a.ext = &e.base;
    loom_model* out = nullptr;
    const loomtest::Outcome r = loomtest::outcome(api->create(h.th.host(), &cfg, &a, &out));
    CHECK_MESSAGE(r.message.find(needle) != std::string::npos, r.message);
    if (out) api->destroy(out);
  };
  refused(tiny_gpt2(), 3, kBeta, "micro_batch_size must be even");
  refused(tiny_gpt2(), 2, 0.0, "beta must be a positive number");
  Overrides mtp = tiny_llama();
  mtp.emplace("mtp_num_layers", "1");
  refused(mtp, 2, kBeta, "multi-token prediction");
}
