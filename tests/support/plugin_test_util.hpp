// Small helpers shared by the plugin tests: a dataset instance owned RAII-style, error
// inspection, and CPU tensors over std::vector storage.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "test_host.hpp"

namespace ptest {

using loomtest::Outcome;  // a call's error as (code, message)
using loomtest::outcome;

// A dataset plugin instance created with the test host; destroyed with the object.
class Dataset {
 public:
  Dataset(const loom_host* host, const std::string& name,
          const std::map<std::string, std::string>& values = {}) {
    auto* d = loomtest::load_descriptor("dataset", name);
    api_ = static_cast<const loom_dataset_api*>(d->api);
    cfg_ = loomtest::TestHost::config(d, values);
    result_ = outcome(api_->create(host, &cfg_, &self_));
  }
  ~Dataset() { api_->destroy(self_); }
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const Outcome& created() const { return result_; }
  const loom_dataset_api* api() const { return api_; }
  loom_dataset* self() const { return self_; }
  int64_t size() const { return api_->num_documents(self_); }
  std::vector<int32_t> doc(int64_t i) const {
    const int32_t* ids = nullptr;
    size_t n = 0;
    Outcome o = outcome(api_->document(self_, i, &ids, &n));
    REQUIRE_MESSAGE(o.ok(), o.message);
    return std::vector<int32_t>(ids, ids + n);
  }
  Outcome doc_error(int64_t i) const {
    const int32_t* ids = nullptr;
    size_t n = 0;
    return outcome(api_->document(self_, i, &ids, &n));
  }

 private:
  const loom_dataset_api* api_ = nullptr;
  loom_dataset* self_ = nullptr;
  loom_config cfg_;
  Outcome result_;
};

// A compact CPU tensor over its own storage.
template <class T>
struct HostTensor {
  std::vector<T> data;
  std::vector<int64_t> shape;
  DLTensor t{};
  HostTensor(std::vector<int64_t> s, DLDataType dtype) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.assign(static_cast<size_t>(n), T{});
    t.data = data.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = static_cast<int>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  DLTensor* get() { return &t; }
  // The interface tests/comm/conformance.hpp asks of a tensor type.
  void upload(const std::vector<T>& v) {
    REQUIRE(v.size() == data.size());
    std::copy(v.begin(), v.end(), data.begin());
  }
  std::vector<T> download() const { return data; }
};

template <class T>
void fill_iota(HostTensor<T>& h, T start, T step) {
  for (size_t i = 0; i < h.data.size(); ++i) h.data[i] = start + step * static_cast<T>(i);
}

}  // namespace ptest
