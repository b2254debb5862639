// Logging setup and the Progress helper (non-TTY mode: periodic lines).
#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "base/log.hpp"
#include "engine_test_util.hpp"
#include "session/host.hpp"

using namespace enginetest;
namespace llog = loom::engine::log;

TEST_CASE("log lines carry the rank; LOOM_LOG_LEVEL filters") {
  ScopedEnv level("LOOM_LOG_LEVEL", "warning");
  ScopedEnv rank("OMPI_COMM_WORLD_RANK", "3");
  llog::setup();
  CHECK(llog::rank() == 3);
  CHECK_FALSE(spdlog::should_log(spdlog::level::info));
  CHECK(spdlog::should_log(spdlog::level::warn));

  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto& sinks = spdlog::default_logger()->sinks();
  const auto saved = sinks;  // only the test's sink while it runs
  sinks.assign(1, sink);
  llog::set_rank(5);  // the formatter is applied to every sink
  spdlog::warn("disk {} full", 2);
  spdlog::info("hidden");
  spdlog::default_logger()->flush();
  CHECK(out.str() == "[r5] warning: disk 2 full\n");

  spdlog::set_level(spdlog::level::info);
  out.str("");
  {
    llog::Progress p("indexing", 10, 0.0, /*tty=*/0);  // interval 0: every update prints
    p.update(5);
  }  // the destructor finishes
  std::string text = out.str();
  CHECK(contains(text, "[r5] indexing: 5/10 (50%)"));
  CHECK(contains(text, "[r5] indexing: 10/10 (100%)"));
  sinks = saved;
  llog::set_rank(0);
}

TEST_CASE("without LOOM_LOG_LEVEL only rank 0 logs info lines; with it every rank does") {
  ScopedEnv level("LOOM_LOG_LEVEL", "");
  ScopedEnv rank("OMPI_COMM_WORLD_RANK", "1");
  llog::setup();
  CHECK_FALSE(spdlog::should_log(spdlog::level::info));  // rank 1: warnings and errors only
  CHECK(spdlog::should_log(spdlog::level::warn));
  llog::set_rank(0);
  CHECK(spdlog::should_log(spdlog::level::info));
  llog::set_rank(2);
  CHECK_FALSE(spdlog::should_log(spdlog::level::info));
  {
    ScopedEnv chosen("LOOM_LOG_LEVEL", "info");
    llog::setup();  // rank 1 again, from the environment
    CHECK(llog::rank() == 1);
    CHECK(spdlog::should_log(spdlog::level::info));
  }
  llog::set_rank(0);
  spdlog::set_level(spdlog::level::info);
}

// Issue 35: a plugin that names itself in its message ("tokenizer/gpt2-bpe: 50257 tokens")
// was logged as "tokenizer/gpt2-bpe: tokenizer/gpt2-bpe: 50257 tokens".
TEST_CASE("a plugin's log line names it once, whether or not its message does") {
  llog::setup();
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto& sinks = spdlog::default_logger()->sinks();
  const auto saved = sinks;
  sinks.assign(1, sink);
  llog::set_rank(0);
  spdlog::set_level(spdlog::level::info);
  loom::engine::host_abi::log_as("tokenizer/gpt2-bpe", LOOM_LOG_INFO,
                                 "tokenizer/gpt2-bpe: 5 tokens");
  loom::engine::host_abi::log_as("tokenizer/gpt2-bpe", LOOM_LOG_WARN, "50 merges");
  loom::engine::host_abi::log_as("dataset/indexed run/data/x", LOOM_LOG_INFO,
                                 "dataset/indexed: 3 docs");
  loom::engine::host_abi::log_as("model/gpt", LOOM_LOG_INFO, "model/gpt2: not mine");
  spdlog::default_logger()->flush();
  CHECK(out.str() ==
        "[r0] tokenizer/gpt2-bpe: 5 tokens\n"
        "[r0] warning: tokenizer/gpt2-bpe: 50 merges\n"
        "[r0] dataset/indexed run/data/x: 3 docs\n"
        "[r0] model/gpt: model/gpt2: not mine\n");
  sinks = saved;
}
