// Loom SDK C++ helpers for the model contract (loom/model.h):
//   HostBatch    a micro-batch of named int32 (B, T) host arrays, for hosts, tests and tools
//   batch_ids    a model's checked read of one such array
//   model_step   one micro-batch through a model that is a single pipeline stage (stage 0
//                of 1): forward, then backward unless `backward` is false. What a schedule
//                does at pipeline = 1. The caller still calls finish_grads once per step
//                when the model uses tensor or sequence parallelism.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/model.h"

namespace loom {

class HostBatch {
 public:
  HostBatch(int64_t batch, int64_t seq_len) : shape_{batch, seq_len} {}
  // Movable (the views are re-pointed at each get()), not copyable: a copy would still
  // view the first one's data.
  HostBatch(HostBatch&&) = default;
  HostBatch& operator=(HostBatch&&) = default;
  HostBatch(const HostBatch&) = delete;
  HostBatch& operator=(const HostBatch&) = delete;

  // Adds the array `name` over data[B*T] (borrowed: it must outlive every use of get()).
  HostBatch& add(const char* name, const int32_t* data) {
    names_.push_back(name);
    DLTensor t{};
    t.data = const_cast<int32_t*>(data);
    t.device = {kDLCPU, 0};
    t.ndim = 2;
    t.dtype = {kDLInt, 32, 1};
    arrays_.push_back(t);
    columns_.push_back(-1);  // T
    return *this;
  }
  // Adds the array `name` over data[B*K], shape (B, K) for a fixed K (T5's decoder arrays).
  HostBatch& add_fixed(const char* name, const int32_t* data, int64_t K) {
    add(name, data);
    columns_.back() = K;
    return *this;
  }
  // Adds the per-sample array `name` over data[B], shape (B) (BERT's sop_labels).
  HostBatch& add_per_sample(const char* name, const int32_t* data) {
    add(name, data);
    arrays_.back().ndim = 1;
    return *this;
  }
  // The GPT pair: tokens and targets.
  HostBatch& tokens_targets(const int32_t* tokens, const int32_t* targets) {
    return add(LOOM_ARRAY_TOKENS, tokens).add(LOOM_ARRAY_TARGETS, targets);
  }
  const loom_microbatch* get() {
    shapes_.resize(arrays_.size());
    for (size_t i = 0; i < arrays_.size(); ++i) {
      shapes_[i] = {shape_[0], columns_[i] < 0 ? shape_[1] : columns_[i]};
      arrays_[i].shape = shapes_[i].data();
    }
    mb_ = loom_microbatch{LOOM_MICROBATCH_SIZE_V2, shape_[0],      shape_[1], names_.size(),
                          names_.data(),           arrays_.data(), nullptr};
    return &mb_;
  }

 private:
  int64_t shape_[2];
  std::vector<const char*> names_;
  std::vector<DLTensor> arrays_;
  std::vector<int64_t> columns_;                // -1: T; else a fixed K
  std::vector<std::array<int64_t, 2>> shapes_;  // each array's (B, T or K)
  loom_microbatch mb_{};
};

// The int32 (B, T) host array `name` of mb; a clear error naming `who` when it is missing or
// is not what the contract says.
// `cols`: the array's second extent, when it is not the micro-batch's seq_len (T5's decoder
// arrays, (B, decoder_seq_len)).
inline const int32_t* batch_ids(const loom_microbatch& mb, const char* name, const std::string& who,
                                int64_t cols = -1) {
  const DLTensor* t = loom_microbatch_find(&mb, name);
  require(t != nullptr, who + ": the micro-batch has no array '" + name + "'");
  if (cols < 0) cols = mb.seq_len;
  require(t->device.device_type == kDLCPU && t->dtype.code == kDLInt && t->dtype.bits == 32 &&
              t->dtype.lanes == 1 && t->ndim == 2 && t->shape[0] == mb.batch &&
              t->shape[1] == cols && t->strides == nullptr,
          who + ": micro-batch array '" + name + "' must be dense host int32 (" +
              std::to_string(mb.batch) + ", " + std::to_string(cols) + ")");
  return static_cast<const int32_t*>(t->data) + t->byte_offset / sizeof(int32_t);
}

// The real-token count of each row of a padding mask (B, T) (padding_mask: 1 real, 0
// padding): every row is its real tokens then padding, with at least one real token, or the
// error names the row and position (BERT's and T5's encoder padding).
inline std::vector<int32_t> padding_lengths(const int32_t* mask, int64_t B, int64_t T,
                                            const std::string& who) {
  auto s = [](int64_t v) { return std::to_string(v); };
  std::vector<int32_t> lengths((size_t)B);
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = 0;
    while (len < T && mask[b * T + len] == 1) ++len;
    for (int64_t t = len; t < T; ++t)
      require(mask[b * T + t] == 0, who + ": padding_mask[" + s(b) + "][" + s(t) +
                                        "] = " + s(mask[b * T + t]) +
                                        ": a row is its real tokens (1) then padding (0)");
    require(len > 0, who + ": padding_mask row " + s(b) + " has no real token");
    lengths[(size_t)b] = (int32_t)len;
  }
  return lengths;
}

// Returns the model's first (main) loss term in *loss_sum and *count.
inline loom_error* model_step(const loom_model_api* api, loom_model* m, const loom_microbatch* mb,
                              double loss_scale, bool backward, double* loss_sum, double* count) {
  loom_stage_forward_args f{};
  f.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
  f.mb = mb;
  f.loss_scale = loss_scale;
  f.no_grad = backward ? 0 : 1;
  if (loom_error* e = api->stage_forward(m, &f)) return e;
  if (loss_sum) *loss_sum = f.num_losses > 0 ? f.losses[0].sum : 0.0;
  if (count) *count = f.num_losses > 0 ? f.losses[0].count : 0.0;
  if (!backward) return nullptr;
  loom_stage_backward_args b{};
  b.struct_size = LOOM_STAGE_BACKWARD_ARGS_SIZE_V2;
  return api->stage_backward(m, &b);
}

}  // namespace loom
