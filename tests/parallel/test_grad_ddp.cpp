// grad/ddp: at world size 1 over comm/single the gradients are their mean over the one
// rank, i.e. bitwise unchanged. A recording comm (defined here, behind the same ABI)
// checks that every gradient goes through an AVG all-reduce, with and without bucketing,
// over the host's data x context group, and simulates a second rank to check that packed buckets
// unpack to the right places.
#include <memory>
#include <string>
#include <vector>

#include "plugin_test_util.hpp"

using ptest::HostTensor;

namespace {

// ---- a recording comm: a world of `world` ranks where every other rank's tensor is
// `other_factor` times this rank's (so AVG over 2 ranks with factor 3 gives 2x) --------
struct loom_comm_fake {
  int world = 1;
  float other_factor = 3.0f;
  std::vector<loom_reduce_op> ops;
  std::vector<int64_t> numels;
  std::vector<const void*> buffers;
  std::vector<loom_comm_group*> groups;  // the group of each all-reduce
  std::vector<int> colors;
  int groups_alive = 0;
  std::vector<int> kinds_asked;  // of the host's get_group
};
loom_comm_fake g_fake;
int g_host_group;  // the address stands for the host's data x context group
loom_comm_group* host_group() { return reinterpret_cast<loom_comm_group*>(&g_host_group); }
int g_expert_group;  // and this one for its expert-data group (ABI 2.6)
loom_comm_group* expert_group() { return reinterpret_cast<loom_comm_group*>(&g_expert_group); }

loom_comm_fake* fake(loom_comm*) { return &g_fake; }

loom_error* fake_group_create(loom_comm* c, const loom_group_create_args* a,
                              loom_comm_group** out) {
  fake(c)->colors.assign(a->colors, a->colors + fake(c)->world);
  fake(c)->groups_alive++;
  *out = reinterpret_cast<loom_comm_group*>(&g_fake);
  return nullptr;
}
void fake_group_destroy(loom_comm* c, loom_comm_group* g) {
  if (g) fake(c)->groups_alive--;
}
int fake_world_size(loom_comm* c) { return fake(c)->world; }
int fake_rank(loom_comm*) { return 0; }
int fake_group_size(loom_comm* c, loom_comm_group*) { return fake(c)->world; }
loom_error* fake_all_reduce(loom_comm* c, const loom_comm_args* a) {
  loom_comm_fake* f = fake(c);
  DLTensor* t = a->out;
  const loom_reduce_op op = static_cast<loom_reduce_op>(a->op);
  loom_comm_group* g = a->group;
  f->ops.push_back(op);
  f->groups.push_back(g);
  f->numels.push_back(loom_tensor_numel(t));
  f->buffers.push_back(t->data);
  if (f->world > 1 && op == LOOM_REDUCE_AVG && loom_dtype_eq(t->dtype, loom_f32())) {
    float* x = reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
    const float scale = (1.0f + f->other_factor * (f->world - 1)) / static_cast<float>(f->world);
    for (int64_t i = 0; i < loom_tensor_numel(t); ++i) x[i] *= scale;
  }
  return nullptr;
}

loom_comm_api make_fake_api() {
  loom_comm_api api{};
  api.struct_size = LOOM_COMM_API_SIZE_V2;
  api.world_rank = fake_rank;
  api.world_size = fake_world_size;
  api.group_create = fake_group_create;
  api.group_destroy = fake_group_destroy;
  api.group_rank = [](loom_comm*, loom_comm_group*) { return 0; };
  api.group_size = fake_group_size;
  api.all_reduce = fake_all_reduce;
  return api;  // ddp must call nothing else
}
const loom_comm_api kFakeApi = make_fake_api();

// The test host's table, with get_comm answering the recording comm and get_group the
// host's group.
loom_host with_fake_comm(const loom_host* base) {
  loom_host h = *base;
  h.get_group = [](loom_host_context*, loom_group_kind k, loom_comm_group** out) -> loom_error* {
    g_fake.kinds_asked.push_back(k);
    *out = k == LOOM_GROUP_EXPERT_DATA ? expert_group() : host_group();
    return nullptr;
  };
  h.get_comm = [](loom_host_context*, loom_comm_ref* out) -> loom_error* {
    out->api = &kFakeApi;
    out->self = reinterpret_cast<loom_comm*>(&g_fake);
    return nullptr;
  };
  return h;
}

// A grad/ddp instance over the given gradients.
class Ddp {
 public:
  // kinds: ABI 2.6's reduce group of each gradient (empty: an ABI 2.0 caller, none given)
  Ddp(const loom_host* host, std::vector<DLTensor*> grads,
      const std::map<std::string, std::string>& values = {}, std::vector<int32_t> kinds = {})
      : grads_(std::move(grads)), kinds_(std::move(kinds)) {
    auto* d = loomtest::load_descriptor("grad", "ddp");
    api_ = static_cast<const loom_grad_api*>(d->api);
    cfg_ = loomtest::TestHost::config(d, values);
    const loom_grad_create_args args{
        kinds_.empty() ? LOOM_GRAD_CREATE_ARGS_SIZE_V2 : LOOM_GRAD_CREATE_ARGS_SIZE_V2_6,
        grads_.data(),
        grads_.size(),
        nullptr,
        kinds_.empty() ? nullptr : kinds_.data(),
        nullptr};
    created_ = ptest::outcome(api_->create(host, &cfg_, &args, &self_));
  }
  ~Ddp() { api_->destroy(self_); }
  const ptest::Outcome& created() const { return created_; }
  ptest::Outcome reduce() {
    const loom_grad_reduce_args all{LOOM_GRAD_REDUCE_ARGS_SIZE_V2, nullptr};
    return ptest::outcome(api_->reduce(self_, &all));
  }
  double bytes_per_param() { return api_->bytes_per_param(self_); }
  ptest::Outcome grad_ready(int64_t first, int64_t count) {
    return ptest::outcome(api_->grad_ready(self_, first, count));
  }

 private:
  const loom_grad_api* api_ = nullptr;
  loom_grad* self_ = nullptr;
  loom_config cfg_;
  std::vector<DLTensor*> grads_;
  std::vector<int32_t> kinds_;
  ptest::Outcome created_;
};

// A model-like set of gradients: a few matrices and many small vectors.
struct Grads {
  std::vector<std::unique_ptr<HostTensor<float>>> ts;
  std::vector<std::vector<float>> before;
  Grads() {
    const std::vector<std::vector<int64_t>> shapes = {{16, 8}, {8}, {8},      {8, 32},
                                                      {32},    {1}, {4, 4, 2}};
    float start = -1.0f;
    for (const auto& s : shapes) {
      ts.push_back(std::make_unique<HostTensor<float>>(s, loom_f32()));
      ptest::fill_iota(*ts.back(), start, 0.0625f);
      start += 0.5f;
      before.push_back(ts.back()->data);
    }
  }
  std::vector<DLTensor*> ptrs() {
    std::vector<DLTensor*> p;
    for (auto& t : ts) p.push_back(t->get());
    return p;
  }
  int64_t total() const {
    int64_t n = 0;
    for (const auto& t : ts) n += static_cast<int64_t>(t->data.size());
    return n;
  }
};

void reset_fake(int world) {
  g_fake = loom_comm_fake{};
  g_fake.world = world;
}

}  // namespace

TEST_CASE("grad/ddp: at world size 1 (comm/single) gradients equal their mean: unchanged") {
  loomtest::TestHost h;
  h.load_comm("single");
  Grads g;
  {
    Ddp ddp(h.host(), g.ptrs());
    REQUIRE_MESSAGE(ddp.created().ok(), ddp.created().message);
    for (int step = 0; step < 3; ++step) REQUIRE(ddp.reduce().ok());
  }
  for (size_t i = 0; i < g.ts.size(); ++i) CHECK(g.ts[i]->data == g.before[i]);
}

TEST_CASE("grad/ddp: at world size 1 each gradient is all-reduced in place with AVG") {
  loomtest::TestHost th;
  loom_host h = with_fake_comm(th.host());
  reset_fake(1);
  Grads g;
  {
    Ddp ddp(&h, g.ptrs());
    REQUIRE_MESSAGE(ddp.created().ok(), ddp.created().message);
    CHECK(g_fake.colors.empty());  // no group of its own: the host's data x context group
    CHECK(g_fake.kinds_asked == std::vector<int>{LOOM_GROUP_DATA_CONTEXT});
    REQUIRE(ddp.reduce().ok());
    CHECK(ddp.bytes_per_param() == 0.0);  // nothing packed at one rank
  }
  CHECK(g_fake.groups_alive == 0);
  REQUIRE(g_fake.ops.size() == g.ts.size());
  for (size_t i = 0; i < g.ts.size(); ++i) {
    CHECK(g_fake.ops[i] == LOOM_REDUCE_AVG);
    CHECK(g_fake.groups[i] == host_group());
    CHECK(g_fake.buffers[i] == g.ts[i]->data.data());  // no copy into a bucket
    CHECK(g.ts[i]->data == g.before[i]);
  }
}

TEST_CASE("grad/ddp: buckets pack small gradients and unpack the average correctly") {
  loomtest::TestHost th;
  loom_host h = with_fake_comm(th.host());
  Grads g;
  const int64_t total = g.total();

  SUBCASE("one bucket holds everything (default 25 MiB)") {
    reset_fake(2);
    Ddp ddp(&h, g.ptrs());
    REQUIRE(ddp.created().ok());
    REQUIRE(ddp.reduce().ok());
    REQUIRE(g_fake.ops.size() == 1);
    CHECK(g_fake.ops[0] == LOOM_REDUCE_AVG);
    CHECK(g_fake.groups[0] == host_group());
    CHECK(g_fake.numels[0] == total);
    CHECK(ddp.bytes_per_param() == 4.0);  // one f32 bucket as large as the gradients
  }
  SUBCASE("small buckets: several all-reduces, a large tensor alone and in place") {
    reset_fake(2);
    // 600 bytes = 150 floats: {16,8} (128) fits alone, {8,32} (256) exceeds a bucket
    Ddp ddp(&h, g.ptrs(), {{"bucket_mb", std::to_string(600.0 / (1024.0 * 1024.0))}});
    REQUIRE(ddp.created().ok());
    REQUIRE(ddp.reduce().ok());
    CHECK(g_fake.ops.size() > 2);
    CHECK(g_fake.ops.size() < g.ts.size());
    int64_t sum = 0;
    bool big_in_place = false;
    for (size_t i = 0; i < g_fake.ops.size(); ++i) {
      CHECK(g_fake.ops[i] == LOOM_REDUCE_AVG);
      CHECK(g_fake.numels[i] <= 256);
      sum += g_fake.numels[i];
      big_in_place |= g_fake.buffers[i] == g.ts[3]->data.data();
    }
    CHECK(sum == total);
    CHECK(big_in_place);
  }
  SUBCASE("bucket_mb = 0: one all-reduce per tensor") {
    reset_fake(2);
    Ddp ddp(&h, g.ptrs(), {{"bucket_mb", "0"}});
    REQUIRE(ddp.created().ok());
    REQUIRE(ddp.reduce().ok());
    CHECK(g_fake.ops.size() == g.ts.size());
    CHECK(ddp.bytes_per_param() == 0.0);
  }
  // the other rank holds 3x this rank's gradient: the average is exactly 2x everywhere
  for (size_t i = 0; i < g.ts.size(); ++i)
    for (size_t j = 0; j < g.ts[i]->data.size(); ++j)
      REQUIRE(g.ts[i]->data[j] == 2.0f * g.before[i][j]);
}

TEST_CASE(
    "grad/ddp: expert gradients are averaged over the expert-data group, never packed "
    "with others") {
  loomtest::TestHost th;
  loom_host h = with_fake_comm(th.host());
  reset_fake(2);
  Grads g;
  const int32_t D = LOOM_GROUP_DATA_CONTEXT, X = LOOM_GROUP_EXPERT_DATA;
  // runs: {D, D}, {X, X}, {D}, {X}, {D}: five buckets under the default 25 MiB
  const std::vector<int32_t> kinds = {D, D, X, X, D, X, D};
  {
    Ddp ddp(&h, g.ptrs(), {}, kinds);
    REQUIRE_MESSAGE(ddp.created().ok(), ddp.created().message);
    CHECK(g_fake.kinds_asked == std::vector<int>{D, X});  // each group asked for once
    REQUIRE(ddp.reduce().ok());
  }
  const std::vector<int64_t> numels = {16 * 8 + 8, 8 + 8 * 32, 32, 1, 4 * 4 * 2};
  REQUIRE(g_fake.ops.size() == numels.size());
  for (size_t i = 0; i < numels.size(); ++i) {
    CHECK(g_fake.ops[i] == LOOM_REDUCE_AVG);
    CHECK(g_fake.numels[i] == numels[i]);
    CHECK(g_fake.groups[i] == (i % 2 == 0 ? host_group() : expert_group()));
  }
  for (size_t i = 0; i < g.ts.size(); ++i)  // the average over the fake's 2 ranks: 2x
    for (size_t j = 0; j < g.ts[i]->data.size(); ++j)
      REQUIRE(g.ts[i]->data[j] == 2.0f * g.before[i][j]);

  reset_fake(2);
  Ddp bad(&h, g.ptrs(), {}, {D, D, LOOM_GROUP_TENSOR, X, D, X, D});
  CHECK(bad.created().message.find("reduce group 1") != std::string::npos);
}

TEST_CASE("grad/ddp: no comm, NULL gradients and the schema") {
  loomtest::TestHost h;  // no comm loaded
  Grads g;
  Ddp none(h.host(), g.ptrs());
  CHECK_FALSE(none.created().ok());
  CHECK(none.created().message.find("comm") != std::string::npos);

  h.load_comm("single");
  std::vector<DLTensor*> with_null = g.ptrs();
  with_null[2] = nullptr;
  Ddp bad(h.host(), with_null);
  CHECK(bad.created().message.find("gradient 2 is NULL") != std::string::npos);

  Ddp empty(h.host(), {});
  REQUIRE(empty.created().ok());
  CHECK(empty.reduce().ok());

  auto* d = loomtest::load_descriptor("grad", "ddp");
  CHECK(d->kind == LOOM_KIND_GRAD);
  const auto* api = static_cast<const loom_grad_api*>(d->api);
  CHECK(api->struct_size == LOOM_GRAD_API_SIZE_V2_12);
  CHECK((api->grad_ready != nullptr));
  CHECK((api->shard_params == nullptr));
  CHECK((api->shard_params == nullptr));
  CHECK((api->after_step == nullptr));
  CHECK((api->bytes_per_param != nullptr));
  REQUIRE(d->num_params == 3);
  CHECK(std::string(d->params[0].name) == "bucket_mb");
  CHECK(d->params[0].type == LOOM_PARAM_FLOAT);
  CHECK(std::string(d->params[0].default_value) == "25");
  CHECK(std::string(d->params[1].name) == "bucket_size");
  CHECK(std::string(d->params[2].name) == "overlap_grad_reduce");
  CHECK(std::string(d->params[2].default_value) == "false");
}

// A model's gradients lie back to back in one flat buffer: buckets are views of it, reduced in
// place with no copy. With overlap_grad_reduce a bucket's all-reduce starts inside the
// grad_ready that makes its last gradient final (the fake comm predates ABI 2.12, so
// loom::comm_start runs it there and then), and reduce does the rest.
TEST_CASE(
    "grad/ddp: adjacent gradients are reduced through one view; overlap starts a bucket "
    "at its last gradient's grad_ready") {
  loomtest::TestHost th;
  loom_host h = with_fake_comm(th.host());
  std::vector<float> flat(600), before(600);
  for (size_t i = 0; i < flat.size(); ++i) before[i] = flat[i] = 0.25f * float(i % 37) - 3.0f;
  int64_t shape[1] = {100};
  std::vector<DLTensor> ts(6);
  std::vector<DLTensor*> ptrs;
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i].data = flat.data();
    ts[i].device = DLDevice{kDLCPU, 0};
    ts[i].ndim = 1;
    ts[i].dtype = loom_f32();
    ts[i].shape = shape;
    ts[i].byte_offset = i * 100 * sizeof(float);
    ptrs.push_back(&ts[i]);
  }
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    reset_fake(2);
    // 200 elements a bucket: {0, 1}, {2, 3}, {4, 5}
    Ddp ddp(&h, ptrs,
            {{"bucket_size", "200"}, {"overlap_grad_reduce", overlap ? "true" : "false"}});
    REQUIRE_MESSAGE(ddp.created().ok(), ddp.created().message);
    CHECK(ddp.bytes_per_param() == 0.0);  // views: nothing packed
    REQUIRE(ddp.grad_ready(5, 1).ok());
    REQUIRE(ddp.grad_ready(4, 1).ok());  // bucket {4, 5} complete
    REQUIRE(ddp.grad_ready(0, 1).ok());
    CHECK(g_fake.ops.size() == (overlap ? 1u : 0u));
    REQUIRE(ddp.reduce().ok());
    REQUIRE(g_fake.ops.size() == 3);
    for (size_t k = 0; k < 3; ++k) {
      CHECK(g_fake.numels[k] == 200);
      CHECK(g_fake.buffers[k] == flat.data());  // in place: a view of the flat buffer
    }
    for (size_t i = 0; i < flat.size(); ++i) REQUIRE(flat[i] == 2.0f * before[i]);
    // the next step starts afresh: nothing is final until announced again
    reset_fake(2);
    REQUIRE(ddp.grad_ready(2, 2).ok());
    CHECK(g_fake.ops.size() == (overlap ? 1u : 0u));
    REQUIRE(ddp.reduce().ok());
    CHECK(g_fake.ops.size() == 3);
    for (size_t i = 0; i < flat.size(); ++i) flat[i] = before[i];
  }
  reset_fake(2);
  Ddp ddp(&h, ptrs, {{"overlap_grad_reduce", "true"}});
  CHECK(ddp.grad_ready(5, 2).message.find("grad_ready of gradients [5, 7), of 6") !=
        std::string::npos);
}
