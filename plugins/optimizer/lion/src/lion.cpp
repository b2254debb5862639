// optimizer/lion: Lion, "Symbolic Discovery of Optimization Algorithms" (Chen et al., 2023),
// as lion-pytorch steps it, per element with g = grad * grad_scale:
//   p *= 1 - lr * weight_decay          (decoupled, only on parameters flagged weight_decay)
//   p -= lr * sign(beta1 * m + (1 - beta1) * g)
//   m  = beta2 * m + (1 - beta2) * g
// One state tensor (exp_avg) per parameter, so half AdamW's optimizer memory. Lion's update
// has the same size in every coordinate, so it wants a learning rate 3-10x smaller than
// AdamW's, and a weight decay as much larger.
//
// The kernels are the plugin's own, not backend ops, so adding Lion touched no backend ABI:
// the host kernel below for tensors in host memory (backend/cpu; f32 or f64), and, where the
// plugin was built with nvcc, lion_cuda.cu for tensors on a CUDA GPU (f32), enqueued on the
// backend's own stream (loom.device-stream/1) with no synchronisation. Anything else is
// refused by name at create.
#include <omp.h>

#include "loom/cpp/param_runs.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#if LOOM_PLUGIN_CUDA
#include "lion_cuda.hpp"
#endif

namespace {

using loom::param;
using loom::opt::data_of;

const loom_param_spec kSchema[] = {
    param("beta1", LOOM_PARAM_FLOAT, "0.9", "interpolation of momentum and gradient for the sign",
          0.0, 0.999999),
    param("beta2", LOOM_PARAM_FLOAT, "0.99", "momentum decay", 0.0, 0.999999),
    param("weight_decay", LOOM_PARAM_FLOAT, "0.0",
          "decoupled decay (times lr) of parameters flagged weight_decay", 0.0, 100.0),
};

template <class T>
void lion_kernel(T* p, const T* g, T* m, int64_t n, double lr, double beta1, double beta2,
                 double decay, double grad_scale) {
  const T keep = T(1 - lr * decay), b1 = T(beta1), b2 = T(beta2), s = T(grad_scale), step = T(lr);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i] * s;
    const T c = b1 * m[i] + (T(1) - b1) * gi;
    const T sign = T((c > T(0)) - (c < T(0)));
    p[i] = p[i] * keep - step * sign;
    m[i] = b2 * m[i] + (T(1) - b2) * gi;
  }
}

class Lion : public loom::opt::RunsOptimizer {
 public:
  Lion(const loom_host* host, const loom_config* cfg, const loom_opt_param* params, size_t n)
      : RunsOptimizer(host, "optimizer/lion", LOOM_PLUGIN_CUDA != 0, params, n, {"exp_avg"}) {
    loom::Config c(host, cfg);
    beta1_ = c.get_float("beta1");
    beta2_ = c.get_float("beta2");
    wd_ = c.get_float("weight_decay");
  }

  void step(const loom_opt_step_args& s) {
    const loom::StepSchedule sch = schedule(s);
    loom::StepScale sc;
    double gs = 0;
    if (!step_scale(s, sc, gs)) return;  // a non-finite norm: nothing changes
    for (auto& r : runs_.runs()) {
      const DLTensor *p = r.param.get(), *g = r.grad, *m = r.state[0].get();
      const int64_t n = loom_tensor_numel(p);
      const double decay = r.weight_decay ? wd_ : 0.0;
#if LOOM_PLUGIN_CUDA
      if (site_.gpu) {
        const std::string e =
            lion_cuda::step(data_of<float>(p), data_of<float>(g), data_of<float>(m), n, sch, beta1_,
                            beta2_, decay, sc, site_.stream);
        loom::require(e.empty(), "optimizer/lion: CUDA kernel launch: " + e, LOOM_ERR_INTERNAL);
        continue;
      }
#endif
      if (loom_dtype_eq(p->dtype, loom_f64()))
        lion_kernel(data_of<double>(p), data_of<double>(g), data_of<double>(m), n,
                    sch.learning_rate(), beta1_, beta2_, decay, gs);
      else
        lion_kernel(data_of<float>(p), data_of<float>(g), data_of<float>(m), n, sch.learning_rate(),
                    beta1_, beta2_, decay, gs);
    }
  }

 private:
  double beta1_ = 0.9, beta2_ = 0.99, wd_ = 0.0;
};

}  // namespace

LOOM_PLUGIN(.description =
                "Lion (sign of interpolated momentum), its own kernels: host (backend/cpu) and "
                "CUDA (backend/cuda, on its stream)",
            .params = kSchema, .api = &loom::opt::OptimizerTable<Lion>::api,
            .capabilities = loom::opt::kCapabilities)
