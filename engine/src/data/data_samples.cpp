#include "data/data_samples.hpp"

#include "base/errors.hpp"
#include "data/feed.hpp"
#include "data/sampler.hpp"
#include "session/host.hpp"

namespace loom::engine {

void print_samples(Recipe& recipe, Registry& registry, const std::string& split, int64_t first,
                   int64_t count, std::ostream& out, bool targets) {
  int k = split == "train" ? kTrain : split == "valid" ? kValid : split == "test" ? kTest : -1;
  if (k < 0)
    throw UsageError("loom data samples: --split must be train, valid or test, got '" + split +
                     "'");
  if (count < 0) throw UsageError("loom data samples: --count must be >= 0");
  if (first < 0) throw UsageError("loom data samples: --first must be >= 0");
  Session session(recipe, registry);
  loom_comm_ref comm = session.comm();
  const int64_t world = comm.api->world_size(comm.self);
  const int64_t mbs = recipe.get_int("train", "micro_batch_size");
  int64_t gbs = recipe.get_int("train", "global_batch_size");
  if (gbs == 0) gbs = mbs * world;
  const int64_t seq_len = recipe.get_int("train", "seq_len");
  std::array<int64_t, 3> all = samples_wanted(recipe.get_int("train", "iters"), gbs,
                                              recipe.get_int("train", "eval_interval"),
                                              recipe.get_int("train", "eval_iters"));
  std::array<int64_t, 3> wanted{0, 0, 0};
  wanted[(size_t)k] = all[(size_t)k];
  if (wanted[(size_t)k] <= 0)
    throw UsageError("loom data samples: the " + split +
                     " split wants no samples (train.iters, eval_interval or eval_iters is 0)");
  auto samplers = build_samplers(recipe, session, wanted, seq_len);
  if (!samplers[(size_t)k])
    throw UsageError("loom data samples: the " + split +
                     " split has no documents (data.split = \"" +
                     recipe.get_string("data", "split") + "\")");
  Sampler& s = *samplers[(size_t)k];
  out << "# split " << split << ": " << s.size() << " samples (" << wanted[(size_t)k]
      << " wanted), seq_len " << seq_len << ", seed " << recipe.get_int("train", "seed") << "\n";
  for (size_t d = 0; d < s.num_datasets(); ++d) {
    out << "# dataset " << d << ": " << s.source(d).name << ", " << s.dataset_size(d) << " samples";
    if (!s.made()) {
      const GptIndices& x = s.dataset(d).indices();
      out << ", " << x.num_epochs << " epoch(s)"
          << (x.separate_last_epoch ? ", last epoch shuffled separately" : "");
    }
    out << "\n";
  }
  if (targets && s.made())
    throw UsageError("loom data samples --targets: dataset/" + recipe.plugin("data") +
                     " makes its own samples, whose arrays are not GPT tokens and targets");
  out << "# sample\tdataset\tname\tindex\t" << (targets ? "tokens\ttargets" : "first tokens")
      << "\n";
  // a sample-making dataset's first (B, T) array is its tokens
  const std::vector<loom_array_spec> made =
      s.made() ? Feed::provides(recipe, registry) : std::vector<loom_array_spec>{};
  Feed feed;
  feed.sampler = &s;
  if (s.made()) feed.allocate(1, seq_len, -1, made);
  if (targets)  // as training reads them: the loss mask, and packing's document ends
    feed.allocate(1, seq_len, Feed::packed_eod(recipe, session.tokenizer()));
  std::vector<int32_t> text((size_t)(seq_len + 1));
  const int64_t end = first + std::min(count, std::max<int64_t>(s.size() - first, 0));
  for (int64_t i = first; i < end; ++i) {
    Sampler::Origin o = s.origin(i);
    const int32_t* first = text.data();
    if (targets) {
      loom_microbatch mb{};
      feed.first = i;
      check(Feed::get(&feed, 0, &mb), "sample " + std::to_string(i));
      out << i << "\t" << o.dataset << "\t" << s.source(o.dataset).name << "\t" << o.index;
      for (const std::vector<int32_t>* v : {&feed.tokens, &feed.targets})
        for (size_t t = 0; t < v->size(); ++t) out << (t ? " " : "\t") << (*v)[t];
      out << "\n";
      continue;
    }
    if (s.made()) {
      loom_microbatch mb{};
      feed.first = i;
      check(Feed::get(&feed, 0, &mb), "sample " + std::to_string(i));
      first = static_cast<const int32_t*>(mb.arrays[0].data);
    } else {
      s.text(i, text.data());
    }
    out << i << "\t" << o.dataset << "\t" << s.source(o.dataset).name << "\t" << o.index << "\t";
    for (int64_t t = 0; t < std::min<int64_t>(8, seq_len + (s.made() ? 0 : 1)); ++t)
      out << (t ? " " : "") << first[t];
    out << "\n";
  }
  if (end - first < count) out << "# the split has only " << s.size() << " samples\n";
}

}  // namespace loom::engine
