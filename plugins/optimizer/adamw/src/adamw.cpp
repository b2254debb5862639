// optimizer/adamw: AdamW with decoupled weight decay (Loshchilov & Hutter) as PyTorch's
// torch.optim.AdamW (non-amsgrad) steps it, per element with g = grad_scale * grad:
//   param *= 1 - lr * weight_decay                                (decoupled decay, first)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Weight decay only on parameters flagged weight_decay (matrices and embeddings; not biases
// or norm weights). One pass per run of adjacent parameters (loom/cpp/param_runs.hpp).
//
// The kernels are the plugin's own (ABI 2: optimizers are not backend ops): the host kernel
// below for backend/cpu (f32, or f64 for tests), and adamw_cuda.cu, where the plugin was
// built with nvcc, enqueued on backend/cuda's stream (loom.device-stream/1). Step-wide
// constants (bias corrections) are computed once in double (adamw_math.hpp; on a GPU given
// loom.opt-schedule/1, by each thread from the values it reads); the per-element loop is in
// the tensor's dtype so it vectorises. Memory-bound (7 values per parameter): every thread.
#include <omp.h>

#include <cmath>

#include "adamw_math.hpp"
#include "loom/cpp/param_runs.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/vec_math.hpp"
#if LOOM_PLUGIN_CUDA
#include "adamw_cuda.hpp"
#endif

namespace {

using loom::param;

const loom_param_spec kSchema[] = {
    param("beta1", LOOM_PARAM_FLOAT, "0.9", "first-moment decay", 0.0, 0.999999),
    param("beta2", LOOM_PARAM_FLOAT, "0.95", "second-moment decay", 0.0, 0.999999999),
    param("eps", LOOM_PARAM_FLOAT, "1e-8", "added to sqrt(second moment)", 0.0, 1.0),
    param("weight_decay", LOOM_PARAM_FLOAT, "0.1",
          "decoupled decay (times lr) of parameters flagged weight_decay", 0.0, 10.0),
};

// Below this many elements a pass stays on the calling thread (waking the team costs more).
constexpr int64_t kParallelMin = 1 << 15;

template <class T>
LOOM_CPU_CLONES void adamw_kernel(T* p, const T* grad, T* m, T* v, int64_t n, T gs, T decay, T b1,
                                  T b2, T step_size, T inv_sqrt_bc2, T eps) {
  const T one_b1 = T(1) - b1, one_b2 = T(1) - b2;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] * gs;
    T mi = b1 * m[i] + one_b1 * g;
    T vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    T pi = p[i] * decay;
    p[i] = pi - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

template <class T>
void host_step(loom::opt::ParamRuns::Run& r, int64_t n, double gs, double decay, double b1,
               double b2, double step_size, double inv_sqrt_bc2, double eps) {
  using loom::opt::data_of;
  adamw_kernel(data_of<T>(r.param.get()), data_of<const T>(r.grad.get()),
               data_of<T>(r.state[0].get()), data_of<T>(r.state[1].get()), n, T(gs), T(decay),
               T(b1), T(b2), T(step_size), T(inv_sqrt_bc2), T(eps));
}

class AdamW : public loom::opt::RunsOptimizer {
 public:
  AdamW(const loom_host* host, const loom_config* cfg, const loom_opt_param* params, size_t n)
      : RunsOptimizer(host, "optimizer/adamw", LOOM_PLUGIN_CUDA != 0, params, n,
                      {"exp_avg", "exp_avg_sq"}) {
    loom::Config c(host, cfg);
    beta1_ = c.get_float("beta1");
    beta2_ = c.get_float("beta2");
    eps_ = c.get_float("eps");
    wd_ = c.get_float("weight_decay");
    log_runs(n);
  }

  void step(const loom_opt_step_args& s) {
    const loom::StepSchedule sch = schedule(s);
    loom::StepScale sc;
    double gs = 0;
    if (!step_scale(s, sc, gs)) return;  // a non-finite norm: nothing changes
    for (auto& r : runs_.runs()) {
      const int64_t n = loom_tensor_numel(r.param.get());
      const double wd = r.weight_decay ? wd_ : 0.0;
#if LOOM_PLUGIN_CUDA
      if (site_.gpu) {
        using loom::opt::data_of;
        const std::string e =
            adamw_cuda::step(data_of<float>(r.param.get()), data_of<const float>(r.grad.get()),
                             data_of<float>(r.state[0].get()), data_of<float>(r.state[1].get()), n,
                             sc, sch, beta1_, beta2_, wd, eps_, site_.stream);
        loom::require(e.empty(), "optimizer/adamw: CUDA kernel launch: " + e, LOOM_ERR_INTERNAL);
        continue;
      }
#endif
      const adamw_math::Constants k = adamw_math::constants(sch, beta1_, beta2_, wd);
      if (loom_dtype_eq(r.param.get()->dtype, loom_f64()))
        host_step<double>(r, n, gs, k.decay, beta1_, beta2_, k.step_size, k.inv_sqrt_bc2, eps_);
      else
        host_step<float>(r, n, gs, k.decay, beta1_, beta2_, k.step_size, k.inv_sqrt_bc2, eps_);
    }
  }

 private:
  double beta1_ = 0.9, beta2_ = 0.95, eps_ = 1e-8, wd_ = 0.1;
};

}  // namespace

LOOM_PLUGIN(.description =
                "AdamW (decoupled weight decay), its own kernels: host (backend/cpu) and CUDA "
                "(backend/cuda, on its stream)",
            .params = kSchema, .api = &loom::opt::OptimizerTable<AdamW>::api,
            .capabilities = loom::opt::kCapabilities)
