// Feed (feed.hpp): micro-batches from a sampler into the host arrays the model reads.
#include "data/feed.hpp"

#include <cmath>

#include "base/errors.hpp"
#include "data/made_samples.hpp"
#include "session/host.hpp"
#include "session/step_timer.hpp"

namespace loom::engine {

namespace {
const int64_t kSampleShape[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};

// Megatron's get_ltor_masks_and_position_ids with reset_position_ids, reset_attention_mask
// and eod_mask_loss, for one sample: positions restart after each EOD token, and the
// target at an EOD (the next document's first token) is not trained on.
void pack_documents(int32_t eod, int64_t T, const int32_t* tokens, int32_t* targets,
                    int32_t* positions) {
  int32_t p = 0;
  for (int64_t t = 0; t < T; ++t) {
    positions[t] = p++;
    if (tokens[t] == eod) targets[t] = -1, p = 0;
  }
}
}  // namespace

std::vector<loom_array_spec> Feed::provides(bool packed) {
  std::vector<loom_array_spec> a = {
      {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kSampleShape},
      {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, {kDLInt, 32, 1}, 2, kSampleShape}};
  if (packed)
    a.push_back({LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_POSITIONS, {kDLInt, 32, 1}, 2, kSampleShape});
  return a;
}

std::vector<loom_array_spec> Feed::provides(const Recipe& recipe, Registry& registry) {
  std::vector<loom_array_spec> made = dataset_sample_spec(recipe, registry);
  if (made.empty()) return provides(recipe.get_bool("data", "pack_sequences"));
  for (const char* key : {"pack_sequences", "pad_sequences"})
    if (recipe.get_bool("data", key))
      throw UsageError(std::string("data.") + key + " = true: dataset/" + recipe.plugin("data") +
                       " makes its own samples, which the host does not pack or pad");
  return made;
}

int64_t Feed::packed_eod(const Recipe& recipe, const loom_tokenizer_ref& tok) {
  if (!recipe.get_bool("data", "pack_sequences")) return -1;
  const int64_t eod = tok.api->eod_id(tok.self);
  if (eod < 0)
    throw UsageError(
        "data.pack_sequences = true: the tokenizer has no EOD token to end documents with");
  return eod;
}

void Feed::allocate(int64_t micro_batch, int64_t tokens_per_sample, int64_t packed_eod,
                    std::vector<loom_array_spec> made_spec) {
  mbs = micro_batch;
  seq_len = tokens_per_sample;
  eod = packed_eod;
  batch = std::make_unique<loom::HostBatch>(mbs, seq_len);
  made = std::move(made_spec);
  if (!made.empty()) {  // int32 (B), (B, T) or (B, K) each (dataset_sample_spec checked)
    made_data.resize(made.size());
    made_row.resize(made.size());
    for (size_t k = 0; k < made.size(); ++k) {
      const int64_t cols = made[k].ndim == 1                  ? 1
                           : made[k].shape[1] == LOOM_DIM_SEQ ? seq_len
                                                              : made[k].shape[1];
      made_row[k] = made[k].ndim == 1 ? 0 : cols;
      made_data[k].assign((size_t)(mbs * cols), 0);
      if (made[k].ndim == 1)
        batch->add_per_sample(made[k].name, made_data[k].data());
      else if (made[k].shape[1] == LOOM_DIM_SEQ)
        batch->add(made[k].name, made_data[k].data());
      else
        batch->add_fixed(made[k].name, made_data[k].data(), cols);
    }
    return;
  }
  tokens.resize((size_t)(mbs * seq_len));
  targets.resize((size_t)(mbs * seq_len));
  batch->tokens_targets(tokens.data(), targets.data());
  if (eod >= 0) {
    positions.resize((size_t)(mbs * seq_len));
    batch->add(LOOM_ARRAY_POSITIONS, positions.data());
  }
}

// Samples base .. base + mbs - 1 of a sample-making dataset, each into its row of every array.
void Feed::fill_made(int64_t base) {
  std::vector<DLTensor> rows(made.size());
  std::vector<DLTensor*> ptrs(made.size());
  for (int64_t b = 0; b < mbs; ++b) {
    for (size_t k = 0; k < made.size(); ++k) {
      const int64_t n = made[k].ndim == 2 ? made_row[k] : 1;
      rows[k] = DLTensor{};
      rows[k].data = made_data[k].data() + b * n;
      rows[k].device = {kDLCPU, 0};
      rows[k].dtype = {kDLInt, 32, 1};
      rows[k].ndim = made[k].ndim - 1;
      rows[k].shape = made[k].ndim == 2 ? &made_row[k] : nullptr;
      ptrs[k] = &rows[k];
    }
    sampler->fill(base + b, ptrs.data(), ptrs.size());
  }
}

loom_error* Feed::get(void* user, int64_t i, loom_microbatch* out) {
  auto* f = static_cast<Feed*>(user);
  if (StepTimer* t = StepTimer::active()) t->set_unit(-1);  // between the model's calls
  const StepTimer::Scope timed(TimeKind::data);
  try {
    // Data-parallel rank r takes samples r*mbs .. of each block of dp*mbs.
    const int64_t base = f->first + (i * f->dp + f->dp_rank) * f->mbs;
    if (!f->made.empty()) {
      f->fill_made(base);
    } else {
      for (int64_t b = 0; b < f->mbs; ++b) {
        const int64_t at = b * f->seq_len;
        f->sampler->sample(base + b, f->tokens.data() + at, f->targets.data() + at);
        if (f->eod >= 0)
          pack_documents((int32_t)f->eod, f->seq_len, f->tokens.data() + at, f->targets.data() + at,
                         f->positions.data() + at);
      }
    }
    *out = *f->batch->get();
    if (f->preference) f->attach_preference(i, base, out);
    if (f->device != nullptr && i >= 0 && (size_t)i < f->device->size())
      out->ext = &(*f->device)[(size_t)i].base;  // the copies the host made before the step
  } catch (const std::exception& e) {
    return host_abi::error_new(LOOM_ERR_IO, e.what());
  }
  return nullptr;
}

void Feed::prepare(int64_t micro) {
  if (!preference) return;
  Preference& p = *preference;
  p.reference.assign((size_t)(micro * mbs), 0.0);
  p.policy.assign((size_t)(micro * mbs), std::nan(""));
  p.sample.assign((size_t)(micro * mbs), -1);
  p.rows.assign((size_t)micro, loom_preference_rows{});
}

// Rows base .. base + mbs - 1 are whole pairs (mbs is even, base a multiple of it): row b's
// reference is its document's chosen (even sample) or rejected (odd) log-probability.
void Feed::attach_preference(int64_t i, int64_t base, loom_microbatch* out) {
  Preference& p = *preference;
  if (i < 0 || (size_t)i >= p.rows.size())
    throw RunError("micro-batch " + std::to_string(i) + " is beyond the " +
                   std::to_string(p.rows.size()) + " the DPO rows were prepared for");
  const size_t at = (size_t)(i * mbs);
  for (int64_t b = 0; b < mbs; ++b) {
    const int64_t sample = base + b;
    p.sample[at + (size_t)b] = sample;
    p.reference[at + (size_t)b] = p.table ? (*p.table)[(size_t)sampler->pair_slot(sample)] : 0.0;
  }
  p.rows[(size_t)i] = loom_preference_rows{
      {sizeof(loom_preference_rows), LOOM_EXT_PREFERENCE_ROWS, LOOM_EXT_REQUIRED, nullptr},
      p.reference.data() + at,
      p.policy.data() + at};
  out->ext = &p.rows[(size_t)i].base;
}

}  // namespace loom::engine
