// grad/fsdp: fully sharded data parallelism, Megatron-FSDP's two sharding strategies as
// `zero_stage` (ABI 2.13's parameter residency):
//   3 (optim_grads_params, ZeRO-3): each parameter's values live only as this rank's shard;
//     the model allocates a unit's values (a layer, or the embedding and head) just before a
//     forward or backward reads them and this plugin all-gathers them in (unit_needed); they
//     are freed right after;
//   2 (optim_grads, ZeRO-2): the values stay whole on every rank and are all-gathered after
//     each optimizer step, as the distributed optimizer does.
// Under both, a unit's gradients exist only during its backward: at its end (unit_grads)
// they are packed into one flat buffer, padded to D equal shards, and reduce-scattered (AVG)
// into this rank's shard, summed over the step's backward passes. Rank r owns elements
// [r*S, (r+1)*S) of each unit's concatenation, so every rank owns one contiguous range of
// each parameter, which is what the checkpoints record (the distributed optimizer's layout,
// per unit). The optimizer steps the shards (shard_params). Memory per parameter with Adam
// and f32: (4 + 4 + 8) / D at stage 3 and 4 + (4 + 8) / D at stage 2, plus one unit's values
// and gradients in flight. The data-parallel group is data x context. Under expert
// parallelism a model unit's expert parameters are averaged over the expert-data group
// instead (the data x context ranks that hold the same experts): they form a second shard
// unit of the same model unit, sharded over that group, as Megatron-FSDP shards experts over
// the expert-data-parallel group.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/grad_table.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/grad.h"

namespace {

const std::string kPrefix = "grad/fsdp: ";

// The ranks a shard unit is sharded over: data x context, or the expert-data group.
struct Group {
  int32_t kind = LOOM_GROUP_DATA_CONTEXT;
  loom_comm_group* group = nullptr;
  int64_t D = 1, r = 0;  // its size, and this rank's place in it
};

// One residency unit's parameters of one reduce group, sharded as a whole.
struct Unit {
  size_t group = 0;              // into groups_
  std::vector<size_t> members;   // indices into create's tensors
  std::vector<int64_t> offsets;  // of each member in the unit's flat concatenation
  int64_t N = 0, S = 0;          // elements, and elements per shard
  loom::Tensor shard_grad;       // (S) this rank's averaged gradients, summed over the step
  loom::Tensor shard_value;      // (S) stage 3: this rank's parameter elements, the only copy
  bool fresh = true;             // shard_grad not written yet this step
  // overlap_param_gather: an all-gather of the unit's values in flight, from `pack` (stage 2's
  // updated elements; stage 3 sends shard_value) into `gathered`
  loom::Tensor pack, gathered;
  loom_comm_request* req = nullptr;
  bool in_flight = false;
};

class Fsdp {
 public:
  Fsdp(const loom_host* host, const loom_grad_create_args& a, int64_t stage, bool overlap)
      : host_(host), stage_(stage), overlap_(overlap) {
    loom::require(a.grads != nullptr || a.num_grads == 0, kPrefix + "grads is NULL");
    const bool v213 = a.struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2_13;
    loom::require(v213 && a.units != nullptr,
                  kPrefix +
                      "needs a model that groups its parameters into residency units "
                      "(loom_model_param.unit, ABI 2.13); this model reports none",
                  LOOM_ERR_UNIMPLEMENTED);
    if (loom_error* err = host->get_comm(host->ctx, &comm_)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(
          LOOM_ERR_INVALID_ARGUMENT,
          kPrefix + "shards over the data-parallel ranks and needs a comm (" + why + ")");
    }
    backend_ = loom::Backend(host);
    // Without expert parallelism the expert-data group is data x context itself: experts
    // shard with the unit's other parameters, in one shard unit.
    loom_parallel_layout l{};
    l.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2;
    l.expert = 1;
    if (host->struct_size >= LOOM_HOST_SIZE_V2 && host->get_layout)
      loom::check(host, host->get_layout(host->ctx, &l));
    group_of(LOOM_GROUP_DATA_CONTEXT);  // groups_[0], for the memory report
    const int32_t* reduce_groups = loom::grad_reduce_groups(a);
    for (size_t i = 0; i < a.num_grads; ++i) {
      const DLTensor* g = a.grads[i];
      const std::string which = kPrefix + "gradient " + std::to_string(i);
      loom::require(g != nullptr && loom::is_compact(g), which + " is NULL or not compact");
      if (i == 0) gdt_ = g->dtype;
      loom::require(loom_dtype_eq(g->dtype, gdt_), which + " has another dtype than gradient 0");
      int32_t kind = reduce_groups ? reduce_groups[i] : LOOM_GROUP_DATA_CONTEXT;
      if (kind == LOOM_GROUP_EXPERT_DATA && l.expert <= 1) kind = LOOM_GROUP_DATA_CONTEXT;
      loom::require(a.units[i] >= 0, which + " belongs to no residency unit");
      Unit& u = unit(a.units[i], group_of(kind));
      unit_of_.push_back(size_t(&u - units_.data()));
      u.members.push_back(i);
      u.offsets.push_back(u.N);
      u.N += loom_tensor_numel(g);
      grads_.push_back(a.grads[i]);
    }
    for (Unit& u : units_) {
      const int64_t D = groups_[u.group].D;
      u.S = (u.N + D - 1) / D;
      u.shard_grad = loom::Tensor(backend_, gdt_, {std::max<int64_t>(u.S, 1)});
      backend_.call(&loom_ops::fill, u.shard_grad.get(), 0.0);
    }
  }
  ~Fsdp() {  // a step that failed may leave gathers in flight: complete them
    for (Unit& u : units_)
      if (u.in_flight) comm_.api->wait(comm_.self, u.req);
  }
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  const loom_host* host() const { return host_; }

  void shard_params(DLTensor* const* params, loom_param_shard* out) {
    loom::require(params != nullptr && out != nullptr, kPrefix + "shard_params: NULL argument");
    loom::require(!sharded_, kPrefix + "shard_params is called once");
    sharded_ = true;  // whether or not it holds parameters (a rank may have no gradients)
    for (size_t i = 0; i < grads_.size(); ++i) {
      const std::string which = kPrefix + "parameter " + std::to_string(i);
      loom::require(params[i] != nullptr && loom::is_compact(params[i]),
                    which + " is NULL or not compact");
      loom::require(loom_tensor_numel(params[i]) == loom_tensor_numel(grads_[i]),
                    which + " has another size than its gradient");
      if (i == 0) pdt_ = params[i]->dtype;
      loom::require(loom_dtype_eq(params[i]->dtype, pdt_),
                    which + " has another dtype than parameter 0");
      loom::require(out[i].struct_size >= LOOM_PARAM_SHARD_SIZE_V2,
                    kPrefix + "out[" + std::to_string(i) + "].struct_size is too small");
      params_.push_back(params[i]);
    }
    if (stage_ == 3)
      for (Unit& u : units_)
        u.shard_value = loom::Tensor(backend_, pdt_, {std::max<int64_t>(u.S, 1)});
    for (size_t i = 0; i < params_.size(); ++i) {
      const Unit& u = units_[unit_of_[i]];
      const size_t j = std::find(u.members.begin(), u.members.end(), i) - u.members.begin();
      const int64_t lo_own = groups_[u.group].r * u.S, o = u.offsets[j],
                    n = loom_tensor_numel(params_[i]);
      const int64_t lo = std::max(o, lo_own), hi = std::min(o + n, lo_own + u.S);
      const int64_t count = hi > lo ? hi - lo : 0, off = count ? lo - o : 0;
      const int64_t at = count ? lo - lo_own : 0;  // in the shard
      // Stage 3: the shard starts as the model's initial values there (the model holds all
      // of them until the host lets go, hold_params).
      loom::View own(params_[i], {count}, off);
      if (stage_ == 3) {
        views_.emplace_back(u.shard_value.get(), std::vector<int64_t>{count}, at);
        if (count) backend_.call(&loom_ops::copy, views_.back().get(), (const DLTensor*)own);
      } else {
        views_.push_back(own);
      }
      out[i].param = views_.back().get();
      views_.emplace_back(u.shard_grad.get(), std::vector<int64_t>{count}, at);
      out[i].grad = views_.back().get();
      out[i].offset = off;
      owned_.push_back({off, at, count});
    }
    log_memory();
  }

  // Before a forward or backward of unit u. fill: its values were just allocated (stage 3):
  // gather them from every rank's shard, or take the prefetched gather. Otherwise they hold
  // what they held: complete an all-gather of updated values still in flight (stage 2 with
  // overlap_param_gather). Stage 3 with overlap_param_gather then starts the gather of the
  // unit that came next in the last step's order of calls (FSDP's forward and backward
  // prefetch, learned rather than declared), so it runs while this unit computes.
  void needed(size_t u_index, bool fill) {
    loom::require(sharded_ && u_index < shards_of_.size(),
                  kPrefix + "unit_needed of unit " + std::to_string(u_index) +
                      " out of range or before shard_params");
    if (!fill) {
      for (size_t k : shards_of_[u_index])
        if (units_[k].in_flight) finish(units_[k], true);
      return;
    }
    loom::require(stage_ == 3, kPrefix + "zero_stage 2 keeps the values whole; nothing to fill");
    record_.push_back(u_index);
    const bool on_script = script_ok_ && pos_ < script_.size() && script_[pos_] == u_index;
    if (!on_script) script_ok_ = false;
    bool prefetched = false;
    for (size_t k : shards_of_[u_index]) {
      Unit& u = units_[k];
      if (u.in_flight) {
        finish(u, true);
        prefetched = true;
      } else if (u.N > 0) {
        start(u, u.shard_value.get());
        finish(u, true);
      }
    }
    prefetched_ += prefetched;
    if (!on_script || !overlap_) return;
    if (++pos_ < script_.size())
      for (size_t k : shards_of_[script_[pos_]]) {
        Unit& next = units_[k];
        if (!next.in_flight && next.N > 0) start(next, next.shard_value.get());
      }
  }

  // Unit u's gradients hold one backward pass's contribution: into this rank's shard.
  void take_grads(size_t u_index) {
    loom::require(u_index < shards_of_.size(),
                  kPrefix + "unit_grads of unit " + std::to_string(u_index) + " out of range");
    for (size_t k : shards_of_[u_index]) reduce_scatter(units_[k]);
  }

  // The step's backward passes are over: a unit none of them reached has a zero gradient.
  // The optimizer steps the shards next, so no gather may still read them: one the script
  // predicted but the step did not ask for is dropped. This step's calls are the next one's
  // script.
  void reduce() {
    for (Unit& u : units_) {
      if (u.fresh) backend_.call(&loom_ops::fill, u.shard_grad.get(), 0.0);
      u.fresh = true;
      if (u.in_flight) finish(u, false);
    }
    if (overlap_ && stage_ == 3) {  // for a traced run (tests/parallel/fsdp.sh)
      const std::string line = "this step: " + std::to_string(prefetched_) + " of " +
                               std::to_string(record_.size()) +
                               " unit gathers were prefetched while another unit computed";
      loom::log(host_, LOOM_LOG_DEBUG, line.c_str());
    }
    prefetched_ = 0;
    script_ = std::move(record_);
    record_.clear();
    pos_ = 0;
    script_ok_ = true;
  }

  // Stage 2: every rank's updated shard into the whole values. Stage 3: nothing to do, the
  // next forward gathers.
  void after_step() {
    loom::require(sharded_, kPrefix + "after_step before shard_params");
    if (stage_ == 3) return;
    for (Unit& u : units_) {
      if (u.N == 0) continue;
      if (u.in_flight) finish(u, true);  // the last step's, never asked for
      u.pack = loom::Tensor(backend_, pdt_, {u.S});
      for (size_t i : u.members) {
        const Owned& o = owned_[i];
        if (o.count == 0) continue;
        loom::View dst(u.pack.get(), {o.count}, o.at), src(params_[i], {o.count}, o.offset);
        backend_.call(&loom_ops::copy, dst.get(), (const DLTensor*)src);
      }
      start(u, u.pack.get());
      if (!overlap_) finish(u, true);  // else at the unit's next unit_needed
    }
  }

 private:
  // The ranks of reduce group `kind`, asked of the host on first use.
  size_t group_of(int32_t kind) {
    for (size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].kind == kind) return g;
    loom_comm_group* group = loom::reduce_group(host_, kind, "grad/fsdp", "fsdp shards");
    Group& g = groups_.emplace_back();
    g.kind = kind;
    g.group = group;
    g.D = comm_.api->group_size(comm_.self, g.group);
    g.r = comm_.api->group_rank(comm_.self, g.group);
    return groups_.size() - 1;
  }
  // The shard unit of model unit `model`'s parameters of group g, made on first use.
  Unit& unit(int32_t model, size_t g) {
    if (shards_of_.size() <= (size_t)model) shards_of_.resize((size_t)model + 1);
    for (size_t k : shards_of_[(size_t)model])
      if (units_[k].group == g) return units_[k];
    shards_of_[(size_t)model].push_back(units_.size());
    units_.emplace_back().group = g;
    return units_.back();
  }

  // Shard unit u's gradients hold one backward pass's contribution: averaged over its group
  // into this rank's shard.
  void reduce_scatter(Unit& u) {
    if (u.N == 0) return;
    const int64_t D = groups_[u.group].D;
    loom_comm_group* group = groups_[u.group].group;
    loom::Tensor flat(backend_, gdt_, {D * u.S});
    for (size_t j = 0; j < u.members.size(); ++j) {
      DLTensor* g = grads_[u.members[j]];
      const int64_t n = loom_tensor_numel(g);
      if (n == 0) continue;
      loom::View dst(flat.get(), {n}, u.offsets[j]), src(g, {n});
      backend_.call(&loom_ops::copy, dst.get(), (const DLTensor*)src);
    }
    if (D * u.S > u.N) {  // zeros in the padding, so the last shard's tail stays clean
      loom::View pad(flat.get(), {D * u.S - u.N}, u.N);
      backend_.call(&loom_ops::fill, pad.get(), 0.0);
    }
    sync();
    if (u.fresh) {
      loom::check(host_, loom::comm_reduce_scatter(comm_, group, flat.get(), u.shard_grad.get(),
                                                   LOOM_REDUCE_AVG, backend_.stream()));
      u.fresh = false;
      return;
    }
    loom::Tensor part(backend_, gdt_, {u.S});
    loom::check(host_, loom::comm_reduce_scatter(comm_, group, flat.get(), part.get(),
                                                 LOOM_REDUCE_AVG, backend_.stream()));
    backend_.call(&loom_ops::add, u.shard_grad.get(), (const DLTensor*)u.shard_grad.get(),
                  (const DLTensor*)part.get());
  }

  // Before a collective on host memory, the backend's queued work must be done (backend/cpu's
  // stream is NULL; a comm on the backend's stream is ordered already).
  void sync() const {
    if (backend_.stream() == nullptr)
      loom::check(host_, backend_.api()->synchronize(backend_.self()));
  }
  // The all-gather of unit u's values from `shard` (S elements) into u.gathered, started.
  void start(Unit& u, const DLTensor* shard) {
    const Group& g = groups_[u.group];
    u.gathered = loom::Tensor(backend_, pdt_, {g.D * u.S});
    sync();
    loom::check(host_,
                loom::comm_start(comm_, LOOM_COMM_CALL_ALL_GATHER, g.group, shard, u.gathered.get(),
                                 LOOM_REDUCE_SUM, backend_.stream(), &u.req));
    u.in_flight = true;
  }
  // ... and completed; `use`: into the model's value tensors (allocated).
  void finish(Unit& u, bool use) {
    u.in_flight = false;
    loom::check(host_, loom::comm_wait(comm_, std::exchange(u.req, nullptr)));
    if (use) unpack(u, u.gathered, params_);
    u.gathered = loom::Tensor();
    u.pack = loom::Tensor();
  }
  // Each member's elements of a gathered unit into its (allocated) tensor.
  void unpack(const Unit& u, loom::Tensor& flat, const std::vector<DLTensor*>& into) const {
    for (size_t j = 0; j < u.members.size(); ++j) {
      DLTensor* dst = into[u.members[j]];
      const int64_t n = loom_tensor_numel(dst);
      if (n == 0) continue;
      loom::View src(flat.get(), {n}, u.offsets[j]), d(dst, {n});
      backend_.call(&loom_ops::copy, d.get(), (const DLTensor*)src);
    }
  }

  void log_memory() const {
    const size_t pb = loom_dtype_bytes(pdt_), gb = loom_dtype_bytes(gdt_);
    const size_t extra = 8 + (pb < 4 ? 4 : 0);  // Adam m, v (+ f32 main params)
    const int64_t D = groups_.front().D;
    const size_t units = shards_of_.size();
    char line[600];
    if (stage_ == 3)
      std::snprintf(line, sizeof line,
                    "zero_stage 3, D = %lld, %zu units: memory per parameter with Adam "
                    "(%zu (param) + %zu (grad) + %zu (optimizer))/D = %.2f bytes, plus one "
                    "unit's values and gradients in flight",
                    (long long)D, units, pb, gb, extra, double(pb + gb + extra) / double(D));
    else
      std::snprintf(line, sizeof line,
                    "zero_stage 2, D = %lld, %zu units: memory per parameter with Adam %zu "
                    "(param) + (%zu (grad) + %zu (optimizer))/D = %.2f bytes, plus one unit's "
                    "gradients in flight",
                    (long long)D, units, pb, gb, extra,
                    double(pb) + double(gb + extra) / double(D));
    loom::log(host_, LOOM_LOG_INFO, line);
    if (groups_.size() > 1) {
      int64_t n = 0;
      for (const Unit& u : units_) n += u.group == 1 ? u.N : 0;
      std::snprintf(line, sizeof line,
                    "expert parameters: sharded over the expert-data group, D = %lld, %lld "
                    "elements",
                    (long long)groups_[1].D, (long long)n);
      loom::log(host_, LOOM_LOG_INFO, line);
    }
  }

  const loom_host* host_;
  int64_t stage_ = 3;
  bool overlap_ = false;
  // Stage 3's prefetch: the units the model asked to fill since the last reduce (record_),
  // and the last step's (script_), followed from pos_ while the calls keep to it.
  std::vector<size_t> record_, script_;
  size_t pos_ = 0, prefetched_ = 0;
  bool script_ok_ = false;
  loom_comm_ref comm_{nullptr, nullptr};
  loom::Backend backend_;
  std::vector<Group> groups_;  // data x context first; the expert-data group under EP
  std::vector<Unit> units_;    // shard units: one per model unit and reduce group
  std::vector<std::vector<size_t>> shards_of_;  // each model unit's shard units
  std::vector<size_t> unit_of_;                 // each tensor's shard unit
  std::vector<DLTensor*> grads_, params_;
  bool sharded_ = false;  // shard_params was called (params_ is empty when there are no grads)
  DLDataType gdt_ = loom_f32(), pdt_ = loom_f32();
  std::deque<loom::View> views_;  // what shard_params handed out
  struct Owned {
    int64_t offset, at, count;  // this rank's elements of a tensor: where in it, in the shard
  };
  std::vector<Owned> owned_;
};

using Entries = loom::GradEntries<Fsdp>;
Fsdp* cast(loom_grad* g) { return Entries::self(g); }

int64_t stage_of(const loom_host* host, const loom_config* cfg) {
  const int64_t s = loom::Config(host, cfg).get_int("zero_stage");
  loom::require(s == 2 || s == 3, kPrefix + "parallel.zero_stage = " + std::to_string(s) +
                                      " must be 2 (gradients and optimizer state sharded) or 3 "
                                      "(parameters too)");
  return s;
}

loom_error* create(const loom_host* host, const loom_config* cfg, const loom_grad_create_args* args,
                   loom_grad** out) {
  return loom::guard(host, [&] {
    loom::check_grad_create_args(args, "grad/fsdp");
    *out = reinterpret_cast<loom_grad*>(
        new Fsdp(host, *args, stage_of(host, cfg),
                 loom::Config(host, cfg).get_bool("overlap_param_gather")));
  });
}
loom_error* reduce(loom_grad* g, const loom_grad_reduce_args* args) {
  return loom::guard(cast(g)->host(), [&] {
    loom::require(args != nullptr && args->struct_size >= LOOM_GRAD_REDUCE_ARGS_SIZE_V2,
                  kPrefix + "reduce args NULL or smaller than ABI 2.0's");
    cast(g)->reduce();
  });
}
// Nothing beyond the shards, which the host counts as the parameters' and gradients' memory
// (shard_params); a unit's flat buffers live only inside a call.
double bytes_per_param(loom_grad*) { return 0.0; }
int32_t residency(const loom_host* host, const loom_config* cfg) {
  try {
    return stage_of(host, cfg) == 3 ? LOOM_RESIDENCY_PARAMS : LOOM_RESIDENCY_GRADS;
  } catch (const std::exception&) {
    return LOOM_RESIDENCY_PARAMS;  // create refuses the key by name
  }
}
loom_error* unit_needed(loom_grad* g, int32_t unit, int32_t fill) {
  return loom::guard(cast(g)->host(), [&] { cast(g)->needed((size_t)unit, fill != 0); });
}
loom_error* unit_grads(loom_grad* g, int32_t unit) {
  return loom::guard(cast(g)->host(), [&] { cast(g)->take_grads((size_t)unit); });
}

const loom_grad_api kApi = {LOOM_GRAD_API_SIZE_V2_13,
                            create,
                            Entries::destroy,
                            reduce,
                            Entries::shard_params,
                            Entries::after_step,
                            bytes_per_param,
                            nullptr,  // grad_ready: units reduce themselves (unit_grads)
                            residency,
                            unit_needed,
                            unit_grads};

const loom_param_spec kParams[] = {
    loom::param("zero_stage", LOOM_PARAM_INT, "3",
                "3: parameters, gradients and optimizer state sharded, each unit's parameters "
                "gathered just before use and freed after (Megatron-FSDP's "
                "optim_grads_params); 2: gradients and optimizer state sharded, parameters "
                "whole on every rank (optim_grads)",
                2, 3),
    loom::param("overlap_param_gather", LOOM_PARAM_BOOL, "false",
                "overlap the parameter all-gather with compute (Megatron's "
                "--overlap-param-gather): at zero_stage 3 each unit's gather starts while the "
                "unit before it computes, in the order the last step asked for them; at 2 the "
                "gathers of the updated parameters start after the optimizer step and each "
                "completes just before its unit's forward. The numbers are those without it"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "fully sharded data parallelism (ZeRO-2/3): per-layer parameter all-gather just "
                "before use, per-layer gradient reduce-scatter, optimizer on shards",
            .params = kParams, .api = &kApi)
