// optimizer/adamw: AdamW with decoupled weight decay (Loshchilov & Hutter), one backend
// adamw_step per run of adjacent parameters. Weight decay only on parameters flagged
// weight_decay (matrices and embeddings; not biases or norm weights).
#include <cmath>

#include "loom/cpp/param_runs.hpp"
#include "loom/cpp/plugin.hpp"

namespace {

using loom::param;

const loom_param_spec kSchema[] = {
    param("beta1", LOOM_PARAM_FLOAT, "0.9", "first-moment decay", 0.0, 0.999999),
    param("beta2", LOOM_PARAM_FLOAT, "0.95", "second-moment decay", 0.0, 0.999999999),
    param("eps", LOOM_PARAM_FLOAT, "1e-8", "added to sqrt(second moment)", 0.0, 1.0),
    param("weight_decay", LOOM_PARAM_FLOAT, "0.1",
          "decoupled decay (times lr) of parameters flagged weight_decay", 0.0, 10.0),
};

class AdamW {
 public:
  AdamW(const loom_host* host, const loom_config* cfg, const loom_opt_param* params, size_t n)
      : host_(host), be_(host), runs_(be_, params, n, {"exp_avg", "exp_avg_sq"}) {
    loom::Config c(host, cfg);
    beta1_ = c.get_float("beta1");
    beta2_ = c.get_float("beta2");
    eps_ = c.get_float("eps");
    wd_ = c.get_float("weight_decay");
    loom::log(host, LOOM_LOG_INFO,
              std::to_string(n) + " parameters stepped as " + std::to_string(runs_.runs().size()) +
                  " contiguous runs");
  }

  void step(const loom_opt_step_args& s) {
    loom::require(s.step >= 1, "optimizer/adamw: step is 1-based, got " + std::to_string(s.step));
    for (auto& r : runs_.runs()) {
      loom_adamw_args a{};
      a.struct_size = LOOM_ADAMW_ARGS_SIZE_V2;
      a.param = r.param;
      a.grad = r.grad;
      a.m = r.state[0];
      a.v = r.state[1];
      a.lr = s.lr;
      a.beta1 = beta1_;
      a.beta2 = beta2_;
      a.eps = eps_;
      a.weight_decay = r.weight_decay ? wd_ : 0.0;
      a.grad_scale = s.grad_scale;
      a.step = s.step;
      be_.call(&loom_ops::adamw_step, (const loom_adamw_args*)&a);
    }
  }

  const loom_host* host() const { return host_; }
  loom::opt::ParamRuns& runs() { return runs_; }

 private:
  const loom_host* host_;
  loom::Backend be_;
  loom::opt::ParamRuns runs_;
  double beta1_ = 0.9, beta2_ = 0.95, eps_ = 1e-8, wd_ = 0.1;
};

const loom_plugin_descriptor kDescriptor = {
    LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    LOOM_KIND_OPTIMIZER,
    "adamw",
    "0.1.0",
    "Loom",
    "Apache-2.0",
    "AdamW (decoupled weight decay) via the backend's adamw_step",
    kSchema,
    sizeof(kSchema) / sizeof(kSchema[0]),
    &loom::opt::OptimizerTable<AdamW>::api,
    nullptr,   // capabilities
    nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
