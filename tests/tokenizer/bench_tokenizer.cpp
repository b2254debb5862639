// loom-bench-tokenizer: single-threaded encode and decode throughput of a tokenizer plugin
// on a text file (default: tokenizer/gpt2-bpe on Tiny Shakespeare from the shared data).
//
//   loom-bench-tokenizer [--plugin NAME] [--file PATH] [--reps R] [--set KEY=VALUE]...
//
// "cold" is the first encode on a fresh instance (its chunk cache empty); "warm" is the
// median of R more encodes of the same text on that instance.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_host.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shared = LOOM_SHARED_DATA;
  std::string plugin = "gpt2-bpe";
  std::string file = shared + "/tinyshakespeare/input.txt";
  int reps = 5;
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plugin" && i + 1 < argc) {
      plugin = argv[++i];
    } else if (a == "--file" && i + 1 < argc) {
      file = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--set" && i + 1 < argc) {
      const std::string kv = argv[++i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "--set takes KEY=VALUE, got '%s'\n", kv.c_str());
        return 2;
      }
      values[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else {
      std::fprintf(stderr,
                   "usage: loom-bench-tokenizer [--plugin NAME] [--file PATH] [--reps R] "
                   "[--set KEY=VALUE]...\n");
      return 2;
    }
  }
  if (plugin == "gpt2-bpe") {
    values.emplace("vocab_file", shared + "/gpt2/gpt2-vocab.json");
    values.emplace("merge_file", shared + "/gpt2/gpt2-merges.txt");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", file.c_str());
    return 1;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  const double mb = static_cast<double>(text.size()) / 1e6;

  try {
    loomtest::TestHost host;
    auto t0 = std::chrono::steady_clock::now();
    loom_tokenizer_ref tok = host.load_tokenizer(plugin, values);
    const double load_s = seconds_since(t0);

    const int32_t* ids = nullptr;
    size_t n = 0;
    t0 = std::chrono::steady_clock::now();
    host.check(tok.api->encode(tok.self, text.data(), text.size(), &ids, &n));
    const double cold_s = seconds_since(t0);

    std::vector<double> warm;
    for (int r = 0; r < reps; ++r) {
      t0 = std::chrono::steady_clock::now();
      host.check(tok.api->encode(tok.self, text.data(), text.size(), &ids, &n));
      warm.push_back(seconds_since(t0));
    }
    std::sort(warm.begin(), warm.end());
    const double warm_s = warm[warm.size() / 2];

    const std::vector<int32_t> kept(ids, ids + n);
    const char* out = nullptr;
    size_t len = 0;
    t0 = std::chrono::steady_clock::now();
    host.check(tok.api->decode(tok.self, kept.data(), kept.size(), &out, &len));
    const double decode_s = seconds_since(t0);

    std::printf("tokenizer/%s on %s: %zu bytes -> %zu ids (%.2f bytes/id)\n", plugin.c_str(),
                file.c_str(), text.size(), n, static_cast<double>(text.size()) / n);
    std::printf("  load      %8.3f s\n", load_s);
    std::printf("  encode    %8.3f s  %7.2f MB/s  (cold: first call, empty cache)\n", cold_s,
                mb / cold_s);
    std::printf("  encode    %8.3f s  %7.2f MB/s  (warm: median of %d)\n", warm_s, mb / warm_s,
                reps);
    std::printf("  decode    %8.3f s  %7.2f MB/s  round trip %s\n", decode_s, mb / decode_s,
                std::string(out, len) == text ? "exact" : "DIFFERS");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench-tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
