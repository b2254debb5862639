// optimizer/sgd: torch.optim.SGD (heavy-ball momentum, L2 weight decay coupled into the
// gradient, no dampening, no Nesterov), per element:
//   g = grad_scale * grad + wd * p;  buf = momentum * buf + g;  p -= lr * buf
// (no buffer and no state when momentum is 0: p -= lr * g). Weight decay only on parameters
// flagged weight_decay. Its own kernels, as optimizer/adamw: the host one below (backend/cpu,
// f32 or f64) and sgd_cuda.cu on backend/cuda's stream where the plugin was built with nvcc.
#include <omp.h>

#include <cmath>

#include "loom/cpp/param_runs.hpp"
#include "loom/cpp/plugin.hpp"
#if LOOM_PLUGIN_CUDA
#include "sgd_cuda.hpp"
#endif

namespace {

using loom::param;

const loom_param_spec kSchema[] = {
    param("momentum", LOOM_PARAM_FLOAT, "0.0", "momentum factor (0 = plain SGD, no state)", 0.0,
          0.999999),
    param("weight_decay", LOOM_PARAM_FLOAT, "0.0",
          "decay (times lr) of parameters flagged weight_decay", 0.0, 10.0),
};

// Below this many elements a pass stays on the calling thread (waking the team costs more).
constexpr int64_t kParallelMin = 1 << 15;

template <class T>
void sgd_kernel(T* p, const T* grad, T* buf, int64_t n, T lr, T mom, T wd, T gs) {
  if (buf) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      T b = mom * buf[i] + (gs * grad[i] + wd * p[i]);
      buf[i] = b;
      p[i] -= lr * b;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (gs * grad[i] + wd * p[i]);  // buf = g
  }
}

std::vector<std::string> state_kinds(const loom_host* host, const loom_config* cfg) {
  if (loom::Config(host, cfg).get_float("momentum") == 0.0) return {};
  return {"momentum"};
}

class Sgd : public loom::opt::RunsOptimizer {
 public:
  Sgd(const loom_host* host, const loom_config* cfg, const loom_opt_param* params, size_t n)
      : RunsOptimizer(host, "optimizer/sgd", LOOM_PLUGIN_CUDA != 0, params, n,
                      state_kinds(host, cfg)) {
    loom::Config c(host, cfg);
    momentum_ = c.get_float("momentum");
    wd_ = c.get_float("weight_decay");
    log_runs(n);
  }

  void step(const loom_opt_step_args& s) {
    const loom::StepSchedule sch = schedule(s);
    loom::StepScale sc;
    double gs = 0;
    if (!step_scale(s, sc, gs)) return;  // a non-finite norm: nothing changes
    using loom::opt::data_of;
    for (auto& r : runs_.runs()) {
      const DLTensor *p = r.param.get(), *g = r.grad.get();
      const DLTensor* buf = r.state.empty() ? nullptr : r.state[0].get();
      const int64_t n = loom_tensor_numel(p);
      const double wd = r.weight_decay ? wd_ : 0.0;
#if LOOM_PLUGIN_CUDA
      if (site_.gpu) {
        const std::string e = sgd_cuda::step(data_of<float>(p), data_of<const float>(g),
                                             buf ? data_of<float>(buf) : nullptr, n, sch, momentum_,
                                             wd, sc, site_.stream);
        loom::require(e.empty(), "optimizer/sgd: CUDA kernel launch: " + e, LOOM_ERR_INTERNAL);
        continue;
      }
#endif
      const double lr = sch.learning_rate();  // host memory here (on a GPU, the kernel reads it)
      if (loom_dtype_eq(p->dtype, loom_f64()))
        sgd_kernel<double>(data_of<double>(p), data_of<const double>(g),
                           buf ? data_of<double>(buf) : nullptr, n, lr, momentum_, wd, gs);
      else
        sgd_kernel<float>(data_of<float>(p), data_of<const float>(g),
                          buf ? data_of<float>(buf) : nullptr, n, float(lr), float(momentum_),
                          float(wd), float(gs));
    }
  }

 private:
  double momentum_ = 0.0, wd_ = 0.0;
};

}  // namespace

LOOM_PLUGIN(.description =
                "SGD with optional momentum, its own kernels: host (backend/cpu) and CUDA "
                "(backend/cuda)",
            .params = kSchema, .api = &loom::opt::OptimizerTable<Sgd>::api,
            .capabilities = loom::opt::kCapabilities)
