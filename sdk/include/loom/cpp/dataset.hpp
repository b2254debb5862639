// Loom SDK C++ helpers: the C function table of a dataset class, of documents only or one
// that makes its own samples (ABI 2.3: sample_spec, build_samples, sample), and the check of
// the arrays the host hands to `sample`.
#pragma once

#include <string>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/dataset.h"

namespace loom {

// Hands `v` out as a document's ids: a valid pointer even when it is empty, as the C ABI
// wants one for every document. `v` must outlive the caller's use (the next call).
inline void view_ids(const std::vector<int32_t>& v, const int32_t** ids, size_t* num_ids) {
  static const int32_t kNone = 0;
  *ids = v.empty() ? &kNone : v.data();
  *num_ids = v.size();
}

// The `create` of a dataset class whose constructor DS(host, config) reads its own keys.
template <class DS>
loom_error* create_dataset(const loom_host* host, const loom_config* cfg, loom_dataset** out) {
  return guard(host,
               [&] { *out = reinterpret_cast<loom_dataset*>(new DS(host, Config(host, cfg))); });
}

// `DS` has host(), num_documents(), document(i, ids, num_ids) and cache_prefix() (a C string
// or nullptr) with the contracts of loom_dataset_api. A dataset of documents only (the host
// makes GPT samples from them) takes `api(create)`; every call that can fail goes through
// loom::guard.
template <class DS>
struct DocumentDatasetTable {
  using CreateFn = loom_error* (*)(const loom_host*, const loom_config*, loom_dataset**);
  static DS* self(loom_dataset* d) { return reinterpret_cast<DS*>(d); }
  static void destroy(loom_dataset* d) { delete self(d); }
  static int64_t num_documents(loom_dataset* d) { return self(d)->num_documents(); }
  static loom_error* document(loom_dataset* d, int64_t i, const int32_t** ids, size_t* num) {
    return guard(self(d)->host(), [&] { self(d)->document(i, ids, num); });
  }
  static const char* cache_prefix(loom_dataset* d) { return self(d)->cache_prefix(); }
  static constexpr loom_dataset_api api(CreateFn create) {
    return {LOOM_DATASET_API_SIZE_V2_3,
            create,
            destroy,
            num_documents,
            document,
            cache_prefix,
            nullptr,
            nullptr,
            nullptr};  // sample slots: the host makes GPT samples
  }
};

// A dataset class that makes its own samples: `DS` also has build(args, index, num_samples)
// and sample(index, i, num_arrays, arrays); the plugin writes `create` and `sample_spec`,
// which read its own keys.
template <class DS>
struct SampleDatasetTable : DocumentDatasetTable<DS> {
  using Base = DocumentDatasetTable<DS>;
  using Base::self;
  using typename Base::CreateFn;
  using SpecFn = loom_error* (*)(const loom_host*, const loom_config*, size_t*,
                                 const loom_array_spec**);
  static loom_error* build_samples(loom_dataset* d, const loom_sample_index_args* a, int64_t* index,
                                   int64_t* num_samples) {
    return guard(self(d)->host(), [&] {
      require(a && index && num_samples, "build_samples got NULL");
      require(a->struct_size >= LOOM_SAMPLE_INDEX_ARGS_SIZE_V2_3,
              "build_samples args missing or too old");
      self(d)->build(*a, index, num_samples);
    });
  }
  static loom_error* sample(loom_dataset* d, int64_t index, int64_t i, size_t num,
                            DLTensor* const* out) {
    return guard(self(d)->host(), [&] { self(d)->sample(index, i, num, out); });
  }
  static constexpr loom_dataset_api api(CreateFn create, SpecFn spec) {
    return {LOOM_DATASET_API_SIZE_V2_3,
            create,
            Base::destroy,
            Base::num_documents,
            Base::document,
            Base::cache_prefix,
            spec,
            build_samples,
            sample};
  }
};

// Fills int32 array `a` of (T) with `v`, then `pad` after its end (v.size() <= T).
inline void fill_padded(DLTensor* a, const std::vector<int32_t>& v, int64_t T, int32_t pad) {
  auto* p = static_cast<int32_t*>(a->data);
  for (int64_t t = 0; t < T; ++t) p[t] = t < (int64_t)v.size() ? v[(size_t)t] : pad;
}
// Fills int32 array `a` of (T) with a padding mask: 1 for the first `len` positions, then 0.
inline void fill_padding_mask(DLTensor* a, size_t len, int64_t T) {
  auto* p = static_cast<int32_t*>(a->data);
  for (int64_t t = 0; t < T; ++t) p[t] = t < (int64_t)len ? 1 : 0;
}

// The arrays a `sample` call fills: arrays[k] is specs[k] less its batch dimension, int32 host
// memory of (T) or (). Throws naming `who` and the array otherwise.
inline void check_sample_arrays(const std::string& who, const loom_array_spec* specs, size_t want,
                                size_t num, DLTensor* const* arrays, int64_t T) {
  require(num == want && arrays != nullptr,
          who + ": sample needs " + std::to_string(want) + " arrays, got " + std::to_string(num));
  for (size_t k = 0; k < num; ++k) {
    const DLTensor* a = arrays[k];
    const bool ok = a && a->data && a->device.device_type == kDLCPU &&
                    loom_dtype_eq(a->dtype, DLDataType{kDLInt, 32, 1}) &&
                    a->ndim == specs[k].ndim - 1 && (a->ndim == 0 || a->shape[0] == T);
    if (ok) continue;
    std::string msg = who;  // appended piecewise: GCC 12 misreads "(" + to_string (-Wrestrict)
    msg.append(": array ").append(specs[k].name).append(" is not host int32 of (");
    if (specs[k].ndim == 2) msg.append(std::to_string(T));
    throw Error(LOOM_ERR_INVALID_ARGUMENT, msg.append(")"));
  }
}

}  // namespace loom
