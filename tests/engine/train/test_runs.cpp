// Whole runs of build/bin/loom: resume equivalence, loss going down, generation, and a
// damaged checkpoint refused.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_files.hpp"

namespace fs = std::filesystem;

namespace {

using Result = loomtest::Output;
using loomtest::slurp;

// Runs loom with `args`; the output holds stdout, and stderr too unless `stdout_only`.
// `env` ("NAME=value ...") is set for the run.
Result run(const std::string& args, bool stdout_only = false, const std::string& env = "") {
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(LOOM_BINARY_DIR) +
                    "/bin/loom " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  return loomtest::run_shell(cmd);
}

// A tiny GPT on mock data: seconds per run.
fs::path write_recipe(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "tiny.toml") << R"([train]
seed = 5
iters = 20
micro_batch_size = 2
global_batch_size = 4
seq_len = 16
log_interval = 5
eval_interval = 10
eval_iters = 2
[lr]
schedule = "cosine"
max = 1e-2
min = 1e-3
warmup_iters = 3
decay_iters = 20
[model]
plugin = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
max_seq_len = 32
[tokenizer]
plugin = "byte"
[data]
plugin = "mock"
num_documents = 200
doc_length = 64
)";
  return dir / "tiny.toml";
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("loom-runs-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

}  // namespace

TEST_CASE("resume: 20 iterations straight == 10, save, load, 10 more (bitwise)") {
  fs::path dir = temp_dir("resume");
  fs::path recipe = write_recipe(dir);
  std::string base = "run " + recipe.string() + " ";
  Result a = run(base + "--set checkpoint.save=\"" + (dir / "a").string() +
                 "\" --set train.metrics=\"" + (dir / "a.jsonl").string() + "\"");
  REQUIRE_MESSAGE(a.code == 0, a.out);
  Result b1 =
      run(base + "--set train.iters=10 --set checkpoint.save=\"" + (dir / "b").string() + "\"");
  REQUIRE_MESSAGE(b1.code == 0, b1.out);
  Result b2 =
      run(base + "--set checkpoint.save=\"" + (dir / "b").string() + "\" --set checkpoint.load=\"" +
          (dir / "b").string() + "\" --set train.metrics=\"" + (dir / "b.jsonl").string() + "\"");
  REQUIRE_MESSAGE(b2.code == 0, b2.out);
  CHECK(b2.out.find("resumed") != std::string::npos);
  std::string ma = slurp(dir / "a" / "iter_0000020" / "model.safetensors");
  std::string mb = slurp(dir / "b" / "iter_0000020" / "model.safetensors");
  REQUIRE(!ma.empty());
  CHECK(ma == mb);
  CHECK(slurp(dir / "a" / "iter_0000020" / "optimizer.safetensors") ==
        slurp(dir / "b" / "iter_0000020" / "optimizer.safetensors"));

  // Every metrics line carries the documented keys.
  std::ifstream m(dir / "a.jsonl");
  std::string first;
  std::getline(m, first);
  for (const char* key : {"\"iter\"", "\"loss\"", "\"lr\"", "\"grad_norm\"", "\"tokens_per_s\"",
                          "\"mfu\"", "\"mem_bytes\""})
    CHECK(first.find(key) != std::string::npos);

  // Generation from the checkpoint, greedy: deterministic and starts with the prompt.
  std::string gen = "generate --checkpoint " + (dir / "a").string() +
                    " --prompt hello --max-new-tokens 12 --temperature 0";
  Result g1 = run(gen, true), g2 = run(gen, true);
  REQUIRE_MESSAGE(g1.code == 0, g1.out);
  CHECK(g1.out.rfind("hello", 0) == 0);
  CHECK(g1.out.size() > 6);
  CHECK(g1.out == g2.out);
  Result g3 = run("generate --checkpoint " + (dir / "a").string() +
                      " --prompt hello --max-new-tokens 12 --temperature 0.9 --top-k 20 "
                      "--top-p 0.9 --seed 3",
                  true);
  CHECK_MESSAGE(g3.code == 0, g3.out);
  CHECK(g3.out.rfind("hello", 0) == 0);

  // A truncated checkpoint is refused with exit 1 and the reason, nothing half-loaded.
  fs::resize_file(dir / "b" / "iter_0000020" / "model.safetensors",
                  fs::file_size(dir / "b" / "iter_0000020" / "model.safetensors") - 100);
  Result bad =
      run(base + "--set train.iters=30 --set checkpoint.load=\"" + (dir / "b").string() + "\"");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("truncated") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("training lowers the loss on learnable data") {
  fs::path dir = temp_dir("learn");
  fs::path recipe = write_recipe(dir);
  Result r = run("run " + recipe.string() + " --set train.iters=150 --set lr.decay_iters=150 " +
                 "--set train.metrics=\"" + (dir / "m.jsonl").string() + "\"");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  std::ifstream m(dir / "m.jsonl");
  std::string line;
  std::vector<double> losses, evals;
  auto number = [](const std::string& l, const std::string& key) {
    return std::stod(l.substr(l.find(key) + key.size()));
  };
  while (std::getline(m, line)) {
    if (line.find("\"eval_loss\"") != std::string::npos)
      evals.push_back(number(line, "\"eval_loss\":"));
    else
      losses.push_back(number(line, "\"loss\":"));
  }
  REQUIRE(losses.size() == 150);
  INFO("first " << losses.front() << " last " << losses.back());
  CHECK(losses.front() == doctest::Approx(std::log(257.0)).epsilon(0.05));  // uniform start
  CHECK(losses.back() < 0.8 * losses.front());
  REQUIRE(evals.size() == 15);  // every 10 iterations
  CHECK(evals.back() < 0.8 * evals.front());
  fs::remove_all(dir);
}

TEST_CASE("a sliding window trains with plugins that list it and is refused by one that does not") {
  fs::path dir = temp_dir("window");
  fs::path recipe = write_recipe(dir);
  const std::string fixture = std::string("LOOM_PLUGIN_PATH=") + LOOM_TEST_FIXTURE_DIR;
  for (const char* attention : {"reference", "flash-cpu"}) {
    Result r = run("run " + recipe.string() + " --set model.attention_window=4 " +
                       "--set train.iters=4 --set attention.plugin=" + attention,
                   false, fixture);
    CHECK_MESSAGE(r.code == 0, r.out);
  }
  // attention/causal-only would otherwise compute plain causal attention: the model says the
  // window needs loom.attention-window/1, so validate and run refuse the recipe (exit 2)
  // before anything runs, naming both. Without a window it trains.
  for (const char* cmd : {"validate ", "run "}) {
    Result r = run(cmd + recipe.string() +
                       " --set model.attention_window=4 --set attention.plugin=causal-only",
                   false, fixture);
    CAPTURE(cmd);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.out.find("model/gpt with this recipe needs 'loom.attention-window/1' of its "
                             "attention plugin, and attention/causal-only does not list it") !=
                      std::string::npos,
                  r.out);
  }
  Result r{};
  r = run("run " + recipe.string() + " --set train.iters=2 --set attention.plugin=causal-only",
          false, fixture);
  CHECK_MESSAGE(r.code == 0, r.out);
  // ring context parallelism needs loom.attention-partial/1 of the plugin: refused before
  // anything runs; the all-to-all variant needs nothing of it
  r = run("validate " + recipe.string() +
              " --world 2 --set parallel.context=2 --set attention.plugin=causal-only",
          false, fixture);
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.out.find("parallel.context = 2 with cp_comm_type = \"p2p\" (ring attention) "
                           "merges partial attention ('loom.attention-partial/1'), and "
                           "attention/causal-only does not list it") != std::string::npos,
                r.out);
  r = run("validate " + recipe.string() +
              " --world 2 --set parallel.context=2 --set parallel.cp_comm_type=a2a "
              "--set attention.plugin=causal-only",
          false, fixture);
  CHECK_MESSAGE(r.code == 0, r.out);
  fs::remove_all(dir);
}

TEST_CASE("optimizer/lion trains the quickstart model: the loss falls") {
  // recipes/quickstart.toml on its fortune documents, with Lion at a tenth of AdamW's
  // learning rate and ten times its weight decay (Lion's update is +-lr in every coordinate).
  REQUIRE_MESSAGE(fs::is_directory("/usr/share/games/fortunes"),
                  "the fortunes package is missing: tools/install-deps installs it");
  fs::path dir = temp_dir("lion");
  fs::create_directories(dir);
  const std::string docs = (dir / "fortunes.jsonl").string();
  REQUIRE(
      std::system((std::string(LOOM_SOURCE_DIR) + "/tools/fortunes-jsonl " + docs + " >/dev/null")
                      .c_str()) == 0);
  Result r = run("run " + std::string(LOOM_SOURCE_DIR) + "/recipes/quickstart.toml " +
                 "--set optimizer.plugin=lion --set optimizer.weight_decay=1.0 " +
                 "--set lr.max=3e-4 --set lr.min=3e-5 --set train.iters=60 " +
                 "--set train.log_interval=10 --set train.eval_interval=0 " +
                 "--set data.path=" + docs + " --set checkpoint.save=" + (dir / "ck").string() +
                 " --set train.metrics=" + (dir / "m.jsonl").string());
  REQUIRE_MESSAGE(r.code == 0, r.out);
  std::ifstream m(dir / "m.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(m, line);)
    losses.push_back(std::stod(line.substr(line.find("\"loss\":") + 7)));
  REQUIRE(losses.size() == 60);
  auto mean = [&](size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += losses[i];
    return s / double(to - from);
  };
  INFO("first 5 iterations " << mean(0, 5) << ", last 5 " << mean(55, 60));
  CHECK(std::isfinite(mean(55, 60)));
  CHECK(mean(55, 60) < 0.75 * mean(0, 5));
  fs::remove_all(dir);
}
