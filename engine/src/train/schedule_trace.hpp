// train.schedule_trace: one training step's pipeline schedule as it ran. The schedule plugin
// reports each computation (loom.schedule-trace/1, schedule.h) with its start and end on the
// host's steady clock; the first tensor/context/data rank of each pipeline rank writes its
// computations as JSON lines to <path>.<pipeline rank>, after a header line with the
// schedule, the layout and the stages its chunks hold. `loom schedule show --trace <path>`
// draws them beside the schedule's own timeline (train/schedule_show.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/schedule.h"

namespace loom::engine {

class ScheduleTrace {
 public:
  struct Where {
    std::string schedule;
    int pipeline = 1, pipeline_rank = 0, virtual_stages = 1;
    int64_t microbatches = 0;
    std::vector<int32_t> stages;  // of this rank's chunks
    bool writes = false;          // the first tensor/context/data rank of its pipeline rank
  };
  // `path` "" = off; `iteration` the step traced.
  ScheduleTrace(std::string path, int64_t iteration, Where where);
  bool wanted(int64_t iteration) const { return !path_.empty() && iteration == iteration_; }
  // Before the traced step: clears what the last one held.
  void start() { done_.clear(); }
  // The table at the head of the step's loom_schedule_args.ext, followed by `next`.
  const loom_ext* chain(const loom_ext* next) {
    ext_.base.next = next;
    return &ext_.base;
  }
  // Writes what the step reported (the writing rank only).
  void finish();

 private:
  static double now(void* user);
  static void step_done(void* user, const loom_schedule_step* step, double start, double end);

  std::string path_;
  int64_t iteration_;
  Where where_;
  loom_schedule_trace ext_{};
  struct Done {
    loom_schedule_step step;
    double start, end;
  };
  std::vector<Done> done_;
};

}  // namespace loom::engine
