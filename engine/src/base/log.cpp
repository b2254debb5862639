// spdlog setup and the Progress helper.
#include "base/log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace loom::engine::log {

namespace {

std::atomic<int> g_rank{0};
std::atomic<bool> g_level_chosen{false};  // LOOM_LOG_LEVEL set: every rank logs at it

// Without LOOM_LOG_LEVEL, rank 0 alone says what the job does (info) and every other rank
// only what goes wrong on it (warnings, errors): N ranks would print every set-up line N times.
void apply_default_level() {
  if (!g_level_chosen) spdlog::set_level(g_rank == 0 ? spdlog::level::info : spdlog::level::warn);
}

// "%*": "warning: " / "error: " / "debug: " before the message; nothing for info.
class LevelTag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const char* tag = "";
    switch (msg.level) {
      case spdlog::level::trace:
        tag = "trace: ";
        break;
      case spdlog::level::debug:
        tag = "debug: ";
        break;
      case spdlog::level::warn:
        tag = "warning: ";
        break;
      case spdlog::level::err:
        tag = "error: ";
        break;
      case spdlog::level::critical:
        tag = "critical: ";
        break;
      default:
        break;
    }
    dest.append(tag, tag + std::char_traits<char>::length(tag));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelTag>();
  }
};

void apply_pattern() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<LevelTag>('*').set_pattern("[r" + std::to_string(g_rank.load()) +
                                                 "] %^%*%v%$");
  spdlog::set_formatter(std::move(formatter));
}

int rank_from_env() {
  for (const char* var :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"}) {
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return 0;
}

}  // namespace

void setup() {
  g_rank = rank_from_env();
  auto logger = spdlog::get("loom");
  if (!logger) logger = spdlog::stderr_color_mt("loom");
  spdlog::set_default_logger(logger);
  apply_pattern();
  const char* v = std::getenv("LOOM_LOG_LEVEL");
  g_level_chosen = v && *v;
  apply_default_level();
  if (!g_level_chosen) return;
  std::string level = v;
  if (level == "warning") level = "warn";
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    g_level_chosen = false;
    apply_default_level();
    spdlog::warn("LOOM_LOG_LEVEL={} is not one of trace, debug, info, warn, error, off; using info",
                 level);
  } else {
    spdlog::set_level(parsed);
  }
}

void set_rank(int rank) {
  g_rank = rank;
  apply_pattern();
  apply_default_level();
}

int rank() { return g_rank.load(); }

Progress::Progress(std::string what, int64_t total, double interval_seconds, int tty)
    : what_(std::move(what)),
      total_(total),
      interval_(interval_seconds),
      tty_(tty >= 0 ? tty == 1
                    : isatty(STDERR_FILENO) == 1 && spdlog::should_log(spdlog::level::info)),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (!finished_) finish();
}

void Progress::update(int64_t done) {
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  if (since < (tty_ ? 0.1 : interval_)) return;
  last_ = now;
  print(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (total_ > 0) done_ = std::max(done_, total_);
  print(true);
}

void Progress::print(bool final) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  char line[256];
  if (total_ > 0) {
    double frac = static_cast<double>(done_) / static_cast<double>(total_);
    double eta = frac > 0 ? secs / frac - secs : 0;
    std::snprintf(line, sizeof line, "%s: %lld/%lld (%.0f%%), %.1fs%s", what_.c_str(),
                  static_cast<long long>(done_), static_cast<long long>(total_), 100.0 * frac,
                  final ? secs : eta, final ? "" : " left");
  } else {
    std::snprintf(line, sizeof line, "%s: %lld, %.1fs", what_.c_str(),
                  static_cast<long long>(done_), secs);
  }
  if (tty_) {
    std::fprintf(stderr, "\r[r%d] %s\033[K%s", g_rank.load(), line, final ? "\n" : "");
    std::fflush(stderr);
  } else {
    spdlog::info("{}", line);
  }
}

}  // namespace loom::engine::log
