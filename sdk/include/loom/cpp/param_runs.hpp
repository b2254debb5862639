// Loom SDK C++ helpers for optimizer plugins (adamw, lion and sgd use them): the parameters grouped
// into runs that lie back to back in memory, with their optimizer state laid out the same way.
//
// A model that keeps all parameters in one flat buffer (model/gpt does, weight-decayed
// tensors first) hands out views that are adjacent; a run of adjacent views with the same
// weight-decay flag, whose gradients are adjacent too, is stepped as one tensor: two calls
// per step instead of one per parameter, each long enough to use every core. Parameters
// that are not adjacent simply form runs of one. Each state kind (exp_avg, ...) is one flat
// buffer ordered like the runs, so every run's state is contiguous as well.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "loom/cpp/clip.hpp"
#include "loom/cpp/opt_schedule.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace loom::opt {

// loom::is_compact (tensor.hpp), under the name this header gave its own copy before.
using loom::is_compact;

// `b` starts where `a` ends, in the same buffer.
inline bool follows(const DLTensor* a, const DLTensor* b) {
  return a->data == b->data && loom_dtype_eq(a->dtype, b->dtype) &&
         a->device.device_type == b->device.device_type &&
         a->device.device_id == b->device.device_id &&
         a->byte_offset + (uint64_t)loom_tensor_numel(a) * loom_dtype_bytes(a->dtype) ==
             b->byte_offset;
}

class ParamRuns {
 public:
  struct Run {
    loom::View param, grad;
    std::vector<loom::View> state;  // one per state kind
    int weight_decay = 0;
  };

  // num_states flat state buffers (zero-filled, the parameters' dtype), named
  // "<prefix>.<param name>" per parameter for get_state.
  ParamRuns(const loom::Backend& be, const loom_opt_param* params, size_t n,
            const std::vector<std::string>& state_prefixes) {
    const size_t ns = state_prefixes.size();
    for (size_t i = 0; i < n; ++i) {
      const loom_opt_param& p = params[i];
      loom::require(p.struct_size >= LOOM_OPT_PARAM_SIZE_V2 && p.param && p.grad,
                    "optimizer: parameter " + std::to_string(i) + " lacks param/grad tensors");
      const std::string name = p.name ? p.name : "param" + std::to_string(i);
      loom::require(is_compact(p.param) && is_compact(p.grad) &&
                        loom_tensor_numel(p.param) == loom_tensor_numel(p.grad) &&
                        loom_dtype_eq(p.param->dtype, p.grad->dtype),
                    "optimizer: parameter " + name +
                        " and its gradient must be compact tensors of one shape and dtype");
      names_.push_back(name);
    }
    // order by address, then cut into runs
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const DLTensor *x = params[a].param, *y = params[b].param;
      if (x->data != y->data) return std::less<void*>()(x->data, y->data);
      return x->byte_offset < y->byte_offset;
    });
    std::vector<std::vector<size_t>> members;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = order[k];
      if (k > 0) {
        const size_t j = members.back().back();
        if (follows(params[j].param, params[i].param) && follows(params[j].grad, params[i].grad) &&
            (params[j].weight_decay != 0) == (params[i].weight_decay != 0)) {
          members.back().push_back(i);
          continue;
        }
      }
      members.push_back({i});
    }
    // state buffers, in run order
    int64_t total = 0;
    std::vector<int64_t> offset(n);
    for (auto& m : members)
      for (size_t i : m) {
        offset[i] = total;
        total += loom_tensor_numel(params[i].param);
      }
    if (n > 0)
      for (size_t s = 0; s < ns; ++s)
        flat_.push_back(std::make_unique<loom::Tensor>(be, params[0].param->dtype,
                                                       std::vector<int64_t>{total}));
    state_.resize(n * ns);
    state_names_.resize(n * ns);
    for (size_t s = 0; s < ns; ++s)
      for (size_t i = 0; i < n; ++i) {
        const DLTensor* p = params[i].param;
        state_[s * n + i] = loom::View(
            flat_[s]->get(), std::vector<int64_t>(p->shape, p->shape + p->ndim), offset[i]);
        state_names_[s * n + i] = state_prefixes[s] + "." + names_[i];
      }
    for (auto& m : members) {
      int64_t numel = 0;
      for (size_t i : m) numel += loom_tensor_numel(params[i].param);
      Run r;
      r.param = loom::View(params[m[0]].param, {numel});
      r.grad = loom::View(params[m[0]].grad, {numel});
      for (size_t s = 0; s < ns; ++s)
        r.state.emplace_back(flat_[s]->get(), std::vector<int64_t>{numel}, offset[m[0]]);
      r.weight_decay = params[m[0]].weight_decay != 0;
      runs_.push_back(std::move(r));
    }
  }

  std::vector<Run>& runs() { return runs_; }
  size_t num_state() const { return state_.size(); }
  void get_state(size_t i, const char** name, DLTensor** t) {
    loom::require(i < state_.size(), "optimizer: state index " + std::to_string(i) +
                                         " out of range (" + std::to_string(state_.size()) + ")");
    *name = state_names_[i].c_str();
    *t = state_[i].get();
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<loom::Tensor>> flat_;
  std::vector<loom::View> state_;
  std::vector<std::string> state_names_;
  std::vector<Run> runs_;
};

// Where an optimizer with its own kernels runs them: on the backend's device and stream
// (loom.device-stream/1). `cuda_kernels`: the plugin was built with its CUDA kernels. Refuses,
// naming `who`, a CUDA backend without them, parameters off the backend's device, and dtypes
// the kernels lack (f32 everywhere; f64 too on the CPU, the finite-difference path).
struct KernelSite {
  bool gpu = false;        // the backend is a CUDA GPU: the plugin's CUDA kernels
  void* stream = nullptr;  // the backend's stream there (NULL on the CPU)

  KernelSite(const Backend& be, const std::string& who, bool cuda_kernels,
             const loom_opt_param* params, size_t n) {
    const loom_device_stream& ds = be.device_stream(who);
    gpu = ds.device.device_type == kDLCUDA;
    stream = ds.stream;
    require(!gpu || cuda_kernels,
            who +
                ": the backend is on a CUDA GPU but this build of the plugin has no CUDA "
                "kernels (nvcc was not found when it was built)",
            LOOM_ERR_UNIMPLEMENTED);
    require(gpu || ds.device.device_type == kDLCPU,
            who + ": the backend's device type " + std::to_string(ds.device.device_type) +
                " is neither the CPU nor a CUDA GPU",
            LOOM_ERR_UNIMPLEMENTED);
    for (size_t i = 0; i < n; ++i) {
      const DLTensor* t = params[i].param;
      const std::string name = params[i].name ? params[i].name : "param" + std::to_string(i);
      require(t != nullptr && t->device.device_type == ds.device.device_type,
              who + ": parameter " + name + " is not on the backend's device",
              LOOM_ERR_UNIMPLEMENTED);
      const bool f32 = loom_dtype_eq(t->dtype, loom_f32());
      require(
          f32 || (!gpu && loom_dtype_eq(t->dtype, loom_f64())),
          who + ": parameter " + name + " must be f32 (main parameters)" + (gpu ? "" : " or f64"),
          LOOM_ERR_UNIMPLEMENTED);
    }
  }
};

// A host pointer to a compact tensor's first element (on the CPU) or a device pointer (on the
// GPU): data + byte_offset.
template <class T>
T* data_of(const DLTensor* t) {
  return reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
}

// Whether `t` is a compact (k) f64 tensor on the device of type `device_type`: what a step's
// extensions hand the update to read there (loom.opt-clip/1's squares, loom.opt-schedule/1's
// values).
inline bool is_f64_vector(const DLTensor* t, int32_t device_type) {
  return t != nullptr && t->ndim == 1 && loom_dtype_eq(t->dtype, loom_f64()) && is_compact(t) &&
         t->device.device_type == device_type;
}

// A step's gradient multiplier (loom/cpp/clip.hpp): the args' grad_scale, and the clip of a
// loom.opt-clip/1 on their chain, whose `squares` must be a compact (k) f64 tensor on the
// parameters' device (`device_type`). Refused, naming `who`, otherwise.
inline StepScale step_scale(const loom_opt_step_args& a, int32_t device_type,
                            const std::string& who) {
  require(std::isfinite(a.grad_scale), who + ": grad_scale must be finite");
  StepScale sc;
  sc.grad_scale = a.grad_scale;
  const loom_ext* e = loom_ext_find(a.ext, LOOM_EXT_OPT_CLIP);
  if (e == nullptr) return sc;
  require(e->struct_size >= LOOM_OPT_CLIP_SIZE_V1, who + ": loom.opt-clip/1 is too short");
  const auto& c = *reinterpret_cast<const loom_opt_clip*>(e);
  const DLTensor* t = c.squares;
  require(is_f64_vector(t, device_type),
          who + ": loom.opt-clip/1's squares must be a (k) f64 tensor on the parameters' device");
  require(c.loss_scale > 0 && std::isfinite(c.loss_scale) && c.max_norm >= 0,
          who + ": loom.opt-clip/1 needs loss_scale > 0 and max_norm >= 0");
  sc.squares = data_of<const double>(t);
  sc.count = t->shape[0];
  sc.loss_scale = c.loss_scale;
  sc.max_norm = c.max_norm;
  return sc;
}

// A step's learning rate and count: the args', or a loom.opt-schedule/1 on their chain, whose
// `values` must be a compact (2) f64 tensor on the parameters' device (`device_type`). Refused,
// naming `who`, otherwise. On the CPU the values are host memory and checked here (a finite
// lr, a whole step >= 1), as the args' are.
inline StepSchedule step_schedule(const loom_opt_step_args& a, int32_t device_type,
                                  const std::string& who) {
  StepSchedule sch;
  sch.lr = a.lr;
  sch.step = static_cast<double>(a.step);
  if (const loom_ext* e = loom_ext_find(a.ext, LOOM_EXT_OPT_SCHEDULE)) {
    require(e->struct_size >= LOOM_OPT_SCHEDULE_SIZE_V1,
            who + ": loom.opt-schedule/1 is too short");
    const DLTensor* t = reinterpret_cast<const loom_opt_schedule*>(e)->values;
    require(is_f64_vector(t, device_type) && t->shape[0] == 2,
            who +
                ": loom.opt-schedule/1's values must be a (2) f64 tensor on the parameters' "
                "device");
    sch.values = data_of<const double>(t);
    if (device_type != kDLCPU) return sch;  // read where the update runs
  }
  const double lr = sch.learning_rate(), step = sch.count();
  require(std::isfinite(lr), who + ": lr must be finite");
  if (!(step >= 1 && step == std::floor(step) && step < 9.007199254740992e15)) {
    char got[32];
    std::snprintf(got, sizeof got, "%.17g", step);
    require(false, who + ": step must be a whole number >= 1 (1-based), got " + got);
  }
  return sch;
}

// The capabilities of an optimizer over ParamRuns (its descriptor's list).
inline constexpr const char* kCapabilities[] = {LOOM_EXT_OPT_CLIP, LOOM_EXT_OPT_SCHEDULE, nullptr};

// What every optimizer over ParamRuns holds and answers the same way: the host, its backend,
// where its kernels run and the runs with their state kinds; `who` ("optimizer/adamw") names
// its errors. A plugin's class derives from it, reads its keys and adds step(); host() and
// runs() are what OptimizerTable calls.
class RunsOptimizer {
 public:
  RunsOptimizer(const loom_host* host, const std::string& who, bool cuda_kernels,
                const loom_opt_param* params, size_t n, const std::vector<std::string>& kinds)
      : host_(host),
        be_(host),
        who_(who),
        site_(be_, who, cuda_kernels, params, n),
        runs_(be_, params, n, kinds) {}
  RunsOptimizer(const RunsOptimizer&) = delete;
  RunsOptimizer& operator=(const RunsOptimizer&) = delete;
  const loom_host* host() const { return host_; }
  ParamRuns& runs() { return runs_; }

 protected:
  // The step's gradient multiplier; on the CPU already resolved: `host_gs` holds it, and
  // false means the clip found a non-finite norm, so the step must change nothing. On a GPU
  // the kernels resolve it (true, host_gs unset).
  bool step_scale(const loom_opt_step_args& a, StepScale& sc, double& host_gs) const {
    sc = opt::step_scale(a, site_.gpu ? kDLCUDA : kDLCPU, who_);
    return site_.gpu || sc.resolve(&host_gs);
  }

  // The step's learning rate and count (opt::step_schedule): on the CPU, and on a GPU without
  // loom.opt-schedule/1, already checked; on a GPU with it, the kernels read them.
  StepSchedule schedule(const loom_opt_step_args& a) const {
    return opt::step_schedule(a, site_.gpu ? kDLCUDA : kDLCPU, who_);
  }

  // Logs how the n parameters were grouped (once the plugin has read its keys).
  void log_runs(size_t n) {
    log(host_, LOOM_LOG_INFO,
        std::to_string(n) + " parameters stepped as " + std::to_string(runs_.runs().size()) +
            " contiguous runs");
  }

  const loom_host* host_;
  Backend be_;
  std::string who_;
  KernelSite site_;
  ParamRuns runs_;
};

// The C function table of an optimizer class `Opt`, which has a constructor
// (host, cfg, params, n), step(const loom_opt_step_args&), host() and runs(). Every entry
// point goes through loom::guard, so exceptions become ABI errors.
template <class Opt>
struct OptimizerTable {
  static Opt* self(loom_optimizer* o) { return reinterpret_cast<Opt*>(o); }
  static loom_error* create(const loom_host* host, const loom_config* cfg,
                            const loom_opt_create_args* args, loom_optimizer** out) {
    return loom::guard(host, [&] {
      loom::require(out != nullptr, "optimizer: create needs an out pointer");
      loom::require(args != nullptr && args->struct_size >= LOOM_OPT_CREATE_ARGS_SIZE_V2 &&
                        (args->params != nullptr || args->num_params == 0),
                    "optimizer: create needs loom_opt_create_args of ABI 2.0");
      loom::require_known_exts(args->ext, {}, "optimizer: create");
      *out = reinterpret_cast<loom_optimizer*>(new Opt(host, cfg, args->params, args->num_params));
    });
  }
  static void destroy(loom_optimizer* o) { delete self(o); }
  static loom_error* step(loom_optimizer* o, const loom_opt_step_args* a) {
    return loom::guard(self(o)->host(), [&] {
      loom::require(a != nullptr && a->struct_size >= LOOM_OPT_STEP_ARGS_SIZE_V2,
                    "optimizer: step needs loom_opt_step_args of ABI 2.0");
      loom::require_known_exts(a->ext, {LOOM_EXT_OPT_CLIP, LOOM_EXT_OPT_SCHEDULE},
                               "optimizer: step");
      self(o)->step(*a);
    });
  }
  static size_t num_state(loom_optimizer* o) { return self(o)->runs().num_state(); }
  static loom_error* get_state(loom_optimizer* o, size_t i, const char** name, DLTensor** t) {
    return loom::guard(self(o)->host(), [&] { self(o)->runs().get_state(i, name, t); });
  }
  static constexpr loom_optimizer_api api = {
      LOOM_OPTIMIZER_API_SIZE_V2, create, destroy, step, num_state, get_state};
};

}  // namespace loom::opt
