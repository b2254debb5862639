// Helpers shared by the tokenizer tests: a tokenizer plugin instance driven through the ABI
// alone (loomtest::TestHost), call outcomes as (code, message), and paths into the shared
// data folder with a visible one-line skip when it is absent.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "test_host.hpp"
#include "test_skip.hpp"

namespace toktest {

using loomtest::Outcome;  // a call's error as (code, message)
using loomtest::outcome;

// One tokenizer instance, created from the plugin's schema defaults overridden by `values`.
// Creation may fail: check created() (the other calls REQUIRE that it succeeded).
class Tokenizer {
 public:
  Tokenizer(const std::string& name, const std::map<std::string, std::string>& values = {}) {
    const loom_plugin_descriptor* d = loomtest::load_descriptor("tokenizer", name);
    api_ = static_cast<const loom_tokenizer_api*>(d->api);
    cfg_ = loomtest::TestHost::config(d, values);
    created_ = outcome(api_->create(host_.host(), &cfg_, &self_));
  }
  ~Tokenizer() {
    if (self_) api_->destroy(self_);
  }
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const Outcome& created() const { return created_; }
  const loom_tokenizer_api* api() const { return api_; }
  loom_tokenizer* self() const { return self_; }
  int64_t vocab_size() const { return api_->vocab_size(self_); }
  int64_t eod_id() const { return api_->eod_id(self_); }

  Outcome try_encode(std::string_view text, std::vector<int32_t>& ids) {
    REQUIRE_MESSAGE(created_.ok(), created_.message);
    const int32_t* p = nullptr;
    size_t n = 0;
    Outcome o = outcome(api_->encode(self_, text.data(), text.size(), &p, &n));
    ids.clear();
    if (o.ok()) {
      REQUIRE(p != nullptr);
      ids.assign(p, p + n);
    }
    return o;
  }
  std::vector<int32_t> encode(std::string_view text) {
    std::vector<int32_t> ids;
    Outcome o = try_encode(text, ids);
    REQUIRE_MESSAGE(o.ok(), o.message);
    return ids;
  }
  Outcome try_decode(const std::vector<int32_t>& ids, std::string& text) {
    REQUIRE_MESSAGE(created_.ok(), created_.message);
    const char* p = nullptr;
    size_t n = 0;
    Outcome o = outcome(api_->decode(self_, ids.data(), ids.size(), &p, &n));
    text.clear();
    if (o.ok()) {
      REQUIRE(p != nullptr);
      text.assign(p, n);
    }
    return o;
  }
  std::string decode(const std::vector<int32_t>& ids) {
    std::string text;
    Outcome o = try_decode(ids, text);
    REQUIRE_MESSAGE(o.ok(), o.message);
    return text;
  }

 private:
  loomtest::TestHost host_;
  const loom_tokenizer_api* api_ = nullptr;
  loom_config cfg_;
  loom_tokenizer* self_ = nullptr;
  Outcome created_;
};

// LOOM_SHARED_DATA/<rel>, the shared data folder (../shared/data from the project).
inline std::string shared_path(const std::string& rel) {
  return std::string(LOOM_SHARED_DATA) + "/" + rel;
}

// True when every path exists; otherwise prints one line naming the first missing one (once
// per `what` and path per process) so the skip is visible, and returns false.
inline bool have_files(const std::string& what, const std::vector<std::string>& paths) {
  static std::set<std::string> reported;
  for (const std::string& p : paths) {
    if (std::filesystem::exists(p)) continue;
    if (reported.insert(what + "\n" + p).second)
      loomtest::skip(what + ": " + p + " is absent (shared data, ../shared/data)");
    return false;
  }
  return true;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE_MESSAGE(out.good(), "cannot write " << path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh, empty folder under the system temp dir, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("loom-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path_;
};

}  // namespace toktest
