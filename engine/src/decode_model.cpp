// Loading a checkpoint for generation: rebuilds the run from the checkpoint's own recipe at
// tensor = pipeline = 1 and loads the merged weights; and picking tokens from logits.
#include "decode_model.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "checkpoint.hpp"
#include "errors.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

int32_t sample_token(const float* logits, size_t v, const SamplingParams& o, std::mt19937_64& rng) {
  if (o.temperature <= 0 || o.top_k == 1)
    return (int32_t)(std::max_element(logits, logits + v) - logits);
  std::vector<int32_t> idx(v);
  std::iota(idx.begin(), idx.end(), 0);
  size_t keep = v;
  if (o.top_k > 0) keep = std::min(keep, (size_t)o.top_k);
  // the `keep` largest, in decreasing order (ties: the lower id first, as a stable sort)
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + (ptrdiff_t)keep, idx.end(), before);
  const double mx = logits[idx[0]];
  std::vector<double> p(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp((logits[idx[i]] - mx) / o.temperature);
  if (o.top_p > 0 && o.top_p < 1.0) {  // smallest prefix whose probability reaches top_p
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

double token_logprob(const float* logits, size_t v, int32_t token) {
  const double mx = *std::max_element(logits, logits + v);
  double z = 0;
  for (size_t i = 0; i < v; ++i) z += std::exp((double)logits[i] - mx);
  return (double)logits[token] - mx - std::log(z);
}

DecodeModel::DecodeModel(const fs::path& checkpoint, const std::vector<std::string>& overrides,
                         Registry& registry, const std::string& who) {
  source_ = std::make_unique<CheckpointSource>(checkpoint);
  dir_ = source_->dir();
  if (dir_.empty()) throw UsageError("no checkpoint in " + checkpoint.string());
  StFile weights = merge_model(dir_);
  std::vector<std::string> all = {"parallel.tensor=1",
                                  "parallel.pipeline=1",
                                  "parallel.virtual_stages=1",
                                  "parallel.context=1",
                                  "parallel.sequence_parallel=false",
                                  "comm.plugin=single"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  recipe_ = std::make_unique<Recipe>(Recipe::load(dir_ / "recipe.toml", all));
  recipe_->validate(registry);
  session_ = std::make_unique<Session>(*recipe_, registry);
  tok_ = session_->tokenizer();
  loom_backend_ref be = session_->backend();
  vocab_ = tok_.api->vocab_size(tok_.self);
  eod_ = tok_.api->eod_id(tok_.self);
  loom_model_create_args margs{LOOM_MODEL_CREATE_ARGS_SIZE_V2,
                               vocab_,
                               recipe_->get_int("train", "seq_len"),
                               1,
                               loom_f32(),
                               0,
                               1};
  const loom_model_api* mapi = nullptr;
  std::tie(mapi, model) = session_->model(margs);
  const PluginInfo& info = registry.get(LOOM_KIND_MODEL, recipe_->get_string("model", "plugin"));
  dec = reinterpret_cast<const loom_decode_ext*>(
      require_ext(info, LOOM_EXT_DECODE, LOOM_DECODE_EXT_SIZE_V1, who));
  const loom_ext* s = info.find_ext(LOOM_EXT_DECODE_SLOTS);
  if (info.has_capability(LOOM_EXT_DECODE_SLOTS) && s &&
      s->struct_size >= LOOM_DECODE_SLOTS_EXT_SIZE_V1)
    slots = reinterpret_cast<const loom_decode_slots_ext*>(s);
  for (size_t i = 0; i < mapi->num_params(model); ++i) {
    loom_model_param p{};
    p.struct_size = LOOM_MODEL_PARAM_SIZE_V2;
    check(mapi->get_param(model, i, &p), "listing parameters");
    auto it = weights.find(p.name);
    if (it == weights.end()) throw RunError(dir_.string() + ": no tensor " + p.name);
    // A checkpoint trained with tensor parallelism pads the vocabulary further (to a
    // multiple of pad x tensor): its embedding may have more (never used) rows.
    const size_t bytes = (size_t)loom_tensor_numel(p.value) * loom_dtype_bytes(p.value->dtype);
    if (it->second.data.size() < bytes ||
        (it->second.data.size() != bytes && (p.value->ndim != 2 || it->second.shape.size() != 2 ||
                                             it->second.shape[1] != p.value->shape[1])))
      throw RunError(dir_.string() + ": tensor " + p.name + " has another shape than the model's");
    check(be.api->from_host(be.self, p.value, it->second.data.data(), bytes),
          "loading " + std::string(p.name));
  }
}

DecodeModel::~DecodeModel() {
  session_.reset();
  recipe_.reset();
  source_.reset();
}

std::vector<int32_t> DecodeModel::encode(const std::string& text) const {
  std::lock_guard<std::mutex> lock(tok_mu_);
  const int32_t* ids = nullptr;
  size_t n = 0;
  check(tok_.api->encode(tok_.self, text.data(), text.size(), &ids, &n), "encoding");
  return std::vector<int32_t>(ids, ids + n);
}

std::string DecodeModel::detokenize(const int32_t* ids, size_t n) const {
  if (n == 0) return "";
  std::lock_guard<std::mutex> lock(tok_mu_);
  const char* text = nullptr;
  size_t len = 0;
  check(tok_.api->decode(tok_.self, ids, n, &text, &len), "decoding");
  return std::string(text, len);
}

}  // namespace loom::engine
