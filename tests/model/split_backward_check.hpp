// Shared by the model tests: a token pattern, and the check that loom.split-backward/1's B
// then W gives the whole backward's parameter gradients bitwise.
#pragma once
#include <string>
#include <vector>

#include "loom/cpp/model_step.hpp"
#include "model_test_util.hpp"

namespace modeltest {

// Sequences 0 1 2 .. period-1 0 1 2 ... with a per-row phase; targets are the next token.
inline void pattern(int64_t B, int64_t T, int64_t period, std::vector<int32_t>& tokens,
                    std::vector<int32_t>& targets) {
  tokens.resize(B * T);
  targets.resize(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      tokens[b * T + t] = (int32_t)((t + 3 * b) % period);
      targets[b * T + t] = (int32_t)((t + 1 + 3 * b) % period);
    }
}

// loom.split-backward/1: two micro-batches in flight, each backward split into B (input
// gradients) and W (parameter gradients) in a zero-bubble schedule's order (B0 B1 W0 W1),
// against the whole backwards (BW0 BW1): every parameter gradient bitwise the same.
inline void check_split_backward(const Overrides& o, const char* probe) {
  Host h;
  Gpt m(h, o, 64, 2, 8);
  m.check(m.api()->init_params(m.self(), 5));
  perturb_lora_b(h.be, m.params);  // LoRA: B starts at 0, which leaves A without a gradient
  const loom_ext* e = nullptr;
  for (const loom_ext* x = loomtest::load_descriptor("model", "gpt")->ext; x; x = x->next)
    if (std::string(x->id) == LOOM_EXT_SPLIT_BACKWARD) e = x;
  REQUIRE(e != nullptr);
  const auto* split = reinterpret_cast<const loom_split_backward_ext*>(e);
  std::vector<int32_t> tok[2], tgt[2];
  pattern(2, 8, 5, tok[0], tgt[0]);
  pattern(2, 8, 7, tok[1], tgt[1]);
  std::vector<loom::HostBatch> mbs;
  for (int i = 0; i < 2; ++i) {
    mbs.emplace_back(2, 8);
    mbs.back().tokens_targets(tok[i].data(), tgt[i].data());
  }
  const loom_stage_backward_split input_only = {
      {sizeof(loom_stage_backward_split), LOOM_EXT_SPLIT_BACKWARD, LOOM_EXT_REQUIRED, nullptr}};
  auto forward = [&](int64_t slot) {
    loom_stage_forward_args f{};
    f.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
    f.slot = slot;
    f.mb = mbs[slot].get();
    f.loss_scale = 0.01;
    m.check(m.api()->stage_forward(m.self(), &f));
  };
  auto backward = [&](int64_t slot, bool b_only) {
    loom_stage_backward_args b{};
    b.struct_size = LOOM_STAGE_BACKWARD_ARGS_SIZE_V2;
    b.slot = slot;
    b.ext = b_only ? &input_only.base : nullptr;
    return m.api()->stage_backward(m.self(), &b);
  };
  auto weights = [&](int64_t slot) {
    loom_stage_weight_args w{};
    w.struct_size = LOOM_STAGE_WEIGHT_ARGS_SIZE_V2_19;
    w.slot = slot;
    return split->weight_backward(m.self(), &w);
  };
  auto grads = [&] {
    std::vector<std::vector<double>> g;
    for (const loom_model_param& p : m.params)  // a frozen one (LoRA) has none
      if (p.grad != nullptr) g.push_back(m.grad(p.name));
    return g;
  };
  m.check(m.api()->zero_grad(m.self()));
  forward(0), forward(1);
  m.check(backward(0, false)), m.check(backward(1, false));
  const auto whole = grads();
  m.check(m.api()->zero_grad(m.self()));
  forward(0), forward(1);
  m.check(backward(0, true)), m.check(backward(1, true));
  if (probe) CHECK(max_abs(m.grad(probe)) == 0.0);  // B added no weight gradient
  // a slot whose W has not run takes no forward; W runs once
  loom_stage_forward_args busy{};
  busy.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
  busy.slot = 0;
  busy.mb = mbs[0].get();
  busy.loss_scale = 0.01;
  loom_error* refused = m.api()->stage_forward(m.self(), &busy);
  REQUIRE(refused != nullptr);
  CHECK(std::string(refused->message).find("waiting for its weight_backward") != std::string::npos);
  delete refused;
  m.check(weights(0)), m.check(weights(1));
  loom_error* twice = weights(0);
  REQUIRE(twice != nullptr);
  CHECK(std::string(twice->message).find("has not run") != std::string::npos);
  delete twice;
  const auto parts = grads();
  size_t differ = 0, nonzero = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    nonzero += max_abs(whole[i]) > 0.0;
    differ += whole[i] != parts[i];
  }
  CHECK(nonzero > whole.size() / 2);
  CHECK(differ == 0);
  MESSAGE(whole.size() << " parameter gradients of B0 B1 W0 W1 bitwise those of BW0 BW1");
}

}  // namespace modeltest
