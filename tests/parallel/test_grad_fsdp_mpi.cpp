// grad/fsdp under mpirun (np 2, 3) and as an MPI singleton, through the ABI alone (the host's
// side of ABI 2.13's residency: grad.h, model.h). Six tensors of awkward sizes (one of 1
// element, one empty, none a multiple of 3) in four residency units, one unit with no tensor
// and members that are not adjacent; every rank checks against values it computes itself from
// (rank, tensor, element, micro-batch, step):
//  - residency() per zero_stage: 3 -> LOOM_RESIDENCY_PARAMS, 2 -> _GRADS;
//  - shard_params's views, all-gathered, tile every parameter exactly once, each rank one
//    contiguous range per parameter, at the layout fsdp.cpp documents (rank r: elements
//    [r*S, (r+1)*S) of its unit's concatenation, S = ceil(N / D));
//  - zero_stage 3: the shards start as the owners' initial values and live in the plugin's
//    memory; unit_needed(u, 1) fills exactly unit u's tensors with the owners' values (over
//    whatever the "freed" memory held), unit_needed(u, 0) leaves them holding those values;
//  - unit_grads over two micro-batches, then reduce: each shard gradient is the sum over the
//    micro-batches of the average over ranks; a unit no backward reached gets zeros, and the
//    gradient tensors may be clobbered ("freed") right after unit_grads;
//  - after the "optimizer" writes known values into the shards, after_step (zero_stage 2:
//    the whole values on every rank; with overlap_param_gather at the unit's next
//    unit_needed(u, 0)) or the next unit_needed(u, 1) (zero_stage 3) gives every rank those
//    values, over four steps whose order of units changes (stage 3's learned prefetch, on
//    and off its script);
//  - the memory line of zero_stage 3 ((4 + 4 + 8) / D bytes) and, with overlap_param_gather,
//    the per-step debug line showing gathers prefetched once an order was learned;
// and the refusals (NULL or mixed-dtype gradients, no units, expert groups, a bad
// zero_stage, no comm, calls out of order or out of range), and a plugin with no gradients
// at all, whose shard_params still counts as called.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "mpi_world.hpp"
#include "plugin_test_util.hpp"

using ptest::HostTensor;

namespace {

struct FsdpWorld : loomtest::MpiWorld {
  FsdpWorld() { host.setup_parallel({}); }  // the data x context group is the whole world
};
FsdpWorld& world() {
  static FsdpWorld w;
  return w;
}

const loom_grad_reduce_args kReduce{LOOM_GRAD_REDUCE_ARGS_SIZE_V2, nullptr};

// tensor t: its shape and residency unit. Unit 2 has no tensor; unit 0 holds tensors 0, 2
// and 6 (not adjacent, one empty), unit 1 tensors 1 and 5, unit 3 tensors 3 and 4.
struct Spec {
  std::vector<int64_t> shape;
  int32_t unit;
};
const std::vector<Spec> kSpecs = {{{7, 5}, 0},    {{3}, 1}, {{1}, 0}, {{13}, 3},
                                  {{2, 2, 2}, 3}, {{4}, 1}, {{0}, 0}};
const int32_t kUnits = 4;
const int kMicro = 2;

// Each rank's gradient of (tensor t, element j) in micro-batch m of step s: exact in f32.
double grad_of(int rank, size_t t, int64_t j, int m, int s) {
  return 0.25 * rank - 0.125 * double(t) + 0.5 * double(j % 7) + 0.0625 * m + s +
         (rank == 2 ? -5.0 : 0.0);
}
// The model's initial values (stage 3: rank-dependent, so a filled element shows its owner).
float init_of(int rank, size_t t, int64_t j) {
  return 1000.0f * float(rank) + 10.0f * float(t) + 0.25f * float(j);
}
// What the "optimizer" writes into the shard of (t, j) at step s.
float stepped(size_t t, int64_t j, int s) {
  return -100.0f * float(s + 1) + 3.0f * float(t) - 0.5f * float(j);
}
const float kFreed = -7777.0f;  // what "freed" parameter memory holds

struct Tensors {
  std::vector<std::unique_ptr<HostTensor<float>>> v;
  explicit Tensors(float fill) {
    for (const Spec& s : kSpecs) {
      v.push_back(std::make_unique<HostTensor<float>>(s.shape, loom_f32()));
      for (float& x : v.back()->data) x = fill;
    }
  }
  std::vector<DLTensor*> ptrs() {
    std::vector<DLTensor*> p;
    for (auto& t : v) p.push_back(t->get());
    return p;
  }
  std::vector<float>& operator[](size_t t) { return v[t]->data; }
};

struct Fsdp {
  const loom_grad_api* api = nullptr;
  loom_grad* self = nullptr;
  loom_config cfg;
  ptest::Outcome created;
  Fsdp(const loom_host* host, std::vector<DLTensor*> grads, const int32_t* units,
       const std::map<std::string, std::string>& values = {},
       size_t size = LOOM_GRAD_CREATE_ARGS_SIZE_V2_13, const int32_t* groups = nullptr) {
    auto* d = loomtest::load_descriptor("grad", "fsdp");
    api = static_cast<const loom_grad_api*>(d->api);
    cfg = loomtest::TestHost::config(d, values);
    loom_grad_create_args a{};
    a.struct_size = size;
    a.grads = grads.data();
    a.num_grads = grads.size();
    a.reduce_groups = groups;
    a.units = units;
    created = ptest::outcome(api->create(host, &cfg, &a, &self));
  }
  ~Fsdp() { api->destroy(self); }
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;
  bool ok(loom_error* e) const {
    ptest::Outcome o = ptest::outcome(e);
    if (!o.ok()) MESSAGE(o.message);
    return o.ok();
  }
};

float* f32(const DLTensor* t) {
  return reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
}

std::vector<int32_t> unit_list() {
  std::vector<int32_t> u;
  for (const Spec& s : kSpecs) u.push_back(s.unit);
  return u;
}

// Every rank's (offset, count) of every tensor: at [r][t].
struct Span {
  int64_t offset, count;
};
std::vector<std::vector<Span>> gather_spans(const std::vector<loom_param_shard>& shards) {
  FsdpWorld& w = world();
  const size_t T = shards.size();
  HostTensor<double> mine({int64_t(2 * T)}, loom_f64()), all({int64_t(2 * T) * w.size}, loom_f64());
  for (size_t t = 0; t < T; ++t) {
    mine.data[2 * t] = double(shards[t].offset);
    mine.data[2 * t + 1] = double(loom_tensor_numel(shards[t].param));
  }
  w.host.check(loom::comm_all_gather(w.comm, nullptr, mine.get(), all.get()));
  std::vector<std::vector<Span>> spans(w.size, std::vector<Span>(T));
  for (int r = 0; r < w.size; ++r)
    for (size_t t = 0; t < T; ++t)
      spans[r][t] = {int64_t(all.data[2 * T * r + 2 * t]),
                     int64_t(all.data[2 * T * r + 2 * t + 1])};
  return spans;
}

// The documented layout: within unit u (its tensors concatenated in create's order, N
// elements), rank r owns [r*S, (r+1)*S), S = ceil(N / D).
Span documented_span(size_t t, int r, int D) {
  int64_t N = 0, start = 0;
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    if (kSpecs[i].unit != kSpecs[t].unit) continue;
    if (i == t) start = N;
    int64_t n = 1;
    for (int64_t d : kSpecs[i].shape) n *= d;
    N += n;
  }
  int64_t n = 1;
  for (int64_t d : kSpecs[t].shape) n *= d;
  const int64_t S = (N + D - 1) / D, lo = std::max(start, r * S),
                hi = std::min(start + n, (r + 1) * S);
  return hi > lo ? Span{lo - start, hi - lo} : Span{0, 0};
}

// One run of `steps` steps; plans[s]: the units the step's forward reads, in order (its
// backward: the reverse), each micro-batch.
void exercise(int stage, bool overlap, const std::vector<std::vector<int32_t>>& plans,
              const loom_host* host = nullptr) {
  FsdpWorld& w = world();
  CAPTURE(stage);
  CAPTURE(overlap);
  const std::map<std::string, std::string> values = {
      {"zero_stage", std::to_string(stage)}, {"overlap_param_gather", overlap ? "true" : "false"}};
  const std::vector<int32_t> units = unit_list();
  const size_t T = kSpecs.size();
  Tensors grads(0.0f), params(0.0f);
  Fsdp p(host != nullptr ? host : w.host.host(), grads.ptrs(), units.data(), values);
  REQUIRE_MESSAGE(p.created.ok(), p.created.message);
  REQUIRE(p.api->struct_size >= LOOM_GRAD_API_SIZE_V2_13);
  REQUIRE(static_cast<bool>(p.api->unit_needed));
  REQUIRE(static_cast<bool>(p.api->unit_grads));

  // The model's initial values, resident at create: whole and equal on every rank at stage 2;
  // at stage 3 only each owner's elements reach the shards, so they may differ.
  const int init_rank = stage == 3 ? w.rank : 0;
  for (size_t t = 0; t < T; ++t)
    for (size_t j = 0; j < params[t].size(); ++j) params[t][j] = init_of(init_rank, t, int64_t(j));
  std::vector<loom_param_shard> shards(T);
  for (auto& s : shards) s.struct_size = LOOM_PARAM_SHARD_SIZE_V2;
  auto pp = params.ptrs();
  REQUIRE(p.ok(p.api->shard_params(p.self, pp.data(), shards.data())));

  // Tiling, and the documented layout.
  const auto spans = gather_spans(shards);
  std::vector<std::vector<int>> owner(T);
  for (size_t t = 0; t < T; ++t) {
    CAPTURE(t);
    const int64_t n = int64_t(params[t].size());
    std::vector<int> owners(size_t(n), 0);
    owner[t].assign(size_t(n), -1);
    for (int r = 0; r < w.size; ++r) {
      const Span s = spans[r][t], d = documented_span(t, r, w.size);
      CHECK(s.count == d.count);
      if (s.count > 0) CHECK(s.offset == d.offset);
      REQUIRE(s.offset >= 0);
      REQUIRE(s.offset + s.count <= n);
      for (int64_t j = s.offset; j < s.offset + s.count; ++j) {
        owners[size_t(j)]++;
        owner[t][size_t(j)] = r;
      }
    }
    for (int64_t j = 0; j < n; ++j) CHECK_MESSAGE(owners[size_t(j)] == 1, "element ", j);
    CHECK(shards[t].param->ndim == 1);
    CHECK(shards[t].grad->ndim == 1);
    CHECK(loom_tensor_numel(shards[t].grad) == loom_tensor_numel(shards[t].param));
    const int64_t c = loom_tensor_numel(shards[t].param);
    if (c == 0) continue;
    if (stage == 2)  // the values stay whole: the views are the parameter's own memory
      CHECK(f32(shards[t].param) == params[t].data() + shards[t].offset);
    else  // the plugin's shard memory, holding the initial values there
      CHECK((f32(shards[t].param) < params[t].data() ||
             f32(shards[t].param) >= params[t].data() + params[t].size()));
    for (int64_t k = 0; k < c; ++k)
      CHECK(f32(shards[t].param)[k] == init_of(init_rank, t, shards[t].offset + k));
  }

  // expected(t, j): what every rank must see of a resident value now
  int done = -1;  // the last step whose values the shards hold
  auto expected = [&](size_t t, int64_t j) {
    return done < 0 ? init_of(stage == 3 ? owner[t][size_t(j)] : 0, t, j) : stepped(t, j, done);
  };
  auto set_unit = [&](Tensors& ts, int32_t u, float x) {
    for (size_t t = 0; t < T; ++t)
      if (kSpecs[t].unit == u)
        for (float& v : ts[t]) v = x;
  };
  // The model's call before reading unit u: at stage 3 its values were just allocated
  // (garbage) and are filled; every other unit's memory is left as it was.
  auto needed = [&](int32_t u) {
    CAPTURE(u);
    if (stage == 3) {
      for (int32_t o = 0; o < kUnits; ++o) set_unit(params, o, kFreed);
      REQUIRE(p.ok(p.api->unit_needed(p.self, u, 1)));
    } else {
      REQUIRE(p.ok(p.api->unit_needed(p.self, u, 0)));
    }
    for (size_t t = 0; t < T; ++t) {
      CAPTURE(t);
      for (size_t j = 0; j < params[t].size(); ++j) {
        if (kSpecs[t].unit == u)
          REQUIRE(params[t][j] == expected(t, int64_t(j)));
        else if (stage == 3)
          REQUIRE(params[t][j] == kFreed);
      }
    }
    if (stage == 3) {  // fill = 0: resident values stay what they are (work pending on them,
      // a prefetched gather of this very unit for its next use, may complete: same values)
      REQUIRE(p.ok(p.api->unit_needed(p.self, u, 0)));
      for (size_t t = 0; t < T; ++t)
        if (kSpecs[t].unit == u)
          for (size_t j = 0; j < params[t].size(); ++j)
            REQUIRE(params[t][j] == expected(t, int64_t(j)));
    }
  };

  for (int s = 0; s < int(plans.size()); ++s) {
    CAPTURE(s);
    const auto& plan = plans[size_t(s)];
    std::vector<int> reached(kUnits, 0);
    for (int m = 0; m < kMicro; ++m) {
      for (int32_t u : plan) needed(u);         // forward
      for (size_t i = plan.size(); i-- > 0;) {  // backward
        const int32_t u = plan[i];
        needed(u);
        for (size_t t = 0; t < T; ++t)
          if (kSpecs[t].unit == u)
            for (size_t j = 0; j < grads[t].size(); ++j)
              grads[t][j] = float(grad_of(w.rank, t, int64_t(j), m, s));
        REQUIRE(p.ok(p.api->unit_grads(p.self, u)));
        reached[size_t(u)] |= 1 << m;
        set_unit(grads, u, 1e6f);  // freed: the plugin must have taken them already
      }
    }
    REQUIRE(p.ok(p.api->reduce(p.self, &kReduce)));
    for (size_t t = 0; t < T; ++t) {
      CAPTURE(t);
      const float* g = f32(shards[t].grad);
      for (int64_t k = 0; k < loom_tensor_numel(shards[t].grad); ++k) {
        const int64_t j = shards[t].offset + k;
        double sum = 0;
        for (int m = 0; m < kMicro; ++m) {
          if (!(reached[size_t(kSpecs[t].unit)] & (1 << m))) continue;
          double avg = 0;
          for (int r = 0; r < w.size; ++r) avg += grad_of(r, t, j, m, s);
          sum += avg / w.size;
        }
        CHECK(g[k] == doctest::Approx(sum).epsilon(1e-6));
      }
    }
    // "the optimizer": this rank's shards only
    for (size_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < loom_tensor_numel(shards[t].param); ++k)
        f32(shards[t].param)[k] = stepped(t, shards[t].offset + k, s);
    REQUIRE(p.ok(p.api->after_step(p.self)));
    done = s;
    if (stage == 2 && !overlap)  // whole on every rank at once
      for (size_t t = 0; t < T; ++t)
        for (size_t j = 0; j < params[t].size(); ++j)
          REQUIRE(params[t][j] == stepped(t, int64_t(j), s));
  }
  for (int32_t u = 0; u < kUnits; ++u) needed(u);  // the last step's values, every unit
}

// The plans of four steps: the same order twice (stage 3 prefetches the second), then one
// that keeps to that script for three units and then leaves it, never reading unit 3 (its
// prefetched gather is dropped, its gradient is zero), then that order again.
const std::vector<std::vector<int32_t>> kPlans = {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2}, {0, 1, 2}};

}  // namespace

std::string g_log;

TEST_CASE("fsdp: residency per zero_stage") {
  auto* d = loomtest::load_descriptor("grad", "fsdp");
  auto* api = static_cast<const loom_grad_api*>(d->api);
  REQUIRE(api->struct_size >= LOOM_GRAD_API_SIZE_V2_13);
  REQUIRE(static_cast<bool>(api->residency));
  const loom_host* h = world().host.host();
  for (const char* overlap : {"false", "true"}) {
    CAPTURE(overlap);
    loom_config c3 = loomtest::TestHost::config(d, {{"overlap_param_gather", overlap}});
    CHECK(api->residency(h, &c3) == LOOM_RESIDENCY_PARAMS);  // the default: zero_stage 3
    loom_config c2 =
        loomtest::TestHost::config(d, {{"zero_stage", "2"}, {"overlap_param_gather", overlap}});
    CHECK(api->residency(h, &c2) == LOOM_RESIDENCY_GRADS);
  }
}

TEST_CASE("fsdp: zero_stage 3, units gathered from the shards") {
  g_log.clear();
  loom_host logged = *world().host.host();
  logged.log = [](loom_host_context*, loom_log_level, const char* m) { g_log += m; };
  exercise(3, false, kPlans);
  // (f32: 4 (param) + 4 (grad) + 8 (Adam))/D
  char want[64];
  std::snprintf(want, sizeof want, "= %.2f bytes", 16.0 / world().size);
  FsdpWorld& w = world();
  {
    Tensors g(0.0f), pr(0.0f);
    const auto units = unit_list();
    Fsdp p(&logged, g.ptrs(), units.data());
    REQUIRE(p.created.ok());
    std::vector<loom_param_shard> out(kSpecs.size());
    for (auto& s : out) s.struct_size = LOOM_PARAM_SHARD_SIZE_V2;
    auto pp = pr.ptrs();
    REQUIRE(p.ok(p.api->shard_params(p.self, pp.data(), out.data())));
    CHECK(p.api->bytes_per_param(p.self) == 0.0);
  }
  const std::string head =
      "zero_stage 3, D = " + std::to_string(w.size) + ", " + std::to_string(kUnits) + " units";
  CHECK(g_log.find(head) != std::string::npos);
  CHECK(g_log.find(want) != std::string::npos);
  MESSAGE(g_log);
}

TEST_CASE("fsdp: zero_stage 3 with overlap_param_gather (prefetch on and off its script)") {
  // its debug line per step: the gathers it prefetched of those the step asked for (16 = 2
  // micro-batches x 4 units x forward and backward; 12 with 3 units)
  g_log.clear();
  loom_host logged = *world().host.host();
  logged.log = [](loom_host_context*, loom_log_level, const char* m) {
    g_log += std::string(m) + "\n";
  };
  exercise(3, true, kPlans, &logged);
  std::vector<std::pair<int, int>> steps;  // (prefetched, asked for) per step
  for (size_t at = g_log.find("this step: "); at != std::string::npos;
       at = g_log.find("this step: ", at + 1)) {
    int k = -1, n = -1;
    REQUIRE(std::sscanf(g_log.c_str() + at, "this step: %d of %d", &k, &n) == 2);
    steps.emplace_back(k, n);
  }
  REQUIRE(steps.size() == kPlans.size());
  CHECK(steps[0] == std::make_pair(0, 16));  // no order learned yet
  CHECK(steps[1].second == 16);              // the same order: some gathers prefetched
  CHECK(steps[1].first > 0);
  CHECK(steps[2].second == 12);  // leaves the script
  CHECK(steps[3].second == 12);  // keeps to the new one
  CHECK(steps[3].first > 0);
  MESSAGE(g_log);
}

TEST_CASE("fsdp: zero_stage 2, values whole, all-gathered after each step") {
  exercise(2, false, kPlans);
}

TEST_CASE("fsdp: zero_stage 2 with overlap_param_gather (completed at unit_needed(u, 0))") {
  exercise(2, true, kPlans);
}

TEST_CASE("fsdp: refusals") {
  FsdpWorld& w = world();
  const loom_host* h = w.host.host();
  HostTensor<float> a({4}, loom_f32()), a2({4}, loom_f32()), five({5}, loom_f32());
  HostTensor<double> b({4}, loom_f64());
  const int32_t units[] = {0, 0};
  auto refused = [](const ptest::Outcome& o, const std::string& part) {
    CHECK_MESSAGE(o.message.find(part) != std::string::npos, o.message);
    return !o.ok();
  };
  {
    auto* d = loomtest::load_descriptor("grad", "fsdp");
    auto* api = static_cast<const loom_grad_api*>(d->api);
    loom_config cfg = loomtest::TestHost::config(d);
    loom_grad* g = nullptr;
    CHECK(refused(ptest::outcome(api->create(h, &cfg, nullptr, &g)), "create args NULL"));
    loom_grad_create_args small{};
    small.struct_size = LOOM_GRAD_CREATE_ARGS_SIZE_V2 - 1;
    CHECK(refused(ptest::outcome(api->create(h, &cfg, &small, &g)), "smaller than ABI 2.0"));
    loom_grad_create_args no_grads{};
    no_grads.struct_size = LOOM_GRAD_CREATE_ARGS_SIZE_V2_13;
    no_grads.num_grads = 2;
    no_grads.units = units;
    CHECK(refused(ptest::outcome(api->create(h, &cfg, &no_grads, &g)), "grads is NULL"));
  }
  CHECK(refused(Fsdp(h, {a.get(), b.get()}, units).created, "gradient 1 has another dtype"));
  CHECK(refused(Fsdp(h, {a.get(), nullptr}, units).created, "gradient 1 is NULL"));
  {
    Fsdp none(h, {a.get()}, nullptr);  // the model reports no units
    CHECK(refused(none.created, "residency units"));
    CHECK(none.created.code == LOOM_ERR_UNIMPLEMENTED);
    Fsdp old(h, {a.get()}, units, {}, LOOM_GRAD_CREATE_ARGS_SIZE_V2_6);  // units not covered
    CHECK(refused(old.created, "residency units"));
    CHECK(old.created.code == LOOM_ERR_UNIMPLEMENTED);
  }
  {
    const int32_t negative[] = {0, -1};
    CHECK(refused(Fsdp(h, {a.get(), a2.get()}, negative).created,
                  "gradient 1 belongs to no residency unit"));
    // Without expert parallelism (this host's layout) the expert-data group is data x
    // context: expert parameters shard alike. Under expert parallelism they are refused
    // (training.config_check: parallel.expert = 2 with parallel.data = "fsdp").
    const int32_t groups[] = {LOOM_GROUP_DATA_CONTEXT, LOOM_GROUP_EXPERT_DATA};
    Fsdp expert(h, {a.get(), a2.get()}, units, {}, LOOM_GRAD_CREATE_ARGS_SIZE_V2_13, groups);
    CHECK_MESSAGE(expert.created.ok(), expert.created.message);
  }
  CHECK(
      refused(Fsdp(h, {a.get()}, units, {{"zero_stage", "1"}}).created, "parallel.zero_stage = 1"));
  {
    loomtest::TestHost bare;  // no comm: nothing to shard over
    CHECK(refused(Fsdp(bare.host(), {a.get()}, units).created, "needs a comm"));
  }
  {
    Fsdp none(h, {}, units);  // no gradients: every call has nothing to do
    REQUIRE(none.created.ok());
    DLTensor* no_params[1] = {nullptr};
    loom_param_shard no_out[1] = {};
    CHECK(none.ok(none.api->shard_params(none.self, no_params, no_out)));
    CHECK(none.ok(none.api->reduce(none.self, &kReduce)));
    // With no gradients shard_params still counts as called (grad/distributed-optimizer's
    // rule too): after_step, which a host calls after every step, has nothing to do, and a
    // second shard_params is refused.
    CHECK(none.ok(none.api->after_step(none.self)));
    CHECK(refused(ptest::outcome(none.api->shard_params(none.self, no_params, no_out)),
                  "called once"));
  }
  for (const char* stage : {"2", "3"}) {
    CAPTURE(stage);
    Fsdp p(h, {a.get(), a2.get()}, units, {{"zero_stage", stage}});
    REQUIRE(p.created.ok());
    CHECK(refused(ptest::outcome(p.api->reduce(p.self, nullptr)), "reduce args NULL"));
    CHECK(refused(ptest::outcome(p.api->after_step(p.self)), "after_step before shard_params"));
    CHECK(refused(ptest::outcome(p.api->unit_needed(p.self, 0, 1)), "before shard_params"));
    CHECK(
        refused(ptest::outcome(p.api->unit_grads(p.self, 1)), "unit_grads of unit 1 out of range"));
    CHECK(refused(ptest::outcome(p.api->shard_params(p.self, nullptr, nullptr)), "NULL argument"));
    HostTensor<float> pa({4}, loom_f32());
    HostTensor<double> pb({4}, loom_f64());
    loom_param_shard out[2] = {};
    out[0].struct_size = out[1].struct_size = LOOM_PARAM_SHARD_SIZE_V2;
    DLTensor* sized[] = {five.get(), pa.get()};
    CHECK(refused(ptest::outcome(p.api->shard_params(p.self, sized, out)),
                  "parameter 0 has another size than its gradient"));
    Fsdp q(h, {a.get(), a2.get()}, units, {{"zero_stage", stage}});
    DLTensor* mixed[] = {pa.get(), pb.get()};
    CHECK(refused(ptest::outcome(q.api->shard_params(q.self, mixed, out)),
                  "parameter 1 has another dtype than parameter 0"));
    Fsdp r(h, {a.get(), a2.get()}, units, {{"zero_stage", stage}});
    HostTensor<float> pc({4}, loom_f32());
    DLTensor* good[] = {pa.get(), pc.get()};
    loom_param_shard tiny[2] = {};
    CHECK(refused(ptest::outcome(r.api->shard_params(r.self, good, tiny)),
                  "out[0].struct_size is too small"));
    Fsdp ok(h, {a.get(), a2.get()}, units, {{"zero_stage", stage}});
    REQUIRE(ok.ok(ok.api->shard_params(ok.self, good, out)));
    CHECK(refused(ptest::outcome(ok.api->shard_params(ok.self, good, out)), "called once"));
    CHECK(refused(ptest::outcome(ok.api->unit_needed(ok.self, 1, 0)), "out of range"));
    CHECK(refused(ptest::outcome(ok.api->unit_needed(ok.self, -1, 1)), "out of range"));
    CHECK(refused(ptest::outcome(ok.api->unit_grads(ok.self, -1)), "out of range"));
    if (std::string(stage) == "2")
      CHECK(refused(ptest::outcome(ok.api->unit_needed(ok.self, 0, 1)), "nothing to fill"));
    else
      CHECK(ok.ok(ok.api->unit_needed(ok.self, 0, 1)));
    CHECK(ok.ok(ok.api->reduce(ok.self, &kReduce)));
    CHECK(ok.ok(ok.api->after_step(ok.self)));
  }
}
