// Helpers for the tokenizer tests here: one tokenizer instance per object, encode/decode
// as std::vector/std::string, error inspection, and the test data folders.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_host.hpp"

namespace tokmore {

inline std::string data(const std::string& name) {
  return std::string(LOOM_TOKMORE_DATA) + "/" + name;
}
inline std::string shared(const std::string& name) {
  return std::string(LOOM_SHARED_DATA) + "/" + name;
}
inline bool have(const std::string& path) { return std::filesystem::exists(path); }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return nlohmann::json::parse(in);
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

using loomtest::Outcome;  // a call's error as (code, message)

// A tokenizer instance, or the error its create returned.
class Tok {
 public:
  Tok(const std::string& name, const std::map<std::string, std::string>& values) {
    auto* d = loomtest::load_descriptor("tokenizer", name);
    api_ = static_cast<const loom_tokenizer_api*>(d->api);
    cfg_ = loomtest::TestHost::config(d, values);
    if (loom_error* e = api_->create(host_.host(), &cfg_, &self_)) {
      created_ = {e->code, e->message};
      delete e;
      self_ = nullptr;
    }
  }
  ~Tok() { api_->destroy(self_); }
  Tok(const Tok&) = delete;
  Tok& operator=(const Tok&) = delete;

  const Outcome& created() const { return created_; }
  bool ok() const { return self_ != nullptr; }
  int64_t vocab_size() const { return api_->vocab_size(self_); }
  int64_t eod() const { return api_->eod_id(self_); }
  const loom_tokenizer_api* api() const { return api_; }
  loom_tokenizer* self() const { return self_; }

  std::vector<int32_t> encode(const std::string& s) {
    REQUIRE_MESSAGE(ok(), created_.message);
    const int32_t* ids = nullptr;
    size_t n = 0;
    host_.check(api_->encode(self_, s.data(), s.size(), &ids, &n));
    REQUIRE(ids != nullptr);
    return std::vector<int32_t>(ids, ids + n);
  }
  std::string decode(const std::vector<int32_t>& ids) {
    REQUIRE_MESSAGE(ok(), created_.message);
    const char* text = nullptr;
    size_t len = 0;
    host_.check(api_->decode(self_, ids.data(), ids.size(), &text, &len));
    REQUIRE(text != nullptr);
    return std::string(text, len);
  }
  Outcome encode_error(const std::string& s) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    Outcome o;
    if (loom_error* e = api_->encode(self_, s.data(), s.size(), &ids, &n)) {
      o = {e->code, e->message};
      delete e;
    }
    return o;
  }
  Outcome decode_error(const std::vector<int32_t>& ids) {
    const char* text = nullptr;
    size_t len = 0;
    Outcome o;
    if (loom_error* e = api_->decode(self_, ids.data(), ids.size(), &text, &len)) {
      o = {e->code, e->message};
      delete e;
    }
    return o;
  }

 private:
  loomtest::TestHost host_;
  const loom_tokenizer_api* api_ = nullptr;
  loom_config cfg_;
  loom_tokenizer* self_ = nullptr;
  Outcome created_;
};

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace tokmore
