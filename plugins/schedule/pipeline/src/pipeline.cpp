// schedule/gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v and dualpipev: pipeline schedules. One
// source built six times (LOOM_SCHEDULE selects the schedule, kind.hpp); schedule_order.hpp
// holds the placements and orders, schedule.hpp the deadlock-free communication plan, this
// file runs a plan against the model's stage API and the comm's blocking send/recv over the
// pipeline group, and order_ext.cpp tells the host the placement (loom.schedule-order/1).
//
// Buffers: activations received for (chunk, micro-batch) stay alive until that pair's
// backward (a model may keep a pointer to its input for the weight gradient), or its W when
// the backward is split; gradients received stay alive until the backward that consumes
// them. Where a V folds back onto one rank, the stage's output is copied into such a buffer
// for the next stage on the same rank, as a received one would be. They come from a pool on the
// active backend, kept across steps. With one pipeline rank there is nothing to exchange:
// each micro-batch runs forward through the chunks and backward again, with no comm.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kind.hpp"
#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/schedule.h"
#include "messages.hpp"
#include "schedule.hpp"

namespace {

namespace pp = loom::pipeline;
using pp::kKind;
using pp::prefix;

constexpr int kTagAct = 0, kTagGrad = 1;

// Slot ids of one chunk's model: the smallest free id first, so ids stay small.
struct Slots {
  std::set<int64_t> free;
  int64_t next = 0;
  int64_t take() {
    if (free.empty()) return next++;
    const int64_t s = *free.begin();
    free.erase(free.begin());
    return s;
  }
  void give(int64_t s) { free.insert(s); }
};

class Pipeline {
 public:
  explicit Pipeline(const loom_host* host) : host_(host) {
    loom::require(host->struct_size >= LOOM_HOST_SIZE_V2 && host->get_layout && host->get_group,
                  prefix() + "needs a host with get_layout and get_group");
    layout_.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2;
    loom::check(host, host->get_layout(host->ctx, &layout_));
    P_ = layout_.pipeline;
    rank_ = layout_.pipeline_rank;
    V_ = layout_.virtual_stages;
    loom::require(P_ >= 1 && rank_ >= 0 && rank_ < P_ && V_ >= 1,
                  prefix() + "invalid layout: pipeline " + std::to_string(P_) + ", rank " +
                      std::to_string(rank_) + ", virtual_stages " + std::to_string(V_));
    {  // what does not depend on the micro-batches (2P of them pass every count rule)
      const std::string why = pp::order_refusal(kKind, P_, V_, 2 * int64_t(P_));
      loom::require(why.empty(), prefix() + why);
    }
    C_ = pp::chunks_per_rank(kKind, V_);
    if (P_ == 1) return;  // nothing to exchange: no comm, no buffers
    if (loom_error* err = host->get_comm(host->ctx, &comm_)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, prefix() + "pipeline = " + std::to_string(P_) +
                                                       " needs a comm (" + why + ")");
    }
    loom::check(host, host->get_group(host->ctx, LOOM_GROUP_PIPELINE, &group_));
    const int gs = comm_.api->group_size(comm_.self, group_);
    const int gr = comm_.api->group_rank(comm_.self, group_);
    loom::require(gs == P_ && gr == rank_,
                  prefix() + "the pipeline group has " + std::to_string(gs) + " ranks (this is " +
                      std::to_string(gr) + ") but the layout says pipeline " + std::to_string(P_) +
                      " (this is stage rank " + std::to_string(rank_) + ")");
    backend_ = loom::Backend(host);  // message buffers live on the active backend
    messages_.set_comm(comm_, group_);
  }

  const loom_host* host() const { return host_; }

  void run(loom_schedule_args* a) {
    loom::require(a != nullptr && a->struct_size >= LOOM_SCHEDULE_ARGS_SIZE_V2,
                  prefix() + "run: args NULL or smaller than ABI 2.0's");
    loom::require_known_exts(
        a->ext, {LOOM_EXT_SCHEDULE_TRACE, LOOM_EXT_SPLIT_BACKWARD, LOOM_EXT_DEVICE_LOSSES},
        prefix() + "run");
    const auto* split = reinterpret_cast<const loom_schedule_split*>(
        loom_ext_find(a->ext, LOOM_EXT_SPLIT_BACKWARD));
    split_ = split && split->base.struct_size >= LOOM_SCHEDULE_SPLIT_SIZE_V1 && split->model &&
                     split->model->base.struct_size >= LOOM_SPLIT_BACKWARD_EXT_SIZE_V1 &&
                     split->model->weight_backward
                 ? split->model
                 : nullptr;
    trace_ = reinterpret_cast<const loom_schedule_trace*>(
        loom_ext_find(a->ext, LOOM_EXT_SCHEDULE_TRACE));
    if (trace_ && (trace_->base.struct_size < LOOM_SCHEDULE_TRACE_SIZE_V1 || !trace_->now ||
                   !trace_->step_done))
      trace_ = nullptr;
    const loom_model_api* m = a->model_api;
    loom::require(m != nullptr && m->struct_size >= LOOM_MODEL_API_SIZE_V2 && m->stage_info &&
                      m->stage_forward && m->stage_backward,
                  prefix() +
                      "the model plugin has no stage API (stage_info, stage_forward, "
                      "stage_backward)");
    loom::require(a->num_chunks == static_cast<size_t>(C_),
                  prefix() + "got " + std::to_string(a->num_chunks) + " model chunks but runs " +
                      std::to_string(C_) + " per rank");
    loom::require(a->chunks != nullptr && a->get_microbatch != nullptr,
                  prefix() + "run: chunks or get_microbatch is NULL");
    loom::require(a->num_microbatches >= 0, prefix() + "num_microbatches < 0");
    loom::require(a->batch > 0 && a->seq_len > 0,
                  prefix() + "run: batch and seq_len must be positive");
    if (a->num_microbatches > 0) {
      const std::string why = pp::order_refusal(kKind, P_, V_, a->num_microbatches);
      loom::require(why.empty(), prefix() + why);
    }
    a_ = a;
    info_.assign(C_, Chunk{});
    for (int v = 0; v < C_; ++v) {
      loom::require(a->chunks[v] != nullptr, prefix() + "chunk " + std::to_string(v) + " is NULL");
      describe(v);
    }
    slots_.assign(C_, Slots{});
    for (loom_loss& l : totals_) l.sum = l.count = l.weight = 0;
    if (P_ == 1)
      run_local();
    else
      run_plan();
    a->num_losses = totals_.size();
    a->losses = totals_.data();
    a_ = nullptr;
    trace_ = nullptr;
    split_ = nullptr;
  }

 private:
  using Key = std::pair<int32_t, int64_t>;  // (chunk, micro-batch)
  using Tensors = std::vector<DLTensor*>;   // a stage's inputs or outputs, in order

  // What stage_info says of one chunk, copied (its pointers live only until the next call).
  struct Chunk {
    bool reads = false;  // reads micro-batch arrays: the schedule fetches for it
    std::vector<std::pair<DLDataType, std::vector<int64_t>>> inputs, outputs;
  };

  int64_t stage(int32_t v) const { return pp::stage_of(kKind, P_, rank_, v); }
  bool is_last(int32_t v) const { return stage(v) == int64_t(P_) * C_ - 1; }
  const loom_model_api& model() const { return *a_->model_api; }

  void describe(int32_t v) {
    loom_stage_info in{};
    in.struct_size = LOOM_STAGE_INFO_SIZE_V2;
    in.batch = a_->batch;
    in.seq_len = a_->seq_len;
    loom::check(host_, model().stage_info(a_->chunks[v], &in));
    const int64_t s = stage(v), S = int64_t(P_) * C_;
    loom::require((in.is_first != 0) == (s == 0) && (in.is_last != 0) == (s == S - 1),
                  prefix() + "chunk " + std::to_string(v) + " holds stage " + std::to_string(s) +
                      " of " + std::to_string(S) + " but reports is_first = " +
                      std::to_string(in.is_first) + ", is_last = " + std::to_string(in.is_last) +
                      " (was it created with pipeline_stage = " + std::to_string(s) +
                      ", pipeline_stages = " + std::to_string(S) + "?)");
    loom::require(in.num_losses >= 1 && in.losses != nullptr,
                  prefix() + "the model lists no loss terms in stage_info");
    Chunk& c = info_[v];
    c.reads = in.num_reads > 0;
    auto copy = [&](size_t n, const loom_stage_tensor* t, auto& to, const char* what) {
      loom::require(n == 0 || t != nullptr,
                    prefix() + "stage_info lists " + what + " but no array");
      for (size_t i = 0; i < n; ++i) {
        loom::require(t[i].ndim >= 1 && t[i].shape != nullptr,
                      prefix() + "stage " + std::to_string(s) + " " + what + " " +
                          std::to_string(i) + " has no shape (ndim " + std::to_string(t[i].ndim) +
                          ")");
        to.emplace_back(t[i].dtype, std::vector<int64_t>(t[i].shape, t[i].shape + t[i].ndim));
      }
    };
    copy(in.num_inputs, in.inputs, c.inputs, "input");
    copy(in.num_outputs, in.outputs, c.outputs, "output");
    if (v == 0) {  // the loss terms, the same on every stage
      loss_names_.assign(in.losses, in.losses + in.num_losses);
      totals_.assign(in.num_losses, loom_loss{});
      for (size_t i = 0; i < in.num_losses; ++i)
        totals_[i] = loom_loss{LOOM_LOSS_SIZE_V2, loss_names_[i].c_str(), 0, 0, 0};
    }
  }

  // One forward's loss terms into the totals: sums and counts from any stage, the weights
  // from the last.
  void add_losses(const loom_stage_forward_args& f, bool last, const std::string& who) {
    loom::require(f.num_losses == totals_.size() && f.losses != nullptr,
                  who + " reported " + std::to_string(f.num_losses) +
                      " loss terms; stage_info listed " + std::to_string(totals_.size()));
    for (size_t k = 0; k < totals_.size(); ++k) {
      loom::require(f.losses[k].name && loss_names_[k] == f.losses[k].name,
                    who + ": loss term " + std::to_string(k) + " is not '" + loss_names_[k] +
                        "' as stage_info listed");
      totals_[k].sum += f.losses[k].sum;
      totals_[k].count += f.losses[k].count;
      if (last) totals_[k].weight = f.losses[k].weight;
    }
  }

  // Micro-batch i as chunk v needs it: fetched only when the chunk reads arrays.
  loom_microbatch fetch(int32_t v, int64_t i) const {
    loom_microbatch mb{};
    mb.struct_size = LOOM_MICROBATCH_SIZE_V2;
    mb.batch = a_->batch;
    mb.seq_len = a_->seq_len;
    if (!info_[v].reads) return mb;
    loom::check(host_, a_->get_microbatch(a_->user, i, &mb));
    loom::require(mb.batch == a_->batch && mb.seq_len == a_->seq_len,
                  prefix() + "micro-batch " + std::to_string(i) + " is " +
                      std::to_string(mb.batch) + " x " + std::to_string(mb.seq_len) +
                      "; the run said " + std::to_string(a_->batch) + " x " +
                      std::to_string(a_->seq_len));
    return mb;
  }

  // Forward of micro-batch i on chunk v; returns its outputs (model-owned).
  Tensors forward(int32_t v, int64_t slot, int64_t i, const std::vector<const DLTensor*>& in) {
    const loom_microbatch mb = fetch(v, i);
    loom_stage_forward_args f{};
    f.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
    f.slot = slot;
    f.mb = &mb;
    f.loss_scale = a_->loss_scale;
    f.no_grad = a_->forward_only;
    f.num_inputs = in.size();
    f.inputs = in.empty() ? nullptr : in.data();
    // Every stage may report its share of the loss terms (a mixture of experts' balancing
    // losses on its layers): added up here and over the pipeline at the end of run().
    loom_stage_losses every{{sizeof(loom_stage_losses), LOOM_EXT_STAGE_LOSSES, 0, nullptr}};
    f.ext = &every.base;
    // The host's sums on the device (ABI 2.28), passed on to a training forward where one
    // rank holds every stage: a pipeline adds its stages' terms up on the host below.
    const auto* dl =
        reinterpret_cast<const loom_device_losses*>(loom_ext_find(a_->ext, LOOM_EXT_DEVICE_LOSSES));
    loom_device_losses device{{sizeof(loom_device_losses), LOOM_EXT_DEVICE_LOSSES, 0, nullptr},
                              nullptr};
    if (P_ == 1 && !a_->forward_only && dl && dl->base.struct_size >= LOOM_DEVICE_LOSSES_SIZE_V1) {
      device.sums = dl->sums;
      every.base.next = &device.base;
    }
    loom::check(host_, model().stage_forward(a_->chunks[v], &f));
    const std::string who = prefix() + "stage " + std::to_string(stage(v));
    if (is_last(v) || f.num_losses > 0) add_losses(f, is_last(v), who);
    if (is_last(v)) return {};
    const auto& want = info_[v].outputs;
    loom::require(f.num_outputs == want.size() && f.outputs != nullptr,
                  who + " returned " + std::to_string(f.num_outputs) +
                      " outputs from stage_forward; stage_info listed " +
                      std::to_string(want.size()));
    Tensors out(f.outputs, f.outputs + f.num_outputs);
    for (size_t k = 0; k < out.size(); ++k)
      loom::require(
          out[k] != nullptr && loom_dtype_eq(out[k]->dtype, want[k].first) &&
              std::vector<int64_t>(out[k]->shape, out[k]->shape + out[k]->ndim) == want[k].second,
          who + " output " + std::to_string(k) +
              " differs from the dtype and shape stage_info listed");
    return out;
  }

  // Backward of the micro-batch in chunk v's slot; returns the input gradients. With
  // input_only, a split backward's B (the weight gradients wait for its W).
  Tensors backward(int32_t v, int64_t slot, const std::vector<const DLTensor*>& dout,
                   bool input_only = false) {
    static const loom_stage_backward_split kInputOnly = {
        {sizeof(loom_stage_backward_split), LOOM_EXT_SPLIT_BACKWARD, LOOM_EXT_REQUIRED, nullptr}};
    loom_stage_backward_args b{};
    b.struct_size = LOOM_STAGE_BACKWARD_ARGS_SIZE_V2;
    b.slot = slot;
    b.ext = input_only ? &kInputOnly.base : nullptr;
    b.num_doutputs = dout.size();
    b.doutputs = dout.empty() ? nullptr : dout.data();
    loom::check(host_, model().stage_backward(a_->chunks[v], &b));
    loom::require(b.num_dinputs == info_[v].inputs.size() && (b.num_dinputs == 0 || b.dinputs),
                  prefix() + "stage " + std::to_string(stage(v)) + " returned " +
                      std::to_string(b.num_dinputs) + " input gradients; it has " +
                      std::to_string(info_[v].inputs.size()) + " inputs");
    return Tensors(b.dinputs, b.dinputs + b.num_dinputs);
  }

  static std::vector<const DLTensor*> consts(const Tensors& t) { return {t.begin(), t.end()}; }
  static std::vector<const DLTensor*> consts(const std::vector<loom::Tensor>& t) {
    std::vector<const DLTensor*> r;
    for (const loom::Tensor& x : t) r.push_back(x.get());
    return r;
  }

  // One pipeline rank: each micro-batch through the chunks and back; tensors are handed
  // from chunk to chunk directly.
  void run_local() {
    for (int64_t i = 0; i < a_->num_microbatches; ++i) {
      std::vector<int64_t> slot(C_);
      Tensors x;
      for (int32_t v = 0; v < C_; ++v) {  // with one rank, chunk v holds stage v
        slot[v] = slots_[v].take();
        x = traced_forward(v, slot[v], i, consts(x));
        if (a_->forward_only) slots_[v].give(slot[v]);
      }
      if (a_->forward_only) continue;
      Tensors dy;
      for (int32_t v = C_ - 1; v >= 0; --v) {
        dy = traced_backward(v, slot[v], i, consts(dy));
        slots_[v].give(slot[v]);
      }
    }
  }

  void give_buffers(std::map<Key, std::vector<loom::Tensor>>& from, const Key& k) {
    auto it = from.find(k);
    if (it == from.end()) return;
    messages_.give_back(it->second);
    from.erase(it);
  }

  // One step's state between the plan's ops: the slots in use, the model's outputs and
  // input gradients waiting to be sent, the buffers received.
  struct Flight {
    std::map<Key, int64_t> slot_of;
    std::map<Key, Tensors> out_of, dinput_of;  // model-owned
    std::map<Key, std::vector<loom::Tensor>> act_in, grad_in;
    Tensors local;  // a send to this rank itself (the fold of a V), until its receive
  };

  // The end of a (chunk, micro-batch): its slot and buffers go back.
  void release(Flight& f, const Key& k) {
    slots_[k.first].give(f.slot_of.at(k));
    f.slot_of.erase(k);
    f.out_of.erase(k);
    give_buffers(f.act_in, k);
    give_buffers(f.grad_in, k);
  }

  // A stage's output (activations) or input gradients, sent to `peer`, or kept for this
  // rank's next stage when the peer is this rank.
  void send_op(Flight& f, const pp::Op& op, const Key& k) {
    const bool act = op.type == pp::OpType::kSendAct;
    Tensors& t = act ? f.out_of.at(k) : f.dinput_of.at(k);
    if (op.peer == rank_)
      f.local = t;
    else
      messages_.send(t, op.peer, act ? kTagAct : kTagGrad);
    if (!act) f.dinput_of.erase(k);
    if (act && a_->forward_only) f.out_of.erase(k);
  }
  // Into buffers of the shapes stage_info gave (gradients have the outputs' shapes).
  void recv_op(Flight& f, const pp::Op& op, const Key& k) {
    const bool act = op.type == pp::OpType::kRecvAct;
    std::vector<loom::Tensor> t =
        messages_.take(act ? info_[k.first].inputs : info_[k.first].outputs);
    if (op.peer == rank_) {
      loom::require(f.local.size() == t.size(), prefix() + "a local hand-over lost its tensors");
      for (size_t i = 0; i < t.size(); ++i)
        backend_.call(&loom_ops::copy, t[i].get(), static_cast<const DLTensor*>(f.local[i]));
      f.local.clear();
    } else {
      messages_.recv(t, op.peer, act ? kTagAct : kTagGrad);
    }
    (act ? f.act_in : f.grad_in)[k] = std::move(t);
  }

  // A traced step reports each computation as it ran (loom.schedule-trace/1).
  template <class Fn>
  auto timed(int32_t phase, int32_t chunk, int64_t mb, Fn&& fn) {
    if (!trace_) return fn();
    const double t0 = trace_->now(trace_->user);
    auto result = fn();
    const loom_schedule_step step{LOOM_SCHEDULE_STEP_SIZE_V2_19, phase, chunk, mb};
    trace_->step_done(trace_->user, &step, t0, trace_->now(trace_->user));
    return result;
  }
  Tensors traced_forward(int32_t v, int64_t slot, int64_t mb,
                         const std::vector<const DLTensor*>& in) {
    return timed(LOOM_PHASE_FORWARD, v, mb, [&] { return forward(v, slot, mb, in); });
  }
  Tensors traced_backward(int32_t v, int64_t slot, int64_t mb,
                          const std::vector<const DLTensor*>& dout, bool input_only = false) {
    return timed(input_only ? LOOM_PHASE_BACKWARD_INPUT : LOOM_PHASE_BACKWARD, v, mb,
                 [&] { return backward(v, slot, dout, input_only); });
  }
  // W: the weight gradients of the B that ran in `slot` (loom.split-backward/1).
  void traced_weight_backward(int32_t v, int64_t slot, int64_t mb) {
    timed(LOOM_PHASE_BACKWARD_WEIGHT, v, mb, [&] {
      loom_stage_weight_args w{};
      w.struct_size = LOOM_STAGE_WEIGHT_ARGS_SIZE_V2_19;
      w.slot = slot;
      loom::check(host_, split_->weight_backward(a_->chunks[v], &w));
      return 0;
    });
  }

  void compute_op(Flight& f, const pp::Op& op, const Key& k) {
    const int32_t v = op.chunk;
    switch (op.type) {
      case pp::OpType::kForward: {
        const int64_t slot = slots_[v].take();
        Tensors out = traced_forward(v, slot, op.mb, consts(f.act_in[k]));
        if (!is_last(v)) f.out_of[k] = out;
        if (a_->forward_only) {
          slots_[v].give(slot);
          give_buffers(f.act_in, k);
        } else {
          f.slot_of[k] = slot;
        }
        break;
      }
      // B keeps the slot, its input and its received gradient until its W. A model without
      // a split backward (loom.split-backward/1) runs the whole backward at B, and its W has
      // nothing left to do: the same numbers, only the bubbles the W's were to fill stay.
      case pp::OpType::kBackward:
      case pp::OpType::kBackwardInput: {
        const bool input_only = op.type == pp::OpType::kBackwardInput && split_ != nullptr;
        Tensors dx = traced_backward(v, f.slot_of.at(k), op.mb, consts(f.grad_in[k]), input_only);
        if (!input_only) release(f, k);
        if (stage(v) > 0) f.dinput_of[k] = dx;
        break;
      }
      case pp::OpType::kBackwardWeight:
        if (split_ != nullptr) {
          traced_weight_backward(v, f.slot_of.at(k), op.mb);
          release(f, k);
        }
        break;
      default:
        break;
    }
  }

  void run_plan() {
    std::vector<std::vector<pp::Op>> plans;
    try {
      plans = pp::plan(kKind, P_, V_, a_->num_microbatches, a_->forward_only != 0);
    } catch (const std::exception& e) {
      throw loom::Error(LOOM_ERR_INTERNAL, prefix() + e.what());
    }
    Flight f;
    messages_.abandon();
    for (const pp::Op& op : plans[rank_]) {
      const Key k{op.chunk, op.mb};
      if (op.type == pp::OpType::kSendAct || op.type == pp::OpType::kSendGrad)
        send_op(f, op, k);
      else if (op.type == pp::OpType::kRecvAct || op.type == pp::OpType::kRecvGrad)
        recv_op(f, op, k);
      else
        compute_op(f, op, k);
    }
    messages_.reap(true);
    // Every rank of the pipeline reports its stages' sums (and the weight, which only the
    // last stage sets): their sum is the model's.
    const size_t n = totals_.size();
    std::vector<double> local;
    for (const loom_loss& l : totals_) local.insert(local.end(), {l.sum, l.count, l.weight});
    loom::Tensor sums(backend_, loom_f64(), {int64_t(3 * n)});
    sums.upload(local);
    loom::check(host_, loom::comm_all_reduce(comm_, group_, sums.get(), LOOM_REDUCE_SUM,
                                             backend_.stream()));
    const std::vector<double> total = sums.download<double>();
    for (size_t i = 0; i < n; ++i) {
      totals_[i].sum = total[3 * i];
      totals_[i].count = total[3 * i + 1];
      totals_[i].weight = total[3 * i + 2];
    }
  }

  const loom_host* host_;
  loom_parallel_layout layout_{};
  int P_ = 1, rank_ = 0, V_ = 1, C_ = 1;  // C_: chunks per rank
  loom_comm_ref comm_{nullptr, nullptr};
  loom_comm_group* group_ = nullptr;  // host-owned
  loom::Backend backend_;
  pp::Messages messages_{host_, backend_};          // after backend_: its buffers live there
  loom_schedule_args* a_ = nullptr;                 // during run()
  const loom_schedule_trace* trace_ = nullptr;      // during a traced run()
  const loom_split_backward_ext* split_ = nullptr;  // the model's, during run()
  std::vector<Chunk> info_;
  std::vector<std::string> loss_names_;
  std::vector<loom_loss> totals_;  // what run() reports
  std::vector<Slots> slots_;
};

Pipeline* cast(loom_schedule* s) { return reinterpret_cast<Pipeline*>(s); }

loom_error* create(const loom_host* host, const loom_config*, loom_schedule** out) {
  return loom::guard(host, [&] { *out = reinterpret_cast<loom_schedule*>(new Pipeline(host)); });
}
void destroy(loom_schedule* s) { delete cast(s); }
loom_error* run(loom_schedule* s, loom_schedule_args* args) {
  return loom::guard(cast(s)->host(), [&] { cast(s)->run(args); });
}

const loom_schedule_api kApi = {LOOM_SCHEDULE_API_SIZE_V2, create, destroy, run};
const char* const kCapabilities[] = {LOOM_EXT_SCHEDULE_ORDER, LOOM_EXT_SCHEDULE_TRACE, nullptr};

}  // namespace

LOOM_PLUGIN(.description = pp::kDescription, .api = &kApi, .capabilities = kCapabilities,
            .ext = &pp::kOrderExt.base)
