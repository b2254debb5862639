// model/gpt's LoRA (peft = "lora", issue 38) beyond the PyTorch reference of
// test_gpt_reference: the objective's gradient in every adapter against central finite
// differences in float64 (B made nonzero first, so that A's gradient is not zero), the frozen
// parameters reported without a gradient; a split backward; the KV-cache decode with the
// adapters on every projection.
#include <cmath>
#include <string>
#include <vector>

#include "decode_check.hpp"
#include "model_terms.hpp"
#include "model_test_util.hpp"
#include "split_backward_check.hpp"

using namespace modeltest;

namespace {

Overrides with_lora(Overrides o, const char* targets) {
  o.emplace("peft", "lora");
  o.emplace("peft_rank", "3");
  o.emplace("peft_alpha", "6.0");
  o.emplace("peft_target_modules", targets);
  return o;
}

void check_fd(const Overrides& o, const std::vector<std::string>& adapters) {
  const int64_t B = 2, T = 8, V = 40;
  Host h;
  Gpt m(h, o, V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 4));
  perturb_lora_b(h.be, m.params);
  int frozen = 0, trained = 0;
  for (auto& p : m.params) {
    const bool adapter = std::string(p.name).find(".lora_") != std::string::npos;
    INFO(p.name);
    CHECK(p.adapter == (adapter ? 1 : 0));
    CHECK(p.frozen == (adapter ? 0 : 1));
    CHECK((p.grad == nullptr) == !adapter);
    (adapter ? trained : frozen) += 1;
  }
  CHECK(trained == (int)adapters.size());  // the test names every adapter
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = (int32_t)((i * 7 + 3) % V);
    tgt[i] = (int32_t)((i * 11 + 5) % V);
  }
  const double ls = 1.0 / (double)(B * T);
  m.check(m.api()->zero_grad(m.self()));
  step(m, tok, tgt, B, T, ls, true);
  const FdResult r = finite_differences(
      h, m, adapters, [&] { return step(m, tok, tgt, B, T, ls, false).objective(ls); });
  MESSAGE("LoRA: max |fd - analytic| " << r.worst << " over gradients up to " << r.scale << " ("
                                       << trained << " adapters, " << frozen << " frozen)");
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
}

}  // namespace

TEST_CASE("model/gpt LoRA: the adapters' gradients = finite differences (f64, GPT-2)") {
  std::vector<std::string> names;
  for (const char* l : {"h.0.", "h.1."})
    for (const char* p : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
      for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
        names.push_back(std::string(l) + p + ab);
  check_fd(with_lora(tiny_gpt2(), "all-linear"), names);
}

TEST_CASE("model/gpt LoRA: the adapters' gradients = finite differences (f64, Llama)") {
  std::vector<std::string> names;
  for (const char* l : {"h.0.", "h.1."})
    for (const char* p : {"attn.c_attn", "mlp.c_fc"})  // q|k|v and gate;up: fused adapters
      for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
        names.push_back(std::string(l) + p + ab);
  check_fd(with_lora(tiny_llama(), "linear_qkv,linear_fc1"), names);
}

// The adapters' gradients are computed in B (they are small, and their input is at hand
// there); the frozen base has no W to do. B then W still gives the whole backward's bits.
TEST_CASE("model/gpt LoRA: a split backward gives the whole backward's gradients bitwise") {
  check_split_backward(with_lora(tiny_llama(), "all-linear"), nullptr);
}

// The adapters (made nonzero by check_decode) ride on every projection of the cached decode.
TEST_CASE("model/gpt LoRA: KV-cache decode equals full-prefix decode and the forward") {
  check_decode(with_lora(tiny_gpt2(), "all-linear"));
  check_decode(with_lora(tiny_llama(), "all-linear"));
}
