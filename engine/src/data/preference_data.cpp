#include "data/preference_data.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "base/errors.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"

namespace loom::engine {

namespace {

constexpr const char* kChosen = "_chosen_document";

// The half of the pairs at `prefix`, read with the [data] plugin.
std::shared_ptr<DocumentSource> read_half(Session& session, const std::string& prefix) {
  if (!std::filesystem::exists(prefix + ".idx"))
    throw UsageError("train.objective = \"dpo\": " + prefix +
                     ".idx is missing (loom preprocess --chat-format F --preference-pairs writes "
                     "it beside the chosen half)");
  auto ds = session.datasets({prefix})[0];
  return DocumentSource::read(ds.first, ds.second, prefix);
}

}  // namespace

PairData::PairData(const Recipe& recipe, Session& session) : recipe_(recipe) {
  for (const char* key : {"blend", "train_blend", "valid_blend", "test_blend"})
    if (!recipe.get_string("data", key).empty())
      throw UsageError(std::string("data.") + key +
                       ": train.objective = \"dpo\" reads one preference dataset (data.prefix); "
                       "blends of pairs are not implemented");
  if (recipe.get_bool("data", "pack_sequences"))
    throw UsageError(
        "data.pack_sequences = true: train.objective = \"dpo\" keeps each conversation of a pair "
        "in its own padded row; set it to false");
  auto ds = session.dataset();
  const char* cp = ds.first->cache_prefix ? ds.first->cache_prefix(ds.second) : nullptr;
  const std::string name = cp ? cp : "";
  if (!name.ends_with(kChosen))
    throw UsageError(
        "train.objective = \"dpo\": data.prefix must name the chosen half of "
        "preference pairs, <p>" +
        std::string(kChosen) + " (loom preprocess --preference-pairs); got \"" + name + "\"");
  const std::string stem = name.substr(0, name.size() - std::string(kChosen).size());
  stem_ = stem;
  chosen_ = DocumentSource::read(ds.first, ds.second, name);
  rejected_ = read_half(session, stem + "_rejected_document");
  if (rejected_->sizes.size() != chosen_->sizes.size())
    throw RunError("preference pairs " + stem + ": " + std::to_string(chosen_->sizes.size()) +
                   " chosen but " + std::to_string(rejected_->sizes.size()) +
                   " rejected conversations (both come from one loom preprocess run)");
  if (!recipe.get_bool("data", "loss_on_prompt")) {
    chosen_mask_ = read_half(session, stem + "_chosen_loss_mask_document");
    rejected_mask_ = read_half(session, stem + "_rejected_loss_mask_document");
    if (chosen_mask_->sizes != chosen_->sizes || rejected_mask_->sizes != rejected_->sizes)
      throw RunError("preference pairs " + stem +
                     ": a loss mask's documents do not have its half's lengths (all four come "
                     "from one loom preprocess run)");
  }
  spdlog::info("data: {} preference pairs from {}{} ({})", chosen_->sizes.size(), stem, kChosen,
               chosen_mask_ ? "loss on the responses" : "data.loss_on_prompt: loss on every token");
}

std::string PairData::identity() const { return chosen_->sizes_digest + rejected_->sizes_digest; }

std::shared_ptr<GptDataset> PairData::part(const std::shared_ptr<DocumentSource>& src,
                                           int64_t begin, int64_t end, int64_t samples,
                                           bool in_order, int64_t seq_len) const {
  GptIndexSpec spec;
  spec.doc_begin = begin;
  spec.doc_end = end;
  spec.seq_len = seq_len;
  spec.seed = (uint32_t)recipe_.get_int("train", "seed");
  spec.num_samples = samples;
  spec.pad = true;
  spec.in_order = in_order;
  return std::make_shared<GptDataset>(src, spec, false);
}

// The rejected half and the masks sampled by the chosen half's index: a padded sample reads
// its document by id with that document's own length.
std::unique_ptr<Sampler> PairData::pairs_of(std::shared_ptr<GptDataset> chosen) const {
  auto like = [&](const std::shared_ptr<DocumentSource>& src) {
    return src ? std::make_shared<GptDataset>(src, *chosen) : nullptr;
  };
  auto rejected = like(rejected_), cm = like(chosen_mask_), rm = like(rejected_mask_);
  return Sampler::pairs(std::move(chosen), std::move(rejected), std::move(cm), std::move(rm));
}

std::array<std::unique_ptr<Sampler>, 3> PairData::samplers(const std::array<int64_t, 3>& wanted,
                                                           int64_t seq_len) const {
  const SplitRanges r = split_documents(documents(), recipe_.get_string("data", "split"));
  std::array<std::unique_ptr<Sampler>, 3> out;
  for (int k = 0; k < 3; ++k) {
    if (wanted[(size_t)k] <= 0 || r.end[k] <= r.begin[k]) continue;
    const int64_t pairs = (wanted[(size_t)k] + 1) / 2;
    out[(size_t)k] = pairs_of(part(chosen_, r.begin[k], r.end[k], pairs, false, seq_len));
    spdlog::info("data: {} split: {} pairs of documents [{}, {}) ({} sequences wanted)",
                 split_name(k), out[(size_t)k]->size() / 2, r.begin[k], r.end[k],
                 wanted[(size_t)k]);
  }
  return out;
}

std::unique_ptr<Sampler> PairData::in_order(int64_t seq_len) const {
  return pairs_of(part(chosen_, 0, documents(), documents(), true, seq_len));
}

}  // namespace loom::engine
