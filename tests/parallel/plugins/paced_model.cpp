// model/paced, a test stand-in: a pipeline stage whose forward, input backward and weight
// backward each take a set time (model.forward_ms, backward_ms, weight_ms) and compute
// nothing else. A traced `loom run` of it measures what the schedule plugin, comm/mpi and the
// engine make of a schedule's order (its idle time, its step) with the computation's cost
// fixed: four ranks then wait on the clock, not on two shared cores, so a machine with fewer
// cores than ranks still measures a P = 4 pipeline. The times are those of a rank's share of
// the model: a rank holding V chunks (interleaved, a V) takes 1/V of them in each. It lists
// the split backward, so the zero-bubble schedules run B and W apart; a whole backward takes
// backward_ms + weight_ms.
// Every stage passes on a (tokens, 4) activation; the last reports a loss of 0 over its
// tokens. One parameter of 4 values a stage, whose gradient stays 0.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace {

constexpr int64_t kWidth = 4;

constexpr loom_param_spec kParams[] = {
    loom::param("forward_ms", LOOM_PARAM_FLOAT, "10", "milliseconds a stage's forward takes", 0,
                10000),
    loom::param("backward_ms", LOOM_PARAM_FLOAT, "10",
                "milliseconds a stage's input backward (B) takes", 0, 10000),
    loom::param("weight_ms", LOOM_PARAM_FLOAT, "10",
                "milliseconds a stage's weight backward (W) takes", 0, 10000),
};

void wait_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

struct Paced {
  const loom_host* host;
  loom::Backend be;
  double f_ms, b_ms, w_ms;
  int32_t stage, stages;
  int64_t rows;  // micro_batch x seq_len of the create args
  std::string name;
  loom::Tensor value, grad;
  struct Slot {
    loom::Tensor out, din;
    DLTensor* out_ptr = nullptr;
    DLTensor* din_ptr = nullptr;
    bool pending = false, weights = false;
  };
  std::map<int64_t, Slot> slots;
  int64_t shape[2] = {0, kWidth};
  loom_stage_tensor io{};
  loom_loss loss{};

  Paced(const loom_host* h, const loom_config* cfg, const loom_model_create_args& a)
      : host(h), be(h) {
    const loom::Config c(h, cfg);
    f_ms = c.get_float("forward_ms");
    b_ms = c.get_float("backward_ms");
    w_ms = c.get_float("weight_ms");
    stages = a.pipeline_stages > 1 ? a.pipeline_stages : 1;
    stage = stages > 1 ? a.pipeline_stage : 0;
    loom_parallel_layout l{};
    l.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2;
    loom::check(h, h->get_layout(h->ctx, &l));
    const double share = (double)std::max(1, l.pipeline) / stages;  // 1 / chunks a rank
    f_ms *= share;
    b_ms *= share;
    w_ms *= share;
    rows = a.micro_batch * a.seq_len;
    name = "stage" + std::to_string(stage) + ".w";
    value = loom::Tensor(be, loom_f32(), {kWidth});
    grad = loom::Tensor(be, loom_f32(), {kWidth});
    be.call(&loom_ops::fill, value.get(), 1.0);
    be.call(&loom_ops::fill, grad.get(), 0.0);
  }
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }

  Slot& slot(int64_t i, int64_t n) {
    Slot& s = slots[i];
    if (!s.out.get() || s.out.get()->shape[0] != n) {
      s.out = loom::Tensor(be, loom_f32(), {n, kWidth});
      s.din = loom::Tensor(be, loom_f32(), {n, kWidth});
      be.call(&loom_ops::fill, s.din.get(), 0.0);
      s.out_ptr = s.out.get();
      s.din_ptr = s.din.get();
    }
    return s;
  }

  void info(loom_stage_info& in) {
    shape[0] = in.batch * in.seq_len;
    io = loom_stage_tensor{LOOM_STAGE_TENSOR_SIZE_V2, "hidden", loom_f32(), 2, shape};
    static const char* const kLosses[] = {"paced"};
    in.is_first = first();
    in.is_last = last();
    in.num_reads = 0;
    in.reads = nullptr;
    in.num_inputs = first() ? 0 : 1;
    in.inputs = &io;
    in.num_outputs = last() ? 0 : 1;
    in.outputs = &io;
    in.num_losses = 1;
    in.losses = kLosses;
  }

  void forward(loom_stage_forward_args& a) {
    const int64_t n = a.mb->batch * a.mb->seq_len;
    Slot& s = slot(a.slot, n);
    loom::require(!s.pending && !s.weights,
                  "model/paced: slot " + std::to_string(a.slot) + " is busy");
    if (!first()) {
      loom::require(a.num_inputs == 1 && a.inputs && a.inputs[0]->shape[0] == n,
                    "model/paced: stage " + std::to_string(stage) + " takes one (" +
                        std::to_string(n) + ", 4) input");
      be.call(&loom_ops::copy, s.out.get(), a.inputs[0]);
    }
    wait_ms(f_ms);
    a.num_outputs = 0;
    a.num_losses = 0;
    if (last()) {
      loss = loom_loss{LOOM_LOSS_SIZE_V2, "paced", 0.0, (double)n, 1.0};
      a.num_losses = 1;
      a.losses = &loss;
    } else {
      a.num_outputs = 1;
      a.outputs = &s.out_ptr;
    }
    s.pending = !a.no_grad;
  }

  void backward(loom_stage_backward_args& a) {
    const bool split = loom_ext_find(a.ext, LOOM_EXT_SPLIT_BACKWARD) != nullptr;
    auto it = slots.find(a.slot);
    loom::require(it != slots.end() && it->second.pending, "model/paced: stage_backward of slot " +
                                                               std::to_string(a.slot) +
                                                               ", which holds no forward");
    Slot& s = it->second;
    wait_ms(split ? b_ms : b_ms + w_ms);
    s.pending = false;
    s.weights = split;
    a.num_dinputs = first() ? 0 : 1;
    a.dinputs = first() ? nullptr : &s.din_ptr;
  }

  void weights(const loom_stage_weight_args& a) {
    auto it = slots.find(a.slot);
    loom::require(it != slots.end() && it->second.weights,
                  "model/paced: weight_backward of slot " + std::to_string(a.slot) +
                      ", whose input backward has not run");
    wait_ms(w_ms);
    it->second.weights = false;
  }
};

Paced* cast(loom_model* m) { return reinterpret_cast<Paced*>(m); }
template <class Fn>
loom_error* call(loom_model* m, Fn fn) {
  return loom::guard(cast(m)->host, [&] { fn(*cast(m)); });
}

const int64_t kBT[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
const loom_array_spec kArrays[] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kBT},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, {kDLInt, 32, 1}, 2, kBT}};

loom_model_api make_api() {
  loom_model_api api{};
  api.struct_size = LOOM_MODEL_API_SIZE_V2;
  api.create = [](const loom_host* host, const loom_config* cfg, const loom_model_create_args* a,
                  loom_model** out) {
    return loom::guard(host,
                       [&] { *out = reinterpret_cast<loom_model*>(new Paced(host, cfg, *a)); });
  };
  api.destroy = [](loom_model* m) { delete cast(m); };
  api.num_params = [](loom_model*) -> size_t { return 1; };
  api.get_param = [](loom_model* m, size_t, loom_model_param* out) {
    return call(m, [&](Paced& p) {
      const size_t size = out->struct_size;
      *out = loom_model_param{};
      out->struct_size = size;
      out->name = p.name.c_str();
      out->value = p.value.get();
      out->grad = p.grad.get();
      out->tp_split_dim = -1;
      out->reduce_group = LOOM_GROUP_DATA_CONTEXT;
    });
  };
  api.init_params = [](loom_model* m, uint64_t) {
    return call(m, [](Paced& p) { p.be.call(&loom_ops::fill, p.value.get(), 1.0); });
  };
  api.zero_grad = [](loom_model* m) {
    return call(m, [](Paced& p) { p.be.call(&loom_ops::fill, p.grad.get(), 0.0); });
  };
  api.flops_per_token = [](loom_model*) { return 1.0; };
  api.batch_spec = [](const loom_host*, const loom_config*, size_t* num,
                      const loom_array_spec** specs) -> loom_error* {
    *num = 2;
    *specs = kArrays;
    return nullptr;
  };
  api.stage_info = [](loom_model* m, loom_stage_info* in) {
    return call(m, [&](Paced& p) { p.info(*in); });
  };
  api.stage_forward = [](loom_model* m, loom_stage_forward_args* a) {
    return call(m, [&](Paced& p) { p.forward(*a); });
  };
  api.stage_backward = [](loom_model* m, loom_stage_backward_args* a) {
    return call(m, [&](Paced& p) { p.backward(*a); });
  };
  api.finish_grads = [](loom_model*) -> loom_error* { return nullptr; };
  return api;
}
const loom_model_api kApi = make_api();

const loom_split_backward_ext kSplit = {
    {sizeof(loom_split_backward_ext), LOOM_EXT_SPLIT_BACKWARD, 0, nullptr},
    [](loom_model* m, loom_stage_weight_args* a) {
      return call(m, [&](Paced& p) { p.weights(*a); });
    }};
const char* const kCapabilities[] = {LOOM_EXT_SPLIT_BACKWARD, nullptr};

}  // namespace

LOOM_PLUGIN(.description =
                "test stand-in: pipeline stages that take a set time and compute "
                "nothing (traced schedule timing)",
            .params = {kParams, sizeof(kParams) / sizeof(kParams[0])}, .api = &kApi,
            .capabilities = kCapabilities, .ext = &kSplit.base)
