// Text generation: rebuilds the run from the checkpoint's own recipe, loads the weights and
// samples with the model's KV cache.
#include "generate.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "checkpoint.hpp"
#include "errors.hpp"
#include "host.hpp"
#include "recipe.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

// Picks the next token from `logits` (modified in place).
int32_t sample_token(std::vector<float>& logits, const GenerateOptions& o, std::mt19937_64& rng) {
  const size_t v = logits.size();
  if (o.temperature <= 0)
    return (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> idx(v);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = v;
  if (o.top_k > 0) keep = std::min(keep, (size_t)o.top_k);
  const double mx = logits[idx[0]];
  std::vector<double> p(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp((logits[idx[i]] - mx) / o.temperature);
  if (o.top_p < 1.0) {  // smallest prefix whose probability reaches top_p
    double acc = 0;
    size_t n = 0;
    while (n < keep && acc < o.top_p * total) acc += p[n++];
    keep = std::max<size_t>(n, 1);
    total = acc;
  }
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng), acc = 0;
  for (size_t i = 0; i < keep; ++i)
    if ((acc += p[i]) >= r) return idx[i];
  return idx[keep - 1];
}

void generate(const GenerateOptions& opts, Registry& registry) {
  fs::path dir = resolve_checkpoint(opts.checkpoint);
  if (dir.empty()) throw UsageError("no checkpoint in " + opts.checkpoint.string());
  // Generation runs on one rank: a checkpoint of any layout is merged into full tensors.
  StFile weights = merge_model(dir);
  std::vector<std::string> overrides = {"parallel.tensor=1",
                                        "parallel.pipeline=1",
                                        "parallel.virtual_stages=1",
                                        "parallel.context=1",
                                        "parallel.sequence_parallel=false",
                                        "comm.plugin=single"};
  overrides.insert(overrides.end(), opts.overrides.begin(), opts.overrides.end());
  Recipe recipe = Recipe::load(dir / "recipe.toml", overrides);
  recipe.validate(registry);
  Session session(recipe, registry);
  loom_tokenizer_ref tok = session.tokenizer();
  loom_backend_ref be = session.backend();
  const int64_t vocab = tok.api->vocab_size(tok.self);

  const int32_t* ids = nullptr;
  size_t n = 0;
  check(tok.api->encode(tok.self, opts.prompt.data(), opts.prompt.size(), &ids, &n),
        "encoding the prompt");
  std::vector<int32_t> prompt(ids, ids + n);
  if (prompt.empty()) {
    int64_t eod = tok.api->eod_id(tok.self);
    if (eod < 0) throw UsageError("the prompt is empty and the tokenizer has no EOD token");
    prompt.push_back((int32_t)eod);  // start a fresh document
  }
  loom_model_create_args margs{LOOM_MODEL_CREATE_ARGS_SIZE_V2,
                               vocab,
                               recipe.get_int("train", "seq_len"),
                               1,
                               loom_f32(),
                               0,
                               1};
  auto [mapi, model] = session.model(margs);
  const auto* dec = reinterpret_cast<const loom_decode_ext*>(
      require_ext(registry.get(LOOM_KIND_MODEL, recipe.get_string("model", "plugin")),
                  LOOM_EXT_DECODE, LOOM_DECODE_EXT_SIZE_V1, "`loom generate`"));
  int64_t max_new = opts.max_new_tokens;
  const int64_t limit = dec->max_context(model);
  if (limit > 0 && (int64_t)prompt.size() + max_new > limit) {
    if ((int64_t)prompt.size() >= limit)
      throw UsageError("the prompt is " + std::to_string(prompt.size()) +
                       " tokens; the model's context is " + std::to_string(limit));
    max_new = limit - (int64_t)prompt.size();
    spdlog::warn("generating {} tokens, not {}: the model's context is {} tokens", max_new,
                 opts.max_new_tokens, limit);
  }
  const int64_t max_len = (int64_t)prompt.size() + max_new;
  for (size_t i = 0; i < mapi->num_params(model); ++i) {
    loom_model_param p{};
    p.struct_size = LOOM_MODEL_PARAM_SIZE_V2;
    check(mapi->get_param(model, i, &p), "listing parameters");
    auto it = weights.find(p.name);
    if (it == weights.end()) throw RunError(dir.string() + ": no tensor " + p.name);
    // A checkpoint trained with tensor parallelism pads the vocabulary further (to a
    // multiple of pad x tensor): its embedding may have more (never used) rows.
    const size_t bytes = (size_t)loom_tensor_numel(p.value) * loom_dtype_bytes(p.value->dtype);
    if (it->second.data.size() < bytes ||
        (it->second.data.size() != bytes && (p.value->ndim != 2 || it->second.shape.size() != 2 ||
                                             it->second.shape[1] != p.value->shape[1])))
      throw RunError(dir.string() + ": tensor " + p.name + " has another shape than the model's");
    check(be.api->from_host(be.self, p.value, it->second.data.data(), bytes),
          "loading " + std::string(p.name));
  }
  check(dec->kv_reset(model, 1, max_len), "allocating the KV cache");
  std::vector<float> logits((size_t)vocab);
  std::mt19937_64 rng(opts.seed);
  std::fwrite(opts.prompt.data(), 1, opts.prompt.size(), stdout);
  std::fflush(stdout);
  if (opts.logits_out.empty()) {
    check(dec->decode(model, prompt.data(), (int64_t)prompt.size(), logits.data()), "decode");
  } else {  // one position at a time, keeping each position's logits
    StTensor all{"F32", {(int64_t)prompt.size(), vocab}, {}};
    for (int32_t t : prompt) {
      check(dec->decode(model, &t, 1, logits.data()), "decode");
      const uint8_t* b = reinterpret_cast<const uint8_t*>(logits.data());
      all.data.insert(all.data.end(), b, b + logits.size() * sizeof(float));
    }
    write_safetensors(opts.logits_out, {{"logits", all}});
  }
  const int64_t eod = tok.api->eod_id(tok.self);
  for (int64_t i = 0; i < max_new; ++i) {
    int32_t next = sample_token(logits, opts, rng);
    if (next == eod) break;
    const char* text = nullptr;
    size_t len = 0;
    check(tok.api->decode(tok.self, &next, 1, &text, &len), "decoding");
    std::fwrite(text, 1, len, stdout);
    std::fflush(stdout);
    if (i + 1 < max_new) check(dec->decode(model, &next, 1, logits.data()), "decode");
  }
  std::fputc('\n', stdout);
}

}  // namespace loom::engine
