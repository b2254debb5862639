// `loom schedule show`: a pipeline schedule drawn from the schedule plugin's own orders
// (loom.schedule-order/1) as a timeline (loom/cpp/schedule_timeline.hpp): F, B and W slots
// and the idle ones per rank, as text for a terminal and as SVG, with the bubble fraction
// and the activations each rank holds at most.
#pragma once

#include <cstdint>
#include <string>

#include "loom/cpp/schedule_timeline.hpp"

namespace loom::engine {

class Registry;

struct ScheduleShow {
  std::string schedule;  // the schedule plugin's name
  int pipeline = 4;
  int virtual_stages = 1;
  int64_t microbatches = 8;
  loom::schedule::Costs costs;  // of F, B (input half) and W (weight half)
  int scale = 0;                // text columns per unit of time; 0: 3, or 5 with chunks
  std::string svg;              // a file to write the SVG to; "" none
  std::string trace;            // train.schedule_trace's path: draw the step as it ran
};

// The text drawing and its numbers; writes o.svg when set. Throws UsageError with the
// schedule's refusal (pipeline, virtual stages, micro-batches it cannot run) and for a
// schedule plugin without loom.schedule-order/1.
std::string show_schedule(Registry& registry, const ScheduleShow& o);
// With o.trace: the traced step (<trace>.<rank> files) drawn, its measured bubble, and the
// schedule's own timeline with the measured mean times of F, B and W beside it.
std::string show_trace(Registry& registry, ScheduleShow o);

}  // namespace loom::engine
