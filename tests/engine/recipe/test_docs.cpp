// docs/recipes.md must match what `loom docs recipes` prints: the engine part always, and
// the part of every plugin built into the build tree's plugins/ folder. (Parts for plugins
// not built here are left alone, so a partial build does not fail this test.)
#include <doctest/doctest.h>

#include "engine_test_util.hpp"
#include "recipe/recipe_docs.hpp"

using namespace loom::engine;
using namespace enginetest;

TEST_CASE("docs/recipes.md is up to date with the schemas") {
  const fs::path doc = fs::path(LOOM_SOURCE_DIR) / "docs/recipes.md";
  const std::string fix =
      "docs/recipes.md is out of date; regenerate it with tools/gen-recipes-doc";
  REQUIRE_MESSAGE(fs::exists(doc), fix);
  Result r = run_loom("docs recipes", std::string(LOOM_BINARY_DIR) + "/plugins");
  REQUIRE(r.code == 0);
  auto generated = marked_parts(r.out);
  auto committed = marked_parts(read_file(doc));
  REQUIRE(generated.count("engine") == 1);
  for (const auto& [id, text] : generated) {
    CAPTURE(id);
    REQUIRE_MESSAGE(committed.count(id) == 1, (fix + " (it does not document " + id + ")"));
    CHECK_MESSAGE(committed.at(id) == text, (fix + " (" + id + " changed)"));
  }
}

TEST_CASE("the generator marks its parts and documents plugins with their keys") {
  Result r = run_loom("docs recipes");  // the stub plugins
  REQUIRE(r.code == 0);
  auto parts = marked_parts(r.out);
  CHECK(parts.count("engine") == 1);
  CHECK(parts.count("model/gpt") == 1);
  CHECK(parts.count("grad/ddp") == 1);
  CHECK(contains(parts["engine"], "### [train]"));
  CHECK(contains(parts["engine"], "| `seed` | int | `1234` | >= 0 |"));
  CHECK(contains(parts["engine"],
                 "| `dtype` | string | `\"fp32\"` | one of fp32, bf16, fp16, fp64 |"));
  CHECK(contains(parts["engine"], "| `split` | string | `\"98,2,0\"` |"));
  CHECK(contains(parts["model/gpt"], "| `n_layer` | int | `12` | >= 1 | transformer layers |"));
  CHECK(contains(parts["dataset/needs"], "| `path` | string | *required* |"));
  CHECK(contains(parts["grad/ddp"], "Selected with `[parallel] data = \"ddp\"`"));
  CHECK(contains(parts["tokenizer/byte"], "It takes no keys."));
  // Deterministic.
  CHECK(run_loom("docs recipes").out == r.out);
}

// The recipes a user is pointed to must stay valid as schemas change: every recipes/*.toml
// passes `loom validate` (keys, ranges, plugins, the layout) with the plugins built here. A
// recipe naming a plugin this build lacks (backend/cuda where CUDA is not built, as in the
// sanitizer build) is skipped with its reason; the CPU recipes are always checked.
TEST_CASE("every shipped recipe validates") {
  int checked = 0, skipped = 0;
  for (const auto& e : fs::directory_iterator(fs::path(LOOM_SOURCE_DIR) / "recipes")) {
    if (e.path().extension() != ".toml") continue;
    CAPTURE(e.path().string());
    Result r =
        run_loom("validate " + q(e.path().string()), std::string(LOOM_BINARY_DIR) + "/plugins");
    if (r.code == 2 && contains(r.err, ": no plugin ")) {
      MESSAGE("skipped " << e.path().filename().string() << ": " << r.err);
      ++skipped;
      continue;
    }
    INFO(r.err);
    CHECK(r.code == 0);
    ++checked;
  }
  CHECK(checked >= 7);  // the CPU ones: quickstart, tinyshakespeare, BERT and T5
  CHECK(checked + skipped >= 11);
}
