// `loom data samples` end to end on tiny JSON-lines corpora with the byte tokenizer, against
// the numpy reference (data/samples.txt): the single-dataset order for train and valid, a
// 0.3/0.7 blend, the index cache beside the data, and clear errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "reference.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;

namespace {

using Result = loomtest::Output;

Result run(const std::string& args, bool stdout_only = false) {
  std::string cmd =
      std::string(LOOM_BINARY_DIR) + "/bin/loom " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  return loomtest::run_shell(cmd);
}

// Sample lines of `loom data samples` as {i, dataset, index, tokens...}, name dropped.
std::vector<std::vector<int64_t>> parse(const std::string& out) {
  std::vector<std::vector<int64_t>> rows;
  std::stringstream ss(out);
  for (std::string l; std::getline(ss, l);) {
    if (l.empty() || l[0] == '#' || l.find('\t') == std::string::npos) continue;  // logs
    std::vector<std::string> f;
    std::stringstream ls(l);
    for (std::string w; std::getline(ls, w, '\t');) f.push_back(w);
    REQUIRE_MESSAGE(f.size() == 5, l);
    std::vector<int64_t> row = {std::stoll(f[0]), std::stoll(f[1]), std::stoll(f[3])};
    std::stringstream ts(f[4]);
    for (int64_t t; ts >> t;) row.push_back(t);
    rows.push_back(row);
  }
  return rows;
}

// Reference rows "<kind> <split> i dataset index tokens..." as {i, dataset, index, tokens...}.
std::vector<std::vector<int64_t>> reference(const std::string& kind, const std::string& split) {
  std::vector<std::vector<int64_t>> rows;
  for (const auto& w : sref::lines("samples.txt"))
    if (w[0] == kind && w[1] == split) rows.push_back(sref::ints(w, 2));
  return rows;
}

struct Fixture {
  fs::path dir;
  std::string recipe;
  Fixture() {
    dir = fs::temp_directory_path() / ("loom-samples-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path data = fs::path(LOOM_SOURCE_DIR) / "tests/data/data";
    fs::copy_file(data / "tiny.jsonl", dir / "tiny.jsonl");
    fs::copy_file(data / "tiny2.jsonl", dir / "tiny2.jsonl");
    std::ofstream(dir / "r.toml") << "[train]\nseed = 5\niters = 20\nmicro_batch_size = 2\n"
                                     "global_batch_size = 4\nseq_len = 16\neval_interval = 10\n"
                                     "eval_iters = 2\n[tokenizer]\nplugin = \"byte\"\n"
                                     "[data]\nplugin = \"jsonl\"\npath = \""
                                  << (dir / "tiny.jsonl").string() << "\"\nsplit = \"90,10,0\"\n";
    recipe = (dir / "r.toml").string();
  }
  ~Fixture() { fs::remove_all(dir); }
  size_t npy_count() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".npy";
    return n;
  }
};

}  // namespace

TEST_CASE("loom data samples: one dataset, train and valid, in numpy's order") {
  Fixture fx;
  for (const char* split : {"train", "valid"}) {
    CAPTURE(split);
    Result r = run("data samples " + fx.recipe + " --split " + split + " --count 12", true);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    auto want = reference("single", split);
    REQUIRE(want.size() == 12);
    CHECK(parse(r.out) == want);
  }
  // The index arrays were cached beside the data (train and valid: 3 files each); a second
  // run reads them.
  CHECK(fx.npy_count() == 6);
  Result again = run("data samples " + fx.recipe + " --split train --count 12");
  REQUIRE_MESSAGE(again.code == 0, again.out);
  CHECK_MESSAGE(again.out.find("loaded from") != std::string::npos, again.out);
  CHECK(parse(again.out) == reference("single", "train"));
  // Another seed: other cache files, another order.
  Result other =
      run("data samples " + fx.recipe + " --split train --count 12 --set train.seed=6", true);
  REQUIRE_MESSAGE(other.code == 0, other.out);
  CHECK(parse(other.out) != reference("single", "train"));
  CHECK(fx.npy_count() == 9);
  // cache = false writes nothing.
  run("data samples " + fx.recipe + " --count 2 --set train.seed=7 --set data.cache=false", true);
  CHECK(fx.npy_count() == 9);
}

TEST_CASE("loom data samples: a 0.3/0.7 blend in numpy's order") {
  Fixture fx;
  const std::string blend =
      "0.3 " + (fx.dir / "tiny.jsonl").string() + " 0.7 " + (fx.dir / "tiny2.jsonl").string();
  Result r =
      run("data samples " + fx.recipe + " --count 12 --set 'data.blend=" + blend + "'", true);
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(r.out.find("tiny2.jsonl") != std::string::npos);
  CHECK(parse(r.out) == reference("blend", "train"));

  // The blend names the files, so the recipe needs no [data] path of its own.
  std::ifstream in(fx.recipe);
  std::ofstream out(fx.dir / "nopath.toml");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("path", 0) != 0) out << line << "\n";
  out.close();
  Result np = run("data samples " + (fx.dir / "nopath.toml").string() +
                      " --count 12 --set 'data.blend=" + blend + "'",
                  true);
  REQUIRE_MESSAGE(np.code == 0, np.out);
  CHECK(parse(np.out) == reference("blend", "train"));
  Result none = run("data samples " + (fx.dir / "nopath.toml").string() + " --count 2");
  CHECK(none.code == 2);
  CHECK_MESSAGE(none.out.find("missing required key 'data.path'") != std::string::npos, none.out);
}

TEST_CASE("loom data samples: mock data is deterministic; errors are clear") {
  Fixture fx;
  // dataset/mock has no `path` key (the jsonl recipe's would be refused): a recipe of its own.
  std::ofstream(fx.dir / "m.toml") << "[train]\nseed = 5\niters = 20\nseq_len = 16\n"
                                      "[tokenizer]\nplugin = \"byte\"\n[data]\nplugin = \"mock\"\n"
                                      "num_documents = 50\ndoc_length = 20\n";
  const std::string m = "data samples " + (fx.dir / "m.toml").string() + " --count 5";
  Result a = run(m, true), b = run(m, true);
  REQUIRE_MESSAGE(a.code == 0, a.out);
  CHECK(parse(a.out).size() == 5);
  CHECK(a.out == b.out);
  Result blend = run(m + " --set 'data.blend=0.5 x 0.5 y'");
  CHECK(blend.code == 2);
  CHECK_MESSAGE(blend.out.find("no `prefix` or `path` key") != std::string::npos, blend.out);
  Result test = run("data samples " + fx.recipe + " --split test");
  CHECK(test.code == 2);  // split "90,10,0" leaves no test documents
  CHECK_MESSAGE(test.out.find("test split has no documents") != std::string::npos, test.out);
  Result bad = run("data samples " + fx.recipe + " --split dev");
  CHECK(bad.code == 2);
  Result none = run("data samples " + (fx.dir / "m.toml").string() + " --split valid");
  CHECK(none.code == 2);  // eval_interval 0: no valid samples wanted
}
