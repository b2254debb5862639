// Helpers for the engine tests: temporary folders, files, and running the real `loom`
// binary with a hermetic plugin path.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "loom/common.h"
#include "test_files.hpp"

namespace enginetest {

namespace fs = std::filesystem;

// This host's ABI as the CLI prints it: "2.2".
inline const std::string kHostAbi =
    std::to_string(LOOM_ABI_MAJOR) + "." + std::to_string(LOOM_ABI_MINOR);

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "loom-engine-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline fs::path write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  return path;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using loomtest::q;  // single-quoted for /bin/sh

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs `loom <args>` with LOOM_PLUGIN_PATH = `plugin_path` only (no build tree, no
// ~/.local, no install prefix).
inline Result run_loom(const std::string& args, const std::string& plugin_path = LOOM_TEST_STUB_DIR,
                       const std::string& cwd = "") {
  static int counter = 0;
  fs::path base = fs::temp_directory_path() / ("loom-engine-test-" + std::to_string(::getpid()) +
                                               "-" + std::to_string(counter++));
  std::string cmd = (cwd.empty() ? "" : "cd " + q(cwd) + " && ") +
                    "env LOOM_PLUGIN_PATH=" + q(plugin_path) +
                    " LOOM_PLUGIN_PATH_ONLY=1 LOOM_LOG_LEVEL=warn " + q(LOOM_EXE) + " " + args +
                    " >" + q(base.string() + ".out") + " 2>" + q(base.string() + ".err");
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(base.string() + ".out");
  r.err = read_file(base.string() + ".err");
  std::error_code ec;
  fs::remove(base.string() + ".out", ec);
  fs::remove(base.string() + ".err", ec);
  return r;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline int count_lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// Sets an environment variable for the life of the object (in-process registry tests).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// The stub plugins alone, as the in-process tests' Registry sees them.
struct StubPlugins {
  ScopedEnv path{"LOOM_PLUGIN_PATH", LOOM_TEST_STUB_DIR};
  ScopedEnv only{"LOOM_PLUGIN_PATH_ONLY", "1"};
};

}  // namespace enginetest
