#include "data/sampler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "base/errors.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"

namespace loom::engine {

const char* split_name(int split) {
  static const char* names[] = {"train", "valid", "test"};
  return names[split];
}

Sampler::Sampler(std::shared_ptr<GptDataset> dataset) { parts_.push_back(std::move(dataset)); }
Sampler::Sampler(std::shared_ptr<MadeSamples> dataset) { made_.push_back(std::move(dataset)); }

Sampler::Sampler(std::vector<std::shared_ptr<GptDataset>> parts, const std::vector<double>& weights,
                 int64_t size)
    : parts_(std::move(parts)) {
  blend_ = build_blend_index(normalise(weights), size);
  check_blend();
}
Sampler::Sampler(std::vector<std::shared_ptr<MadeSamples>> parts,
                 const std::vector<double>& weights, int64_t size)
    : made_(std::move(parts)) {
  blend_ = build_blend_index(normalise(weights), size);
  check_blend();
}

void Sampler::check_blend() const {
  for (size_t s = 0; s < blend_.dataset.size(); ++s) {
    const size_t k = (size_t)blend_.dataset[s];
    if (blend_.sample[s] >= dataset_size(k))
      throw RunError("blend: " + source(k).name + " has " + std::to_string(dataset_size(k)) +
                     " samples but the blend asks for sample " + std::to_string(blend_.sample[s]));
  }
}

std::unique_ptr<Sampler> Sampler::pairs(std::shared_ptr<GptDataset> chosen,
                                        std::shared_ptr<GptDataset> rejected,
                                        std::shared_ptr<GptDataset> chosen_mask,
                                        std::shared_ptr<GptDataset> rejected_mask) {
  auto s = std::make_unique<Sampler>(std::move(chosen));
  s->parts_.push_back(std::move(rejected));
  s->paired_ = true;
  if (chosen_mask || rejected_mask) s->masks_ = {std::move(chosen_mask), std::move(rejected_mask)};
  return s;
}

int64_t Sampler::pair_slot(int64_t i) const {
  if (!paired_) throw RunError("pair_slot: the samples are not preference pairs");
  const Origin o = origin(i);
  return 2 * (int64_t)parts_[0]->document(o.index) + (int64_t)o.dataset;
}

int64_t Sampler::size() const {
  if (paired_) return 2 * dataset_size(0);
  return blend_.dataset.empty() ? dataset_size(0) : (int64_t)blend_.dataset.size();
}

Sampler::Origin Sampler::origin(int64_t i) const {
  if (paired_ && i >= 0) return {(size_t)(i % 2), (i / 2) % dataset_size(0)};
  if (i < 0 || i >= size())
    throw RunError("sample " + std::to_string(i) + " is beyond the split's " +
                   std::to_string(size()) + " samples");
  if (blend_.dataset.empty()) return {0, i};
  return {(size_t)blend_.dataset[(size_t)i], blend_.sample[(size_t)i]};
}

int64_t Sampler::text(int64_t i, int32_t* out) const {
  if (made()) throw RunError(source(0).name + " makes its own samples: they have no plain text");
  Origin o = origin(i);
  return parts_[o.dataset]->text(o.index, out);
}

void Sampler::sample(int64_t i, int32_t* tokens, int32_t* targets) {
  const int64_t L = parts_[0]->seq_len();
  buf_.resize((size_t)(L + 1));
  const int64_t real = text(i, buf_.data());
  std::copy(buf_.begin(), buf_.end() - 1, tokens);
  std::copy(buf_.begin() + 1, buf_.end(), targets);
  for (int64_t t = std::max<int64_t>(real - 1, 0); t < L; ++t) targets[t] = -1;  // padding
  if (masks_.empty()) return;
  const Origin o = origin(i);
  if (!masks_[o.dataset]) return;
  mask_buf_.resize(buf_.size());
  masks_[o.dataset]->text(o.index, mask_buf_.data());
  for (int64_t t = 0; t < L; ++t)  // target t is token t + 1
    if (mask_buf_[(size_t)t + 1] == 0) targets[t] = -1;
}

void Sampler::fill(int64_t i, DLTensor* const* row, size_t num) const {
  if (!made()) throw RunError("the data makes GPT samples, not named arrays");
  Origin o = origin(i);
  made_[o.dataset]->fill(o.index, row, num);
}

namespace {

struct Builder {
  const Recipe& recipe;
  Session& session;
  int64_t seq_len;
  uint32_t seed;
  bool cache;
  std::map<std::string, std::shared_ptr<DocumentSource>> sources;  // by prefix ("" = [data])

  std::shared_ptr<DocumentSource> source(const std::string& prefix) {
    auto it = sources.find(prefix);
    if (it != sources.end()) return it->second;
    std::pair<const loom_dataset_api*, loom_dataset*> ds;
    std::string name;
    if (prefix.empty()) {
      ds = session.dataset();
      const char* cp = ds.first->cache_prefix ? ds.first->cache_prefix(ds.second) : nullptr;
      name = cp ? cp : "dataset/" + recipe.plugin("data");
    } else {
      ds = session.datasets({prefix})[0];
      name = prefix;
    }
    return sources[prefix] = DocumentSource::read(ds.first, ds.second, name);
  }

  // The loss mask of a chat dataset (loom preprocess --chat-format): data.loss_mask_prefix
  // for the [data] dataset, else <name>_chat_loss_mask_document beside a <name>_chat_document;
  // none with data.loss_on_prompt. Its documents must have the tokens' lengths.
  std::shared_ptr<DocumentSource> mask_of(const std::string& entry, const DocumentSource& src) {
    if (recipe.get_bool("data", "loss_on_prompt")) return nullptr;
    std::string prefix = entry.empty() ? recipe.get_string("data", "loss_mask_prefix") : "";
    if (prefix.empty()) {
      const std::string tail = "_chat_document";
      if (!src.name.ends_with(tail)) return nullptr;
      prefix = src.name.substr(0, src.name.size() - tail.size()) + "_chat_loss_mask_document";
      if (!std::filesystem::exists(prefix + ".idx")) return nullptr;
    }
    std::shared_ptr<DocumentSource> m = source(prefix);
    if (m->sizes != src.sizes)
      throw RunError("loss mask " + prefix + ": its " + std::to_string(m->sizes.size()) +
                     " documents are not the " + std::to_string(src.sizes.size()) +
                     " of the same lengths in " + src.name +
                     " (both come from one loom preprocess --chat-format run)");
    spdlog::info("data: loss mask {} for {} (data.loss_on_prompt = false)", prefix, src.name);
    return m;
  }

  std::shared_ptr<GptDataset> part(const std::shared_ptr<DocumentSource>& src, int64_t begin,
                                   int64_t end, int64_t samples) {
    GptIndexSpec spec;
    spec.doc_begin = begin;
    spec.doc_end = end;
    spec.seq_len = seq_len;
    spec.seed = seed;
    spec.num_samples = samples;
    spec.pad = recipe.get_bool("data", "pad_sequences");
    return std::make_shared<GptDataset>(src, spec, cache);
  }

  // One split over `entries` (prefix "" = the [data] dataset); `whole` = use every document
  // (per-split blends), else the `split` string's range.
  std::unique_ptr<Sampler> build(int k, const std::vector<BlendEntry>& entries, bool whole,
                                 int64_t wanted, const std::string& key) {
    const std::string split = recipe.get_string("data", "split");
    std::vector<double> weights;
    std::vector<std::pair<std::shared_ptr<DocumentSource>, SplitRanges>> ranges;
    size_t empty = 0;
    for (const BlendEntry& e : entries) {
      auto src = source(e.prefix);
      const int64_t n = (int64_t)src->sizes.size();
      SplitRanges r = whole ? SplitRanges{{0, 0, 0}, {n, n, n}} : split_documents(n, split);
      ranges.emplace_back(src, r);
      weights.push_back(e.weight);
      if (r.end[k] <= r.begin[k]) ++empty;
    }
    if (empty == entries.size()) return nullptr;
    if (empty > 0)
      throw RunError(key + ": some datasets have no documents in the " + split_name(k) +
                     " split (data.split = \"" + split + "\"); give each enough documents");
    const bool made = makes_samples(ranges[0].first->api);
    auto made_part = [&](size_t i, int64_t samples) {
      auto& [src, r] = ranges[i];
      return std::make_shared<MadeSamples>(src, r.begin[k], r.end[k], seq_len, seed, samples);
    };
    // each GPT part's loss mask, sampled by the same index (null where there is none)
    std::vector<std::shared_ptr<GptDataset>> masks;
    auto with_mask = [&](size_t i, int64_t samples) {
      auto& [src, r] = ranges[i];
      auto m = made ? nullptr : mask_of(entries[i].prefix, *src);
      auto tokens = part(src, r.begin[k], r.end[k], samples);
      // the mask's documents have the tokens' lengths (mask_of): the same index serves both
      masks.push_back(m ? std::make_shared<GptDataset>(m, *tokens) : nullptr);
      return tokens;
    };
    auto masked = [&](std::unique_ptr<Sampler> s) {
      if (std::any_of(masks.begin(), masks.end(), [](const auto& m) { return m != nullptr; }))
        s->set_masks(std::move(masks));
      return s;
    };
    if (entries.size() == 1) {
      if (made) return std::make_unique<Sampler>(made_part(0, wanted));
      return masked(std::make_unique<Sampler>(with_mask(0, wanted)));
    }
    std::vector<int64_t> sizes = blend_dataset_sizes(normalise(weights), wanted);
    if (made) {
      std::vector<std::shared_ptr<MadeSamples>> parts;
      for (size_t i = 0; i < ranges.size(); ++i) parts.push_back(made_part(i, sizes[i]));
      return std::make_unique<Sampler>(std::move(parts), weights, wanted);
    }
    std::vector<std::shared_ptr<GptDataset>> parts;
    for (size_t i = 0; i < ranges.size(); ++i) parts.push_back(with_mask(i, sizes[i]));
    return masked(std::make_unique<Sampler>(std::move(parts), weights, wanted));
  }
};

}  // namespace

std::array<std::unique_ptr<Sampler>, 3> build_samplers(const Recipe& recipe, Session& session,
                                                       const std::array<int64_t, 3>& wanted,
                                                       int64_t seq_len) {
  const int64_t seed = recipe.get_int("train", "seed");
  if (seed < 0 || seed > 0xffffffffll)
    throw UsageError("train.seed = " + std::to_string(seed) +
                     ": Megatron's data order uses RandomState(seed), which takes 0 to 2^32-1");
  Builder b{recipe, session, seq_len, (uint32_t)seed, recipe.get_bool("data", "cache"), {}};
  const std::string blend = recipe.get_string("data", "blend");
  const std::string per[3] = {recipe.get_string("data", "train_blend"),
                              recipe.get_string("data", "valid_blend"),
                              recipe.get_string("data", "test_blend")};
  const bool per_split = !per[0].empty() || !per[1].empty() || !per[2].empty();
  if (per_split && !blend.empty())
    throw UsageError(
        "data.blend and data.train_blend/valid_blend/test_blend are exclusive: set either one "
        "blend split by data.split, or separate datasets per split");
  if (per_split && per[0].empty())
    throw UsageError(
        "data.train_blend is empty: with separate datasets per split, the train "
        "split needs its own (\"w1 path1 w2 path2 ...\" or one path)");
  std::array<std::unique_ptr<Sampler>, 3> out;
  for (int k = 0; k < 3; ++k) {
    if (wanted[(size_t)k] <= 0) continue;
    if (per_split) {
      const std::string key = std::string("data.") + split_name(k) + "_blend";
      auto entries = parse_blend(per[k], key);
      if (!entries.empty()) out[(size_t)k] = b.build(k, entries, true, wanted[(size_t)k], key);
    } else if (!blend.empty()) {
      out[(size_t)k] =
          b.build(k, parse_blend(blend, "data.blend"), false, wanted[(size_t)k], "data.blend");
    } else {
      out[(size_t)k] = b.build(k, {{1.0, ""}}, false, wanted[(size_t)k], "data");
    }
    if (out[(size_t)k])
      spdlog::info("data: {} split: {} samples from {} dataset(s) ({} wanted)", split_name(k),
                   out[(size_t)k]->size(), out[(size_t)k]->num_datasets(), wanted[(size_t)k]);
  }
  return out;
}

}  // namespace loom::engine
