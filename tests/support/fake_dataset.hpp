// A dataset plugin's table over documents held in memory, for the tests of what the engine
// builds from a dataset (the sampler's splits and blends, the index cache): no plugin to load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/dataset.h"

namespace loomtest {

// The documents, and the cache prefix the dataset reports (none when empty).
struct FakeDs {
  std::vector<std::vector<int32_t>> docs;
  std::string prefix;
};

// The table whose loom_dataset* is a FakeDs*.
inline loom_dataset_api fake_api() {
  loom_dataset_api a{};
  a.struct_size = LOOM_DATASET_API_SIZE_V2;
  a.num_documents = [](loom_dataset* d) {
    return (int64_t) reinterpret_cast<FakeDs*>(d)->docs.size();
  };
  a.document = [](loom_dataset* d, int64_t i, const int32_t** ids, size_t* n) -> loom_error* {
    auto& v = reinterpret_cast<FakeDs*>(d)->docs[(size_t)i];
    *ids = v.data();
    *n = v.size();
    return nullptr;
  };
  a.cache_prefix = [](loom_dataset* d) -> const char* {
    auto* f = reinterpret_cast<FakeDs*>(d);
    return f->prefix.empty() ? nullptr : f->prefix.c_str();
  };
  return a;
}

}  // namespace loomtest
