// `loom preprocess` run as the real executable, and its datasets read back: shared by the
// preprocessing tests (test_preprocess.cpp, test_preprocess_chat.cpp).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/cpp/megatron_indexed.hpp"
#include "test_files.hpp"

namespace preprocess_test {

namespace fs = std::filesystem;
namespace mg = loom::megatron;
using loomtest::q;
using loomtest::slurp;

struct Result {
  int code = -1;
  std::string out, err;
};

// `loom <args>` with the build tree's plugins only; `env` is prepended (VAR=value ...).
inline Result run_loom(const std::string& args, const std::string& env = "") {
  static int counter = 0;  // (one per test program: the pid tells programs apart)
  const std::string base =
      (fs::temp_directory_path() /
       ("loom-preprocess-run-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
          .string();
  const std::string cmd = "env LOOM_PLUGIN_PATH=" + q(LOOM_TEST_PLUGIN_DIR) +
                          " LOOM_PLUGIN_PATH_ONLY=1 LOOM_LOG_LEVEL=warn " + env + " " +
                          q(LOOM_EXE) + " " + args + " >" + q(base + ".out") + " 2>" +
                          q(base + ".err");
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return r;
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A dataset's documents as lists of sequences, read back with the SDK reader.
using Docs = std::vector<std::vector<std::vector<int32_t>>>;
inline Docs read_docs(const std::string& prefix) {
  mg::Reader r(prefix);
  Docs docs;
  std::vector<int32_t> ids;
  for (int64_t d = 0; d < r.num_documents(); ++d) {
    docs.emplace_back();
    for (int64_t s = r.document_index(d); s < r.document_index(d + 1); ++s) {
      r.read(s, ids);
      docs.back().push_back(ids);
    }
  }
  return docs;
}

}  // namespace preprocess_test
