// optimizer/signsgd — an example third-party Loom plugin by Example Corp.
//
// Signum: sign-SGD with momentum (Bernstein et al., 2018). For every parameter p with
// gradient grad, at learning rate lr:
//   g = grad_scale * grad                  (the host's clipping factor, applied first)
//   m = beta * m + (1 - beta) * g          (when momentum beta > 0; otherwise m = g)
//   p = p - lr * (sign(m) + wd * p)        (wd = weight_decay where the host asks for it)
// Every coordinate moves by lr regardless of the gradient's size, which makes the update
// robust to gradient scale and cheap to communicate (one bit per coordinate).
//
// The plugin runs on any backend: each step copies the tensors to host memory through the
// backend's to_host/from_host, updates them there and copies them back. That is simple
// and portable; a production optimizer would run a kernel on the device instead.
//
// It uses only the installed SDK: the C ABI (loom/*.h) and the header-only C++ helpers
// (loom/cpp/*.hpp): loom::guard turns exceptions into ABI errors, loom::Config reads the
// validated recipe section, loom::Backend / loom::Tensor wrap the active backend.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace {

struct Param {
  std::string name;
  DLTensor* param;       // owned by the host, valid while the optimizer lives
  const DLTensor* grad;  // likewise
  bool decay;
  loom::Tensor momentum;  // ours, on the backend; empty when beta == 0
  std::string state_name;
};

class SignSgd {
 public:
  SignSgd(const loom_host* host, const loom_config* cfg, const loom_opt_param* params,
          size_t num_params)
      : host_(host), backend_(host) {
    loom::Config c(host, cfg);
    beta_ = c.get_float("momentum");
    weight_decay_ = c.get_float("weight_decay");
    loom::require(beta_ >= 0 && beta_ < 1, "optimizer/signsgd: momentum must be in [0, 1)");
    loom::require(weight_decay_ >= 0, "optimizer/signsgd: weight_decay must be >= 0");
    params_.reserve(num_params);
    for (size_t i = 0; i < num_params; ++i) {
      const loom_opt_param& p = params[i];
      const std::string name = p.name ? p.name : "param." + std::to_string(i);
      loom::require(p.param && p.grad, "optimizer/signsgd: " + name + " has no tensor or gradient");
      loom::require(
          loom_dtype_eq(p.param->dtype, loom_f32()) && loom_dtype_eq(p.grad->dtype, loom_f32()),
          "optimizer/signsgd: " + name + " must be float32 (parameter and gradient)");
      loom::require(loom_tensor_numel(p.param) == loom_tensor_numel(p.grad),
                    "optimizer/signsgd: " + name + ": gradient and parameter sizes differ");
      Param q{name, p.param, p.grad, p.weight_decay != 0, {}, "exp_avg." + name};
      if (beta_ > 0) {
        std::vector<int64_t> shape(p.param->shape, p.param->shape + p.param->ndim);
        q.momentum = loom::Tensor(backend_, loom_f32(), shape);  // zero-filled
      }
      params_.push_back(std::move(q));
    }
  }

  const loom_host* host() const { return host_; }

  void step(const loom_opt_step_args& args) {
    // Structs grow at the end in later ABI minors: accept any size >= the one we know.
    loom::require(args.struct_size >= LOOM_OPT_STEP_ARGS_SIZE_V2,
                  "optimizer/signsgd: step args older than ABI 1.0");
    const float lr = static_cast<float>(args.lr);
    const float scale = static_cast<float>(args.grad_scale);
    const float beta = static_cast<float>(beta_);
    for (Param& p : params_) {
      const size_t n = static_cast<size_t>(loom_tensor_numel(p.param));
      const size_t bytes = n * sizeof(float);
      w_.resize(n);
      g_.resize(n);
      loom::check(host_, backend_.api()->to_host(backend_.self(), p.param, w_.data(), bytes));
      loom::check(host_, backend_.api()->to_host(backend_.self(), p.grad, g_.data(), bytes));
      const float wd = p.decay ? static_cast<float>(weight_decay_) : 0.0f;
      if (p.momentum) {
        m_ = p.momentum.download<float>();
        for (size_t i = 0; i < n; ++i) m_[i] = beta * m_[i] + (1.0f - beta) * scale * g_[i];
        p.momentum.upload(m_);
        for (size_t i = 0; i < n; ++i) w_[i] -= lr * (sign(m_[i]) + wd * w_[i]);
      } else {
        for (size_t i = 0; i < n; ++i) w_[i] -= lr * (sign(scale * g_[i]) + wd * w_[i]);
      }
      loom::check(host_, backend_.api()->from_host(backend_.self(), p.param, w_.data(), bytes));
    }
  }

  size_t num_state() const { return beta_ > 0 ? params_.size() : 0; }
  void get_state(size_t i, const char** name, DLTensor** t) {
    loom::require(i < num_state(), "optimizer/signsgd: no state tensor " + std::to_string(i));
    *name = params_[i].state_name.c_str();
    *t = params_[i].momentum.get();
  }

 private:
  static float sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }

  const loom_host* host_;
  loom::Backend backend_;
  double beta_ = 0, weight_decay_ = 0;
  std::vector<Param> params_;
  std::vector<float> w_, g_, m_;  // host copies for the current tensor
};

SignSgd* cast(loom_optimizer* o) { return reinterpret_cast<SignSgd*>(o); }

// The C functions of the table: each body runs inside loom::guard, so no exception crosses.
loom_error* create(const loom_host* host, const loom_config* cfg, const loom_opt_create_args* args,
                   loom_optimizer** out) {
  return loom::guard(host, [&] {
    loom::require(args && args->struct_size >= LOOM_OPT_CREATE_ARGS_SIZE_V2,
                  "optimizer/signsgd: create args missing or older than ABI 2.0");
    loom::require_known_exts(args->ext, {}, "optimizer/signsgd");  // refuse what we don't know
    *out =
        reinterpret_cast<loom_optimizer*>(new SignSgd(host, cfg, args->params, args->num_params));
  });
}
void destroy(loom_optimizer* o) { delete cast(o); }  // delete nullptr is a no-op
loom_error* step(loom_optimizer* o, const loom_opt_step_args* args) {
  return loom::guard(cast(o)->host(), [&] { cast(o)->step(*args); });
}
size_t num_state(loom_optimizer* o) { return cast(o)->num_state(); }
loom_error* get_state(loom_optimizer* o, size_t i, const char** name, DLTensor** t) {
  return loom::guard(cast(o)->host(), [&] { cast(o)->get_state(i, name, t); });
}

const loom_optimizer_api kApi = {
    LOOM_OPTIMIZER_API_SIZE_V2, create, destroy, step, num_state, get_state};

// The recipe keys of [optimizer]; the host validates them and fills defaults before create.
const loom_param_spec kParams[] = {
    loom::param("momentum", LOOM_PARAM_FLOAT, "0.9",
                "beta of the momentum whose sign is applied (0 = plain sign-SGD)", 0.0, 0.999999),
    loom::param("weight_decay", LOOM_PARAM_FLOAT, "0.0",
                "decoupled weight decay, on tensors the host marks for decay", 0.0, 1e3),
};

}  // namespace

// The descriptor (kind, name, version, vendor and license from loom_add_plugin in
// CMakeLists.txt) and the one exported symbol, loom_plugin_entry: it returns the descriptor to
// a host of ABI major 2, NULL otherwise.
LOOM_PLUGIN(.description =
                "Signum: sign of the gradient momentum as the update (example out-of-tree plugin)",
            .params = kParams, .api = &kApi)
