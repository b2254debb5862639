// ABI 2 capabilities: the host refuses a run that needs an extension a plugin does not
// list, naming both; a callee refuses a required extension it does not know.
#include <doctest/doctest.h>

#include "base/errors.hpp"
#include "engine_test_util.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/plugin.hpp"
#include "session/capability_gate.hpp"

using namespace loom::engine;
using namespace enginetest;

TEST_CASE("require_ext names the plugin, the missing id and what needs it") {
  StubPlugins stubs;
  Registry registry;
  registry.discover();
  const PluginInfo& model = registry.get(LOOM_KIND_MODEL, "gpt");  // the stub: no capabilities
  CHECK(model.capabilities.empty());
  CHECK_FALSE(model.has_capability(LOOM_EXT_DECODE));
  try {
    require_ext(model, LOOM_EXT_DECODE, LOOM_DECODE_EXT_SIZE_V1, "`loom generate`");
    FAIL("a model without loom.decode/1 was accepted for generation");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()) ==
          "`loom generate` needs capability 'loom.decode/1', which plugin model/gpt does not "
          "implement (its capabilities: none)");
  }
}

TEST_CASE("a listed capability's table is found on the descriptor's chain, by id") {
  ScopedEnv path{"LOOM_PLUGIN_PATH", LOOM_TEST_TINY_DIR};
  ScopedEnv only{"LOOM_PLUGIN_PATH_ONLY", "1"};
  Registry registry;
  registry.discover();
  const PluginInfo& tiny = registry.get(LOOM_KIND_OPTIMIZER, "tiny");
  CHECK(tiny.has_capability("loom.test-listed/1"));
  const loom_ext* e = require_ext(tiny, "loom.test-listed/1", sizeof(loom_ext), "a test");
  REQUIRE(e != nullptr);
  CHECK(std::string(e->id) == "loom.test-listed/1");
  // Listed, but its table is smaller than the caller's version of it: refused, not read.
  CHECK_THROWS_WITH_AS(require_ext(tiny, "loom.test-listed/1", sizeof(loom_ext) + 8, "a test"),
                       "plugin optimizer/tiny lists capability 'loom.test-listed/1' but its "
                       "table is missing or smaller than the host expects",
                       UsageError);
}

TEST_CASE("a callee refuses a required extension it does not know, and only a required one") {
  const loom_ext window{sizeof(loom_ext), "loom.attention-window/1", LOOM_EXT_REQUIRED, nullptr};
  const loom_ext hint{sizeof(loom_ext), "loom.some-hint/1", 0, &window};
  CHECK(loom_ext_find(&hint, "loom.attention-window/1") == &window);
  CHECK(loom_ext_find(&hint, "loom.absent/1") == nullptr);
  // Knowing the required id is enough; the optional unknown one is skipped.
  CHECK_NOTHROW(loom::require_known_exts(&hint, {"loom.attention-window/1"}, "attention/x"));
  try {
    loom::require_known_exts(&hint, {"loom.other/1"}, "attention/x");
    FAIL("an unknown required extension was ignored");
  } catch (const loom::Error& e) {
    CHECK(e.code() == LOOM_ERR_UNIMPLEMENTED);
    CHECK(std::string(e.what()) ==
          "attention/x: does not implement extension 'loom.attention-window/1', which the "
          "caller requires");
  }
}

TEST_CASE("the attention gate: a required extension the plugin does not list is named") {
  // What the host's AttentionGate checks before every forward and backward: a run that got
  // past `loom validate` (whose model declared nothing) is still never computed as plain
  // causal attention by a plugin that does not list the window.
  PluginInfo attn;
  attn.kind = LOOM_KIND_ATTENTION;
  attn.name = "causal-only";
  const loom_attention_window window{
      {sizeof(loom_attention_window), LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_REQUIRED, nullptr}, 4};
  CHECK(unlisted_required_ext(&window.base, attn) ==
        "attention/causal-only does not implement 'loom.attention-window/1', which this run "
        "needs (its capabilities: none); choose another attention plugin, one that lists it "
        "(loom plugins describe attention/NAME)");
  attn.capabilities.push_back(LOOM_EXT_ATTENTION_WINDOW);
  CHECK(unlisted_required_ext(&window.base, attn).empty());
  // An optional extension the plugin does not list is no reason to refuse.
  loom_ext optional{sizeof(loom_ext), "loom.test-optional/1", 0, nullptr};
  CHECK(unlisted_required_ext(&optional, attn).empty());
}
