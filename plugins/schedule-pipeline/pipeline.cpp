// schedule/gpipe, schedule/1f1b, schedule/interleaved-1f1b: pipeline schedules. One source
// built three times (LOOM_SCHEDULE selects the schedule); schedule.hpp holds the orders and
// the deadlock-free communication plan, this file runs a plan against the model's stage API
// and the comm's blocking send/recv over the pipeline group.
//
// Buffers: activations received for (chunk, micro-batch) stay alive until that pair's
// backward (a model may keep a pointer to its input for the weight gradient); gradients
// received stay alive until the backward that consumes them. They come from a pool on the
// active backend, kept across steps. With one pipeline rank there is nothing to exchange:
// each micro-batch runs forward through the chunks and backward again, with no comm.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/schedule.h"
#include "schedule.hpp"

namespace {

namespace pp = loom::pipeline;

#if LOOM_SCHEDULE == 0
constexpr pp::Kind kKind = pp::Kind::kGPipe;
constexpr const char* kName = "gpipe";
constexpr const char* kDescription =
    "pipeline schedule GPipe: every micro-batch's forward, then every backward";
#elif LOOM_SCHEDULE == 1
constexpr pp::Kind kKind = pp::Kind::k1F1B;
constexpr const char* kName = "1f1b";
constexpr const char* kDescription =
    "pipeline schedule 1F1B (Megatron's non-interleaved): warmup, one forward one backward, "
    "cooldown";
#elif LOOM_SCHEDULE == 2
constexpr pp::Kind kKind = pp::Kind::kInterleaved;
constexpr const char* kName = "interleaved-1f1b";
constexpr const char* kDescription =
    "pipeline schedule interleaved 1F1B (Megatron's virtual stages): several model chunks per "
    "rank";
#else
#error "LOOM_SCHEDULE must be 0 (gpipe), 1 (1f1b) or 2 (interleaved-1f1b)"
#endif

const std::string kPrefix = std::string("schedule/") + kName + ": ";
constexpr int kTagAct = 0, kTagGrad = 1;

std::string shape_key(DLDataType dt, const std::vector<int64_t>& shape) {
  std::string k = std::to_string(dt.code);
  k += ':';
  k += std::to_string(dt.bits);
  for (int64_t d : shape) {
    k += ',';  // (appending "," + to_string trips GCC 12's -Wrestrict false positive)
    k += std::to_string(d);
  }
  return k;
}

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
                  kPrefix + "needs a host with get_layout and get_group");
    layout_.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2;
    loom::check(host, host->get_layout(host->ctx, &layout_));
    P_ = layout_.pipeline;
    rank_ = layout_.pipeline_rank;
    V_ = layout_.virtual_stages;
    loom::require(P_ >= 1 && rank_ >= 0 && rank_ < P_ && V_ >= 1,
                  kPrefix + "invalid layout: pipeline " + std::to_string(P_) + ", rank " +
                      std::to_string(rank_) + ", virtual_stages " + std::to_string(V_));
    if (kKind == pp::Kind::k1F1B)
      loom::require(V_ == 1, kPrefix + "runs one model chunk per rank but virtual_stages = " +
                                 std::to_string(V_) +
                                 "; use parallel.schedule = \"interleaved-1f1b\"");
    if (P_ == 1) return;  // nothing to exchange: no comm, no buffers
    if (loom_error* err = host->get_comm(host->ctx, &comm_)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, kPrefix + "pipeline = " + std::to_string(P_) +
                                                       " needs a comm (" + why + ")");
    }
    loom::check(host, host->get_group(host->ctx, LOOM_GROUP_PIPELINE, &group_));
    const int gs = comm_.api->group_size(comm_.self, group_);
    const int gr = comm_.api->group_rank(comm_.self, group_);
    loom::require(gs == P_ && gr == rank_,
                  kPrefix + "the pipeline group has " + std::to_string(gs) + " ranks (this is " +
                      std::to_string(gr) + ") but the layout says pipeline " + std::to_string(P_) +
                      " (this is stage rank " + std::to_string(rank_) + ")");
    backend_ = loom::Backend(host);  // receive buffers live on the active backend
  }

  const loom_host* host() const { return host_; }

  void run(loom_schedule_args* a) {
    loom::require(a != nullptr && a->struct_size >= LOOM_SCHEDULE_ARGS_SIZE_V2,
                  kPrefix + "run: args NULL or smaller than ABI 2.0's");
    loom::require_known_exts(a->ext, {}, kPrefix + "run");
    const loom_model_api* m = a->model_api;
    loom::require(m != nullptr && m->struct_size >= LOOM_MODEL_API_SIZE_V2 && m->stage_info &&
                      m->stage_forward && m->stage_backward,
                  kPrefix +
                      "the model plugin has no stage API (stage_info, stage_forward, "
                      "stage_backward)");
    loom::require(a->num_chunks == static_cast<size_t>(V_),
                  kPrefix + "got " + std::to_string(a->num_chunks) +
                      " model chunks but the layout has virtual_stages = " + std::to_string(V_));
    loom::require(a->chunks != nullptr && a->get_microbatch != nullptr,
                  kPrefix + "run: chunks or get_microbatch is NULL");
    loom::require(a->num_microbatches >= 0, kPrefix + "num_microbatches < 0");
    if (kKind == pp::Kind::kInterleaved && V_ > 1)
      loom::require(a->num_microbatches % P_ == 0,
                    kPrefix + "needs the number of micro-batches (" +
                        std::to_string(a->num_microbatches) + ") to be a multiple of pipeline (" +
                        std::to_string(P_) + "), as Megatron's interleaved schedule does");
    a_ = a;
    info_.assign(V_, loom_stage_info{});
    for (int v = 0; v < V_; ++v) {
      loom::require(a->chunks[v] != nullptr, kPrefix + "chunk " + std::to_string(v) + " is NULL");
      info_[v].struct_size = LOOM_STAGE_INFO_SIZE_V2;
      loom::check(host_, m->stage_info(a->chunks[v], &info_[v]));
      const int64_t s = stage(v), S = int64_t(P_) * V_;
      loom::require((info_[v].is_first != 0) == (s == 0) && (info_[v].is_last != 0) == (s == S - 1),
                    kPrefix + "chunk " + std::to_string(v) + " holds stage " + std::to_string(s) +
                        " of " + std::to_string(S) +
                        " but reports is_first = " + std::to_string(info_[v].is_first) +
                        ", is_last = " + std::to_string(info_[v].is_last) +
                        " (was it created with pipeline_stage = " + std::to_string(s) +
                        ", pipeline_stages = " + std::to_string(S) + "?)");
    }
    slots_.assign(V_, Slots{});
    a->loss_sum = 0;
    a->tokens = 0;
    if (P_ == 1)
      run_local();
    else
      run_plan();
    a_ = nullptr;
  }

 private:
  using Key = std::pair<int32_t, int64_t>;  // (chunk, micro-batch)

  int64_t stage(int32_t v) const { return int64_t(v) * P_ + rank_; }
  bool is_last(int32_t v) const { return stage(v) == int64_t(P_) * V_ - 1; }
  const loom_model_api& model() const { return *a_->model_api; }

  loom_microbatch fetch(int64_t i) const {
    loom_microbatch mb{};
    mb.struct_size = LOOM_MICROBATCH_SIZE_V2;
    loom::check(host_, a_->get_microbatch(a_->user, i, &mb));
    return mb;
  }

  // Rows of the hidden state between stages for micro-batch mb.
  int64_t rows(const loom_microbatch& mb) const {
    int64_t n = mb.batch * mb.seq_len;
    if (layout_.sequence_parallel) {
      loom::require(n % layout_.tensor == 0,
                    kPrefix + "sequence parallelism needs batch x seq_len (" + std::to_string(n) +
                        ") divisible by tensor (" + std::to_string(layout_.tensor) + ")");
      n /= layout_.tensor;
    }
    return n;
  }

  void forward(int32_t v, int64_t slot, const loom_microbatch& mb, const DLTensor* in,
               DLTensor** out) {
    double loss = 0;
    int64_t tokens = 0;
    *out = nullptr;
    loom::check(host_, model().stage_forward(a_->chunks[v], slot, &mb, in, a_->forward_only, out,
                                             &loss, &tokens));
    if (is_last(v)) {
      a_->loss_sum += loss;
      a_->tokens += tokens;
    } else {
      loom::require(*out != nullptr, kPrefix + "stage " + std::to_string(stage(v)) +
                                         " returned no output from stage_forward");
    }
  }

  // One pipeline rank: each micro-batch through the chunks and back; tensors are handed
  // from chunk to chunk directly.
  void run_local() {
    for (int64_t i = 0; i < a_->num_microbatches; ++i) {
      const loom_microbatch mb = fetch(i);
      std::vector<int64_t> slot(V_);
      const DLTensor* x = nullptr;
      for (int32_t v = 0; v < V_; ++v) {
        slot[v] = slots_[v].take();
        DLTensor* out = nullptr;
        forward(v, slot[v], mb, x, &out);
        if (a_->forward_only) slots_[v].give(slot[v]);
        x = out;
      }
      if (a_->forward_only) continue;
      const DLTensor* dy = nullptr;
      for (int32_t v = V_ - 1; v >= 0; --v) {
        DLTensor* dx = nullptr;
        loom::check(host_, model().stage_backward(a_->chunks[v], slot[v], dy, &dx));
        slots_[v].give(slot[v]);
        dy = dx;
      }
    }
  }

  loom::Tensor take_buffer(DLDataType dt, const std::vector<int64_t>& shape) {
    auto& list = pool_[shape_key(dt, shape)];
    if (list.empty()) return loom::Tensor(backend_, dt, shape);
    loom::Tensor t = std::move(list.back());
    list.pop_back();
    return t;
  }
  void give_buffer(std::map<Key, loom::Tensor>& from, const Key& k) {
    auto it = from.find(k);
    if (it == from.end()) return;
    const DLTensor* t = it->second.get();
    pool_[shape_key(t->dtype, std::vector<int64_t>(t->shape, t->shape + t->ndim))].push_back(
        std::move(it->second));
    from.erase(it);
  }

  void send(const DLTensor* t, int peer, int tag) {
    // the model's ops may still be running on the backend's stream
    loom::check(host_, backend_.api()->synchronize(backend_.self()));
    loom::check(host_, comm_.api->send(comm_.self, group_, t, peer, tag));
  }
  void recv(DLTensor* t, int peer, int tag) {
    loom::check(host_, comm_.api->recv(comm_.self, group_, t, peer, tag));
  }

  void run_plan() {
    std::vector<std::vector<pp::Op>> plans;
    try {
      plans = pp::plan(kKind, P_, V_, a_->num_microbatches, a_->forward_only != 0);
    } catch (const std::logic_error& e) {
      throw loom::Error(LOOM_ERR_INTERNAL, kPrefix + e.what());
    }
    std::map<Key, int64_t> slot_of;
    std::map<Key, DLTensor*> out_of, dinput_of;  // model-owned
    std::map<Key, loom::Tensor> act_in, grad_in;
    for (const pp::Op& op : plans[rank_]) {
      const Key k{op.chunk, op.mb};
      const int32_t v = op.chunk;
      switch (op.type) {
        case pp::OpType::kForward: {
          // fetched right before the forward: the data is valid until the next fetch
          const loom_microbatch mb = fetch(op.mb);
          const int64_t slot = slots_[v].take();
          const DLTensor* in = stage(v) == 0 ? nullptr : act_in.at(k).get();
          DLTensor* out = nullptr;
          forward(v, slot, mb, in, &out);
          if (!is_last(v)) {
            const int64_t want = rows(mb) * info_[v].hidden;
            loom::require(loom_tensor_numel(out) == want,
                          kPrefix + "stage " + std::to_string(stage(v)) + " output has " +
                              std::to_string(loom_tensor_numel(out)) + " elements, expected " +
                              std::to_string(want) + " (tokens x hidden)");
            out_of[k] = out;
          }
          if (a_->forward_only) {
            slots_[v].give(slot);
            give_buffer(act_in, k);
          } else {
            slot_of[k] = slot;
          }
          break;
        }
        case pp::OpType::kBackward: {
          const DLTensor* dy = is_last(v) ? nullptr : grad_in.at(k).get();
          DLTensor* dx = nullptr;
          loom::check(host_, model().stage_backward(a_->chunks[v], slot_of.at(k), dy, &dx));
          slots_[v].give(slot_of.at(k));
          slot_of.erase(k);
          out_of.erase(k);
          give_buffer(act_in, k);
          give_buffer(grad_in, k);
          if (stage(v) > 0) {
            loom::require(dx != nullptr, kPrefix + "stage " + std::to_string(stage(v)) +
                                             " returned no input gradient from stage_backward");
            dinput_of[k] = dx;
          }
          break;
        }
        case pp::OpType::kSendAct:
          send(out_of.at(k), op.peer, kTagAct);
          if (a_->forward_only) out_of.erase(k);
          break;
        case pp::OpType::kRecvAct: {
          // the shape comes from the micro-batch (get_microbatch is a function of i)
          const int64_t n = rows(fetch(op.mb));
          loom::Tensor t = take_buffer(info_[v].dtype, {n, info_[v].hidden});
          recv(t.get(), op.peer, kTagAct);
          act_in[k] = std::move(t);
          break;
        }
        case pp::OpType::kSendGrad:
          send(dinput_of.at(k), op.peer, kTagGrad);
          dinput_of.erase(k);
          break;
        case pp::OpType::kRecvGrad: {
          const DLTensor* out = out_of.at(k);  // the gradient has the output's shape
          loom::Tensor t =
              take_buffer(out->dtype, std::vector<int64_t>(out->shape, out->shape + out->ndim));
          recv(t.get(), op.peer, kTagGrad);
          grad_in[k] = std::move(t);
          break;
        }
      }
    }
    // The loss lives on the last stage: every rank of the pipeline reports the sum.
    loom::Tensor sums(backend_, loom_f64(), {2});
    const std::vector<double> local = {a_->loss_sum, static_cast<double>(a_->tokens)};
    sums.upload(local);
    loom::check(host_, comm_.api->all_reduce(comm_.self, group_, sums.get(), LOOM_REDUCE_SUM));
    const std::vector<double> total = sums.download<double>();
    a_->loss_sum = total[0];
    a_->tokens = static_cast<int64_t>(total[1]);
  }

  const loom_host* host_;
  loom_parallel_layout layout_{};
  int P_ = 1, rank_ = 0, V_ = 1;
  loom_comm_ref comm_{nullptr, nullptr};
  loom_comm_group* group_ = nullptr;  // host-owned
  loom::Backend backend_;
  std::map<std::string, std::vector<loom::Tensor>> pool_;  // free receive buffers by shape
  loom_schedule_args* a_ = nullptr;                        // during run()
  std::vector<loom_stage_info> info_;
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

const loom_plugin_descriptor kDescriptor = {LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
                                            LOOM_ABI_MAJOR,
                                            LOOM_ABI_MINOR,
                                            LOOM_KIND_SCHEDULE,
                                            kName,
                                            "0.1.0",
                                            "Loom",
                                            "Apache-2.0",
                                            kDescription,
                                            nullptr,
                                            0,
                                            &kApi,
                                            nullptr,   // capabilities
                                            nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
