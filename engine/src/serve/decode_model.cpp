// Loading a checkpoint for generation: rebuilds the run from the checkpoint's own recipe at
// tensor = pipeline = 1 and loads the merged weights; and picking tokens from logits.
#include "serve/decode_model.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "base/errors.hpp"
#include "checkpoint/checkpoint.hpp"
#include "session/config_check.hpp"
#include "train/train_run.hpp"

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
  recipe_ = std::make_unique<Recipe>(inference_recipe(dir_, overrides, {}, registry));
  const PluginInfo& info = registry.get(LOOM_KIND_MODEL, recipe_->get_string("model", "plugin"));
  dec = reinterpret_cast<const loom_decode_ext*>(
      require_ext(info, LOOM_EXT_DECODE, LOOM_DECODE_EXT_SIZE_V1, who));
  const loom_ext* s = info.find_ext(LOOM_EXT_DECODE_SLOTS);
  if (info.has_capability(LOOM_EXT_DECODE_SLOTS) && s &&
      s->struct_size >= LOOM_DECODE_SLOTS_EXT_SIZE_V1)
    slots = reinterpret_cast<const loom_decode_slots_ext*>(s);
  const loom_ext* e = info.find_ext(LOOM_EXT_ENCODE);
  if (info.has_capability(LOOM_EXT_ENCODE)) {
    if (!e || e->struct_size < LOOM_ENCODE_EXT_SIZE_V1)
      throw RunError("model/" + info.name + " lists " + LOOM_EXT_ENCODE +
                     " but chains no such table of its size");
    enc = reinterpret_cast<const loom_encode_ext*>(e);
  }
  if (recipe_->get_int("parallel", "tensor") == 1) {
    load_one_rank(registry);
  } else {  // this rank's shard, cut by checkpoint.finetune's loading
    run_ = std::make_unique<TrainRun>(*recipe_, registry);
    if (run_->layout.pipeline > 1 || run_->layout.data > 1 || run_->layout.context > 1)
      throw UsageError(who + " splits a model by tensor parallelism only: the world (" +
                       std::to_string(run_->world) + " ranks) must equal parallel.tensor (" +
                       std::to_string(run_->layout.tensor) + ")");
    run_->resume();
    model = run_->chunks[0];
    tok_ = run_->session.tokenizer();
    be_ = run_->be;
    comm_ = run_->comm;
    rank_ = run_->rank;
    ranks_ = run_->world;
  }
  vocab_ = tok_.api->vocab_size(tok_.self);
  eod_ = tok_.api->eod_id(tok_.self);
}

int64_t DecodeModel::token_id(const std::string& text) const {
  std::lock_guard<std::mutex> lock(tok_mu_);
  if (tok_.api->struct_size < LOOM_TOKENIZER_API_SIZE_V2_3 || !tok_.api->token_to_id) return -1;
  return tok_.api->token_to_id(tok_.self, text.data(), text.size());
}

// Every tensor of the merged checkpoint into a whole model on this one rank, by name.
void DecodeModel::load_one_rank(Registry& registry) {
  StFile weights = merge_model(dir_);
  session_ = std::make_unique<Session>(*recipe_, registry);
  tok_ = session_->tokenizer();
  be_ = session_->backend();
  loom_model_create_args margs = inference_create_args(
      tok_.api->vocab_size(tok_.self), recipe_->get_int("train", "seq_len"), 1, 0, 1);
  const loom_model_api* mapi = nullptr;
  std::tie(mapi, model) = session_->model(margs);
  // The model takes every tensor and lacks none: one of another shape (model.n_layer, a norm
  // with a bias) would otherwise generate from a partial load.
  std::vector<loom_model_param> wanted;
  std::vector<std::string> missing, unused;
  std::set<std::string> taken;
  for (size_t i = 0; i < mapi->num_params(model); ++i) {
    loom_model_param p{};
    p.struct_size = LOOM_MODEL_PARAM_SIZE_V2;
    check(mapi->get_param(model, i, &p), "listing parameters");
    wanted.push_back(p);
    taken.insert(p.name);
    if (!weights.count(p.name)) missing.push_back(p.name);
  }
  for (const auto& [name, t] : weights)
    if (!taken.count(name)) unused.push_back(name);
  if (!missing.empty() || !unused.empty()) {
    auto first = [](const std::vector<std::string>& names) {
      std::string out;
      for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
      if (names.size() > 5) out += " and " + std::to_string(names.size() - 5) + " more";
      return out;
    };
    std::string msg = dir_.string() + ": its tensors are not the model's:";
    if (!missing.empty())
      msg += " it lacks " + std::to_string(missing.size()) + " the model needs (" + first(missing) +
             ")";
    if (!unused.empty())
      msg += std::string(missing.empty() ? "" : ";") + " it holds " +
             std::to_string(unused.size()) + " the model does not take (" + first(unused) + ")";
    throw UsageError(msg +
                     "; the [model] keys differ from those it was saved with (its "
                     "recipe.toml)");
  }
  for (const loom_model_param& p : wanted) {
    auto it = weights.find(p.name);
    // A checkpoint trained with tensor parallelism pads the vocabulary further (to a
    // multiple of pad x tensor): its embedding may have more (never used) rows.
    const size_t bytes = (size_t)loom_tensor_numel(p.value) * loom_dtype_bytes(p.value->dtype);
    if (it->second.data.size() < bytes ||
        (it->second.data.size() != bytes && (p.value->ndim != 2 || it->second.shape.size() != 2 ||
                                             it->second.shape[1] != p.value->shape[1])))
      throw RunError(dir_.string() + ": tensor " + p.name + " has another shape than the model's");
    check(be_.api->from_host(be_.self, p.value, it->second.data.data(), bytes),
          "loading " + std::string(p.name));
  }
}

DecodeModel::~DecodeModel() {
  run_.reset();
  session_.reset();
  recipe_.reset();
  source_.reset();
}

// ----- the decode loop's calls, repeated by the other ranks ------------------------------
namespace {
enum Op { kStop = 0, kReset = 1, kClear = 2, kDecode = 3 };
}

void DecodeModel::send(std::vector<double>& words) {
  if (ranks_ == 1) return;
  if (rank_ != 0) std::fill(words.begin(), words.end(), 0.0);
  sum_over(be_, comm_, nullptr, words.data(), (int64_t)words.size());  // exact: small integers
}

void DecodeModel::kv_reset(int64_t batch, int64_t max_len) {
  std::vector<double> head = {kReset, (double)batch, (double)max_len};
  if (rank_ == 0) send(head);
  max_len_ = max_len;
  check(dec->kv_reset(model, batch, max_len), "allocating the KV cache");
}

void DecodeModel::kv_clear(int64_t slot) {
  std::vector<double> head = {kClear, (double)slot, 0};
  if (rank_ == 0) send(head);
  if (slots)
    check(slots->kv_clear(model, slot), "clearing a KV-cache slot");
  else  // one slot: the whole cache
    check(dec->kv_reset(model, 1, max_len_), "clearing the KV cache");
}

void DecodeModel::decode_slots(const int64_t* slot_ids, int64_t num, const int32_t* tokens,
                               int64_t n, float* logits) {
  if (rank_ == 0 && ranks_ > 1) {
    std::vector<double> head = {kDecode, (double)num, (double)n};
    send(head);
    std::vector<double> body(slot_ids, slot_ids + num);
    body.insert(body.end(), tokens, tokens + num * n);
    send(body);
  }
  if (slots) {
    check(slots->decode_slots(model, slot_ids, num, tokens, n, logits), "decode");
  } else {
    if (num != 1 || slot_ids[0] != 0)
      throw RunError("decode of another slot than 0 without " + std::string(LOOM_EXT_DECODE_SLOTS));
    check(dec->decode(model, tokens, n, logits), "decode");
  }
}

void DecodeModel::follow() {
  std::vector<int64_t> ids;
  std::vector<int32_t> toks;
  std::vector<float> logits;
  for (;;) {
    std::vector<double> head(3);
    send(head);
    const auto op = (int)head[0];
    const auto a = (int64_t)head[1], b = (int64_t)head[2];
    if (op == kStop) return;
    if (op == kReset) {
      kv_reset(a, b);
    } else if (op == kClear) {
      kv_clear(a);
    } else {
      std::vector<double> body((size_t)(a + a * b));
      send(body);
      ids.assign(body.begin(), body.begin() + a);
      toks.assign(body.begin() + a, body.end());
      logits.resize((size_t)(a * vocab_));
      decode_slots(ids.data(), a, toks.data(), b, logits.data());
    }
  }
}

void DecodeModel::stop_followers() {
  std::vector<double> head = {kStop, 0, 0};
  if (rank_ == 0) send(head);
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
