// A minimal loom_host for plugin tests: loads plugin .so files by kind/name from the build
// tree, hands configs from a std::map, and owns the backend/attention/tokenizer instances
// that other plugins ask the host for. Independent of the engine, so a plugin is tested
// against the ABI alone (the way a third-party host would use it).
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/layout.hpp"
#include "loom/loom.h"

struct loom_error {
  loom_status code;
  std::string message;
};

// Keys of a test config: every value as TOML-ish text, typed on read.
struct loom_config {
  std::map<std::string, std::string> values;
};

namespace loomtest {

// The code and message of a call's error (freed here); code LOOM_OK when it succeeded.
struct Outcome {
  loom_status code = LOOM_OK;
  std::string message;
  bool ok() const { return code == LOOM_OK; }
};
inline Outcome outcome(loom_error* e) {
  Outcome o;
  if (e) {
    o.code = e->code;
    o.message = e->message;
    delete e;
  }
  return o;
}

// The build tree's plugin folder, or LOOM_TEST_PLUGIN_DIR from the environment when set:
// tools/gpu-bundle runs these programs far from the tree they were built in.
inline std::string plugin_dir() {
  const char* env = std::getenv("LOOM_TEST_PLUGIN_DIR");
  return env != nullptr && *env != '\0' ? env : LOOM_TEST_PLUGIN_DIR;
}

inline std::string plugin_path(const std::string& kind, const std::string& name) {
  return plugin_dir() + "/loom-" + kind + "-" + name + ".so";
}

inline const loom_plugin_descriptor* load_descriptor(const std::string& kind,
                                                     const std::string& name) {
  std::string path = plugin_path(kind, name);
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("dlopen " + path + ": " + dlerror());
  auto entry = (loom_plugin_entry_fn)dlsym(h, LOOM_PLUGIN_ENTRY_NAME);
  if (!entry) throw std::runtime_error("no entry symbol in " + path);
  const loom_plugin_descriptor* d = entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  if (!d) throw std::runtime_error("plugin refused the host ABI: " + path);
  return d;  // the library stays loaded for the test process
}

// Whether plugin kind/name lists extension `id` among its descriptor's capabilities.
inline bool lists_capability(const std::string& kind, const std::string& name, const char* id) {
  const loom_plugin_descriptor* d = load_descriptor(kind, name);
  for (const char* const* c = d->capabilities; c && *c; ++c)
    if (std::string(*c) == id) return true;
  return false;
}

class TestHost {
 public:
  TestHost() {
    host_.struct_size = LOOM_HOST_SIZE_V2;
    host_.abi_major = LOOM_ABI_MAJOR;
    host_.abi_minor = LOOM_ABI_MINOR;
    host_.ctx = reinterpret_cast<loom_host_context*>(this);
    host_.error_new = [](loom_status c, const char* m) { return new loom_error{c, m ? m : ""}; };
    host_.error_code = [](const loom_error* e) { return e->code; };
    host_.error_message = [](const loom_error* e) { return e->message.c_str(); };
    host_.error_free = [](loom_error* e) { delete e; };
    host_.log = [](loom_host_context*, loom_log_level lvl, const char* m) {
      if (lvl >= LOOM_LOG_WARN) std::fprintf(stderr, "[plugin] %s\n", m);
    };
    host_.config_get_bool = [](const loom_config* c, const char* k, int* out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = (*v == "true" || *v == "1");
      return nullptr;
    };
    host_.config_get_int = [](const loom_config* c, const char* k, int64_t* out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = std::stoll(*v);
      return nullptr;
    };
    host_.config_get_float = [](const loom_config* c, const char* k, double* out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = std::stod(*v);
      return nullptr;
    };
    host_.config_get_string = [](const loom_config* c, const char* k,
                                 const char** out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = v->c_str();
      return nullptr;
    };
    host_.get_backend = [](loom_host_context* ctx, loom_backend_ref* out) -> loom_error* {
      auto* self = reinterpret_cast<TestHost*>(ctx);
      if (!self->backend_.self) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "no backend"};
      *out = self->backend_;
      return nullptr;
    };
    host_.get_attention = [](loom_host_context* ctx, loom_attention_ref* out) -> loom_error* {
      auto* self = reinterpret_cast<TestHost*>(ctx);
      if (!self->attention_.self) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "no attention"};
      *out = self->attention_;
      return nullptr;
    };
    host_.get_tokenizer = [](loom_host_context* ctx, loom_tokenizer_ref* out) -> loom_error* {
      auto* self = reinterpret_cast<TestHost*>(ctx);
      if (!self->tokenizer_.self) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "no tokenizer"};
      *out = self->tokenizer_;
      return nullptr;
    };
    host_.get_comm = [](loom_host_context* ctx, loom_comm_ref* out) -> loom_error* {
      auto* self = reinterpret_cast<TestHost*>(ctx);
      if (!self->comm_.self) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "no comm"};
      *out = self->comm_;
      return nullptr;
    };
    host_.rng_seed = [](loom_host_context*, const char* stream) -> uint64_t {
      uint64_t h = 1234;
      for (const char* p = stream; *p; ++p) h = h * 1099511628211ull ^ (uint8_t)*p;
      return h;
    };
    layout_ = loom::layout::coordinates(loom::layout::Degrees{}, 1, 0);
    host_.struct_size = LOOM_HOST_SIZE_V2;
    host_.get_layout = [](loom_host_context* ctx, loom_parallel_layout* out) -> loom_error* {
      auto* self = reinterpret_cast<TestHost*>(ctx);
      if (!out || out->struct_size < LOOM_PARALLEL_LAYOUT_SIZE_V2)
        return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "get_layout: struct_size too small"};
      loom::layout::copy_layout(self->layout_, out);
      return nullptr;
    };
    host_.get_group = [](loom_host_context* ctx, loom_group_kind kind,
                         loom_comm_group** out) -> loom_error* {
      auto* self = reinterpret_cast<TestHost*>(ctx);
      if ((int)kind < 0 || (int)kind >= kNumGroups)
        return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "get_group: unknown group kind"};
      *out = self->groups_[kind];
      return nullptr;
    };
  }

  // Lays the loaded comm's world out as the engine does (tensor fastest, then context,
  // data, pipeline) and creates every group; plugins see them through get_layout and
  // get_group. COLLECTIVE over the world.
  void setup_parallel(const loom::layout::Degrees& d) {
    if (!comm_.self) throw std::runtime_error("setup_parallel: load a comm first");
    const int world = comm_.api->world_size(comm_.self);
    const int rank = comm_.api->world_rank(comm_.self);
    auto problems = loom::layout::problems(d, world);
    if (!problems.empty()) throw std::runtime_error("setup_parallel: " + problems[0]);
    layout_ = loom::layout::coordinates(d, world, rank);
    for (loom_group_kind k : loom::layout::kAllGroups) {
      std::vector<int> colors = loom::layout::colors(d, world, k);
      check(
          loom::comm_group_create(comm_, colors.data(), loom::layout::group_name(k), &groups_[k]));
    }
  }
  const loom_parallel_layout& layout() const { return layout_; }
  ~TestHost() {
    if (dataset_api_ && dataset_) dataset_api_->destroy(dataset_);
    for (loom_comm_group*& g : groups_)
      if (g && comm_.self) comm_.api->group_destroy(comm_.self, g);
    if (tokenizer_.self) tokenizer_.api->destroy(tokenizer_.self);
    if (attention_.self) attention_.api->destroy(attention_.self);
    if (comm_.self) comm_.api->destroy(comm_.self);
    if (backend_.self) backend_.api->destroy(backend_.self);
  }
  TestHost(const TestHost&) = delete;
  TestHost& operator=(const TestHost&) = delete;

  const loom_host* host() const { return &host_; }

  // Throws with the plugin's message when a call fails.
  void check(loom_error* e) const {
    if (!e) return;
    std::string m = e->message;
    delete e;
    throw std::runtime_error(m);
  }

  // A config with the plugin's schema defaults, overridden by `values`.
  static loom_config config(const loom_plugin_descriptor* d,
                            const std::map<std::string, std::string>& values = {}) {
    loom_config c;
    for (size_t i = 0; i < d->num_params; ++i)
      if (d->params[i].default_value) c.values[d->params[i].name] = d->params[i].default_value;
    for (auto& [k, v] : values) c.values[k] = v;
    return c;
  }

  // The table plugins created from now on get (a profiler's timed copy of the backend's).
  void use_backend(loom_backend_ref ref) { backend_ = ref; }

  loom_backend_ref load_backend(const std::string& name,
                                const std::map<std::string, std::string>& values = {}) {
    auto* d = load_descriptor("backend", name);
    backend_cfg_ = config(d, values);
    backend_.api = static_cast<const loom_backend_api*>(d->api);
    check(backend_.api->create(&host_, &backend_cfg_, &backend_.self));
    return backend_;
  }
  loom_attention_ref load_attention(const std::string& name,
                                    const std::map<std::string, std::string>& values = {}) {
    auto* d = load_descriptor("attention", name);
    attention_cfg_ = config(d, values);
    attention_.api = static_cast<const loom_attention_api*>(d->api);
    check(attention_.api->create(&host_, &attention_cfg_, &attention_.self));
    return attention_;
  }
  loom_tokenizer_ref load_tokenizer(const std::string& name,
                                    const std::map<std::string, std::string>& values = {}) {
    auto* d = load_descriptor("tokenizer", name);
    tokenizer_cfg_ = config(d, values);
    tokenizer_.api = static_cast<const loom_tokenizer_api*>(d->api);
    check(tokenizer_.api->create(&host_, &tokenizer_cfg_, &tokenizer_.self));
    return tokenizer_;
  }
  loom_comm_ref load_comm(const std::string& name,
                          const std::map<std::string, std::string>& values = {}) {
    auto* d = load_descriptor("comm", name);
    comm_cfg_ = config(d, values);
    comm_.api = static_cast<const loom_comm_api*>(d->api);
    check(comm_.api->create(&host_, &comm_cfg_, &comm_.self));
    return comm_;
  }

 private:
  static const std::string* find(const loom_config* c, const char* k) {
    auto it = c->values.find(k);
    return it == c->values.end() ? nullptr : &it->second;
  }
  static loom_error* missing(const char* k) {
    return new loom_error{LOOM_ERR_INVALID_ARGUMENT, std::string("no config key ") + k};
  }

  static constexpr int kNumGroups = loom::layout::kNumGroupKinds;
  loom_host host_{};
  loom_parallel_layout layout_{};
  loom_comm_group* groups_[kNumGroups] = {};
  loom_backend_ref backend_{nullptr, nullptr};
  loom_attention_ref attention_{nullptr, nullptr};
  loom_tokenizer_ref tokenizer_{nullptr, nullptr};
  loom_comm_ref comm_{nullptr, nullptr};
  const loom_dataset_api* dataset_api_ = nullptr;
  loom_dataset* dataset_ = nullptr;
  loom_config backend_cfg_, attention_cfg_, tokenizer_cfg_, comm_cfg_;
};

}  // namespace loomtest
