// What the libFuzzer harnesses share: a minimal loom_host (errors, logging, configs from a
// std::map, a tokenizer to hand out), a per-process scratch folder for the files a reader
// insists on opening, and the tokenizer drill every tokenizer harness runs.
//
// Plugins are compiled into the harness (the sources of the product, instrumented), so a
// harness is one plugin plus this host; nothing is dlopen'ed.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/errors.hpp"  // the engine's loom_error: (code, message), shared with engine sources
#include "loom/loom.h"

namespace loomfuzz {

// Keys of a plugin config as text, typed on read (the plugin's schema defaults first).
struct Config {
  std::map<std::string, std::string> values;
};

class Host {
 public:
  Host() {
    h_.struct_size = LOOM_HOST_SIZE_V2;
    h_.abi_major = LOOM_ABI_MAJOR;
    h_.abi_minor = LOOM_ABI_MINOR;
    h_.ctx = reinterpret_cast<loom_host_context*>(this);
    h_.error_new = [](loom_status c, const char* m) { return new loom_error{c, m ? m : ""}; };
    h_.error_code = [](const loom_error* e) { return e->code; };
    h_.error_message = [](const loom_error* e) { return e->message.c_str(); };
    h_.error_free = [](loom_error* e) { delete e; };
    h_.log = [](loom_host_context*, loom_log_level, const char*) {};
    h_.config_get_bool = [](const loom_config* c, const char* k, int* out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = *v == "true" || *v == "1";
      return nullptr;
    };
    h_.config_get_int = [](const loom_config* c, const char* k, int64_t* out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = std::strtoll(v->c_str(), nullptr, 10);
      return nullptr;
    };
    h_.config_get_float = [](const loom_config* c, const char* k, double* out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = std::strtod(v->c_str(), nullptr);
      return nullptr;
    };
    h_.config_get_string = [](const loom_config* c, const char* k,
                              const char** out) -> loom_error* {
      const std::string* v = find(c, k);
      if (!v) return missing(k);
      *out = v->c_str();
      return nullptr;
    };
    h_.get_tokenizer = [](loom_host_context* ctx, loom_tokenizer_ref* out) -> loom_error* {
      auto* self = reinterpret_cast<Host*>(ctx);
      if (!self->tokenizer_.self) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "no tokenizer"};
      *out = self->tokenizer_;
      return nullptr;
    };
  }
  const loom_host* host() const { return &h_; }
  void set_tokenizer(loom_tokenizer_ref t) { tokenizer_ = t; }

  // The plugin's schema defaults, then `values` over them.
  static Config config(const loom_plugin_descriptor* d,
                       const std::map<std::string, std::string>& values) {
    Config c;
    for (size_t i = 0; i < d->num_params; ++i)
      if (d->params[i].default_value) c.values[d->params[i].name] = d->params[i].default_value;
    for (const auto& [k, v] : values) c.values[k] = v;
    return c;
  }

 private:
  static const std::string* find(const loom_config* c, const char* k) {
    const auto& m = reinterpret_cast<const Config*>(c)->values;
    auto it = m.find(k);
    return it == m.end() ? nullptr : &it->second;
  }
  static loom_error* missing(const char* k) {
    return new loom_error{LOOM_ERR_INVALID_ARGUMENT, std::string("no config key ") + k};
  }
  loom_host h_{};
  loom_tokenizer_ref tokenizer_{nullptr, nullptr};
};

// With LOOM_FUZZ_VERBOSE=1 set, the harnesses print why an input was refused (to check that
// a seed gets as far as it should): `LOOM_FUZZ_VERBOSE=1 build-fuzz/bin/fuzz_recipe FILE`.
inline void note(const std::string& what) {
  static const bool on = std::getenv("LOOM_FUZZ_VERBOSE") != nullptr;
  if (on) std::fprintf(stderr, "refused: %s\n", what.c_str());
}

inline const loom_config* as_config(const Config& c) {
  return reinterpret_cast<const loom_config*>(&c);
}

// Frees a plugin's error (noted); true when there was none.
inline bool ok(loom_error* e) {
  if (e) note(e->message);
  delete e;
  return e == nullptr;
}

// A folder of this process's own under $TMPDIR (or /tmp), removed at exit.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/loom-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::perror("loom fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

// Writes `data` to scratch()/name and returns the path.
inline std::string put_file(const std::string& name, std::string_view data) {
  const std::filesystem::path p = scratch() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(data.data(), data.size());
  return p.string();
}

// A little-endian reader over the fuzz input.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  size_t left() const { return n_; }
  uint8_t byte() { return n_ ? (--n_, *p_++) : 0; }
  uint16_t u16() {
    const unsigned lo = byte();  // first: the operands of | are not sequenced
    return static_cast<uint16_t>(lo | byte() << 8);
  }
  std::string_view take(size_t k) {
    k = std::min(k, n_);
    std::string_view s(reinterpret_cast<const char*>(p_), k);
    p_ += k;
    n_ -= k;
    return s;
  }
  std::string_view rest() { return take(n_); }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Reads a file of the source tree (a fixed model the harness tokenises with).
inline std::string source_file(const std::string& rel) {
  return std::string(LOOM_FUZZ_SOURCE_DIR) + "/" + rel;
}

// The tokenizer drill, on instance `t` of `api`, driven by `in`:
//   mode 0: encode the rest, then decode what came out
//   mode 1: decode the rest as 16-bit ids in [-1, vocab] (out of range on purpose too)
//   mode 2: token_to_id of the rest as text, then id_to_token (and back) of ids read from it
// Errors are fine (a clear refusal); a crash or a sanitizer report is the bug.
inline void drill(const loom_tokenizer_api* api, loom_tokenizer* t, int mode, Bytes& in) {
  const int64_t vocab = api->vocab_size(t);
  (void)api->eod_id(t);
  if (mode == 0) {
    const std::string_view text = in.rest();
    const int32_t* ids = nullptr;
    size_t n = 0;
    if (!ok(api->encode(t, text.data(), text.size(), &ids, &n))) return;
    for (size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= vocab) std::abort();  // encode made an id outside the vocab
    const std::vector<int32_t> copy(ids, ids + n);
    const char* s = nullptr;
    size_t len = 0;
    (void)ok(api->decode(t, copy.data(), copy.size(), &s, &len));
    return;
  }
  const std::string_view raw = in.rest();
  Bytes again(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  if (mode == 2 && api->struct_size >= LOOM_TOKENIZER_API_SIZE_V2_3 && api->token_to_id) {
    const int64_t id = api->token_to_id(t, raw.data(), raw.size());
    if (id < -1 || id >= vocab) std::abort();  // neither an id nor "none"
  }
  std::vector<int32_t> ids;
  while (again.left() >= 2) ids.push_back(static_cast<int32_t>(again.u16() % (vocab + 2)) - 1);
  if (mode == 1) {
    const char* s = nullptr;
    size_t len = 0;
    (void)ok(api->decode(t, ids.data(), ids.size(), &s, &len));
    return;
  }
  if (api->struct_size < LOOM_TOKENIZER_API_SIZE_V2_3 || !api->id_to_token) return;
  for (int32_t id : ids) {
    const char* s = nullptr;
    size_t len = 0;
    if (!ok(api->id_to_token(t, id, &s, &len))) continue;
    if (api->token_to_id(t, s, len) < 0) std::abort();  // a stored token must be found again
  }
}

// A tokenizer harness: one plugin, a fixed model the text modes run on (created once), and
// mode 3, a model taken from the input. Input: byte 0 the mode (its low 2 bits) and option
// bits for the plugin; modes 0-2 then as drill(); mode 3 then a 16-bit length, that many
// bytes of text, and the model file(s) as the rest.
struct TokenizerHarness {
  const loom_plugin_descriptor* desc;
  std::map<std::string, std::string> fixed;  // config of the fixed model
  // The config of a model taken from the input (writing its files); `bits` = byte 0 >> 2.
  std::map<std::string, std::string> (*from_input)(std::string_view model, unsigned bits);

  int run(const uint8_t* data, size_t size) {
    static Host host;
    const auto* api = static_cast<const loom_tokenizer_api*>(desc->api);
    Bytes in(data, size);
    const unsigned first = in.byte();
    const int mode = static_cast<int>(first & 3);
    if (mode < 3) {
      static loom_tokenizer* t = [&] {
        const Config c = Host::config(desc, fixed);
        loom_tokenizer* made = nullptr;
        if (loom_error* e = api->create(host.host(), as_config(c), &made)) {
          std::fprintf(stderr, "loom fuzz: the fixed %s model does not load: %s\n", desc->name,
                       e->message.c_str());
          std::abort();
        }
        return made;
      }();
      drill(api, t, mode, in);
      return 0;
    }
    const size_t text_len = in.u16();
    const std::string text(in.take(text_len));
    const Config c = Host::config(desc, from_input(in.rest(), first >> 2));
    loom_tokenizer* t = nullptr;
    if (!ok(api->create(host.host(), as_config(c), &t))) return 0;
    Bytes again(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    drill(api, t, 0, again);
    Bytes ids(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    drill(api, t, 2, ids);
    api->destroy(t);
    return 0;
  }
};

}  // namespace loomfuzz
