// Shared by the model tests: one micro-batch's loss terms through stage_forward (and
// stage_backward), and the objective they make.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/cpp/model_step.hpp"
#include "model_test_util.hpp"

namespace modeltest {

// The objective's terms of one micro-batch (forward, then backward when asked).
struct Terms {
  std::vector<std::string> names;
  std::vector<double> sum, count, weight;
  double objective(double loss_scale) const {
    double j = 0;
    for (size_t i = 0; i < sum.size(); ++i) j += loss_scale * weight[i] * sum[i];
    return j;
  }
};
// `mb_ext`: the micro-batch's ext chain (DPO's loom.preference-rows/1).
inline Terms step(Gpt& m, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt,
                  int64_t B, int64_t T, double loss_scale, bool backward,
                  const loom_ext* mb_ext = nullptr) {
  loom::HostBatch mb(B, T);
  mb.tokens_targets(tok.data(), tgt.data());
  loom_microbatch with = *mb.get();
  with.ext = mb_ext;
  loom_stage_forward_args f{};
  f.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
  f.mb = &with;
  f.loss_scale = loss_scale;
  f.no_grad = backward ? 0 : 1;
  m.check(m.api()->stage_forward(m.self(), &f));
  Terms t;
  for (size_t i = 0; i < f.num_losses; ++i) {
    t.names.push_back(f.losses[i].name);
    t.sum.push_back(f.losses[i].sum);
    t.count.push_back(f.losses[i].count);
    t.weight.push_back(f.losses[i].weight);
  }
  if (backward) {
    loom_stage_backward_args b{};
    b.struct_size = LOOM_STAGE_BACKWARD_ARGS_SIZE_V2;
    m.check(m.api()->stage_backward(m.self(), &b));
  }
  return t;
}

// Central differences (step 1e-6) of `objective()` over about `samples` elements of each
// named parameter, against the gradients the model holds now: the largest |fd - analytic|
// (worst) and |fd| (scale); every parameter must reach the objective (a nonzero fd).
struct FdResult {
  double worst = 0, scale = 0;
};
template <class Objective>
FdResult finite_differences(Host& h, Gpt& m, const std::vector<std::string>& names,
                            Objective objective, size_t samples = 9) {
  FdResult r;
  for (const std::string& name : names) {
    INFO(name);
    const auto& p = m.param(name);
    const std::vector<double> g = m.grad(name);
    std::vector<double> v = m.value(name);
    double mine = 0;
    for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / samples)) {
      const double x = v[i], eps = 1e-6;
      v[i] = x + eps;
      upload(h.be, const_cast<DLTensor*>(p.value), v);
      const double up = objective();
      v[i] = x - eps;
      upload(h.be, const_cast<DLTensor*>(p.value), v);
      const double down = objective();
      v[i] = x;
      upload(h.be, const_cast<DLTensor*>(p.value), v);
      const double fd = (up - down) / (2 * eps);
      r.worst = std::max(r.worst, std::fabs(fd - g[i]));
      mine = std::max(mine, std::fabs(fd));
    }
    CHECK(mine > 0.0);
    r.scale = std::max(r.scale, mine);
  }
  return r;
}

// model/gpt's create with `o` (vocabulary 50, micro-batches of 2 x 8) must fail with a
// message holding `needle`.
inline void expect_refused(Host& h, const Overrides& o, const std::string& needle,
                           DLDataType dtype = loom_f32()) {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("model", "gpt");
  const auto* api = static_cast<const loom_model_api*>(d->api);
  loom_config cfg = loomtest::TestHost::config(d, o);
  loom_model_create_args a{};
  a.struct_size = LOOM_MODEL_CREATE_ARGS_SIZE_V2;
  a.vocab_size = 50;
  a.micro_batch = 2;
  a.seq_len = 8;
  a.dtype = dtype;
  loom_model* out = nullptr;
  const loomtest::Outcome r = loomtest::outcome(api->create(h.th.host(), &cfg, &a, &out));
  CHECK_MESSAGE(r.message.find(needle) != std::string::npos, r.message);
  if (out) api->destroy(out);
}

}  // namespace modeltest
