// `loom schedule show`: draw a pipeline schedule (train/schedule_show.hpp).
#include <iostream>

#include "cli/command.hpp"
#include "loader/registry.hpp"
#include "train/schedule_show.hpp"

namespace loom::engine::cli {

int cmd_schedule(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "show")
    throw UsageError(
        "usage: loom schedule show NAME --pipeline P --microbatches M (see loom "
        "schedule show --help)");
  Command c("schedule show", "NAME [--pipeline P] [--microbatches M] [options]");
  ScheduleShow o;
  c.hidden.add_options()("name", po::value<std::string>(&o.schedule), "the schedule plugin");
  c.positional.add("name", 1);
  c.options.add_options()("pipeline,p", po::value<int>(&o.pipeline)->default_value(o.pipeline),
                          "pipeline ranks")(
      "microbatches,m", po::value<int64_t>(&o.microbatches)->default_value(o.microbatches),
      "micro-batches a step")(
      "virtual-stages,v", po::value<int>(&o.virtual_stages)->default_value(o.virtual_stages),
      "model chunks per rank, as parallel.virtual_stages (2 for zb-v and dualpipev)")(
      "cost-f", po::value<double>(&o.costs.f)->default_value(o.costs.f), "time of a forward")(
      "cost-b", po::value<double>(&o.costs.b)->default_value(o.costs.b),
      "time of a backward's input gradients")(
      "cost-w", po::value<double>(&o.costs.w)->default_value(o.costs.w),
      "time of a backward's weight gradients")(
      "scale", po::value<int>(&o.scale)->default_value(o.scale),
      "text columns per time unit; 0: 3, or 5 where a rank has several chunks")(
      "svg", po::value<std::string>(&o.svg), "also draw it as SVG into this file")(
      "trace", po::value<std::string>(&o.trace),
      "draw the step a run traced (train.schedule_trace = PATH: the files PATH.0, PATH.1, ...) "
      "beside the schedule's own timeline with the measured times; takes no NAME");
  c.notes =
      "Draws the order each rank runs, as the schedule plugin states it (loom.schedule-order/1):\n"
      "F forward, B a whole backward, b its input gradients, W its weight gradients (zero-bubble\n"
      "schedules run b at once and W later), '.' idle. Each step starts as soon as its input is\n"
      "there; messages take no time. The bubble is the idle share of ranks x step time.\n";
  if (!c.parse(std::vector<std::string>(args.begin() + 1, args.end()))) return 0;
  Registry registry;
  if (!o.trace.empty()) {
    if (!o.schedule.empty())
      throw UsageError("loom schedule show --trace: the trace names its schedule; give no NAME");
    registry.discover();
    std::cout << show_trace(registry, o);
    return 0;
  }
  if (o.schedule.empty()) throw UsageError("loom schedule show: name a schedule (1f1b, zb-v, ...)");
  if (o.costs.f <= 0 || o.costs.b <= 0 || o.costs.w <= 0 || o.scale < 0)
    throw UsageError("loom schedule show: the costs must be positive and --scale not negative");
  registry.discover();
  std::cout << show_schedule(registry, o);
  return 0;
}

}  // namespace loom::engine::cli
