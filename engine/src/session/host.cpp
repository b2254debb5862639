// The host services table and the run's plugin instances.
//
// Every plugin instance gets its own loom_host whose ctx knows the instance's kind/name, so
// log lines say who spoke. Instances are created on first use, dependencies first (a model
// asking for the backend creates it), and destroyed in reverse order of creation.
#include "session/host.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <string_view>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/layout.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "session/capability_gate.hpp"
#include "session/comm_watch.hpp"
#include "session/config_check.hpp"
#include "session/step_timer.hpp"

struct loom_host_context {
  loom::engine::Session* session;
  std::string who;  // "model/gpt"
};

namespace loom::engine {

namespace host_abi {

// noexcept: running out of memory while reporting an error ends the process.
loom_error* error_new(loom_status code, const char* message) noexcept {
  return new loom_error{code, message ? message : ""};
}
loom_status error_code(const loom_error* e) noexcept { return e ? e->code : LOOM_OK; }
const char* error_message(const loom_error* e) noexcept { return e ? e->message.c_str() : ""; }
void error_free(loom_error* e) noexcept { delete e; }

// A plugin that names itself ("tokenizer/gpt2-bpe: 50257 tokens ...", as error messages must)
// would be named twice; the name it gives is dropped when it is the instance's own (`who` up
// to its first space: a dataset's who is "dataset/indexed PREFIX").
void log_as(const char* who, loom_log_level level, const char* message) noexcept {
  const std::string_view id = std::string_view(who).substr(0, std::string_view(who).find(' '));
  const std::string_view text(message);
  if (text.size() > id.size() + 1 && text.compare(0, id.size(), id) == 0 &&
      text.compare(id.size(), 2, ": ") == 0)
    message += id.size() + 2;
  switch (level) {
    case LOOM_LOG_DEBUG:
      spdlog::debug("{}: {}", who, message);
      break;
    case LOOM_LOG_INFO:
      spdlog::info("{}: {}", who, message);
      break;
    case LOOM_LOG_WARN:
      spdlog::warn("{}: {}", who, message);
      break;
    default:
      spdlog::error("{}: {}", who, message);
      break;
  }
}

loom_host common_table(loom_host_context* ctx,
                       void (*log)(loom_host_context*, loom_log_level, const char*) noexcept) {
  loom_host h{};
  h.struct_size = LOOM_HOST_SIZE_V2;  // every 2.0 slot
  h.abi_major = LOOM_ABI_MAJOR;
  h.abi_minor = LOOM_ABI_MINOR;
  h.ctx = ctx;
  h.error_new = error_new;
  h.error_code = error_code;
  h.error_message = error_message;
  h.error_free = error_free;
  h.log = log;
  h.config_get_bool = config_get_bool;
  h.config_get_int = config_get_int;
  h.config_get_float = config_get_float;
  h.config_get_string = config_get_string;
  return h;
}

}  // namespace host_abi

namespace {

using namespace host_abi;

void log(loom_host_context* ctx, loom_log_level level, const char* message) noexcept {
  log_as(ctx ? ctx->who.c_str() : "plugin", level, message);
}

// splitmix64: a well-mixed 64-bit hash step.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t stream_seed(uint64_t seed, const std::string& stream) {
  uint64_t h = mix(seed);
  for (unsigned char c : stream) h = mix(h ^ c);
  return h;
}

struct Session::Impl {
  Recipe& recipe;
  Registry& registry;
  std::deque<loom_host_context> contexts;  // stable addresses
  std::deque<loom_host> hosts;
  std::vector<std::function<void()>> destroyers;  // in creation order
  std::pair<const loom_backend_api*, loom_backend*> backend{nullptr, nullptr};
  std::pair<const loom_attention_api*, loom_attention*> attention{nullptr, nullptr};
  std::unique_ptr<AttentionGate> attention_gate;  // what plugins are handed
  std::pair<const loom_tokenizer_api*, loom_tokenizer*> tokenizer{nullptr, nullptr};
  std::pair<const loom_comm_api*, loom_comm*> comm{nullptr, nullptr};
  std::pair<const loom_dataset_api*, loom_dataset*> dataset{nullptr, nullptr};
  // datasets(): instances by prefix, and the per-instance config copies they were given.
  std::map<std::string, std::pair<const loom_dataset_api*, loom_dataset*>> blend_datasets;
  std::deque<loom_config> blend_configs;  // stable addresses
  std::pair<const loom_model_api*, loom_model*> model{nullptr, nullptr};
  std::pair<const loom_optimizer_api*, loom_optimizer*> optimizer{nullptr, nullptr};
  std::pair<const loom_grad_api*, loom_grad*> grad{nullptr, nullptr};
  std::pair<const loom_schedule_api*, loom_schedule*> schedule{nullptr, nullptr};
  bool has_layout = false;
  loom_parallel_layout layout{};
  std::map<int, loom_comm_group*> groups;
  std::unique_ptr<CommWatch> watch;  // comm.timeout_s over a multi-rank job's comm
  std::unique_ptr<StepTimer> timer;  // train.timers

  Impl(Recipe& r, Registry& g) : recipe(r), registry(g) {}
};

namespace {

// Wraps a host callback that creates an instance on demand: errors become loom_errors.
template <class Fn>
loom_error* host_call(Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (const std::exception& e) {
    return error_new(LOOM_ERR_INVALID_ARGUMENT, e.what());
  }
}

}  // namespace

Session::Session(Recipe& recipe, Registry& registry)
    : impl_(std::make_unique<Impl>(recipe, registry)) {}

namespace {
// The comm of a multi-rank job, once made: what a failing rank ends the job with.
std::pair<const loom_comm_api*, loom_comm*> g_job{nullptr, nullptr};
}  // namespace

bool job_abort_armed() { return g_job.second != nullptr; }
void disarm_job_abort() { g_job = {nullptr, nullptr}; }
int job_rank() { return g_job.second ? g_job.first->world_rank(g_job.second) : 0; }

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_job.first->struct_size >= LOOM_COMM_API_SIZE_V2_14 && g_job.first->abort)
    g_job.first->abort(g_job.second, code);
  std::_Exit(code);  // a comm without abort: this rank alone; the launcher ends the rest
}

Session::~Session() {
  // Unwinding from an error on a rank of a multi-rank job: the other ranks may be waiting in
  // a collective, and the plugins' destroy (the comm's above all: MPI_Finalize) would wait
  // for them forever. Leave everything as it is; main prints the error and ends the job
  // (abort_job).
  if (std::uncaught_exceptions() > 0 && g_job.second == impl_->comm.second && g_job.second) return;
  if (g_job.second == impl_->comm.second) g_job = {nullptr, nullptr};
  impl_->timer.reset();  // its marks go back to the backend before the backend goes
  // The groups are destroyed through the watch's table, so it goes last.
  for (auto it = impl_->destroyers.rbegin(); it != impl_->destroyers.rend(); ++it) (*it)();
  impl_->watch.reset();
}

const loom_host* Session::host_for(const std::string& who) {
  impl_->contexts.push_back(loom_host_context{this, who});
  loom_host h = common_table(&impl_->contexts.back(), log);
  h.get_backend = [](loom_host_context* c, loom_backend_ref* out) {
    return host_call([&] { *out = c->session->backend(); });
  };
  h.get_attention = [](loom_host_context* c, loom_attention_ref* out) {
    return host_call([&] { *out = c->session->attention(); });
  };
  h.get_tokenizer = [](loom_host_context* c, loom_tokenizer_ref* out) {
    return host_call([&] { *out = c->session->tokenizer(); });
  };
  h.get_comm = [](loom_host_context* c, loom_comm_ref* out) {
    return host_call([&] { *out = c->session->comm(); });
  };
  h.rng_seed = [](loom_host_context* c, const char* stream) noexcept -> uint64_t {
    return stream_seed((uint64_t)c->session->impl_->recipe.get_int("train", "seed"), stream);
  };
  h.struct_size = LOOM_HOST_SIZE_V2;
  h.get_layout = [](loom_host_context* c, loom_parallel_layout* out) {
    return host_call([&] {
      if (!out || out->struct_size < LOOM_PARALLEL_LAYOUT_SIZE_V2)
        throw RunError("get_layout: out->struct_size is smaller than ABI 2.0's");
      layout::copy_layout(c->session->layout(), out);
    });
  };
  h.get_group = [](loom_host_context* c, loom_group_kind kind, loom_comm_group** out) {
    return host_call([&] { *out = c->session->group(kind); });
  };
  impl_->hosts.push_back(h);
  return &impl_->hosts.back();
}

const loom_parallel_layout& Session::layout() {
  if (impl_->has_layout) return impl_->layout;
  loom_comm_ref c = comm();
  const int world = c.api->world_size(c.self), rank = c.api->world_rank(c.self);
  layout::Degrees d = layout_degrees(impl_->recipe);
  check_layout(impl_->recipe, world);
  impl_->layout = layout::coordinates(d, world, rank);
  for (loom_group_kind k : layout::kAllGroups) {
    loom_comm_group* g = nullptr;
    if (k != LOOM_GROUP_WORLD) {
      std::vector<int> colors = layout::colors(d, world, k);
      check(loom::comm_group_create(c, colors.data(), layout::group_name(k), &g),
            std::string("creating the ") + layout::group_name(k) + " group");
      auto api = c.api;
      auto self = c.self;
      impl_->destroyers.push_back([api, self, g] { api->group_destroy(self, g); });
    }
    impl_->groups[k] = g;  // the world is the NULL group
  }
  impl_->has_layout = true;
  return impl_->layout;
}

void Session::assume_rank(int world, int rank) {
  check_layout(impl_->recipe, world);
  impl_->layout = layout::coordinates(layout_degrees(impl_->recipe), world, rank);
  for (loom_group_kind k : layout::kAllGroups) impl_->groups[k] = nullptr;
  impl_->has_layout = true;
}

loom_comm_group* Session::group(loom_group_kind kind) {
  layout();
  auto it = impl_->groups.find((int)kind);
  if (it == impl_->groups.end())
    throw RunError("get_group: unknown group kind " + std::to_string((int)kind));
  return it->second;
}

// Creates (once) the instance of the plugin the recipe selects for `section`, after
// checking its kind's table is at least the size ABI 2.0 requires. `extra` are the
// kind-specific create arguments between the config and the out-pointer. grad and schedule
// plugins share [parallel], the engine's section, which names them with `data` and
// `schedule` and also carries the grad plugin's own keys.
template <class Api, class Self, class... Extra>
static std::pair<const Api*, Self*>& create_once(Session& session, Session::Impl& impl,
                                                 std::pair<const Api*, Self*>& slot,
                                                 loom_plugin_kind kind, const std::string& section,
                                                 size_t min_size, Extra... extra) {
  if (slot.second) return slot;
  const std::string name = section == "parallel"
                               ? impl.recipe.get_string(section, selector_of_kind(kind))
                               : impl.recipe.plugin(section);
  const PluginInfo& info = impl.registry.get(kind, name);
  auto* api = static_cast<const Api*>(info.desc->api);
  std::string who = kind_name(kind) + "/" + name;
  if (!api || api->struct_size < min_size)
    throw UsageError("plugin " + who + " (" + info.path.string() +
                     ") has a function table smaller than ABI 2.0 requires");
  Self* self = nullptr;
  loom_error* err =
      api->create(session.host_for(who), &impl.recipe.section(section), extra..., &self);
  // A model refuses only its configuration at create (its keys against each other and the
  // layout; it reads no file): an invalid argument there is the recipe's, exit 2.
  if (err && kind == LOOM_KIND_MODEL && err->code == LOOM_ERR_INVALID_ARGUMENT) {
    const std::string message = "creating " + who + ": " + err->message;
    free_error(err);
    throw UsageError(message);
  }
  check(err, "creating " + who);
  slot = {api, self};
  impl.destroyers.push_back([api, self] { api->destroy(self); });
  return slot;
}

loom_backend_ref Session::backend() {
  auto& s = create_once(*this, *impl_, impl_->backend, LOOM_KIND_BACKEND, "backend",
                        LOOM_BACKEND_API_SIZE_V2);
  if (impl_->timer) return impl_->timer->timed_backend();
  return {s.first, s.second};
}
StepTimer& Session::start_timer(DLDataType dtype) {
  if (!impl_->timer) {
    const loom_backend_ref raw = backend();
    impl_->timer = std::make_unique<StepTimer>(raw, dtype);
  }
  return *impl_->timer;
}
loom_attention_ref Session::attention() {
  auto& s = create_once(*this, *impl_, impl_->attention, LOOM_KIND_ATTENTION, "attention",
                        LOOM_ATTENTION_API_SIZE_V2);
  if (!impl_->attention_gate) {
    const PluginInfo& info =
        impl_->registry.get(LOOM_KIND_ATTENTION, impl_->recipe.plugin("attention"));
    impl_->attention_gate = std::make_unique<AttentionGate>(info, s.first, s.second);
  }
  return impl_->attention_gate->ref();
}
loom_tokenizer_ref Session::tokenizer() {
  auto& s = create_once(*this, *impl_, impl_->tokenizer, LOOM_KIND_TOKENIZER, "tokenizer",
                        LOOM_TOKENIZER_API_SIZE_V2);
  return {s.first, s.second};
}
loom_comm_ref Session::comm() {
  const bool fresh = impl_->comm.second == nullptr;
  auto& s = create_once(*this, *impl_, impl_->comm, LOOM_KIND_COMM, "comm", LOOM_COMM_API_SIZE_V2);
  if (fresh && s.first->world_size(s.second) > 1) {
    g_job = s;
    const double timeout = impl_->recipe.get_float("comm", "timeout_s");
    if (timeout > 0)
      impl_->watch = std::make_unique<CommWatch>(loom_comm_ref{s.first, s.second}, timeout);
  }
  if (impl_->watch) return impl_->watch->ref();
  return {s.first, s.second};
}
std::pair<const loom_dataset_api*, loom_dataset*> Session::dataset() {
  return create_once(*this, *impl_, impl_->dataset, LOOM_KIND_DATASET, "data",
                     LOOM_DATASET_API_SIZE_V2);
}
std::vector<std::pair<const loom_dataset_api*, loom_dataset*>> Session::datasets(
    const std::vector<std::string>& prefixes) {
  std::vector<std::pair<const loom_dataset_api*, loom_dataset*>> out;
  for (const std::string& prefix : prefixes) {
    auto found = impl_->blend_datasets.find(prefix);
    if (found != impl_->blend_datasets.end()) {
      out.push_back(found->second);
      continue;
    }
    std::string name = impl_->recipe.plugin("data");
    const PluginInfo& info = impl_->registry.get(LOOM_KIND_DATASET, name);
    auto* api = static_cast<const loom_dataset_api*>(info.desc->api);
    std::string who = "dataset/" + name;
    if (!api || api->struct_size < LOOM_DATASET_API_SIZE_V2)
      throw UsageError("plugin " + who + " has a function table smaller than ABI 2.0 requires");
    std::string key;
    for (size_t i = 0; i < info.desc->num_params && key.empty(); ++i)
      if (std::string(info.desc->params[i].name) == "prefix") key = "prefix";
    for (size_t i = 0; i < info.desc->num_params && key.empty(); ++i)
      if (std::string(info.desc->params[i].name) == "path") key = "path";
    if (key.empty())
      throw UsageError("data.blend / data.*_blend: " + who +
                       " has no `prefix` or `path` key to point at each blended dataset; "
                       "blending needs data stored on disk (dataset/indexed, dataset/jsonl)");
    if (std::string why = names_a_non_regular_file(key, prefix); !why.empty())
      throw UsageError("data blend entry " + key + " " + why);
    impl_->blend_configs.push_back(impl_->recipe.section("data"));
    loom_config& cfg = impl_->blend_configs.back();
    Value v;
    v.type = LOOM_PARAM_STRING;
    v.s = prefix;
    v.file = "<blend>";
    cfg.values[key] = v;
    loom_dataset* self = nullptr;
    check(api->create(host_for(who + " " + prefix), &cfg, &self),
          "creating " + who + " for " + prefix);
    impl_->destroyers.push_back([api, self] { api->destroy(self); });
    impl_->blend_datasets[prefix] = {api, self};
    out.emplace_back(api, self);
  }
  return out;
}
std::pair<const loom_model_api*, loom_model*> Session::model(const loom_model_create_args& args) {
  return create_once(*this, *impl_, impl_->model, LOOM_KIND_MODEL, "model", LOOM_MODEL_API_SIZE_V2,
                     &args);
}
std::pair<const loom_model_api*, loom_model*> Session::model_chunk(
    const loom_model_create_args& args) {
  std::pair<const loom_model_api*, loom_model*> fresh{nullptr, nullptr};
  return create_once(*this, *impl_, fresh, LOOM_KIND_MODEL, "model", LOOM_MODEL_API_SIZE_V2, &args);
}
std::pair<const loom_optimizer_api*, loom_optimizer*> Session::optimizer(
    const loom_opt_param* params, size_t n) {
  const loom_opt_create_args args{LOOM_OPT_CREATE_ARGS_SIZE_V2, params, n, nullptr};
  return create_once(*this, *impl_, impl_->optimizer, LOOM_KIND_OPTIMIZER, "optimizer",
                     LOOM_OPTIMIZER_API_SIZE_V2, &args);
}

std::pair<const loom_grad_api*, loom_grad*> Session::grad(DLTensor* const* grads, size_t n,
                                                          const int32_t* reduce_groups,
                                                          const int32_t* units) {
  const loom_grad_create_args args{
      LOOM_GRAD_CREATE_ARGS_SIZE_V2_13, grads, n, nullptr, reduce_groups, units};
  return create_once(*this, *impl_, impl_->grad, LOOM_KIND_GRAD, "parallel", LOOM_GRAD_API_SIZE_V2,
                     &args);
}

int32_t Session::grad_residency() { return strategy_residency(impl_->recipe, impl_->registry); }

std::pair<const loom_schedule_api*, loom_schedule*> Session::schedule() {
  return create_once(*this, *impl_, impl_->schedule, LOOM_KIND_SCHEDULE, "parallel",
                     LOOM_SCHEDULE_API_SIZE_V2);
}

}  // namespace loom::engine
