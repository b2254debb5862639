// optimizer/sgd: torch.optim.SGD (heavy-ball momentum, L2 weight decay coupled into the
// gradient) through the backend's sgd_step: g += wd*p; buf = momentum*buf + g; p -= lr*buf.
// Weight decay only on parameters flagged weight_decay. No state when momentum is 0.
#include "loom/cpp/param_runs.hpp"
#include "loom/cpp/plugin.hpp"

namespace {

using loom::param;

const loom_param_spec kSchema[] = {
    param("momentum", LOOM_PARAM_FLOAT, "0.0", "momentum factor (0 = plain SGD, no state)", 0.0,
          0.999999),
    param("weight_decay", LOOM_PARAM_FLOAT, "0.0",
          "decay (times lr) of parameters flagged weight_decay", 0.0, 10.0),
};

std::vector<std::string> state_kinds(const loom_host* host, const loom_config* cfg) {
  if (loom::Config(host, cfg).get_float("momentum") == 0.0) return {};
  return {"momentum"};
}

class Sgd {
 public:
  Sgd(const loom_host* host, const loom_config* cfg, const loom_opt_param* params, size_t n)
      : host_(host), be_(host), runs_(be_, params, n, state_kinds(host, cfg)) {
    loom::Config c(host, cfg);
    momentum_ = c.get_float("momentum");
    wd_ = c.get_float("weight_decay");
    loom::log(host, LOOM_LOG_INFO,
              std::to_string(n) + " parameters stepped as " + std::to_string(runs_.runs().size()) +
                  " contiguous runs");
  }

  void step(const loom_opt_step_args& s) {
    for (auto& r : runs_.runs()) {
      DLTensor* buf = r.state.empty() ? nullptr : r.state[0].get();
      be_.call(&loom_ops::sgd_step, r.param.get(), (const DLTensor*)r.grad, buf, s.lr, momentum_,
               r.weight_decay ? wd_ : 0.0, s.grad_scale);
    }
  }

  const loom_host* host() const { return host_; }
  loom::opt::ParamRuns& runs() { return runs_; }

 private:
  const loom_host* host_;
  loom::Backend be_;
  loom::opt::ParamRuns runs_;
  double momentum_ = 0.0, wd_ = 0.0;
};

const loom_plugin_descriptor kDescriptor = {LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
                                            LOOM_ABI_MAJOR,
                                            LOOM_ABI_MINOR,
                                            LOOM_KIND_OPTIMIZER,
                                            "sgd",
                                            "0.1.0",
                                            "Loom",
                                            "Apache-2.0",
                                            "SGD with optional momentum via the backend's sgd_step",
                                            kSchema,
                                            sizeof(kSchema) / sizeof(kSchema[0]),
                                            &loom::opt::OptimizerTable<Sgd>::api,
                                            nullptr,   // capabilities
                                            nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
