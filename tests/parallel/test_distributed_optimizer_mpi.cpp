// grad/distributed-optimizer under mpirun (np 2, 3) and as an MPI singleton. Gradient
// tensors of sizes that D does not divide (one smaller than a shard, the total not a
// multiple of 3) hold values derived from (rank, tensor, element); every rank checks
// against values it computes itself:
//  - after reduce, each shard gradient equals the average over ranks;
//  - the shards from shard_params, all-gathered, tile every parameter exactly once;
//  - after each rank writes known values into its parameter shards and calls after_step,
//    every rank holds the full parameters with exactly those values (twice, so nothing
//    stale survives a step).
// Also the refusals.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "mpi_world.hpp"
#include "plugin_test_util.hpp"

using ptest::HostTensor;

namespace {

const loom_grad_reduce_args kReduceAll{LOOM_GRAD_REDUCE_ARGS_SIZE_V2, nullptr};

struct World : loomtest::MpiWorld {
  World() {
    host.setup_parallel({});  // all ranks data-parallel: the data x context group is the world
  }
};
World& world() {
  static World w;
  return w;
}

const std::vector<std::vector<int64_t>> kShapes = {{7, 5}, {3}, {1}, {13}, {2, 2, 2}, {4}};

double grad_value(int rank, size_t t, int64_t j) {
  return 0.25 * rank + 0.5 * double(j % 5) - 0.125 * double(t) + (rank == 1 ? 3.0 : 0.0);
}
float param_value(size_t t, int64_t j, int step) {
  return 100.0f * float(step + 1) + 10.0f * float(t) + 0.5f * float(j);
}

struct Model {
  std::vector<std::unique_ptr<HostTensor<float>>> params, grads;
  Model() {
    for (const auto& s : kShapes) {
      params.push_back(std::make_unique<HostTensor<float>>(s, loom_f32()));
      grads.push_back(std::make_unique<HostTensor<float>>(s, loom_f32()));
    }
  }
  static std::vector<DLTensor*> ptrs(std::vector<std::unique_ptr<HostTensor<float>>>& v) {
    std::vector<DLTensor*> p;
    for (auto& t : v) p.push_back(t->get());
    return p;
  }
};

struct Plugin {
  const loom_grad_api* api = nullptr;
  loom_grad* self = nullptr;
  loom_config cfg;
  ptest::Outcome created;
  Plugin(const loom_host* host, std::vector<DLTensor*> grads,
         const std::map<std::string, std::string>& values = {}) {
    auto* d = loomtest::load_descriptor("grad", "distributed-optimizer");
    api = static_cast<const loom_grad_api*>(d->api);
    cfg = loomtest::TestHost::config(d, values);
    const loom_grad_create_args args{
        LOOM_GRAD_CREATE_ARGS_SIZE_V2, grads.data(), grads.size(), nullptr, nullptr, nullptr};
    created = ptest::outcome(api->create(host, &cfg, &args, &self));
  }
  ~Plugin() { api->destroy(self); }
};

const float* as_f32(const DLTensor* t) {
  return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
}

// values: the plugin's keys (bucket_size, overlap_grad_reduce); announce: every step, the
// gradients are announced final (grad_ready, ABI 2.12) in backward order before reduce.
void exercise(const loom_host* host, const std::map<std::string, std::string>& values = {},
              bool announce = false) {
  World& w = world();
  Model m;
  Plugin p(host, Model::ptrs(m.grads), values);
  REQUIRE_MESSAGE(p.created.ok(), p.created.message);
  REQUIRE(p.api->struct_size >= LOOM_GRAD_API_SIZE_V2);

  for (size_t t = 0; t < kShapes.size(); ++t)
    for (size_t j = 0; j < m.params[t]->data.size(); ++j)
      m.params[t]->data[j] = -1.0f - float(w.rank);  // garbage that differs per rank
  std::vector<loom_param_shard> shards(kShapes.size());
  for (auto& s : shards) s.struct_size = LOOM_PARAM_SHARD_SIZE_V2;
  auto params = Model::ptrs(m.params);
  REQUIRE(ptest::outcome(p.api->shard_params(p.self, params.data(), shards.data())).ok());

  // Tiling: gather every rank's (offset, numel) per parameter; each element is owned once.
  const int64_t T = static_cast<int64_t>(kShapes.size());
  HostTensor<double> mine({2 * T}, loom_f64()), all({2 * T * w.size}, loom_f64());
  for (int64_t t = 0; t < T; ++t) {
    mine.data[2 * t] = double(shards[t].offset);
    mine.data[2 * t + 1] = double(loom_tensor_numel(shards[t].param));
    CHECK(loom_tensor_numel(shards[t].grad) == loom_tensor_numel(shards[t].param));
    CHECK(shards[t].param->ndim == 1);
  }
  w.host.check(loom::comm_all_gather(w.comm, nullptr, mine.get(), all.get()));
  int64_t total = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = static_cast<int64_t>(m.params[t]->data.size());
    std::vector<int> owners(n, 0);
    for (int r = 0; r < w.size; ++r) {
      const int64_t off = int64_t(all.data[2 * T * r + 2 * t]);
      const int64_t cnt = int64_t(all.data[2 * T * r + 2 * t + 1]);
      REQUIRE(off >= 0);
      REQUIRE(off + cnt <= n);
      for (int64_t j = off; j < off + cnt; ++j) owners[j]++;
    }
    for (int64_t j = 0; j < n; ++j) CHECK_MESSAGE(owners[j] == 1, "tensor ", t, " element ", j);
    total += n;
  }
  const double bpp = p.api->bytes_per_param(p.self);
  const int64_t S = (total + w.size - 1) / w.size;
  if (values.empty())  // one bucket: the flat buffer, the shard gradient, the parameter pack
    CHECK(bpp == doctest::Approx(double(4 * (w.size * S + 2 * S)) / double(total)));

  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    for (size_t t = 0; t < kShapes.size(); ++t)
      for (size_t j = 0; j < m.grads[t]->data.size(); ++j)
        m.grads[t]->data[j] = float(grad_value(w.rank, t, int64_t(j)) + step);
    if (announce)
      for (int64_t t = T; t-- > 0;) REQUIRE(ptest::outcome(p.api->grad_ready(p.self, t, 1)).ok());
    REQUIRE(ptest::outcome(p.api->reduce(p.self, &kReduceAll)).ok());
    for (size_t t = 0; t < kShapes.size(); ++t) {
      const float* g = as_f32(shards[t].grad);
      for (int64_t k = 0; k < loom_tensor_numel(shards[t].grad); ++k) {
        const int64_t j = shards[t].offset + k;
        double avg = 0;
        for (int r = 0; r < w.size; ++r) avg += grad_value(r, t, j) + step;
        avg /= w.size;
        CHECK(g[k] == doctest::Approx(avg).epsilon(1e-6));
      }
      // the shard's parameter view is the parameter's own memory
      CHECK(shards[t].param->data == m.params[t]->get()->data);
    }
    // "the optimizer": write the step's values into this rank's shards only
    for (size_t t = 0; t < kShapes.size(); ++t) {
      float* v = const_cast<float*>(as_f32(shards[t].param));
      for (int64_t k = 0; k < loom_tensor_numel(shards[t].param); ++k)
        v[k] = param_value(t, shards[t].offset + k, step);
    }
    REQUIRE(ptest::outcome(p.api->after_step(p.self)).ok());
    for (size_t t = 0; t < kShapes.size(); ++t)
      for (size_t j = 0; j < m.params[t]->data.size(); ++j)
        REQUIRE(m.params[t]->data[j] == param_value(t, int64_t(j), step));
  }
}

}  // namespace

std::string g_log;

TEST_CASE("distributed-optimizer: reduce-scatter, exact tiling, all-gather") {
  loom_host h = *world().host.host();
  h.log = [](loom_host_context*, loom_log_level, const char* m) { g_log += m; };
  exercise(&h);
  // Megatron's table for f32 params and grads: 4 + 4 + 8/D, 16 without sharding
  const std::string D = std::to_string(world().size);
  CHECK(g_log.find("4 (param) + 4 (grad) + [8 (Adam m, v)]/D = 8 + 8/" + D) != std::string::npos);
  CHECK(g_log.find("16 without sharding") != std::string::npos);
  MESSAGE(g_log);
}

TEST_CASE(
    "distributed-optimizer: buckets of 16 elements, sharded each, with and without "
    "overlap_grad_reduce") {
  loom_host h = *world().host.host();
  h.log = [](loom_host_context*, loom_log_level, const char* m) { g_log = m; };
  exercise(&h, {{"bucket_size", "16"}});
  CHECK(g_log.find("bucket(s)") != std::string::npos);
  CHECK(g_log.find("in 1 bucket(s)") == std::string::npos);  // several
  exercise(&h, {{"bucket_size", "16"}, {"overlap_grad_reduce", "true"}}, true);
  exercise(&h, {{"overlap_grad_reduce", "true"}}, true);  // one bucket, started at the last
}

TEST_CASE("distributed-optimizer: refusals") {
  World& w = world();
  HostTensor<float> a({4}, loom_f32());
  HostTensor<double> b({4}, loom_f64());
  {
    Plugin p(w.host.host(), {a.get(), b.get()});
    CHECK(p.created.message.find("gradient 1 has another dtype") != std::string::npos);
  }
  {
    Plugin p(w.host.host(), {a.get(), nullptr});
    CHECK(p.created.message.find("gradient 1 is NULL") != std::string::npos);
  }
  {
    Plugin none(w.host.host(), {});  // no gradients: every call is a no-op
    REQUIRE(none.created.ok());
    CHECK(ptest::outcome(none.api->reduce(none.self, &kReduceAll)).ok());
    CHECK(
        ptest::outcome(none.api->shard_params(none.self, nullptr, nullptr)).message.find("NULL") !=
        std::string::npos);
    DLTensor* no_params[1] = {nullptr};
    loom_param_shard no_out[1] = {};
    CHECK(ptest::outcome(none.api->shard_params(none.self, no_params, no_out)).ok());
    CHECK(ptest::outcome(none.api->after_step(none.self)).ok());
    CHECK(none.api->bytes_per_param(none.self) == 0.0);
  }
  Plugin p(w.host.host(), {a.get()});
  REQUIRE(p.created.ok());
  CHECK(ptest::outcome(p.api->after_step(p.self)).message.find("before shard_params") !=
        std::string::npos);
  HostTensor<float> wrong({5}, loom_f32());
  DLTensor* params[] = {wrong.get()};
  loom_param_shard out[1] = {};
  out[0].struct_size = LOOM_PARAM_SHARD_SIZE_V2;
  CHECK(ptest::outcome(p.api->shard_params(p.self, params, out)).message.find("has 5 elements") !=
        std::string::npos);
}
