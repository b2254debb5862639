#include "data/made_samples.hpp"

#include "base/errors.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/describe.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"

namespace loom::engine {
namespace {
void log_dataset(loom_host_context*, loom_log_level level, const char* message) noexcept {
  host_abi::log_as("dataset", level, message);
}
}  // namespace

bool makes_samples(const loom_dataset_api* api) {
  return api && api->struct_size >= LOOM_DATASET_API_SIZE_V2_3 && api->sample_spec &&
         api->build_samples && api->sample;
}

std::vector<loom_array_spec> dataset_sample_spec(const Recipe& recipe, Registry& registry) {
  const std::string name = recipe.plugin("data");
  const PluginInfo& info = registry.get(LOOM_KIND_DATASET, name);
  const auto* api = static_cast<const loom_dataset_api*>(info.desc->api);
  if (!makes_samples(api)) return {};
  // As for a model's batch_spec: the error and config slots only, no instance.
  const loom_host host = host_abi::common_table(nullptr, log_dataset);
  size_t num = 0;
  const loom_array_spec* specs = nullptr;
  if (loom_error* e = api->sample_spec(&host, &recipe.section("data"), &num, &specs)) {
    const std::string why = host_abi::error_message(e);
    host_abi::error_free(e);
    throw UsageError("dataset/" + name + ": sample_spec: " + why);
  }
  std::vector<loom_array_spec> out(specs, specs + num);
  for (const loom_array_spec& a : out) {
    const bool b = a.ndim == 1 && a.shape[0] == LOOM_DIM_BATCH;
    const bool bt = a.ndim == 2 && a.shape[0] == LOOM_DIM_BATCH &&
                    (a.shape[1] == LOOM_DIM_SEQ || a.shape[1] > 0);
    if (!loom_dtype_eq(a.dtype, DLDataType{kDLInt, 32, 1}) || !(b || bt))
      throw UsageError("dataset/" + name + ": sample array '" + a.name + "' is " +
                       loom::dtype_str(a.dtype) + " of rank " + std::to_string(a.ndim) +
                       "; the host feeds int32 arrays of shape (B), (B, T) or (B, K)");
  }
  return out;
}

MadeSamples::MadeSamples(std::shared_ptr<DocumentSource> src, int64_t doc_begin, int64_t doc_end,
                         int64_t seq_len, uint32_t seed, int64_t wanted)
    : src_(std::move(src)) {
  const loom_sample_index_args a{
      LOOM_SAMPLE_INDEX_ARGS_SIZE_V2_3, doc_begin, doc_end, seq_len, wanted, seed, nullptr};
  check(src_->api->build_samples(src_->ds, &a, &index_, &size_),
        src_->name + ": building the sample index");
  if (size_ < wanted)
    throw RunError(src_->name + ": the dataset built " + std::to_string(size_) + " samples where " +
                   std::to_string(wanted) + " were asked for");
}

void MadeSamples::fill(int64_t i, DLTensor* const* row, size_t num) const {
  check(src_->api->sample(src_->ds, index_, i, num, row),
        src_->name + ": sample " + std::to_string(i));
}

}  // namespace loom::engine
