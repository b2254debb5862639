// Mixed precision across ranks, run by mpirun at 2 ranks: comm/mpi's bf16/f16 collectives
// (MPI has no 16-bit float type: reductions go through f32) and model/gpt in bf16 under
// tensor + sequence parallelism against the same bf16 model on one rank (comm/single).
// Rounding differs between the two (the parallel model rounds partial sums to bf16 before
// reducing them), so the comparison has mixed-precision tolerances; the f64 equivalence of
// the layouts is tests/model's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/model_step.hpp"
#include "model_test_util.hpp"
#include "test_host.hpp"

namespace {

constexpr int64_t kB = 2, kT = 8, kN = kB * kT, kVocab = 100;

using modeltest::mpi_anchor;

// f32 copy of a tensor of any float dtype, as doubles (16-bit ones cast by the backend).
std::vector<double> download(const loom_backend_ref& be, const DLTensor* t) {
  int64_t n = loom_tensor_numel(t);
  DLTensor* f = nullptr;
  REQUIRE(be.api->alloc_tensor(be.self, loom_f32(), 1, &n, &f) == nullptr);
  REQUIRE(be.api->ops->copy(be.self, f, t) == nullptr);
  std::vector<float> v(n);
  REQUIRE(be.api->to_host(be.self, f, v.data(), n * sizeof(float)) == nullptr);
  be.api->free_tensor(be.self, f);
  return std::vector<double>(v.begin(), v.end());
}

// A device tensor of dtype dt holding vals (uploaded as f32 and cast).
DLTensor* upload(const loom_backend_ref& be, DLDataType dt, const std::vector<double>& vals) {
  int64_t n = (int64_t)vals.size();
  DLTensor *f = nullptr, *t = nullptr;
  REQUIRE(be.api->alloc_tensor(be.self, loom_f32(), 1, &n, &f) == nullptr);
  REQUIRE(be.api->alloc_tensor(be.self, dt, 1, &n, &t) == nullptr);
  std::vector<float> v(vals.begin(), vals.end());
  REQUIRE(be.api->from_host(be.self, f, v.data(), n * sizeof(float)) == nullptr);
  REQUIRE(be.api->ops->copy(be.self, t, f) == nullptr);
  be.api->free_tensor(be.self, f);
  return t;
}

using modeltest::max_abs;

struct Instance : modeltest::ModelInstance {
  Instance(const std::string& comm_name, const loom::layout::Degrees* d,
           const std::map<std::string, std::string>& options)
      : ModelInstance(comm_name, d, "gpt", options, kVocab, kT, kB, loom_bf16(), 77) {}

  double run() {
    std::vector<int32_t> tok(kN), tgt(kN);
    for (int64_t i = 0; i < kN; ++i) {
      tok[i] = (int32_t)((i * 37 + 5) % kVocab);
      tgt[i] = i % 7 == 3 ? -1 : (int32_t)((i * 53 + 11) % kVocab);
    }
    loom::HostBatch mb(kB, kT);
    mb.tokens_targets(tok.data(), tgt.data());
    double loss = 0, n = 0;
    th.check(loom::model_step(api, m, mb.get(), 1.0 / 14, true, &loss, &n));
    th.check(api->finish_grads(m));
    return loss;
  }
  // sum over the tensor group of x (one double per rank)
  double tp_sum(double x) {
    loom_comm_group* g = nullptr;
    th.check(th.host()->get_group(th.host()->ctx, LOOM_GROUP_TENSOR, &g));
    int64_t one = 1;
    DLTensor t{};
    t.data = &x;
    t.device = {kDLCPU, 0};
    t.ndim = 1;
    t.dtype = loom_f64();
    t.shape = &one;
    th.check(loom::comm_all_reduce(comm, g, &t, LOOM_REDUCE_SUM));
    return x;
  }
};

}  // namespace

TEST_CASE("comm/mpi: bf16 and f16 all_reduce / reduce_scatter reduce in f32, move bits exactly") {
  auto& h = mpi_anchor();
  loom_comm_ref c{};
  h.check(h.host()->get_comm(h.host()->ctx, &c));
  const int n = c.api->world_size(c.self), r = c.api->world_rank(c.self);
  loomtest::TestHost bh;
  loom_backend_ref be = bh.load_backend("cpu", {{"measure_gemm", "false"}, {"threads", "1"}});
  for (DLDataType dt : {loom_bf16(), loom_f16()}) {
    // rank r holds (i + 1) / 8 * (r + 1): exact in both dtypes, and so is the sum
    const int64_t m = 6;
    std::vector<double> mine(m * n), want(m * n);
    for (int64_t i = 0; i < m * n; ++i) {
      mine[i] = (double)(i + 1) / 8 * (r + 1);
      want[i] = (double)(i + 1) / 8 * n * (n + 1) / 2;
    }
    DLTensor* t = upload(be, dt, mine);
    h.check(loom::comm_all_reduce(c, nullptr, t, LOOM_REDUCE_SUM));
    CHECK(download(be, t) == want);
    be.api->free_tensor(be.self, t);

    DLTensor* in = upload(be, dt, mine);
    DLTensor* out = upload(be, dt, std::vector<double>(m, 0.0));
    h.check(loom::comm_reduce_scatter(c, nullptr, in, out, LOOM_REDUCE_AVG));
    std::vector<double> avg(want.begin() + r * m, want.begin() + (r + 1) * m);
    for (double& x : avg) x /= n;
    CHECK(download(be, out) == avg);
    // all_gather moves the 16-bit words unchanged
    DLTensor* all = upload(be, dt, std::vector<double>(m * n, 0.0));
    h.check(loom::comm_all_gather(c, nullptr, out, all));
    for (auto& x : want) x /= n;
    CHECK(download(be, all) == want);
    for (DLTensor* x : {in, out, all}) be.api->free_tensor(be.self, x);
  }
}

// Tolerances: the losses are f32 sums over the same tokens, ~1e-5 apart in the runs seen;
// 2e-3 relative. Gradients: elementwise for replicated parameters, and as the norm over the
// tensor group for sharded ones (no reassembly needed), within 5e-2 of the reference's
// scale, as in test_gpt_mixed.cpp; a shard missing its reduction is off by O(1).
void check_tp(const std::map<std::string, std::string>& options) {
  auto& h = mpi_anchor();
  loom_comm_ref c{};
  h.check(h.host()->get_comm(h.host()->ctx, &c));
  if (c.api->world_size(c.self) != 2) return;
  Instance ref("single", nullptr, options);
  const double ref_loss = ref.run();
  loom::layout::Degrees d;
  d.tensor = 2;
  d.sequence_parallel = true;
  Instance par("mpi", &d, options);
  const double loss = par.run();
  CHECK(std::fabs(loss - ref_loss) <= 2e-3 * std::fabs(ref_loss));
  for (const loom_model_param& p : par.params) {
    const std::string name = p.name;
    CAPTURE(name);
    CHECK(loom_dtype_eq(p.value->dtype, loom_bf16()));
    CHECK(loom_dtype_eq(p.grad->dtype, loom_f32()));
    const loom_model_param* r = nullptr;
    for (auto& q : ref.params)
      if (name == q.name) r = &q;
    REQUIRE(r != nullptr);
    const auto g = download(par.be, p.grad), rg = download(ref.be, r->grad);
    REQUIRE(max_abs(rg) > 0);
    if (p.tp_split_dim < 0) {
      REQUIRE(g.size() == rg.size());
      double e = 0;
      for (size_t i = 0; i < g.size(); ++i) e = std::max(e, std::fabs(g[i] - rg[i]));
      CHECK(e <= 5e-2 * max_abs(rg));
    } else {
      double ss = 0, rss = 0;
      for (double x : g) ss += x * x;
      for (double x : rg) rss += x * x;
      CHECK(std::fabs(std::sqrt(par.tp_sum(ss)) - std::sqrt(rss)) <= 5e-2 * std::sqrt(rss));
    }
  }
}

TEST_CASE("model/gpt bf16: tensor + sequence parallel = 2 against one rank in bf16") {
  check_tp({{"n_layer", "2"}, {"n_head", "4"}, {"n_embd", "32"}, {"max_seq_len", "32"}});
  check_tp(modeltest::small_llama("2"));
}
