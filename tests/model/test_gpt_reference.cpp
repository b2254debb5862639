// The whole-model check: model/gpt, model/bert and model/t5 against independent PyTorch float64
// implementations (tests/model/make_reference.py, make_bert_reference.py,
// make_t5_reference.py; data in
// tests/model/data, no Python at test time). Loads the reference parameters, fills the padded
// vocabulary rows with junk, runs one forward and backward and compares the loss terms and
// every parameter gradient.
#include "model_test_util.hpp"
#include "reference_file.hpp"

using namespace modeltest;

namespace {

struct Errors {
  double loss_rel = 0, worst_grad = 0;
  std::string worst_name;
  std::vector<std::vector<double>> grads;  // every parameter's, in the model's order
};

// The model's loom.split-backward/1 table, where its descriptor lists one.
const loom_split_backward_ext* split_table(const char* model) {
  for (const loom_ext* x = loomtest::load_descriptor("model", model)->ext; x; x = x->next)
    if (std::string(x->id) == LOOM_EXT_SPLIT_BACKWARD)
      return reinterpret_cast<const loom_split_backward_ext*>(x);
  return nullptr;
}

// The reference's batch through the model: its loss terms (lm, and BERT's sop) and counts.
// With `split`, the backward runs as a zero-bubble schedule's B then W (loom.split-backward/1).
std::vector<loom_loss> run(const Gpt& m, const Reference& r, bool backward,
                           const loom_split_backward_ext* split = nullptr) {
  loom::HostBatch mb(r.batch, r.seq);
  if (r.dec_tokens.empty()) {
    mb.tokens_targets(r.tokens.data(), r.targets.data());
  } else {  // T5: the encoder's tokens, the decoder's (B, K) tokens and targets
    const int64_t K = (int64_t)r.dec_tokens.size() / r.batch;
    mb.add(LOOM_ARRAY_TOKENS, r.tokens.data());
    mb.add_fixed("dec_tokens", r.dec_tokens.data(), K);
    mb.add_fixed("dec_targets", r.dec_targets.data(), K);
  }
  if (!r.token_types.empty()) mb.add("token_types", r.token_types.data());
  if (!r.padding_mask.empty()) mb.add("padding_mask", r.padding_mask.data());
  if (!r.sop_labels.empty()) mb.add_per_sample("sop_labels", r.sop_labels.data());
  if (!r.labels.empty()) mb.add_per_sample("labels", r.labels.data());
  loom_stage_forward_args f{};
  f.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
  f.mb = mb.get();
  f.loss_scale = r.loss_scale;
  f.no_grad = backward ? 0 : 1;
  m.check(m.api()->stage_forward(m.self(), &f));
  std::vector<loom_loss> losses(f.losses, f.losses + f.num_losses);
  if (backward) {
    const loom_stage_backward_split input_only = {
        {sizeof(loom_stage_backward_split), LOOM_EXT_SPLIT_BACKWARD, LOOM_EXT_REQUIRED, nullptr}};
    loom_stage_backward_args b{};
    b.struct_size = LOOM_STAGE_BACKWARD_ARGS_SIZE_V2;
    b.ext = split ? &input_only.base : nullptr;
    m.check(m.api()->stage_backward(m.self(), &b));
    if (split) {
      loom_stage_weight_args w{};
      w.struct_size = LOOM_STAGE_WEIGHT_ARGS_SIZE_V2_19;
      m.check(split->weight_backward(m.self(), &w));
    }
  }
  return losses;
}

Errors compare(const std::string& name, DLDataType dt, double loss_tol, double grad_tol,
               const char* model = "gpt", const char* attention = "reference", bool split = false) {
  const Reference r = load(name);
  Host h(attention);
  Gpt m(h, r.options, r.vocab, r.batch, r.seq, dt, loomtest::load_descriptor("model", model));
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
  const loom_split_backward_ext* table = split ? split_table(model) : nullptr;
  if (split) REQUIRE(table != nullptr);
  const std::vector<loom_loss> losses = run(m, r, true, table);
  const bool sop = r.options.count("binary_head") && r.options.at("binary_head") == "true";
  const bool classifier = std::string(model) == "bert-classifier";
  const bool mtp = r.options.count("mtp_num_layers") > 0;
  REQUIRE(losses.size() == (sop || classifier || mtp ? 2u : 1u));
  const double loss = losses[0].sum;
  int64_t expect_count = 0;
  for (int32_t t : r.dec_tokens.empty() ? r.targets : r.dec_targets) expect_count += t != -1;
  if (classifier) {  // "cls": the mean over sequences (weight T); "accuracy": weight 0
    CHECK(std::string(losses[0].name) == "cls");
    CHECK(losses[0].count == r.batch);
    CHECK(losses[0].weight == r.seq);
    CHECK(std::string(losses[1].name) == "accuracy");
    CHECK(losses[1].sum == r.accuracy);
    CHECK(losses[1].count == r.batch);
    CHECK(losses[1].weight == 0.0);
  } else {
    CHECK(losses[0].count == expect_count);
  }
  // BERT's mean over masked tokens and T5's over real decoder targets, under the scale 1/(B T)
  if (std::string(model) == "bert" || std::string(model) == "t5")
    CHECK(losses[0].weight == doctest::Approx((double)(r.batch * r.seq) / expect_count));
  Errors e;
  e.loss_rel = std::fabs(loss - r.loss_sum) / std::fabs(r.loss_sum);
  INFO(name << ": loss " << loss << " vs reference " << r.loss_sum);
  CHECK(e.loss_rel < loss_tol);
  if (mtp) {  // the depths' summed token losses at mtp_loss_scaling_factor / depths
    CHECK(std::string(losses[1].name) == "mtp");
    CHECK(losses[1].weight == doctest::Approx(std::stod(r.options.at("mtp_loss_scaling_factor")) /
                                              std::stod(r.options.at("mtp_num_layers"))));
    INFO(name << ": mtp " << losses[1].sum << " vs reference " << r.mtp_sum);
    CHECK(std::fabs(losses[1].sum - r.mtp_sum) < loss_tol * std::fabs(r.mtp_sum));
  }
  if (sop) {  // BERT's sentence order: the mean over sequences, weight T
    CHECK(std::string(losses[1].name) == "sop");
    CHECK(losses[1].count == r.batch);
    CHECK(losses[1].weight == r.seq);
    CHECK(std::fabs(losses[1].sum - r.sop_sum) < loss_tol * std::fabs(r.sop_sum));
  }
  for (auto& p : m.params) {
    const std::string pname = p.name;
    if (p.grad == nullptr) {  // frozen (LoRA's base): no gradient, as autograd's requires_grad
      INFO("parameter " << pname);
      CHECK(p.frozen == 1);
      CHECK(p.buffer == 1);
      CHECK(r.grads.count(p.name) == 0);
      e.grads.emplace_back();
      continue;
    }
    CHECK(p.adapter == (pname.find(".lora_") != std::string::npos ? 1 : 0));
    const auto g = download(h.be, p.grad);
    e.grads.push_back(g);
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
  const std::vector<loom_loss> again = run(m, r, false);
  CHECK(again[0].sum == doctest::Approx(loss).epsilon(1e-12));
  CHECK(again[0].count == losses[0].count);
  MESSAGE(name << (dt.bits == 64 ? " f64" : " f32") << " (attention/" << std::string(attention)
               << "): loss rel err " << e.loss_rel << ", worst gradient max|diff|/max|ref| "
               << e.worst_grad << " (" << e.worst_name << ")");
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

TEST_CASE("model/gpt Qwen3 (kv_channels != n_embd / n_head, QK-norm, GQA, tied) = PyTorch") {
  compare("qwen3_tiny", loom_f32(), 1e-5, 1e-4);
  compare("qwen3_tiny", loom_f64(), 1e-12, 1e-9);
}

TEST_CASE("model/gpt Qwen2 (biases on q, k, v alone: add_qkv_bias) = PyTorch") {
  compare("qwen2_tiny", loom_f32(), 1e-5, 1e-4);
  compare("qwen2_tiny", loom_f64(), 1e-12, 1e-9);
}

// Nemotron-H's MLP (ABI 2.24's squared ReLU) beside attention without position encoding.
TEST_CASE("model/gpt squared ReLU MLP, no position encoding (Nemotron-H's) = PyTorch") {
  compare("relu2_tiny", loom_f32(), 1e-5, 1e-4);
  compare("relu2_tiny", loom_f64(), 1e-12, 1e-9);
}

// LoRA: the adapters' output and gradients as HF PEFT's LoraLayer computes them, the base
// frozen (no gradient written or reported). GPT-2's GELU stays out of the GEMMs there.
TEST_CASE("model/gpt LoRA on GPT-2's four projections (fused c_attn, GELU MLP) = PyTorch") {
  compare("gpt2_lora_tiny", loom_f32(), 1e-5, 1e-4);
  compare("gpt2_lora_tiny", loom_f64(), 1e-12, 1e-9);
}

TEST_CASE("model/gpt LoRA on Llama by PEFT's names (q,k,v and down_proj; untied) = PyTorch") {
  compare("llama_lora_tiny", loom_f32(), 1e-5, 1e-4);
  compare("llama_lora_tiny", loom_f64(), 1e-12, 1e-9);
  compare("llama_lora_tiny", loom_f64(), 1e-12, 1e-9, "gpt", "reference", true);  // B then W
}

TEST_CASE("model/gpt multi-head latent attention (DeepSeek's MLA) = PyTorch") {
  for (const char* name : {"mla_tiny", "mla_noqlora_tiny"}) {
    compare(name, loom_f32(), 1e-5, 1e-4);
    compare(name, loom_f64(), 1e-12, 1e-9);
    compare(name, loom_f64(), 1e-12, 1e-9, "gpt", "flash-cpu");
  }
}

// The term as DeepSeek-V3 and Megatron define it, the shifts and the [embedding | hidden]
// order of eh_proj included (finite differences check only the gradient's consistency).
TEST_CASE("model/gpt multi-token prediction (two depths, Megatron's MTP) = PyTorch") {
  compare("mtp_tiny", loom_f32(), 1e-5, 1e-4);
  compare("mtp_tiny", loom_f64(), 1e-12, 1e-9);
  compare("mtp_tiny", loom_f64(), 1e-12, 1e-9, "gpt", "reference", true);  // split backward
}

TEST_CASE("model/bert (pre-LN, exact GELU, token types, padding, binary head) = PyTorch") {
  compare("bert_tiny", loom_f32(), 1e-5, 1e-4, "bert");
  compare("bert_tiny", loom_f64(), 1e-12, 1e-9, "bert");
}

TEST_CASE("model/bert post-LN (the original BERT's: embedding LayerNorm, no ln_f) = PyTorch") {
  compare("bert_tiny_postln", loom_f32(), 1e-5, 1e-4, "bert");
  compare("bert_tiny_postln", loom_f64(), 1e-12, 1e-9, "bert");
}

TEST_CASE("model/bert-classifier (pooler + 3-way classifier, MNLI's) = PyTorch") {
  compare("bert_tiny_classifier", loom_f32(), 1e-5, 1e-4, "bert-classifier");
  compare("bert_tiny_classifier", loom_f64(), 1e-12, 1e-9, "bert-classifier");
}

TEST_CASE("model/bert without the binary head and token types = PyTorch") {
  compare("bert_tiny_nobinary", loom_f32(), 1e-5, 1e-4, "bert");
  compare("bert_tiny_nobinary", loom_f64(), 1e-12, 1e-9, "bert");
}

// The swap: attention/flash-cpu applies BERT's padding (loom.attention-seqlens/1) as
// attention/reference does, so it meets the same PyTorch reference.
TEST_CASE("model/bert with attention/flash-cpu = PyTorch") {
  compare("bert_tiny", loom_f32(), 1e-5, 1e-4, "bert", "flash-cpu");
  compare("bert_tiny", loom_f64(), 1e-12, 1e-9, "bert", "flash-cpu");
}

// A zero-bubble schedule's split backward through BERT's heads (the masked-LM transform and
// the tied head's bias, the pooler, the binary and the classifier heads): B then W gives
// PyTorch's gradients, and bitwise what the whole backward gives.
TEST_CASE("model/bert: a split backward (B then W) = PyTorch, bitwise the whole backward") {
  for (const char* name : {"bert_tiny", "bert_tiny_postln", "bert_tiny_classifier"}) {
    const char* model = std::string(name) == "bert_tiny_classifier" ? "bert-classifier" : "bert";
    INFO(name);
    const Errors whole = compare(name, loom_f64(), 1e-12, 1e-9, model);
    const Errors parts = compare(name, loom_f64(), 1e-12, 1e-9, model, "reference", true);
    CHECK(parts.grads == whole.grads);
  }
}

TEST_CASE("model/t5 (encoder, decoder with cross-attention, kv_channels, padding) = PyTorch") {
  compare("t5_tiny", loom_f32(), 1e-5, 1e-4, "t5");
  compare("t5_tiny", loom_f64(), 1e-12, 1e-9, "t5");
}

// Cross-attention (T != S, encoder padding as variable-length keys) through the other CPU
// attention plugin: the same loss and gradients.
TEST_CASE("model/t5 with attention/flash-cpu = PyTorch") {
  compare("t5_tiny", loom_f32(), 1e-5, 1e-4, "t5", "flash-cpu");
  compare("t5_tiny", loom_f64(), 1e-12, 1e-9, "t5", "flash-cpu");
}

// T5's relative position bias (position = "relative"): the buckets, both tables' gradients,
// through the attention plugins' loom.attention-bias/1.
TEST_CASE("model/t5 with the relative position bias = PyTorch (reference and flash-cpu)") {
  for (const char* attention : {"reference", "flash-cpu"}) {
    compare("t5_tiny_relative", loom_f32(), 1e-5, 1e-4, "t5", attention);
    compare("t5_tiny_relative", loom_f64(), 1e-12, 1e-9, "t5", attention);
  }
}
