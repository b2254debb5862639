// The harness of gpu_pair.hpp and the test program's main(): skips (exit 77) when the device
// backend is not built or finds no device, before doctest runs anything.
#define DOCTEST_CONFIG_IMPLEMENT
#include "gpu_pair.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

namespace gputest {

namespace {

// The cpu reference: no start-up sgemm timing (it only feeds MFU).
Side& cpu_side() {
  static Side* s = [] {
    auto* p = new Side;  // lives to process exit, like the plugins' libraries
    p->host.load_backend("cpu", {{"measure_gemm", "false"}});
    p->be = loom::Backend(p->host.host());
    return p;
  }();
  return *s;
}

std::map<std::string, std::string> device_config(bool tf32) {
  std::map<std::string, std::string> c{{"tf32", tf32 ? "true" : "false"}};
  if (device_name() == "cpu") c["measure_gemm"] = "false";
  // backend/cuda lends the bias gradient's epilogue only when asked: the epilogue cases test
  // every kind it implements
  if (device_name() == "cuda") c["gemm_bias_grad_epilogue"] = "true";
  return c;
}

Side* open_device(bool tf32) {
  auto* p = new Side;
  p->host.load_backend(device_name(), device_config(tf32));
  p->be = loom::Backend(p->host.host());
  return p;
}

Side*& device_slot() {
  static Side* s = nullptr;
  return s;
}

}  // namespace

std::string device_name() {
  const char* e = std::getenv("LOOM_GPU_TEST_DEVICE");
  return e && *e ? e : "cuda";
}

bool model_shapes() { return device_name() != "cpu"; }

std::string try_open_device() {
  try {
    if (!device_slot()) device_slot() = open_device(false);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

const loom::Backend& cpu() { return cpu_side().be; }
const loom::Backend& dev() {
  if (!device_slot()) device_slot() = open_device(false);
  return device_slot()->be;
}
const loom::Backend& dev_tf32() {
  static Side* s = open_device(true);
  return s->be;
}
const loom::Backend& side(int s) { return s == 0 ? cpu() : dev(); }

std::string dtype_name(DLDataType d) {
  if (loom_dtype_eq(d, loom_f32())) return "f32";
  if (loom_dtype_eq(d, loom_bf16())) return "bf16";
  if (loom_dtype_eq(d, loom_f16())) return "f16";
  if (loom_dtype_eq(d, loom_i32())) return "i32";
  return "dtype(" + std::to_string(d.code) + "," + std::to_string(d.bits) + ")";
}

double round_to(DLDataType dt, double x) {
  const float f = static_cast<float>(x);
  if (loom_dtype_eq(dt, loom_bf16())) return from_bf16_bits(to_bf16_bits(f));
  if (loom_dtype_eq(dt, loom_f16())) return from_f16_bits(to_f16_bits(f));
  if (loom_dtype_eq(dt, loom_i32())) return x;
  return f;
}
Vec round_to(DLDataType dt, Vec v) {
  for (double& x : v) x = round_to(dt, x);
  return v;
}

void upload(loom::Tensor& t, const Vec& vals) {
  const DLDataType dt = t.get()->dtype;
  REQUIRE_MESSAGE(static_cast<size_t>(t.numel()) == vals.size(),
                  "upload: " << vals.size() << " values for " << t.numel() << " elements");
  if (loom_dtype_eq(dt, loom_f32())) {
    t.upload(std::vector<float>(vals.begin(), vals.end()));
  } else if (loom_dtype_eq(dt, loom_i32())) {
    t.upload(std::vector<int32_t>(vals.begin(), vals.end()));
  } else {
    const bool b = loom_dtype_eq(dt, loom_bf16());
    std::vector<uint16_t> h(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) {
      const float f = static_cast<float>(vals[i]);
      h[i] = b ? to_bf16_bits(f) : to_f16_bits(f);
    }
    t.upload(h);
  }
}

Vec download(const loom::Tensor& t) {
  const DLDataType dt = t.get()->dtype;
  if (loom_dtype_eq(dt, loom_f32())) {
    auto v = t.download<float>();
    return Vec(v.begin(), v.end());
  }
  if (loom_dtype_eq(dt, loom_i32())) {
    auto v = t.download<int32_t>();
    return Vec(v.begin(), v.end());
  }
  const bool b = loom_dtype_eq(dt, loom_bf16());
  auto h = t.download<uint16_t>();
  Vec out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = b ? from_bf16_bits(h[i]) : from_f16_bits(h[i]);
  return out;
}

void poison(loom::Tensor& t) {
  const DLDataType dt = t.get()->dtype;
  const size_t n = static_cast<size_t>(t.numel());
  if (loom_dtype_eq(dt, loom_f32()))
    t.upload(std::vector<uint32_t>(n, 0x7fc00000u));
  else if (loom_dtype_eq(dt, loom_i32()))
    t.upload(std::vector<int32_t>(n, 0x7fffffff));
  else if (loom_dtype_eq(dt, loom_bf16()))
    t.upload(std::vector<uint16_t>(n, 0x7fc0u));
  else
    t.upload(std::vector<uint16_t>(n, 0x7e00u));
}

Vec random_vec(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_ids(size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

Pair::Pair(DLDataType dt, const Shape& shape, const Vec& vals, const loom::Backend* device)
    : dt_(dt),
      c_(cpu(), loom_dtype_eq(dt, loom_i32()) ? loom_i32() : loom_f32(), shape),
      g_(device ? *device : dev(), dt, shape) {
  set(vals);
}

Pair::Pair(DLDataType dt, const Shape& shape, const loom::Backend* device)
    : dt_(dt),
      c_(cpu(), loom_dtype_eq(dt, loom_i32()) ? loom_i32() : loom_f32(), shape),
      g_(device ? *device : dev(), dt, shape) {
  poison_both();
}

Pair Pair::ids(const Shape& shape, const std::vector<int32_t>& vals, const loom::Backend* device) {
  return Pair(loom_i32(), shape, Vec(vals.begin(), vals.end()), device);
}

void Pair::set(const Vec& vals) {
  Vec r = round_to(dt_, vals);
  upload(c_, r);
  upload(g_, r);
}

void Pair::poison_both() {
  poison(c_);
  poison(g_);
}

void run_both(const std::function<void(const loom::Backend&, int)>& fn,
              const loom::Backend* device) {
  fn(cpu(), 0);
  const loom::Backend& d = device ? *device : dev();
  fn(d, 1);
  d.api()->synchronize(d.self());
}

void expect_close(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " vs " << want.size());
  double scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]))
      FAIL(what << ": the cpu reference holds a NaN at element " << i << " (unwritten?)");
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(want[i]));
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      if (got[i] == want[i]) continue;  // the same infinity
      FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected " << want[i]
                      << std::string(std::isnan(got[i]) ? " (NaN: never written?)" : ""));
      return;
    }
    double err = std::fabs(got[i] - want[i]);
    if (err > worst) worst = err, at = i;
  }
  const double rel = scale > 0 ? worst / scale : worst;
  CHECK_MESSAGE(rel <= tol, what << ": max error " << worst << " at element " << at << " ("
                                 << got[at] << " vs " << want[at] << "), " << rel
                                 << " of max |ref| " << scale << " > " << tol);
}

void expect_close(const Pair& t, double tol, const std::string& what) {
  auto& p = const_cast<Pair&>(t);
  expect_close(download(p.dev_side()), download(p.cpu_side()), tol,
               what + " [" + dtype_name(t.dtype()) + "]");
}

void expect_same(const Vec& a, const Vec& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i])) {
      FAIL_CHECK(what << ": not deterministic: element " << i << " is " << a[i] << " then "
                      << b[i]);
      return;
    }
}

}  // namespace gputest

// Skips (77) before any test when the device backend's plugin is missing or finds no device;
// a device backend that fails to load for another reason is a failure, not a skip.
int main(int argc, char** argv) {
  const std::string name = gputest::device_name();
  const std::string path = loomtest::plugin_path("backend", name);
  if (!std::filesystem::exists(path)) {
    std::printf("SKIPPED: backend/%s is not built (%s missing)\n", name.c_str(), path.c_str());
    return 77;
  }
  const std::string why = gputest::try_open_device();
  if (!why.empty()) {
    if (why.find("no CUDA device") != std::string::npos) {
      std::printf("SKIPPED: %s\n", why.c_str());
      return 77;
    }
    std::printf("FAILED: cannot create backend/%s: %s\n", name.c_str(), why.c_str());
    return 1;
  }
  std::printf("backend/cpu (reference) vs backend/%s\n", name.c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
