// The pipeline schedules (gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipev) under mpirun (np
// 2, 4) and as an MPI singleton, driving a toy model defined here behind loom_model_api: stage s
// computes y = tanh(W_s x) on (rows, H) f64 activations; the first stage embeds the tokens, the
// last scores y against the targets. Every rank recomputes the whole network sequentially for every
// micro-batch and compares the two named loss terms ("toy", which drives the gradients, and "aux",
// reported with weight 0), the token count and its own stages' weight gradients with what the
// schedule produced.
//
// The toy model is strict about the stage contract, so a schedule that bends it fails:
// it keeps a pointer to its input (not a copy) and checks at backward that the input is
// unchanged; poisons the previous dinput at every stage call (valid "until the next stage
// call"); poisons a slot's output after its backward; refuses a busy slot. Activations are
// 128 x 72 f64 (72 KiB), above OpenMPI's eager limit, so every send waits for its receive.
// Receivers learn shapes from stage_info, never by fetching: only the stages that read
// batch arrays (the first reads tokens, the last targets) fetch, once per micro-batch.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/model_step.hpp"
#include "mpi_world.hpp"
#include "plugin_test_util.hpp"

namespace {

constexpr int64_t kH = 72, kB = 2;
constexpr double kLossScale = 0.01;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr int64_t kT = 64;
int32_t token(int64_t i, int64_t r) { return static_cast<int32_t>((i * 31 + r * 7) % 50); }
int32_t target(int64_t i, int64_t r) { return (r % 5 == 3) ? -1 : (token(i, r) + 1) % 50; }
double embed(int32_t tok, int64_t h) { return 0.8 * std::sin(0.1 * tok + 0.3 * h); }
double score(int32_t tg, int64_t h) { return 0.5 * std::cos(0.37 * tg + 0.5 * h); }
double weight(int64_t s, int64_t h, int64_t k) {
  return 1.2 * std::sin(1.7 * s + 0.31 * h + 0.57 * k + 0.1 * h * k) / std::sqrt(double(kH));
}

// ---- the toy network's math, shared by the model and the reference -------------------
// y(n,H) = tanh(x(n,H) W^T)
void stage_fwd(const std::vector<double>& W, const double* x, int64_t n, double* y) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < kH; ++h) {
      double z = 0;
      for (int64_t k = 0; k < kH; ++k) z += W[h * kH + k] * x[t * kH + k];
      y[t * kH + h] = std::tanh(z);
    }
}
// dW += dz^T x, dx = dz W (if dx), dz = dy * (1 - y^2)
void stage_bwd(const std::vector<double>& W, const double* x, const double* y, const double* dy,
               int64_t n, std::vector<double>& dW, double* dx) {
  std::vector<double> dz(n * kH);
  for (int64_t j = 0; j < n * kH; ++j) dz[j] = dy[j] * (1 - y[j] * y[j]);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t k = 0; k < kH; ++k) dW[h * kH + k] += dz[t * kH + h] * x[t * kH + k];
  if (!dx) return;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < kH; ++k) {
      double a = 0;
      for (int64_t h = 0; h < kH; ++h) a += dz[t * kH + h] * W[h * kH + k];
      dx[t * kH + k] = a;
    }
}
// loss = sum over counted rows of y . score(target); dy = loss_scale * score
double loss_of(const double* y, const int32_t* tg, int64_t n, int64_t* counted, double* dy) {
  double l = 0;
  *counted = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < kH; ++h) {
      const double c = tg[t] < 0 ? 0.0 : score(tg[t], h);
      l += y[t * kH + h] * c;
      if (dy) dy[t * kH + h] = kLossScale * c;
    }
  for (int64_t t = 0; t < n; ++t) *counted += tg[t] >= 0;
  return l;
}

// ---- the toy model behind loom_model_api ------------------------------------------------
DLTensor host_view(double* data, int64_t* shape) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = loom_f64();
  t.shape = shape;
  return t;
}

struct Slot {
  bool busy = false;
  int64_t n = 0;
  const double* x = nullptr;  // the caller's input, NOT copied (or own_x on the first stage)
  std::vector<double> own_x, x_copy, y, out;
  std::vector<int32_t> targets;
  int64_t shape[2] = {0, kH};
  DLTensor out_t{};
  DLTensor* out_ptr = nullptr;
};

}  // namespace

struct loom_model {
  int64_t stage = 0, stages = 1;
  std::vector<double> W, dW;
  std::map<int64_t, Slot> slots;
  std::vector<double> dx;
  int64_t dx_shape[2] = {0, kH};
  DLTensor dx_t{};
  DLTensor* dx_ptr = nullptr;
  std::vector<const char*> reads;
  loom_stage_tensor io{};
  int64_t io_shape[2] = {0, kH};
  loom_loss losses[2]{};
  int64_t forwards = 0, backwards = 0;
  bool lie = false;   // stage_info reports the wrong is_first (a refusal test)
  std::string error;  // the first contract violation seen
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  void fail(const std::string& e) {
    if (error.empty()) error = "stage " + std::to_string(stage) + ": " + e;
  }
  void poison_dx() { std::fill(dx.begin(), dx.end(), kNaN); }
};

namespace {

loom_error* err(const std::string& m) { return new loom_error{LOOM_ERR_INVALID_ARGUMENT, m}; }

const char* const kLossNames[2] = {"toy", "aux"};

// sum of every y: the "aux" term, reported but not in the objective (weight 0)
double aux_of(const double* y, int64_t n) {
  double a = 0;
  for (int64_t j = 0; j < n * kH; ++j) a += y[j];
  return a;
}

loom_error* toy_stage_info(loom_model* m, loom_stage_info* out) {
  out->is_first = m->first() != m->lie;
  out->is_last = m->last();
  m->reads.clear();
  if (m->first()) m->reads.push_back(LOOM_ARRAY_TOKENS);
  if (m->last()) m->reads.push_back(LOOM_ARRAY_TARGETS);
  out->num_reads = m->reads.size();
  out->reads = m->reads.data();
  m->io_shape[0] = out->batch * out->seq_len;
  m->io = loom_stage_tensor{LOOM_STAGE_TENSOR_SIZE_V2, "y", loom_f64(), 2, m->io_shape};
  out->num_inputs = m->first() ? 0 : 1;
  out->inputs = &m->io;
  out->num_outputs = m->last() ? 0 : 1;
  out->outputs = &m->io;
  out->num_losses = 2;
  out->losses = kLossNames;
  return nullptr;
}

const int32_t* ids(const loom_microbatch* mb, const char* name) {
  const DLTensor* t = loom_microbatch_find(mb, name);
  return t ? static_cast<const int32_t*>(t->data) : nullptr;
}

loom_error* toy_stage_forward(loom_model* m, loom_stage_forward_args* a) {
  m->poison_dx();
  Slot& s = m->slots[a->slot];
  if (s.busy) m->fail("forward into busy slot " + std::to_string(a->slot));
  const int64_t n = a->mb->batch * a->mb->seq_len;
  s.n = n;
  if (m->first()) {
    if (a->num_inputs) m->fail("first stage got an input");
    const int32_t* tokens = ids(a->mb, LOOM_ARRAY_TOKENS);
    if (!tokens) return err("toy: the first stage got no tokens");
    s.own_x.resize(n * kH);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < kH; ++h) s.own_x[t * kH + h] = embed(tokens[t], h);
    s.x = s.own_x.data();
  } else {
    const DLTensor* input = a->num_inputs == 1 ? a->inputs[0] : nullptr;
    if (!input || loom_tensor_numel(input) != n * kH || !loom_dtype_eq(input->dtype, loom_f64()))
      return err("toy: stage " + std::to_string(m->stage) + " input missing or misshapen");
    s.x =
        reinterpret_cast<const double*>(static_cast<const char*>(input->data) + input->byte_offset);
    s.x_copy.assign(s.x, s.x + n * kH);
  }
  s.y.resize(n * kH);
  stage_fwd(m->W, s.x, n, s.y.data());
  a->num_outputs = a->num_losses = 0;
  if (m->last()) {
    const int32_t* targets = ids(a->mb, LOOM_ARRAY_TARGETS);
    if (!targets) return err("toy: the last stage got no targets");
    int64_t counted = 0;
    const double loss = loss_of(s.y.data(), targets, n, &counted, nullptr);
    s.targets.assign(targets, targets + n);
    m->losses[0] = loom_loss{LOOM_LOSS_SIZE_V2, kLossNames[0], loss, double(counted), 1.0};
    m->losses[1] =
        loom_loss{LOOM_LOSS_SIZE_V2, kLossNames[1], aux_of(s.y.data(), n), double(n), 0.0};
    a->num_losses = 2;
    a->losses = m->losses;
  } else {
    s.out = s.y;
    s.shape[0] = n;
    s.out_t = host_view(s.out.data(), s.shape);
    s.out_ptr = &s.out_t;
    a->num_outputs = 1;
    a->outputs = &s.out_ptr;
  }
  ++m->forwards;
  s.busy = !a->no_grad;
  return nullptr;
}

loom_error* toy_stage_backward(loom_model* m, loom_stage_backward_args* a) {
  m->poison_dx();
  auto it = m->slots.find(a->slot);
  if (it == m->slots.end() || !it->second.busy)
    return err("toy: backward of free slot " + std::to_string(a->slot));
  Slot& s = it->second;
  const int64_t n = s.n;
  if (!m->first() && !std::equal(s.x_copy.begin(), s.x_copy.end(), s.x))
    m->fail("input of slot " + std::to_string(a->slot) + " changed before its backward");
  std::vector<double> dy(n * kH);
  if (m->last()) {
    if (a->num_doutputs) m->fail("last stage got a doutput");
    int64_t c = 0;
    loss_of(s.y.data(), s.targets.data(), n, &c, dy.data());
  } else {
    const DLTensor* doutput = a->num_doutputs == 1 ? a->doutputs[0] : nullptr;
    if (!doutput || loom_tensor_numel(doutput) != n * kH)
      return err("toy: stage " + std::to_string(m->stage) + " doutput missing or misshapen");
    const double* g = reinterpret_cast<const double*>(static_cast<const char*>(doutput->data) +
                                                      doutput->byte_offset);
    dy.assign(g, g + n * kH);
    for (double v : dy)
      if (std::isnan(v)) m->fail("doutput holds poison (sent after it was invalid)");
  }
  m->dx.resize(n * kH);
  stage_bwd(m->W, s.x, s.y.data(), dy.data(), n, m->dW, m->first() ? nullptr : m->dx.data());
  a->num_dinputs = 0;
  if (!m->first()) {
    m->dx_shape[0] = n;
    m->dx_t = host_view(m->dx.data(), m->dx_shape);
    m->dx_ptr = &m->dx_t;
    a->num_dinputs = 1;
    a->dinputs = &m->dx_ptr;
  }
  std::fill(s.out.begin(), s.out.end(), kNaN);  // the output is invalid after the backward
  s.busy = false;
  ++m->backwards;
  return nullptr;
}

loom_model_api make_toy_api() {
  loom_model_api api{};
  api.struct_size = LOOM_MODEL_API_SIZE_V2;
  api.stage_info = toy_stage_info;
  api.stage_forward = toy_stage_forward;
  api.stage_backward = toy_stage_backward;
  return api;  // the schedules must call nothing else
}
const loom_model_api kToyApi = make_toy_api();

// ---- micro-batches: a buffer that is overwritten (poisoned) at every call --------------
struct Feed {
  std::vector<int32_t> tokens = std::vector<int32_t>(kB * kT),
                       targets = std::vector<int32_t>(kB * kT);
  loom::HostBatch batch{kB, kT};
  std::map<int64_t, int> calls;
  Feed() { batch.tokens_targets(tokens.data(), targets.data()); }
};
loom_error* get_microbatch(void* user, int64_t i, loom_microbatch* out) {
  Feed* f = static_cast<Feed*>(user);
  std::fill(f->tokens.begin(), f->tokens.end(), -7);  // stale data from the previous call
  std::fill(f->targets.begin(), f->targets.end(), -7);
  for (int64_t r = 0; r < kB * kT; ++r) {
    f->tokens[r] = token(i, r);
    f->targets[r] = target(i, r);
  }
  *out = *f->batch.get();
  f->calls[i]++;
  return nullptr;
}

// ---- the sequential reference: all S stages on one rank -------------------------------
struct Reference {
  double loss = 0, aux = 0;
  int64_t tokens = 0;
  std::vector<std::vector<double>> dW;  // per stage
};
Reference reference(int64_t S, int64_t M) {
  Reference ref;
  ref.dW.assign(S, std::vector<double>(kH * kH, 0.0));
  std::vector<std::vector<double>> W(S, std::vector<double>(kH * kH));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < kH * kH; ++j) W[s][j] = weight(s, j / kH, j % kH);
  for (int64_t i = 0; i < M; ++i) {
    const int64_t n = kB * kT;
    std::vector<std::vector<double>> act(S + 1, std::vector<double>(n * kH));
    std::vector<int32_t> tg(n);
    for (int64_t r = 0; r < n; ++r) {
      tg[r] = target(i, r);
      for (int64_t h = 0; h < kH; ++h) act[0][r * kH + h] = embed(token(i, r), h);
    }
    for (int64_t s = 0; s < S; ++s) stage_fwd(W[s], act[s].data(), n, act[s + 1].data());
    std::vector<double> dy(n * kH), dx(n * kH);
    int64_t c = 0;
    ref.loss += loss_of(act[S].data(), tg.data(), n, &c, dy.data());
    ref.tokens += c;
    ref.aux += aux_of(act[S].data(), n);
    for (int64_t s = S - 1; s >= 0; --s) {
      stage_bwd(W[s], act[s].data(), act[s + 1].data(), dy.data(), n, ref.dW[s], dx.data());
      dy = dx;
    }
  }
  return ref;
}

// ---- the world: one comm (MPI is initialised once per process) and a CPU backend -------
using World = loomtest::MpiWorld;
World& world() {
  static World w;
  return w;
}

// A layout over the world with its groups, seen by plugins through a copy of the test
// host's table whose get_layout/get_group answer from here.
struct Parallel {
  loom_parallel_layout layout{};
  std::vector<loom_comm_group*> groups;
  loom_host host{};
  static Parallel*& current() {
    static Parallel* p = nullptr;
    return p;
  }
  explicit Parallel(const loom::layout::Degrees& d) {
    World& w = world();
    REQUIRE(loom::layout::problems(d, w.size).empty());
    layout = loom::layout::coordinates(d, w.size, w.rank);
    groups.assign(loom::layout::kNumGroupKinds, nullptr);
    for (loom_group_kind k : loom::layout::kAllGroups) {
      std::vector<int> colors = loom::layout::colors(d, w.size, k);
      w.host.check(
          loom::comm_group_create(w.comm, colors.data(), loom::layout::group_name(k), &groups[k]));
    }
    host = *w.host.host();
    host.get_layout = [](loom_host_context*, loom_parallel_layout* out) -> loom_error* {
      loom::layout::copy_layout(current()->layout, out);
      return nullptr;
    };
    host.get_group = [](loom_host_context*, loom_group_kind k,
                        loom_comm_group** out) -> loom_error* {
      *out = current()->groups[k];
      return nullptr;
    };
    current() = this;
  }
  ~Parallel() {
    for (loom_comm_group* g : groups) world().comm.api->group_destroy(world().comm.self, g);
    current() = nullptr;
  }
};

struct Run {
  ptest::Outcome order, created, ran;
  double loss = 0, aux = 0, aux_count = 0, aux_weight = -1;
  int64_t tokens = 0;
  std::vector<std::unique_ptr<loom_model>> chunks;
  Feed feed;
};

// Runs `schedule` once over this rank's chunks of a P x V pipeline.
Run run(const Parallel& par, const std::string& schedule, int64_t M, bool forward_only) {
  const int P = par.layout.pipeline, V = par.layout.virtual_stages, p = par.layout.pipeline_rank;
  Run r;
  auto* d = loomtest::load_descriptor("schedule", schedule);
  REQUIRE(d->kind == LOOM_KIND_SCHEDULE);
  // The chunks' stages as the schedule places them (loom.schedule-order/1), or its refusal
  const auto* ox = reinterpret_cast<const loom_schedule_order_ext*>(
      loom_ext_find(d->ext, LOOM_EXT_SCHEDULE_ORDER));
  REQUIRE(ox != nullptr);
  loom_schedule_order_args oa{};
  oa.struct_size = LOOM_SCHEDULE_ORDER_ARGS_SIZE_V2_19;
  oa.pipeline = P;
  oa.virtual_stages = V;
  oa.num_microbatches = M;
  r.order = ptest::outcome(ox->order(&par.host, &oa));
  if (!r.order.ok()) return r;
  std::vector<loom_model*> ptrs;
  for (int v = 0; v < oa.chunks; ++v) {
    auto m = std::make_unique<loom_model>();
    m->stage = oa.stages[p * oa.chunks + v];
    m->stages = int64_t(P) * oa.chunks;
    m->W.resize(kH * kH);
    m->dW.assign(kH * kH, 0.0);
    for (int64_t j = 0; j < kH * kH; ++j) m->W[j] = weight(m->stage, j / kH, j % kH);
    ptrs.push_back(m.get());
    r.chunks.push_back(std::move(m));
  }
  const auto* api = static_cast<const loom_schedule_api*>(d->api);
  REQUIRE(api->struct_size >= LOOM_SCHEDULE_API_SIZE_V2);
  loom_config cfg = loomtest::TestHost::config(d);
  loom_schedule* self = nullptr;
  r.created = ptest::outcome(api->create(&par.host, &cfg, &self));
  if (!r.created.ok()) return r;
  loom_schedule_args a{};
  a.struct_size = LOOM_SCHEDULE_ARGS_SIZE_V2;
  a.model_api = &kToyApi;
  a.chunks = ptrs.data();
  a.num_chunks = ptrs.size();
  a.num_microbatches = M;
  a.batch = kB;
  a.seq_len = kT;
  a.loss_scale = kLossScale;
  a.get_microbatch = get_microbatch;
  a.user = &r.feed;
  a.forward_only = forward_only;
  r.ran = ptest::outcome(api->run(self, &a));
  if (r.ran.ok()) {
    REQUIRE(a.num_losses == 2);
    CHECK(std::string(a.losses[0].name) == "toy");
    CHECK(std::string(a.losses[1].name) == "aux");
    r.loss = a.losses[0].sum;
    r.tokens = static_cast<int64_t>(a.losses[0].count);
    CHECK(a.losses[0].weight == 1.0);
    r.aux = a.losses[1].sum;
    r.aux_count = a.losses[1].count;
    r.aux_weight = a.losses[1].weight;
  }
  api->destroy(self);
  return r;
}

void check_against_reference(const Run& r, int64_t M, bool forward_only) {
  REQUIRE_MESSAGE(r.created.ok(), r.created.message);
  REQUIRE_MESSAGE(r.ran.ok(), r.ran.message);
  const int64_t S = r.chunks.front()->stages;
  const Reference ref = reference(S, M);
  CHECK(r.tokens == ref.tokens);
  CHECK(r.loss == doctest::Approx(ref.loss).epsilon(1e-12));
  CHECK(r.aux == doctest::Approx(ref.aux).epsilon(1e-12));
  CHECK(r.aux_count == double(M * kB * kT));
  CHECK(r.aux_weight == 0.0);
  for (const auto& m : r.chunks) {
    CAPTURE(m->stage);
    CHECK_MESSAGE(m->error.empty(), m->error);
    CHECK(m->forwards == M);
    CHECK(m->backwards == (forward_only ? 0 : M));
    for (const auto& [slot, s] : m->slots) CHECK_FALSE(s.busy);  // every slot freed
    double worst = 0, scale = 0;
    for (int64_t j = 0; j < kH * kH; ++j) {
      const double want = forward_only ? 0.0 : ref.dW[m->stage][j];
      worst = std::max(worst, std::abs(m->dW[j] - want));
      scale = std::max(scale, std::abs(want));
    }
    CHECK(worst <= 1e-12 * std::max(scale, 1.0));
    if (!forward_only) CHECK(scale > 1e-6);  // the gradients are not trivially zero
  }
  // Fetched once per micro-batch by each chunk that reads the batch, never by the others.
  int readers = 0;
  for (const auto& m : r.chunks) readers += m->first() || m->last();
  for (int64_t i = 0; i < M; ++i) {
    const auto it = r.feed.calls.find(i);
    CHECK((it == r.feed.calls.end() ? 0 : it->second) == readers);
  }
}

}  // namespace

TEST_CASE("the toy reference's gradient matches finite differences") {
  // d(loss_scale * loss)/dW for one element of the first and the last stage
  const int64_t S = 3, M = 2;
  const Reference ref = reference(S, M);
  auto loss_with = [&](int64_t stage, int64_t j, double delta) {
    std::vector<std::vector<double>> W(S, std::vector<double>(kH * kH));
    for (int64_t s = 0; s < S; ++s)
      for (int64_t q = 0; q < kH * kH; ++q) W[s][q] = weight(s, q / kH, q % kH);
    W[stage][j] += delta;
    double l = 0;
    for (int64_t i = 0; i < M; ++i) {
      const int64_t n = kB * kT;
      std::vector<double> x(n * kH), y(n * kH);
      std::vector<int32_t> tg(n);
      for (int64_t r = 0; r < n; ++r) {
        tg[r] = target(i, r);
        for (int64_t h = 0; h < kH; ++h) x[r * kH + h] = embed(token(i, r), h);
      }
      for (int64_t s = 0; s < S; ++s) {
        stage_fwd(W[s], x.data(), n, y.data());
        x = y;
      }
      int64_t c = 0;
      l += loss_of(x.data(), tg.data(), n, &c, nullptr);
    }
    return kLossScale * l;
  };
  for (int64_t stage : {int64_t(0), S - 1})
    for (int64_t j : {int64_t(5), int64_t(kH * 3 + 17)}) {
      const double h = 1e-5;
      const double fd = (loss_with(stage, j, h) - loss_with(stage, j, -h)) / (2 * h);
      CHECK(ref.dW[stage][j] == doctest::Approx(fd).epsilon(1e-6));
    }
}

TEST_CASE("pipeline schedules equal the sequential network, forward_only gives its loss") {
  World& w = world();
  // (pipeline, virtual stages) layouts on this world: the whole world as one pipeline, and
  // at 4 ranks also 2 pipelines of 2 (data = 2: the pipeline group is not the world)
  std::vector<std::pair<int, int>> layouts = {{w.size, 1}};
  if (w.size > 1) layouts.push_back({w.size, 2});
  if (w.size == 4) {
    layouts.push_back({2, 1});
    layouts.push_back({2, 2});
  }
  for (auto [P, V] : layouts) {
    Parallel par(loom::layout::Degrees{.pipeline = P, .virtual_stages = V});
    for (const std::string sched :
         {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipev"})
      for (int64_t M : {int64_t(4), int64_t(8), int64_t(3)})
        for (bool fo : {false, true}) {
          CAPTURE(P);
          CAPTURE(V);
          CAPTURE(sched);
          CAPTURE(M);
          CAPTURE(fo);
          Run r = run(par, sched, M, fo);
          if ((sched == "1f1b" || sched == "zb-h1") && V > 1) {
            CHECK(r.order.message.find("runs one model chunk per rank") != std::string::npos);
            continue;
          }
          if ((sched == "zb-v" || sched == "dualpipev") && V != 2) {
            CHECK(r.order.message.find("two model chunks per rank in a V") != std::string::npos);
            continue;
          }
          if (sched == "interleaved-1f1b" && V > 1 && M % P != 0) {
            CHECK(r.order.message.find("micro-batches (" + std::to_string(M) +
                                       ") to be a multiple of pipeline (" + std::to_string(P)) !=
                  std::string::npos);
            continue;
          }
          if (sched == "dualpipev" && M < 2 * P) {
            CHECK(r.order.message.find("at least 2 x pipeline") != std::string::npos);
            continue;
          }
          REQUIRE(r.order.ok());
          check_against_reference(r, M, fo);
        }
  }
}

TEST_CASE("pipeline refusals: chunk count, model without a stage API, wrong stage") {
  World& w = world();
  Parallel par(loom::layout::Degrees{.pipeline = w.size});
  auto* d = loomtest::load_descriptor("schedule", "1f1b");
  const auto* api = static_cast<const loom_schedule_api*>(d->api);
  loom_config cfg = loomtest::TestHost::config(d);
  loom_schedule* self = nullptr;
  REQUIRE(ptest::outcome(api->create(&par.host, &cfg, &self)).ok());
  loom_model m;
  m.stage = w.rank;
  m.stages = w.size;
  loom_model* chunks[2] = {&m, &m};
  Feed feed;
  loom_schedule_args a{};
  a.struct_size = LOOM_SCHEDULE_ARGS_SIZE_V2;
  a.model_api = &kToyApi;
  a.chunks = chunks;
  a.num_chunks = 2;
  a.num_microbatches = 2;
  a.batch = kB;
  a.seq_len = kT;
  a.get_microbatch = get_microbatch;
  a.user = &feed;
  ptest::Outcome o = ptest::outcome(api->run(self, &a));
  CHECK(o.message.find("got 2 model chunks but runs 1 per rank") != std::string::npos);
  a.num_chunks = 1;
  loom_model_api old = kToyApi;
  old.struct_size = offsetof(loom_model_api, stage_info);  // a table that stops short
  a.model_api = &old;
  o = ptest::outcome(api->run(self, &a));
  CHECK(o.message.find("no stage API") != std::string::npos);
  a.model_api = &kToyApi;
  m.lie = true;  // every rank disagrees, so no rank goes on to exchange activations
  o = ptest::outcome(api->run(self, &a));
  CHECK(o.message.find("reports is_first") != std::string::npos);
  api->destroy(self);
}
