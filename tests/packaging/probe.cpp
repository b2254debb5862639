// Loads the out-of-tree example plugin named by $LOOM_EXAMPLE_PLUGIN (a path, built by
// run.sh against the installed SDK) the way a host does, checks its descriptor, and runs
// optimizer/signsgd steps on a minimal CPU backend defined here, against a reference.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_host.hpp"

namespace {

const loom_plugin_descriptor* g_desc = nullptr;
loom_plugin_entry_fn g_entry = nullptr;

void load() {
  if (g_desc) return;
  const char* path = std::getenv("LOOM_EXAMPLE_PLUGIN");
  REQUIRE_MESSAGE(path != nullptr, "set LOOM_EXAMPLE_PLUGIN to the example .so (run.sh does)");
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(h != nullptr, dlerror());
  g_entry = reinterpret_cast<loom_plugin_entry_fn>(dlsym(h, LOOM_PLUGIN_ENTRY_NAME));
  const bool has_entry = g_entry != nullptr;
  REQUIRE_MESSAGE(has_entry, "no loom_plugin_entry in ", path);
  g_desc = g_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  REQUIRE(g_desc != nullptr);
}

// ---- a CPU backend with just memory: alloc/free and host copies (no kernels) --------
struct Owned {
  DLTensor t;  // first member: a DLTensor* of ours converts back to Owned*
  std::vector<int64_t> shape;
  std::vector<char> data;
};
int g_live = 0;

loom_error* be_alloc(loom_backend*, DLDataType dtype, int ndim, const int64_t* shape,
                     DLTensor** out) {
  auto* o = new Owned{};
  o->shape.assign(shape, shape + ndim);
  o->t.ndim = ndim;
  o->t.shape = o->shape.data();
  o->t.dtype = dtype;
  o->t.device = DLDevice{kDLCPU, 0};
  o->data.assign(static_cast<size_t>(loom_tensor_numel(&o->t)) * loom_dtype_bytes(dtype), 0);
  o->t.data = o->data.data();
  ++g_live;
  *out = &o->t;
  return nullptr;
}
void be_free(loom_backend*, DLTensor* t) {
  if (!t) return;
  --g_live;
  delete reinterpret_cast<Owned*>(t);
}
size_t bytes_of(const DLTensor* t) {
  return static_cast<size_t>(loom_tensor_numel(t)) * loom_dtype_bytes(t->dtype);
}
loom_error* be_to_host(loom_backend*, const DLTensor* src, void* dst, size_t bytes) {
  if (bytes != bytes_of(src)) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "to_host: size"};
  std::memcpy(dst, static_cast<const char*>(src->data) + src->byte_offset, bytes);
  return nullptr;
}
loom_error* be_from_host(loom_backend*, DLTensor* dst, const void* src, size_t bytes) {
  if (bytes != bytes_of(dst)) return new loom_error{LOOM_ERR_INVALID_ARGUMENT, "from_host: size"};
  std::memcpy(static_cast<char*>(dst->data) + dst->byte_offset, src, bytes);
  return nullptr;
}
loom_backend_api make_backend_api() {
  loom_backend_api api{};
  api.struct_size = LOOM_BACKEND_API_SIZE_V2;
  api.alloc_tensor = be_alloc;
  api.free_tensor = be_free;
  api.to_host = be_to_host;
  api.from_host = be_from_host;
  api.synchronize = [](loom_backend*) -> loom_error* { return nullptr; };
  return api;
}
const loom_backend_api kBackendApi = make_backend_api();
int g_backend_self = 0;

loom_host host_with_backend(const loom_host* base) {
  loom_host h = *base;
  h.get_backend = [](loom_host_context*, loom_backend_ref* out) -> loom_error* {
    out->api = &kBackendApi;
    out->self = reinterpret_cast<loom_backend*>(&g_backend_self);
    return nullptr;
  };
  return h;
}

struct F32 {
  std::vector<float> v;
  std::vector<int64_t> shape;
  DLTensor t{};
  explicit F32(std::vector<float> x) : v(std::move(x)), shape{static_cast<int64_t>(v.size())} {
    t.data = v.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = loom_f32();
    t.shape = shape.data();
  }
};

float sgn(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }

}  // namespace

TEST_CASE("example plugin: descriptor") {
  load();
  CHECK(g_desc->struct_size >= LOOM_PLUGIN_DESCRIPTOR_SIZE_V2);
  CHECK(g_desc->abi_major == LOOM_ABI_MAJOR);
  CHECK(g_desc->kind == LOOM_KIND_OPTIMIZER);
  CHECK(std::string(g_desc->name) == "signsgd");
  CHECK(std::string(g_desc->vendor) == "Example Corp");
  CHECK(std::string(g_desc->license) == "MIT");
  REQUIRE(g_desc->num_params == 2);
  CHECK(std::string(g_desc->params[0].name) == "momentum");
  CHECK(std::string(g_desc->params[1].name) == "weight_decay");
  for (size_t i = 0; i < g_desc->num_params; ++i)
    CHECK(g_desc->params[i].struct_size >= LOOM_PARAM_SPEC_SIZE_V2);
  // the entry refuses a host of another ABI major, and is side-effect free (same answer)
  CHECK(g_entry(LOOM_ABI_MAJOR + 1, 0) == nullptr);
  CHECK(g_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR) == g_desc);
}

TEST_CASE("example plugin: optimizer/signsgd steps match Signum") {
  load();
  const auto* api = static_cast<const loom_optimizer_api*>(g_desc->api);
  REQUIRE(api->struct_size >= LOOM_OPTIMIZER_API_SIZE_V2);
  loomtest::TestHost th;
  loom_host host = host_with_backend(th.host());

  for (double beta : {0.0, 0.9}) {
    CAPTURE(beta);
    F32 w({0.5f, -0.25f, 0.0f, 2.0f}), g({1.0f, -2.0f, 0.0f, -0.1f});
    F32 b({1.0f, 1.0f}), gb({-3.0f, 0.5f});
    loom_opt_param params[2] = {
        {LOOM_OPT_PARAM_SIZE_V2, "h.0.w", &w.t, &g.t, 1},
        {LOOM_OPT_PARAM_SIZE_V2, "h.0.b", &b.t, &gb.t, 0},
    };
    loom_config cfg = loomtest::TestHost::config(
        g_desc, {{"momentum", std::to_string(beta)}, {"weight_decay", "0.5"}});
    loom_optimizer* opt = nullptr;
    const loom_opt_create_args args{LOOM_OPT_CREATE_ARGS_SIZE_V2, params, 2, nullptr};
    th.check(api->create(&host, &cfg, &args, &opt));

    // reference: the same two steps in plain C++
    std::vector<float> rw = w.v, rb = b.v, mw(4, 0.0f), mb(2, 0.0f);
    const float lr = 0.1f, wd = 0.5f, scale = 0.5f, bt = static_cast<float>(beta);
    for (int s = 1; s <= 2; ++s) {
      loom_opt_step_args step_args{LOOM_OPT_STEP_ARGS_SIZE_V2, lr, s, scale, nullptr};
      th.check(api->step(opt, &step_args));
      auto ref = [&](std::vector<float>& p, std::vector<float>& m, const std::vector<float>& gr,
                     float decay) {
        for (size_t i = 0; i < p.size(); ++i) {
          m[i] = bt > 0 ? bt * m[i] + (1 - bt) * scale * gr[i] : scale * gr[i];
          p[i] -= lr * (sgn(m[i]) + decay * p[i]);
        }
      };
      ref(rw, mw, g.v, wd);
      ref(rb, mb, gb.v, 0.0f);  // weight_decay = 0 for this tensor: the host said so
      for (size_t i = 0; i < 4; ++i) CHECK(w.v[i] == doctest::Approx(rw[i]).epsilon(1e-6));
      for (size_t i = 0; i < 2; ++i) CHECK(b.v[i] == doctest::Approx(rb[i]).epsilon(1e-6));
      g.v[3] = 0.3f;  // flip one gradient's sign for the second step
    }

    if (beta > 0) {
      REQUIRE(api->num_state(opt) == 2);
      const char* name = nullptr;
      DLTensor* t = nullptr;
      th.check(api->get_state(opt, 0, &name, &t));
      CHECK(std::string(name) == "exp_avg.h.0.w");
      const float* m = static_cast<const float*>(t->data);
      for (size_t i = 0; i < 4; ++i) CHECK(m[i] == doctest::Approx(mw[i]).epsilon(1e-6));
      loom_error* e = api->get_state(opt, 2, &name, &t);
      CHECK(e != nullptr);
      th.host()->error_free(e);
    } else {
      CHECK(api->num_state(opt) == 0);
    }
    api->destroy(opt);
    CHECK(g_live == 0);  // every state tensor went back to the backend
  }
  api->destroy(nullptr);
}

TEST_CASE("example plugin: errors come back as ABI errors, not exceptions") {
  load();
  const auto* api = static_cast<const loom_optimizer_api*>(g_desc->api);
  loomtest::TestHost th;
  loom_host host = host_with_backend(th.host());
  std::vector<int32_t> ints(4, 0);
  int64_t shape = 4;
  DLTensor t{};
  t.data = ints.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = loom_i32();
  t.shape = &shape;
  loom_opt_param p{LOOM_OPT_PARAM_SIZE_V2, "ints", &t, &t, 0};
  loom_config cfg = loomtest::TestHost::config(g_desc);
  loom_optimizer* opt = nullptr;
  const loom_opt_create_args one{LOOM_OPT_CREATE_ARGS_SIZE_V2, &p, 1, nullptr};
  loom_error* e = api->create(&host, &cfg, &one, &opt);
  REQUIRE(e != nullptr);
  CHECK(std::string(th.host()->error_message(e)).find("ints must be float32") != std::string::npos);
  th.host()->error_free(e);

  loom_config bad = loomtest::TestHost::config(g_desc, {{"momentum", "1.5"}});
  const loom_opt_create_args none{LOOM_OPT_CREATE_ARGS_SIZE_V2, nullptr, 0, nullptr};
  e = api->create(&host, &bad, &none, &opt);
  REQUIRE(e != nullptr);
  CHECK(std::string(th.host()->error_message(e)).find("momentum") != std::string::npos);
  th.host()->error_free(e);
}
