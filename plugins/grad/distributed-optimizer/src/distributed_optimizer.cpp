// grad/distributed-optimizer: Megatron's distributed optimizer (ZeRO stage 1). The
// gradients, in the order of create's tensors, form buckets of at most bucket_size elements
// (one bucket by default); each bucket, viewed as one flat concatenation padded to a
// multiple of the data-parallel size D, is cut into D equal shards, of which group rank r
// owns elements [r*S, (r+1)*S) (so every rank owns one contiguous range of each parameter,
// which is what the checkpoints record). Each step:
//   reduce_gradients: pack each bucket's gradients into its flat buffer, reduce-scatter with
//     AVG into this rank's shard-gradient buffer (S elements); with overlap_grad_reduce
//     (Megatron's --overlap-grad-reduce) a bucket starts as soon as grad_ready (ABI 2.12)
//     says all its gradients are final, during the backward pass, through the comm's
//     non-blocking start;
//   the optimizer steps only the owned elements (shard_params hands it views: the
//     parameter's own memory, the shard-gradient buffer), so its state is 1/D of the model;
//   after_step: pack the owned, updated parameter elements, all-gather them into the flat
//     buffer, and copy every parameter back out of it.
// The data-parallel group is host->get_group(LOOM_GROUP_DATA_CONTEXT). Since ABI 2.6 the
// expert parameters of a mixture of experts name the expert-data group: they form a second
// set of buckets ("part"), sharded over that group as Megatron shards them. Buffers live
// on the active backend and are moved with its copy op, so the plugin works wherever the
// backend and the comm agree on memory.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/grad_ready.hpp"
#include "loom/cpp/grad_table.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/grad.h"

namespace {

const std::string kPrefix = "grad/distributed-optimizer: ";

// A 1-D view of `n` elements of dtype `dt` starting `elem` elements (of dt) into base's
// memory. Owns its shape, so it must not move once handed out (kept in a deque).
struct Slice {
  int64_t n = 0;
  DLTensor t{};
  Slice(const DLTensor* base, DLDataType dt, int64_t elem, int64_t count) : n(count) {
    t.data = base->data;
    t.device = base->device;
    t.ndim = 1;
    t.dtype = dt;
    t.shape = &n;
    t.byte_offset = base->byte_offset + static_cast<uint64_t>(elem) * loom_dtype_bytes(dt);
  }
  Slice(const Slice&) = delete;
  Slice& operator=(const Slice&) = delete;
};

// A run of consecutive gradients of one part, sharded as a unit: packed into `flat` (padded
// to D equal shards), reduce-scattered into this rank's shard, and all-gathered back.
struct Bucket {
  std::vector<size_t> members;   // indices into create's tensors
  std::vector<int64_t> offsets;  // of each member in the bucket's flat concatenation
  int64_t N = 0, S = 0;          // elements, and elements per shard
  loom::Tensor flat;             // (D*S) gradients packed, later parameters gathered
  loom::Tensor shard_grad;       // (S) this rank's averaged gradient shard
  loom::Tensor param_pack;       // (S) this rank's updated parameter shard
  // this step
  bool started = false;
  loom_comm_request* req = nullptr;
  // overlap_param_gather: the all-gather of the updated parameters into `flat`, in flight
  // from after_step until a unit of the bucket is needed (or the next reduction)
  loom_comm_request* gather_req = nullptr;
  bool gathering = false;
};

// The gradients averaged over one group, sharded over it: every gradient of a dense model,
// or (expert parallelism) the expert parameters' over the expert-data group.
struct Part {
  int32_t kind = LOOM_GROUP_DATA_CONTEXT;
  loom_comm_group* group = nullptr;  // the host's
  int64_t D = 1, r = 0;
  std::vector<Bucket> buckets;
};

class DistOpt {
 public:
  DistOpt(const loom_host* host, DLTensor* const* grads, size_t num_grads, const int32_t* kinds,
          const int32_t* units, int64_t bucket_size, bool overlap, bool overlap_gather)
      : host_(host), overlap_(overlap), overlap_gather_(overlap_gather) {
    loom::require(!overlap_gather || units != nullptr || num_grads == 0,
                  kPrefix +
                      "overlap_param_gather completes each layer's parameters before its "
                      "forward and needs a model that groups them into units (ABI 2.13)",
                  LOOM_ERR_UNIMPLEMENTED);
    loom::require(grads != nullptr || num_grads == 0, kPrefix + "grads is NULL");
    if (loom_error* err = host->get_comm(host->ctx, &comm_)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(
          LOOM_ERR_INVALID_ARGUMENT,
          kPrefix + "reduce-scatters gradients and needs a comm plugin (" + why + ")");
    }
    backend_ = loom::Backend(host);  // the flat and shard buffers live on the backend
    for (size_t i = 0; i < num_grads; ++i) {
      const DLTensor* g = grads[i];
      loom::require(g != nullptr, kPrefix + "gradient " + std::to_string(i) + " is NULL");
      loom::require(loom::is_compact(g),
                    kPrefix + "gradient " + std::to_string(i) + " is not compact");
      if (i == 0) gdt_ = g->dtype;
      loom::require(loom_dtype_eq(g->dtype, gdt_),
                    kPrefix + "gradient " + std::to_string(i) +
                        " has another dtype than gradient 0; the flat shard buffer holds one");
      grads_.push_back(grads[i]);
      Part& p = part_of(kinds ? kinds[i] : LOOM_GROUP_DATA_CONTEXT);
      const int64_t n = loom_tensor_numel(g);
      // A new bucket when the part has none, or the last would pass bucket_size (0: one).
      if (p.buckets.empty() ||
          (bucket_size > 0 && p.buckets.back().N > 0 && p.buckets.back().N + n > bucket_size))
        p.buckets.emplace_back();
      Bucket& b = p.buckets.back();
      where_.push_back({(size_t)(&p - parts_.data()), p.buckets.size() - 1});
      b.members.push_back(i);
      b.offsets.push_back(b.N);
      b.N += n;
    }
    for (Part& p : parts_)
      for (Bucket& b : p.buckets) {
        b.S = (b.N + p.D - 1) / p.D;
        if (b.N == 0) continue;  // no gradients: nothing to reduce, no buffers
        b.flat = loom::Tensor(backend_, gdt_, {p.D * b.S});
        b.shard_grad = loom::Tensor(backend_, gdt_, {b.S});
      }
    std::vector<size_t> first_of(parts_.size(), 0), bucket_of;  // buckets numbered part by part
    for (size_t k = 1; k < parts_.size(); ++k)
      first_of[k] = first_of[k - 1] + parts_[k - 1].buckets.size();
    for (const auto& [part, bucket] : where_) bucket_of.push_back(first_of[part] + bucket);
    ready_.plan(std::move(bucket_of));
    for (size_t i = 0; overlap_gather && i < num_grads; ++i) {  // each unit's buckets
      if (units[i] < 0) continue;
      if (buckets_of_unit_.size() <= (size_t)units[i]) buckets_of_unit_.resize(units[i] + 1);
      auto& list = buckets_of_unit_[(size_t)units[i]];
      if (std::find(list.begin(), list.end(), where_[i]) == list.end()) list.push_back(where_[i]);
    }
  }
  ~DistOpt() {  // a step that failed may leave calls in flight: complete them
    for (Part& p : parts_)
      for (Bucket& b : p.buckets) {
        if (b.req) comm_.api->wait(comm_.self, b.req);
        if (b.gather_req) comm_.api->wait(comm_.self, b.gather_req);
      }
  }
  DistOpt(const DistOpt&) = delete;
  DistOpt& operator=(const DistOpt&) = delete;

  const loom_host* host() const { return host_; }

  // ABI 2.12: with overlap_grad_reduce, a bucket whose gradients are all final starts its
  // reduce-scatter now.
  void grad_ready(int64_t first, int64_t count) {
    if (!overlap_) return ready_.check(first, count, kPrefix);
    ready_.ready(first, count, kPrefix, [&](size_t i) {
      Part& p = parts_[where_[i].first];
      start(p, p.buckets[where_[i].second]);
    });
  }

  void reduce_gradients() {
    for (Part& p : parts_)
      for (Bucket& b : p.buckets)
        if (!b.started && b.N > 0) start(p, b);
    for (Part& p : parts_)
      for (Bucket& b : p.buckets)
        if (b.req) {
          loom::check(host_, loom::comm_wait(comm_, b.req));
          b.req = nullptr;
        }
    reset_step();
  }

  void shard_params(DLTensor* const* params, loom_param_shard* out) {
    loom::require(params != nullptr && out != nullptr, kPrefix + "shard_params: NULL argument");
    loom::require(!sharded_, kPrefix + "shard_params is called once");
    for (size_t i = 0; i < grads_.size(); ++i) {
      const DLTensor* p = params[i];
      const std::string which = kPrefix + "parameter " + std::to_string(i);
      loom::require(p != nullptr, which + " is NULL");
      loom::require(loom_tensor_numel(p) == loom_tensor_numel(grads_[i]),
                    which + " has " + std::to_string(loom_tensor_numel(p)) +
                        " elements but its gradient " +
                        std::to_string(loom_tensor_numel(grads_[i])));
      loom::require(loom::is_compact(p), which + " is not compact");
      if (i == 0) pdt_ = p->dtype;
      loom::require(loom_dtype_eq(p->dtype, pdt_), which + " has another dtype than parameter 0");
      loom::require(out[i].struct_size >= LOOM_PARAM_SHARD_SIZE_V2,
                    kPrefix + "out[" + std::to_string(i) + "].struct_size is too small");
      params_.push_back(params[i]);
    }
    sharded_ = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Part& p = parts_[where_[i].first];
      const Bucket& b = p.buckets[where_[i].second];
      const size_t j = std::find(b.members.begin(), b.members.end(), i) - b.members.begin();
      const int64_t lo_own = p.r * b.S, hi_own = lo_own + b.S;
      const int64_t o = b.offsets[j], n = loom_tensor_numel(params_[i]);
      const int64_t lo = std::max(o, lo_own), hi = std::min(o + n, hi_own);
      const int64_t count = hi > lo ? hi - lo : 0, off = count ? lo - o : 0;
      param_views_.emplace_back(params_[i], pdt_, off, count);
      grad_views_.emplace_back(b.shard_grad.get(), gdt_, count ? lo - lo_own : 0, count);
      out[i].param = &param_views_.back().t;
      out[i].grad = &grad_views_.back().t;
      out[i].offset = off;
      shard_off_.push_back(off);
      flat_off_.push_back(o);
    }
    for (Part& p : parts_)
      for (Bucket& b : p.buckets) {
        if (b.N == 0) continue;
        // The flat buffer carries the gathered parameters too: widen it if they are wider.
        if (loom_dtype_bytes(pdt_) > loom_dtype_bytes(gdt_))
          b.flat = loom::Tensor(backend_, pdt_, {p.D * b.S});
        b.param_pack = loom::Tensor(backend_, pdt_, {b.S});
      }
    log_memory();
  }

  // Every rank's updated shard into the whole parameters: each bucket's all-gather, started
  // here; with overlap_param_gather (Megatron's --overlap-param-gather) completed only when
  // the model first needs a unit of the bucket (unit_needed, before its forward), so that the
  // gathers run while the layers before compute.
  void after_step() {
    loom::require(sharded_, kPrefix + "after_step before shard_params");
    for (Part& p : parts_)
      for (Bucket& b : p.buckets) {
        if (b.N == 0) continue;
        if (b.gathering) finish_gather(b);  // the last step's, never asked for
        const int64_t lo_own = p.r * b.S;
        for (size_t i : b.members) {
          Slice& src = param_views_[i];
          if (src.n == 0) continue;
          Slice dst(b.param_pack.get(), pdt_, flat_off_[i] + shard_off_[i] - lo_own, src.n);
          backend_.call(&loom_ops::copy, &dst.t, &src.t);
        }
        sync();
        Slice gathered(b.flat.get(), pdt_, 0, p.D * b.S);
        loom::check(host_, loom::comm_start(comm_, LOOM_COMM_CALL_ALL_GATHER, p.group,
                                            b.param_pack.get(), &gathered.t, LOOM_REDUCE_SUM,
                                            backend_.stream(), &b.gather_req));
        b.gathering = true;
        if (!overlap_gather_) finish_gather(b);
      }
  }

  // ABI 2.13 (residency NOTIFY): unit u is about to be read; its buckets' gathers complete.
  void unit_needed(size_t u) {
    if (u >= buckets_of_unit_.size()) return;
    for (const auto& [part, bucket] : buckets_of_unit_[u]) {
      Bucket& b = parts_[part].buckets[bucket];
      if (b.gathering) finish_gather(b);
    }
  }

  // The plugin's own buffers (flat, shard gradient, parameter pack) per parameter element.
  double bytes_per_param() const {
    double bytes = 0, n = 0;
    for (const Part& p : parts_)
      for (const Bucket& b : p.buckets) {
        if (b.N == 0) continue;
        bytes += static_cast<double>(b.flat.bytes() + b.shard_grad.bytes() + b.param_pack.bytes());
        n += static_cast<double>(b.N);
      }
    return n == 0 ? 0 : bytes / n;
  }

 private:
  const loom_comm_api& api() const { return *comm_.api; }
  // Before a collective: a comm that runs on the backend's stream (comm/nccl given it) is
  // ordered after the backend's work already; one that blocks on host memory needs that work
  // done. backend/cpu's stream is NULL, and its synchronize returns at once.
  void sync() const {
    if (backend_.stream() == nullptr)
      loom::check(host_, backend_.api()->synchronize(backend_.self()));
  }

  void reset_step() {
    ready_.reset();
    for (Part& p : parts_)
      for (Bucket& b : p.buckets) b.started = false;
  }

  // A bucket's parameter all-gather completed, and every parameter copied out of it.
  void finish_gather(Bucket& b) {
    b.gathering = false;
    loom::check(host_, loom::comm_wait(comm_, std::exchange(b.gather_req, nullptr)));
    for (size_t i : b.members) {
      const int64_t n = loom_tensor_numel(params_[i]);
      if (n == 0) continue;
      Slice src(b.flat.get(), pdt_, flat_off_[i], n), dst(params_[i], pdt_, 0, n);
      backend_.call(&loom_ops::copy, &dst.t, &src.t);
    }
  }

  // Packs b's gradients (zeros in the padding, so the last shard's tail stays clean) and
  // starts its reduce-scatter (AVG) into this rank's shard.
  void start(Part& p, Bucket& b) {
    if (b.gathering) finish_gather(b);  // flat is still receiving the parameters
    for (size_t j = 0; j < b.members.size(); ++j) {
      DLTensor* g = grads_[b.members[j]];
      const int64_t n = loom_tensor_numel(g);
      if (n == 0) continue;
      Slice dst(b.flat.get(), gdt_, b.offsets[j], n), src(g, gdt_, 0, n);
      backend_.call(&loom_ops::copy, &dst.t, &src.t);
    }
    if (p.D * b.S > b.N) {
      Slice pad(b.flat.get(), gdt_, b.N, p.D * b.S - b.N);
      backend_.call(&loom_ops::fill, &pad.t, 0.0);
    }
    sync();
    loom::check(host_,
                loom::comm_start(comm_, LOOM_COMM_CALL_REDUCE_SCATTER, p.group, b.flat.get(),
                                 b.shard_grad.get(), LOOM_REDUCE_AVG, backend_.stream(), &b.req));
    b.started = true;
  }

  // The part of the gradients averaged over `kind`'s group, made on first use (data x
  // context first, so that a dense model has the one part it always had).
  Part& part_of(int32_t kind) {
    for (Part& p : parts_)
      if (p.kind == kind) return p;
    loom_comm_group* group = loom::reduce_group(host_, kind, "grad/distributed-optimizer",
                                                "the distributed optimizer shards");
    Part& p = parts_.emplace_back();
    p.kind = kind;
    p.group = group;
    p.D = api().group_size(comm_.self, p.group);
    p.r = api().group_rank(comm_.self, p.group);
    return p;
  }

  // Megatron's README table (bytes per parameter with Adam): params and grads replicated,
  // the fp32 optimizer state (m, v, and fp32 main params/grads when those are narrower)
  // divided by D (of the dense part).
  void log_memory() const {
    if (parts_.empty()) return;
    const Part& p = parts_.front();
    int64_t N = 0, owned = 0;
    for (const Bucket& b : p.buckets) {
      N += b.N;
      owned += std::max<int64_t>(0, std::min((p.r + 1) * b.S, b.N) - std::min(p.r * b.S, b.N));
    }
    const size_t pb = loom_dtype_bytes(pdt_), gb = loom_dtype_bytes(gdt_);
    const size_t sharded = 8 + (pb < 4 ? 4 : 0) + (gb < 4 ? 4 : 0);
    std::string state = "8 (Adam m, v)";
    if (pb < 4) state += " + 4 (fp32 main params)";
    if (gb < 4) state += " + 4 (fp32 main grads)";
    char line[700];
    std::snprintf(
        line, sizeof line,
        "D = %lld: this rank owns %lld of %lld elements, in %zu bucket(s); memory per parameter "
        "with Adam (Megatron's table): %zu (param) + %zu (grad) + [%s]/D = %zu + %zu/%lld "
        "= %.2f bytes, %zu without sharding; own buffers %.2f bytes per parameter",
        (long long)p.D, (long long)owned, (long long)N, p.buckets.size(), pb, gb, state.c_str(),
        pb + gb, sharded, (long long)p.D, double(pb + gb) + double(sharded) / double(p.D),
        pb + gb + sharded, bytes_per_param());
    loom::log(host_, LOOM_LOG_INFO, line);
    for (size_t k = 1; k < parts_.size(); ++k) {
      int64_t n = 0;
      for (const Bucket& b : parts_[k].buckets) n += b.N;
      std::snprintf(line, sizeof line,
                    "expert parameters: sharded over the expert-data group, D = %lld, %lld "
                    "elements in %zu bucket(s)",
                    (long long)parts_[k].D, (long long)n, parts_[k].buckets.size());
      loom::log(host_, LOOM_LOG_INFO, line);
    }
  }

  const loom_host* host_;
  bool overlap_ = false, overlap_gather_ = false;
  std::vector<std::vector<std::pair<size_t, size_t>>> buckets_of_unit_;  // (part, bucket)
  loom_comm_ref comm_{nullptr, nullptr};
  bool sharded_ = false;  // shard_params was called
  loom::Backend backend_;
  std::vector<Part> parts_;  // one per reduce group; held by index (where_), so may grow
  std::vector<std::pair<size_t, size_t>> where_;  // (part, bucket) of each tensor
  loom::BucketReadiness ready_;  // each gradient's bucket (numbered over the parts), and this
                                 // step's final gradients
  std::vector<DLTensor*> grads_, params_;
  std::vector<int64_t> flat_off_;   // of each tensor in its bucket's flat concatenation
  std::vector<int64_t> shard_off_;  // first owned element within each parameter
  DLDataType gdt_ = loom_f32(), pdt_ = loom_f32();
  std::deque<Slice> param_views_, grad_views_;  // what shard_params handed out
};

using Entries = loom::GradEntries<DistOpt>;
DistOpt* cast(loom_grad* g) { return Entries::self(g); }

loom_error* create(const loom_host* host, const loom_config* cfg, const loom_grad_create_args* args,
                   loom_grad** out) {
  return loom::guard(host, [&] {
    loom::check_grad_create_args(args, "grad/distributed-optimizer");
    const int32_t* kinds = loom::grad_reduce_groups(*args);
    const int32_t* units =
        args->struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2_13 ? args->units : nullptr;
    loom::Config c(host, cfg);
    *out = reinterpret_cast<loom_grad*>(
        new DistOpt(host, args->grads, args->num_grads, kinds, units, c.get_int("bucket_size"),
                    c.get_bool("overlap_grad_reduce"), c.get_bool("overlap_param_gather")));
  });
}
loom_error* reduce(loom_grad* g, const loom_grad_reduce_args* args) {
  return loom::guard(cast(g)->host(), [&] {
    loom::check_grad_reduce_args(args, "grad/distributed-optimizer");
    cast(g)->reduce_gradients();
  });
}

// overlap_param_gather asks the model to say when each unit is needed (residency NOTIFY).
int32_t residency(const loom_host* host, const loom_config* cfg) {
  return loom::Config(host, cfg).get_bool("overlap_param_gather") ? LOOM_RESIDENCY_NOTIFY
                                                                  : LOOM_RESIDENCY_NONE;
}
loom_error* unit_needed(loom_grad* g, int32_t unit, int32_t fill) {
  return loom::guard(cast(g)->host(), [&] {
    loom::require(fill == 0, kPrefix + "keeps every parameter whole; it has nothing to fill");
    cast(g)->unit_needed((size_t)unit);
  });
}

const loom_grad_api kApi = {LOOM_GRAD_API_SIZE_V2_13,
                            create,
                            Entries::destroy,
                            reduce,
                            Entries::shard_params,
                            Entries::after_step,
                            Entries::bytes_per_param,
                            Entries::grad_ready,
                            residency,
                            unit_needed,
                            nullptr};  // unit_grads: gradients stay whole (grad_ready)

const loom_param_spec kParams[] = {
    loom::param("bucket_size", LOOM_PARAM_INT, "0",
                "gradients per bucket, in elements (Megatron's --ddp-bucket-size): each bucket "
                "is sharded over the data-parallel ranks and reduce-scattered on its own; 0 = "
                "one bucket",
                0, 1e15),
    loom::param("overlap_grad_reduce", LOOM_PARAM_BOOL, "false",
                "start each bucket's reduce-scatter during the backward pass, as soon as the "
                "model has announced all its gradients (Megatron's --overlap-grad-reduce); the "
                "numbers are those without it"),
    loom::param("overlap_param_gather", LOOM_PARAM_BOOL, "false",
                "start the all-gather of the updated parameters after the optimizer step and "
                "complete each bucket only when the model first needs one of its layers, so "
                "that the gathers overlap the next forward (Megatron's --overlap-param-gather; "
                "not with pipeline parallelism yet); the numbers are those without it"),
};  // grad_ready: no overlap yet

}  // namespace

LOOM_PLUGIN(.description =
                "distributed optimizer (ZeRO-1): reduce-scatter gradients, each rank steps its "
                "shard, all-gather parameters",
            .params = kParams, .api = &kApi)
