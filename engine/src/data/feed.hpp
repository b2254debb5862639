// The host's side of the pipeline schedule's get_microbatch: a micro-batch's host arrays
// filled from a sampler (GPT samples, packed or not, or the arrays of a dataset that makes its
// own samples). The training loop and `loom data samples` both read samples through it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/sampler.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/model_step.hpp"
#include "loom/loom.h"
#include "recipe/recipe.hpp"

namespace loom::engine {

// State the pipeline schedule's get_microbatch callback reads: GPT samples (Megatron's
// GPTDataset), which provide the arrays `provides` lists.
struct Feed {
  // GPT samples: tokens, targets: int32 (B, T); with packed sequences also positions
  static std::vector<loom_array_spec> provides(bool packed);
  // What the recipe's data provides: a sample-making dataset's arrays, else GPT's.
  static std::vector<loom_array_spec> provides(const Recipe& recipe, Registry& registry);

  Sampler* sampler = nullptr;
  int64_t first = 0;  // sample index of micro-batch 0 of data-parallel rank 0
  int64_t mbs = 0, seq_len = 0, dp = 1, dp_rank = 0;
  double loss_scale = 0;
  std::vector<int32_t> tokens, targets, positions;
  std::unique_ptr<loom::HostBatch> batch;  // names and views of the arrays
  int64_t eod = -1;  // packed sequences: documents end at this token; -1 = not packed
  // A sample-making dataset's arrays (int32 (B), (B, T) or (B, K)), their buffers and each
  // one's row length (T or K; 0 for (B)).
  std::vector<loom_array_spec> made;
  std::vector<std::vector<int32_t>> made_data;
  std::vector<int64_t> made_row;

  // DPO (train.objective = "dpo"): micro-batch i of a schedule run carries rows[i]
  // (loom.preference-rows/1) over its rows of `reference` and `policy`. `table` holds the
  // reference model's log-probability of each pair document's chosen (2d) and rejected (2d+1)
  // conversation; null in the pass that computes it, which reads `policy` and `document`.
  struct Preference {
    const std::vector<double>* table = nullptr;
    std::vector<double> reference, policy;   // (micro x mbs) each row's
    std::vector<int64_t> sample;             // (micro x mbs) each row's sample index
    std::vector<loom_preference_rows> rows;  // (micro)
  };
  std::unique_ptr<Preference> preference;  // null unless DPO
  // train.cuda_graph's device copies of micro-batch i's arrays (loom.microbatch-device/1), on
  // the micro-batches get hands out while a recorded step runs; null otherwise.
  const std::vector<loom_microbatch_device>* device = nullptr;
  // Sizes `preference` for a run of `micro` micro-batches (nothing without DPO).
  void prepare(int64_t micro);

  // allocate's packed_eod for the recipe: the tokenizer's EOD with data.pack_sequences (a
  // UsageError when it has none), else -1.
  static int64_t packed_eod(const Recipe& recipe, const loom_tokenizer_ref& tok);
  void allocate(int64_t micro_batch, int64_t tokens_per_sample, int64_t packed_eod,
                std::vector<loom_array_spec> made_spec = {});
  static loom_error* get(void* user, int64_t i, loom_microbatch* out);

 private:
  void fill_made(int64_t base);
  void attach_preference(int64_t i, int64_t base, loom_microbatch* out);
};

}  // namespace loom::engine
