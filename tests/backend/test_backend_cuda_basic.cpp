// backend/cuda core, in two suites run as separate ctest entries:
//  - "no-device": on a machine without a usable CUDA device, create fails with a loom_error
//    that says so (no crash), the descriptor and schema load, and an op given a NULL backend
//    answers with an error. Skipped where a device exists.
//  - "gpu" (label gpu): memory (zero-filled alloc, host round trips, byte-count checks, the
//    caching allocator reaching a steady state), GEMM against a float64 host reference for
//    every transpose combination, batches, offsets, interleaved heads, k = 0 and f32 / tf32 /
//    bf16 / f16 inputs, and the elementwise ops against host references. Skipped without a
//    device.
// A skipped suite prints "SKIPPED: <reason>" and exits 77 (ctest: Skipped).
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "test_host.hpp"

namespace {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  (void)cudaGetLastError();
  return n;
}

void skip_gpu_suite_without_device() {
  if (device_count() > 0) return;
  std::printf("SKIPPED: backend/cuda GPU tests: no CUDA device on this machine\n");
  std::fflush(stdout);
  std::exit(77);
}

using loomtest::Outcome;
using loomtest::outcome;
#define OK(call)                                     \
  do {                                               \
    Outcome o_ = outcome(call);                      \
    REQUIRE_MESSAGE(o_.code == LOOM_OK, o_.message); \
  } while (0)

const loom_plugin_descriptor* descriptor() { return loomtest::load_descriptor("backend", "cuda"); }
const loom_backend_api& api() { return *static_cast<const loom_backend_api*>(descriptor()->api); }
const loom_ops& ops() { return *api().ops; }

// One backend instance of its own (several may live side by side: tf32 and not).
struct Instance {
  loomtest::TestHost host;
  loom_config cfg;
  loom_backend* be = nullptr;
  explicit Instance(const std::map<std::string, std::string>& values = {})
      : cfg(loomtest::TestHost::config(descriptor(), values)) {
    OK(api().create(host.host(), &cfg, &be));
  }
  ~Instance() { api().destroy(be); }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  loom_backend_info info() const {
    loom_backend_info i{};
    i.struct_size = sizeof(i);
    OK(api().get_info(be, &i));
    return i;
  }
};

// A device tensor owned RAII-style, with host upload/download of raw elements.
struct Dev {
  Instance* in;
  DLTensor* t = nullptr;
  Dev(Instance& inst, DLDataType dt, std::vector<int64_t> shape) : in(&inst) {
    OK(api().alloc_tensor(in->be, dt, static_cast<int>(shape.size()), shape.data(), &t));
  }
  ~Dev() { api().free_tensor(in->be, t); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  size_t bytes() const { return size_t(loom_tensor_numel(t)) * loom_dtype_bytes(t->dtype); }
  template <class T>
  void put(const std::vector<T>& v) {
    OK(api().from_host(in->be, t, v.data(), v.size() * sizeof(T)));
  }
  template <class T>
  std::vector<T> get() const {
    std::vector<T> v(bytes() / sizeof(T));
    OK(api().to_host(in->be, t, v.data(), v.size() * sizeof(T)));
    return v;
  }
};

// ---- host-side dtype conversions (round to nearest even) -----------------------------------
uint16_t to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }
uint16_t to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
float from_f16(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

std::vector<float> randoms(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ||got - want|| / ||want||, NaN anywhere fails.
double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// ---- GEMM ------------------------------------------------------------------------------------
bool is_bf16_or_f16(DLDataType d) {
  return loom_dtype_eq(d, loom_bf16()) || loom_dtype_eq(d, loom_f16());
}

enum class Prec { f32, tf32, bf16, bf16_f32c, f16, f16_f32c };
const char* prec_name(Prec p) {
  const char* n[] = {"f32", "tf32", "bf16", "bf16 x bf16 -> f32", "f16", "f16 x f16 -> f32"};
  return n[static_cast<int>(p)];
}

struct GemmCase {
  int ta, tb;
  int64_t m, n, k, batch = 1;
  int64_t pad = 0;           // extra row pitch beyond the stored columns
  int64_t off = 0;           // offset of every operand's first matrix
  bool interleaved = false;  // batch matrices side by side in each row (heads of (T, H*D))
  double alpha = 1, beta = 0;
};

// Stores each operand (rows x cols per matrix) in a buffer, runs the op, compares with float64.
void run_gemm_case(Instance& in, const GemmCase& g, Prec p, double tol, uint32_t seed) {
  CAPTURE(prec_name(p));
  CAPTURE(g.ta);
  CAPTURE(g.tb);
  CAPTURE(g.m);
  CAPTURE(g.n);
  CAPTURE(g.k);
  CAPTURE(g.batch);
  const bool half_in = p != Prec::f32 && p != Prec::tf32;
  const bool half_c = p == Prec::bf16 || p == Prec::f16;
  const bool is_bf = p == Prec::bf16 || p == Prec::bf16_f32c;
  const DLDataType in_t = !half_in ? loom_f32() : is_bf ? loom_bf16() : loom_f16();
  const DLDataType c_t = half_c ? in_t : loom_f32();

  struct Op {
    int64_t rows, cols, ld, stride, size;
  };
  auto layout = [&](int64_t rows, int64_t cols) {
    Op o{rows, cols, 0, 0, 0};
    if (g.interleaved) {
      o.ld = std::max<int64_t>(cols * g.batch, 1) + g.pad;
      o.stride = cols;
      o.size = g.off + rows * o.ld;
    } else {
      o.ld = std::max<int64_t>(cols, 1) + g.pad;
      o.stride = rows * o.ld + 3;  // a gap between matrices
      o.size = g.off + g.batch * o.stride;
    }
    return o;
  };
  const Op A = layout(g.ta ? g.k : g.m, g.ta ? g.m : g.k);
  const Op B = layout(g.tb ? g.n : g.k, g.tb ? g.k : g.n);
  const Op C = layout(g.m, g.n);

  // Values as the device will hold them (rounded to the input dtype), kept in double.
  auto make = [&](const Op& o, DLDataType dt, uint32_t s, Dev& dev) {
    std::vector<float> f = randoms(size_t(o.size), s);
    std::vector<double> d(f.size());
    if (is_bf16_or_f16(dt)) {
      std::vector<uint16_t> h(f.size());
      for (size_t i = 0; i < f.size(); ++i) {
        h[i] = loom_dtype_eq(dt, loom_bf16()) ? to_bf16(f[i]) : to_f16(f[i]);
        d[i] = loom_dtype_eq(dt, loom_bf16()) ? from_bf16(h[i]) : from_f16(h[i]);
      }
      dev.put(h);
    } else {
      for (size_t i = 0; i < f.size(); ++i) d[i] = f[i];
      dev.put(f);
    }
    return d;
  };
  Dev da(in, in_t, {A.size}), db(in, in_t, {B.size}), dc(in, c_t, {C.size});
  std::vector<double> a = make(A, in_t, seed, da), b = make(B, in_t, seed + 1, db),
                      c0 = make(C, c_t, seed + 2, dc);

  loom_gemm_args args{};
  args.struct_size = sizeof(args);
  args.trans_a = g.ta, args.trans_b = g.tb;
  args.m = g.m, args.n = g.n, args.k = g.k;
  args.alpha = g.alpha, args.beta = g.beta;
  args.a = da.t, args.lda = A.ld, args.stride_a = A.stride, args.offset_a = g.off;
  args.b = db.t, args.ldb = B.ld, args.stride_b = B.stride, args.offset_b = g.off;
  args.c = dc.t, args.ldc = C.ld, args.stride_c = C.stride, args.offset_c = g.off;
  args.batch = g.batch;
  OK(ops().gemm(in.be, &args));

  // float64 reference; elements outside the output matrices must be untouched.
  std::vector<double> want = c0;
  for (int64_t bi = 0; bi < g.batch; ++bi)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const int64_t ia = g.ta ? l * A.ld + i : i * A.ld + l;
          const int64_t ib = g.tb ? j * B.ld + l : l * B.ld + j;
          s += a[size_t(g.off + bi * A.stride + ia)] * b[size_t(g.off + bi * B.stride + ib)];
        }
        double& w = want[size_t(g.off + bi * C.stride + i * C.ld + j)];
        w = g.alpha * s + (g.beta == 0 ? 0 : g.beta * w);
      }
  std::vector<double> got(want.size());
  if (half_c) {
    std::vector<uint16_t> h = dc.get<uint16_t>();
    for (size_t i = 0; i < h.size(); ++i)
      got[i] = loom_dtype_eq(c_t, loom_bf16()) ? from_bf16(h[i]) : from_f16(h[i]);
  } else {
    std::vector<float> f = dc.get<float>();
    for (size_t i = 0; i < f.size(); ++i) got[i] = f[i];
  }
  const double err = rel_err(got, want);
  CHECK_MESSAGE(err < tol, "relative error " << err << " >= " << tol);
}

}  // namespace

// ===============================================================================================
TEST_SUITE("no-device") {
  TEST_CASE("backend/cuda: descriptor, schema, and create without a device fails cleanly") {
    const int count = device_count();
    if (count > 0) {
      std::printf("SKIPPED: backend/cuda no-device test: this machine has %d CUDA device(s)\n",
                  count);
      std::exit(77);
    }
    const loom_plugin_descriptor* d = descriptor();
    CHECK(std::string(d->name) == "cuda");
    CHECK(d->kind == LOOM_KIND_BACKEND);
    std::string defaults;  // "name=default " in the descriptor's order
    for (size_t i = 0; i < d->num_params; ++i)
      defaults += std::string(d->params[i].name) + "=" + d->params[i].default_value + " ";
    CHECK(defaults ==
          "device=-1 tf32=false gemm_epilogues=true gemm_bias_grad_epilogue=false "
          "gemm_gelu_epilogue=true deterministic=false gemm_autotune=true workspace_mb=32 "
          "norm_residual=true ");
    CHECK(api().struct_size >= LOOM_BACKEND_API_SIZE_V2);
    CHECK(ops().struct_size == LOOM_OPS_SIZE_V2_22);
    // Every slot is filled: the table is complete even where it cannot run.
    const auto* slots =
        reinterpret_cast<void* const*>(reinterpret_cast<const char*>(api().ops) + sizeof(size_t));
    for (size_t i = 0; i < (LOOM_OPS_SIZE_V2_22 - sizeof(size_t)) / sizeof(void*); ++i)
      CHECK_MESSAGE(slots[i] != nullptr, "ops slot " << i << " is NULL");

    loomtest::TestHost host;
    loom_config cfg = loomtest::TestHost::config(d);
    loom_backend* be = reinterpret_cast<loom_backend*>(&cfg);  // must be overwritten
    Outcome o = outcome(api().create(host.host(), &cfg, &be));
    MESSAGE("create said: " << o.message);
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    // The reason names a missing driver apart from a driver that sees no device; which one
    // applies is asked of the dynamic loader here, independently of the plugin.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    const std::string why =
        driver == nullptr ? "no CUDA driver: libcuda.so.1 not found" : "cudaGetDeviceCount: ";
    if (driver != nullptr) dlclose(driver);
    CHECK(o.message.find("backend/cuda: no CUDA device (" + why) == 0);
    CHECK(be == nullptr);
    api().destroy(nullptr);  // accepts NULL

    // An op on a NULL backend answers with an error (made by the last host seen).
    loom_gemm_args args{};
    args.struct_size = sizeof(args);
    Outcome g = outcome(ops().gemm(nullptr, &args));
    CHECK(g.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(g.message == "backend/cuda: gemm: backend is NULL");
    Outcome f = outcome(ops().fill(nullptr, nullptr, 0));
    CHECK(f.message == "backend/cuda: fill: backend is NULL");
  }
}

// ===============================================================================================
TEST_SUITE("gpu") {
  TEST_CASE("backend/cuda: info, zero-filled tensors, host round trips and their checks") {
    skip_gpu_suite_without_device();
    Instance in;
    loom_backend_info info = in.info();
    MESSAGE("device: " << info.device_name << ", peak " << info.peak_gflops << " GFLOP/s");
    CHECK(std::string(info.device_name).find("cuda:") == 0);
    CHECK(info.device.device_type == kDLCUDA);
    std::string name = info.device_name;
    if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
      CHECK(info.peak_gflops == 989000.0);

    Dev f(in, loom_f32(), {3, 5});
    CHECK(f.t->device.device_type == kDLCUDA);
    CHECK(f.t->ndim == 2);
    CHECK(f.get<float>() == std::vector<float>(15, 0.0f));  // zero-filled
    std::vector<float> v = randoms(15, 1);
    f.put(v);
    CHECK(f.get<float>() == v);
    Dev h(in, loom_bf16(), {7});
    std::vector<uint16_t> hv = {1, 2, 3, 0x7fc0, 0xffff, 0, 42};
    h.put(hv);
    CHECK(h.get<uint16_t>() == hv);
    Dev ids(in, loom_i32(), {4});
    ids.put(std::vector<int32_t>{-1, 0, 7, 1 << 30});
    CHECK(ids.get<int32_t>() == std::vector<int32_t>{-1, 0, 7, 1 << 30});
    Dev empty(in, loom_f32(), {0, 4});
    CHECK(empty.get<float>().empty());

    std::vector<float> wrong(14);
    Outcome o = outcome(api().from_host(in.be, f.t, wrong.data(), wrong.size() * 4));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("got 56 bytes, dst (3,5) f32 holds 60") != std::string::npos);
    o = outcome(api().to_host(in.be, f.t, wrong.data(), wrong.size() * 4));
    CHECK(o.message.find("asked for 56 bytes") != std::string::npos);
    OK(api().synchronize(in.be));
  }

  TEST_CASE("backend/cuda: the caching allocator reaches a steady state") {
    skip_gpu_suite_without_device();
    Instance in;
    const std::vector<std::vector<int64_t>> shapes = {{1},       {1000},    {257, 3},    {1 << 20},
                                                      {3 << 19}, {64, 768}, {5, 1 << 18}};
    auto round = [&] {
      std::vector<DLTensor*> ts;
      for (auto& s : shapes) {
        DLTensor* t = nullptr;
        OK(api().alloc_tensor(in.be, loom_f32(), int(s.size()), s.data(), &t));
        ts.push_back(t);
      }
      for (DLTensor* t : ts) api().free_tensor(in.be, t);
    };
    round();
    OK(api().synchronize(in.be));
    const loom_backend_info first = in.info();
    CHECK(first.mem_in_use == 0);
    CHECK(first.mem_peak >= size_t(8) << 20);
    size_t free0 = 0, total = 0;
    REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    for (int it = 0; it < 50; ++it) round();
    OK(api().synchronize(in.be));
    size_t free1 = 0;
    REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    const loom_backend_info later = in.info();
    CHECK(later.mem_in_use == 0);
    CHECK(later.mem_peak == first.mem_peak);  // every block came from the cache
    CHECK(free1 == free0);                    // and no cudaMalloc happened meanwhile
    // A reused block is zero-filled again.
    Dev t(in, loom_f32(), {1000});
    t.put(randoms(1000, 3));
    api().free_tensor(in.be, t.t);
    OK(api().alloc_tensor(in.be, loom_f32(), 1, std::vector<int64_t>{1000}.data(), &t.t));
    CHECK(t.get<float>() == std::vector<float>(1000, 0.0f));
  }

  TEST_CASE("backend/cuda: gemm matches a float64 reference") {
    skip_gpu_suite_without_device();
    Instance fp32;
    Instance tf32(std::map<std::string, std::string>{{"tf32", "true"}});
    uint32_t seed = 100;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        for (GemmCase g : {GemmCase{ta, tb, 37, 29, 41}, GemmCase{ta, tb, 128, 96, 64},
                           GemmCase{ta, tb, 1, 7, 300}}) {
          run_gemm_case(fp32, g, Prec::f32, 1e-5, seed++);
          run_gemm_case(tf32, g, Prec::tf32, 1e-3, seed++);
          run_gemm_case(fp32, g, Prec::bf16, 1e-2, seed++);
          run_gemm_case(fp32, g, Prec::bf16_f32c, 1e-5, seed++);
          run_gemm_case(fp32, g, Prec::f16, 2e-3, seed++);
          run_gemm_case(fp32, g, Prec::f16_f32c, 1e-5, seed++);
        }
        // alpha/beta, padded pitches, offsets, a strided batch, interleaved heads.
        GemmCase scaled{ta, tb, 33, 17, 24, 1, 5, 7, false, 0.75, 0.5};
        run_gemm_case(fp32, scaled, Prec::f32, 1e-5, seed++);
        run_gemm_case(fp32, scaled, Prec::bf16_f32c, 1e-5, seed++);
        GemmCase batched{ta, tb, 20, 24, 16, 3, 2, 11, false, 1.0, 1.0};
        run_gemm_case(fp32, batched, Prec::f32, 1e-5, seed++);
        run_gemm_case(fp32, batched, Prec::bf16, 1e-2, seed++);
        GemmCase heads{ta, tb, 32, 32, 64, 4, 0, 0, true, 0.125, 0};
        run_gemm_case(fp32, heads, Prec::f32, 1e-5, seed++);
        run_gemm_case(fp32, heads, Prec::bf16, 1e-2, seed++);
      }
    // k = 0: C = beta * C.
    run_gemm_case(fp32, GemmCase{0, 0, 5, 6, 0, 2, 0, 0, false, 1.0, 0.5}, Prec::f32, 1e-12,
                  seed++);
    run_gemm_case(fp32, GemmCase{0, 0, 5, 6, 0, 1, 0, 0, false, 1.0, 0.0}, Prec::bf16, 1e-12,
                  seed++);
    // The second call of a shape reuses the cached plan and still computes.
    run_gemm_case(fp32, GemmCase{0, 1, 37, 29, 41}, Prec::f32, 1e-5, seed++);
  }

  TEST_CASE("backend/cuda: gemm with beta = 0 does not read C, and refuses bad arguments") {
    skip_gpu_suite_without_device();
    Instance in;
    Dev a(in, loom_f32(), {4, 3}), b(in, loom_f32(), {3, 2}), c(in, loom_f32(), {4, 2});
    a.put(std::vector<float>(12, 1.0f));
    b.put(std::vector<float>(6, 2.0f));
    c.put(std::vector<float>(8, NAN));
    loom_gemm_args g{};
    g.struct_size = sizeof(g);
    g.m = 4, g.n = 2, g.k = 3, g.alpha = 1, g.beta = 0, g.batch = 1;
    g.a = a.t, g.lda = 3, g.b = b.t, g.ldb = 2, g.c = c.t, g.ldc = 2;
    OK(ops().gemm(in.be, &g));
    CHECK(c.get<float>() == std::vector<float>(8, 6.0f));

    Dev h(in, loom_bf16(), {3, 2});
    loom_gemm_args bad = g;
    bad.b = h.t;
    Outcome o = outcome(ops().gemm(in.be, &bad));
    CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(o.message.find("a, b, c are f32, bf16, f32") != std::string::npos);
    bad = g;
    bad.k = 4;
    o = outcome(ops().gemm(in.be, &bad));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("lda = 3 is less than the 4 columns") != std::string::npos);
    bad = g;
    bad.batch = 2, bad.stride_c = 1;
    o = outcome(ops().gemm(in.be, &bad));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  }

  TEST_CASE("backend/cuda: elementwise ops match host references") {
    skip_gpu_suite_without_device();
    Instance in;
    const int64_t n = 100003;  // not a multiple of any block size
    std::vector<float> x = randoms(size_t(n), 7), y = randoms(size_t(n), 8);

    // fill
    Dev t(in, loom_f32(), {n});
    OK(ops().fill(in.be, t.t, 0.1));
    CHECK(t.get<float>() == std::vector<float>(size_t(n), 0.1f));
    Dev tb(in, loom_bf16(), {n});
    OK(ops().fill(in.be, tb.t, -2.5));
    CHECK(tb.get<uint16_t>() == std::vector<uint16_t>(size_t(n), to_bf16(-2.5f)));
    Dev ti(in, loom_i32(), {5});
    OK(ops().fill(in.be, ti.t, -3));
    CHECK(ti.get<int32_t>() == std::vector<int32_t>(5, -3));
    CHECK(outcome(ops().fill(in.be, ti.t, 0.5)).message.find("is not an i32") != std::string::npos);

    // copy and casts (round to nearest even, as the host conversions)
    Dev xs(in, loom_f32(), {n}), ys(in, loom_f32(), {n});
    xs.put(x);
    ys.put(y);
    OK(ops().copy(in.be, t.t, xs.t));
    CHECK(t.get<float>() == x);
    OK(ops().copy(in.be, tb.t, xs.t));
    std::vector<uint16_t> hb = tb.get<uint16_t>();
    Dev th(in, loom_f16(), {n});
    OK(ops().copy(in.be, th.t, xs.t));
    std::vector<uint16_t> hh = th.get<uint16_t>();
    bool casts_ok = true;
    for (int64_t i = 0; i < n; ++i)
      casts_ok &= hb[size_t(i)] == to_bf16(x[size_t(i)]) && hh[size_t(i)] == to_f16(x[size_t(i)]);
    CHECK(casts_ok);
    OK(ops().copy(in.be, t.t, tb.t));
    std::vector<float> back = t.get<float>();
    bool up_ok = true;
    for (int64_t i = 0; i < n; ++i) up_ok &= back[size_t(i)] == from_bf16(hb[size_t(i)]);
    CHECK(up_ok);
    Outcome o = outcome(ops().copy(in.be, tb.t, th.t));
    CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(o.message.find("no cast from f16 to bf16") != std::string::npos);

    // add (out aliasing a), axpby (beta = 0 ignores NaN in y)
    OK(ops().copy(in.be, t.t, xs.t));
    OK(ops().add(in.be, t.t, t.t, ys.t));
    std::vector<float> sum = t.get<float>();
    bool add_ok = true;
    for (int64_t i = 0; i < n; ++i) add_ok &= sum[size_t(i)] == x[size_t(i)] + y[size_t(i)];
    CHECK(add_ok);
    OK(ops().copy(in.be, t.t, ys.t));
    OK(ops().axpby(in.be, t.t, 0.5, xs.t, -2.0));
    std::vector<double> got, want;
    for (float v : t.get<float>()) got.push_back(v);
    for (int64_t i = 0; i < n; ++i) want.push_back(0.5 * x[size_t(i)] - 2.0 * y[size_t(i)]);
    CHECK(rel_err(got, want) < 1e-6);
    OK(ops().fill(in.be, t.t, NAN));
    OK(ops().axpby(in.be, t.t, 3.0, xs.t, 0.0));
    got.clear(), want.clear();
    for (float v : t.get<float>()) got.push_back(v);
    for (int64_t i = 0; i < n; ++i) want.push_back(3.0 * x[size_t(i)]);
    CHECK(rel_err(got, want) < 1e-6);

    // mixed precision: f32 y += bf16 x; bf16 out = bf16 a + f32 b; bf16 with f16 refused
    OK(ops().copy(in.be, t.t, ys.t));
    OK(ops().axpby(in.be, t.t, 1.0, tb.t, 1.0));
    std::vector<float> mix = t.get<float>();
    bool mix_ok = true;
    for (int64_t i = 0; i < n; ++i)
      mix_ok &= mix[size_t(i)] == from_bf16(hb[size_t(i)]) + y[size_t(i)];
    CHECK(mix_ok);
    Dev ob(in, loom_bf16(), {n});
    OK(ops().add(in.be, ob.t, tb.t, ys.t));
    std::vector<uint16_t> ab = ob.get<uint16_t>();
    mix_ok = true;
    for (int64_t i = 0; i < n; ++i)
      mix_ok &= ab[size_t(i)] == to_bf16(from_bf16(hb[size_t(i)]) + y[size_t(i)]);
    CHECK(mix_ok);
    o = outcome(ops().add(in.be, ob.t, tb.t, th.t));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("b is f16 but out is bf16") != std::string::npos);

    // sum_squares in double: three tensors (f32, bf16, empty) in one call
    double ref = 0, refb = 0;
    for (float v : x) ref += double(v) * double(v);
    for (uint16_t h : hb) refb += double(from_bf16(h)) * double(from_bf16(h));
    Dev e(in, loom_f32(), {0});
    const DLTensor* xs3[3] = {xs.t, tb.t, e.t};
    double ss3[3] = {-1, -1, -1};
    const loom_sum_squares_args ssq{LOOM_SUM_SQUARES_ARGS_SIZE_V2, xs3, 3, ss3, nullptr};
    OK(ops().sum_squares(in.be, &ssq));
    CHECK(std::fabs(ss3[0] - ref) <= 1e-12 * ref);
    CHECK(std::fabs(ss3[1] - refb) <= 1e-12 * refb);
    CHECK(ss3[2] == 0);
  }

  TEST_CASE("backend/cuda: bias_add and bias_backward, f32 and mixed precision") {
    skip_gpu_suite_without_device();
    Instance in;
    auto bias_add = [&](DLTensor* out, const DLTensor* bias) {
      const loom_bias_add_args a{LOOM_BIAS_ADD_ARGS_SIZE_V2, out, bias, nullptr};
      return ops().bias_add(in.be, &a);
    };
    auto bias_backward = [&](DLTensor* dbias, const DLTensor* dout) {
      const loom_bias_bwd_args a{LOOM_BIAS_BWD_ARGS_SIZE_V2, dbias, dout, nullptr};
      return ops().bias_backward(in.be, &a);
    };
    for (int64_t N : {1, 7, 4099})
      for (int64_t C : {1, 33, 768}) {
        CAPTURE(N);
        CAPTURE(C);
        std::vector<float> out = randoms(size_t(N * C), 11), bias = randoms(size_t(C), 12),
                           db0 = randoms(size_t(C), 13);
        // f32: out += bias; dbias += colsum(out)
        Dev o(in, loom_f32(), {N, C}), bb(in, loom_f32(), {C}), db(in, loom_f32(), {C});
        o.put(out), bb.put(bias), db.put(db0);
        OK(bias_add(o.t, bb.t));
        std::vector<float> got = o.get<float>();
        bool ok = true;
        for (int64_t i = 0; i < N * C; ++i)
          ok &= got[size_t(i)] == out[size_t(i)] + bias[size_t(i % C)];
        CHECK(ok);
        OK(bias_backward(db.t, o.t));
        std::vector<double> g, w;
        for (float v : db.get<float>()) g.push_back(v);
        for (int64_t c = 0; c < C; ++c) {
          double s = db0[size_t(c)];
          for (int64_t r = 0; r < N; ++r) s += got[size_t(r * C + c)];
          w.push_back(s);
        }
        CHECK(rel_err(g, w) < 1e-5);

        // bf16 activations, f32 bias and f32 dbias (mixed precision)
        std::vector<uint16_t> ob(out.size());
        for (size_t i = 0; i < out.size(); ++i) ob[i] = to_bf16(out[i]);
        Dev obd(in, loom_bf16(), {N, C}), dbf(in, loom_f32(), {C});
        obd.put(ob), dbf.put(db0);
        OK(bias_add(obd.t, bb.t));
        std::vector<uint16_t> gb = obd.get<uint16_t>();
        ok = true;
        for (int64_t i = 0; i < N * C; ++i)
          ok &= gb[size_t(i)] == to_bf16(from_bf16(ob[size_t(i)]) + bias[size_t(i % C)]);
        CHECK(ok);
        OK(bias_backward(dbf.t, obd.t));
        g.clear(), w.clear();
        for (float v : dbf.get<float>()) g.push_back(v);
        for (int64_t c = 0; c < C; ++c) {
          double s = db0[size_t(c)];
          for (int64_t r = 0; r < N; ++r) s += from_bf16(gb[size_t(r * C + c)]);
          w.push_back(s);
        }
        CHECK(rel_err(g, w) < 1e-5);
      }
    Dev o(in, loom_f32(), {4, 8}), wrong(in, loom_f32(), {7});
    Outcome r = outcome(bias_add(o.t, wrong.t));
    CHECK(r.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(r.message.find("bias") != std::string::npos);
  }
}
