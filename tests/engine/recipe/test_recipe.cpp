// Recipe loading, composition, overrides and validation, in-process against the stub
// plugins.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "base/errors.hpp"
#include "engine_test_util.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/plugin.hpp"
#include "recipe/recipe.hpp"

using namespace loom::engine;
using namespace enginetest;

namespace {

// Loads and validates; returns the UsageError message or "" when it validated.
std::string validate_error(const fs::path& recipe, const std::vector<std::string>& sets = {}) {
  StubPlugins stubs;
  Registry registry;
  try {
    Recipe r = Recipe::load(recipe, sets);
    r.validate(registry);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

Recipe validated(const fs::path& recipe, Registry& registry,
                 const std::vector<std::string>& sets = {}) {
  Recipe r = Recipe::load(recipe, sets);
  r.validate(registry);
  return r;
}

}  // namespace

TEST_CASE("include composes recipes; the including file and then --set win") {
  StubPlugins stubs;
  TempDir dir;
  write_file(dir / "sub/base.toml",
             "[train]\n"
             "iters = 10\n"
             "seq_len = 32\n"
             "[model]\n"
             "n_layer = 2\n"
             "n_head = 4\n");
  write_file(dir / "sub/mid.toml",
             "include = \"base.toml\"\n"  // relative to sub/
             "[train]\n"
             "iters = 20\n"
             "log_interval = 5\n");
  write_file(dir / "other.toml", "[train]\nlog_interval = 7\neval_iters = 3\n");
  write_file(dir / "top.toml",
             "include = [\"sub/mid.toml\", \"other.toml\"]\n"
             "[train]\n"
             "seq_len = 16\n"
             "[model]\n"
             "n_head = 8\n");
  Registry registry;
  Recipe r = validated(dir / "top.toml", registry, {"train.iters=30", "model.activation=swiglu"});
  CHECK(r.get_int("train", "iters") == 30);        // --set over everything
  CHECK(r.get_int("train", "seq_len") == 16);      // top over base
  CHECK(r.get_int("train", "log_interval") == 7);  // later include over earlier
  CHECK(r.get_int("train", "eval_iters") == 3);
  const loom_config& model = r.section("model");
  CHECK(model.values.at("n_layer").i == 2);  // from base, two levels down
  CHECK(model.values.at("n_head").i == 8);
  CHECK(model.values.at("activation").s == "swiglu");  // bare --set text is a string
  // Every value remembers where it was set.
  CHECK(model.values.at("n_layer").file == (dir / "sub/base.toml").string());
  CHECK(model.values.at("n_layer").line == 5);
  CHECK(model.values.at("n_head").file == (dir / "top.toml").string());
  CHECK(model.values.at("n_head").line == 5);
  CHECK(model.values.at("activation").file == "<--set>");
  CHECK(model.values.at("n_embd").file == "<default>");
  CHECK(r.has_section("model"));
  CHECK_FALSE(r.has_section("lr"));
  CHECK(r.num_sections_set() == 2);
}

TEST_CASE("include errors name the file and line") {
  TempDir dir;
  write_file(dir / "a.toml", "include = \"b.toml\"\n[train]\niters = 1\n");
  write_file(dir / "b.toml", "\ninclude = \"a.toml\"\n");
  std::string e = validate_error(dir / "a.toml");
  CHECK(contains(e, "include cycle: a.toml -> b.toml -> a.toml"));
  CHECK(contains(e, "b.toml:2"));

  write_file(dir / "c.toml", "include = \"missing.toml\"\n");
  e = validate_error(dir / "c.toml");
  CHECK(contains(e, "c.toml:1: included recipe"));
  CHECK(contains(e, "missing.toml' not found"));

  write_file(dir / "d.toml", "include = 3\n");
  CHECK(contains(validate_error(dir / "d.toml"), "include must be a file name"));

  CHECK(contains(validate_error(dir / "nope.toml"), "recipe '"));
}

TEST_CASE("TOML syntax errors and stray top-level keys name file:line") {
  TempDir dir;
  write_file(dir / "bad.toml", "[train]\niters = = 3\n");
  CHECK(contains(validate_error(dir / "bad.toml"), "bad.toml:2:"));
  write_file(dir / "stray.toml", "\niters = 3\n");
  std::string e = validate_error(dir / "stray.toml");
  CHECK(contains(e, "stray.toml:2: key 'iters' must be inside a section"));
}

TEST_CASE("--set parses TOML values, falls back to text, and rejects malformed overrides") {
  StubPlugins stubs;
  TempDir dir;
  write_file(dir / "r.toml", "[model]\nn_layer = 1\n");
  Registry registry;
  Recipe r =
      validated(dir / "r.toml", registry,
                {"train.iters=5", "model.dropout=0.25", "model.bias=false", "checkpoint.save=2024",
                 "data.split=90,10,0", "model.name=\"a b\"", "lr.max=1"});
  CHECK(r.get_int("train", "iters") == 5);
  CHECK(r.section("model").values.at("dropout").f == doctest::Approx(0.25));
  CHECK(r.section("model").values.at("bias").b == false);
  CHECK(r.get_string("checkpoint", "save") == "2024");  // a string key takes the text
  CHECK(r.get_string("data", "split") == "90,10,0");
  CHECK(r.section("model").values.at("name").s == "a b");
  CHECK(r.get_float("lr", "max") == 1.0);  // an integer where a float is expected

  for (const char* bad : {"noequals", "nodot=3", ".key=3", "section.=3", "a.b.c=3"}) {
    CAPTURE(bad);
    CHECK(contains(validate_error(dir / "r.toml", {bad}), "--set expects section.key=value"));
  }
  std::string e = validate_error(dir / "r.toml", {"model.n_layr=3"});
  CHECK(e ==
        "--set model.n_layr: unknown key 'model.n_layr' for model/gpt; did you mean 'n_layer'?");
  e = validate_error(dir / "r.toml", {"train.iters=many"});
  CHECK(e == "--set train.iters: train.iters must be an integer, got string \"many\"");
}

TEST_CASE("defaults fill every engine and plugin section") {
  StubPlugins stubs;
  TempDir dir;
  write_file(dir / "empty.toml", "");
  Registry registry;
  Recipe r = validated(dir / "empty.toml", registry);
  CHECK(r.num_sections_set() == 0);
  CHECK(r.get_int("train", "seed") == 1234);
  CHECK(r.get_int("train", "iters") == 100);
  CHECK(r.get_int("train", "micro_batch_size") == 4);
  CHECK(r.get_int("train", "global_batch_size") == 0);
  CHECK(r.get_int("train", "seq_len") == 64);
  CHECK(r.get_float("train", "grad_clip") == 1.0);
  CHECK(r.get_string("train", "metrics") == "");
  CHECK(r.get_string("precision", "dtype") == "fp32");
  CHECK(r.get_string("lr", "schedule") == "cosine");
  CHECK(r.get_float("lr", "max") == doctest::Approx(3e-4));
  CHECK(r.get_float("lr", "wsd_decay_fraction") == doctest::Approx(0.1));
  CHECK(r.get_bool("parallel", "sequence_parallel") == false);
  CHECK(r.get_string("parallel", "schedule") == "1f1b");
  CHECK(r.get_int("parallel", "bucket_mb") == 25);  // the ddp stub's key joins [parallel]
  CHECK(r.get_string("data", "split") == "98,2,0");
  CHECK(r.plugin("backend") == "cpu");
  CHECK(r.plugin("comm") == "single");
  CHECK(r.plugin("model") == "gpt");
  CHECK(r.plugin("attention") == "reference");
  CHECK(r.plugin("optimizer") == "adamw");
  CHECK(r.plugin("tokenizer") == "byte");
  CHECK(r.plugin("data") == "mock");
  CHECK(r.plugin("parallel") == "ddp");
  CHECK(r.plugin("train") == "");
  CHECK(r.section("model").values.at("n_layer").i == 12);
  CHECK_THROWS_AS(r.get_int("train", "nope"), RunError);
  CHECK_THROWS_AS(r.get_float("train", "iters"), RunError);  // declared int
}

TEST_CASE("wrong types, ranges and choices are refused with file:line") {
  TempDir dir;
  auto check_one = [&](const std::string& section, const std::string& line,
                       const std::string& expected) {
    write_file(dir / "r.toml", "[" + section + "]\n" + line + "\n");
    std::string e = validate_error(dir / "r.toml");
    CAPTURE(line);
    CHECK(e == (dir / "r.toml").string() + ":2: " + expected);
  };
  check_one("model", "n_layer = \"twelve\"",
            "model.n_layer must be an integer, got string \"twelve\"");
  check_one("model", "n_layer = 1.5", "model.n_layer must be an integer, got float 1.5");
  check_one("model", "bias = 1", "model.bias must be a boolean, got integer 1");
  check_one("model", "activation = true", "model.activation must be a string, got boolean true");
  check_one("model", "dropout = \"0.1\"", "model.dropout must be a number, got string \"0.1\"");
  check_one("model", "n_layer = [1, 2]", "model.n_layer must be an integer, got an array");
  check_one("model", "n_layer = 0", "model.n_layer must be >= 1, got 0");
  check_one("model", "dropout = 1.5", "model.dropout must be between 0 and 1, got 1.5");
  check_one("train", "iters = -1", "train.iters must be >= 1, got -1");
  check_one("lr", "wsd_decay_fraction = 2", "lr.wsd_decay_fraction must be between 0 and 1, got 2");
  check_one("precision", "dtype = \"fp8\"",
            "precision.dtype must be one of fp32|bf16|fp16|fp64, got \"fp8\"");
  check_one(
      "precision", "dtype = \"bf61\"",
      "precision.dtype must be one of fp32|bf16|fp16|fp64, got \"bf61\"; did you mean 'bf16'?");
  check_one("model", "activation = \"relu\"",
            "model.activation must be one of gelu|swiglu, got \"relu\"; did you mean 'gelu'?");
  check_one("parallel", "schedule = \"zb\"",
            "no plugin schedule/zb (available schedule plugins: 1f1b)");
  check_one("data", "split = \"1,2,3,4\"",
            "data.split has more than three weights (train, valid, test): \"1,2,3,4\"");
  check_one("data", "split = \"a,b\"",
            "data.split must be one to three comma-separated non-negative weights like \"98,2,0\", "
            "got \"a,b\"");
  check_one("data", "split = \"0,0\"", "data.split weights sum to zero: \"0,0\"");
  check_one("model", "plugin = 3", "model.plugin must be a string, got integer 3");
}

TEST_CASE("unknown sections and keys suggest the nearest name or list the valid ones") {
  TempDir dir;
  write_file(dir / "r.toml", "[train]\niters = 1\n\n[modle]\nn_layer = 2\n");
  CHECK(validate_error(dir / "r.toml") ==
        (dir / "r.toml").string() + ":4: unknown section [modle]; did you mean [model]?");
  write_file(dir / "r.toml", "[zzzzzz]\n");
  CHECK(
      contains(validate_error(dir / "r.toml"), "unknown section [zzzzzz]; valid sections: train,"));
  write_file(dir / "r.toml", "[model]\nn_layer = 2\nn_layr = 3\n");
  CHECK(validate_error(dir / "r.toml") == (dir / "r.toml").string() +
                                              ":3: unknown key 'model.n_layr' for model/gpt; "
                                              "did you mean 'n_layer'?");
  write_file(dir / "r.toml", "[train]\niter = 3\n");
  CHECK(validate_error(dir / "r.toml") == (dir / "r.toml").string() +
                                              ":2: unknown key 'train.iter' for [train]; did "
                                              "you mean 'iters'?");
  write_file(dir / "r.toml", "[optimizer]\nqqqqqqq = 3\n");
  CHECK(validate_error(dir / "r.toml") ==
        (dir / "r.toml").string() +
            ":2: unknown key 'optimizer.qqqqqqq' for optimizer/adamw; valid keys: plugin, beta1, "
            "weight_decay");
  // The selected grad plugin's keys belong to [parallel].
  write_file(dir / "r.toml", "[parallel]\nbucket_mbb = 3\n");
  CHECK(contains(validate_error(dir / "r.toml"), "did you mean 'bucket_mb'?"));
  write_file(dir / "r.toml", "[model]\n[model.sub]\nx = 1\n");
  CHECK(contains(validate_error(dir / "r.toml"), "unknown key 'model.sub'"));
}

TEST_CASE("plugin selection errors name the recipe line and the nearest plugin") {
  TempDir dir;
  write_file(dir / "r.toml", "[model]\nplugin = \"gtp\"\n");
  CHECK(validate_error(dir / "r.toml") ==
        (dir / "r.toml").string() + ":2: no plugin model/gtp; did you mean model/gpt?");
  write_file(dir / "r.toml", "[parallel]\ndata = \"dpp\"\n");
  CHECK(contains(validate_error(dir / "r.toml"), "no plugin grad/dpp; did you mean grad/ddp?"));
  write_file(dir / "r.toml", "[tokenizer]\nplugin = \"wordpiece\"\n");
  CHECK(contains(validate_error(dir / "r.toml"),
                 "no plugin tokenizer/wordpiece (available tokenizer plugins: byte)"));
}

TEST_CASE("a required key without a value is an error; with one it validates") {
  TempDir dir;
  write_file(dir / "r.toml", "[data]\nplugin = \"needs\"\n");
  CHECK(validate_error(dir / "r.toml") ==
        (dir / "r.toml").string() +
            ": missing required key 'data.path' for dataset/needs (the data file (required))");
  write_file(dir / "r.toml", "[data]\nplugin = \"needs\"\npath = \"x.jsonl\"\n");
  CHECK(validate_error(dir / "r.toml") == "");
}

TEST_CASE("train.deterministic sets the switch of every plugin that has one") {
  StubPlugins stubs;
  TempDir dir;
  write_file(dir / "r.toml", "[attention]\nplugin = \"fussy\"\n");
  Registry registry;
  // attention/fussy declares `deterministic`; backend/cpu and the others do not
  Recipe on = validated(dir / "r.toml", registry, {"train.deterministic=true"});
  CHECK(on.get_bool("attention", "deterministic"));
  CHECK(on.to_toml().find("deterministic = true") != std::string::npos);
  Recipe off = validated(dir / "r.toml", registry);
  CHECK_FALSE(off.get_bool("attention", "deterministic"));
  Recipe both = validated(dir / "r.toml", registry,
                          {"train.deterministic=true", "attention.deterministic=true"});
  CHECK(both.get_bool("attention", "deterministic"));
  // A plugin without the switch is taken as deterministic: nothing to set, nothing refused.
  CHECK(validate_error(dir / "r.toml", {"train.deterministic=true", "attention.plugin=reference"})
            .empty());
  // The plugin's own false contradicts it, named where it was said.
  write_file(dir / "no.toml", "[attention]\nplugin = \"fussy\"\ndeterministic = false\n");
  const std::string e = validate_error(dir / "no.toml", {"train.deterministic=true"});
  CHECK(e.find("no.toml:3: attention.deterministic = false contradicts train.deterministic = "
               "true") != std::string::npos);
  CHECK(validate_error(dir / "no.toml").empty());
}

TEST_CASE("to_toml writes every key and reloads to the same recipe") {
  StubPlugins stubs;
  TempDir dir;
  write_file(dir / "r.toml",
             "[model]\nn_layer = 3\nname = \"quote\\\" and \\\\ and \\n\"\n[lr]\nmax = 1e-3\n"
             "[data]\nsplit = \"90,5,5\"\n");
  Registry registry;
  Recipe a = validated(dir / "r.toml", registry);
  std::string text = a.to_toml();
  CHECK(contains(text, "[train]\nseed = 1234\n"));
  CHECK(contains(text, "[model]\nplugin = \"gpt\"\nn_layer = 3\n"));
  CHECK(contains(text, "dropout = 0.0\n"));
  CHECK(contains(text, "max = 0.001\n"));
  write_file(dir / "resolved.toml", text);
  Recipe b = validated(dir / "resolved.toml", registry);
  CHECK(b.to_toml() == text);
  for (const char* section : {"train", "model", "lr", "data", "parallel", "optimizer"}) {
    const auto& va = a.section(section).values;
    const auto& vb = b.section(section).values;
    REQUIRE(va.size() == vb.size());
    for (const auto& [key, v] : va) {
      CAPTURE(key);
      const Value& w = vb.at(key);
      CHECK(v.type == w.type);
      CHECK(v.b == w.b);
      CHECK(v.i == w.i);
      CHECK(v.f == w.f);
      CHECK(v.s == w.s);
    }
  }
}

TEST_CASE("config getters serve declared keys of the declared type only") {
  StubPlugins stubs;
  TempDir dir;
  write_file(dir / "r.toml", "[model]\nn_layer = 3\nactivation = \"swiglu\"\n");
  Registry registry;
  Recipe r = validated(dir / "r.toml", registry);
  const loom_config* cfg = &r.section("model");
  int64_t i = 0;
  double f = -1;
  int b = -1;
  const char* s = nullptr;
  CHECK(config_get_int(cfg, "n_layer", &i) == nullptr);
  CHECK(i == 3);
  CHECK(config_get_float(cfg, "dropout", &f) == nullptr);
  CHECK(f == 0.0);
  CHECK(config_get_bool(cfg, "bias", &b) == nullptr);
  CHECK(b == 1);
  CHECK(config_get_string(cfg, "activation", &s) == nullptr);
  CHECK(std::string(s) == "swiglu");
  loom_error* e = config_get_int(cfg, "n_layers", &i);
  REQUIRE(e != nullptr);
  CHECK(e->code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(e->message, "no key 'n_layers'"));
  free_error(e);
  e = config_get_float(cfg, "n_layer", &f);
  REQUIRE(e != nullptr);
  CHECK(contains(e->message, "model.n_layer is int, not float"));
  free_error(e);
}

TEST_CASE("nearest() suggests close names only") {
  std::vector<std::string> keys = {"n_layer", "n_head", "n_embd", "dropout"};
  CHECK(nearest("n_layr", keys) == "n_layer");
  CHECK(nearest("N_HEAD", keys) == "n_head");
  CHECK(nearest("n_hed", keys) == "n_head");
  CHECK(nearest("droput", keys) == "dropout");
  CHECK(nearest("xyz", keys) == "");
  CHECK(nearest("gtp", {"gpt", "bert"}) == "gpt");  // a transposition is one edit
  CHECK(nearest("a", {"b"}) == "");                 // replacing the whole word is no suggestion
  CHECK(nearest("anything", {}) == "");
  CHECK(nearest("learning_rate", keys) == "");
}

TEST_CASE("engine schemas are well formed") {
  std::set<std::string> names;
  for (const EngineSection& s : engine_sections()) {
    CHECK(names.insert(s.name).second);
    CHECK(s.doc != nullptr);
    for (size_t i = 0; i < s.num_params; ++i) {
      const loom_param_spec& p = s.params[i];
      CAPTURE(p.name);
      CHECK(p.struct_size == LOOM_PARAM_SPEC_SIZE_V2);
      CHECK(p.doc != nullptr);
      CHECK(std::string(p.doc).size() > 5);
      Value v;
      CHECK(parse_default(p, v) == "");
    }
  }
  for (const PluginSection& s : plugin_sections()) {
    CHECK(names.insert(s.name).second);
    REQUIRE(s.num_extra >= 1);
    CHECK(std::string(s.extra[0].name) == "plugin");
    CHECK(std::string(s.extra[0].default_value) == s.default_plugin);
    CHECK(section_of_kind()[s.kind] == s.name);
    for (size_t i = 0; i < s.num_extra; ++i) {
      Value v;
      CHECK(parse_default(s.extra[i], v) == "");
    }
  }
  CHECK(names.size() == 13);
}

TEST_CASE("parse_default reads TOML literal text per type") {
  Value v;
  CHECK(parse_default(loom::param("a", LOOM_PARAM_FLOAT, "3e-4", "d"), v) == "");
  CHECK(v.f == doctest::Approx(3e-4));
  CHECK(parse_default(loom::param("a", LOOM_PARAM_FLOAT, "2", "d"), v) == "");
  CHECK(v.f == 2.0);
  CHECK(parse_default(loom::param("a", LOOM_PARAM_STRING, "\"q\\tx\"", "d"), v) == "");
  CHECK(v.s == "q\tx");
  CHECK(parse_default(loom::param("a", LOOM_PARAM_STRING, "gelu", "d"), v) == "");
  CHECK(v.s == "gelu");
  CHECK(parse_default(loom::param("a", LOOM_PARAM_INT, "1.5", "d"), v) ==
        "default \"1.5\" is not an integer");
  CHECK(parse_default(loom::param("a", LOOM_PARAM_BOOL, "yes", "d"), v) ==
        "default \"yes\" is not a boolean");
  CHECK(parse_default(loom::param("a", LOOM_PARAM_INT, "0", "d", 1, 10), v) ==
        "default must be between 1 and 10, got 0");
  CHECK(parse_default(loom::param("a", LOOM_PARAM_STRING, "c", "d", 1, 0, "a|b"), v) ==
        "default must be one of a|b, got \"c\"");
  CHECK(describe_range(loom::param("a", LOOM_PARAM_INT, "1", "d", 1, 1e300)) == ">= 1");
  CHECK(describe_range(loom::param("a", LOOM_PARAM_FLOAT, "1", "d", -1e300, 5)) == "<= 5");
  CHECK(describe_range(loom::param("a", LOOM_PARAM_FLOAT, "1", "d")) == "");
}
