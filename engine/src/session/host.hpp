// The host services table handed to every plugin instance, and the run's active plugins.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::engine {

class Recipe;
class Registry;

// The loom_host slots every host table the engine makes shares (Session's and the
// preprocessor's standalone tokenizer's): host-made error objects and logging.
namespace host_abi {
loom_error* error_new(loom_status code, const char* message) noexcept;
loom_status error_code(const loom_error* e) noexcept;
const char* error_message(const loom_error* e) noexcept;
void error_free(loom_error* e) noexcept;
// A plugin's log line, prefixed with its kind/name (`who`).
void log_as(const char* who, loom_log_level level, const char* message) noexcept;
// A table with the version, `ctx`, the error slots, `log` and the config getters set; the
// caller fills the plugin-lookup slots and rng_seed.
loom_host common_table(loom_host_context* ctx,
                       void (*log)(loom_host_context*, loom_log_level, const char*) noexcept);
}  // namespace host_abi

// A 64-bit seed for a named stream of the run, derived from train.seed.
uint64_t stream_seed(uint64_t seed, const std::string& stream);

// Owns the plugin instances of one run, in dependency order (backend, comm, attention,
// tokenizer, dataset, model, optimizer), and the loom_host table each one received.
// A rank of a multi-rank job that fails: whether a Session made the job's comm (world > 1),
// and ending the whole job with `code` through it (loom_comm_api.abort, ABI 2.14: MPI_Abort),
// or this rank alone when the comm has no abort. main calls these after printing the error.
bool job_abort_armed();
int job_rank();  // this rank in that job
[[noreturn]] void abort_job(int code);
// Every rank of the job stops at the same point, having agreed to (a refusal all of them
// reached together): an error then unwinds and finalizes the comm as a clean exit does,
// instead of ending the job through abort_job.
void disarm_job_abort();

class StepTimer;

class Session {
 public:
  Session(Recipe& recipe, Registry& registry);
  ~Session();  // destroys instances in reverse order
  const loom_host* host_for(const std::string& section);
  loom_backend_ref backend();
  loom_attention_ref attention();
  loom_tokenizer_ref tokenizer();
  loom_comm_ref comm();
  // Created on first use.
  std::pair<const loom_dataset_api*, loom_dataset*> dataset();
  // One instance of the [data] plugin per prefix (data.blend and friends), each created with
  // a copy of [data] whose `prefix` key (or `path`, for plugins without one) is the prefix;
  // an instance per distinct prefix, created on first use. Throws UsageError when the plugin
  // has neither key (generated data such as dataset/mock cannot be blended).
  std::vector<std::pair<const loom_dataset_api*, loom_dataset*>> datasets(
      const std::vector<std::string>& prefixes);
  std::pair<const loom_model_api*, loom_model*> model(const loom_model_create_args& args);
  // A further instance of the model plugin (pipeline chunks: one per virtual stage).
  std::pair<const loom_model_api*, loom_model*> model_chunk(const loom_model_create_args& args);
  // The recipe's parallel layout over the comm's world, and this rank's groups, made on
  // first use (COLLECTIVE over the world: every rank calls it at the same point).
  const loom_parallel_layout& layout();
  loom_comm_group* group(loom_group_kind kind);
  // For offline tools (`loom checkpoint convert`): the layout of rank `rank` of `world`
  // without asking the comm, every group the NULL (world) group. Plugins created afterwards
  // may describe their part of the layout (the model its parameters) but must run nothing
  // collective.
  void assume_rank(int world, int rank);
  std::pair<const loom_optimizer_api*, loom_optimizer*> optimizer(const loom_opt_param* params,
                                                                  size_t n);
  // The data-parallel gradient strategy named by parallel.data (a grad plugin), over the
  // model's gradients.
  // reduce_groups: n loom_group_kinds (loom_grad_create_args.reduce_groups), or NULL.
  // units: n residency units (loom_grad_create_args.units, ABI 2.13), or NULL.
  std::pair<const loom_grad_api*, loom_grad*> grad(DLTensor* const* grads, size_t n,
                                                   const int32_t* reduce_groups = nullptr,
                                                   const int32_t* units = nullptr);
  // The residency parallel.data's strategy needs of the model (loom_grad_api.residency),
  // asked before the model is created.
  int32_t grad_residency();
  // The pipeline schedule named by parallel.schedule (a schedule plugin).
  std::pair<const loom_schedule_api*, loom_schedule*> schedule();
  // train.timers: the step profile over the backend, measuring its ceilings in `dtype`. From
  // then on backend() hands out the timed table (step_timer.hpp); plugins created before keep
  // the backend's own.
  StepTimer& start_timer(DLDataType dtype);

  struct Impl;  // defined in host.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::engine
