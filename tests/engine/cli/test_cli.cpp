// The `loom` binary's exit codes and one-line errors for bad recipes and bad plugins.
#include <doctest/doctest.h>

#include "engine_test_util.hpp"

using namespace enginetest;

namespace {

const std::string kStubs = LOOM_TEST_STUB_DIR;

// The one line a usage error prints, checked for shape.
std::string error_line(const Result& r) {
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.rfind("loom: error: ", 0) == 0);
  return r.err;
}

}  // namespace

TEST_CASE("a misspelt key exits 2 with file:line and the suggestion") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[model]\nn_layr = 12\n");
  for (const char* cmd : {"validate", "run"}) {
    CAPTURE(cmd);
    Result r = run_loom(std::string(cmd) + " " + q(recipe.string()));
    CHECK(r.code == 2);
    CHECK(error_line(r) == "loom: error: " + recipe.string() +
                               ":2: unknown key 'model.n_layr' for model/gpt; did you mean "
                               "'n_layer'?\n");
  }
}

TEST_CASE("a missing plugin exits 2 with the nearest plugin") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[train]\niters = 1\n[model]\nplugin = \"gtp\"\n");
  Result r = run_loom("validate " + q(recipe.string()));
  CHECK(r.code == 2);
  CHECK(error_line(r) ==
        "loom: error: " + recipe.string() + ":4: no plugin model/gtp; did you mean model/gpt?\n");
}

TEST_CASE("a corrupt .so is refused with a reason, selecting it exits 2") {
  TempDir dir;
  write_file(dir / "plugins/loom-backend-bad.so", "this is not a shared object\n");
  fs::path recipe = write_file(dir / "r.toml", "[backend]\nplugin = \"bad\"\n");
  const std::string path = (dir / "plugins").string() + ":" + kStubs;
  Result r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 2);
  CHECK(error_line(r) == "loom: error: " + recipe.string() + ":2: plugin backend/bad refused: " +
                             (dir / "plugins/loom-backend-bad.so").string() +
                             ": not a shared object (no ELF header)\n");
  // Listing does not fail: the library shows under "refused".
  r = run_loom("plugins", path);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "refused:\n  " + (dir / "plugins/loom-backend-bad.so").string() +
                            ": not a shared object (no ELF header)\n"));
  CHECK(contains(r.out, "model      gpt"));
}

TEST_CASE("a truncated ELF file is refused with dlopen's reason on one line") {
  TempDir dir;
  write_file(dir / "plugins/loom-model-trunc.so", std::string("\x7f"
                                                              "ELF\x02\x01\x01",
                                                              7));
  Result r = run_loom("plugins", (dir / "plugins").string());
  CHECK(r.code == 0);
  CHECK(contains(r.out, "loom-model-trunc.so: cannot load: "));
}

TEST_CASE("an ABI-mismatched plugin is refused; selecting it exits 2") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[optimizer]\nplugin = \"tiny\"\n");
  const std::string path = kStubs + ":" + LOOM_TEST_TINY_OTHER_DIR;
  Result r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 2);
  CHECK(error_line(r) == "loom: error: " + recipe.string() +
                             ":2: plugin optimizer/tiny refused: " + LOOM_TEST_TINY_OTHER_DIR +
                             "/loom-optimizer-tiny.so: built for Loom ABI 3.0, this host is " +
                             kHostAbi + " (it needs a newer Loom)\n");
  // The build of the same plugin for this ABI validates.
  r = run_loom("validate " + q(recipe.string()), kStubs + ":" + LOOM_TEST_TINY_DIR);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "optimizer/tiny"));
}

TEST_CASE("libraries without the entry symbol or with a NULL descriptor are refused") {
  Result r = run_loom("plugins", LOOM_TEST_ODD_DIR);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "loom-model-noentry.so: no loom_plugin_entry symbol (not a Loom plugin)"));
  CHECK(contains(r.out, "loom-optimizer-null.so: loom_plugin_entry returned NULL"));
  CHECK(contains(r.out, "loom-optimizer-badkind.so: unknown plugin kind 42\n"));
  CHECK(contains(r.out,
                 "loom-optimizer-small.so: descriptor struct_size 24 is smaller than "
                 "ABI 2.0's 104\n"));
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[model]\nplugin = \"noentry\"\n");
  r = run_loom("validate " + q(recipe.string()), kStubs + ":" + LOOM_TEST_ODD_DIR);
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "plugin model/noentry refused: "));
}

TEST_CASE("a plugin built against the 1.1 SDK is refused, naming both majors") {
  // Its entry answers only a host of major 1: the host asks again as 1.x to name it.
  Result r = run_loom("plugins", LOOM_TEST_ABI1_DIR);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "loom-optimizer-old.so: built for Loom ABI 1.1, this host is " + kHostAbi +
                            " (rebuild it against the Loom 2 SDK)\n"));
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[optimizer]\nplugin = \"old\"\n");
  r = run_loom("validate " + q(recipe.string()), kStubs + ":" + LOOM_TEST_ABI1_DIR);
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "plugin optimizer/old refused: "));
  CHECK(contains(error_line(r), "built for Loom ABI 1.1, this host is " + kHostAbi));
}

TEST_CASE("capability ids are checked: name/version, and every ext id listed") {
  Result r = run_loom("plugins", LOOM_TEST_ABI1_DIR);
  CHECK(r.code == 0);
  CHECK(contains(r.out,
                 "loom-optimizer-badcap.so: capability 'loom.decode' is not an id "
                 "of the form name/version (\"loom.decode/1\")\n"));
  CHECK(contains(r.out,
                 "loom-optimizer-unlisted.so: extension 'loom.test-unlisted/1' on the "
                 "descriptor's ext chain is not listed in its capabilities\n"));
  // A good plugin shows its capabilities.
  r = run_loom("plugins describe optimizer/tiny", LOOM_TEST_TINY_DIR);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "capabilities: loom.test-listed/1"));
}

// Issue 17, finding 5: a plugin whose entry returns a wild pointer made every command exit
// 139 without a word, since every command loaded every plugin on the search path.
TEST_CASE("a plugin that crashes while loading takes down only what selects it") {
  const std::string wild_so = std::string(LOOM_TEST_WILD_DIR) + "/loom-optimizer-wild.so";
  const std::string path = kStubs + ":" + LOOM_TEST_WILD_DIR;
  // The listing probes each library in a child process: the crash is a refusal.
  Result r = run_loom("plugins", path);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "model      gpt"));
  CHECK(contains(r.out, wild_so + ": crashed while loading (signal 11, Segmentation fault; "
                                  "probed in a child process)"));
  r = run_loom("plugins --load", path);
  CHECK(r.code == 0);
  CHECK(contains(r.out, wild_so + ": crashed while loading (signal 11"));
  // Commands load only the plugins they use.
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[train]\niters = 1\n");
  r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "ok: "));
  r = run_loom("plugins describe optimizer/adamw", path);
  CHECK(r.code == 0);
  // A recipe that selects it gets one line naming it, not a bare 139.
  fs::path wild = write_file(dir / "wild.toml", "[optimizer]\nplugin = \"wild\"\n");
  r = run_loom("validate " + q(wild.string()), path);
  CHECK(r.code == 2);
  CHECK(error_line(r) == "loom: error: plugin " + wild_so +
                             " crashed while loading (a wild pointer in its descriptor or its "
                             "initialisation); remove it from the plugin search path\n");
  // A whole training run with the real plugins beside it.
  fs::path run = write_file(dir / "run.toml",
                            "[train]\niters = 2\nmicro_batch_size = 2\nseq_len = 16\n"
                            "[backend]\nmeasure_gemm = false\nthreads = 1\n"
                            "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nmax_seq_len = 16\n"
                            "[tokenizer]\nplugin = \"byte\"\n"
                            "[data]\nplugin = \"mock\"\nnum_documents = 20\ndoc_length = 64\n");
  r = run_loom("run " + q(run.string()),
               std::string(LOOM_TEST_PLUGIN_DIR) + ":" + LOOM_TEST_WILD_DIR);
  CHECK_MESSAGE(r.code == 0, r.err);
}

TEST_CASE("a function table with a NULL mandatory slot is refused, naming the slot") {
  const std::string so = std::string(LOOM_TEST_ODD_DIR) + "/loom-optimizer-nullslot.so";
  const std::string why =
      "optimizer function table leaves mandatory slot 'step' NULL (the host would crash "
      "calling it)";
  Result r = run_loom("plugins", LOOM_TEST_ODD_DIR);
  CHECK(r.code == 0);
  CHECK(contains(r.out, so + ": " + why + "\n"));
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[optimizer]\nplugin = \"nullslot\"\n");
  r = run_loom("validate " + q(recipe.string()), kStubs + ":" + LOOM_TEST_ODD_DIR);
  CHECK(r.code == 2);
  CHECK(error_line(r) == "loom: error: " + recipe.string() +
                             ":2: plugin optimizer/nullslot refused: " + so + ": " + why + "\n");
}

TEST_CASE("world-writable plugin folders and files are warned about") {
  TempDir dir;
  const fs::path folder = dir / "open";
  fs::create_directories(folder);
  const fs::path so = folder / "loom-optimizer-tiny.so";
  fs::copy_file(fs::path(LOOM_TEST_TINY_DIR) / "loom-optimizer-tiny.so", so);
  fs::path recipe = write_file(dir / "r.toml", "");
  const std::string path = kStubs + ":" + folder.string();
  Result r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 0);
  CHECK_FALSE(contains(r.err, "world-writable"));
  fs::permissions(folder, fs::perms::others_write, fs::perm_options::add);
  r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "plugin folder " + folder.string() +
                            " is world-writable: anyone on this machine can replace the code "
                            "loom loads from it (chmod o-w it)"));
  CHECK_FALSE(contains(r.err, "plugin file"));
  fs::permissions(so, fs::perms::others_write, fs::perm_options::add);
  r = run_loom("plugins", path);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "plugin file " + so.string() + " is world-writable"));
}

TEST_CASE("a duplicate kind/name is refused; the first one found wins") {
  TempDir dir;
  fs::create_directories(dir / "second");
  fs::copy_file(fs::path(LOOM_TEST_TINY_DIR) / "loom-optimizer-tiny.so",
                dir / "second/loom-optimizer-tiny.so");
  Result r = run_loom("plugins", std::string(LOOM_TEST_TINY_DIR) + ":" + (dir / "second").string());
  CHECK(r.code == 0);
  CHECK(contains(r.out, (dir / "second/loom-optimizer-tiny.so").string() +
                            ": duplicates optimizer/tiny already loaded from " +
                            LOOM_TEST_TINY_DIR + "/loom-optimizer-tiny.so"));
}

TEST_CASE("validate prints the layout and one ok line naming the plugins") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[train]\niters = 1\n");
  Result r = run_loom("validate " + q(recipe.string()));
  CHECK(r.code == 0);
  CHECK(r.out.rfind("layout: world 1 = tensor 1 x context 1 x data 1 x pipeline 1", 0) == 0);
  CHECK(contains(r.out, "  layers per stage: 12 (1 stage)\n"));
  CHECK(contains(r.out,
                 "\nok: " + recipe.string() +
                     ": 1 section, plugins: backend/cpu comm/single model/gpt "
                     "attention/reference grad/ddp schedule/1f1b optimizer/adamw tokenizer/byte "
                     "dataset/mock\n"));
  r = run_loom("validate " + q(recipe.string()) + " --set train.iters=7 --print");
  CHECK(r.code == 0);
  CHECK(contains(r.out, "[train]\nseed = 1234\niters = 7\n"));
}

TEST_CASE("validate refuses a model that reads a batch array the data does not provide") {
  // The stub model/typed's batch_spec adds token_types (as BERT's will); GPT samples provide
  // tokens and targets only. Refused at validate, before anything is created, exit 2.
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[model]\nplugin = \"typed\"\n");
  Result r = run_loom("validate " + q(recipe.string()));
  CHECK(r.code == 2);
  const std::string said = r.err + r.out;
  CHECK_MESSAGE(contains(said,
                         "model/typed reads the micro-batch array token_types (i32 B x T), "
                         "which the data does not provide; it provides tokens (i32 B x T), "
                         "targets (i32 B x T)"),
                said);
}

TEST_CASE("command-line mistakes exit 2 with one line") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "");
  Result r = run_loom("validate");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "loom validate: missing RECIPE"));
  r = run_loom("validate " + q(recipe.string()) + " --bogus");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "unrecognised option '--bogus'"));
  r = run_loom("validate " + q((dir / "nope.toml").string()));
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "nope.toml' not found"));
  r = run_loom("valdate x");
  CHECK(r.code == 2);
  CHECK(error_line(r) == "loom: error: unknown command 'valdate'; did you mean 'validate'?\n");
  r = run_loom("validate " + q(recipe.string()) + " --set nonsense");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "--set expects section.key=value"));
  r = run_loom("generate --prompt hi");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "missing --checkpoint DIR"));
  r = run_loom("generate --checkpoint x --prompt hi --top-p 0");
  CHECK(r.code == 2);
  r = run_loom("");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "usage: loom <command>"));
}

// Regressions of issue 17's bad-input campaign (finding 7): each was accepted, misnamed, or
// failed at run time with exit 1.
TEST_CASE("bad numbers and paths on the command line and in recipes exit 2 with the reason") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "");
  Result r = run_loom("validate " + q(dir.path().string()));
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "is a folder, not a recipe file"));
  r = run_loom("validate " + q(recipe.string()) + " --world 0");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "--world must be at least 1, got 0"));
  for (const char* bad : {"lr.max=inf", "precision.loss_scale=inf", "lr.max=nan"}) {
    r = run_loom("validate " + q(recipe.string()) + " --set " + bad);
    CHECK_MESSAGE(r.code == 2, bad);
    CHECK_MESSAGE(contains(error_line(r), "must be"), bad);
  }
  for (const char* rtol : {"-1", "nan"}) {
    r = run_loom(std::string("checkpoint diff a b --rtol ") + rtol);
    CHECK_MESSAGE(r.code == 2, rtol);
    CHECK_MESSAGE(contains(error_line(r), "--rtol must be a finite number >= 0"), rtol);
  }
  r = run_loom("generate --checkpoint x --prompt hi --max-new-tokens 9223372036854775807");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "--max-new-tokens must be from 0 to 1073741824"));
}

// Issue 17, finding 4: sizes of 10^18 passed validation and then spun in the GPT index's
// epoch count (10^12 iterations ended in std::bad_alloc); and finding 7: iters = 0 said "the
// training split is empty". Each is refused by validate, and by run before any index exists.
TEST_CASE("huge or zero training sizes exit 2 at validation, naming the keys") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml", "[train]\nmicro_batch_size = 4\n");
  const std::string huge = "1000000000000000000";
  auto refused = [&](const std::string& set, const std::string& why) {
    for (const char* cmd : {"validate", "run"}) {
      Result r = run_loom(std::string(cmd) + " " + q(recipe.string()) + " --set " + set);
      CAPTURE(cmd);
      CAPTURE(set);
      CHECK(r.code == 2);
      CHECK(contains(error_line(r), why));
    }
  };
  refused("train.iters=" + huge,
          "--set train.iters: train.iters x global batch = " + huge +
              " x 4 samples, more than the 2^36 (68719476736) a split may hold");
  refused("train.iters=1000000000000",
          "train.iters x global batch = 1000000000000 x 4 samples, more than the 2^36");
  refused("train.global_batch_size=" + huge, "train.iters x global batch = 100 x " + huge);
  refused("train.eval_interval=1 --set train.eval_iters=1000000000",
          "validation: (train.iters / train.eval_interval + 1) x train.eval_iters x global batch "
          "= 101 x 1000000000 x 4 samples");
  refused("train.micro_batch_size=" + huge,
          "--set train.micro_batch_size: train.micro_batch_size x train.seq_len = " + huge +
              " x 64 tokens per micro-batch, more than 2147483647");
  refused("train.seq_len=" + huge, "train.seq_len must be between 1 and 16777216, got " + huge);
  refused("train.iters=0", "train.iters must be >= 1, got 0");
  // The largest sizes within the bounds validate.
  Result r = run_loom("validate " + q(recipe.string()) +
                      " --set train.iters=17179869184 --set train.seq_len=16777216 "
                      "--set train.micro_batch_size=4 --set train.global_batch_size=4");
  CHECK(r.code == 0);
}

TEST_CASE("--help and version exit 0") {
  for (const char* cmd :
       {"run", "validate", "plugins", "generate", "pack", "install", "version", "parity"}) {
    CAPTURE(cmd);
    Result r = run_loom(std::string(cmd) + " --help");
    CHECK(r.code == 0);
    CHECK(contains(r.out, std::string("usage: loom ") + cmd));
  }
  Result r = run_loom("--help");
  CHECK(r.code == 0);
  r = run_loom("version");
  CHECK(r.code == 0);
  CHECK(contains(r.out, "plugin ABI " + kHostAbi));
}

TEST_CASE("plugins lists a table and describe shows a schema") {
  Result r = run_loom("plugins");
  CHECK(r.code == 0);
  CHECK(r.out.rfind("KIND       NAME", 0) == 0);
  CHECK(contains(r.out, "optimizer  adamw      0.0.1    " + kHostAbi + "  Loom tests  " + kStubs +
                            "/loom-optimizer-adamw.so"));
  CHECK_FALSE(contains(r.out, "refused:"));
  r = run_loom("plugins describe model/gpt");
  CHECK(r.code == 0);
  CHECK(contains(r.out, "model/gpt 0.0.1: stand-in for engine tests"));
  CHECK(contains(r.out, "selected with [model] plugin = \"gpt\"; its keys:"));
  CHECK(contains(r.out, "n_layer     int     12       >= 1             transformer layers"));
  CHECK(contains(r.out, "activation  string  \"gelu\"   gelu|swiglu"));
  r = run_loom("plugins describe data/needs");
  CHECK(r.code == 0);
  CHECK(contains(r.out, "path  string  (required)"));
  r = run_loom("plugins describe model/gtp");
  CHECK(r.code == 2);
  CHECK(error_line(r) == "loom: error: no plugin model/gtp; did you mean model/gpt?\n");
  r = run_loom("plugins describe modle/gpt");
  CHECK(r.code == 2);
  CHECK(contains(error_line(r), "unknown plugin kind 'modle'; did you mean 'model'?"));
}

// With the real plugins (the schedules and model/gpt's head counts).
TEST_CASE("invalid parallel layouts are refused at validation with the numbers involved") {
  TempDir dir;
  fs::path recipe = write_file(dir / "r.toml",
                               "[train]\nmicro_batch_size = 2\nglobal_batch_size = 8\n"
                               "[model]\nn_layer = 4\nn_head = 6\n");
  auto refused = [&](const std::string& args, const std::string& why) {
    Result r = run_loom("validate " + q(recipe.string()) + " " + args, LOOM_TEST_PLUGIN_DIR);
    CAPTURE(args);
    CHECK(r.code == 2);
    CHECK(contains(r.err, why));
  };
  refused("--world 6 --set parallel.tensor=4",
          "parallel layout for 6 ranks: world size 6 is not divisible by tensor (4) x context "
          "(1) x pipeline (1) = 4");
  refused("--world 3 --set parallel.pipeline=3",
          "n_layer = 4 is not divisible by pipeline (3) x virtual_stages (1) = 3 stages");
  refused("--world 4 --set parallel.tensor=4", "n_head = 6 is not divisible by tensor = 4");
  refused("--world 4 --set parallel.pipeline=2 --set parallel.virtual_stages=2",
          "parallel.schedule = \"1f1b\": schedule/1f1b: runs one model chunk per rank but "
          "virtual_stages = 2; use parallel.schedule = \"interleaved-1f1b\"");
  refused("--world 2 --set parallel.sequence_parallel=true", "sequence_parallel needs tensor > 1");
  refused("--world 3",
          "train.global_batch_size = 8 is not a multiple of micro_batch_size (2) x "
          "data-parallel size (3)");
  refused(
      "--world 2 --set parallel.pipeline=2 --set parallel.virtual_stages=2 "
      "--set parallel.schedule=interleaved-1f1b --set train.global_batch_size=6",
      "schedule/interleaved-1f1b: needs the number of micro-batches (3) to be a multiple of "
      "pipeline (2)");
  // the V-shaped schedules place two chunks per rank, and DualPipeV needs 2P micro-batches
  refused("--world 2 --set parallel.pipeline=2 --set parallel.schedule=zb-v",
          "schedule/zb-v: places two model chunks per rank in a V (virtual_stages = 2), not 1");
  refused(
      "--world 2 --set parallel.pipeline=2 --set parallel.virtual_stages=2 "
      "--set parallel.schedule=dualpipev --set train.global_batch_size=6",
      "schedule/dualpipev: needs at least 2 x pipeline = 4 micro-batches a step");
  // context parallelism cuts each sample into 2 x context chunks (seq_len 64 here)
  refused("--world 6 --set parallel.context=3 --set train.seq_len=64",
          "train.seq_len = 64 is not divisible by 2 x context = 6");
  // expert parallelism splits model.num_experts
  refused("--world 2 --set parallel.expert=2",
          "expert = 2 splits a mixture of experts, and model.num_experts is 0");
  refused(
      "--world 3 --set parallel.expert=3 --set model.num_experts=4 "
      "--set train.global_batch_size=6",
      "model.num_experts = 4 is not divisible by expert = 3");
  // every problem is named, not just the first
  refused("--world 12 --set parallel.tensor=4 --set parallel.pipeline=3",
          "n_layer = 4 is not divisible by pipeline (3) x virtual_stages (1) = 3 stages; n_head "
          "= 6 is not divisible by tensor = 4");
  Result ok = run_loom("validate " + q(recipe.string()) +
                           " --world 8 --set parallel.tensor=2 --set parallel.pipeline=2",
                       LOOM_TEST_PLUGIN_DIR);
  CHECK(ok.code == 0);
  CHECK(contains(ok.out, "layout: world 8 = tensor 2 x context 1 x data 2 x pipeline 2"));
  CHECK(contains(ok.out, "  tensor groups: [0 1] [2 3] [4 5] [6 7]\n"));
  CHECK(contains(ok.out, "  data groups: [0 2] [1 3] [4 6] [5 7]\n"));
  CHECK(contains(ok.out, "  pipeline groups: [0 4] [1 5] [2 6] [3 7]\n"));
  CHECK(contains(ok.out, "  layers per stage: 2 (2 stages)\n"));
  CHECK(contains(ok.out, "  micro-batches per step: 2 of 2 x 64 on each of 2 data-parallel ranks"));
  // uneven stages (Megatron's decoder_first/last_pipeline_num_layers): 4 layers as 1 + 3,
  // 1 + 1 + 2; what leaves a stage no layer, or stages unequal, is refused with the numbers
  Result uneven = run_loom("validate " + q(recipe.string()) +
                               " --world 2 --set parallel.pipeline=2"
                               " --set model.decoder_first_pipeline_num_layers=1",
                           LOOM_TEST_PLUGIN_DIR);
  CHECK(uneven.code == 0);
  CHECK(contains(uneven.out, "  layers per stage: 1 3 (uneven"));
  uneven = run_loom("validate " + q(recipe.string()) +
                        " --world 3 --set parallel.pipeline=3 --set train.global_batch_size=6"
                        " --set model.decoder_last_pipeline_num_layers=2",
                    LOOM_TEST_PLUGIN_DIR);
  CHECK(uneven.code == 0);
  CHECK(contains(uneven.out, "  layers per stage: 1 1 2 (uneven"));
  refused("--world 2 --set parallel.pipeline=2 --set model.decoder_first_pipeline_num_layers=4",
          "model.decoder_first_pipeline_num_layers = 4 and decoder_last_pipeline_num_layers = 0 "
          "leave 0 of n_layer = 4 layers for the 1 other stage(s)");
  refused("--world 4 --set parallel.pipeline=4 --set model.decoder_first_pipeline_num_layers=2",
          "leave 2 of n_layer = 4 layers for the 3 other stage(s): each needs the same number");
  // one stage holds every layer whatever the keys say (a checkpoint trained uneven serves)
  CHECK(
      run_loom("validate " + q(recipe.string()) + " --set model.decoder_last_pipeline_num_layers=2",
               LOOM_TEST_PLUGIN_DIR)
          .code == 0);
  // under virtual stages (Megatron-Core's interleaved uneven split) the first rank's 2 layers
  // go 1 to each of its chunks, the other rank's 6 go 3 to each; an odd share, or a V, refused
  const std::string vp2 =
      "--world 2 --set parallel.pipeline=2 --set parallel.virtual_stages=2 --set model.n_layer=8 ";
  uneven = run_loom("validate " + q(recipe.string()) + " " + vp2 +
                        "--set parallel.schedule=interleaved-1f1b "
                        "--set model.decoder_first_pipeline_num_layers=2",
                    LOOM_TEST_PLUGIN_DIR);
  CHECK(uneven.code == 0);
  CHECK(contains(uneven.out, "  layers per stage: 1 3 1 3 (uneven"));
  refused(vp2 +
              "--set parallel.schedule=interleaved-1f1b "
              "--set model.decoder_first_pipeline_num_layers=3",
          "each must be divisible by virtual_stages = 2");
  refused(vp2 + "--set parallel.schedule=zb-v --set model.decoder_first_pipeline_num_layers=2",
          "with parallel.schedule = \"zb-v\" is not implemented");
  Result ep = run_loom("validate " + q(recipe.string()) +
                           " --world 4 --set parallel.expert=2 --set model.num_experts=4",
                       LOOM_TEST_PLUGIN_DIR);
  CHECK(ep.code == 0);
  CHECK(contains(ep.out, "  expert groups: [0 1] [2 3]\n"));
  CHECK(contains(ep.out, "  expert data groups: [0 2] [1 3]\n"));
  Result cp = run_loom("validate " + q(recipe.string()) +
                           " --world 4 --set parallel.context=2 --set train.seq_len=64",
                       LOOM_TEST_PLUGIN_DIR);
  CHECK(cp.code == 0);
  CHECK(contains(cp.out, "  context groups: [0 1] [2 3]\n"));
  Result a2a = run_loom("validate " + q(recipe.string()) +
                            " --world 4 --set parallel.context=4 --set train.seq_len=64 "
                            "--set parallel.cp_comm_type=a2a",
                        LOOM_TEST_PLUGIN_DIR);
  CHECK(a2a.code == 2);
  CHECK(contains(a2a.err,
                 "cp_comm_type = \"a2a\" splits the heads: model.n_head = 6 is not "
                 "divisible by tensor x context = 4"));
  Result bad = run_loom("run " + q(recipe.string()) + " --set parallel.cp_comm_type=ring",
                        LOOM_TEST_PLUGIN_DIR);
  CHECK(bad.code == 2);
  CHECK(contains(bad.err, "parallel.cp_comm_type = \"ring\": expected \"p2p\" or \"a2a\""));
}
