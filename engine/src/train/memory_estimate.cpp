// `loom validate RECIPE --world N --memory`: what each rank role of a run would hold, before
// anything runs. The recipe's own plugins are walked through one training step on
// backend/meta (shapes, no memory, no compute) as one rank of a pretended world (comm/meta),
// so the figures are the model's, the optimizer's, the gradient plugin's and the schedule's
// own allocations rather than a formula: parameters, gradients, f32 main parameters,
// optimizer state, the gradient plugin's buffers (the distributed optimizer's flat buffers),
// and the rest of the step's peak: activations of every micro-batch the schedule keeps in
// flight (recompute and sequence parallelism applied) with the model's scratch.
// Left out: the reduction and the optimizer's step (their scratch), and what a backend keeps
// outside its tensors (cuBLAS workspaces, a caching allocator's slack).
#include "train/memory_estimate.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "recipe/parallel_layout.hpp"
#include "session/host.hpp"
#include "train/train_run.hpp"

namespace loom::engine {
namespace {

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// The recipe on backend/meta, comm/meta as `rank` of `world`, without checkpoint, metrics or
// evaluation, and attention/meta unless the recipe's attention computes through the
// backend's ops (attention/reference), whose allocations then count. Validated.
Recipe meta_recipe(const std::filesystem::path& path, const std::vector<std::string>& sets,
                   const std::string& attention, int world, int rank, Registry& registry) {
  Recipe r = Recipe::load(path, sets);
  for (const char* s : {"backend", "comm", "checkpoint"}) r.drop_section(s);
  r.set("backend.plugin=meta");
  r.set("comm.plugin=meta");
  r.set("comm.world=" + std::to_string(world));
  r.set("comm.rank=" + std::to_string(rank));
  if (attention != "reference") {
    r.drop_section("attention");
    r.set("attention.plugin=meta");
  }
  r.set("train.metrics=\"\"");
  r.set("train.tensorboard=\"\"");
  r.set("train.eval_interval=0");
  r.validate(registry);
  return r;
}

// One rank's walk-through of one step on backend/meta.
MemoryRole walk(const std::filesystem::path& path, const std::vector<std::string>& sets,
                const std::string& attention, int world, int rank, Registry& registry) {
  Recipe r = meta_recipe(path, sets, attention, world, rank, registry);
  TrainRun run(r, registry, true);
  run.hold_params(false);  // as a run does before its first step (fsdp: the shards only)
  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
  check(run.be.api->get_info(run.be.self, &info), "backend/meta info");
  MemoryRole m;
  m.rank = rank;
  m.stages = run.place.stages;
  m.total_stages = run.place.total;
  m.state = run.state_bytes();
  m.grad_buffers = run.grad_plugin_bytes;
  dry_step(run);
  check(run.be.api->get_info(run.be.self, &info), "backend/meta info");
  m.peak = (double)info.mem_peak;
  return m;
}

}  // namespace

std::vector<MemoryRole> estimate_memory(const std::filesystem::path& path,
                                        const std::vector<std::string>& sets, const Recipe& recipe,
                                        int world, Registry& registry) {
  const loom::layout::Degrees d = layout_degrees(recipe);
  const int per_stage = world / d.pipeline;  // tensor x context x data ranks of each stage
  std::vector<MemoryRole> roles;
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // the walk-throughs' own start-up lines
  try {
    for (int p = 0; p < d.pipeline; ++p)
      roles.push_back(walk(path, sets, recipe.plugin("attention"), world, p * per_stage, registry));
  } catch (...) {
    spdlog::set_level(level);
    throw;
  }
  spdlog::set_level(level);
  return roles;
}

std::vector<std::string> model_param_names(const std::filesystem::path& path, Registry& registry) {
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // the set-up's lines
  std::vector<std::string> names;
  try {
    Recipe r = meta_recipe(path, {}, "", 1, 0, registry);
    TrainRun run(r, registry, true);
    for (const loom_model_param& p : run.params) names.push_back(p.name);
  } catch (...) {
    spdlog::set_level(level);
    throw;
  }
  spdlog::set_level(level);
  return names;
}

std::string device_memory(Recipe& recipe, Registry& registry,
                          const std::vector<MemoryRole>& roles) {
  const std::string who = "backend/" + recipe.plugin("backend");
  size_t total = 0;
  std::string name;
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // the backend's start-up line
  try {  // the recipe's own backend, for its capacity (ABI 2.11's mem_total)
    Session session(recipe, registry);
    const loom_backend_ref be = session.backend();
    loom_backend_info info{};
    info.struct_size = LOOM_BACKEND_INFO_SIZE_V2_11;
    check(be.api->get_info(be.self, &info), "backend info");
    if (LOOM_HAS_FIELD(&info, loom_backend_info, mem_total)) total = info.mem_total;
    name = info.device_name ? info.device_name : "";
  } catch (const std::exception& e) {
    spdlog::set_level(level);
    return "device memory: unknown (" + who + " could not start here: " + e.what() + ")\n";
  }
  spdlog::set_level(level);
  if (total == 0) return "device memory: unknown (" + who + " does not report it)\n";
  const MemoryRole* top = &roles.front();
  for (const MemoryRole& m : roles)
    if (m.peak > top->peak) top = &m;
  char line[512];
  const double share = top->peak / (double)total;
  std::snprintf(line, sizeof line,
                "device memory (%s, %s): %.1f MiB; the largest peak, rank %d's, is %.1f MiB, "
                "%.1f%% of it%s\n",
                who.c_str(), name.c_str(), mib((double)total), top->rank, mib(top->peak),
                100.0 * share, share > 1.0 ? ": it does not fit" : "");
  return line;
}

void print_memory(const std::vector<MemoryRole>& roles, std::ostream& out) {
  out << "memory per rank, in MiB (backend/meta walk-through of one step; the reduction and "
         "the optimizer's step left out):\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-22s %10s %10s %10s %10s %10s %12s %10s\n", "rank (stage)",
                "params", "grads", "main", "optimizer", "grad bufs", "activations", "peak");
  out << line;
  const bool pipelined = roles.size() > 1;  // one role per pipeline rank
  for (const MemoryRole& m : roles) {
    const StateBytes& s = m.state;
    const double rest = m.peak - s.values - s.grads - s.main - s.optimizer - m.grad_buffers;
    std::string role = std::to_string(m.rank);
    // the stages its chunks hold, first and last named (a V puts both on rank 0)
    if (pipelined) {
      bool first = false, last = false;
      for (int32_t stage : m.stages) {
        first = first || stage == 0;
        last = last || stage == m.total_stages - 1;
      }
      role += first && last ? " (first, last)"
              : first       ? " (first)"
              : last        ? " (last)"
                            : " (middle)";
    }
    std::snprintf(line, sizeof line, "  %-22s %10.1f %10.1f %10.1f %10.1f %10.1f %12.1f %10.1f\n",
                  role.c_str(), mib(s.values), mib(s.grads), mib(s.main), mib(s.optimizer),
                  mib(m.grad_buffers), mib(rest), mib(m.peak));
    out << line;
  }
}

}  // namespace loom::engine
