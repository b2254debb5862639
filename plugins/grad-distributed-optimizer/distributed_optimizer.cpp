// grad/distributed-optimizer: Megatron's distributed optimizer (ZeRO stage 1). The
// gradients, viewed as one flat concatenation in the order of create's tensors and padded
// to a multiple of the data-parallel size D, are cut into D equal shards; group rank r owns
// elements [r*S, (r+1)*S). Each step:
//   reduce_gradients: pack every gradient into the flat buffer, reduce-scatter with AVG
//     into this rank's shard-gradient buffer (S elements);
//   the optimizer steps only the owned elements (shard_params hands it views: the
//     parameter's own memory, the shard-gradient buffer), so its state is 1/D of the model;
//   after_step: pack the owned, updated parameter elements, all-gather them into the flat
//     buffer, and copy every parameter back out of it.
// The data-parallel group is host->get_group(LOOM_GROUP_DATA_CONTEXT). Since ABI 2.6 the
// expert parameters of a mixture of experts name the expert-data group: they form a second
// flat concatenation ("part"), sharded over that group as Megatron shards them. Buffers live
// on the active backend and are moved with its copy op, so the plugin works wherever the
// backend and the comm agree on memory.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
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

// The gradients averaged over one group, sharded over it: every gradient of a dense model,
// or (expert parallelism) the expert parameters' over the expert-data group.
struct Part {
  int32_t kind = LOOM_GROUP_DATA_CONTEXT;
  loom_comm_group* group = nullptr;  // the host's
  std::vector<size_t> members;       // indices into create's tensors
  std::vector<int64_t> offsets;      // of each member in the part's flat concatenation
  int64_t N = 0, D = 1, r = 0, S = 0;
  loom::Tensor flat;        // (D*S) gradients packed, later parameters gathered
  loom::Tensor shard_grad;  // (S) this rank's averaged gradient shard
  loom::Tensor param_pack;  // (S) this rank's updated parameter shard
};

class DistOpt {
 public:
  DistOpt(const loom_host* host, DLTensor* const* grads, size_t num_grads, const int32_t* kinds)
      : host_(host) {
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
      part_.push_back(&p - parts_.data());
      p.members.push_back(i);
      p.offsets.push_back(p.N);
      p.N += loom_tensor_numel(g);
    }
    for (Part& p : parts_) {
      p.S = (p.N + p.D - 1) / p.D;
      if (p.N == 0) continue;  // no gradients: nothing to reduce, no buffers
      p.flat = loom::Tensor(backend_, gdt_, {p.D * p.S});
      p.shard_grad = loom::Tensor(backend_, gdt_, {p.S});
    }
  }
  ~DistOpt() = default;
  DistOpt(const DistOpt&) = delete;
  DistOpt& operator=(const DistOpt&) = delete;

  const loom_host* host() const { return host_; }

  void reduce_gradients() {
    for (Part& p : parts_) {
      if (p.N == 0) continue;
      for (size_t j = 0; j < p.members.size(); ++j) {
        DLTensor* g = grads_[p.members[j]];
        const int64_t n = loom_tensor_numel(g);
        if (n == 0) continue;
        Slice dst(p.flat.get(), gdt_, p.offsets[j], n), src(g, gdt_, 0, n);
        backend_.call(&loom_ops::copy, &dst.t, &src.t);
      }
      if (p.D * p.S > p.N) {  // padding: zeros, so the last shard's tail stays clean
        Slice pad(p.flat.get(), gdt_, p.N, p.D * p.S - p.N);
        backend_.call(&loom_ops::fill, &pad.t, 0.0);
      }
      sync();
      loom::check(host_, loom::comm_reduce_scatter(comm_, p.group, p.flat.get(), p.shard_grad.get(),
                                                   LOOM_REDUCE_AVG, backend_.stream()));
    }
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
      const Part& p = parts_[part_[i]];
      const size_t j = std::find(p.members.begin(), p.members.end(), i) - p.members.begin();
      const int64_t lo_own = p.r * p.S, hi_own = lo_own + p.S;
      const int64_t o = p.offsets[j], n = loom_tensor_numel(params_[i]);
      const int64_t lo = std::max(o, lo_own), hi = std::min(o + n, hi_own);
      const int64_t count = hi > lo ? hi - lo : 0, off = count ? lo - o : 0;
      param_views_.emplace_back(params_[i], pdt_, off, count);
      grad_views_.emplace_back(p.shard_grad.get(), gdt_, count ? lo - lo_own : 0, count);
      out[i].param = &param_views_.back().t;
      out[i].grad = &grad_views_.back().t;
      out[i].offset = off;
      shard_off_.push_back(off);
      flat_off_.push_back(o);
    }
    for (Part& p : parts_) {
      if (p.N == 0) continue;
      // The flat buffer carries the gathered parameters too: widen it if they are wider.
      if (loom_dtype_bytes(pdt_) > loom_dtype_bytes(gdt_))
        p.flat = loom::Tensor(backend_, pdt_, {p.D * p.S});
      p.param_pack = loom::Tensor(backend_, pdt_, {p.S});
    }
    log_memory();
  }

  void after_step() {
    loom::require(sharded_, kPrefix + "after_step before shard_params");
    for (Part& p : parts_) {
      if (p.N == 0) continue;
      const int64_t lo_own = p.r * p.S;
      for (size_t i : p.members) {
        Slice& src = param_views_[i];
        if (src.n == 0) continue;
        Slice dst(p.param_pack.get(), pdt_, flat_off_[i] + shard_off_[i] - lo_own, src.n);
        backend_.call(&loom_ops::copy, &dst.t, &src.t);
      }
      sync();
      Slice gathered(p.flat.get(), pdt_, 0, p.D * p.S);
      loom::check(host_, loom::comm_all_gather(comm_, p.group, p.param_pack.get(), &gathered.t,
                                               backend_.stream()));
      for (size_t i : p.members) {
        const int64_t n = loom_tensor_numel(params_[i]);
        if (n == 0) continue;
        Slice src(p.flat.get(), pdt_, flat_off_[i], n), dst(params_[i], pdt_, 0, n);
        backend_.call(&loom_ops::copy, &dst.t, &src.t);
      }
    }
  }

  // The plugin's own buffers (flat, shard gradient, parameter pack) per parameter element.
  double bytes_per_param() const {
    double bytes = 0, n = 0;
    for (const Part& p : parts_) {
      if (p.N == 0) continue;
      bytes += static_cast<double>(p.flat.bytes() + p.shard_grad.bytes() + p.param_pack.bytes());
      n += static_cast<double>(p.N);
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

  // The part of the gradients averaged over `kind`'s group, made on first use (data x
  // context first, so that a dense model has the one part it always had).
  Part& part_of(int32_t kind) {
    loom::require(kind == LOOM_GROUP_DATA_CONTEXT || kind == LOOM_GROUP_EXPERT_DATA,
                  kPrefix + "a gradient asks for reduce group " + std::to_string(kind) +
                      "; the distributed optimizer shards over data x context or the "
                      "expert-data group");
    for (Part& p : parts_)
      if (p.kind == kind) return p;
    Part& p = parts_.emplace_back();
    p.kind = kind;
    loom::check(host_, host_->get_group(host_->ctx, (loom_group_kind)kind, &p.group));
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
    const size_t pb = loom_dtype_bytes(pdt_), gb = loom_dtype_bytes(gdt_);
    const size_t sharded = 8 + (pb < 4 ? 4 : 0) + (gb < 4 ? 4 : 0);
    std::string state = "8 (Adam m, v)";
    if (pb < 4) state += " + 4 (fp32 main params)";
    if (gb < 4) state += " + 4 (fp32 main grads)";
    char line[640];
    std::snprintf(
        line, sizeof line,
        "D = %lld: this rank owns elements [%lld, %lld) of %lld; memory per parameter "
        "with Adam (Megatron's table): %zu (param) + %zu (grad) + [%s]/D = %zu + %zu/%lld "
        "= %.2f bytes, %zu without sharding; own buffers %.2f bytes per parameter",
        (long long)p.D, (long long)std::min(p.r * p.S, p.N),
        (long long)std::min((p.r + 1) * p.S, p.N), (long long)p.N, pb, gb, state.c_str(), pb + gb,
        sharded, (long long)p.D, double(pb + gb) + double(sharded) / double(p.D), pb + gb + sharded,
        bytes_per_param());
    loom::log(host_, LOOM_LOG_INFO, line);
    for (size_t k = 1; k < parts_.size(); ++k) {
      std::snprintf(line, sizeof line,
                    "expert parameters: sharded over the expert-data group, D = %lld: this rank "
                    "owns elements [%lld, %lld) of %lld",
                    (long long)parts_[k].D,
                    (long long)std::min(parts_[k].r * parts_[k].S, parts_[k].N),
                    (long long)std::min((parts_[k].r + 1) * parts_[k].S, parts_[k].N),
                    (long long)parts_[k].N);
      loom::log(host_, LOOM_LOG_INFO, line);
    }
  }

  const loom_host* host_;
  loom_comm_ref comm_{nullptr, nullptr};
  bool sharded_ = false;  // shard_params was called
  loom::Backend backend_;
  std::vector<Part> parts_;   // one per reduce group; held by index (part_), so may grow
  std::vector<size_t> part_;  // the part of each tensor
  std::vector<DLTensor*> grads_, params_;
  std::vector<int64_t> flat_off_;   // of each tensor in its part's flat concatenation
  std::vector<int64_t> shard_off_;  // first owned element within each parameter
  DLDataType gdt_ = loom_f32(), pdt_ = loom_f32();
  std::deque<Slice> param_views_, grad_views_;  // what shard_params handed out
};

DistOpt* cast(loom_grad* g) { return reinterpret_cast<DistOpt*>(g); }

loom_error* create(const loom_host* host, const loom_config*, const loom_grad_create_args* args,
                   loom_grad** out) {
  return loom::guard(host, [&] {
    loom::require(args != nullptr && args->struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2,
                  kPrefix + "create args NULL or smaller than ABI 2.0's");
    loom::require_known_exts(args->ext, {}, "grad/distributed-optimizer");
    const int32_t* kinds =
        args->struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2_6 ? args->reduce_groups : nullptr;
    *out = reinterpret_cast<loom_grad*>(new DistOpt(host, args->grads, args->num_grads, kinds));
  });
}
void destroy(loom_grad* g) { delete cast(g); }
loom_error* reduce(loom_grad* g, const loom_grad_reduce_args* args) {
  return loom::guard(cast(g)->host(), [&] {
    loom::require(args != nullptr && args->struct_size >= LOOM_GRAD_REDUCE_ARGS_SIZE_V2,
                  kPrefix + "reduce args NULL or smaller than ABI 2.0's");
    loom::require_known_exts(args->ext, {}, "grad/distributed-optimizer");
    cast(g)->reduce_gradients();
  });
}
loom_error* shard_params(loom_grad* g, DLTensor* const* params, loom_param_shard* out) {
  return loom::guard(cast(g)->host(), [&] { cast(g)->shard_params(params, out); });
}
loom_error* after_step(loom_grad* g) {
  return loom::guard(cast(g)->host(), [&] { cast(g)->after_step(); });
}
double bytes_per_param(loom_grad* g) { return cast(g)->bytes_per_param(); }

const loom_grad_api kApi = {
    LOOM_GRAD_API_SIZE_V2, create,     destroy,         reduce,
    shard_params,          after_step, bytes_per_param, nullptr};  // grad_ready: no overlap yet

const loom_plugin_descriptor kDescriptor = {
    LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    LOOM_KIND_GRAD,
    "distributed-optimizer",
    "0.1.0",
    "Loom",
    "Apache-2.0",
    "distributed optimizer (ZeRO-1): reduce-scatter gradients, each rank steps its shard, "
    "all-gather parameters",
    nullptr,
    0,
    &kApi,
    nullptr,   // capabilities
    nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
