// train.schedule_trace (schedule_trace.hpp).
#include "train/schedule_trace.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/errors.hpp"

namespace loom::engine {

ScheduleTrace::ScheduleTrace(std::string path, int64_t iteration, Where where)
    : path_(std::move(path)), iteration_(iteration), where_(std::move(where)) {
  ext_.base = {sizeof(loom_schedule_trace), LOOM_EXT_SCHEDULE_TRACE, 0, nullptr};
  ext_.now = &ScheduleTrace::now;
  ext_.step_done = &ScheduleTrace::step_done;
  ext_.user = this;
}

// The steady clock is one clock for every process of a machine, so the ranks' times line up
// there (across machines they would need an offset, which the trace does not take yet).
double ScheduleTrace::now(void*) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ScheduleTrace::step_done(void* user, const loom_schedule_step* step, double start,
                              double end) {
  static_cast<ScheduleTrace*>(user)->done_.push_back({*step, start, end});
}

void ScheduleTrace::finish() {
  if (!where_.writes) return;
  const std::string file = path_ + "." + std::to_string(where_.pipeline_rank);
  std::ofstream out(file, std::ios::trunc);
  if (!out) throw RunError("train.schedule_trace: cannot write " + file);
  nlohmann::json head = {{"schedule", where_.schedule},
                         {"pipeline", where_.pipeline},
                         {"rank", where_.pipeline_rank},
                         {"virtual_stages", where_.virtual_stages},
                         {"microbatches", where_.microbatches},
                         {"iteration", iteration_},
                         {"stages", where_.stages}};
  out << head.dump() << "\n";
  for (const Done& d : done_)
    out << nlohmann::json{{"phase", d.step.phase},
                          {"chunk", d.step.chunk},
                          {"mb", d.step.microbatch},
                          {"start", d.start},
                          {"end", d.end}}
               .dump()
        << "\n";
  if (!out) throw RunError("train.schedule_trace: writing " + file + " failed");
  spdlog::info("schedule trace of iteration {}: {} computations of pipeline rank {} in {}",
               iteration_, done_.size(), where_.pipeline_rank, file);
}

}  // namespace loom::engine
