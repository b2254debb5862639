// Helpers for the model/gpt, attention/reference and optimizer tests: a TestHost with the CPU
// backend and the reference attention, a model created through its descriptor, and host <->
// device copies of tensors as double vectors (whatever their dtype).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "loom/cpp/model_step.hpp"
#include "test_host.hpp"

namespace modeltest {

using Overrides = std::map<std::string, std::string>;

// Host copies of a device tensor (f32, f64, or bf16/f16 cast to f32 by the backend's copy)
// as doubles, and back (f32 and f64 only).
inline std::vector<double> download(const loom_backend_ref& be, const DLTensor* t) {
  const int64_t n = loom_tensor_numel(t);
  std::vector<double> out(n);
  if (t->dtype.bits == 16) {
    DLTensor* f = nullptr;
    REQUIRE(be.api->alloc_tensor(be.self, loom_f32(), 1, &n, &f) == nullptr);
    loom_error* e = be.api->ops->copy(be.self, f, t);
    std::vector<double> v = e ? std::vector<double>{} : download(be, f);
    be.api->free_tensor(be.self, f);
    REQUIRE(e == nullptr);
    return v;
  }
  if (t->dtype.bits == 64) {
    REQUIRE(be.api->to_host(be.self, t, out.data(), n * sizeof(double)) == nullptr);
  } else {
    std::vector<float> f(n);
    REQUIRE(be.api->to_host(be.self, t, f.data(), n * sizeof(float)) == nullptr);
    for (int64_t i = 0; i < n; ++i) out[i] = f[i];
  }
  return out;
}

inline void upload(const loom_backend_ref& be, DLTensor* t, const std::vector<double>& v) {
  const int64_t n = loom_tensor_numel(t);
  REQUIRE((int64_t)v.size() == n);
  if (t->dtype.bits == 64) {
    REQUIRE(be.api->from_host(be.self, t, v.data(), n * sizeof(double)) == nullptr);
  } else {
    std::vector<float> f(v.begin(), v.end());
    REQUIRE(be.api->from_host(be.self, t, f.data(), n * sizeof(float)) == nullptr);
  }
}

// An owning device tensor of the test's backend.
class DevTensor {
 public:
  DevTensor(const loom_backend_ref& be, DLDataType dt, std::vector<int64_t> shape) : be_(be) {
    REQUIRE(be.api->alloc_tensor(be.self, dt, (int)shape.size(), shape.data(), &t_) == nullptr);
  }
  ~DevTensor() { be_.api->free_tensor(be_.self, t_); }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  DLTensor* get() const { return t_; }
  operator DLTensor*() const { return t_; }
  std::vector<double> get_host() const { return download(be_, t_); }
  void set_host(const std::vector<double>& v) { upload(be_, t_, v); }

 private:
  loom_backend_ref be_;
  DLTensor* t_ = nullptr;
};

// Creates the model `api` describes on `th` with `cfg` (which must outlive it) and `a` (its
// struct_size set here) into *m: its parameters, in the model's order.
inline std::vector<loom_model_param> create_model(loomtest::TestHost& th, const loom_model_api* api,
                                                  const loom_config& cfg, loom_model_create_args a,
                                                  loom_model** m) {
  // ABI 2.18's size only when a create option rides on the ext chain (DPO's objective)
  a.struct_size = a.ext ? LOOM_MODEL_CREATE_ARGS_SIZE_V2_18 : LOOM_MODEL_CREATE_ARGS_SIZE_V2;
  if (a.ext) a.recompute_num_layers = 1;  // the fields that size covers: no recompute
  th.check(api->create(th.host(), &cfg, &a, m));
  std::vector<loom_model_param> params;
  for (size_t i = 0; i < api->num_params(*m); ++i) {
    loom_model_param p{};
    p.struct_size = LOOM_MODEL_PARAM_SIZE_V2_25;
    th.check(api->get_param(*m, i, &p));
    params.push_back(p);
  }
  return params;
}

// Backend cpu (no GEMM measurement) + attention reference (or another attention plugin).
struct Host {
  loomtest::TestHost th;
  loom_backend_ref be;
  loom_attention_ref attn;
  explicit Host(const char* attention = "reference") {
    be = th.load_backend("cpu", {{"measure_gemm", "false"}});
    attn = th.load_attention(attention);
  }
};

// A model/gpt instance on a Host (or of another model plugin on the layer library, given its
// descriptor); destroyed before the host's backend.
class Gpt {
 public:
  // `create_ext`: create options on the args' ext chain (DPO's loom.preference/1).
  Gpt(Host& h, const Overrides& options, int64_t vocab, int64_t micro_batch, int64_t seq_len,
      DLDataType dtype = loom_f32(), const loom_plugin_descriptor* desc = nullptr,
      const loom_ext* create_ext = nullptr)
      : h_(h) {
    desc_ = desc ? desc : loomtest::load_descriptor("model", "gpt");
    api_ = static_cast<const loom_model_api*>(desc_->api);
    cfg_ = loomtest::TestHost::config(desc_, options);
    loom_model_create_args a{};
    a.vocab_size = vocab, a.seq_len = seq_len, a.micro_batch = micro_batch, a.dtype = dtype;
    a.ext = create_ext;
    params = create_model(h.th, api_, cfg_, a, &m_);
  }
  ~Gpt() { api_->destroy(m_); }
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const loom_model_api* api() const { return api_; }
  // The model's loom.decode/1 table (KV-cache generation), which model/gpt must provide.
  const loom_decode_ext* decode_ext() const {
    const loom_ext* e = loom_ext_find(desc_->ext, LOOM_EXT_DECODE);
    REQUIRE(e != nullptr);
    REQUIRE(e->struct_size >= LOOM_DECODE_EXT_SIZE_V1);
    return reinterpret_cast<const loom_decode_ext*>(e);
  }
  // Its loom.decode-slots/1 table (continuous batching), chained after loom.decode/1.
  const loom_decode_slots_ext* slots_ext() const {
    const loom_ext* e = loom_ext_find(desc_->ext, LOOM_EXT_DECODE_SLOTS);
    REQUIRE(e != nullptr);
    REQUIRE(e->struct_size >= LOOM_DECODE_SLOTS_EXT_SIZE_V1);
    return reinterpret_cast<const loom_decode_slots_ext*>(e);
  }
  loom_model* self() const { return m_; }
  void check(loom_error* e) const { h_.th.check(e); }

  bool has_param(const std::string& name) const {
    for (auto& p : params)
      if (name == p.name) return true;
    return false;
  }
  const loom_model_param& param(const std::string& name) const {
    for (auto& p : params)
      if (name == p.name) return p;
    FAIL("no parameter " << name);
    return params.front();
  }
  std::vector<double> value(const std::string& name) const {
    return download(h_.be, param(name).value);
  }
  std::vector<double> grad(const std::string& name) const {
    return download(h_.be, param(name).grad);
  }

  // Sum of token losses and counted tokens of one micro-batch.
  std::pair<double, int64_t> run(const std::vector<int32_t>& tokens,
                                 const std::vector<int32_t>& targets, int64_t B, int64_t T,
                                 double loss_scale, bool backward) {
    return run(tokens, targets, {}, B, T, loss_scale, backward);
  }
  // The same with packed documents: `positions` restart at 0 where a document starts.
  std::pair<double, int64_t> run(const std::vector<int32_t>& tokens,
                                 const std::vector<int32_t>& targets,
                                 const std::vector<int32_t>& positions, int64_t B, int64_t T,
                                 double loss_scale, bool backward) {
    loom::HostBatch mb(B, T);
    mb.tokens_targets(tokens.data(), targets.data());
    if (!positions.empty()) mb.add(LOOM_ARRAY_POSITIONS, positions.data());
    double loss = 0, count = 0;
    check(loom::model_step(api_, m_, mb.get(), loss_scale, backward, &loss, &count));
    return {loss, (int64_t)count};
  }

  std::vector<loom_model_param> params;

 private:
  Host& h_;
  const loom_plugin_descriptor* desc_ = nullptr;
  const loom_model_api* api_ = nullptr;
  loom_config cfg_;
  loom_model* m_ = nullptr;
};

// An optimizer plugin over a model's parameters.
class Optimizer {
 public:
  Optimizer(Host& h, const std::string& name, const Overrides& options, const Gpt& model) : h_(h) {
    auto* d = loomtest::load_descriptor("optimizer", name);
    api_ = static_cast<const loom_optimizer_api*>(d->api);
    cfg_ = loomtest::TestHost::config(d, options);
    for (auto& p : model.params) {
      loom_opt_param o{};
      o.struct_size = LOOM_OPT_PARAM_SIZE_V2;
      o.name = p.name;
      o.param = p.value;
      o.grad = p.grad;
      o.weight_decay = p.weight_decay;
      ops_.push_back(o);
    }
    const loom_opt_create_args args{LOOM_OPT_CREATE_ARGS_SIZE_V2, ops_.data(), ops_.size(),
                                    nullptr};
    h.th.check(api_->create(h.th.host(), &cfg_, &args, &o_));
  }
  ~Optimizer() { api_->destroy(o_); }
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  void step(double lr, int64_t step, double grad_scale = 1.0) {
    loom_opt_step_args a{};
    a.struct_size = LOOM_OPT_STEP_ARGS_SIZE_V2;
    a.lr = lr;
    a.step = step;
    a.grad_scale = grad_scale;
    h_.th.check(api_->step(o_, &a));
  }
  const loom_optimizer_api* api() const { return api_; }
  loom_optimizer* self() const { return o_; }

 private:
  Host& h_;
  const loom_optimizer_api* api_ = nullptr;
  loom_config cfg_;
  std::vector<loom_opt_param> ops_;
  loom_optimizer* o_ = nullptr;
};

// comm/mpi finalises MPI when its last instance goes: a test that makes and destroys comms
// under mpirun keeps this one for the whole process.
inline loomtest::TestHost& mpi_anchor() {
  static loomtest::TestHost h;
  static bool loaded = (h.load_comm("mpi"), true);
  (void)loaded;
  return h;
}

// A model plugin on a test host of its own: backend/cpu on one thread (the ranks already share
// the cores), attention/reference and comm `comm_name`; `d` == nullptr: the whole model, else
// this rank's pipeline stage and shard of layout d. Created for `vocab`, `seq_len` and
// `micro_batch` in `dtype`, its parameters initialised from `seed` and its gradients zeroed.
struct ModelInstance {
  loomtest::TestHost th;
  loom_backend_ref be{};
  loom_comm_ref comm{};
  const loom_model_api* api = nullptr;
  loom_model* m = nullptr;
  loom_config cfg;
  std::vector<loom_model_param> params;

  ModelInstance(const std::string& comm_name, const loom::layout::Degrees* d, const char* model,
                const Overrides& options, int64_t vocab, int64_t seq_len, int64_t micro_batch,
                DLDataType dtype, uint64_t seed) {
    be = th.load_backend("cpu", {{"measure_gemm", "false"}, {"threads", "1"}});
    th.load_attention("reference");
    comm = th.load_comm(comm_name);
    if (d) th.setup_parallel(*d);
    auto* desc = loomtest::load_descriptor("model", model);
    api = static_cast<const loom_model_api*>(desc->api);
    REQUIRE(api->struct_size >= LOOM_MODEL_API_SIZE_V2);
    cfg = loomtest::TestHost::config(desc, options);
    loom_model_create_args a{};
    a.vocab_size = vocab, a.seq_len = seq_len, a.micro_batch = micro_batch, a.dtype = dtype;
    a.pipeline_stage = th.layout().pipeline_rank, a.pipeline_stages = th.layout().pipeline;
    params = create_model(th, api, cfg, a, &m);
    th.check(api->init_params(m, seed));
    th.check(api->zero_grad(m));
  }
  ~ModelInstance() { api->destroy(m); }
  ModelInstance(const ModelInstance&) = delete;
  ModelInstance& operator=(const ModelInstance&) = delete;
};

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// LoRA's B starts at zero, which leaves the adapters out of the output and A without a
// gradient: the tests that check them give every B small nonzero values first.
inline void perturb_lora_b(const loom_backend_ref& be,
                           const std::vector<loom_model_param>& params) {
  for (const loom_model_param& p : params)
    if (std::string(p.name).find(".lora_B.") != std::string::npos) {
      std::vector<double> v((size_t)loom_tensor_numel(p.value));
      for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05 * std::sin(0.7 * (double)i + 1.0);
      upload(be, p.value, v);
    }
}

// Tiny configurations shared by the tests.
inline Overrides tiny_gpt2() {
  return {{"n_layer", "2"}, {"n_head", "2"}, {"n_embd", "16"}, {"max_seq_len", "32"}};
}
// The Llama-style model of width 32 the tensor-parallel tests split (GQA: 4 query and 2
// key/value heads), with `n_layer` layers.
inline Overrides small_llama(const std::string& n_layer) {
  return {{"n_layer", n_layer},       {"n_head", "4"},      {"n_kv_head", "2"},
          {"n_embd", "32"},           {"ffn_hidden", "48"}, {"norm", "rmsnorm"},
          {"activation", "swiglu"},   {"position", "rope"}, {"bias", "false"},
          {"tie_embeddings", "false"}};
}
inline Overrides tiny_llama() {
  return {{"n_layer", "2"},           {"n_head", "2"},      {"n_kv_head", "1"},
          {"n_embd", "16"},           {"ffn_hidden", "24"}, {"norm", "rmsnorm"},
          {"activation", "swiglu"},   {"position", "rope"}, {"bias", "false"},
          {"tie_embeddings", "false"}};
}

}  // namespace modeltest
